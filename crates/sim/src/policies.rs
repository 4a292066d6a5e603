//! The five policies, the per-job hints they read, and each job's power limit per policy,
//! decided by the engine ([`wattson_engine::choose`]) on a model fitted from three probes.

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use strum::{EnumString, IntoStaticStr, VariantNames};

use wattson_engine::Objective;

use super::SimError;
use super::cluster::{ClusterConfig, HintDistribution};
use super::scheduler::Placement;
use super::trace::TraceJob;
use super::workloads::Catalog;

/// A policy the simulator compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, EnumString, IntoStaticStr, VariantNames)]
#[strum(serialize_all = "kebab-case")]
pub enum PolicyKind {
    /// FIFO + EASY backfill, max power limit, every node always on.
    SlurmDefault,
    /// The same plus Slurm's idle timer (`SuspendTime`).
    SlurmPowersave,
    /// Each job at the engine's `Balanced { eta: 0.5 }` limit; nodes always on.
    ZeusPerJob,
    /// Engine per job under its slowdown bound, packing, right-sizing, price-aware release.
    Wattson,
    /// Lower bound: every job at its least-energy limit, no idle energy, no queueing.
    Oracle,
}

/// Every policy, in report order.
pub const ALL: [PolicyKind; 5] = [
    PolicyKind::SlurmDefault,
    PolicyKind::SlurmPowersave,
    PolicyKind::ZeusPerJob,
    PolicyKind::Wattson,
    PolicyKind::Oracle,
];

/// The `eta` of the Zeus baseline's balanced cost.
pub const ZEUS_ETA: f64 = 0.5;

impl PolicyKind {
    /// Command-line and report name.
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// Parses `all` or a comma-separated list of names; keeps report order, no duplicates.
    pub fn parse_list(s: &str) -> Result<Vec<PolicyKind>, SimError> {
        if s.trim() == "all" {
            return Ok(ALL.to_vec());
        }
        let mut out = Vec::new();
        for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let Ok(p) = part.parse::<PolicyKind>() else {
                return Err(SimError::Input(format!(
                    "unknown policy {part:?}: allowed all or a comma list of {}",
                    PolicyKind::VARIANTS.join(", ")
                )));
            };
            if !out.contains(&p) {
                out.push(p);
            }
        }
        if out.is_empty() {
            return Err(SimError::Input("no policy given".to_string()));
        }
        out.sort();
        Ok(out)
    }

    /// How the policy places jobs.
    pub fn placement(self) -> Placement {
        if self == PolicyKind::Wattson { Placement::Pack } else { Placement::FirstFit }
    }
}

/// A job ready to simulate: its trace values, workload and hints.
#[derive(Debug, Clone, PartialEq)]
pub struct SimJob {
    /// Trace name.
    pub id: String,
    /// Submission time (s).
    pub submit: f64,
    /// GPUs.
    pub gpus: u32,
    /// Run time at the max limit (s).
    pub duration: f64,
    /// Index into the catalog.
    pub workload: usize,
    /// Slowdown bound the user gave (fraction).
    pub bound: f64,
    /// How long the job may wait for cheaper electricity (s); 0: not deferrable.
    pub defer_window: f64,
    /// Limit index per policy: [default, powersave, zeus, wattson, oracle].
    pub setting: [usize; 5],
}

impl SimJob {
    /// The limit index this job runs at under `p`.
    pub fn setting_for(&self, p: PolicyKind) -> usize {
        self.setting[p as usize]
    }
}

/// Uniform draw in [0, 1) from 53 random bits.
fn unit(rng: &mut ChaCha8Rng) -> f64 {
    (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64
}

/// Draws (slowdown bound, deferral window) for each job, in trace order: three draws a job.
pub fn draw_hints(n: usize, d: &HintDistribution, seed: u64) -> Vec<(f64, f64)> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    (0..n)
        .map(|_| {
            let (u, v, w) = (unit(&mut rng), unit(&mut rng), unit(&mut rng));
            let mut acc = 0.0;
            let mut bound = d.slowdown.last().map_or(0.0, |p| p[0]);
            for [b, p] in &d.slowdown {
                acc += p;
                if u < acc {
                    bound = *b;
                    break;
                }
            }
            let window = if v < d.defer_fraction {
                d.defer_window_s[0] + w * (d.defer_window_s[1] - d.defer_window_s[0])
            } else {
                0.0
            };
            (bound, window)
        })
        .collect()
}

/// Maps jobs to workloads, draws hints and decides each job's limit for every policy.
/// Models are fitted once per workload and decisions cached per (workload, bound).
pub fn prepare(
    trace: &[TraceJob],
    catalog: &Catalog,
    cluster: &ClusterConfig,
    seed: u64,
) -> Result<Vec<SimJob>, SimError> {
    let hints = draw_hints(trace.len(), &cluster.hints, seed);
    let mut models = Vec::with_capacity(catalog.workloads.len());
    for w in &catalog.workloads {
        models.push(w.fit()?);
    }
    let mut cache: std::collections::BTreeMap<(usize, u64), usize> = std::collections::BTreeMap::new();
    let cap = cluster.total_gpus();
    let mut out = Vec::with_capacity(trace.len());
    for (t, (bound, window)) in trace.iter().zip(hints) {
        if u64::from(t.gpus) > cap {
            return Err(SimError::Input(format!(
                "job {} asks for {} GPUs; the cluster has {cap}",
                t.id, t.gpus
            )));
        }
        let wi = catalog
            .lookup(&t.tag, t.batch)
            .ok_or_else(|| SimError::Input(format!("no workload for job {} (tag {:?})", t.id, t.tag)))?;
        let w = &catalog.workloads[wi];
        let m = &models[wi];
        let wattson = *cache
            .entry((wi, bound.to_bits()))
            .or_insert_with(|| w.choose_idx(m, Objective::MinEnergy { max_slowdown: bound }));
        let zeus = *cache
            .entry((wi, u64::MAX))
            .or_insert_with(|| w.choose_idx(m, Objective::Balanced { eta: ZEUS_ETA }));
        let max = w.max_idx();
        out.push(SimJob {
            id: t.id.clone(),
            submit: t.submit,
            gpus: t.gpus,
            duration: t.duration,
            workload: wi,
            bound,
            defer_window: window,
            setting: [max, max, zeus, wattson, w.min_energy_idx()],
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_lists_parse_in_report_order() {
        assert_eq!(PolicyKind::parse_list("all").unwrap(), ALL.to_vec());
        assert_eq!(
            PolicyKind::parse_list("oracle, wattson,oracle").unwrap(),
            vec![PolicyKind::Wattson, PolicyKind::Oracle]
        );
        let e = PolicyKind::parse_list("fast").unwrap_err().to_string();
        assert!(e.contains("unknown policy \"fast\""), "{e}");
        assert!(PolicyKind::parse_list(" , ").is_err());
        let names: Vec<&str> = ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names, ["slurm-default", "slurm-powersave", "zeus-per-job", "wattson", "oracle"]);
        assert!(
            e.ends_with("a comma list of slurm-default, slurm-powersave, zeus-per-job, wattson, oracle"),
            "{e}"
        );
    }

    #[test]
    fn hint_draws_follow_the_distribution_and_the_seed() {
        let d = HintDistribution {
            slowdown: vec![[0.0, 0.25], [0.1, 0.75]],
            defer_fraction: 0.2,
            defer_window_s: [100.0, 200.0],
        };
        let a = draw_hints(20_000, &d, 7);
        assert_eq!(a, draw_hints(20_000, &d, 7));
        assert_ne!(a, draw_hints(20_000, &d, 8));
        let tight = a.iter().filter(|h| h.0 == 0.0).count() as f64 / 20_000.0;
        assert!((tight - 0.25).abs() < 0.015, "{tight}");
        let deferred: Vec<f64> = a.iter().map(|h| h.1).filter(|&w| w > 0.0).collect();
        assert!((deferred.len() as f64 / 20_000.0 - 0.2).abs() < 0.015);
        assert!(deferred.iter().all(|&w| (100.0..=200.0).contains(&w)));
    }
}
