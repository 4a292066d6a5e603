//! A job's or step's state as Slurm names it (COMPLETED, FAILED, CANCELLED, TIMEOUT,
//! OUT_OF_MEMORY...): the one type for it, read from `sacct` and `squeue` alike.

use strum::{EnumString, IntoStaticStr, VariantArray};

/// A job or step state as `sacct` and `squeue` name it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, EnumString, IntoStaticStr, VariantArray)]
#[strum(serialize_all = "SCREAMING_SNAKE_CASE", ascii_case_insensitive)]
#[allow(missing_docs)]
pub enum SlurmState {
    BootFail,
    Cancelled,
    Completed,
    Completing,
    Configuring,
    Deadline,
    Failed,
    NodeFail,
    OutOfMemory,
    Pending,
    Preempted,
    Running,
    Requeued,
    RequeueFed,
    RequeueHold,
    Resizing,
    ResvDelHold,
    Revoked,
    Signaling,
    SpecialExit,
    StageOut,
    Stopped,
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
            SlurmState::Completing => "CG",
            SlurmState::Configuring => "CF",
            SlurmState::Deadline => "DL",
            SlurmState::Failed => "F",
            SlurmState::NodeFail => "NF",
            SlurmState::OutOfMemory => "OOM",
            SlurmState::Pending => "PD",
            SlurmState::Preempted => "PR",
            SlurmState::Running => "R",
            SlurmState::Requeued => "RQ",
            SlurmState::RequeueFed => "RF",
            SlurmState::RequeueHold => "RH",
            SlurmState::Resizing => "RS",
            SlurmState::ResvDelHold => "RD",
            SlurmState::Revoked => "RV",
            SlurmState::Signaling => "SI",
            SlurmState::SpecialExit => "SE",
            SlurmState::StageOut => "SO",
            SlurmState::Stopped => "ST",
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

#[cfg(test)]
mod tests {
    use super::*;

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
