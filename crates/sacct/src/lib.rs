//! Slurm's accounting as a client reads it: `sacct` run with a deadline, jobs' states as Slurm
//! names them, wattson's job summary in `AdminComment` (written with `sacctmgr`), and the
//! hostlists and node names these commands take. Shared by the `wattson` command and the
//! controller; no configuration, no async runtime.

pub mod comment;
pub mod hostlist;
pub mod state;
pub mod summary;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

pub use state::SlurmState;

use wattson_deadline::CommandError;

/// Why Slurm's states could not be read.
#[derive(Debug, thiserror::Error)]
pub enum AccountingError {
    /// The cluster keeps no job accounting (`AccountingStorageType=accounting_storage/none`),
    /// or this host has no `sacct` or no Slurm configuration: nothing to report.
    #[error("Slurm's job accounting is not available here")]
    Absent,
    /// `sacct` failed or timed out.
    #[error(transparent)]
    Command(CommandError),
}

/// Most job ids asked of one `sacct` call (its command line stays short).
const IDS_PER_CALL: usize = 500;

/// Slurm's state of each job and step of `jobs`, keyed like `42`, `42.0`, `42.batch`, as the
/// caller may see them (`sacct` applies the site's `PrivateData`). Each call is killed after
/// `timeout`.
pub fn job_states(jobs: &[u32], timeout: Duration) -> Result<BTreeMap<String, SlurmState>, AccountingError> {
    let mut states = BTreeMap::new();
    for chunk in jobs.chunks(IDS_PER_CALL) {
        let list: Vec<String> = chunk.iter().map(u32::to_string).collect();
        let mut sacct = Command::new("sacct");
        sacct.args(["-n", "-P", "-o", "JobIDRaw,State", "-j", &list.join(",")]);
        states.extend(parse_job_states(&sacct_run(&mut sacct, timeout)?));
    }
    Ok(states)
}

/// Runs a `sacct` command: its output, or [`AccountingError::Absent`] where this host or
/// cluster keeps no accounting.
pub fn sacct_run(sacct: &mut Command, timeout: Duration) -> Result<String, AccountingError> {
    match wattson_deadline::run(sacct, timeout) {
        Ok(text) => Ok(text),
        Err(CommandError::Start { error, .. }) if error.kind() == std::io::ErrorKind::NotFound => {
            Err(AccountingError::Absent)
        }
        Err(CommandError::Failed { stderr, .. })
            if stderr.contains("accounting storage is disabled")
                || stderr.contains("Could not establish a configuration source") =>
        {
            Err(AccountingError::Absent)
        }
        Err(e) => Err(AccountingError::Command(e)),
    }
}

/// Parses `sacct -n -P -o JobIDRaw,State`: `42|CANCELLED by 1000` gives `42` -> CANCELLED.
/// Lines it cannot read (a state newer than this list) are left out.
pub fn parse_job_states(text: &str) -> BTreeMap<String, SlurmState> {
    text.lines()
        .filter_map(|line| {
            let (id, state) = line.split_once('|')?;
            let word = state.split_whitespace().next()?;
            Some((id.trim().to_string(), word.parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sacct_lines_give_each_job_and_steps_state() {
        let text = "7|CANCELLED by 1000\n7.batch|CANCELLED\n7.extern|COMPLETED\n8|OUT_OF_MEMORY\n\
                    9|TIMEOUT\n9.0|FAILED\n10|SOMETHING_NEW\nbad line\n";
        let states = parse_job_states(text);
        assert_eq!(states.get("7"), Some(&SlurmState::Cancelled));
        assert_eq!(states.get("7.batch"), Some(&SlurmState::Cancelled));
        assert_eq!(states.get("8"), Some(&SlurmState::OutOfMemory));
        assert_eq!(states.get("9"), Some(&SlurmState::Timeout));
        assert_eq!(states.get("9.0"), Some(&SlurmState::Failed));
        assert_eq!(states.len(), 6, "{states:?}");
    }
}
