//! The `floor` energy reference: every job at its least *measured* energy within its own
//! slowdown bound, its work split between two limits where that saves
//! ([`super::workloads::Workload::floor_mix`]), on the GPU type where that costs least, capacity respected (a FIFO list schedule on each type's GPU count), node base power
//! only for `⌈busy GPUs / GPUs per node⌉` nodes of each type at each instant, no idle GPUs, no off draw, no transitions. Its energy is the
//! reference; its times are reported but not compared (no placement, no boots).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::cluster::ClusterConfig;
use super::metrics::{PowerSeries, Summary, Totals, cost_of, series, summary, times};
use super::policies::{ClusterPolicy, SimJob};
use super::power::{BIN_S, EnergyParts};
use super::workloads::Catalog;

/// (start, end) of each job in the floor's list schedule: each job on its floor GPU type
/// ([`SimJob::floor_type`]), in submission order; it starts at its submission or, if that
/// type's GPUs are taken, when enough of its running jobs have ended (FIFO per type).
pub fn schedule(jobs: &[SimJob], catalog: &Catalog, c: &ClusterConfig) -> Vec<(f64, f64)> {
    let types = c.groups.len();
    let mut free: Vec<u64> =
        c.groups.iter().map(|g| u64::from(g.nodes) * u64::from(c.gpus_per_node)).collect();
    let mut ends: Vec<BinaryHeap<Reverse<(u64, u32)>>> = vec![BinaryHeap::new(); types];
    let mut last_start = vec![f64::NEG_INFINITY; types];
    let mut out = Vec::with_capacity(jobs.len());
    for j in jobs {
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
        let w = catalog.get(ty, j.workload);
        let end = start + j.work_on(ty, catalog) * w.mix_time_ratio(j.choices[ty].floor);
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
    let spans = schedule(jobs, catalog, c);
    // (time, type, ΔGPUs, Δbusy W), swept in time order.
    let mut steps: Vec<(f64, usize, i64, f64)> = Vec::with_capacity(2 * jobs.len());
    for (j, &(a, b)) in jobs.iter().zip(&spans) {
        let ty = j.floor_type;
        let p = f64::from(j.gpus) * catalog.get(ty, j.workload).mix_power(j.choices[ty].floor);
        steps.push((a, ty, i64::from(j.gpus), p));
        steps.push((b, ty, -i64::from(j.gpus), -p));
    }
    steps.sort_by(|x, y| x.0.total_cmp(&y.0).then(x.2.cmp(&y.2)));
    let gpn = i64::from(c.gpus_per_node);
    let mut parts = EnergyParts::default();
    let mut bins: Vec<f64> = Vec::new();
    let mut gpus = vec![0i64; c.groups.len()];
    let (mut busy_w, mut peak) = (0.0f64, 0.0f64);
    let mut last = t0;
    for &(t, ty, dg, dp) in &steps {
        if t > last {
            let nodes: i64 = gpus.iter().map(|g| (g + gpn - 1) / gpn).sum();
            let base_w = nodes as f64 * c.node.base_w;
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
        if gpus.iter().all(|&g| g == 0) {
            busy_w = 0.0;
        }
    }
    let t_end = spans.iter().map(|s| s.1).fold(t0, f64::max);
    // Slowdown against the job's top level on the GPU type it runs on, as a daemon measures it.
    let slow = jobs.iter().map(|j| {
        let ty = j.floor_type;
        catalog.get(ty, j.workload).mix_time_ratio(j.choices[ty].floor) - 1.0
    });
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
        let s = schedule(&jobs, &cat, &c);
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
        assert_eq!(schedule(&loose, &cat, &c), vec![(0.0, 970.0 * 1.05)]);
    }
}
