//! Validation of the power-limit model and chooser on Zeus's measurements (Zeus, NSDI'23,
//! ml-energy/zeus @ 75a8b939, Apache-2.0), in `data/dvfs/zeus-power-limit/`.
//!
//! Per (GPU, dataset, network, batch size, optimizer) with ≥ 5 power limits: fit from three
//! probes (lowest, middle, highest limit) and predict time and energy at every other limit;
//! for slowdown bounds of 5, 10 and 20%, fit on the node's first three probes for that bound
//! (highest, middle, and a third where the decision is expected) and choose a limit, scored
//! against the measured values.
//! Then the node's probing plan is replayed on the same curves (probes answered by the
//! measurements) and scored the same way.
//! Runner: `cargo test --release --test engine zeus:: -- --nocapture` prints the table.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use wattson_engine::{
    ChooserConfig, Knob, Objective, ProbeConfig, Sample, Step, choose, first_probes, fit, next_step,
};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/data/dvfs/zeus-power-limit");
const GPUS: [&str; 4] = ["v100", "a40", "p100", "rtx6000"];
const BOUNDS: [f64; 3] = [0.05, 0.10, 0.20];

/// (limit W, time per epoch s, average power W), sorted by limit.
type Curve = Vec<(f64, f64, f64)>;

fn load(gpu: &str) -> BTreeMap<String, Curve> {
    let path = format!("{DATA}/summary_power_{gpu}.csv");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("Zeus data missing at {path} ({e}): the validation needs data/dvfs/zeus-power-limit")
    });
    let mut lines = text.lines();
    let header = lines.next().expect("empty CSV");
    assert_eq!(header, "dataset,network,batch_size,optimizer,power_limit,time_per_epoch,average_power");
    let mut groups: BTreeMap<String, Curve> = BTreeMap::new();
    for line in lines.filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split(',').collect();
        assert_eq!(f.len(), 7, "bad row {line:?}");
        let num = |i: usize| f[i].parse::<f64>().unwrap_or_else(|e| panic!("bad number in {line:?}: {e}"));
        let key = format!("{}/{}/{}/{}", f[0], f[1], f[2], f[3]);
        groups.entry(key).or_default().push((num(4), num(5), num(6)));
    }
    for c in groups.values_mut() {
        c.sort_by(|a, b| a.0.total_cmp(&b.0));
        c.dedup_by(|a, b| a.0 == b.0);
    }
    groups.retain(|_, c| c.len() >= 5);
    groups
}

/// Probes spread over the range, for the prediction error: lowest, nearest the middle, highest.
fn probes(c: &Curve) -> [usize; 3] {
    let (lo, hi) = (c[0].0, c[c.len() - 1].0);
    let target = 0.5 * (lo + hi);
    let mid = (1..c.len() - 1)
        .min_by(|&a, &b| (c[a].0 - target).abs().total_cmp(&(c[b].0 - target).abs()))
        .expect("≥ 5 limits");
    [0, mid, c.len() - 1]
}

#[derive(Default)]
struct GpuStats {
    workloads: usize,
    ape_time: Vec<f64>,
    ape_energy: Vec<f64>,
    violations: [usize; 3],
    gaps: [Vec<f64>; 3],
    savings: [Vec<f64>; 3],
    true_slowdowns: [Vec<f64>; 3],
    /// Limits measured per workload.
    limits: Vec<f64>,
    /// The node's probing plan replayed on the same curve (see `replay`).
    node: [Replay; 3],
}

/// Outcome of the node's probing plan over the workloads of one GPU type, at one bound.
#[derive(Default)]
struct Replay {
    violations: usize,
    gaps: Vec<f64>,
    savings: Vec<f64>,
    probes: Vec<f64>,
    /// Second runs that probed again or settled elsewhere (must stay 0).
    unstable: usize,
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 }
}

fn max(v: &[f64]) -> f64 {
    v.iter().copied().fold(0.0, f64::max)
}

/// What every decision on a curve is scored against: its limits and the max limit's time and
/// energy (the full-speed reference).
struct Reference {
    settings: Vec<f64>,
    t_max: f64,
    e_max: f64,
}

fn reference(c: &Curve) -> Reference {
    let (_, t_max, w_max) = c[c.len() - 1];
    Reference { settings: c.iter().map(|x| x.0).collect(), t_max, e_max: t_max * w_max }
}

/// The curve's point at limit `p` (one of its limits: the plan and the chooser ask for no other).
fn at(c: &Curve, p: f64) -> (f64, f64, f64) {
    *c.iter().find(|x| x.0 == p).expect("a limit of the curve")
}

/// A probe window at limit `p`, answered by the measurement there.
fn measure(c: &Curve, p: f64) -> Sample {
    let (_, t, w) = at(c, p);
    Sample::new(p, t, w, 1.0)
}

fn evaluate(c: &Curve, s: &mut GpuStats) {
    let pr = probes(c);
    let samples: Vec<Sample> = pr.iter().map(|&i| measure(c, c[i].0)).collect();
    let model = fit(Knob::PowerLimit, &samples).expect("three distinct probes fit");
    s.workloads += 1;
    s.limits.push(c.len() as f64);
    for (i, &(p, t, w)) in c.iter().enumerate() {
        if pr.contains(&i) {
            continue;
        }
        let pred = model.predict(p);
        s.ape_time.push((pred.time - t).abs() / t);
        s.ape_energy.push((pred.energy - t * w).abs() / (t * w));
    }
    let re = reference(c);
    let (t_max, e_max) = (re.t_max, re.e_max);
    for (k, &bound) in BOUNDS.iter().enumerate() {
        // Three probes: the node's first three for this bound, the model fitted on them.
        let objective = Objective::MinEnergy { max_slowdown: bound };
        let samples = first_probes(&re.settings, objective, Knob::PowerLimit, |p| measure(c, p));
        let model = fit(Knob::PowerLimit, &samples).expect("three distinct probes fit");
        let d = choose(&model, &re.settings, objective, &ChooserConfig::default());
        let chosen = d.setting.expect("a setting");
        let (_, t, w) = at(c, chosen);
        let slowdown = t / t_max - 1.0;
        if slowdown > bound + 1e-12 {
            s.violations[k] += 1;
            eprintln!("violation: bound {bound}, chose {chosen} W, true slowdown {slowdown:.4}, {d:?}");
        }
        let oracle =
            c.iter().filter(|x| x.1 / t_max - 1.0 <= bound).map(|x| x.1 * x.2).fold(f64::INFINITY, f64::min);
        s.gaps[k].push(t * w / oracle - 1.0);
        s.savings[k].push(1.0 - t * w / e_max);
        s.true_slowdowns[k].push(slowdown);
        replay(c, &re, bound, oracle, &mut s.node[k]);
    }
}

/// The node's plan (`engine::probe::next_step`, as `wattsond` runs it) on a measured curve:
/// each probe window returns the measurement at that limit, until the plan settles. The truth
/// is the same measurement, so this scores the search (probes spent, distance to the oracle),
/// not measurement noise. A second run from the stored measurements must not probe and must
/// settle on the same limit.
fn replay(c: &Curve, re: &Reference, bound: f64, oracle: f64, r: &mut Replay) {
    let Reference { settings, t_max, e_max } = re;
    let objective = Objective::MinEnergy { max_slowdown: bound };
    let cfg = ProbeConfig::default();
    let mut samples: Vec<Sample> = Vec::new();
    let decision = loop {
        match next_step(&samples, settings, objective, &cfg, samples.len()) {
            Step::Probe(p) => samples.push(measure(c, p)),
            Step::Settle(d) => break d,
        }
    };
    let chosen = decision.setting.expect("a setting");
    let (_, t, w) = at(c, chosen);
    if t / t_max - 1.0 > bound + 1e-12 {
        r.violations += 1;
        eprintln!("node plan violation: bound {bound}, chose {chosen} W, true slowdown {}", t / t_max - 1.0);
    }
    r.gaps.push(t * w / oracle - 1.0);
    r.savings.push(1.0 - t * w / e_max);
    r.probes.push(samples.len() as f64);
    if next_step(&samples, settings, objective, &cfg, 0) != Step::Settle(decision) {
        r.unstable += 1;
    }
}

fn table(stats: &BTreeMap<&str, GpuStats>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| GPU | workloads | MAPE time | MAPE energy | bound | violations | within 3% of oracle | mean gap | max gap | mean saving vs max | mean true slowdown |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|");
    for (gpu, s) in stats {
        for (k, b) in BOUNDS.iter().enumerate() {
            let within = s.gaps[k].iter().filter(|g| **g <= 0.03).count();
            let _ = writeln!(
                out,
                "| {gpu} | {} | {:.2}% | {:.2}% | {:.0}% | {} | {}/{} | {:.2}% | {:.2}% | {:.2}% | {:.2}% |",
                s.workloads,
                100.0 * mean(&s.ape_time),
                100.0 * mean(&s.ape_energy),
                100.0 * b,
                s.violations[k],
                within,
                s.workloads,
                100.0 * mean(&s.gaps[k]),
                100.0 * max(&s.gaps[k]),
                100.0 * mean(&s.savings[k]),
                100.0 * mean(&s.true_slowdowns[k]),
            );
        }
    }
    out
}

fn node_table(stats: &BTreeMap<&str, GpuStats>) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| GPU | workloads | mean limits | bound | violations | within 3% of oracle | mean gap | max gap | mean saving vs max | mean probes |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|");
    for (gpu, s) in stats {
        for (k, b) in BOUNDS.iter().enumerate() {
            let r = &s.node[k];
            let within = r.gaps.iter().filter(|g| **g <= 0.03).count();
            let _ = writeln!(
                out,
                "| {gpu} | {} | {:.1} | {:.0}% | {} | {}/{} | {:.2}% | {:.2}% | {:.2}% | {:.1} |",
                s.workloads,
                mean(&s.limits),
                100.0 * b,
                r.violations,
                within,
                s.workloads,
                100.0 * mean(&r.gaps),
                100.0 * max(&r.gaps),
                100.0 * mean(&r.savings),
                mean(&r.probes),
            );
        }
    }
    out
}

#[test]
fn zeus_power_limit_validation() {
    let mut stats: BTreeMap<&str, GpuStats> = BTreeMap::new();
    for gpu in GPUS {
        let s = stats.entry(gpu).or_default();
        for curve in load(gpu).values() {
            evaluate(curve, s);
        }
        assert!(s.workloads >= 40, "{gpu}: only {} workloads with ≥ 5 limits", s.workloads);
    }
    println!("{}", table(&stats));

    let total: usize = stats.values().map(|s| s.workloads).sum();
    let within: usize = stats.values().flat_map(|s| s.gaps.iter()).flatten().filter(|g| **g <= 0.03).count();
    println!("workloads: {total}; decisions within 3% of the oracle: {within}/{}", 3 * total);
    println!("\nThe node's probing plan replayed on the same curves:\n\n{}", node_table(&stats));
    let node_within: usize =
        stats.values().flat_map(|s| s.node.iter()).flat_map(|r| &r.gaps).filter(|g| **g <= 0.03).count();
    println!("node plan: decisions within 3% of the oracle: {node_within}/{}", 3 * total);

    // The slowdown bound is never exceeded on measured data.
    for (gpu, s) in &stats {
        assert_eq!(s.violations, [0, 0, 0], "{gpu}: slowdown bound violated");
    }
    // Prediction error: < 5% on V100, P100 and RTX 6000; A40's knee below 150 W is missed
    // (see docs/engine.md), so A40 is held to what is achieved.
    for (gpu, s) in &stats {
        let limit = if *gpu == "a40" { 0.08 } else { 0.05 };
        assert!(mean(&s.ape_time) < limit, "{gpu}: time MAPE {}", mean(&s.ape_time));
        assert!(mean(&s.ape_energy) < limit, "{gpu}: energy MAPE {}", mean(&s.ape_energy));
    }
    // Within 3% of the oracle: the engine's target (docs/engine.md), 75% of the three-probe decisions (not every
    // workload: on noisy, flat ones the oracle's pick is a measurement fluke).
    assert!(within * 100 >= 75 * 3 * total, "only {within}/{} decisions within 3% of the oracle", 3 * total);
    // The node's plan: never beyond the bound, closer to the oracle than three probes, and
    // the next run of the workload settles at once on the same limit.
    for (gpu, s) in &stats {
        for r in &s.node {
            assert_eq!((r.violations, r.unstable), (0, 0), "{gpu}: node plan");
            assert!(mean(&r.probes) <= ProbeConfig::default().max_probes as f64);
        }
    }
    assert!(node_within * 100 >= 91 * 3 * total, "node plan: only {node_within}/{} within 3%", 3 * total);
    // The chooser saves energy on average at every bound.
    for s in stats.values() {
        for k in 0..3 {
            assert!(mean(&s.savings[k]) > 0.0);
        }
    }
}
