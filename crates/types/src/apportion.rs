//! Dividing a shared GPU's energy among the jobs on it. Pure: no I/O, no clock.
//!
//! Over each interval between two readings, the GPU's energy is divided among the jobs that
//! hold it by weights: each job's processes' SM utilisation as the driver reports it per
//! process ([`Split::SmShare`]), or, where the driver gives none (or all of it is zero),
//! equal weights ([`Split::Equal`]). A counter difference is divided in whole millijoules by
//! largest remainders (ties to the first job in order), so the parts add up to the
//! difference exactly.

use serde::{Deserialize, Serialize};
use strum::{EnumString, IntoStaticStr};

/// How a shared GPU's energy was divided among its jobs. Reports, the store and
/// [`std::str::FromStr`] say `sm-share`, `equal`, `sm-share+equal` or `mig-slices`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, EnumString, IntoStaticStr)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Split {
    /// By each job's share of the GPU's SM utilisation, from the driver's per-process figures.
    SmShare,
    /// In equal parts: the driver gave no per-process utilisation.
    Equal,
    /// Some intervals by SM share, others in equal parts.
    #[strum(serialize = "sm-share+equal")]
    #[serde(rename = "sm-share-and-equal")]
    Mixed,
    /// By the compute slices of the MIG instances each job holds on the GPU.
    MigSlices,
}

impl Split {
    /// `sm-share`, `equal`, `sm-share+equal` or `mig-slices`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The split of a meter divided by `a` at some times and by `b` at others.
    pub fn combine(a: Split, b: Split) -> Split {
        if a == b { a } else { Split::Mixed }
    }
}

/// A job's own SM activity on a GPU it may share: its processes' SM utilisation times the SM
/// clock, summed over the intervals in which they used the SMs (MHz·s), alone on the GPU and
/// beside another job, with the seconds each covers. For a compute-bound job the rate is its
/// pace, so the two rates give what sharing cost it ([`SmActivity::slowdown`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SmActivity {
    /// Seconds alone on the GPU with its processes on the SMs.
    pub alone_s: f64,
    /// Its activity over those seconds, MHz·s.
    pub alone: f64,
    /// Seconds beside another job with its processes on the SMs.
    pub shared_s: f64,
    /// Its activity over those seconds, MHz·s.
    pub shared: f64,
}

/// The fewest seconds of each kind (alone, beside another job) a slowdown is measured over.
pub const MIN_SLOWDOWN_S: f64 = 1.0;

impl SmActivity {
    /// Adds `secs` seconds of `activity` MHz·s, beside another job or alone (`shared`).
    pub fn add(&mut self, shared: bool, secs: f64, activity: f64) {
        if shared {
            self.shared_s += secs;
            self.shared += activity;
        } else {
            self.alone_s += secs;
            self.alone += activity;
        }
    }

    /// How much slower the job ran beside another job than alone (time ratio minus one, never
    /// below 0): its rate alone over its rate shared, less one. `None` until it ran at least
    /// [`MIN_SLOWDOWN_S`] each way with its processes on the SMs.
    pub fn slowdown(&self) -> Option<f64> {
        if self.alone_s < MIN_SLOWDOWN_S || self.shared_s < MIN_SLOWDOWN_S {
            return None;
        }
        let (alone, shared) = (self.alone / self.alone_s, self.shared / self.shared_s);
        (alone > 0.0 && shared > 0.0).then(|| (alone / shared - 1.0).max(0.0))
    }

    /// How much longer sharing made the job's run (time ratio minus one, what its slowdown
    /// bound limits): its time on the SMs over the time its work would have taken alone at its
    /// rate alone, less one. `None` where [`SmActivity::slowdown`] is.
    pub fn run_slowdown(&self) -> Option<f64> {
        let pair = self.slowdown()?;
        let alone_time = self.alone_s + self.shared_s / (1.0 + pair);
        Some(((self.alone_s + self.shared_s) / alone_time - 1.0).max(0.0))
    }
}

/// The weights a GPU's energy is divided by, and the rule they come from: `sm` is each job's
/// SM utilisation (percent, summed over its processes; `None` where the driver says nothing).
pub fn weights(sm: &[Option<u64>]) -> (Vec<u64>, Split) {
    if sm.iter().all(Option::is_some) && sm.iter().flatten().sum::<u64>() > 0 {
        (sm.iter().map(|w| w.unwrap_or(0)).collect(), Split::SmShare)
    } else {
        (vec![1; sm.len()], Split::Equal)
    }
}

/// The weights a GPU in MIG mode divides its energy by: each job's MIG instances' compute
/// slices, summed (`held`: each job's instances on the GPU). `None` where a job holds none of
/// its instances or none has a slice: the GPU is not divided by slices then.
pub fn mig_weights(held: &[&[crate::gpu::MigInstance]]) -> Option<Vec<u64>> {
    let weights: Vec<u64> =
        held.iter().map(|instances| instances.iter().map(|m| u64::from(m.compute_slices)).sum()).collect();
    weights.iter().all(|&w| w > 0).then_some(weights)
}

/// Divides `total` mJ by `weights` in whole mJ: the parts add up to `total` exactly. Each part
/// is its weight's share rounded down; the mJ left over go one each to the largest remainders,
/// ties to the earlier part. All weights zero divides equally.
pub fn divide_exact(total: u64, weights: &[u64]) -> Vec<u64> {
    if weights.is_empty() {
        return Vec::new();
    }
    let equal = vec![1u64; weights.len()];
    let weights = if weights.iter().all(|&w| w == 0) { &equal[..] } else { weights };
    let sum: u128 = weights.iter().map(|&w| u128::from(w)).sum();
    let mut parts: Vec<u64> = Vec::with_capacity(weights.len());
    let mut remainders: Vec<(u128, usize)> = Vec::with_capacity(weights.len());
    for (i, &w) in weights.iter().enumerate() {
        let scaled = u128::from(total) * u128::from(w);
        parts.push((scaled / sum) as u64);
        remainders.push((scaled % sum, i));
    }
    let left = total - parts.iter().sum::<u64>();
    // Largest remainder first; equal remainders in the parts' order.
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    for &(_, i) in remainders.iter().take(left as usize) {
        parts[i] += 1;
    }
    parts
}

/// Divides `total` mJ (not a whole counter difference: estimated from power) by `weights`;
/// the last part takes what rounding leaves, so the parts add up to `total`.
pub fn divide(total: f64, weights: &[u64]) -> Vec<f64> {
    let equal = vec![1u64; weights.len()];
    let weights = if weights.iter().all(|&w| w == 0) { &equal[..] } else { weights };
    let sum: f64 = weights.iter().map(|&w| w as f64).sum();
    let mut parts: Vec<f64> = weights.iter().map(|&w| total * w as f64 / sum).collect();
    if let Some((last, rest)) = parts.split_last_mut() {
        *last = total - rest.iter().sum::<f64>();
    }
    parts
}

/// The variable wattson's job_submit plugin sets in a job's SPANK environment (which its
/// nodes' prolog sees): `1` when the job asked for part of a GPU (shards, MPS), else empty.
pub const SHARES_GPUS_VAR: &str = "SPANK_WATTSON_SHARES_GPUS";

/// The variables that say a job holds part of a GPU when set and not empty: wattson's
/// [`SHARES_GPUS_VAR`] (in a prolog), and Slurm's own in a job's steps (a `gres/shard` job's
/// `SLURM_SHARDS_ON_NODE`, a `gres/mps` job's `CUDA_MPS_ACTIVE_THREAD_PERCENTAGE`).
pub const SHARING_VARS: [&str; 3] =
    [SHARES_GPUS_VAR, "SLURM_SHARDS_ON_NODE", "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"];

/// Whether a job's environment (`env` gives a variable's value, `None` when unset) says that
/// Slurm lets other jobs hold its GPUs at once ([`SHARING_VARS`]).
pub fn shares_gpus(env: impl Fn(&str) -> Option<String>) -> bool {
    SHARING_VARS.iter().any(|name| env(name).is_some_and(|v| !v.trim().is_empty()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shard_and_mps_jobs_share_their_gpus_and_whole_gpu_jobs_do_not() {
        let env = |vars: &'static [(&'static str, &'static str)]| {
            move |name: &str| vars.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
        };
        assert!(shares_gpus(env(&[("SLURM_SHARDS_ON_NODE", "1")])));
        assert!(shares_gpus(env(&[("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE", "50")])));
        assert!(!shares_gpus(env(&[("SLURM_JOB_GPUS", "0"), ("CUDA_VISIBLE_DEVICES", "0")])));
        assert!(shares_gpus(env(&[("SPANK_WATTSON_SHARES_GPUS", "1")])));
        assert!(!shares_gpus(env(&[("SPANK_WATTSON_SHARES_GPUS", ""), ("SLURM_JOB_GPUS", "0")])));
    }

    #[test]
    fn whole_millijoules_add_up_exactly_and_remainders_go_deterministically() {
        assert_eq!(divide_exact(10, &[1, 1, 1]), vec![4, 3, 3]);
        assert_eq!(divide_exact(11, &[1, 1, 1]), vec![4, 4, 3]);
        assert_eq!(divide_exact(100, &[30, 70]), vec![30, 70]);
        assert_eq!(divide_exact(7, &[1, 2]), vec![2, 5]); // 2.33, 4.67: the larger remainder wins
        assert_eq!(divide_exact(5, &[0, 0]), vec![3, 2]);
        assert_eq!(divide_exact(5, &[0, 3]), vec![0, 5]);
        assert_eq!(divide_exact(0, &[4, 5]), vec![0, 0]);
        assert!(divide_exact(9, &[]).is_empty());
        assert_eq!(
            divide_exact(u64::MAX, &[u64::MAX, 1]).iter().map(|&p| u128::from(p)).sum::<u128>(),
            u128::from(u64::MAX)
        );
    }

    #[test]
    fn parts_always_sum_to_the_total() {
        let mut seed = 12345u64;
        let mut next = || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            seed >> 33
        };
        for _ in 0..2000 {
            let n = (next() % 5 + 1) as usize;
            let weights: Vec<u64> = (0..n).map(|_| next() % 101).collect();
            let total = next() % 10_000_000;
            let parts = divide_exact(total, &weights);
            assert_eq!(parts.iter().sum::<u64>(), total, "{weights:?}");
            let wsum: u64 = weights.iter().sum();
            for (p, w) in parts.iter().zip(&weights) {
                let ideal =
                    if wsum == 0 { total as f64 / n as f64 } else { total as f64 * *w as f64 / wsum as f64 };
                assert!((*p as f64 - ideal).abs() < 1.0, "{p} vs {ideal}");
            }
            let f = divide(total as f64 + 0.5, &weights);
            assert!((f.iter().sum::<f64>() - (total as f64 + 0.5)).abs() < 1e-6);
        }
    }

    #[test]
    fn a_slowdown_is_the_rate_alone_over_the_rate_shared_once_both_were_seen_long_enough() {
        let mut sm = SmActivity::default();
        // 80% of a 1980 MHz clock alone for 3 s, then 20% of it for 2 s beside another job.
        sm.add(false, 3.0, 0.8 * 1980.0 * 3.0);
        assert_eq!(sm.slowdown(), None, "never shared");
        sm.add(true, 0.5, 0.2 * 1980.0 * 0.5);
        assert_eq!(sm.slowdown(), None, "shared too briefly");
        sm.add(true, 1.5, 0.2 * 1980.0 * 1.5);
        assert!((sm.slowdown().unwrap() - 3.0).abs() < 1e-9, "{:?}", sm.slowdown());
        // Its 3 s alone and the work of its 2 s shared (0.5 s alone): 5 s for 3.5, 43% longer.
        assert!((sm.run_slowdown().unwrap() - (5.0 / 3.5 - 1.0)).abs() < 1e-9, "{:?}", sm.run_slowdown());
        // Faster beside another job (a clock raised meanwhile) is no slowdown.
        let faster = SmActivity { alone_s: 2.0, alone: 1000.0, shared_s: 2.0, shared: 1500.0 };
        assert_eq!(faster.slowdown(), Some(0.0));
        let never_alone = SmActivity { shared_s: 5.0, shared: 100.0, ..SmActivity::default() };
        assert_eq!(never_alone.slowdown(), None);
    }

    #[test]
    fn mig_jobs_weigh_by_their_instances_compute_slices() {
        let m = |slices: u32| crate::gpu::MigInstance {
            uuid: format!("MIG-{slices}"),
            profile: format!("{slices}g.40gb"),
            gpu_instance_id: None,
            compute_instance_id: None,
            compute_slices: slices,
        };
        let (a, b, c) = ([m(3)], [m(4)], [m(1), m(2)]);
        assert_eq!(mig_weights(&[&a, &b]), Some(vec![3, 4]));
        assert_eq!(mig_weights(&[&a, &c]), Some(vec![3, 3]), "two instances of one GPU add up");
        assert_eq!(mig_weights(&[&a, &[]]), None, "a job with no instance of the GPU");
        assert_eq!(divide_exact(7001, &mig_weights(&[&a, &b]).unwrap()), vec![3000, 4001]);
        assert_eq!("mig-slices".parse::<Split>(), Ok(Split::MigSlices));
        assert_eq!(Split::MigSlices.as_str(), "mig-slices");
    }

    #[test]
    fn sm_share_only_when_every_job_has_a_figure_and_some_is_not_zero() {
        assert_eq!(weights(&[Some(30), Some(60)]), (vec![30, 60], Split::SmShare));
        assert_eq!(weights(&[Some(30), None]), (vec![1, 1], Split::Equal));
        assert_eq!(weights(&[Some(0), Some(0)]), (vec![1, 1], Split::Equal));
        assert_eq!(weights(&[Some(0), Some(5)]), (vec![0, 5], Split::SmShare));
        assert_eq!(Split::combine(Split::Equal, Split::SmShare), Split::Mixed);
        assert_eq!(Split::Mixed.as_str(), "sm-share+equal");
        assert_eq!("sm-share".parse::<Split>(), Ok(Split::SmShare));
    }
}
