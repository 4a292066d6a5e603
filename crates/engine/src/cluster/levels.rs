//! DVFS levels per job: fixed per job for the references, queue-aware over the job's life for
//! wattson, and within the cluster power budget.
//!
//! wattson runs a job at the least-energy level its remaining slowdown allowance permits unless
//! a queued job that is already late (it has waited as long as it will run) waits for its GPUs:
//! then it is raised toward full speed (a slowdown there is paid in queueing), while running
//! jobs that end after those jobs could start keep saving. A job that has fallen `max_lag_s`
//! behind its full-speed pace runs at full speed for the rest of its run
//! ([`super::Snapshot::lagging`]). The allowance is tracked over the whole run: a job that ran
//! fast while the queue waited for it may go slower afterwards, as long as
//! `elapsed + remaining work · (1 + slowdown_hi) ≤ (1 + bound) · work`.

use crate::choose::{ChooserConfig, sigma_at};
use crate::model::{DvfsModel, Knob};

use super::{Actions, ClusterPolicy, JobView, Level, Queued, Running, Snapshot, TunedPolicy};

/// The level a reference policy holds a job at for its whole run; `None`: the top level
/// (Slurm), or decided over the run (wattson).
pub fn fixed_level(kind: ClusterPolicy, job: &JobView) -> Option<u16> {
    match kind {
        ClusterPolicy::ZeusPerJob => Some(job.zeus),
        ClusterPolicy::PowersaveDvfs => Some(job.bounded),
        ClusterPolicy::UniformCap => Some(job.capped),
        ClusterPolicy::SlurmDefault
        | ClusterPolicy::SlurmPowersave
        | ClusterPolicy::SlurmShards
        | ClusterPolicy::Wattson
        | ClusterPolicy::Floor => None,
    }
}

/// The level table of `model` over `settings` (increasing): each level's pessimistic
/// slowdown (as [`mod@crate::choose`] judges the bound) and predicted energy ratio. Levels
/// whose saving is inside the model's noise get an infinite slowdown, so no bound admits them.
pub fn table(model: &DvfsModel, settings: &[f64], cfg: &ChooserConfig) -> Vec<Level> {
    let Some(&max) = settings.last() else { return Vec::new() };
    let top = model.predict(max);
    settings
        .iter()
        .map(|&s| {
            let p = model.predict(s);
            // As the chooser judges it: a measured level on its measurement.
            let sigma = sigma_at(model, s, &p, cfg);
            let judged = if cfg.pessimistic { p.time_hi.max(p.time) } else { p.time };
            let mut slowdown_hi = judged / top.time - 1.0 + cfg.z * sigma;
            let energy_ratio = p.energy / top.energy;
            if s == max {
                slowdown_hi = 0.0;
            } else if !(slowdown_hi.is_finite() && energy_ratio.is_finite())
                || 1.0 - energy_ratio < cfg.min_saving_sigmas * sigma
            {
                slowdown_hi = f64::INFINITY;
            }
            // The power measured at the next probed setting up bounds the draw (power rises
            // with either knob); a power limit bounds it too.
            let above = model.settings.iter().zip(&model.powers).find(|(l, _)| **l >= s).map(|(_, w)| *w);
            let cap_w = match model.knob {
                Knob::PowerLimit => above.map_or(s, |w| w.min(s)),
                Knob::SmClock => above.unwrap_or(p.power * (1.0 + 3.0 * p.rel_sigma)),
            }
            .max(p.power);
            Level { setting: s, slowdown_hi, energy_ratio, power_w: p.power, cap_w }
        })
        .collect()
}

/// The least-energy level of `levels` whose pessimistic slowdown is at most `allowed`,
/// counting `overhead_w` per GPU for as long as the job runs (its share of the node's base
/// draw: a slower job keeps its node on longer); the top level when none qualifies.
pub fn least_energy_within(levels: &[Level], allowed: f64, overhead_w: f64) -> u16 {
    let top = levels.len().saturating_sub(1);
    // Energy per unit of work with the overhead, relative to the top level's GPU energy:
    // (P + h)·t / (P_top·t_top) = energy_ratio · (1 + h / P).
    let cost = |l: &Level| {
        if l.power_w > 0.0 { l.energy_ratio * (1.0 + overhead_w / l.power_w) } else { l.energy_ratio }
    };
    let mut best = top;
    for (i, l) in levels.iter().enumerate() {
        if l.slowdown_hi <= allowed && cost(l) < cost(&levels[best]) {
            best = i;
        }
    }
    best as u16
}

/// The slowdown the rest of `r`'s run may take and still meet its bound over the whole run.
pub fn allowance(r: &Running) -> f64 {
    let work = r.job.work_s;
    let left = (1.0 - r.progress).max(0.0) * work;
    if left <= 1e-9 * work.max(1.0) {
        return 0.0;
    }
    let budget = (1.0 + r.job.bound) * work - r.elapsed_s;
    (budget / left - 1.0).max(0.0)
}

/// Unallocated GPUs expected `dvfs_horizon_s` from now: free now, plus what running jobs
/// release by then (at their top-level pace), minus the forecast arrivals.
pub fn projected_free(p: &TunedPolicy, s: &Snapshot, free: f64) -> f64 {
    let h = p.tuning.dvfs_horizon_s;
    if h <= 0.0 {
        return free;
    }
    let gpn = s.nodes.first().map_or(1, |n| n.gpus.max(1));
    let (small, whole) = super::power::arrival_rate(s, p.tuning.forecast_window_s, gpn);
    let frees: u32 =
        s.running.iter().filter(|r| (1.0 - r.progress) * r.job.work_s <= h).map(|r| r.job.gpus).sum();
    free + f64::from(frees) - (small + whole) * h
}

/// Whether enough GPUs are free (`dvfs_min_free`) and stay free over the DVFS horizon
/// (`dvfs_horizon_s`) for running jobs to be slowed at all.
pub fn capacity_gates_pass(p: &TunedPolicy, s: &Snapshot) -> bool {
    let free = f64::from(unallocated(s));
    let total: u32 = s.nodes.iter().map(|n| n.gpus).sum();
    free >= p.tuning.dvfs_min_free * f64::from(total) && projected_free(p, s, free) >= 0.0
}

/// GPUs of `s` that no running job holds (on nodes in any power state).
fn unallocated(s: &Snapshot) -> u32 {
    let total: u32 = s.nodes.iter().map(|n| n.gpus).sum();
    let allocated: u32 = s.running.iter().map(|r| r.job.gpus).sum();
    total.saturating_sub(allocated)
}

/// The running jobs the queue waits for, by id (sorted): taking running jobs in the order they
/// are expected to end at full speed, those whose GPUs are needed, with the unallocated ones,
/// before every late queued job (in queue order) can start where its shape fits (at most a
/// node's GPUs on one node, more on whole nodes). A job that ends after that frees GPUs no
/// late job is waiting for, so slowing it delays no one who is late. A queued job is late
/// once it has waited `raise_after_runs` times its own run at full speed. With
/// [`Snapshot::job_nodes`], a queued job counts only the free GPUs of the nodes it may use and
/// waits only for the running jobs that hold one of them (another partition's jobs, or those
/// of nodes it did not ask for, are not raised for it).
pub fn waited_for(p: &TunedPolicy, s: &Snapshot) -> Vec<u32> {
    let late = |q: &&Queued| s.now - q.eligible >= p.tuning.raise_after_runs * q.job.work_s;
    if !s.queued.iter().any(|q| late(&q)) {
        return Vec::new();
    }
    let mut ends: Vec<(f64, u32, u32)> =
        s.running.iter().map(|r| ((1.0 - r.progress) * r.job.work_s, r.job.id, r.job.gpus)).collect();
    ends.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut out = walk(s, &ends, late);
    out.sort_unstable();
    out
}

/// [`waited_for`]'s walk: free GPUs counted per node, a queued job started only where its
/// shape fits ([`fit`]); a running job whose nodes are not known frees GPUs any job may use.
fn walk(s: &Snapshot, ends: &[(f64, u32, u32)], late: impl Fn(&&Queued) -> bool) -> Vec<u32> {
    let mut free: Vec<u32> = s.nodes.iter().map(|n| n.free_gpus).collect();
    let every_node: Vec<u32> = (0..free.len() as u32).collect();
    // GPUs freed by running jobs whose nodes are unknown: any queued job may use them.
    let mut loose = 0u32;
    let mut taken = vec![false; ends.len()];
    let mut out = Vec::new();
    for q in s.queued.iter().filter(late) {
        if out.len() == ends.len() {
            // Every running job is waited for already: later jobs can add no one.
            break;
        }
        let usable = s.job_nodes.get(&q.job.id);
        let may_use = |n: u32| usable.is_none_or(|u| u.binary_search(&n).is_ok());
        let nodes: &[u32] = usable.map_or(&every_node, |u| u);
        let need = q.job.gpus;
        // Starts on loose GPUs with the usable nodes' free ones (where they are is unknown).
        let on_loose = |loose: u32, free: &[u32]| {
            loose > 0 && loose + nodes.iter().map(|&n| free[n as usize]).sum::<u32>() >= need
        };
        // A node with this many free GPUs (or all of its own) may let the job fit.
        let gpn = nodes.first().map_or(1, |&n| s.nodes[n as usize].gpus.max(1));
        let enough = if need <= gpn || need % gpn == 0 { need.min(gpn) } else { need % gpn };
        let mut at = fit(s, &free, nodes, need);
        while at.is_none() && !on_loose(loose, &free) {
            // The next running job to end that holds a node this job may use.
            let next = ends.iter().enumerate().position(|(k, &(_, id, _))| {
                !taken[k] && s.job_nodes.get(&id).is_none_or(|held| held.iter().any(|&n| may_use(n)))
            });
            let Some(k) = next else { break };
            taken[k] = true;
            let (_, id, gpus) = ends[k];
            out.push(id);
            match s.job_nodes.get(&id).filter(|held| !held.is_empty()) {
                Some(held) => {
                    // Spread over its nodes; the remainder on the first.
                    let each = gpus / held.len() as u32;
                    let mut refit = false;
                    for (i, &n) in held.iter().enumerate() {
                        let add = if i == 0 { gpus - each * (held.len() as u32 - 1) } else { each };
                        free[n as usize] += add;
                        let whole = s.nodes[n as usize].gpus;
                        refit |= may_use(n) && free[n as usize] >= enough.min(whole);
                    }
                    // Only a node freed past `enough` can change where the job fits.
                    if refit {
                        at = fit(s, &free, nodes, need);
                    }
                }
                None => loose += gpus,
            }
        }
        match at {
            Some(at) => {
                for (n, t) in at {
                    free[n as usize] -= t;
                }
            }
            None if on_loose(loose, &free) => {
                // It starts on loose GPUs and any usable node's.
                let mut left = need;
                for &n in nodes {
                    let t = free[n as usize].min(left);
                    free[n as usize] -= t;
                    left -= t;
                }
                loose -= left.min(loose);
            }
            None => {}
        }
    }
    out
}

/// Where a job of `need` GPUs starts on `nodes` with `free` GPUs each, as Slurm places a GPU
/// job: at most a node's GPUs on the one node that fits it tightest; more on whole nodes, the
/// remainder on the tightest node besides. `None`: it does not fit.
fn fit(s: &Snapshot, free: &[u32], nodes: &[u32], need: u32) -> Option<Vec<(u32, u32)>> {
    let gpn = nodes.first().map_or(0, |&n| s.nodes[n as usize].gpus).max(1);
    let tightest = |want: u32, skip: &[(u32, u32)]| {
        nodes
            .iter()
            .copied()
            .filter(|&n| free[n as usize] >= want && skip.iter().all(|&(m, _)| m != n))
            .min_by_key(|&n| (free[n as usize], n))
    };
    if need <= gpn {
        return tightest(need, &[]).map(|n| vec![(n, need)]);
    }
    let whole: Vec<(u32, u32)> = nodes
        .iter()
        .copied()
        .filter(|&n| free[n as usize] >= s.nodes[n as usize].gpus && free[n as usize] > 0)
        .take((need / gpn) as usize)
        .map(|n| (n, free[n as usize]))
        .collect();
    if whole.len() < (need / gpn) as usize {
        return None;
    }
    let rem = need.saturating_sub(whole.iter().map(|&(_, t)| t).sum());
    let mut at = whole;
    if rem > 0 {
        let n = tightest(rem, &at)?;
        at.push((n, rem));
    }
    Some(at)
}

/// Level actions of `p` for `s`.
pub fn decide(p: &TunedPolicy, s: &Snapshot, a: &mut Actions) {
    let gated = p.kind == ClusterPolicy::Wattson && !capacity_gates_pass(p, s);
    // With the gates closed every job is raised anyway.
    let waited = if p.kind == ClusterPolicy::Wattson && !gated { waited_for(p, s) } else { Vec::new() };
    let lagging = if p.kind == ClusterPolicy::Wattson { s.lagging } else { &[] };
    if p.kind == ClusterPolicy::Wattson {
        a.raised = if gated {
            let mut all: Vec<u32> = s.running.iter().map(|r| r.job.id).collect();
            all.sort_unstable();
            all
        } else {
            let mut raised: Vec<u32> = waited.iter().chain(lagging).copied().collect();
            raised.sort_unstable();
            raised.dedup();
            raised
        };
    }
    let gpn = s.nodes.first().map_or(1, |n| n.gpus.max(1));
    let overhead_w = if p.tuning.count_node_base { s.node.base_w / f64::from(gpn) } else { 0.0 };
    for r in s.running {
        let levels = &s.models[r.job.model as usize];
        let top = levels.len().saturating_sub(1) as u16;
        let want = match p.kind {
            // A shared GPU runs at its defaults: one job's setting never applies to another's.
            ClusterPolicy::Wattson if r.shared => top,
            // Lagging as far as `max_lag_s`: full speed for the rest of its run.
            ClusterPolicy::Wattson if lagging.binary_search(&r.job.id).is_ok() => top,
            ClusterPolicy::Wattson => {
                let allowed = allowance(r);
                if !gated && waited.binary_search(&r.job.id).is_err() {
                    least_energy_within(levels, allowed, overhead_w)
                } else if p.tuning.congestion_raise >= 1.0 {
                    top
                } else {
                    // Raised toward full speed: a share of the allowance is given up.
                    least_energy_within(
                        levels,
                        allowed.min(r.job.bound) * (1.0 - p.tuning.congestion_raise),
                        overhead_w,
                    )
                }
            }
            k => fixed_level(k, &r.job).unwrap_or(top),
        };
        if want != r.level {
            a.levels.push((r.job.id, want));
        }
    }
}
