//! The measured bound behind the wait targets of docs/sim-history.md: wattson told the future.
//!
//! A run of wattson with DVFS off gives the intervals during which some job waits for GPUs.
//! Each job's slowdown bound is then cut so that its run, at the cut bound, ends before the
//! next such interval begins (to 0 when one is under way or begins before it would end at full
//! speed), and wattson runs again with the jobs a queued job waits for at full speed; the
//! waiting intervals of that run cut the bounds further, until no bound changes. A slowed job
//! then never holds GPUs while a job waits for them, with the whole future known: the energy
//! this saves is what DVFS can save at DVFS-off's waits. Printed beside slurm-powersave and
//! powersave-dvfs, with which of the energy and wait targets it would meet, and for the
//! DVFS-off run how much of the time a job waits and how much DVFS saving lies clear of those
//! waits.
//!
//! Run: `cargo run --release -p wattson-sim --example bound [-- TRACE NODES,NODES SEEDS
//! key=value...]` (defaults: cluster04.csv, 80,123, 5; `key=value` overrides the cluster file as
//! the brain example's do: a `[wattson]` knob of every wattson run, e.g. `min_price_drop=100`
//! turns deferral off, or the opt-in to sharing, `share_fraction=1 share_bound=0.5`; wattson
//! keeps Slurm's FIFO order and raises for every queued job, as before the queue order, unless
//! `queue_order=response-ratio` or `raise_after_runs=...`). Reads `etc/sim/cluster.toml` and
//! `data/`.

use std::path::Path;

use wattson_engine::cluster::{QueueOrder, TunedPolicy, Tuning};
use wattson_sim::metrics::{Summary, summarize};
use wattson_sim::{Catalog, ClusterConfig, ClusterPolicy, RunResult, SimJob, TraceFormat};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
/// Rounds of cutting before giving up on a fixed point (cluster04 settles in 2 to 4).
const MAX_ROUNDS: usize = 10;

fn read(rel: &str) -> String {
    let p = Path::new(ROOT).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}

/// The merged intervals `[from, to)` during which at least one job of `r` waited for GPUs
/// (released into the queue, not yet allocated).
fn waiting_intervals(r: &RunResult) -> Vec<(f64, f64)> {
    let mut iv: Vec<(f64, f64)> =
        r.jobs.iter().filter(|j| j.alloc > j.eligible).map(|j| (j.eligible, j.alloc)).collect();
    iv.sort_by(|a, b| a.0.total_cmp(&b.0));
    let mut merged: Vec<(f64, f64)> = Vec::new();
    for (from, to) in iv {
        match merged.last_mut() {
            Some(last) if from <= last.1 => last.1 = last.1.max(to),
            _ => merged.push((from, to)),
        }
    }
    merged
}

/// Cuts each job's bound in `cut` so that its run in `r`, slowed by at most the cut, ends
/// before the next waiting interval; whether any bound changed.
fn cut_bounds(jobs: &[SimJob], r: &RunResult, waiting: &[(f64, f64)], cut: &mut [f64]) -> bool {
    let mut changed = false;
    for ((job, run), c) in jobs.iter().zip(&r.jobs).zip(cut.iter_mut()) {
        let slowest_end = run.start + job.duration * (1.0 + *c);
        let next = waiting.partition_point(|w| w.1 <= run.start);
        if let Some(&(from, _)) = waiting.get(next).filter(|w| w.0 < slowest_end) {
            let fits = ((from - run.start) / job.duration - 1.0).max(0.0);
            if fits < *c {
                *c = fits;
                changed = true;
            }
        }
    }
    changed
}

/// Why DVFS-off's waits leave DVFS little: the share of `r`'s span during which a job waits,
/// and the GPU energy (MWh) every job at its floor level would save, in all and from jobs
/// whose floor-level run overlaps no waiting interval.
fn clear_of_queues(
    jobs: &[SimJob],
    catalog: &Catalog,
    r: &RunResult,
    waiting: &[(f64, f64)],
) -> (f64, f64, f64) {
    let share = waiting.iter().map(|w| w.1 - w.0).sum::<f64>() / (r.t_end - r.t0);
    let (mut all, mut clear) = (0.0, 0.0);
    for (job, run) in jobs.iter().zip(&r.jobs) {
        let w = catalog.get(0, job.workload);
        let (f, top) = (job.choices[0].floor, w.max_idx());
        let saved_j =
            f64::from(job.gpus) * job.duration * (w.power[top] - w.mix_power(f) * w.mix_time_ratio(f));
        all += saved_j;
        let end = run.start + job.duration * w.mix_time_ratio(f);
        let next = waiting.partition_point(|x| x.1 <= run.start);
        if waiting.get(next).is_none_or(|x| x.0 >= end) {
            clear += saved_j;
        }
    }
    (share, all / 3.6e9, clear / 3.6e9)
}

/// One printed row: energy, waits and bound violations (against the users' own bounds).
fn row(seed: u64, name: &str, s: &Summary, violations: usize) {
    println!(
        "{seed:<5} {name:<24} {:>11.0} {:>9.3} {:>9.3} {:>6}",
        s.energy_kwh,
        s.queue_wait_mean_s / 3600.0,
        s.queue_wait_p99_s / 3600.0,
        violations
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let trace_name = args.get(1).cloned().unwrap_or_else(|| "cluster04.csv".to_string());
    let sizes: Vec<u32> =
        args.get(2).map_or("80,123", String::as_str).split(',').map(|s| s.parse().expect("nodes")).collect();
    let seeds: u64 = args.get(3).map_or(5, |s| s.parse().expect("seed count"));
    let mut base = ClusterConfig::from_toml(&read("etc/sim/cluster.toml"), "etc/sim/cluster.toml").unwrap();
    // The bound is of DVFS alone: Slurm's FIFO order, as the references, and every queued job
    // raises the running jobs it waits for (`queue_order=...`, `raise_after_runs=...` override).
    base.wattson.tuning.queue_order = QueueOrder::Fifo;
    base.wattson.tuning.raise_after_runs = 0.0;
    for kv in args.iter().skip(4) {
        wattson_sim::overrides::apply(&mut base, kv).unwrap_or_else(|e| panic!("{e}"));
    }
    let catalog =
        Catalog::from_zeus_csv(&read("data/dvfs/zeus-power-limit/summary_power_v100.csv"), "zeus").unwrap();
    let text = read(&format!("data/traces/itp-elasticflow/{trace_name}"));
    let trace = wattson_sim::trace::parse(&text, &trace_name, TraceFormat::Auto).unwrap();
    let models = wattson_sim::policies::level_tables(&catalog).unwrap();
    for &nodes in &sizes {
        let mut c = base.clone();
        c.groups[0].nodes = nodes;
        let tuning = c.tuning(f64::NAN);
        let dvfs_off = TunedPolicy {
            kind: ClusterPolicy::Wattson,
            tuning: Tuning { dvfs_min_free: 2.0, congestion_raise: 1.0, ..tuning },
        };
        let told =
            TunedPolicy { kind: ClusterPolicy::Wattson, tuning: Tuning { congestion_raise: 1.0, ..tuning } };
        println!("== {trace_name} on {nodes} nodes x {} GPUs", c.gpus_per_node);
        println!(
            "{:<5} {:<24} {:>11} {:>9} {:>9} {:>6}",
            "seed", "policy", "energy kWh", "wait h", "p99 w h", "viol"
        );
        for seed in 1..=seeds {
            let refs = [ClusterPolicy::SlurmPowersave, ClusterPolicy::PowersaveDvfs];
            let o = wattson_sim::run(&c, &catalog, &trace, &trace_name, &refs, seed).unwrap();
            for s in &o.report.summaries {
                row(seed, &s.policy, s, s.bound_violations);
            }
            let over = |r: &RunResult| {
                o.jobs.iter().zip(&r.jobs).filter(|(j, x)| x.slowdown > j.bound + 1e-9).count()
            };
            let off = wattson_sim::simulate::simulate(&c, &catalog, &models, &o.jobs, dvfs_off);
            row(seed, "wattson, DVFS off", &summarize(&off, &o.jobs, &c).0, over(&off));
            let (share, all, clear) = clear_of_queues(&o.jobs, &catalog, &off, &waiting_intervals(&off));
            println!(
                "seed {seed}: DVFS off, a job waits {:.1}% of the time; every job at its floor level would save {all:.2} MWh of GPU energy, the jobs whose floor-level run overlaps no wait {clear:.2} MWh",
                100.0 * share
            );
            let mut cut: Vec<f64> = o.jobs.iter().map(|j| j.bound).collect();
            let mut last = off;
            let mut rounds = 0;
            while rounds < MAX_ROUNDS && cut_bounds(&o.jobs, &last, &waiting_intervals(&last), &mut cut) {
                let jobs: Vec<SimJob> =
                    o.jobs.iter().zip(&cut).map(|(j, &b)| SimJob { bound: b, ..j.clone() }).collect();
                last = wattson_sim::simulate::simulate(&c, &catalog, &models, &jobs, told);
                rounds += 1;
            }
            let s = summarize(&last, &o.jobs, &c).0;
            let cuts = o.jobs.iter().zip(&cut).filter(|(j, b)| **b < j.bound).count();
            row(seed, "wattson, told the future", &s, over(&last));
            let by = |p: ClusterPolicy| o.report.summary(p).unwrap();
            let (ps, pd) = (by(ClusterPolicy::SlurmPowersave), by(ClusterPolicy::PowersaveDvfs));
            let yes = |b: bool| if b { "met" } else { "MISSED" };
            println!(
                "seed {seed}: told the future ({cuts} bounds cut, {rounds} rounds{}): energy below powersave-dvfs {}; mean wait {}; p99 wait {}",
                if rounds == MAX_ROUNDS { ", not settled" } else { "" },
                yes(s.energy_kwh < pd.energy_kwh),
                yes(s.queue_wait_mean_s <= ps.queue_wait_mean_s * 1.01),
                yes(s.queue_wait_p99_s <= ps.queue_wait_p99_s * 1.01),
            );
        }
    }
}
