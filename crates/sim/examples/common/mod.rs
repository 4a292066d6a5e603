//! What the examples that run issue 52's 27 cells share: the repository's files, the cluster
//! file with the arguments' overrides, and the change between two figures.

use std::path::Path;

use wattson_sim::{ClusterConfig, TraceFormat, TraceJob};

const ROOT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");

/// The repository's file at `rel`.
pub fn read(rel: &str) -> String {
    let p = Path::new(ROOT).join(rel);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}

/// The seed count (the first argument, `default` without one) and `etc/sim/cluster.toml` with
/// every policy in FIFO order and the `key=value` overrides after it.
pub fn seeds_and_cluster(default: u64) -> (u64, ClusterConfig) {
    let args: Vec<String> = std::env::args().collect();
    let seeds: u64 = args.get(1).map_or(default, |s| s.parse().expect("seed count"));
    let mut base = ClusterConfig::from_toml(&read("etc/sim/cluster.toml"), "etc/sim/cluster.toml").unwrap();
    wattson_sim::overrides::apply(&mut base, "order=fifo").unwrap();
    for kv in args.iter().skip(2) {
        wattson_sim::overrides::apply(&mut base, kv).unwrap_or_else(|e| panic!("{e}"));
    }
    (seeds, base)
}

/// The ITP trace `name` and `base` sized to `nodes`.
pub fn cell(base: &ClusterConfig, name: &str, nodes: u32) -> (Vec<TraceJob>, ClusterConfig) {
    let text = read(&format!("data/traces/itp-elasticflow/{name}"));
    let trace = wattson_sim::trace::parse(&text, name, TraceFormat::Auto).unwrap();
    let mut c = base.clone();
    c.groups[0].nodes = nodes;
    (trace, c)
}

/// `ours` over `theirs` as a change in percent (a wait of 0 against 0 is no change).
pub fn pct(ours: f64, theirs: f64) -> f64 {
    if theirs <= 0.0 { if ours <= 0.0 { 0.0 } else { f64::INFINITY } } else { 100.0 * (ours / theirs - 1.0) }
}
