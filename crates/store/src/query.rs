//! Reading records back: the `wattson acct` query and record decoding.

use rusqlite::types::Value;
use rusqlite::{Connection, OptionalExtension, params, params_from_iter};

use super::StoreError;
use wattson_types::energy::GpuMeter;
use wattson_types::energy::SeriesPoint;
use wattson_types::job::{EnergyPolicy, Hints, JobDvfs, JobGpu, JobKey, JobRecord, JobState};
pub use wattson_types::query::AcctQuery;

const JOB_COLS: &str =
    "id, job_id, step, uid, user, name, node, begin_ns, end_ns, state, hints, dvfs, policy, node_share";

/// Result order: begin time, job id, the job before its steps, numeric steps by number.
const ORDER: &str = " ORDER BY begin_ns, job_id, step <> '', \
     CASE WHEN step GLOB '[0-9]*' THEN CAST(step AS INTEGER) ELSE -1 END, step";

/// A `jobs` row before its GPUs are attached.
type RawJob = (
    i64,
    JobKey,
    u32,
    Option<String>,
    Option<String>,
    String,
    i64,
    Option<i64>,
    String,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
);

fn raw_job(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawJob> {
    Ok((
        r.get(0)?,
        JobKey { job_id: r.get(1)?, step: r.get(2)? },
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
        r.get(6)?,
        r.get(7)?,
        r.get(8)?,
        r.get(9)?,
        r.get(10)?,
        r.get(11)?,
        r.get(12)?,
        r.get(13)?,
    ))
}

fn finish(conn: &Connection, raw: RawJob) -> Result<JobRecord, StoreError> {
    let (id, key, uid, user, name, node, begin_ns, end_ns, state, hints, dvfs, policy, node_share) = raw;
    let state: JobState =
        state.parse().map_err(|_| StoreError::Corrupt(format!("job {key}: unknown state {state:?}")))?;
    let hints: Hints =
        serde_json::from_str(&hints).map_err(|e| StoreError::Corrupt(format!("job {key}: hints: {e}")))?;
    let policy: Option<EnergyPolicy> = policy
        .map(|p| p.parse().map_err(|_| StoreError::Corrupt(format!("job {key}: unknown policy {p:?}"))))
        .transpose()?;
    let dvfs: Option<Box<JobDvfs>> = dvfs
        .map(|text| serde_json::from_str(&text))
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("job {key}: dvfs: {e}")))?;
    let node_share = crate::node_share::decode(&key, node_share)?;
    let mut stmt = conn.prepare_cached(
        "SELECT gpu_index, uuid, name, meter FROM job_gpus WHERE job = ?1 ORDER BY gpu_index",
    )?;
    let rows = stmt.query_map([id], |r| {
        Ok((r.get::<_, u32>(0)?, r.get::<_, String>(1)?, r.get::<_, String>(2)?, r.get::<_, String>(3)?))
    })?;
    let mut gpus = Vec::new();
    for row in rows {
        let (index, uuid, gname, meter) = row?;
        let meter: GpuMeter = serde_json::from_str(&meter)
            .map_err(|e| StoreError::Corrupt(format!("job {key} GPU {index}: meter: {e}")))?;
        gpus.push(JobGpu { index, uuid, name: gname, meter });
    }
    Ok(JobRecord {
        key,
        uid,
        user,
        name,
        node,
        begin_ns,
        end_ns,
        state,
        hints,
        policy,
        gpus,
        dvfs,
        node_share,
    })
}

fn collect(conn: &Connection, sql: &str, params: Vec<Value>) -> Result<Vec<JobRecord>, StoreError> {
    let mut stmt = conn.prepare_cached(sql)?;
    let raws = stmt.query_map(params_from_iter(params), raw_job)?.collect::<rusqlite::Result<Vec<_>>>()?;
    raws.into_iter().map(|raw| finish(conn, raw)).collect()
}

/// [`collect`], leaving out the records that cannot be read (damaged on disk or by hand):
/// those come back apart, by row id, with the reason.
fn collect_readable(conn: &Connection, sql: &str, params: Vec<Value>) -> Result<Readable, StoreError> {
    let mut stmt = conn.prepare_cached(&sql.replacen(JOB_COLS, "id, job_id, step", 1))?;
    let rows = stmt
        .query_map(params_from_iter(params), |r| {
            Ok((r.get::<_, i64>(0)?, JobKey { job_id: r.get(1)?, step: r.get(2)? }))
        })?
        .collect::<rusqlite::Result<Vec<_>>>()?;
    let mut out = Readable::default();
    for (id, key) in rows {
        match read_row(conn, id, key)? {
            Ok(record) => out.records.push(record),
            Err(unreadable) => out.unreadable.push(unreadable),
        }
    }
    Ok(out)
}

/// The record of row `id` (job `key`), or why it cannot be read; `Err` where the store itself
/// failed (a row that is gone among them).
pub(super) fn read_row(
    conn: &Connection,
    id: i64,
    key: JobKey,
) -> Result<Result<JobRecord, Unreadable>, StoreError> {
    match load_by_id(conn, id) {
        Ok(record) => Ok(Ok(record)),
        Err(StoreError::Corrupt(reason)) => Ok(Err(Unreadable { id, key, reason })),
        Err(StoreError::Sqlite(e)) if is_bad_value(&e) => {
            let reason = format!("job {key}: {e}");
            Ok(Err(Unreadable { id, key, reason }))
        }
        Err(e) => Err(e),
    }
}

/// The records of a query that can be read, and those that cannot.
#[derive(Debug, Default)]
pub struct Readable {
    /// The records read, in the query's order.
    pub records: Vec<JobRecord>,
    /// The records that cannot be read.
    pub unreadable: Vec<Unreadable>,
}

/// A record that cannot be read: its row, its key and why.
#[derive(Debug, Clone, PartialEq)]
pub struct Unreadable {
    /// Its row in `jobs`.
    pub id: i64,
    /// Its job or step.
    pub key: JobKey,
    /// Why it cannot be read.
    pub reason: String,
}

/// [`run`], leaving out the records that cannot be read ([`collect_readable`]).
pub(super) fn run_readable(conn: &Connection, q: &AcctQuery) -> Result<Readable, StoreError> {
    let (sql, params) = build(q, false);
    collect_readable(conn, &sql, params)
}

/// [`running`], leaving out the records that cannot be read ([`collect_readable`]).
pub(super) fn running_readable(conn: &Connection) -> Result<Readable, StoreError> {
    collect_readable(conn, &format!("SELECT {JOB_COLS} FROM jobs WHERE state = 'RUNNING'{ORDER}"), Vec::new())
}

/// The record with row id `id`.
pub(super) fn load_by_id(conn: &Connection, id: i64) -> Result<JobRecord, StoreError> {
    let raw = conn
        .prepare_cached(&format!("SELECT {JOB_COLS} FROM jobs WHERE id = ?1"))?
        .query_row([id], raw_job)?;
    finish(conn, raw)
}

/// All RUNNING records.
pub(super) fn running(conn: &Connection) -> Result<Vec<JobRecord>, StoreError> {
    collect(conn, &format!("SELECT {JOB_COLS} FROM jobs WHERE state = 'RUNNING'{ORDER}"), Vec::new())
}

/// Builds the SQL of `q` (placeholders only) and its parameters.
fn build(q: &AcctQuery, full_scan: bool) -> (String, Vec<Value>) {
    let mut sql =
        format!("SELECT {JOB_COLS} FROM jobs{} WHERE 1", if full_scan { " NOT INDEXED" } else { "" });
    let mut params = Vec::new();
    if !q.jobs.is_empty() {
        let mut terms = Vec::with_capacity(q.jobs.len());
        for key in &q.jobs {
            params.push(Value::Integer(key.job_id.into()));
            if key.step.is_empty() {
                terms.push("job_id = ?");
            } else {
                params.push(Value::Text(key.step.clone()));
                terms.push("(job_id = ? AND step = ?)");
            }
        }
        sql.push_str(&format!(" AND {}", or_tree(&terms)));
    }
    if let Some(uid) = q.uid {
        sql.push_str(" AND uid = ?");
        params.push(Value::Integer(uid.into()));
    }
    if let Some(end) = q.end_ns {
        sql.push_str(" AND begin_ns <= ?");
        params.push(Value::Integer(end));
    }
    if let Some(start) = q.start_ns {
        sql.push_str(" AND (end_ns IS NULL OR end_ns >= ?)");
        params.push(Value::Integer(start));
    }
    sql.push_str(ORDER);
    if let Some(limit) = q.limit {
        sql.push_str(" LIMIT ?");
        params.push(Value::Integer(i64::try_from(limit).unwrap_or(i64::MAX)));
    }
    (sql, params)
}

/// `terms` joined by OR as a balanced tree: SQLite flattens it back into one OR (and looks the
/// keys up by index), but its parser's depth grows with log2 of the terms, not with their
/// number (a flat chain fails beyond ~1,000 keys: "Expression tree is too large").
fn or_tree(terms: &[&str]) -> String {
    match terms {
        [] => "0".to_string(),
        [one] => (*one).to_string(),
        _ => {
            let (left, right) = terms.split_at(terms.len() / 2);
            format!("({} OR {})", or_tree(left), or_tree(right))
        }
    }
}

/// Runs `q`; `full_scan` forbids the indexes on `jobs` (benchmark baseline).
pub(super) fn run(conn: &Connection, q: &AcctQuery, full_scan: bool) -> Result<Vec<JobRecord>, StoreError> {
    let (sql, params) = build(q, full_scan);
    collect(conn, &sql, params)
}

/// `EXPLAIN QUERY PLAN` of `q`, one line per step.
pub(super) fn plan(conn: &Connection, q: &AcctQuery) -> Result<String, StoreError> {
    let (sql, params) = build(q, false);
    let mut stmt = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}"))?;
    let lines = stmt.query_map(params_from_iter(params), |r| r.get::<_, String>(3))?;
    Ok(lines.collect::<rusqlite::Result<Vec<_>>>()?.join("\n"))
}

/// The time series of `key`'s RUNNING record, else of its newest record.
pub(super) fn samples(conn: &Connection, key: &JobKey) -> Result<Vec<SeriesPoint>, StoreError> {
    let id: Option<i64> = conn
        .prepare_cached(
            "SELECT id FROM jobs WHERE job_id = ?1 AND step = ?2 \
             ORDER BY state = 'RUNNING' DESC, begin_ns DESC, id DESC LIMIT 1",
        )?
        .query_row(params![key.job_id, key.step], |r| r.get(0))
        .optional()?;
    let Some(id) = id else { return Ok(Vec::new()) };
    let mut stmt = conn.prepare_cached(
        "SELECT t_ns, gpu_index, power_mw, sm_clock_mhz, util_pct, energy_mj FROM samples \
         WHERE job = ?1 ORDER BY t_ns, gpu_index",
    )?;
    let rows = stmt.query_map([id], |r| {
        Ok(SeriesPoint {
            t_ns: r.get(0)?,
            gpu_index: r.get(1)?,
            power_mw: r.get(2)?,
            sm_clock_mhz: r.get(3)?,
            util_pct: r.get(4)?,
            energy_mj: r.get(5)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<Vec<_>>>()?)
}

/// Whether SQLite's error is a value of the wrong type or range in a row (a damaged row),
/// not a failure of the store itself.
fn is_bad_value(e: &rusqlite::Error) -> bool {
    matches!(
        e,
        rusqlite::Error::FromSqlConversionFailure(..)
            | rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::IntegralValueOutOfRange(..)
    )
}
