//! Right-sizing against Slurm's idle timer, with DVFS, deferral and the
//! queue order off so that only node power differs: wattson's warm set against `slurm-powersave` at its
//! least-energy `SuspendTime` (300/600/1800/3600 s, chosen per case with hindsight), on
//! cluster04 at 80 and 123 nodes and each other ITP trace at ~77% and ~50% of its mean load.
//! Prints each case's energy and mean queueing wait (boot waits included) and the
//! `SuspendTime` settings that beat right-sizing on both (no more energy and wait, one less);
//! counts the cases where right-sizing uses no more energy and waits at most 1% longer, and
//! those no timer setting beats.
//!
//! Run: `cargo run --release -p wattson-sim --example rightsize [-- SEEDS [key=value...]]`
//! (default 1 seed; `key=value` sets a `[wattson]` knob, e.g. `warm_shortfall=0.5`). Reads
//! `etc/sim/cluster.toml` and `data/`.

use std::path::Path;

use wattson_sim::trace::ITP_LOAD_MATCHED;
use wattson_sim::{Catalog, ClusterConfig, ClusterPolicy, TraceFormat};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// (trace, nodes): the load-matched sizes of every trace ([`ITP_LOAD_MATCHED`]), and two
/// light traces on 80 nodes.
fn cases() -> Vec<(&'static str, u32)> {
    ITP_LOAD_MATCHED.iter().copied().chain([("cluster01.csv", 80), ("cluster09.csv", 80)]).collect()
}

fn read(rel: &str) -> String {
    let p = Path::new(ROOT).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seeds: u64 = args.get(1).map_or(1, |s| s.parse().expect("seed count"));
    let mut base = ClusterConfig::from_toml(&read("etc/sim/cluster.toml"), "etc/sim/cluster.toml").unwrap();
    // DVFS off (the capacity gate closed: every job at full speed), deferral off, and Slurm's
    // FIFO order: only node power differs from the timer.
    for kv in ["dvfs_min_free=1", "congestion_raise=1", "min_price_drop=100", "queue_order=fifo"] {
        base.wattson.set_pair(kv).unwrap();
    }
    for kv in args.iter().skip(2) {
        base.wattson.set_pair(kv).unwrap_or_else(|e| panic!("{e}"));
    }
    let catalog =
        Catalog::from_zeus_csv(&read("data/dvfs/zeus-power-limit/summary_power_v100.csv"), "zeus").unwrap();
    let (mut energy_pct, mut wait_pct, mut no_worse, mut undominated) = (0.0, 0.0, 0, 0);
    println!(
        "{:<14} {:>5} {:>11} {:>9} {:>11} {:>8} {:>9} {:>8}  beaten by SuspendTime",
        "trace", "nodes", "timer kWh", "wait h", "wattson kWh", "energy", "wait h", "wait"
    );
    let cases = cases();
    for &(trace_name, nodes) in &cases {
        let text = read(&format!("data/traces/itp-elasticflow/{trace_name}"));
        let trace = wattson_sim::trace::parse(&text, trace_name, TraceFormat::Auto).unwrap();
        let mut c = base.clone();
        c.groups[0].nodes = nodes;
        let [mut timer_e, mut timer_w, mut ours_e, mut ours_w] = [0.0; 4];
        // Every SuspendTime's (energy, wait) summed over the seeds, in sweep order.
        let mut sweep: Vec<(String, f64, f64)> = Vec::new();
        for seed in 1..=seeds {
            let list = [ClusterPolicy::SlurmPowersave, ClusterPolicy::Wattson];
            let o = wattson_sim::run(&c, &catalog, &trace, trace_name, &list, seed).unwrap();
            let by = |p: ClusterPolicy| o.report.summary(p).unwrap();
            let (t, w) = (by(ClusterPolicy::SlurmPowersave), by(ClusterPolicy::Wattson));
            for (i, p) in o.report.sweep.iter().enumerate() {
                match sweep.get_mut(i) {
                    Some(x) => {
                        x.1 += p.energy_kwh;
                        x.2 += p.wait_mean_s;
                    }
                    None => sweep.push((p.knob.clone(), p.energy_kwh, p.wait_mean_s)),
                }
            }
            timer_e += t.energy_kwh;
            timer_w += t.queue_wait_mean_s;
            ours_e += w.energy_kwh;
            ours_w += w.queue_wait_mean_s;
        }
        let de = 100.0 * (ours_e / timer_e - 1.0);
        let dw = 100.0 * (ours_w / timer_w.max(1e-9) - 1.0);
        energy_pct += de;
        wait_pct += dw;
        no_worse += usize::from(de <= 0.0 && dw <= 1.0);
        // Timer settings with no more energy and no more wait, one of them less.
        let beaten_by: Vec<&str> = sweep
            .iter()
            .filter(|x| x.1 <= ours_e && x.2 <= ours_w && (x.1 < ours_e || x.2 < ours_w))
            .map(|x| x.0.trim_start_matches("SuspendTime="))
            .collect();
        undominated += usize::from(beaten_by.is_empty());
        let n = seeds as f64;
        println!(
            "{trace_name:<14} {nodes:>5} {:>11.0} {:>9.3} {:>11.0} {de:>+7.2}% {:>9.3} {dw:>+7.1}%  {}",
            timer_e / n,
            timer_w / 3600.0 / n,
            ours_e / n,
            ours_w / 3600.0 / n,
            if beaten_by.is_empty() { "-".to_string() } else { beaten_by.join(",") }
        );
    }
    let k = cases.len() as f64;
    println!(
        "mean over the cases: energy {:+.2}%, mean queueing wait {:+.1}%; no more energy and at most 1% more wait in {no_worse} of {}",
        energy_pct / k,
        wait_pct / k,
        cases.len()
    );
    println!(
        "no timer setting uses less energy and waits less (both no more, one less) in {undominated} of {}",
        cases.len()
    );
}
