//! The cluster-brain acceptance run (issue 12): cluster04 at 80 nodes (~77% load) and 123 nodes
//! (~50% load), seeds 1..5, every policy with the shipped defaults; prints each policy's energy,
//! waits, bound violations, wattson's capture of (slurm-default − floor) and which targets hold
//! per seed, then each policy's means over the seeds.
//!
//! Run: `cargo run --release -p wattson-sim --example brain [-- TRACE NODES,NODES SEEDS
//! [key=value...]]` (defaults: cluster04.csv, 80,123, 5). A key is a `[wattson]` knob,
//! `budget_w` (`[budget] power_w`) or `slurm_order` (the references' queue order, `[slurm]
//! order`). Reads `etc/sim/cluster.toml` and `../shared/data`.

use std::path::Path;

use wattson_sim::{Catalog, ClusterConfig, PolicyKind, TraceFormat};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn read(rel: &str) -> String {
    let p = Path::new(ROOT).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let trace_name = args.get(1).cloned().unwrap_or_else(|| "cluster04.csv".to_string());
    let sizes: Vec<u32> = args
        .get(2)
        .map_or("80,123", String::as_str)
        .split(',')
        .map(|s| s.parse().expect("node count"))
        .collect();
    let seeds: u64 = args.get(3).map_or(5, |s| s.parse().expect("seed count"));
    let base = ClusterConfig::from_toml(&read("etc/sim/cluster.toml"), "etc/sim/cluster.toml").unwrap();
    let catalog =
        Catalog::from_zeus_csv(&read("../shared/data/dvfs/zeus-power-limit/summary_power_v100.csv"), "zeus")
            .unwrap();
    let text = read(&format!("../shared/data/traces/itp-elasticflow/{trace_name}"));
    let trace = wattson_sim::trace::parse(&text, &trace_name, TraceFormat::Auto).unwrap();
    let mut base = base;
    for kv in args.iter().skip(4) {
        if let Some(v) = kv.strip_prefix("budget_w=") {
            base.budget = Some(wattson_sim::cluster::Budget { power_w: v.parse().expect("a number") });
        } else if let Some(v) = kv.strip_prefix("slurm_order=") {
            base.slurm.order = v.parse().expect("fifo or response-ratio");
        } else {
            base.wattson.set_pair(kv).unwrap_or_else(|e| panic!("{e}"));
        }
    }
    let mut all_ok = true;
    for &nodes in &sizes {
        let mut c = base.clone();
        c.groups[0].nodes = nodes;
        println!("== {trace_name} on {nodes} nodes x {} GPUs", c.gpus_per_node);
        println!(
            "{:<5} {:<16} {:>11} {:>9} {:>9} {:>9} {:>9} {:>6} {:>8} {:>6}",
            "seed",
            "policy",
            "energy kWh",
            "wait h",
            "p99 w h",
            "jct h",
            "capture",
            "viol",
            "lvl chg",
            "ST s"
        );
        // Per policy, sums over the seeds: energy, mean and p99 queueing wait, mean JCT, capture.
        let mut sums: Vec<(String, [f64; 5])> = Vec::new();
        let mut large: Vec<(PolicyKind, [f64; 3])> = Vec::new();
        for seed in 1..=seeds {
            let o = wattson_sim::run(&c, &catalog, &trace, &trace_name, &wattson_sim::policies::ALL, seed)
                .unwrap();
            for s in &o.report.summaries {
                let row = [
                    s.energy_kwh,
                    s.queue_wait_mean_s,
                    s.queue_wait_p99_s,
                    s.jct_mean_s,
                    s.capture.unwrap_or(f64::NAN),
                ];
                add(&mut sums, s.policy.clone(), row);
            }
            for run in &o.runs {
                add(&mut large, run.policy, large_waits(&o.jobs, run));
            }
            let by = |p: PolicyKind| o.report.summaries.iter().find(|s| s.policy == p.name()).unwrap();
            for s in &o.report.summaries {
                println!(
                    "{seed:<5} {:<16} {:>11.0} {:>9.3} {:>9.3} {:>9.3} {:>8.1}% {:>6} {:>8} {:>6} busy {:.0} idle {:.0} (gpu idle {:.0}) trans {:.0} wait {:.3} peak {:.1} kW over {:.0} s",
                    s.policy,
                    s.energy_kwh,
                    s.queue_wait_mean_s / 3600.0,
                    s.queue_wait_p99_s / 3600.0,
                    s.jct_mean_s / 3600.0,
                    s.capture.unwrap_or(f64::NAN) * 100.0,
                    s.bound_violations,
                    s.level_changes,
                    s.suspend_time_s.map_or_else(|| "-".to_string(), |v| format!("{v:.0}")),
                    s.gpu_busy_kwh,
                    s.gpu_idle_kwh + s.node_base_kwh + s.off_kwh,
                    s.gpu_idle_kwh,
                    s.transition_kwh,
                    s.wait_mean_s / 3600.0,
                    s.peak_kw,
                    s.over_budget_s,
                );
            }
            let w = by(PolicyKind::Wattson);
            let ps = by(PolicyKind::SlurmPowersave);
            let others_more = o
                .report
                .summaries
                .iter()
                .filter(|s| s.policy != w.policy && s.policy != PolicyKind::Floor.name())
                .all(|s| w.energy_kwh < s.energy_kwh);
            let checks = [
                ("no bound violation", w.bound_violations == 0),
                ("least energy but floor", others_more),
                ("mean queue wait <= powersave +1%", w.queue_wait_mean_s <= ps.queue_wait_mean_s * 1.01),
                ("p99 queue wait <= powersave +1%", w.queue_wait_p99_s <= ps.queue_wait_p99_s * 1.01),
                ("capture >= 90%", w.capture.unwrap_or(0.0) >= 0.9),
            ];
            let failed: Vec<&str> = checks.iter().filter(|c| !c.1).map(|c| c.0).collect();
            all_ok &= failed.is_empty();
            println!(
                "seed {seed}: {}",
                if failed.is_empty() {
                    "all targets hold".to_string()
                } else {
                    format!("MISSED: {}", failed.join("; "))
                }
            );
        }
        let n = seeds as f64;
        for (policy, [e, w, p99, jct, cap]) in &sums {
            println!(
                "mean  {policy:<16} {:>11.2} {:>9.3} {:>9.2} {:>9.2} {:>8.1}%   (MWh, h; over {seeds} seeds)",
                e / n / 1000.0,
                w / n / 3600.0,
                p99 / n / 3600.0,
                jct / n / 3600.0,
                cap / n * 100.0
            );
        }
        for (policy, [whole, top, max]) in &large {
            println!(
                "large {:<16} mean qwait of jobs of >= 8 GPUs {:.3} h, of the tenth with the most GPU-hours {:.3} h, longest {:.2} h (over {seeds} seeds)",
                policy.name(),
                whole / n / 3600.0,
                top / n / 3600.0,
                max / n / 3600.0
            );
        }
    }
    println!("{}", if all_ok { "ALL TARGETS HOLD" } else { "SOME TARGETS MISSED" });
}

/// Who pays for the queue order: the mean queueing wait of the jobs of 8 GPUs or more, of the
/// tenth of jobs with the most GPU-seconds, and the longest queueing wait in `run` (s).
fn large_waits(jobs: &[wattson_sim::SimJob], run: &wattson_sim::RunResult) -> [f64; 3] {
    let waits: Vec<(f64, u32, f64)> = jobs
        .iter()
        .zip(&run.jobs)
        .map(|(j, x)| (f64::from(j.gpus) * j.duration, j.gpus, x.start - x.eligible))
        .collect();
    let mean = |w: &[f64]| w.iter().sum::<f64>() / w.len().max(1) as f64;
    let whole: Vec<f64> = waits.iter().filter(|w| w.1 >= 8).map(|w| w.2).collect();
    let mut by_size = waits.clone();
    by_size.sort_by(|a, b| b.0.total_cmp(&a.0));
    let top: Vec<f64> = by_size[..by_size.len().div_ceil(10)].iter().map(|w| w.2).collect();
    [mean(&whole), mean(&top), waits.iter().map(|w| w.2).fold(0.0, f64::max)]
}

/// Adds `row` to the running sums kept for `key`.
fn add<K: PartialEq, const N: usize>(sums: &mut Vec<(K, [f64; N])>, key: K, row: [f64; N]) {
    match sums.iter_mut().find(|(k, _)| *k == key) {
        Some((_, acc)) => acc.iter_mut().zip(row).for_each(|(a, x)| *a += x),
        None => sums.push((key, row)),
    }
}
