//! The heterogeneous-cluster check (GPU types): wattson placing each job on the GPU
//! type where its predicted energy under its bound is least, against the same policy placing
//! in configuration order (`type_aware = false`, as Slurm's node order would), on
//! `etc/sim/cluster-hetero.toml` (V100, A40 and P100 nodes), with the references beside them.
//!
//! Run: `cargo run --release -p wattson-sim --example hetero [-- TRACE SEEDS [key=value...]]`
//! (defaults: cluster04.csv, 3; `key=value` sets a `[wattson]` knob, e.g. `type_max_cost=1.3`).
//! Reads `etc/sim/cluster-hetero.toml` and `data/`.

use std::path::Path;

use wattson_sim::{Catalog, ClusterConfig, ClusterPolicy, TraceFormat};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let trace_name = args.get(1).cloned().unwrap_or_else(|| "cluster04.csv".to_string());
    let seeds: u64 = args.get(2).map_or(3, |s| s.parse().expect("seed count"));
    let cpath = Path::new(ROOT).join("etc/sim/cluster-hetero.toml");
    let mut base = ClusterConfig::from_toml(&read(&cpath), "etc/sim/cluster-hetero.toml").unwrap();
    for kv in args.iter().skip(3) {
        base.wattson.set_pair(kv).unwrap_or_else(|e| panic!("{e}"));
    }
    let dir = cpath.parent().unwrap();
    let texts: Vec<String> = base.groups.iter().map(|g| read(&dir.join(&g.zeus_csv))).collect();
    let files: Vec<(&str, &str)> =
        texts.iter().zip(&base.groups).map(|(t, g)| (t.as_str(), g.gpu.as_str())).collect();
    let catalog = Catalog::from_zeus_csvs(&files).unwrap();
    let text = read(&Path::new(ROOT).join("data/traces/itp-elasticflow").join(&trace_name));
    let trace = wattson_sim::trace::parse(&text, &trace_name, TraceFormat::Auto).unwrap();
    let groups: Vec<String> = base.groups.iter().map(|g| format!("{} {}", g.nodes, g.gpu)).collect();
    println!("== {trace_name} on {} nodes of 8 GPUs", groups.join(" + "));
    println!(
        "{:<5} {:<22} {:>11} {:>9} {:>9} {:>9} {:>6} {:>7} {:>7}",
        "seed", "policy", "energy kWh", "wait h", "p99 w h", "jct h", "viol", "boots", "boot s"
    );
    let policies = [
        ClusterPolicy::SlurmPowersave,
        ClusterPolicy::PowersaveDvfs,
        ClusterPolicy::Wattson,
        ClusterPolicy::Floor,
    ];
    let mut all_ok = true;
    for seed in 1..=seeds {
        let mut rows = Vec::new();
        for aware in [true, false] {
            let mut c = base.clone();
            c.wattson.tuning.type_aware = aware;
            let list: &[ClusterPolicy] = if aware { &policies } else { &[ClusterPolicy::Wattson] };
            let o = wattson_sim::run(&c, &catalog, &trace, &trace_name, list, seed).unwrap();
            for s in &o.report.summaries {
                let run = o.runs.iter().find(|r| r.policy.name() == s.policy);
                let over = run.map_or(0, |r| {
                    o.jobs.iter().zip(&r.jobs).filter(|(j, x)| x.slowdown > j.bound + 1e-9).count()
                });
                // Jobs that waited for a node to boot, and the mean boot wait over all jobs.
                let boot_waits: Vec<f64> =
                    run.map_or(Vec::new(), |r| r.jobs.iter().map(|x| (x.start - x.alloc).max(0.0)).collect());
                let booted = boot_waits.iter().filter(|&&w| w > 0.0).count();
                let boot_s = boot_waits.iter().sum::<f64>() / boot_waits.len().max(1) as f64;
                let name = if s.policy == "wattson" && !aware {
                    "wattson type-oblivious".to_string()
                } else {
                    s.policy.clone()
                };
                println!(
                    "{seed:<5} {name:<22} {:>11.0} {:>9.3} {:>9.2} {:>9.3} {over:>6} {booted:>7} {boot_s:>7.1}",
                    s.energy_kwh,
                    s.queue_wait_mean_s / 3600.0,
                    s.queue_wait_p99_s / 3600.0,
                    s.jct_mean_s / 3600.0
                );
                rows.push((name, s.energy_kwh, s.queue_wait_mean_s));
            }
        }
        let get = |n: &str| rows.iter().find(|r| r.0 == n).unwrap();
        let (a, b) = (get("wattson"), get("wattson type-oblivious"));
        let ok = a.1 < b.1 && a.2 <= b.2 * 1.01;
        all_ok &= ok;
        println!(
            "seed {seed}: type-aware {:+.1}% energy, mean queue wait {:+.1}% vs type-oblivious: {}",
            100.0 * (a.1 / b.1 - 1.0),
            100.0 * (a.2 / b.2.max(1e-9) - 1.0),
            if ok { "ok" } else { "MISSED" }
        );
    }
    println!("{}", if all_ok { "ALL TARGETS MET" } else { "SOME TARGETS MISSED" });
}
