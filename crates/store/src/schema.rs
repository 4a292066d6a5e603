//! The store's schema and its migrations.
//!
//! The schema version lives in SQLite's `PRAGMA user_version`. [`MIGRATIONS`] is an ordered
//! list: step `i` takes a file from version `i` to version `i + 1`, in one transaction that
//! also sets the new version, so a crash leaves the file at the old or the new version,
//! never in between. A file newer than [`SCHEMA_VERSION`] is refused, never downgraded.

use rusqlite::{Connection, TransactionBehavior};

/// Migration steps, oldest first. Never edit a released step; append a new one.
pub const MIGRATIONS: &[&str] = &[
    // v1: jobs, their GPUs and meters, and a downsampled per-GPU time series.
    "
    CREATE TABLE jobs (
        id       INTEGER PRIMARY KEY,
        job_id   INTEGER NOT NULL,
        step     TEXT    NOT NULL DEFAULT '',
        uid      INTEGER NOT NULL,
        user     TEXT,
        name     TEXT,
        node     TEXT    NOT NULL,
        begin_ns INTEGER NOT NULL,
        end_ns   INTEGER,
        state    TEXT    NOT NULL CHECK (state IN ('RUNNING', 'COMPLETED')),
        hints    TEXT    NOT NULL DEFAULT '{}'
    );
    -- At most one RUNNING record per job or step; Slurm job ids restart, so completed
    -- records with the same key may accumulate.
    CREATE UNIQUE INDEX jobs_one_running ON jobs (job_id, step) WHERE state = 'RUNNING';
    CREATE INDEX jobs_by_job ON jobs (job_id, step);
    CREATE INDEX jobs_by_uid_begin ON jobs (uid, begin_ns);
    CREATE INDEX jobs_by_begin ON jobs (begin_ns);

    CREATE TABLE job_gpus (
        job       INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
        gpu_index INTEGER NOT NULL,
        uuid      TEXT    NOT NULL,
        name      TEXT    NOT NULL,
        energy_mj REAL    NOT NULL,
        meter     TEXT    NOT NULL,
        PRIMARY KEY (job, gpu_index)
    ) WITHOUT ROWID;

    CREATE TABLE samples (
        job          INTEGER NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
        gpu_index    INTEGER NOT NULL,
        t_ns         INTEGER NOT NULL,
        power_mw     INTEGER,
        sm_clock_mhz INTEGER,
        util_pct     INTEGER,
        energy_mj    REAL    NOT NULL,
        PRIMARY KEY (job, gpu_index, t_ns)
    ) WITHOUT ROWID;
    ",
    // v2: the restore journal: each GPU whose settings wattson changed, for which job, to what.
    // Written and committed before the change; removed after the GPU is back at its defaults.
    "
    CREATE TABLE gpu_changes (
        gpu_index  INTEGER PRIMARY KEY,
        uuid       TEXT    NOT NULL,
        job_id     INTEGER NOT NULL,
        step       TEXT    NOT NULL,
        setting    TEXT    NOT NULL,
        applied_ns INTEGER NOT NULL
    );
    ",
    // v3: what the DVFS models did for each job (JSON, NULL when they did not choose), and
    // the measurements each workload's model is fitted from, by GPU type, tag and how work
    // was counted (the job's own units, or SM activity: they do not mix).
    "
    ALTER TABLE jobs ADD COLUMN dvfs TEXT;
    CREATE TABLE models (
        gpu_type   TEXT    NOT NULL,
        tag        TEXT    NOT NULL,
        progress   TEXT    NOT NULL CHECK (progress IN ('file', 'sm-activity')),
        samples    TEXT    NOT NULL,
        settings   TEXT    NOT NULL,
        updated_ns INTEGER NOT NULL,
        PRIMARY KEY (gpu_type, tag, progress)
    ) WITHOUT ROWID;
    ",
    // v4: models have an owner (the uid whose runs measured them), so one user's runs never
    // decide another's jobs. Earlier measurements have no known owner and are dropped: each
    // workload is measured again by its owner's next run.
    "
    DROP TABLE models;
    CREATE TABLE models (
        owner      INTEGER NOT NULL,
        gpu_type   TEXT    NOT NULL,
        tag        TEXT    NOT NULL,
        progress   TEXT    NOT NULL CHECK (progress IN ('file', 'sm-activity')),
        samples    TEXT    NOT NULL,
        settings   TEXT    NOT NULL,
        updated_ns INTEGER NOT NULL,
        PRIMARY KEY (owner, gpu_type, tag, progress)
    ) WITHOUT ROWID;
    ",
    // v5: the policy the site decided for each job at its start (what ran), beside the hints
    // (what was asked). NULL in earlier records.
    "
    ALTER TABLE jobs ADD COLUMN policy TEXT;
    ",
    // v6: a model's owner is a user or, where the site shares models within accounts, a Slurm
    // account: written `uid:N` or `account:NAME`. Earlier owners were uids.
    "
    CREATE TABLE models_v6 (
        owner      TEXT    NOT NULL,
        gpu_type   TEXT    NOT NULL,
        tag        TEXT    NOT NULL,
        progress   TEXT    NOT NULL CHECK (progress IN ('file', 'sm-activity')),
        samples    TEXT    NOT NULL,
        settings   TEXT    NOT NULL,
        updated_ns INTEGER NOT NULL,
        PRIMARY KEY (owner, gpu_type, tag, progress)
    ) WITHOUT ROWID;
    INSERT INTO models_v6 SELECT 'uid:' || owner, gpu_type, tag, progress, samples, settings, updated_ns
        FROM models;
    DROP TABLE models;
    ALTER TABLE models_v6 RENAME TO models;
    ",
    // v7: a workload is measured on one DVFS knob (power limits or SM clocks): the knob joins
    // the key, so the two never mix. Earlier measurements were power limits.
    "
    CREATE TABLE models_v7 (
        owner      TEXT    NOT NULL,
        gpu_type   TEXT    NOT NULL,
        tag        TEXT    NOT NULL,
        progress   TEXT    NOT NULL CHECK (progress IN ('file', 'sm-activity')),
        knob       TEXT    NOT NULL CHECK (knob IN ('power-limit', 'sm-clock')),
        samples    TEXT    NOT NULL,
        settings   TEXT    NOT NULL,
        updated_ns INTEGER NOT NULL,
        PRIMARY KEY (owner, gpu_type, tag, progress, knob)
    ) WITHOUT ROWID;
    INSERT INTO models_v7
        SELECT owner, gpu_type, tag, progress, 'power-limit', samples, settings, updated_ns FROM models;
    DROP TABLE models;
    ALTER TABLE models_v7 RENAME TO models;
    ",
    // v8: records that could not be read (their JSON damaged) are moved out of `jobs`, kept
    // as they were found (the row and its GPUs' rows as JSON text), with why and when.
    "
    CREATE TABLE quarantine (
        job_id         INTEGER NOT NULL,
        step           TEXT    NOT NULL,
        uid            INTEGER,
        begin_ns       INTEGER,
        quarantined_ns INTEGER NOT NULL,
        reason         TEXT    NOT NULL,
        record         TEXT    NOT NULL
    );
    ",
    // v9: each job's share of the node's CPU, DRAM and whole-node energy, with the scope of
    // its figure in Slurm (JSON; NULL in earlier records and where nothing was measured).
    "
    ALTER TABLE jobs ADD COLUMN node_share TEXT;
    ",
    // v10: whether a record holds its GPUs whole (no other job's: Slurm gives such a GPU to one
    // job at a time), so that a restart keeps it (the lost-end rule closes such a record when
    // its GPUs go to another job). Earlier records: 0, not known to.
    "
    ALTER TABLE jobs ADD COLUMN whole INTEGER NOT NULL DEFAULT 0 CHECK (whole IN (0, 1));
    ",
];

/// The schema version this binary writes and understands.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Why migration did not happen.
#[derive(Debug)]
pub(crate) enum MigrateError {
    /// The file was written by a newer wattson.
    TooNew { found: i64 },
    /// SQLite failed.
    Sqlite(rusqlite::Error),
}

impl From<rusqlite::Error> for MigrateError {
    fn from(e: rusqlite::Error) -> Self {
        MigrateError::Sqlite(e)
    }
}

/// Reads the schema version of an open database.
pub(crate) fn version(conn: &Connection) -> rusqlite::Result<i64> {
    conn.pragma_query_value(None, "user_version", |row| row.get(0))
}

/// Brings the database to [`SCHEMA_VERSION`], one transaction per step.
pub(crate) fn migrate(conn: &mut Connection) -> Result<(), MigrateError> {
    migrate_with(conn, MIGRATIONS)
}

/// [`migrate`] with an explicit list of steps (tests use longer lists).
pub(crate) fn migrate_with(conn: &mut Connection, steps: &[&str]) -> Result<(), MigrateError> {
    loop {
        // Re-read inside an IMMEDIATE transaction so two openers cannot both apply a step.
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let found = version(&tx)?;
        if found > steps.len() as i64 {
            return Err(MigrateError::TooNew { found });
        }
        if found == steps.len() as i64 {
            return Ok(());
        }
        tx.execute_batch(steps[found as usize])?;
        tx.pragma_update(None, "user_version", found + 1)?;
        tx.commit()?;
    }
}

/// Checks the version of a database opened read-only (no migration possible).
pub(crate) fn check_readable(conn: &Connection) -> Result<i64, MigrateError> {
    let found = version(conn)?;
    if found > SCHEMA_VERSION {
        return Err(MigrateError::TooNew { found });
    }
    Ok(found)
}
