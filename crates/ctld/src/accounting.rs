//! Jobs' states as Slurm's accounting records them (`sacct`): how each job really ended
//! (COMPLETED, FAILED, CANCELLED, TIMEOUT, OUT_OF_MEMORY...), which only slurmctld knows.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use strum::{EnumString, IntoStaticStr, VariantArray};

use crate::command::{self, CommandError};

/// A job or step state as `sacct` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumString, IntoStaticStr, VariantArray)]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE", ascii_case_insensitive)]
#[allow(missing_docs)]
pub enum SlurmState {
    BootFail,
    Cancelled,
    Completed,
    Deadline,
    Failed,
    NodeFail,
    OutOfMemory,
    Pending,
    Preempted,
    Running,
    Requeued,
    Resizing,
    Revoked,
    Suspended,
    Timeout,
}

impl SlurmState {
    /// The long name: `OUT_OF_MEMORY`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// sacct's short form: `OOM`.
    pub fn short(self) -> &'static str {
        match self {
            SlurmState::BootFail => "BF",
            SlurmState::Cancelled => "CA",
            SlurmState::Completed => "CD",
            SlurmState::Deadline => "DL",
            SlurmState::Failed => "F",
            SlurmState::NodeFail => "NF",
            SlurmState::OutOfMemory => "OOM",
            SlurmState::Pending => "PD",
            SlurmState::Preempted => "PR",
            SlurmState::Running => "R",
            SlurmState::Requeued => "RQ",
            SlurmState::Resizing => "RS",
            SlurmState::Revoked => "RV",
            SlurmState::Suspended => "S",
            SlurmState::Timeout => "TO",
        }
    }

    /// Parses a long or short name, in any case, as `sacct -s` does.
    pub fn parse(s: &str) -> Result<SlurmState, String> {
        let s = s.trim();
        s.parse()
            .ok()
            .or_else(|| SlurmState::VARIANTS.iter().copied().find(|v| v.short().eq_ignore_ascii_case(s)))
            .ok_or_else(|| {
                let allowed: Vec<String> =
                    SlurmState::VARIANTS.iter().map(|v| format!("{} ({})", v.as_str(), v.short())).collect();
                format!("unknown state {s:?}; allowed: {}", allowed.join(", "))
            })
    }
}

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
    match command::run(sacct, timeout) {
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

    #[test]
    fn states_parse_by_long_and_short_name_in_any_case() {
        assert_eq!(SlurmState::parse("oom").unwrap(), SlurmState::OutOfMemory);
        assert_eq!(SlurmState::parse("Out_Of_Memory").unwrap(), SlurmState::OutOfMemory);
        assert_eq!(SlurmState::parse("CD").unwrap(), SlurmState::Completed);
        assert_eq!(SlurmState::parse("to").unwrap(), SlurmState::Timeout);
        let err = SlurmState::parse("DONE").unwrap_err();
        assert!(err.contains("TIMEOUT (TO)"), "{err}");
        assert_eq!(SlurmState::NodeFail.as_str(), "NODE_FAIL");
    }
}
