//! The order Slurm tries queued jobs in.
//!
//! Slurm's default (`priority/basic`) is first in, first out. wattson ranks the queue by each
//! job's wait per unit of size, `wait / (GPUs · work_s)^size_exponent`: a small job that has
//! waited overtakes a large one that has waited as long, and every job's rank grows with its
//! wait, so none starves. Short jobs leaving the queue early shorten the mean wait; the slowed
//! jobs' energy saving no longer has to be paid in queueing.

use serde::{Deserialize, Serialize};
use strum::{EnumString, VariantNames};

use super::{ClusterPolicy, Queued, TunedPolicy};

/// How the queue is ordered.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema, EnumString, VariantNames,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum QueueOrder {
    /// By the time each job entered the queue (Slurm's `priority/basic`).
    Fifo,
    /// By wait per unit of size, highest first: `wait / (GPUs · work_s)^size_exponent`.
    ResponseRatio,
}

/// The order `p` keeps the queue in: wattson's own, or for the references the Slurm order
/// the run models (`slurm_order`, FIFO unless a what-if asks otherwise).
pub fn of(p: &TunedPolicy) -> QueueOrder {
    match p.kind {
        ClusterPolicy::Wattson => p.tuning.queue_order,
        _ => p.tuning.slurm_order,
    }
}

/// `queued` in the order `p` wants Slurm to try them at `now`, or `None` when that is the
/// order they are in. Ties keep the queue's order.
pub fn rank(p: &TunedPolicy, now: f64, queued: &[Queued]) -> Option<Vec<Queued>> {
    if of(p) == QueueOrder::Fifo || queued.len() < 2 {
        return None;
    }
    let alpha = p.tuning.size_exponent;
    let key = |q: &Queued| {
        let size = (f64::from(q.job.gpus.max(1)) * q.job.work_s.max(1.0)).powf(alpha);
        (now - q.eligible).max(0.0) / size
    };
    let keys: Vec<f64> = queued.iter().map(key).collect();
    if keys.windows(2).all(|w| w[0] >= w[1]) {
        return None;
    }
    let mut idx: Vec<usize> = (0..queued.len()).collect();
    idx.sort_by(|&a, &b| keys[b].total_cmp(&keys[a]));
    Some(idx.into_iter().map(|i| queued[i]).collect())
}
