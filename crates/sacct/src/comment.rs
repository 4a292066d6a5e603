//! Where a job's summary goes among Slurm's comment fields, beside what other tools keep there
//! (Princeton's jobstats keeps its `JS1:` summary in `AdminComment`; a site's job_submit may
//! write notes there).
//!
//! After a job only `sacctmgr modify job ... set` can change its record, and `sacctmgr`
//! (measured on Slurm 22.05) lower-cases every value it sets, quoted or not. Rewriting a field
//! whose text holds upper-case letters would therefore change another tool's part (a jobstats
//! summary is base64, where case matters). So the summary is appended, after `;`, to the first
//! of `AdminComment` and `SystemComment` whose present text lower-casing leaves unchanged, and
//! the text before it is kept as it is; when neither is, the summary is not written. The fields
//! are read again just before writing, so a tool that wrote meanwhile is not overwritten.

use std::process::Command;
use std::time::Duration;

use crate::AccountingError;
use crate::summary::{self, JobSummary, SummaryError};

/// `sacct -o` fields holding summaries, in the order [`split`] takes them (both last on a line:
/// `AdminComment` may hold `|`).
pub const FIELDS: &str = "AdminComment,SystemComment";

/// A job's comment field that can hold its summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::Display)]
pub enum Field {
    /// `AdminComment`: the first choice (where jobstats and job_submit notes live too).
    AdminComment,
    /// `SystemComment`: when `AdminComment` holds text that `sacctmgr` would change.
    SystemComment,
}

/// What to set on the job's record: `field` to `text`.
#[derive(Debug, Clone, PartialEq)]
pub struct Placement {
    /// The field to set.
    pub field: Field,
    /// Its whole new text: what it held, then the summary.
    pub text: String,
}

/// Why a summary cannot be placed.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum PlaceError {
    /// Both fields hold mixed-case text of other tools that `sacctmgr` would lower-case.
    #[error(
        "AdminComment and SystemComment both hold other tools' text in mixed case, which sacctmgr would lower-case"
    )]
    NoRoom,
    /// The summary cannot be encoded.
    #[error(transparent)]
    Summary(#[from] SummaryError),
}

/// Whether `sacctmgr` can rewrite `text` without changing it.
fn survives_lower_case(text: &str) -> bool {
    !text.chars().any(char::is_uppercase)
}

/// Where `summary` goes given the job's present `AdminComment` and `SystemComment`. A field that
/// already holds a summary is the one rewritten (its older summary replaced).
pub fn place(admin: &str, system: &str, summary: &JobSummary) -> Result<Placement, PlaceError> {
    let fields = [(Field::AdminComment, admin), (Field::SystemComment, system)];
    let holding = fields.iter().find(|(_, text)| summary::read(text).is_some());
    let usable =
        holding.or_else(|| fields.iter().find(|(_, text)| survives_lower_case(summary::split(text).0)));
    let (field, text) = usable.ok_or(PlaceError::NoRoom)?;
    if !survives_lower_case(summary::split(text).0) {
        return Err(PlaceError::NoRoom);
    }
    Ok(Placement { field: *field, text: summary::admin_comment(text, summary)? })
}

/// The summary in either field (`AdminComment` first); `None` when neither holds one.
pub fn read(admin: &str, system: &str) -> Option<Result<JobSummary, SummaryError>> {
    summary::read(admin).or_else(|| summary::read(system))
}

/// `AdminComment` and `SystemComment` from the end of an `sacct -P` line that asked for
/// [`FIELDS`] last (a `|` inside `SystemComment`, which only Slurm and wattson write, is not
/// expected).
pub fn split(rest: &str) -> (&str, &str) {
    rest.rsplit_once('|').unwrap_or((rest, ""))
}

/// The job's `AdminComment` and `SystemComment` in Slurm's accounting now (the last record
/// with that id in `cluster`, or in the local cluster when empty).
pub fn current(job: u32, cluster: &str, timeout: Duration) -> Result<(String, String), AccountingError> {
    let mut sacct = Command::new("sacct");
    sacct.args(["-X", "-n", "-P", "-j", &job.to_string(), "-o", FIELDS]);
    if !cluster.is_empty() {
        sacct.args(["-M", cluster]);
    }
    let text = crate::sacct_run(&mut sacct, timeout)?;
    let line = text.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("");
    let (admin, system) = split(line);
    Ok((admin.trim().to_string(), system.trim().to_string()))
}

/// The `sacctmgr` arguments that set `placement` on `job` (of `cluster`, when not empty).
pub fn sacctmgr_args(job: u32, cluster: &str, placement: &Placement) -> Vec<String> {
    let mut args = vec!["-i".into(), "modify".into(), "job".into(), "where".into(), format!("jobid={job}")];
    if !cluster.is_empty() {
        args.push(format!("cluster={cluster}"));
    }
    args.extend(["set".into(), format!("{}={}", placement.field, placement.text)]);
    args
}

/// The summary of `job` in Slurm's accounting, as the caller may see it (`sacct` applies the
/// site's `PrivateData`); `None` when it has none (yet).
pub fn from_accounting(job: u32, timeout: Duration) -> Result<Option<JobSummary>, String> {
    let mut sacct = Command::new("sacct");
    sacct.args(["-X", "-n", "-P", "-j", &job.to_string(), "-o", FIELDS]);
    let text = crate::sacct_run(&mut sacct, timeout).map_err(|e| e.to_string())?;
    // One line per record with that id (ids restart when slurmctld loses its state): the last.
    match text.lines().rev().find_map(|line| {
        let (admin, system) = split(line);
        read(admin, system)
    }) {
        Some(read) => read.map(Some).map_err(|e| e.to_string()),
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Text in jobstats' format: `JS1:` and base64 (mixed case).
    const JOBSTATS: &str = "JS1:H4sIAAAAAAAAA6tWSsrPz1GyUlAqS8wpTVWqBQCOVFhKEQAAAA==";

    fn summary() -> JobSummary {
        JobSummary { job: 7, written: 1_700_000_000, ..JobSummary::default() }
    }

    #[test]
    fn a_mixed_case_admin_comment_is_left_alone_and_the_summary_goes_to_the_system_comment() {
        let placed = place(JOBSTATS, "", &summary()).unwrap();
        assert_eq!(placed.field, Field::SystemComment);
        assert!(placed.text.starts_with(summary::MARK), "{}", placed.text);
        assert_eq!(read(JOBSTATS, &placed.text), Some(Ok(summary())));
        assert_eq!(sacctmgr_args(7, "c", &placed)[6], "set");
        assert!(sacctmgr_args(7, "c", &placed)[7].starts_with("SystemComment=ws1:"));
    }

    #[test]
    fn a_lower_case_note_is_kept_first_in_the_admin_comment() {
        let placed = place("wattson:policy=balanced", "", &summary()).unwrap();
        assert_eq!(placed.field, Field::AdminComment);
        assert!(placed.text.starts_with("wattson:policy=balanced;ws1:"), "{}", placed.text);
        // Written again (a later pass): the note stays, the older summary is replaced.
        let again = place(&placed.text, "", &JobSummary { written: 1, ..summary() }).unwrap();
        assert_eq!(again.field, Field::AdminComment);
        assert_eq!(again.text.matches(";ws1:").count(), 1, "{}", again.text);
        assert_eq!(read(&again.text, "").unwrap().unwrap().written, 1);
    }

    #[test]
    fn a_summary_already_in_the_system_comment_is_replaced_there() {
        let first = place(JOBSTATS, "", &summary()).unwrap();
        let again = place(JOBSTATS, &first.text, &JobSummary { written: 2, ..summary() }).unwrap();
        assert_eq!(again.field, Field::SystemComment);
        assert_eq!(read(JOBSTATS, &again.text).unwrap().unwrap().written, 2);
    }

    #[test]
    fn no_field_that_lower_casing_would_change_is_ever_rewritten() {
        assert_eq!(place(JOBSTATS, "Requeued By Admin", &summary()), Err(PlaceError::NoRoom));
        // A Slurm system comment in lower case takes the summary after it.
        let placed = place(JOBSTATS, "requeued", &summary()).unwrap();
        assert!(placed.text.starts_with("requeued;ws1:"), "{}", placed.text);
    }

    #[test]
    fn sacct_lines_split_into_both_fields() {
        assert_eq!(split("a|b|ws1:x"), ("a|b", "ws1:x"));
        assert_eq!(split("only"), ("only", ""));
    }
}
