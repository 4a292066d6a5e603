//! `sacct` history to a simulator trace: the pure part of `wattson trace export`.
//!
//! Input: `sacct --parsable2 --noheader --format=`[`FIELDS`] (times as `YYYY-MM-DDTHH:MM:SS`).
//! Output: a generic trace `wattson sim` reads (crates/sim/src/trace.rs), one row per job that
//! started, ended and held GPUs, submission times in seconds from the first one. Users are
//! replaced by a keyed hash (HMAC-SHA256 under the site's salt); their names never reach the
//! output. Steps, jobs that never started, jobs still running and jobs without GPUs are left
//! out and counted; a line that cannot be read is an error naming its line.

use std::collections::BTreeMap;

use chrono::NaiveDateTime;
use sha2::{Digest, Sha256};

/// The `sacct --format` fields read, in this order; the comment fields last (an
/// `AdminComment` may hold `|`).
pub const FIELDS: &str =
    "JobID,Submit,Start,End,Timelimit,ReqTRES,AllocTRES,Partition,User,State,AdminComment,SystemComment";

/// Fields before the comments.
const LEADING: usize = 10;

/// The trace's header: what `wattson sim` reads (`job_id`, `submit`, `gpus`, `duration`,
/// `time_limit`, `gpu_types`, `slowdown_pct`, `defer_s`, `tag`) and what it leaves for people
/// (`gpu_type`, `partition`, `user`, `energy_policy`).
pub const HEADER: &str = "job_id,submit,gpus,duration,time_limit,gpu_types,gpu_type,partition,user,energy_policy,slowdown_pct,defer_s,tag";

/// What was left out, by reason.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Skipped {
    /// Step rows (`1234.batch`, `1234.0`): their job's row stands for them.
    pub steps: usize,
    /// Jobs that never started: no Start, or nothing allocated (cancelled while pending).
    pub never_started: usize,
    /// Jobs still running (no end yet).
    pub running: usize,
    /// Jobs that held no GPU (`gres/gpu` in neither AllocTRES nor ReqTRES).
    pub no_gpus: usize,
    /// Jobs that ended the second they started (the simulator needs a run time above 0).
    pub zero_length: usize,
}

/// An export: the trace text and what it holds.
#[derive(Debug, Clone, PartialEq)]
pub struct Export {
    /// The trace, header first, rows by submission time.
    pub csv: String,
    /// Jobs written.
    pub jobs: usize,
    /// What was left out.
    pub skipped: Skipped,
    /// The first submission (the trace's time 0), as sacct printed it.
    pub origin: Option<NaiveDateTime>,
    /// Lines whose wattson summary could not be read (the job's note was used): line, why.
    pub warnings: Vec<String>,
}

/// One job row before submission times are made relative.
struct Row {
    id: String,
    submit: NaiveDateTime,
    gpus: u32,
    duration: i64,
    limit: Option<i64>,
    asked_types: Vec<String>,
    ran_on: String,
    partition: String,
    user: String,
    hints: Hints,
}

/// wattson's hints of a job, from its job_submit note and its summary.
#[derive(Debug, Default, PartialEq)]
struct Hints {
    policy: String,
    slowdown_pct: Option<f64>,
    defer_s: Option<i64>,
    tag: String,
}

/// Turns sacct's output into a trace; `name` labels errors (`name:line: ...`), `salt` keys the
/// users' hash. Every unreadable line is reported, one per line of the error.
pub fn export(text: &str, name: &str, salt: &[u8]) -> Result<Export, String> {
    let mut rows = Vec::new();
    let mut skipped = Skipped::default();
    let (mut errors, mut warnings) = (Vec::new(), Vec::new());
    for (k, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = format!("{name}:{}", k + 1);
        match row(line, &at, salt, &mut skipped, &mut warnings) {
            Ok(Some(r)) => rows.push(r),
            Ok(None) => {}
            Err(e) => errors.push(e),
        }
    }
    if !errors.is_empty() {
        return Err(errors.join("\n"));
    }
    rows.sort_by(|a, b| a.submit.cmp(&b.submit).then_with(|| a.id.cmp(&b.id)));
    let origin = rows.first().map(|r| r.submit);
    let mut csv = format!("{HEADER}\n");
    for r in &rows {
        let submit = origin.map_or(0, |o| (r.submit - o).num_seconds());
        let h = &r.hints;
        let cells = [
            r.id.clone(),
            submit.to_string(),
            r.gpus.to_string(),
            r.duration.to_string(),
            r.limit.map_or_else(String::new, |l| l.to_string()),
            r.asked_types.join(";"),
            r.ran_on.clone(),
            r.partition.clone(),
            r.user.clone(),
            h.policy.clone(),
            h.slowdown_pct.map_or_else(String::new, |s| format!("{s}")),
            h.defer_s.map_or_else(String::new, |d| d.to_string()),
            h.tag.clone(),
        ];
        let cells: Vec<String> = cells.iter().map(|c| quoted(c)).collect();
        csv.push_str(&cells.join(","));
        csv.push('\n');
    }
    Ok(Export { csv, jobs: rows.len(), skipped, origin, warnings })
}

/// One sacct line: a job row, `None` for a row left out (counted in `skipped`).
fn row(
    line: &str,
    at: &str,
    salt: &[u8],
    skipped: &mut Skipped,
    warnings: &mut Vec<String>,
) -> Result<Option<Row>, String> {
    let f: Vec<&str> = line.splitn(LEADING + 1, '|').collect();
    if f.len() <= LEADING {
        return Err(format!(
            "{at}: {} fields; expected {} (sacct --parsable2 --noheader --format={FIELDS})",
            f.len(),
            LEADING + 2
        ));
    }
    let id = f[0].trim();
    if id.contains('.') {
        skipped.steps += 1;
        return Ok(None);
    }
    if id.is_empty() {
        return Err(format!("{at}: JobID is empty"));
    }
    let submit = time(f[1], "Submit", at)?.ok_or_else(|| format!("{at}: Submit = {:?}: not a time", f[1]))?;
    let Some(start) = time(f[2], "Start", at)? else {
        skipped.never_started += 1;
        return Ok(None);
    };
    let Some(end) = time(f[3], "End", at)? else {
        skipped.running += 1;
        return Ok(None);
    };
    if f[6].trim().is_empty() {
        // Nothing allocated: cancelled while pending (Slurm gives it Start = End then).
        skipped.never_started += 1;
        return Ok(None);
    }
    let limit = time_limit(f[4], at)?;
    let asked = gpus(f[5], "ReqTRES", at)?;
    let alloc = gpus(f[6], "AllocTRES", at)?;
    let count = if alloc.0 > 0 { alloc.0 } else { asked.0 };
    if count == 0 {
        skipped.no_gpus += 1;
        return Ok(None);
    }
    let duration = (end - start).num_seconds();
    if duration < 0 {
        return Err(format!("{at}: End {} is before Start {}", f[3].trim(), f[2].trim()));
    }
    if duration == 0 {
        skipped.zero_length += 1;
        return Ok(None);
    }
    let (admin, system) = wattson_sacct::comment::split(f[LEADING]);
    let hints = hints(admin, system, submit, at, warnings);
    let user = f[8].trim();
    if user.is_empty() {
        return Err(format!("{at}: User is empty"));
    }
    Ok(Some(Row {
        id: id.to_string(),
        submit,
        gpus: count,
        duration,
        limit,
        asked_types: asked.1,
        ran_on: alloc.1.join(";"),
        partition: f[7].trim().to_string(),
        user: user_hash(salt, user),
        hints,
    }))
}

/// A sacct time; `None` for `Unknown`, `None` or an empty field (not started, not ended).
fn time(s: &str, field: &str, at: &str) -> Result<Option<NaiveDateTime>, String> {
    let s = s.trim();
    if s.is_empty() || s == "Unknown" || s == "None" {
        return Ok(None);
    }
    NaiveDateTime::parse_from_str(s, "%Y-%m-%dT%H:%M:%S").map(Some).map_err(|_| {
        format!(
            "{at}: {field} = {s:?}: allowed YYYY-MM-DDTHH:MM:SS (SLURM_TIME_FORMAT=standard), Unknown or None"
        )
    })
}

/// A `Timelimit` in seconds: Slurm's `[D-]HH:MM:SS`, `MM:SS`, `MM`, `D-HH[:MM]`; `None` for
/// `UNLIMITED`, `Partition_Limit` or an empty field.
fn time_limit(s: &str, at: &str) -> Result<Option<i64>, String> {
    let s = s.trim();
    if s.is_empty() || s.eq_ignore_ascii_case("UNLIMITED") || s == "Partition_Limit" {
        return Ok(None);
    }
    let bad = || {
        format!(
            "{at}: Timelimit = {s:?}: allowed [D-]HH:MM:SS, MM:SS, MM, D-HH[:MM], UNLIMITED or Partition_Limit"
        )
    };
    let (days, rest) = match s.split_once('-') {
        Some((d, r)) => (Some(d.parse::<i64>().map_err(|_| bad())?), r),
        None => (None, s),
    };
    let parts =
        rest.split(':').map(|p| p.parse::<i64>().map_err(|_| bad())).collect::<Result<Vec<_>, _>>()?;
    let (h, m, sec) = match (days.is_some(), parts.as_slice()) {
        (true, [h]) => (*h, 0, 0),
        (true, [h, m]) => (*h, *m, 0),
        (_, [h, m, sec]) => (*h, *m, *sec),
        (false, [m]) => (0, *m, 0),
        (false, [m, sec]) => (0, *m, *sec),
        _ => return Err(bad()),
    };
    if [h, m, sec].iter().any(|v| *v < 0) || days.is_some_and(|d| d < 0) {
        return Err(bad());
    }
    let total = days.unwrap_or(0) * 86_400 + h * 3600 + m * 60 + sec;
    Ok((total > 0).then_some(total))
}

/// The GPUs of a TRES list and their types: `gres/gpu=2` (typed entries `gres/gpu:v100=2`
/// repeat the count; alone, they are summed). Other GRES (`gres/gpumem`, `gres/shard`) are not
/// GPUs.
fn gpus(tres: &str, field: &str, at: &str) -> Result<(u32, Vec<String>), String> {
    let (mut plain, mut typed, mut types) = (None, 0u32, Vec::new());
    for item in tres.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        let Some((key, value)) = item.split_once('=') else { continue };
        let kind = match key.strip_prefix("gres/gpu") {
            Some("") => None,
            Some(t) if t.starts_with(':') => Some(&t[1..]),
            _ => continue,
        };
        let n: u32 = value.parse().map_err(|_| {
            format!("{at}: {field} = {tres:?}: {key} = {value:?} is not a whole number of GPUs")
        })?;
        match kind {
            None => plain = Some(n),
            Some(t) => {
                typed += n;
                types.push(t.to_string());
            }
        }
    }
    Ok((plain.unwrap_or(typed), types))
}

/// wattson's hints: the job_submit note (`wattson:policy=P,slowdown=X%,defer=S,...`) in the
/// comment fields, and the hints the nodes recorded in the job's summary. With neither, every
/// hint is left empty (unknown); with either, a bound or window not recorded is 0 (none asked).
fn hints(admin: &str, system: &str, submit: NaiveDateTime, at: &str, warnings: &mut Vec<String>) -> Hints {
    let note = [admin, system].into_iter().find_map(|c| {
        let text = wattson_sacct::summary::split(c).0;
        let start = text.to_ascii_lowercase().find("wattson:")?;
        let body = &text[start + "wattson:".len()..];
        let body = body.split(';').next().unwrap_or("");
        Some(body.split(',').filter_map(|kv| kv.split_once('=')).collect::<BTreeMap<&str, &str>>())
    });
    let recorded = match wattson_sacct::comment::read(admin, system) {
        Some(Ok(s)) => s.nodes.into_iter().flat_map(|n| n.records).next().map(|r| r.hints),
        Some(Err(e)) => {
            warnings.push(format!("{at}: {e}; the job_submit note's hints are used"));
            None
        }
        None => None,
    };
    if note.is_none() && recorded.is_none() {
        return Hints::default();
    }
    let note = note.unwrap_or_default();
    let recorded = recorded.unwrap_or_default();
    let slowdown = recorded
        .slowdown_pct
        .or_else(|| note.get("slowdown").and_then(|s| s.trim_end_matches('%').parse().ok()));
    let deferred = note
        .get("deferred")
        .and_then(|t| NaiveDateTime::parse_from_str(t.trim_end_matches(['Z', 'z']), "%Y-%m-%dT%H:%M:%S").ok())
        .map(|t| (t - submit).num_seconds().max(0));
    let defer = note.get("defer").and_then(|s| s.parse::<i64>().ok()).or(deferred);
    Hints {
        policy: note
            .get("policy")
            .map(|p| p.to_string())
            .or_else(|| recorded.policy.map(|p| p.to_string()))
            .unwrap_or_default(),
        slowdown_pct: Some(slowdown.unwrap_or(0.0)),
        defer_s: Some(defer.unwrap_or(0)),
        tag: recorded.tag.or_else(|| note.get("tag").map(|t| t.to_string())).unwrap_or_default(),
    }
}

/// The user's keyed hash: the first 12 bytes of HMAC-SHA256(salt, name), in hex.
pub fn user_hash(salt: &[u8], user: &str) -> String {
    const BLOCK: usize = 64;
    let mut key = [0u8; BLOCK];
    if salt.len() > BLOCK {
        key[..32].copy_from_slice(&Sha256::digest(salt));
    } else {
        key[..salt.len()].copy_from_slice(salt);
    }
    let pad = |b: u8| key.iter().map(|k| k ^ b).collect::<Vec<u8>>();
    let inner = Sha256::new().chain_update(pad(0x36)).chain_update(user.as_bytes()).finalize();
    let outer = Sha256::new().chain_update(pad(0x5c)).chain_update(inner).finalize();
    outer[..12].iter().map(|b| format!("{b:02x}")).collect()
}

/// A CSV cell, quoted when it holds a comma, a quote or a line break.
fn quoted(cell: &str) -> String {
    if cell.contains([',', '"', '\n', '\r']) {
        format!("\"{}\"", cell.replace('"', "\"\""))
    } else {
        cell.to_string()
    }
}

#[cfg(test)]
mod tests;
