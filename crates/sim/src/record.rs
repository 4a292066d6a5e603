//! What a simulated run records: per job (when, where, at what average power and slowdown)
//! and per run (the meter, the span). Tests recompute everything from these records.

use wattson_engine::cluster::ClusterPolicy;

use super::power::Meter;
use super::scheduler::Share;

/// What happened to one job under one policy.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRun {
    /// When the policy released it into Slurm's queue (its submission unless deferred) (s).
    pub eligible: f64,
    /// When the scheduler gave it GPUs (s); NaN if never.
    pub alloc: f64,
    /// When it started running (after any boot) (s); NaN if never.
    pub start: f64,
    /// When it ended (s); NaN if never.
    pub end: f64,
    /// Power limit it ran at, time-weighted over its run (W).
    pub limit_w: f64,
    /// Measured average power per GPU over its run (W).
    pub gpu_w: f64,
    /// Measured slowdown vs the max limit over its run (fraction; may be slightly negative:
    /// noise in the measurements).
    pub slowdown: f64,
    /// Its GPUs: (node, bit mask) per node.
    pub shares: Vec<Share>,
    /// Level changes while it ran.
    pub level_changes: u32,
    /// The jobs that shared its GPU: (job, from, to) (s).
    pub partners: Vec<(u32, f64, f64)>,
}

/// One policy's simulated run.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The policy.
    pub policy: ClusterPolicy,
    /// Slurm's `SuspendTime` it ran with, for the idle-timer policies (s).
    pub suspend_time_s: Option<f64>,
    /// Per job, in prepared-job order.
    pub jobs: Vec<JobRun>,
    /// The energy meter, finished at the last job end.
    pub meter: Meter,
    /// First submission (s).
    pub t0: f64,
    /// Last job end (s).
    pub t_end: f64,
    /// Jobs the policy held back past their submission.
    pub deferred: usize,
}
