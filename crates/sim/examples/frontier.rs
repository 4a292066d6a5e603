//! Energy against wait for every policy's knobs: slurm-powersave's `SuspendTime`,
//! powersave-dvfs's `SuspendTime` and a cap on the bound it slows jobs to (`max_bound`), and
//! wattson's own knobs (`max_wait_cost`, `congestion_raise`, `raise_after_runs`, deferral on or
//! off, DVFS off).
//! Each setting's energy, mean and p99 wait (from submission) are means over the seeds. Writes
//! `OUT/frontier-TRACE-NODES.csv` and `.svg` per case and prints, for each point of the two
//! reference curves, the wattson settings that use less energy with no more mean and p99 wait.
//!
//! Run: `cargo run --release -p wattson-sim --example frontier [-- TRACE NODES,NODES SEEDS OUT
//! [key=value...]]` (defaults: cluster04.csv, 80,123, 5, docs/sim-plots). Every policy keeps
//! FIFO order unless an override says otherwise (`order=response-ratio`; the keys are
//! [`wattson_sim::overrides`]').

use std::fmt::Write as _;
use std::path::Path;

use wattson_sim::{Catalog, ClusterConfig, ClusterPolicy, TraceFormat, TraceJob};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

fn read(rel: &str) -> String {
    let p = Path::new(ROOT).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}

/// One setting of one policy: (policy, knob label, energy kWh, mean wait s, p99 wait s),
/// summed over the seeds until divided.
type Point = (String, String, f64, f64, f64);

/// wattson's swept settings, as overrides: the wait-cost bound, then the other knobs without it.
const WATTSON: [&str; 14] = [
    "max_wait_cost=0.05",
    "max_wait_cost=0.1",
    "max_wait_cost=0.2",
    "max_wait_cost=100 congestion_raise=0 raise_after_runs=1",
    "max_wait_cost=100 congestion_raise=0.5 raise_after_runs=1",
    "max_wait_cost=100 congestion_raise=1 raise_after_runs=1",
    "max_wait_cost=100 congestion_raise=0.5 raise_after_runs=0",
    "max_wait_cost=100 congestion_raise=1 raise_after_runs=0",
    "max_wait_cost=100 congestion_raise=0.5 raise_after_runs=4",
    "max_wait_cost=100 congestion_raise=1 raise_after_runs=4",
    "max_wait_cost=100 congestion_raise=0 raise_after_runs=0",
    "max_wait_cost=100 dvfs_min_free=1 congestion_raise=1",
    "max_wait_cost=100 dvfs_min_free=0.2 congestion_raise=1 raise_after_runs=0",
    "max_wait_cost=100 dvfs_min_free=0.3 congestion_raise=1 raise_after_runs=0",
];

/// Runs `policies` on `c` and adds each reported setting to `acc` under `label`.
fn measure(
    c: &ClusterConfig,
    cat: &Catalog,
    trace: &[TraceJob],
    seed: u64,
    policies: &[ClusterPolicy],
    label: &str,
    acc: &mut Vec<Point>,
) {
    let o = wattson_sim::run(c, cat, trace, "t", policies, seed).unwrap();
    let mut add = |policy: &str, knob: String, e: f64, w: f64, p: f64| match acc
        .iter_mut()
        .find(|x| x.0 == policy && x.1 == knob)
    {
        Some(x) => (x.2, x.3, x.4) = (x.2 + e, x.3 + w, x.4 + p),
        None => acc.push((policy.to_string(), knob, e, w, p)),
    };
    for s in &o.report.sweep {
        add(&s.policy, format!("{label}{}", s.knob), s.energy_kwh, s.wait_mean_s, s.wait_p99_s);
    }
    for s in o.report.summaries.iter().filter(|s| s.policy == ClusterPolicy::Wattson.name()) {
        add(&s.policy, label.trim().to_string(), s.energy_kwh, s.wait_mean_s, s.wait_p99_s);
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let trace_name = args.get(1).cloned().unwrap_or_else(|| "cluster04.csv".to_string());
    let sizes: Vec<u32> =
        args.get(2).map_or("80,123", String::as_str).split(',').map(|s| s.parse().expect("nodes")).collect();
    let seeds: u64 = args.get(3).map_or(5, |s| s.parse().expect("seed count"));
    let out = Path::new(ROOT).join(args.get(4).map_or("docs/sim-plots", String::as_str));
    let mut base = ClusterConfig::from_toml(&read("etc/sim/cluster.toml"), "etc/sim/cluster.toml").unwrap();
    wattson_sim::overrides::apply(&mut base, "order=fifo").unwrap();
    for kv in args.iter().skip(5) {
        wattson_sim::overrides::apply(&mut base, kv).unwrap_or_else(|e| panic!("{e}"));
    }
    let cat =
        Catalog::from_zeus_csv(&read("data/dvfs/zeus-power-limit/summary_power_v100.csv"), "zeus").unwrap();
    let text = read(&format!("data/traces/itp-elasticflow/{trace_name}"));
    let trace = wattson_sim::trace::parse(&text, &trace_name, TraceFormat::Auto).unwrap();
    let stem = trace_name.trim_end_matches(".csv");
    for &nodes in &sizes {
        let mut c = base.clone();
        c.groups[0].nodes = nodes;
        let mut pts: Vec<Point> = Vec::new();
        for seed in 1..=seeds {
            measure(&c, &cat, &trace, seed, &[ClusterPolicy::SlurmPowersave], "", &mut pts);
            for cap in [0.05, 0.1, 0.2] {
                let mut d = c.clone();
                wattson_sim::overrides::apply(&mut d, &format!("max_bound={cap}")).unwrap();
                let label = format!("max_bound={cap} ");
                measure(&d, &cat, &trace, seed, &[ClusterPolicy::PowersaveDvfs], &label, &mut pts);
            }
            for knobs in WATTSON {
                let mut w = c.clone();
                for kv in knobs.split(' ') {
                    wattson_sim::overrides::apply(&mut w, kv).unwrap();
                }
                for defer in ["", " min_price_drop=100"] {
                    let mut v = w.clone();
                    if !defer.is_empty() {
                        wattson_sim::overrides::apply(&mut v, defer.trim()).unwrap();
                    }
                    let label = format!("{knobs}{defer}");
                    measure(&v, &cat, &trace, seed, &[ClusterPolicy::Wattson], &label, &mut pts);
                }
            }
        }
        let n = seeds as f64;
        for p in &mut pts {
            (p.2, p.3, p.4) = (p.2 / n, p.3 / n / 3600.0, p.4 / n / 3600.0);
        }
        let case = format!(
            "{stem} on {nodes} nodes, seeds 1-{seeds}, {}, order {:?}",
            c.limits.label(),
            c.slurm.order
        );
        let mut csv = String::from("policy,knob,energy_kwh,wait_mean_h,wait_p99_h,beaten_by_wattson\n");
        println!("== {case}");
        let ours: Vec<&Point> = pts.iter().filter(|p| p.0 == ClusterPolicy::Wattson.name()).collect();
        for p in &pts {
            let beats = |w: &&&Point| w.2 < p.2 && w.3 <= p.3 && w.4 <= p.4;
            let by: Vec<&str> = if p.0 == ClusterPolicy::Wattson.name() {
                Vec::new()
            } else {
                ours.iter().filter(beats).map(|w| w.1.as_str()).collect()
            };
            let _ = writeln!(csv, "{},{},{:.1},{:.4},{:.3},{}", p.0, p.1, p.2, p.3, p.4, by.join("; "));
            let verdict = match (p.0 == ClusterPolicy::Wattson.name(), by.first()) {
                (true, _) => String::new(),
                (false, Some(w)) => format!("  beaten by {} wattson setting(s), e.g. {w}", by.len()),
                (false, None) => "  NOT BEATEN by any wattson setting".to_string(),
            };
            println!("{:<16} {:<58} {:>10.0} kWh {:>7.3} h {:>7.2} h{verdict}", p.0, p.1, p.2, p.3, p.4);
        }
        let series: Vec<(String, Vec<(f64, f64)>)> =
            [ClusterPolicy::SlurmPowersave, ClusterPolicy::PowersaveDvfs, ClusterPolicy::Wattson]
                .iter()
                .map(|k| {
                    (
                        k.name().to_string(),
                        pts.iter().filter(|p| p.0 == k.name()).map(|p| (p.3, p.2)).collect(),
                    )
                })
                .collect();
        let svg = wattson_sim::plot::frontier(&format!("Energy vs mean wait — {case}"), &series);
        std::fs::create_dir_all(&out).unwrap();
        let file = out.join(format!("frontier-{stem}-{nodes}"));
        std::fs::write(file.with_extension("csv"), csv).unwrap();
        std::fs::write(file.with_extension("svg"), svg).unwrap();
        println!("wrote {}.csv and .svg", file.display());
    }
}
