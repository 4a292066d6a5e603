//! Engine cost: fit time per tag, and decision latency through `ModelTable::decide` with
//! 10,000 tags cached (p50/p99 over 100,000 decisions with random tags), against a baseline
//! in the same run: a plain `HashMap` lookup of a precomputed decision.
//!
//! Run: `cargo bench --bench engine`.

use std::collections::HashMap;
use std::hint::black_box;
use std::time::Instant;

use wattson_engine::{Choice, Knob, ModelEntry, ModelTable, Objective, Sample, fit, prior};
use wattson_harness::stats::percentile;

const TAGS: usize = 10_000;
const DECISIONS: usize = 100_000;

/// xorshift64*: deterministic pseudo-random numbers without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Three probes of a synthetic V100 workload: power saturating at `free` W, cube-law time.
/// The owner of every model in the table.
const OWNER: wattson_types::model_owner::ModelOwner = wattson_types::model_owner::ModelOwner::User(1000);

fn probes(rng: &mut Rng) -> Vec<Sample> {
    let free = 120.0 + 140.0 * rng.unit();
    let (t0, d, a) = (1.0 + 5.0 * rng.unit(), 20.0 + 40.0 * rng.unit(), 40.0 + 30.0 * rng.unit());
    [150.0, 225.0, 300.0]
        .iter()
        .map(|&p: &f64| {
            let power = (0.9 * p).min(free) * (1.0 + 0.01 * (rng.unit() - 0.5));
            let time = (t0 + d * (power - a).powf(-1.0 / 3.0)) * (1.0 + 0.01 * (rng.unit() - 0.5));
            Sample::new(p, time, power, 1.0)
        })
        .collect()
}

fn main() {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let settings = prior("V100").expect("V100 prior").power_limits();
    let tags: Vec<String> = (0..TAGS).map(|i| format!("user{}:job{}", i % 97, i)).collect();
    let objective = Objective::MinEnergy { max_slowdown: 0.1 };

    let mut table = ModelTable::new();
    let mut fit_ns = Vec::with_capacity(TAGS);
    for tag in &tags {
        let s = probes(&mut rng);
        let t = Instant::now();
        let model = fit(Knob::PowerLimit, black_box(&s)).expect("synthetic probes fit");
        fit_ns.push(t.elapsed().as_nanos() as u64);
        table.insert(&OWNER, tag, "V100", ModelEntry { model, settings: settings.clone() });
    }
    fit_ns.sort_unstable();
    println!(
        "fit, power-limit knob (3 probes): p50 {:.1} µs, p99 {:.1} µs per tag",
        percentile(&fit_ns, 0.5) as f64 / 1e3,
        percentile(&fit_ns, 0.99) as f64 / 1e3
    );

    let baseline: HashMap<String, Choice> = tags
        .iter()
        .map(|t| (t.clone(), table.decide(&OWNER, t, "V100", Knob::PowerLimit, objective)))
        .collect();
    let picks: Vec<usize> = (0..DECISIONS).map(|_| (rng.next() % TAGS as u64) as usize).collect();

    let measure = |f: &mut dyn FnMut(&str) -> Option<f64>| {
        let mut ns = Vec::with_capacity(DECISIONS);
        for &i in &picks {
            let t = Instant::now();
            black_box(f(black_box(&tags[i])));
            ns.push(t.elapsed().as_nanos() as u64);
        }
        ns.sort_unstable();
        (percentile(&ns, 0.5), percentile(&ns, 0.99))
    };
    let (d50, d99) =
        measure(&mut |tag| table.decide(&OWNER, tag, "V100", Knob::PowerLimit, objective).setting);
    let (b50, b99) = measure(&mut |tag| baseline.get(tag).and_then(|d| d.setting));
    println!("{:<44} {:>10} {:>10}", "decision latency (10,000 tags, 100,000 calls)", "p50", "p99");
    println!("{:<44} {:>8} ns {:>8} ns", "ModelTable::decide (MinEnergy 10%)", d50, d99);
    println!("{:<44} {:>8} ns {:>8} ns", "baseline: HashMap<String, Choice>::get", b50, b99);
    println!(
        "ratio decide / baseline: p50 {:.1}x, p99 {:.1}x; goal p99 < 50 µs: {}",
        d50 as f64 / b50.max(1) as f64,
        d99 as f64 / b99.max(1) as f64,
        if d99 < 50_000 { "met" } else { "MISSED" }
    );
}
