//! The defaults' acceptance run: the ten ITP clusters, each at ~77% and ~50% of its mean load
//! and on 80 nodes (27 cells: cluster04 at 80 nodes is its 77% cell, and cluster01 and
//! cluster10 have one load-matched size, the fewest nodes their largest job fits), seeds 1 to
//! 3, every policy in FIFO order, time limits, waits from submission. Per cell, the means over
//! the seeds of wattson's and `slurm-powersave`'s energy, imposed mean and p99 wait (the wait
//! less the deferral window the job's user asked for) and plain mean wait, with `slurm-shards`'
//! energy where jobs share; then how many cells hold each target of the issue, and how many
//! hold the wait target for `slurm-default` (every node on: no job ever waits for a boot), the
//! yardstick's reach for a policy that only takes delays away; where jobs share, wattson's jobs
//! over their bound, and those of them that shared only in pairs of classes admitted before.
//!
//! Run: `cargo run --release -p wattson-sim --example cells [-- SEEDS [key=value...]]`
//! (default 3 seeds; the keys are [`wattson_sim::overrides`]', e.g. `share_fraction=0.5`).
//! Runs the cells on every core. Reads `etc/sim/cluster.toml` and `data/`.

mod common;

use common::{cell, pct, read, seeds_and_cluster};
use wattson_sim::{Catalog, ClusterPolicy};

/// One policy's means over the seeds of a cell.
#[derive(Debug, Clone, Copy, Default)]
struct Means {
    energy_kwh: f64,
    imposed_mean_s: f64,
    imposed_p99_s: f64,
    wait_mean_s: f64,
    violations: f64,
    shared_jobs: f64,
    /// Of the violations, those of jobs that shared only in pairs of classes admitted before.
    repeat_violations: f64,
}

impl Means {
    fn add(&mut self, s: &wattson_sim::metrics::Summary, n: f64) {
        self.energy_kwh += s.energy_kwh / n;
        self.imposed_mean_s += s.waits.imposed_wait_mean_s / n;
        self.imposed_p99_s += s.waits.imposed_wait_p99_s / n;
        self.wait_mean_s += s.wait_mean_s / n;
        self.violations += s.bound_violations as f64 / n;
        self.shared_jobs += s.shared_jobs as f64 / n;
    }
}

fn main() {
    let (seeds, base) = seeds_and_cluster(3);
    let mut catalog =
        Catalog::from_zeus_csv(&read("data/dvfs/zeus-power-limit/summary_power_v100.csv"), "zeus").unwrap();
    if let Some(rel) = &base.colocation_json {
        let gavel = format!("etc/sim/{rel}");
        catalog.colocation =
            Some(wattson_sim::colocation::Colocation::from_gavel_json(&read(&gavel), &gavel).unwrap());
    }
    let policies = [
        ClusterPolicy::SlurmPowersave,
        ClusterPolicy::SlurmShards,
        ClusterPolicy::Wattson,
        ClusterPolicy::SlurmDefault,
    ];
    // Each cell's (timer, shards, wattson, default) means.
    let cells = wattson_sim::trace::itp_cells();
    let results = wattson_sim::parallel::map(&cells, |&(trace_name, nodes)| {
        let (trace, c) = cell(&base, trace_name, nodes);
        let mut m = [Means::default(); 4];
        for seed in 1..=seeds {
            let o = wattson_sim::run(&c, &catalog, &trace, trace_name, &policies, seed).unwrap();
            for (k, &p) in policies.iter().enumerate() {
                if let Some(s) = o.report.summary(p) {
                    m[k].add(s, seeds as f64);
                }
            }
            let ours = o.runs.iter().find(|r| r.policy == ClusterPolicy::Wattson).expect("wattson ran");
            let repeat = wattson_sim::metrics::repeat_violations(ours, &o.jobs);
            m[2].repeat_violations += repeat as f64 / seeds as f64;
        }
        m
    });
    println!(
        "{:<14} {:>5} | {:>10} {:>8} {:>8} {:>8} | {:>10} {:>7} {:>8} {:>7} {:>8} {:>7} {:>8} {:>6} | {:>8} | {:>15} | verdict",
        "trace",
        "nodes",
        "timer kWh",
        "imp h",
        "p99 h",
        "wait h",
        "ours kWh",
        "energy",
        "imp h",
        "imp",
        "p99 h",
        "p99",
        "wait h",
        "viol",
        "shards",
        "default imp/p99"
    );
    let (mut below, mut waits_ok, mut dominated, mut worst, mut shards_above) =
        (0, 0, 0, f64::NEG_INFINITY, 0);
    let (mut shared_cells, mut default_waits_ok) = (0, 0);
    let (mut over_bound, mut shared, mut repeat) = (0.0, 0.0, 0.0);
    for (&(trace_name, nodes), m) in cells.iter().zip(&results) {
        let [t, sh, w, d] = *m;
        default_waits_ok +=
            usize::from(d.imposed_mean_s <= t.imposed_mean_s && d.imposed_p99_s <= t.imposed_p99_s);
        let de = pct(w.energy_kwh, t.energy_kwh);
        let (dm, dp) = (pct(w.imposed_mean_s, t.imposed_mean_s), pct(w.imposed_p99_s, t.imposed_p99_s));
        let energy_ok = w.energy_kwh < t.energy_kwh;
        let wait_ok = w.imposed_mean_s <= t.imposed_mean_s && w.imposed_p99_s <= t.imposed_p99_s;
        below += usize::from(energy_ok);
        waits_ok += usize::from(wait_ok);
        dominated += usize::from(energy_ok && wait_ok);
        worst = worst.max(dm).max(dp);
        let shards = if sh.energy_kwh > 0.0 {
            shared_cells += 1;
            (over_bound, shared) = (over_bound + w.violations, shared + w.shared_jobs);
            repeat += w.repeat_violations;
            shards_above += usize::from(w.energy_kwh < sh.energy_kwh);
            format!("{:>+7.2}%", pct(w.energy_kwh, sh.energy_kwh))
        } else {
            "-".to_string()
        };
        println!(
            "{trace_name:<14} {nodes:>5} | {:>10.0} {:>8.3} {:>8.3} {:>8.3} | {:>10.0} {de:>+6.2}% {:>8.3} {dm:>+6.1}% {:>8.3} {dp:>+6.1}% {:>8.3} {:>6.1} | {shards:>8} | {:>+6.1}%/{:>+6.1}% | {}",
            t.energy_kwh,
            t.imposed_mean_s / 3600.0,
            t.imposed_p99_s / 3600.0,
            t.wait_mean_s / 3600.0,
            w.energy_kwh,
            w.imposed_mean_s / 3600.0,
            w.imposed_p99_s / 3600.0,
            w.wait_mean_s / 3600.0,
            w.violations,
            pct(d.imposed_mean_s, t.imposed_mean_s),
            pct(d.imposed_p99_s, t.imposed_p99_s),
            match (energy_ok, wait_ok) {
                (true, true) => "dominates",
                (true, false) => "energy only",
                (false, true) => "waits only",
                (false, false) => "neither",
            }
        );
    }
    let n = cells.len();
    println!(
        "wattson against slurm-powersave, means over {seeds} seeds: energy below in {below} of {n}; imposed mean and p99 wait no longer in {waits_ok} of {n}; both in {dominated} of {n}; the worst imposed wait {worst:+.1}% (mean or p99)"
    );
    println!(
        "slurm-default (every node on, no boot wait) against slurm-powersave: imposed mean and p99 wait no longer in {default_waits_ok} of {n}"
    );
    if shared_cells > 0 {
        println!(
            "wattson's energy below slurm-shards' in {shards_above} of the {shared_cells} cells where jobs share; its jobs over their bound: {over_bound:.1} of the {shared:.1} that shared a GPU ({:.2}%), {repeat:.1} of them in pairs of classes admitted before only; a seed's mean summed over the cells",
            100.0 * over_bound / shared.max(1.0)
        );
    }
}
