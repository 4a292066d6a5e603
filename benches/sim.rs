//! `wattson sim` speed: the full cluster04 trace (15,802 jobs) with every policy, and all ten
//! ITP clusters (69k jobs) with every policy, single-threaded, in release. "Every policy" is
//! 14 simulations: slurm-default, zeus-per-job, wattson, and slurm-powersave and powersave-dvfs
//! at four `SuspendTime` values each, plus the floor's list schedule.
//! Baselines in the same run: parsing the trace alone, and slurm-default alone.
//! Run: `cargo bench --bench sim` (reads `data/`; fails if it is missing).

use std::path::Path;
use std::time::Instant;

use wattson_sim::{Catalog, ClusterConfig, ClusterPolicy, TraceFormat};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const REPS: usize = 5;

fn read(rel: &str) -> String {
    let p = Path::new(ROOT).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}

/// Median and minimum wall time (s) of `REPS` runs of `f`.
fn time(mut f: impl FnMut() -> usize) -> (f64, f64, usize) {
    let mut v = Vec::new();
    let mut n = 0;
    for _ in 0..REPS {
        let t = Instant::now();
        n = std::hint::black_box(f());
        v.push(t.elapsed().as_secs_f64());
    }
    v.sort_by(f64::total_cmp);
    (v[REPS / 2], v[0], n)
}

fn main() {
    let cluster = ClusterConfig::from_toml(&read("etc/sim/cluster.toml"), "etc/sim/cluster.toml").unwrap();
    let catalog =
        Catalog::from_zeus_csv(&read("data/dvfs/zeus-power-limit/summary_power_v100.csv"), "zeus").unwrap();
    let dir = "data/traces/itp-elasticflow";
    let c04 = read(&format!("{dir}/cluster04.csv"));
    let all: Vec<(String, String)> =
        (1..=10).map(|i| (format!("cluster{i:02}.csv"), read(&format!("{dir}/cluster{i:02}.csv")))).collect();
    let parse = |t: &str| wattson_sim::trace::parse(t, "t", TraceFormat::Auto).unwrap();
    let run = |t: &str, p: &[ClusterPolicy]| {
        let jobs = parse(t);
        wattson_sim::run(&cluster, &catalog, &jobs, "t", p, 1).unwrap().jobs.len()
    };
    let rows = [
        ("parse cluster04 (baseline)", time(|| parse(&c04).len())),
        ("cluster04, slurm-default only", time(|| run(&c04, &[ClusterPolicy::SlurmDefault]))),
        ("cluster04, wattson only", time(|| run(&c04, &[ClusterPolicy::Wattson]))),
        ("cluster04, all policies", time(|| run(&c04, &wattson_sim::policies::ALL))),
        (
            "10 ITP clusters, all policies",
            time(|| all.iter().map(|(_, t)| run(t, &wattson_sim::policies::ALL)).sum()),
        ),
    ];
    let base = rows[0].1.0;
    println!(
        "{:<38} {:>7} {:>10} {:>10} {:>12}",
        "benchmark (single thread, release)", "jobs", "median s", "min s", "x parse"
    );
    for (name, (med, min, n)) in rows {
        println!("{name:<38} {n:>7} {med:>10.3} {min:>10.3} {:>12.1}", med / base);
    }
}
