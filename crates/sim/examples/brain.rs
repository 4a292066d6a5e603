//! The cluster-brain acceptance run: cluster04 at 80 nodes (~77% load) and 123 nodes (~50%
//! load), seeds 1..5, every policy with the shipped defaults, on time limits (drawn as
//! `[limits]` says), waits counted from submission. Prints each policy's energy, mean and p99
//! wait, deferral, queueing wait, the largest tenth's mean wait, bound violations and kills, which
//! of the targets hold per seed, then each policy's means over the seeds; for seed 1, what
//! sharing GPUs could save at most (`sharing bound:`).
//!
//! Run: `cargo run --release -p wattson-sim --example brain [-- TRACE NODES,NODES SEEDS
//! [key=value...]]` (defaults: cluster04.csv, 80,123, 5); the keys are
//! [`wattson_sim::overrides`]' (e.g. `order=fifo` for every policy, `perfect=1`). Reads
//! `etc/sim/cluster.toml` and `data/`.

use std::path::Path;

use wattson_sim::{Catalog, ClusterConfig, ClusterPolicy, TraceFormat};

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
    let mut base = ClusterConfig::from_toml(&read("etc/sim/cluster.toml"), "etc/sim/cluster.toml").unwrap();
    for kv in args.iter().skip(4) {
        wattson_sim::overrides::apply(&mut base, kv).unwrap_or_else(|e| panic!("{e}"));
    }
    let mut catalog =
        Catalog::from_zeus_csv(&read("data/dvfs/zeus-power-limit/summary_power_v100.csv"), "zeus").unwrap();
    // Shared GPUs: Gavel's pairs as etc/sim/cluster.toml names them (`colocation_json=`: none).
    if let Some(rel) = &base.colocation_json {
        let gavel = format!("etc/sim/{rel}");
        let colocation = wattson_sim::colocation::Colocation::from_gavel_json(&read(&gavel), &gavel);
        catalog.colocation = Some(colocation.unwrap());
    }
    let text = read(&format!("data/traces/itp-elasticflow/{trace_name}"));
    let trace = wattson_sim::trace::parse(&text, &trace_name, TraceFormat::Auto).unwrap();
    let mut all_ok = true;
    for &nodes in &sizes {
        let mut c = base.clone();
        c.groups[0].nodes = nodes;
        println!(
            "== {trace_name} on {nodes} nodes x {} GPUs; the policies know {}; order: wattson {:?}, references {:?}",
            c.gpus_per_node,
            c.limits.label(),
            c.wattson.tuning.queue_order,
            c.slurm.order
        );
        println!(
            "{:<5} {:<16} {:>11} {:>8} {:>8} {:>7} {:>8} {:>8} {:>7} {:>8} {:>5} {:>6} {:>6}",
            "seed",
            "policy",
            "energy kWh",
            "wait h",
            "p99 h",
            "defer h",
            "qwait h",
            "top10 h",
            "jct h",
            "capture",
            "viol",
            "killed",
            "ST s"
        );
        // Per policy, sums over the seeds.
        let mut sums: Vec<(String, [f64; 11])> = Vec::new();
        for seed in 1..=seeds {
            let o = wattson_sim::run(&c, &catalog, &trace, &trace_name, &wattson_sim::policies::ALL, seed)
                .unwrap();
            if seed == 1 {
                sharing_bound(&c, &catalog, &o);
            }
            for s in &o.report.summaries {
                let row = [
                    s.energy_kwh,
                    s.wait_mean_s,
                    s.wait_p99_s,
                    s.defer_mean_s,
                    s.queue_wait_mean_s,
                    s.wait_large_mean_s,
                    s.gpu_busy_kwh,
                    s.capture.unwrap_or(f64::NAN),
                    s.bound_violations as f64,
                    s.waits.imposed_wait_mean_s,
                    s.waits.late_jobs as f64,
                ];
                add(&mut sums, s.policy.clone(), row);
                println!(
                    "{seed:<5} {:<16} {:>11.0} {:>8.3} {:>8.2} {:>7.3} {:>8.3} {:>8.3} {:>7.2} {:>7.1}% {:>5} {:>6} {:>6} gpu {:.0} idle {:.0} trans {:.0} imposed {:.3} h late {}",
                    s.policy,
                    s.energy_kwh,
                    s.wait_mean_s / 3600.0,
                    s.wait_p99_s / 3600.0,
                    s.defer_mean_s / 3600.0,
                    s.queue_wait_mean_s / 3600.0,
                    s.wait_large_mean_s / 3600.0,
                    s.jct_mean_s / 3600.0,
                    s.capture.unwrap_or(f64::NAN) * 100.0,
                    s.bound_violations,
                    s.killed_jobs,
                    s.suspend_time_s.map_or_else(|| "-".to_string(), |v| format!("{v:.0}")),
                    s.gpu_busy_kwh,
                    s.gpu_idle_kwh + s.node_base_kwh + s.off_kwh,
                    s.transition_kwh,
                    s.waits.imposed_wait_mean_s / 3600.0,
                    s.waits.late_jobs,
                );
            }
            let by = |p: ClusterPolicy| o.report.summary(p).unwrap();
            let (w, ps, pd, f) = (
                by(ClusterPolicy::Wattson),
                by(ClusterPolicy::SlurmPowersave),
                by(ClusterPolicy::PowersaveDvfs),
                by(ClusterPolicy::Floor),
            );
            let checks = [
                ("no bound violation", w.bound_violations == 0),
                ("GPU energy >= floor's", w.gpu_busy_kwh >= f.gpu_busy_kwh),
                ("mean wait <= slurm-powersave +5%", w.wait_mean_s <= ps.wait_mean_s * 1.05),
                ("p99 wait <= slurm-powersave +5%", w.wait_p99_s <= ps.wait_p99_s * 1.05),
                ("energy < powersave-dvfs", w.energy_kwh < pd.energy_kwh),
            ];
            let failed: Vec<&str> = checks.iter().filter(|c| !c.1).map(|c| c.0).collect();
            all_ok &= failed.is_empty();
            if w.shared_jobs > 0 {
                println!(
                    "seed {seed}: wattson shared GPUs for {} jobs ({:.1}% of jobs), {:.2}% of their GPU time",
                    w.shared_jobs,
                    100.0 * w.shared_jobs as f64 / w.jobs as f64,
                    100.0 * w.shared_gpu_time
                );
            }
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
        for (policy, [e, w, p99, defer, qw, top, gpu, cap, viol, imposed, late]) in &sums {
            println!(
                "mean  {policy:<16} {:>8.2} MWh  wait {:.3} h  p99 {:.2} h  defer {:.3} h  qwait {:.3} h  top10 {:.3} h  gpu {:.2} MWh  capture {:.1}%  over bound {:.0} jobs  imposed {:.3} h  late {:.1} jobs  ({} over {seeds} seeds)",
                e / n / 1000.0,
                w / n / 3600.0,
                p99 / n / 3600.0,
                defer / n / 3600.0,
                qw / n / 3600.0,
                top / n / 3600.0,
                gpu / n / 1000.0,
                cap / n * 100.0,
                viol / n,
                imposed / n / 3600.0,
                late / n,
                c.limits.label(),
            );
        }
    }
    println!("{}", if all_ok { "ALL TARGETS HOLD" } else { "SOME TARGETS MISSED" });
}

/// Adds `row` to the running sums kept for `key`.
fn add<K: PartialEq, const N: usize>(sums: &mut Vec<(K, [f64; N])>, key: K, row: [f64; N]) {
    match sums.iter_mut().find(|(k, _)| *k == key) {
        Some((_, acc)) => acc.iter_mut().zip(row).for_each(|(a, x)| *a += x),
        None => sums.push((key, row)),
    }
}

/// What sharing GPUs could save at most: half the GPU energy (at the top limit) and node-base
/// share of every job that may share (at most `[hints] share_gpus` GPUs), as if each shared
/// its whole run with no slowdown and the GPU drew no more than one job alone; and the least
/// slowdown, the worse of the two ways, of a pair of the co-location classes those jobs have.
fn sharing_bound(c: &ClusterConfig, catalog: &Catalog, o: &wattson_sim::Outcome) {
    let base_share_w = c.node.base_w / f64::from(c.gpus_per_node);
    let may_share: Vec<_> = o.jobs.iter().filter(|j| j.gpus <= c.hints.share_gpus).collect();
    let gpu_s = |j: &wattson_sim::SimJob| f64::from(j.gpus) * j.duration;
    let all_s: f64 = o.jobs.iter().map(gpu_s).sum();
    let may_share_s: f64 = may_share.iter().map(|j| gpu_s(j)).sum();
    let half_j: f64 = may_share
        .iter()
        .map(|j| {
            let w = catalog.get(0, j.workload);
            gpu_s(j) * (w.power[w.max_idx()] + base_share_w) / 2.0
        })
        .sum();
    let ps = o.report.summary(ClusterPolicy::SlurmPowersave).unwrap().energy_kwh;
    let mut line = format!(
        "sharing bound: jobs of at most {} GPUs hold {:.1}% of GPU time; at most {:.2} MWh saved ({:.1}% of slurm-powersave's)",
        c.hints.share_gpus,
        100.0 * may_share_s / all_s,
        half_j / 3.6e9,
        100.0 * half_j / 3.6e6 / ps
    );
    if let Some(colo) = &catalog.colocation {
        let class = |j: &wattson_sim::SimJob| {
            let w = catalog.get(0, j.workload);
            colo.class_of(&w.network, w.batch)
        };
        let classed_s: f64 = may_share.iter().filter(|j| class(j).is_some()).map(|j| gpu_s(j)).sum();
        let classes: std::collections::BTreeSet<u16> = may_share.iter().filter_map(|j| class(j)).collect();
        let least = classes
            .iter()
            .flat_map(|&a| classes.iter().map(move |&b| (a, b)))
            .filter_map(|(a, b)| Some(colo.slowdown(a, b)?.max(colo.slowdown(b, a)?)))
            .fold(f64::INFINITY, f64::min);
        line += &format!(
            "; {:.1}% of their GPU time has a class; least pair slowdown among those classes {:.2}",
            100.0 * classed_s / may_share_s,
            least
        );
    }
    println!("{line}");
}
