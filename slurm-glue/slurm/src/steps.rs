//! Job steps on a compute node: the SPANK plugin tells wattsond, from each step's slurmstepd,
//! that the step began and ended, so that each step has its own record (`42.batch`, `42.0`),
//! metered on its job's GPUs. Every failure is a log line, never a failed step.

use wattson_protocol::{ClientError, ErrorCode, JobBegin, Reply, Request};
pub use wattson_types::job::JobKey;
use wattson_types::job::{GpuRef, Hints};

use crate::node::PluginArgs;

/// Slurm's step id of a batch script (`SLURM_BATCH_SCRIPT`).
const BATCH_STEP: u32 = 0xffff_fffb;
/// Slurm's step id of the extern step (`SLURM_EXTERN_CONT`).
const EXTERN_STEP: u32 = 0xffff_fffc;
/// Slurm's step id of an interactive step (`SLURM_INTERACTIVE_STEP`).
const INTERACTIVE_STEP: u32 = 0xffff_fffa;
/// Step ids from here up name no step of their own (pending, extern and the like).
const FIRST_SPECIAL: u32 = 0xffff_fff0;

/// The key of step `step_id` of job `job_id` as sacct names it (`42.0`, `42.batch`,
/// `42.interactive`). `None` for the extern step, which spans the job's allocation (its energy
/// is the job's own record), and for the ids of no real step.
pub fn step_key(job_id: u32, step_id: u32) -> Option<JobKey> {
    let step = match step_id {
        BATCH_STEP => "batch".to_string(),
        INTERACTIVE_STEP => "interactive".to_string(),
        EXTERN_STEP => return None,
        id if id >= FIRST_SPECIAL => return None,
        id => id.to_string(),
    };
    Some(JobKey { job_id, step })
}

/// Registers a step with wattsond on `gpus` (Slurm's numbers, comma-separated; empty: its job's
/// GPUs here); returns the log line, or `None` when its job has no record here (no GPUs on this
/// node).
pub fn begin(args: &PluginArgs, step: JobKey, uid: u32, gpus: &str) -> Result<Option<String>, String> {
    let gpus: Vec<GpuRef> = gpus.split(',').filter(|s| !s.trim().is_empty()).map(GpuRef::parse).collect();
    let request = Request::JobBegin(JobBegin {
        job: step.clone(),
        uid,
        user: None,
        name: None,
        account: None,
        gpus,
        hints: Hints::default(),
        shares_gpus: false,
    });
    let config = args.load()?;
    match args.call_with(&config, &request) {
        Ok(Reply::Begun { job, .. }) => Ok(Some(format!("wattson: step {job} began"))),
        Ok(other) => Err(format!("unexpected reply {other:?}")),
        Err(ClientError::Refused(e)) if e.code == ErrorCode::NotRunning => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Closes a step's record; returns the log line, or `None` when the step has no record here.
pub fn end(args: &PluginArgs, step: JobKey) -> Result<Option<String>, String> {
    let config = args.load()?;
    match args.call_with(&config, &Request::JobEnd { job: step }) {
        Ok(Reply::Ended { record }) => {
            Ok(Some(format!("wattson: step {} ended: {:.0} J GPU energy", record.key, record.energy_j())))
        }
        Ok(other) => Err(format!("unexpected reply {other:?}")),
        Err(ClientError::Refused(e)) if e.code == ErrorCode::NotRunning => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_named_as_sacct_names_them_and_the_extern_step_is_the_job() {
        let key = |id| step_key(42, id).map(|k| k.to_string());
        assert_eq!(key(0).as_deref(), Some("42.0"));
        assert_eq!(key(7).as_deref(), Some("42.7"));
        assert_eq!(key(0xffff_fffb).as_deref(), Some("42.batch"));
        assert_eq!(key(0xffff_fffa).as_deref(), Some("42.interactive"));
        assert_eq!(key(0xffff_fffc), None);
        assert_eq!(key(0xffff_fffd), None);
        assert_eq!(key(u32::MAX), None);
    }
}
