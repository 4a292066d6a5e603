//! The policies the simulator compares (the one [`ClusterPolicy`], from the engine), the per-job
//! hints they read, and each job's engine decisions: its level table and its bounded and Zeus
//! levels, from a model fitted on three probes; the floor's measured least-energy level.

use std::collections::BTreeMap;

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use strum::VariantNames;

use wattson_engine::cluster::{JobView, Level, levels};
use wattson_engine::{ChooserConfig, Objective};

pub use wattson_engine::cluster::ClusterPolicy;

use super::SimError;
use super::cluster::{ClusterConfig, HintDistribution};
use super::trace::TraceJob;
use super::workloads::{Catalog, FloorMix};

/// Every policy, in report order.
/// `uniform-cap` runs only when the cluster file sets a budget, `slurm-shards` only where a
/// job may share a GPU.
pub const ALL: [ClusterPolicy; 8] = [
    ClusterPolicy::SlurmDefault,
    ClusterPolicy::SlurmPowersave,
    ClusterPolicy::SlurmShards,
    ClusterPolicy::ZeusPerJob,
    ClusterPolicy::PowersaveDvfs,
    ClusterPolicy::Wattson,
    ClusterPolicy::UniformCap,
    ClusterPolicy::Floor,
];

/// The `eta` of the Zeus baseline's balanced cost.
pub const ZEUS_ETA: f64 = 0.5;

/// Parses `all` or a comma-separated list of policy names; keeps report order, no duplicates.
pub fn parse_list(s: &str) -> Result<Vec<ClusterPolicy>, SimError> {
    if s.trim() == "all" {
        return Ok(ALL.to_vec());
    }
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Ok(p) = part.parse::<ClusterPolicy>() else {
            return Err(SimError::Input(format!(
                "unknown policy {part:?}: allowed all or a comma list of {}",
                ClusterPolicy::VARIANTS.join(", ")
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

/// A job ready to simulate: its trace values, workload and hints.
#[derive(Debug, Clone, PartialEq)]
pub struct SimJob {
    /// Trace name.
    pub id: String,
    /// Submission time (s).
    pub submit: f64,
    /// GPUs.
    pub gpus: u32,
    /// Run time at the max limit (s): the trace's, or its time limit if that is shorter (Slurm
    /// kills it there).
    pub duration: f64,
    /// Its time limit on the trace's GPU type (s): all that the policies know of its length.
    pub limit: f64,
    /// Whether it reaches its limit and is killed (the trace's run time exceeds the limit).
    pub killed: bool,
    /// The GPU types (group indices) it accepts; empty: any.
    pub gpu_types: Vec<u16>,
    /// Share of one GPU it asks for (carried for shared GPUs; the simulator gives whole GPUs).
    pub gpu_fraction: f64,
    /// Index into the catalog (the same setting on every GPU type).
    pub workload: usize,
    /// Its co-location class when its user lets it share a GPU and the model knows its
    /// workload (1-GPU jobs only); `None`: it never shares.
    pub share: Option<u16>,
    /// Slowdown bound the user gave (fraction).
    pub bound: f64,
    /// How long the job may wait for cheaper electricity (s); 0: not deferrable.
    pub defer_window: f64,
    /// The engine's and the floor's limit choices on each GPU type (the cluster's group order).
    pub choices: Vec<Choice>,
    /// The GPU type of the floor's least measured energy (its GPUs' and their node-base share).
    pub floor_type: usize,
}

/// A job's settings on one GPU type (indices into that type's measured limits).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Choice {
    /// The engine's choice under the bound, from the three-probe model.
    pub bounded: usize,
    /// The engine's Zeus `Balanced { eta: 0.5 }` choice.
    pub zeus: usize,
    /// The floor's run: the least *measured* energy within the bound, its work split between
    /// two limits at most ([`super::workloads::Workload::floor_mix`]).
    pub floor: FloorMix,
    /// The highest limit at or under the cluster's uniform power cap (the max without a budget).
    pub capped: usize,
}

impl SimJob {
    /// Its whole run time on GPU type `ty` at limit index `level` (s): the trace's duration,
    /// scaled by the type's pace and the level's measured time ratio.
    pub fn time_on(&self, ty: usize, level: usize, catalog: &Catalog) -> f64 {
        self.work_on(ty, catalog) * catalog.get(ty, self.workload).time_ratio(level)
    }

    /// Its run time on GPU type `ty` at the top limit (s): physics, never shown to a policy.
    pub fn work_on(&self, ty: usize, catalog: &Catalog) -> f64 {
        self.duration * catalog.pace(ty, self.workload)
    }

    /// Its time limit on GPU type `ty` (s), scaled by the type's pace as its run time is.
    pub fn limit_on(&self, ty: usize, catalog: &Catalog) -> f64 {
        self.limit * catalog.pace(ty, self.workload)
    }

    /// The engine's view of this job on GPU type `ty`; `id` is its index in the prepared jobs.
    /// Its length is its time limit: what Slurm knows.
    pub fn view(&self, id: u32, ty: usize, catalog: &Catalog) -> JobView {
        let c = &self.choices[ty];
        JobView {
            id,
            gpus: self.gpus,
            bound: self.bound,
            work_s: self.limit_on(ty, catalog),
            model: (ty * catalog.len() + self.workload) as u32,
            bounded: c.bounded as u16,
            zeus: c.zeus as u16,
            capped: c.capped as u16,
            share: self.share,
        }
    }
}

/// The engine's level table of every workload on every GPU type, from its three-probe model;
/// workload `w` on type `ty` at index `ty · workloads + w` (as [`SimJob::view`] names it).
pub fn level_tables(catalog: &Catalog) -> Result<Vec<Vec<Level>>, SimError> {
    let cfg = ChooserConfig::default();
    catalog.types.iter().flatten().map(|w| Ok(levels::table(&w.fit()?, &w.limits, &cfg))).collect()
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

/// Draws whether each job's user lets it share a GPU (probability `fraction`), in trace order,
/// from its own stream so that the other hints do not change with it.
fn draw_opt_in(n: usize, fraction: f64, seed: u64) -> Vec<bool> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5348_4152_4547_5055);
    (0..n).map(|_| unit(&mut rng) < fraction).collect()
}

/// Maps jobs to workloads, draws the hints the trace does not give and decides each job's limit
/// for every policy.
/// Models are fitted once per workload and decisions cached per (workload, bound).
pub fn prepare(
    trace: &[TraceJob],
    catalog: &Catalog,
    cluster: &ClusterConfig,
    seed: u64,
) -> Result<Vec<SimJob>, SimError> {
    let hints = draw_hints(trace.len(), &cluster.hints, seed);
    let limits = cluster.limits.limits(trace, seed);
    let models = catalog
        .types
        .iter()
        .map(|ws| ws.iter().map(|w| w.fit()).collect())
        .collect::<Result<Vec<Vec<_>>, _>>()?;
    let mut cache: BTreeMap<(usize, u64), Vec<Choice>> = BTreeMap::new();
    let base_share = cluster.node.base_w / f64::from(cluster.gpus_per_node);
    let gpus_of = |ty: usize| u64::from(cluster.groups[ty].nodes) * u64::from(cluster.gpus_per_node);
    let cap = (0..cluster.groups.len()).map(gpus_of).max().unwrap_or(0);
    let mut out = Vec::with_capacity(trace.len());
    let opt_in = draw_opt_in(trace.len(), cluster.hints.share_fraction, seed);
    for (((t, (bound, window)), limit), shares) in trace.iter().zip(hints).zip(limits).zip(opt_in) {
        // Hints the trace gives (a site's history) replace the drawn ones; the draws stay in
        // trace order either way, so a job's other draws do not depend on them.
        let (bound, window) = (t.bound.unwrap_or(bound), t.defer_window.unwrap_or(window));
        let gpu_types = accepted_types(t, cluster)?;
        let shares = t.gpus <= cluster.hints.share_gpus && (shares || t.gpu_fraction < 1.0);
        let bound = if shares { bound.max(cluster.hints.share_bound) } else { bound };
        if u64::from(t.gpus) > cap {
            let of =
                if cluster.groups.len() > 1 { "the largest group of one GPU type" } else { "the cluster" };
            return Err(SimError::Input(format!("job {} asks for {} GPUs; {of} has {cap}", t.id, t.gpus)));
        }
        let wi = catalog
            .lookup(&t.tag, t.batch)
            .ok_or_else(|| SimError::Input(format!("no workload for job {} (tag {:?})", t.id, t.tag)))?;
        let choices = cache
            .entry((wi, bound.to_bits()))
            .or_insert_with(|| {
                catalog
                    .types
                    .iter()
                    .zip(&models)
                    .map(|(ws, ms)| {
                        let (w, m) = (&ws[wi], &ms[wi]);
                        Choice {
                            bounded: w.choose_idx(m, Objective::MinEnergy { max_slowdown: bound }),
                            zeus: w.choose_idx(m, Objective::Balanced { eta: ZEUS_ETA }),
                            floor: w.floor_mix(bound),
                            capped: cluster.uniform_cap_w().map_or(w.max_idx(), |cap| w.capped_idx(cap)),
                        }
                    })
                    .collect()
            })
            .clone();
        // Energy per unit of work at the floor's level: the GPU's draw and its node-base share
        // over the time that level takes on that type.
        let floor_j = |ty: usize| {
            let w = catalog.get(ty, wi);
            let f = choices[ty].floor;
            (w.mix_power(f) + base_share) * w.mix_time_ratio(f) * w.time[w.max_idx()]
        };
        let floor_type = (0..choices.len())
            .filter(|&ty| gpus_of(ty) >= u64::from(t.gpus))
            .filter(|&ty| gpu_types.is_empty() || gpu_types.contains(&(ty as u16)))
            .min_by(|&a, &b| floor_j(a).total_cmp(&floor_j(b)))
            .unwrap_or(0);
        out.push(SimJob {
            id: t.id.clone(),
            submit: t.submit,
            gpus: t.gpus,
            duration: t.duration.min(limit),
            limit,
            killed: t.duration > limit,
            gpu_types,
            gpu_fraction: t.gpu_fraction,
            workload: wi,
            share: catalog.colocation.as_ref().filter(|_| shares).and_then(|c| {
                let w = catalog.get(0, wi);
                c.class_of(&w.network, w.batch)
            }),
            bound,
            defer_window: window,
            choices,
            floor_type,
        });
    }
    Ok(out)
}

/// The cluster's groups whose GPU type job `t` accepts (empty: it names none, so any); an
/// error when it names types but the cluster has none of them, or none big enough for it.
fn accepted_types(t: &TraceJob, c: &ClusterConfig) -> Result<Vec<u16>, SimError> {
    if t.gpu_types.is_empty() {
        return Ok(Vec::new());
    }
    let ok: Vec<u16> = (0..c.groups.len())
        .filter(|&g| t.gpu_types.iter().any(|n| n.eq_ignore_ascii_case(&c.groups[g].gpu)))
        .filter(|&g| u64::from(c.groups[g].nodes) * u64::from(c.gpus_per_node) >= u64::from(t.gpus))
        .map(|g| g as u16)
        .collect();
    if ok.is_empty() {
        let have: Vec<&str> = c.groups.iter().map(|g| g.gpu.as_str()).collect();
        return Err(SimError::Input(format!(
            "job {} accepts GPU types {} and {} GPUs: the cluster has {} (allowed: at least one of its types, with enough GPUs)",
            t.id,
            t.gpu_types.join(";"),
            t.gpus,
            have.join(", ")
        )));
    }
    Ok(ok)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policy_lists_parse_in_report_order() {
        assert_eq!(parse_list("all").unwrap(), ALL.to_vec());
        assert_eq!(
            parse_list("floor, wattson,floor").unwrap(),
            vec![ClusterPolicy::Wattson, ClusterPolicy::Floor]
        );
        let e = parse_list("fast").unwrap_err().to_string();
        assert!(e.contains("unknown policy \"fast\""), "{e}");
        assert!(parse_list(" , ").is_err());
        assert!(parse_list("oracle").is_err(), "oracle is replaced by floor");
        let names: Vec<&str> = ALL.iter().map(|k| k.name()).collect();
        let want = [
            "slurm-default",
            "slurm-powersave",
            "slurm-shards",
            "zeus-per-job",
            "powersave-dvfs",
            "wattson",
            "uniform-cap",
            "floor",
        ];
        assert_eq!(names, want);
        assert!(e.ends_with(&format!("a comma list of {}", want.join(", "))), "{e}");
    }

    #[test]
    fn hints_a_trace_gives_replace_the_draws_and_leave_the_others_alone() {
        let c = ClusterConfig::from_toml(crate::cluster::tests::SMALL, "c").unwrap();
        let cat = Catalog::from_zeus_csv(&crate::workloads::tests::tiny_zeus(), "z").unwrap();
        let text = "submit,gpus,duration,slowdown_pct,defer_s\n0,1,600,7,1234\n10,1,600,,\n20,1,600,0,0\n";
        let trace = crate::trace::parse(text, "t.csv", crate::TraceFormat::Auto).unwrap();
        let jobs = prepare(&trace, &cat, &c, 3).unwrap();
        let drawn = draw_hints(3, &c.hints, 3);
        assert_eq!((jobs[0].bound, jobs[0].defer_window), (0.07, 1234.0));
        assert_eq!((jobs[1].bound, jobs[1].defer_window), drawn[1]);
        assert_eq!((jobs[2].bound, jobs[2].defer_window), (0.0, 0.0));
    }

    #[test]
    fn hint_draws_follow_the_distribution_and_the_seed() {
        let d = HintDistribution {
            slowdown: vec![[0.0, 0.25], [0.1, 0.75]],
            defer_fraction: 0.2,
            defer_window_s: [100.0, 200.0],
            share_fraction: 0.0,
            share_gpus: 1,
            share_bound: 0.0,
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
