//! The `floor` energy reference: every job at its least *measured* energy within its own
//! slowdown bound, its work split between two limits where that saves
//! ([`super::workloads::Workload::floor_mix`]), on the GPU type where that costs least, capacity respected (a FIFO list schedule on each type's GPU count), node base power
//! only for `⌈busy GPUs / GPUs per node⌉` nodes of each type at each instant, no idle GPUs, no off draw, no transitions. Its energy is the
//! reference; its times are reported but not compared (no placement, no boots).
//!
//! A job that may share its GPUs (an opted-in job, where pair data is given) may also run any
//! part of its work beside a partner of as many GPUs and the most favourable kind
//! ([`run_of`]), holding half of each GPU, so the floor stays below a policy that shares.

use std::cmp::Reverse;
use std::collections::{BTreeSet, BinaryHeap};

use super::cluster::ClusterConfig;
use super::metrics::{PowerSeries, Summary, Totals, cost_of, series, summary, times};
use super::policies::{ClusterPolicy, SimJob};
use super::power::{BIN_S, EnergyParts};
use super::workloads::Catalog;

/// How the floor runs one job, on its floor GPU type ([`SimJob::floor_type`]).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FloorRun {
    /// Its run time over its time alone at the top limit.
    pub time_ratio: f64,
    /// The GPU draw it is charged, W (all its GPUs).
    pub gpu_w: f64,
    /// The GPUs it holds, on average over its run (a job sharing holds half of one).
    pub gpus: f64,
}

/// One way to run a second of a job's work at the top limit alone: the time it takes (ratio),
/// the energy charged for it (J: GPU and node-base share), the GPU draw (W) and the share of a
/// GPU held.
#[derive(Debug, Clone, Copy)]
struct Way {
    t: f64,
    e: f64,
    w: f64,
    g: f64,
}

/// The floor's run of job `j`: at its floor mix alone; for an opted-in job where pair data is
/// given, the least energy (GPU and node-base share) within its bound over every split of its
/// work between two ways, where one of the two shares: alone at a measured limit, or at the
/// top limit beside a job of one of `partners` (GPU count, class) of as many GPUs whose pair
/// with it fits on one GPU, slowed as measured; each of its GPUs alike. Beside a partner
/// it is charged half the GPU's idle draw and its own draw above idle at its pace, held down as
/// far as a partner drawing the GPU's whole room above idle could hold it (the simulator's
/// shared draw, [`crate::colocation::shared_draws`], at its least), and half a GPU's node base.
pub fn run_of(j: &SimJob, catalog: &Catalog, c: &ClusterConfig, partners: &BTreeSet<(u32, u16)>) -> FloorRun {
    let ty = j.floor_type;
    let w = catalog.get(ty, j.workload);
    let f = j.choices[ty].floor;
    let gpus = f64::from(j.gpus);
    let alone = FloorRun { time_ratio: w.mix_time_ratio(f), gpu_w: gpus * w.mix_power(f), gpus };
    let (Some(colo), Some(class)) = (&catalog.colocation, j.share) else { return alone };
    let base = c.node.base_w / f64::from(c.gpus_per_node);
    let idle = c.groups[ty].gpu_idle_w();
    let top = w.max_idx();
    let room = (w.limits[top] - idle).max(0.0);
    let above = (w.power[top] - idle).max(0.0);
    let mut ways: Vec<Way> = (0..w.limits.len())
        .map(|i| {
            let t = w.time_ratio(i);
            Way { t, e: (w.power[i] + base) * t, w: w.power[i], g: 1.0 }
        })
        .collect();
    for &(_, k) in partners.iter().filter(|(g, _)| *g == j.gpus) {
        let (Some(s), Some(_)) = (colo.slowdown(class, k), colo.slowdown(k, class)) else { continue };
        let own = above / (1.0 + s);
        let scale = if own > 0.0 { (room / (own + room)).min(1.0) } else { 1.0 };
        let drawn = idle / 2.0 + own * scale;
        let t = 1.0 + s;
        ways.push(Way { t, e: (drawn + base / 2.0) * t, w: drawn, g: 0.5 });
    }
    // The lower convex hull of the ways, at the bound.
    let t_max = 1.0 + j.bound;
    let mut best: Option<(f64, Way, Way, f64)> = None;
    for a in &ways {
        for b in &ways {
            let split = if a.t <= t_max && a.t == b.t {
                Some(1.0)
            } else if a.t < t_max && b.t > t_max {
                Some((b.t - t_max) / (b.t - a.t))
            } else {
                None
            };
            let Some(share) = split else { continue };
            let e = share * a.e + (1.0 - share) * b.e;
            if best.is_none_or(|(least, ..)| e < least) {
                best = Some((e, *a, *b, share));
            }
        }
    }
    // A split of alone ways only is the floor mix's (which counts the GPU's energy alone).
    let Some((_, a, b, share)) = best.filter(|(_, a, b, _)| a.g < 1.0 || b.g < 1.0) else { return alone };
    let time_ratio = share * a.t + (1.0 - share) * b.t;
    let per = |x: fn(&Way) -> f64| (share * x(&a) * a.t + (1.0 - share) * x(&b) * b.t) / time_ratio;
    FloorRun { time_ratio, gpu_w: gpus * per(|w| w.w), gpus: gpus * per(|w| w.g) }
}

/// Each job's floor run ([`run_of`]), partners drawn from the classes of the jobs that share.
pub fn runs(jobs: &[SimJob], catalog: &Catalog, c: &ClusterConfig) -> Vec<FloorRun> {
    let partners: BTreeSet<(u32, u16)> = jobs.iter().filter_map(|j| Some((j.gpus, j.share?))).collect();
    jobs.iter().map(|j| run_of(j, catalog, c, &partners)).collect()
}

/// (start, end) of each job in the floor's list schedule: each job on its floor GPU type
/// ([`SimJob::floor_type`]), taking its GPUs whole (sharing or not), for `runs`' time, in
/// submission order; it starts at its submission or, if that type's GPUs are taken, when
/// enough of its running jobs have ended (FIFO per type).
pub fn schedule(jobs: &[SimJob], runs: &[FloorRun], catalog: &Catalog, c: &ClusterConfig) -> Vec<(f64, f64)> {
    let types = c.groups.len();
    let mut free: Vec<u64> =
        c.groups.iter().map(|g| u64::from(g.nodes) * u64::from(c.gpus_per_node)).collect();
    let mut ends: Vec<BinaryHeap<Reverse<(u64, u32)>>> = vec![BinaryHeap::new(); types];
    let mut last_start = vec![f64::NEG_INFINITY; types];
    let mut out = Vec::with_capacity(jobs.len());
    for (j, run) in jobs.iter().zip(runs) {
        let ty = j.floor_type;
        let mut start = j.submit.max(last_start[ty]);
        while let Some(&Reverse((b, g))) = ends[ty].peek() {
            let e = f64::from_bits(b);
            if e <= start || free[ty] < u64::from(j.gpus) {
                ends[ty].pop();
                free[ty] += u64::from(g);
                start = start.max(e);
            } else {
                break;
            }
        }
        let end = start + j.work_on(ty, catalog) * run.time_ratio;
        free[ty] -= u64::from(j.gpus);
        ends[ty].push(Reverse((end.to_bits(), j.gpus)));
        last_start[ty] = start;
        out.push((start, end));
    }
    out
}

/// The floor's summary and hourly power.
pub fn floor(jobs: &[SimJob], catalog: &Catalog, c: &ClusterConfig) -> (Summary, PowerSeries) {
    let t0 = jobs.first().map_or(0.0, |j| j.submit);
    let origin = t0 - (t0 + c.trace_start_utc_s as f64).rem_euclid(BIN_S);
    let runs = runs(jobs, catalog, c);
    let spans = schedule(jobs, &runs, catalog, c);
    // (time, type, ΔGPUs, Δbusy W), swept in time order.
    let mut steps: Vec<(f64, usize, f64, f64)> = Vec::with_capacity(2 * jobs.len());
    for ((j, &(a, b)), run) in jobs.iter().zip(&spans).zip(&runs) {
        let ty = j.floor_type;
        steps.push((a, ty, run.gpus, run.gpu_w));
        steps.push((b, ty, -run.gpus, -run.gpu_w));
    }
    steps.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.2.total_cmp(&y.2)));
    let gpn = f64::from(c.gpus_per_node);
    let mut parts = EnergyParts::default();
    let mut bins: Vec<f64> = Vec::new();
    let mut gpus = vec![0.0f64; c.groups.len()];
    let (mut busy_w, mut peak) = (0.0f64, 0.0f64);
    let mut last = t0;
    for &(t, ty, dg, dp) in &steps {
        if t > last {
            // Whole nodes for the GPUs held (a rounding residue of shared halves is none).
            let nodes: f64 = gpus.iter().map(|g| (g / gpn - 1e-9).ceil().max(0.0)).sum();
            let base_w = nodes * c.node.base_w;
            let busy_now = busy_w.max(0.0);
            parts.gpu_busy_j += busy_now * (t - last);
            parts.node_base_j += base_w * (t - last);
            let mut a = last;
            while a < t {
                let k = ((a - origin) / BIN_S).floor().max(0.0) as usize;
                let e = (origin + (k + 1) as f64 * BIN_S).min(t);
                if bins.len() <= k {
                    bins.resize(k + 1, 0.0);
                }
                bins[k] += (busy_now + base_w) * (e - a);
                a = if e > a { e } else { t };
            }
            peak = peak.max(busy_now + base_w);
            last = t;
        }
        gpus[ty] += dg;
        busy_w += dp;
        if gpus.iter().all(|&g| g < 1e-9) {
            busy_w = 0.0;
            gpus.fill(0.0);
        }
    }
    let t_end = spans.iter().map(|s| s.1).fold(t0, f64::max);
    // Slowdown against the job's top level on the GPU type it runs on, as a daemon measures it.
    let slow = runs.iter().map(|r| r.time_ratio - 1.0);
    let tt = times(jobs, jobs.iter().zip(&spans).zip(slow).map(|((j, &(a, b)), s)| (j.submit, a, b, s)));
    let x = Totals {
        parts,
        timeline_j: bins.iter().sum(),
        cost: cost_of(&bins, origin, c),
        makespan: t_end - t0,
        changes: 0,
        peak_w: peak,
        over_budget_s: 0.0,
        deferred: 0,
        level_changes: 0,
        shared: (0, 0.0),
        suspend_time_s: None,
    };
    (summary(ClusterPolicy::Floor, c, tt, x), series(ClusterPolicy::Floor, origin, &bins))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::tests::SMALL;
    use crate::workloads::tests::tiny_zeus;

    fn job(submit: f64, gpus: u32, duration: f64, bound: f64, cat: &Catalog) -> SimJob {
        let w = cat.get(0, 0);
        SimJob {
            id: String::new(),
            submit,
            gpus,
            duration,
            limit: duration,
            killed: false,
            gpu_types: Vec::new(),
            gpu_fraction: 1.0,
            share: None,
            workload: 0,
            bound,
            defer_window: 0.0,
            choices: vec![crate::policies::Choice {
                bounded: w.max_idx(),
                zeus: w.max_idx(),
                floor: w.floor_mix(bound),
                capped: w.max_idx(),
            }],
            floor_type: 0,
        }
    }

    #[test]
    fn floor_respects_capacity_and_charges_base_for_whole_nodes_only() {
        let c = ClusterConfig::from_toml(SMALL, "c").unwrap(); // 4 nodes x 8 GPUs
        let cat = Catalog::from_zeus_csv(&tiny_zeus(), "z").unwrap();
        // Two jobs of 20 GPUs at t=0 do not fit together (32 GPUs): the second waits.
        let jobs = vec![job(0.0, 20, 1000.0, 0.0, &cat), job(0.0, 20, 1000.0, 0.0, &cat)];
        let s = schedule(&jobs, &runs(&jobs, &cat, &c), &cat, &c);
        assert_eq!(s, vec![(0.0, 1000.0), (1000.0, 2000.0)]);
        let (sum, _) = floor(&jobs, &cat, &c);
        // At the max limit (bound 0): 170 W per GPU; 20 GPUs need 3 nodes of 300 W base.
        let want_busy = 2.0 * 20.0 * 170.0 * 1000.0;
        let want_base = 2.0 * 3.0 * 300.0 * 1000.0;
        assert!((sum.gpu_busy_kwh * 3.6e6 - want_busy).abs() < 1e-6);
        assert!((sum.node_base_kwh * 3.6e6 - want_base).abs() < 1e-6);
        assert!((sum.timeline_kwh - sum.energy_kwh).abs() < 1e-9);
        assert_eq!(sum.gpu_idle_kwh + sum.off_kwh + sum.transition_kwh, 0.0);
        // A 5% bound: one limit would be 175 W (20 s vs 19.4 s per epoch, 3.1% slower, 155 W);
        // splitting the work, 63% at 175 W and 37% at 150 W (21 s, 8.2% slower, 140 W), takes
        // exactly 5% longer for less: 0.63·1.0309 + 0.37·1.0825 = 1.05.
        let loose = vec![job(0.0, 8, 970.0, 0.05, &cat)];
        let (l, _) = floor(&loose, &cat, &c);
        let (at175, at150) = (0.63 * 970.0 * 20.0 / 19.4, 0.37 * 970.0 * 21.0 / 19.4);
        let want = 8.0 * (155.0 * at175 + 140.0 * at150) + 300.0 * 970.0 * 1.05;
        assert!((l.energy_kwh * 3.6e6 - want).abs() < 1e-6 * want, "{} vs {want}", l.energy_kwh * 3.6e6);
        let one_limit = 8.0 * 155.0 * 970.0 * (20.0 / 19.4);
        assert!(l.gpu_busy_kwh * 3.6e6 < one_limit, "the split beats the best single limit");
        assert_eq!(schedule(&loose, &runs(&loose, &cat, &c), &cat, &c), vec![(0.0, 970.0 * 1.05)]);
    }

    #[test]
    fn a_job_that_may_share_runs_beside_a_partner_in_the_floor_where_that_costs_less() {
        let c = ClusterConfig::from_toml(SMALL, "c").unwrap();
        let mut cat = Catalog::from_zeus_csv(&tiny_zeus(), "z").unwrap();
        let alone = |j: &SimJob, cat: &Catalog| run_of(j, cat, &c, &BTreeSet::from([(1, 0)]));
        let mut j = job(0.0, 1, 1000.0, 0.1, &cat);
        j.share = Some(0);
        // Without pair data it runs alone at its floor mix.
        let plain = alone(&j, &cat);
        let w = cat.get(0, 0).clone();
        assert_eq!(plain.time_ratio, w.mix_time_ratio(j.choices[0].floor));
        assert_eq!((plain.gpus, plain.gpu_w), (1.0, w.mix_power(j.choices[0].floor)));
        // resnet50 beside resnet50: 2.0 / 1.9 of the time (5.3% slower).
        let gavel = r#"{"v100": {"('ResNet-50 (batch size 64)', 1)": {"null": 2.0,
            "('ResNet-50 (batch size 64)', 1)": [1.9, 1.9]}}}"#;
        cat.colocation = Some(crate::colocation::Colocation::from_gavel_json(gavel, "g").unwrap());
        let shared = alone(&j, &cat);
        let base = c.node.base_w / f64::from(c.gpus_per_node);
        let energy = |r: &FloorRun| (r.gpu_w + base * r.gpus) * r.time_ratio;
        assert!(shared.gpus < 1.0 && shared.time_ratio <= 1.1 + 1e-9, "{shared:?}");
        assert!(energy(&shared) < energy(&plain), "{shared:?} against {plain:?}");
        // Held down as far as any partner could: half the idle draw and its part above idle
        // at its pace, scaled by the GPU's room over its own part plus a whole room's.
        let (idle, top) = (c.groups[0].gpu_idle_w(), w.max_idx());
        let (s, room) = (2.0 / 1.9 - 1.0, w.limits[top] - idle);
        let own = (w.power[top] - idle) / (1.0 + s);
        let way = (idle / 2.0 + own * room / (own + room) + base / 2.0) * (1.0 + s);
        assert!(energy(&shared) <= way + 1e-9, "{} > {way}", energy(&shared));
        // A bound below the pair's slowdown, a class with no partner, a job that did not opt
        // in, or one of two GPUs with no partner of two: alone.
        let strict = SimJob { bound: 0.0, choices: job(0.0, 1, 1000.0, 0.0, &cat).choices, ..j.clone() };
        assert_eq!(alone(&strict, &cat).gpus, 1.0);
        assert_eq!(run_of(&j, &cat, &c, &BTreeSet::from([(1, 7)])), plain);
        assert_eq!(alone(&SimJob { share: None, ..j.clone() }, &cat), plain);
        let two = SimJob { gpus: 2, ..j.clone() };
        assert_eq!(alone(&two, &cat).gpus, 2.0);
        // With a partner of two GPUs, each of its GPUs runs as the 1-GPU job's one.
        let paired = run_of(&two, &cat, &c, &BTreeSet::from([(2, 0)]));
        assert_eq!(paired.time_ratio, shared.time_ratio);
        assert!(
            (paired.gpus - 2.0 * shared.gpus).abs() < 1e-12
                && (paired.gpu_w - 2.0 * shared.gpu_w).abs() < 1e-9
        );
    }
}
