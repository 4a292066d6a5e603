//! Bounds on what a request may carry, checked before the daemon acts on it, whoever sent it
//! (root's and SlurmUser's requests too: a name is stored with every record).

use super::{Error, ErrorCode, MAX_SUMMARY_BINS, Request};
use wattson_types::job::JobKey;

/// Longest step name (Slurm's are a number, `batch`, `extern` or `interactive`).
pub const MAX_STEP_BYTES: usize = 64;
/// Longest user, job or account name.
pub const MAX_NAME_BYTES: usize = 256;

impl Request {
    /// Refuses a request whose names are too long or hold control characters, or whose
    /// numbers are out of range.
    pub fn validate(&self) -> Result<(), Error> {
        match self {
            Request::JobBegin(begin) => {
                step(&begin.job)?;
                for (what, value) in
                    [("user", &begin.user), ("job name", &begin.name), ("account", &begin.account)]
                {
                    if let Some(value) = value {
                        name(what, value, MAX_NAME_BYTES)?;
                    }
                }
                Ok(())
            }
            Request::JobEnd { job } | Request::JobSettings { job } | Request::JobSeries { job } => step(job),
            Request::Acct(filter) => filter.jobs.iter().try_for_each(step),
            Request::JobSummary { bins, .. } if !(1..=MAX_SUMMARY_BINS).contains(bins) => {
                Err(bad(format!("bins must be 1 to {MAX_SUMMARY_BINS}, not {bins}")))
            }
            _ => Ok(()),
        }
    }
}

fn step(key: &JobKey) -> Result<(), Error> {
    name("step name", &key.step, MAX_STEP_BYTES)
}

fn name(what: &str, value: &str, max: usize) -> Result<(), Error> {
    if value.len() > max {
        return Err(bad(format!("{what} is {} bytes long; at most {max}", value.len())));
    }
    if value.chars().any(char::is_control) {
        return Err(bad(format!("{what} holds control characters")));
    }
    Ok(())
}

fn bad(message: String) -> Error {
    Error::new(ErrorCode::BadRequest, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_request;

    fn refused(line: &str) -> String {
        parse_request(&format!("{line}\n")).unwrap().validate().unwrap_err().message
    }

    #[test]
    fn long_names_control_characters_and_bins_out_of_range_are_refused() {
        let step = "9".repeat(MAX_STEP_BYTES + 1);
        let e = refused(&format!(r#"{{"op":"job_end","job":{{"job_id":1,"step":"{step}"}}}}"#));
        assert!(e.contains("step name") && e.contains("at most 64"), "{e}");
        let user = "u".repeat(MAX_NAME_BYTES + 1);
        let begin = |field: &str| {
            format!(r#"{{"op":"job_begin","job":{{"job_id":1,"step":""}},"uid":0,"gpus":[0],{field}}}"#)
        };
        assert!(refused(&begin(&format!(r#""user":"{user}""#))).contains("user"));
        assert!(refused(&begin(r#""name":"a\nb""#)).contains("control characters"));
        for bins in [0u64, 2001, u32::MAX as u64] {
            let e = refused(&format!(r#"{{"op":"job_summary","job":1,"bins":{bins}}}"#));
            assert!(e.contains("bins must be 1 to 2000"), "{e}");
        }
        parse_request("{\"op\":\"job_summary\",\"job\":1,\"bins\":2000}\n").unwrap().validate().unwrap();
        parse_request(&format!("{}\n", begin(r#""user":"alice","name":"train""#)))
            .unwrap()
            .validate()
            .unwrap();
    }

    #[test]
    fn unknown_fields_inside_a_job_key_are_refused() {
        for line in [
            r#"{"op":"job_end","job":{"job_id":1,"step":"","x":1}}"#,
            r#"{"op":"job_begin","job":{"job_id":1,"step":"","uid":5},"uid":0,"gpus":[0]}"#,
            r#"{"op":"acct","jobs":[{"job_id":1,"step":"","x":1}]}"#,
        ] {
            let err = parse_request(&format!("{line}\n")).unwrap_err();
            assert!(err.contains("unknown field"), "{line}: {err}");
        }
    }
}
