//! The daemon's SQLite file: job records, their GPU meters, and a downsampled time series.
//!
//! One writer (the daemon, [`Store::open`]) and any number of readers (the CLI,
//! [`Store::open_read_only`]). The file is in WAL mode with `synchronous=FULL`, so every
//! method that writes has committed durably when it returns: a job-boundary record survives a
//! crash or power loss right after [`Store::begin_job`] or [`Store::end_job`] returns. Every
//! write is one transaction. All SQL uses bound parameters.
//!
//! The writer keeps the `-wal` and `-shm` files when it closes (SQLite's persistent-WAL mode,
//! with the WAL truncated to zero bytes), so readers without write access to the directory
//! can still open the file while the daemon is stopped.

mod models;
mod node_share;
mod quarantine;
pub use quarantine::Quarantined;
mod query;
mod renumber;
pub mod schema;
mod settings;

pub use settings::GpuChange;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::Duration;

use rusqlite::{Connection, ErrorCode, OpenFlags, OptionalExtension, TransactionBehavior, params};

pub use query::{AcctQuery, Readable, Unreadable};
use schema::{MigrateError, SCHEMA_VERSION};
use wattson_types::energy::SeriesPoint;
use wattson_types::job::{JobGpu, JobKey, JobRecord};

/// How long a connection waits for a lock held by another connection.
pub const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest WAL the writer keeps after a checkpoint; on a clean close it is truncated to zero.
const JOURNAL_SIZE_LIMIT: i64 = 64 << 20;

/// What can go wrong with the store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// The file could not be opened or set up (missing, no permission, locked ...).
    #[error("cannot open store {}: {source}", path.display())]
    Open {
        /// The store's path.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The file exists but is not a SQLite database, or is corrupt.
    #[error("{} is not a wattson store (not a SQLite database, or corrupt): {source}", path.display())]
    NotADatabase {
        /// The store's path.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: rusqlite::Error,
    },
    /// The file was written by a newer wattson; it is left untouched.
    #[error(
        "store {} has schema version {found}, newer than the {supported} this wattson supports; \
         upgrade wattson",
        path.display()
    )]
    TooNew {
        /// The store's path.
        path: PathBuf,
        /// Version in the file.
        found: i64,
        /// Newest version this binary knows.
        supported: i64,
    },
    /// A read-only opener found a file the daemon has not created or migrated yet.
    #[error(
        "store {} has schema version {found}, but this wattson reads version {supported}; \
         start wattsond once to create or migrate it",
        path.display()
    )]
    NotMigrated {
        /// The store's path.
        path: PathBuf,
        /// Version in the file.
        found: i64,
        /// Version this binary reads.
        supported: i64,
    },
    /// `begin_job` found a RUNNING record with the same key but another owner or GPUs.
    #[error("job {key} is already running with a different record: {detail}")]
    Conflict {
        /// The job or step.
        key: JobKey,
        /// What differs.
        detail: String,
    },
    /// The job or step has no RUNNING record.
    #[error("job {0} is not running")]
    NotRunning(JobKey),
    /// A stored value could not be decoded (JSON of a meter or hints).
    #[error("corrupt value in store: {0}")]
    Corrupt(String),
    /// Any other SQLite failure.
    #[error("store: {0}")]
    Sqlite(#[from] rusqlite::Error),
}

/// What [`Store::begin_job`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BeginOutcome {
    /// A new RUNNING record was written.
    Inserted,
    /// An identical RUNNING record (same key, uid and GPU indices) exists: an idempotent
    /// retry; nothing was written.
    AlreadyRunning,
}

/// An open store. See the module documentation.
pub struct Store {
    conn: Connection,
    path: PathBuf,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").field("path", &self.path).finish()
    }
}

/// Maps an error met while opening to [`StoreError::NotADatabase`] or [`StoreError::Open`].
fn open_error(path: &Path, e: rusqlite::Error) -> StoreError {
    let path = path.to_path_buf();
    match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => {
            StoreError::NotADatabase { path, source: e }
        }
        _ => StoreError::Open { path, source: e },
    }
}

fn migrate_error(path: &Path, e: MigrateError) -> StoreError {
    match e {
        MigrateError::TooNew { found } => {
            StoreError::TooNew { path: path.to_path_buf(), found, supported: SCHEMA_VERSION }
        }
        MigrateError::Sqlite(e) => open_error(path, e),
    }
}

/// Asks SQLite to keep the `-wal` and `-shm` files when the last connection closes.
fn set_persistent_wal(conn: &Connection) -> rusqlite::Result<()> {
    let mut on: std::os::raw::c_int = 1;
    // SAFETY: the handle is valid while `conn` lives; SQLITE_FCNTL_PERSIST_WAL reads and
    // writes one int through the pointer, which points at a live local.
    let rc = unsafe {
        rusqlite::ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            rusqlite::ffi::SQLITE_FCNTL_PERSIST_WAL,
            (&raw mut on).cast(),
        )
    };
    if rc == rusqlite::ffi::SQLITE_OK {
        Ok(())
    } else {
        Err(rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(rc), None))
    }
}

/// Creates the store file readable and writable by its owner only, or takes an existing one
/// (and its WAL and shared-memory files) back to that: every user's jobs are in it. SQLite
/// creates the WAL and shared-memory files with the main file's mode.
fn make_private(path: &Path) -> std::io::Result<()> {
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let private = std::fs::Permissions::from_mode(0o600);
    let open = |path: &Path, create: bool| {
        std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(create)
            .truncate(false)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path)
    };
    open(path, true)?.set_permissions(private.clone())?;
    for suffix in ["-wal", "-shm"] {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        match open(Path::new(&name), false) {
            Ok(file) => file.set_permissions(private.clone())?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

impl Store {
    /// Opens or creates the store for writing (the daemon), private to its owner (mode 0600),
    /// and migrates it to
    /// [`schema::SCHEMA_VERSION`]. Refuses a file from a newer wattson ([`StoreError::TooNew`])
    /// and a file that is not a SQLite database ([`StoreError::NotADatabase`]).
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        make_private(path).map_err(|e| StoreError::Open {
            path: path.to_path_buf(),
            source: rusqlite::Error::InvalidPath(format!("cannot make it private: {e}").into()),
        })?;
        let mut conn = Connection::open(path).map_err(|e| open_error(path, e))?;
        let setup = |conn: &Connection| -> rusqlite::Result<()> {
            conn.busy_timeout(BUSY_TIMEOUT)?;
            // journal_mode returns the resulting mode; anything but wal is an error.
            let mode: String = conn.pragma_update_and_check(None, "journal_mode", "wal", |r| r.get(0))?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(rusqlite::Error::InvalidParameterName(format!(
                    "journal_mode is {mode}, not wal"
                )));
            }
            conn.pragma_update(None, "synchronous", "FULL")?;
            conn.pragma_update(None, "foreign_keys", "ON")?;
            conn.pragma_update(None, "journal_size_limit", JOURNAL_SIZE_LIMIT)?;
            set_persistent_wal(conn)
        };
        setup(&conn).map_err(|e| open_error(path, e))?;
        schema::migrate(&mut conn).map_err(|e| migrate_error(path, e))?;
        Ok(Store { conn, path: path.to_path_buf() })
    }

    /// Opens the store for reading (the CLI); never writes, creates or migrates.
    ///
    /// Tries a normal read-only open first. If that fails (typically: the `-shm` file is
    /// missing and the directory is not writable), and the file has no `-wal` file, or an empty
    /// one, falls back to SQLite's `immutable=1` mode, which reads the main file without any
    /// locking; no committed data can be skipped because none is outside the main file.
    pub fn open_read_only(path: &Path) -> Result<Store, StoreError> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let first = Connection::open_with_flags(path, flags).and_then(|conn| {
            conn.busy_timeout(BUSY_TIMEOUT)?;
            schema::version(&conn)?;
            Ok(conn)
        });
        let conn = match first {
            Ok(conn) => conn,
            Err(e) if !path.exists() => return Err(open_error(path, e)),
            Err(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt)
                ) =>
            {
                return Err(open_error(path, e));
            }
            Err(e) => match open_immutable(path) {
                Ok(Some(conn)) => conn,
                Ok(None) | Err(_) => return Err(open_error(path, e)),
            },
        };
        match schema::check_readable(&conn) {
            Ok(found) if found < SCHEMA_VERSION => {
                Err(StoreError::NotMigrated { path: path.to_path_buf(), found, supported: SCHEMA_VERSION })
            }
            Ok(_) => Ok(Store { conn, path: path.to_path_buf() }),
            Err(e) => Err(migrate_error(path, e)),
        }
    }

    /// Whether SQLite's quick check finds the file sound (a corrupt page is `false`, not an
    /// error). Reads the whole file: for start-up, not for every request.
    pub fn is_intact(&self) -> Result<bool, StoreError> {
        let result: rusqlite::Result<String> = self.conn.query_row("PRAGMA quick_check(1)", [], |r| r.get(0));
        match result {
            Ok(verdict) => Ok(verdict == "ok"),
            Err(e)
                if matches!(
                    e.sqlite_error_code(),
                    Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase)
                ) =>
            {
                Ok(false)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// The path the store was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records the start of a job or step as RUNNING (its `state` and `end_ns` are ignored),
    /// with its GPUs, their first meters and how it holds them. Idempotent: an identical
    /// RUNNING record gives [`BeginOutcome::AlreadyRunning`]; a RUNNING record with the same
    /// key but another uid or other GPU indices gives [`StoreError::Conflict`].
    pub fn begin_job(&mut self, rec: &JobRecord, hold: Hold) -> Result<BeginOutcome, StoreError> {
        let hints = serde_json::to_string(&rec.hints).map_err(|e| StoreError::Corrupt(e.to_string()))?;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        if let Some((id, uid)) = tx
            .prepare_cached("SELECT id, uid FROM jobs WHERE job_id = ?1 AND step = ?2 AND state = 'RUNNING'")?
            .query_row(params![rec.key.job_id, rec.key.step], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, u32>(1)?))
            })
            .optional()?
        {
            let stored: Vec<u32> = tx
                .prepare_cached("SELECT gpu_index FROM job_gpus WHERE job = ?1 ORDER BY gpu_index")?
                .query_map([id], |r| r.get(0))?
                .collect::<rusqlite::Result<_>>()?;
            let mut wanted: Vec<u32> = rec.gpus.iter().map(|g| g.index).collect();
            wanted.sort_unstable();
            if uid == rec.uid && stored == wanted {
                return Ok(BeginOutcome::AlreadyRunning);
            }
            return Err(StoreError::Conflict {
                key: rec.key.clone(),
                detail: format!("stored uid {uid} GPUs {stored:?}, new uid {} GPUs {wanted:?}", rec.uid),
            });
        }
        tx.prepare_cached(
            "INSERT INTO jobs (job_id, step, uid, user, name, node, begin_ns, state, hints, policy, whole) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, 'RUNNING', ?8, ?9, ?10)",
        )?
        .execute(params![
            rec.key.job_id,
            rec.key.step,
            rec.uid,
            rec.user,
            rec.name,
            rec.node,
            rec.begin_ns,
            hints,
            rec.policy.map(<&str>::from),
            hold == Hold::Whole
        ])?;
        let id = tx.last_insert_rowid();
        for gpu in &rec.gpus {
            upsert_gpu(&tx, id, gpu)?;
        }
        tx.commit()?;
        Ok(BeginOutcome::Inserted)
    }

    /// Updates the meters of every running job of one sampling tick (adding GPUs not yet
    /// recorded) and appends their series points, in ONE transaction
    /// (the hot path). Keys without a RUNNING record are skipped, not an error, so one stale
    /// job cannot make a whole tick fail; they are returned (each once, in order of first
    /// appearance) for the caller to log.
    pub fn save_meters_many(
        &mut self,
        updates: &[(JobKey, Vec<JobGpu>)],
        samples: &[(JobKey, SeriesPoint)],
    ) -> Result<Vec<JobKey>, StoreError> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        // Each job's running row, looked up once, in order of first appearance.
        let mut ids: Vec<(&JobKey, Option<i64>)> = Vec::new();
        for key in updates.iter().map(|(k, _)| k).chain(samples.iter().map(|(k, _)| k)) {
            if !ids.iter().any(|(k, _)| *k == key) {
                ids.push((key, running_id(&tx, key)?));
            }
        }
        let id_of = |key: &JobKey| ids.iter().find(|(k, _)| *k == key).and_then(|(_, id)| *id);
        for (key, gpus) in updates {
            if let Some(id) = id_of(key) {
                for gpu in gpus {
                    upsert_gpu(&tx, id, gpu)?;
                }
            }
        }
        for (key, sample) in samples {
            if let Some(id) = id_of(key) {
                insert_sample(&tx, id, sample)?;
            }
        }
        tx.commit()?;
        Ok(ids.into_iter().filter(|(_, id)| id.is_none()).map(|(k, _)| k.clone()).collect())
    }

    /// Ends the RUNNING record `key`: final meters, `end_ns`, state COMPLETED; returns the
    /// completed record. [`StoreError::NotRunning`] if there is no RUNNING record.
    pub fn end_job(&mut self, key: &JobKey, end_ns: i64, gpus: &[JobGpu]) -> Result<JobRecord, StoreError> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let id = running_id(&tx, key)?.ok_or_else(|| StoreError::NotRunning(key.clone()))?;
        for gpu in gpus {
            upsert_gpu(&tx, id, gpu)?;
        }
        tx.prepare_cached("UPDATE jobs SET end_ns = ?1, state = 'COMPLETED' WHERE id = ?2")?
            .execute(params![end_ns, id])?;
        let rec = query::load_by_id(&tx, id)?;
        tx.commit()?;
        Ok(rec)
    }

    /// Writes whole records (any state, with their `end_ns`) in ONE transaction: backfills,
    /// tests and benchmarks. A RUNNING record whose key is already running fails the whole
    /// import (nothing is written). Returns how many records were written.
    pub fn import<I: IntoIterator<Item = JobRecord>>(&mut self, records: I) -> Result<usize, StoreError> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut n = 0;
        for rec in records {
            let hints = serde_json::to_string(&rec.hints).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            let dvfs = rec
                .dvfs
                .as_ref()
                .map(serde_json::to_string)
                .transpose()
                .map_err(|e| StoreError::Corrupt(e.to_string()))?;
            tx.prepare_cached(
                "INSERT INTO jobs (job_id, step, uid, user, name, node, begin_ns, end_ns, state, hints, dvfs, policy) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            )?
            .execute(params![
                rec.key.job_id,
                rec.key.step,
                rec.uid,
                rec.user,
                rec.name,
                rec.node,
                rec.begin_ns,
                rec.end_ns,
                rec.state.as_str(),
                hints,
                dvfs,
                rec.policy.map(<&str>::from)
            ])?;
            let id = tx.last_insert_rowid();
            if let Some(share) = &rec.node_share {
                node_share::write(&tx, id, share)?;
            }
            for gpu in &rec.gpus {
                upsert_gpu(&tx, id, gpu)?;
            }
            n += 1;
        }
        tx.commit()?;
        Ok(n)
    }

    /// All RUNNING records, for resuming their meters after a daemon restart.
    pub fn running_jobs(&self) -> Result<Vec<JobRecord>, StoreError> {
        query::running(&self.conn)
    }

    /// The RUNNING records that hold their GPUs whole ([`Hold::Whole`]), by key.
    pub fn running_whole(&self) -> Result<BTreeSet<JobKey>, StoreError> {
        let mut stmt = self
            .conn
            .prepare_cached("SELECT job_id, step FROM jobs WHERE state = 'RUNNING' AND whole = 1")?;
        let keys = stmt
            .query_map([], |r| Ok(JobKey { job_id: r.get(0)?, step: r.get(1)? }))?
            .collect::<rusqlite::Result<_>>()?;
        Ok(keys)
    }

    /// Records matching `q`, ordered by begin time, then job id, then step (a job before its
    /// steps). See [`AcctQuery`].
    pub fn query(&self, q: &AcctQuery) -> Result<Vec<JobRecord>, StoreError> {
        query::run(&self.conn, q, false)
    }

    /// [`Store::query`] forced through a full table scan of `jobs`: a baseline for benchmarks.
    #[doc(hidden)]
    pub fn query_full_scan(&self, q: &AcctQuery) -> Result<Vec<JobRecord>, StoreError> {
        query::run(&self.conn, q, true)
    }

    /// SQLite's `EXPLAIN QUERY PLAN` for [`Store::query`], one line per step (diagnostics).
    pub fn query_plan(&self, q: &AcctQuery) -> Result<String, StoreError> {
        query::plan(&self.conn, q)
    }

    /// The time series of record `key` (the RUNNING one, else the newest), ordered by
    /// time then GPU index.
    pub fn samples(&self, key: &JobKey) -> Result<Vec<SeriesPoint>, StoreError> {
        query::samples(&self.conn, key)
    }
}

/// How a record holds its GPUs, kept with it across restarts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hold {
    /// Whole, no other job's: Slurm gives such a GPU to one job at a time, so a record still
    /// running there when another job begins on it lost its end.
    Whole,
    /// Possibly with other jobs: a step, or a job that shares its GPUs (shards, MPS).
    Shared,
}

/// The row id of the RUNNING record of `key`.
fn running_id(conn: &Connection, key: &JobKey) -> rusqlite::Result<Option<i64>> {
    conn.prepare_cached("SELECT id FROM jobs WHERE job_id = ?1 AND step = ?2 AND state = 'RUNNING'")?
        .query_row(params![key.job_id, key.step], |r| r.get(0))
        .optional()
}

fn upsert_gpu(conn: &Connection, job: i64, gpu: &JobGpu) -> Result<(), StoreError> {
    let meter = serde_json::to_string(&gpu.meter).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    conn.prepare_cached(
        "INSERT INTO job_gpus (job, gpu_index, uuid, name, energy_mj, meter) VALUES (?1, ?2, ?3, ?4, ?5, ?6) \
         ON CONFLICT (job, gpu_index) DO UPDATE SET uuid = excluded.uuid, name = excluded.name, \
         energy_mj = excluded.energy_mj, meter = excluded.meter",
    )?
    .execute(params![job, gpu.index, gpu.uuid, gpu.name, gpu.meter.energy_mj, meter])?;
    Ok(())
}

fn insert_sample(conn: &Connection, job: i64, s: &SeriesPoint) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO samples (job, gpu_index, t_ns, power_mw, sm_clock_mhz, util_pct, energy_mj) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![job, s.gpu_index, s.t_ns, s.power_mw, s.sm_clock_mhz, s.util_pct, s.energy_mj])?;
    Ok(())
}

/// Opens `path` with `immutable=1` if that cannot skip committed data: only when there is no
/// `-wal` file or it is empty. `Ok(None)` when a non-empty WAL exists.
pub(crate) fn open_immutable(path: &Path) -> rusqlite::Result<Option<Connection>> {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    match std::fs::metadata(&wal) {
        Ok(m) if m.len() > 0 => return Ok(None),
        Ok(_) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(_) => return Ok(None),
    }
    let abs =
        std::path::absolute(path).map_err(|e| rusqlite::Error::InvalidPath(PathBuf::from(e.to_string())))?;
    let uri = format!("file:{}?immutable=1", uri_escape(&abs.to_string_lossy()));
    let flags =
        OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let conn = Connection::open_with_flags(uri, flags)?;
    schema::version(&conn)?;
    Ok(Some(conn))
}

/// Percent-encodes the characters that are special in a SQLite URI path.
fn uri_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        match b {
            b'?' | b'#' | b'%' | b'&' | b'=' | b' ' | 0x80.. => out.push_str(&format!("%{b:02X}")),
            _ => out.push(b as char),
        }
    }
    out
}

#[cfg(test)]
mod tests;
