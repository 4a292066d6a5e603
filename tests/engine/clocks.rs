//! Validation of the SM-clock knob: the model family, the chooser and the node's probing plan
//! on clock sweeps. No public clock-sweep data set is available to the project, so two kinds
//! of sweep are scored, and neither is what the model assumes:
//!
//! 1. **Synthetic sweeps** (`synthetic`): workloads drawn from a stated generative law that is
//!    *not* the model's `t0 + D/f` — a roofline whose compute (`c/f`) and memory (`m`) times
//!    overlap through a smooth maximum, plus a fixed overhead; power from a voltage curve that
//!    is flat below a knee clock (so power is linear in `f` there and grows as `f·V(f)²`
//!    above), with memory and compute activity weighting their parts; every measurement
//!    carries seeded multiplicative noise (0.5%, 1% or 2%). Clock ranges are the public top
//!    clocks of V100, A100 and H100. Scored against the noiseless law.
//! 2. **The fake GPU's hidden law** (`tests/fake-nvml`: power `72 + b·f + c·f³`, time
//!    `t0 + D/f` at the effective clock), as the daemon's end-to-end tests meet it.
//! 3. **Published-style sweeps**: the synthetic workloads measured once per clock with no
//!    error estimate and scored against those measurements, as a held-out real sweep is.
//!
//! Per workload and bound: the node's first three probes for that bound (top, middle, and a
//! third where the decision is expected), the model fitted, `MinEnergy` chosen among the
//! range's clocks (the MAPE column fits top, middle and floor instead);
//! then the node's plan (`next_step`) replayed, every probe answered by a (noisy)
//! measurement. True slowdown = true time at the choice / true time at the top clock − 1; the
//! oracle is the least true energy among clocks whose true slowdown meets the bound.
//! Runner: `cargo test --release --test engine clocks:: -- --nocapture` prints the tables;
//! `WATTSON_CLOCK_SEEDS=10` (or 20, 30…) draws other workloads (seeds 11–13 instead of 1–3).

use std::fmt::Write as _;

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng as _, SeedableRng};

use wattson_engine::priors::sm_clock_grid;
use wattson_engine::probe::{reference_probes, spread};
use wattson_engine::{
    ChooserConfig, Knob, Objective, ProbeConfig, Sample, Step, choose, first_probes, fit, next_step,
};

const BOUNDS: [f64; 3] = [0.05, 0.10, 0.20];
/// The node's defaults: `[engine] sm_clock_floor` and `sm_clock_step_mhz`.
const FLOOR: f64 = 0.5;
const STEP_MHZ: f64 = 15.0;

/// A clock sweep: the clocks offered, the noiseless truth and what a probe window measures.
struct Sweep {
    clocks: Vec<f64>,
    /// (time per unit s, power W) without noise.
    truth: Box<dyn Fn(f64) -> (f64, f64)>,
    /// (time, power, the window's own relative standard error) as one window measures them
    /// (noise fixed per clock).
    measure: Box<dyn Fn(f64) -> (f64, f64, f64)>,
}

/// Seeded draws: uniform and normal (Box–Muller).
struct Rng(ChaCha8Rng);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(ChaCha8Rng::seed_from_u64(seed))
    }
    fn next(&mut self) -> f64 {
        (self.0.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn uniform(&mut self, lo: f64, hi: f64) -> f64 {
        lo + (hi - lo) * self.next()
    }
    fn normal(&mut self) -> f64 {
        let (u, v) = (self.next().max(1e-12), self.next());
        (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
    }
}

/// Clocks a GPU of top clock `top` supports: every 15 MHz down to 15% of it.
fn supported(top: u32) -> Vec<u32> {
    (0..).map(|k| top - 15 * k).take_while(|&f| f * 100 >= top * 15).collect()
}

/// How a synthetic sweep is measured and scored.
#[derive(Clone, Copy, PartialEq)]
enum Style {
    /// As the daemon measures: four-part windows that report their own error; scored against
    /// the noiseless law.
    Windows,
    /// As a published sweep is: one measurement per clock with no error estimate, scored
    /// against that same measurement (the truth a held-out data set offers).
    Measured,
}

/// `n` synthetic workloads on a GPU of top clock `top` (MHz), idle draw `idle` and board power
/// `tdp` (W), seeded by `seed`, each clock measured with relative noise `sigma` in `style`.
fn synthetic(top: u32, idle: f64, tdp: f64, n: usize, seed: u64, sigma: f64, style: Style) -> Vec<Sweep> {
    let mut rng = Rng::new(seed);
    let fmax = f64::from(top);
    let clocks = sm_clock_grid(&supported(top), FLOOR, STEP_MHZ);
    (0..n)
        .map(|_| {
            // Time: overhead + smooth max of compute c/f and memory m, normalised so that the
            // compute time at the top clock is 1 s.
            let c = fmax;
            let m = rng.uniform(0.2, 1.5);
            let k = rng.uniform(2.0, 6.0);
            let overhead = rng.uniform(0.0, 0.15);
            // Power: a voltage curve flat below the knee, memory and compute activity.
            let v_ratio = rng.uniform(0.65, 0.8);
            let knee = rng.uniform(0.45, 0.65) * fmax;
            let mem_w = rng.uniform(0.1, 0.25) * (tdp - idle);
            let dyn_w = (tdp - idle - mem_w) * rng.uniform(0.7, 1.0);
            let truth = move |f: f64| {
                let (tc, tm) = (c / f, m);
                let busy = (tc.powf(k) + tm.powf(k)).powf(1.0 / k);
                let time = overhead + busy;
                let v = v_ratio + (1.0 - v_ratio) * ((f - knee) / (fmax - knee)).clamp(0.0, 1.0);
                let power = idle + mem_w * tm / busy + dyn_w * (f / fmax) * v * v * tc / busy;
                (time, power)
            };
            // A window is four parts, each off by 2σ: the window's mean is off by σ, and the
            // spread of its parts estimates that, as the daemon measures it.
            let noise: Vec<(f64, f64, f64)> = clocks
                .iter()
                .map(|_| {
                    let parts: Vec<f64> = (0..4).map(|_| 1.0 + 2.0 * sigma * rng.normal()).collect();
                    let t = parts.iter().sum::<f64>() / 4.0;
                    (t, 1.0 + sigma * rng.normal(), spread(&parts))
                })
                .collect();
            let grid = clocks.clone();
            let measure = std::rc::Rc::new(move |f: f64| {
                let i = grid.iter().position(|&g| g == f).expect("the plan only asks for offered clocks");
                let (t, p) = truth(f);
                let se = if style == Style::Windows { noise[i].2 } else { 0.0 };
                (t * noise[i].0, p * noise[i].1, se)
            });
            let truth: Box<dyn Fn(f64) -> (f64, f64)> = match style {
                Style::Windows => Box::new(truth),
                Style::Measured => {
                    let m = measure.clone();
                    Box::new(move |f| {
                        let (t, p, _) = m(f);
                        (t, p)
                    })
                }
            };
            Sweep { clocks: clocks.clone(), truth, measure: Box::new(move |f| measure(f)) }
        })
        .collect()
}

/// The fake GPU's H100 (`tests/fake-nvml`) running workloads whose clock-independent share
/// of the time at the top clock is 0%, 20% … 80%: the law the end-to-end tests meet.
fn fake_gpu() -> Vec<Sweep> {
    let spec = fake_nvml::Config::uniform("H100", 1).spec(0).unwrap();
    let clocks = sm_clock_grid(&spec.sm_clocks_mhz, FLOOR, STEP_MHZ);
    (0..5)
        .map(|i| {
            let share = 0.2 * f64::from(i);
            let work = fake_nvml::Workload { t0_s: 0.1 * share, d_s_mhz: 0.1 * (1.0 - share) * 1980.0 };
            let spec = spec.clone();
            let truth = move |f: f64| {
                let mut gs = fake_nvml::GpuState::fresh(&spec, 0);
                gs.load = 1.0;
                gs.locked_clocks_mhz = Some((f as u32, f as u32));
                let (mw, mhz) = fake_nvml::operating_point(&spec, &gs);
                (1.0 / work.rate(f64::from(mhz)), f64::from(mw) / 1000.0)
            };
            let truth = std::rc::Rc::new(truth);
            let exact = truth.clone();
            let measure = move |f| {
                let (t, p) = exact(f);
                (t, p, 0.0)
            };
            Sweep { clocks: clocks.clone(), truth: Box::new(move |f| truth(f)), measure: Box::new(measure) }
        })
        .collect()
}

#[derive(Default)]
struct Stats {
    workloads: usize,
    ape_time: Vec<f64>,
    /// Per bound: violations, gaps to the oracle (three probes), then the same for the plan.
    violations: [usize; 3],
    gaps: [Vec<f64>; 3],
    node_violations: [usize; 3],
    node_gaps: [Vec<f64>; 3],
    node_probes: Vec<f64>,
    savings: [Vec<f64>; 3],
    /// The largest true slowdown beyond its bound, either plan (0: none).
    overshoot: f64,
}

fn sample(sweep: &Sweep, f: f64) -> Sample {
    let (time, power, rel_se) = (sweep.measure)(f);
    Sample { rel_se, ..Sample::new(f, time, power, 1.0) }
}

fn evaluate(sweep: &Sweep, s: &mut Stats) {
    let top = *sweep.clocks.last().unwrap();
    let (t_top, p_top) = (sweep.truth)(top);
    // The model's prediction error, from probes spread over the range (top, middle, floor).
    let mut probes = reference_probes(&sweep.clocks);
    probes.push(sweep.clocks[0]);
    assert_eq!(probes.len(), 3);
    let samples: Vec<Sample> = probes.iter().map(|&f| sample(sweep, f)).collect();
    let model = fit(Knob::SmClock, &samples).expect("three distinct probes fit");
    s.workloads += 1;
    for &f in sweep.clocks.iter().filter(|f| !probes.contains(f)) {
        let t = (sweep.truth)(f).0;
        s.ape_time.push((model.predict(f).time - t).abs() / t);
    }
    let slowdown = |f: f64| (sweep.truth)(f).0 / t_top - 1.0;
    let energy = |f: f64| (sweep.truth)(f).0 * (sweep.truth)(f).1;
    for (k, &bound) in BOUNDS.iter().enumerate() {
        let objective = Objective::MinEnergy { max_slowdown: bound };
        let oracle = sweep
            .clocks
            .iter()
            .copied()
            .filter(|&f| slowdown(f) <= bound)
            .map(energy)
            .fold(f64::INFINITY, f64::min);
        // Three probes: the node's first three for this bound, the model fitted on them.
        let samples = first_probes(&sweep.clocks, objective, Knob::SmClock, |f| sample(sweep, f));
        let model = fit(Knob::SmClock, &samples).expect("three distinct probes fit");
        let chosen = choose(&model, &sweep.clocks, objective, &ChooserConfig::default()).setting.unwrap();
        if slowdown(chosen) > bound + 1e-12 {
            s.violations[k] += 1;
            s.overshoot = s.overshoot.max(slowdown(chosen) - bound);
        }
        s.gaps[k].push(energy(chosen) / oracle - 1.0);
        s.savings[k].push(1.0 - energy(chosen) / (t_top * p_top));

        let cfg = ProbeConfig { knob: Knob::SmClock, ..ProbeConfig::default() };
        let mut measured: Vec<Sample> = Vec::new();
        let decision = loop {
            match next_step(&measured, &sweep.clocks, objective, &cfg, measured.len()) {
                Step::Probe(f) => measured.push(sample(sweep, f)),
                Step::Settle(d) => break d,
            }
        };
        let chosen = decision.setting.unwrap();
        if slowdown(chosen) > bound + 1e-12 {
            s.node_violations[k] += 1;
            s.overshoot = s.overshoot.max(slowdown(chosen) - bound);
        }
        s.node_gaps[k].push(energy(chosen) / oracle - 1.0);
        s.node_probes.push(measured.len() as f64);
    }
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 }
}

fn within(v: &[f64]) -> usize {
    v.iter().filter(|g| **g <= 0.03).count()
}

fn table(rows: &[(String, Stats)]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "| sweeps | workloads | MAPE time | bound | violations | within 3% (3 probes) | mean saving | node plan violations | node plan within 3% | mean probes | largest overshoot |"
    );
    let _ = writeln!(out, "|---|---|---|---|---|---|---|---|---|---|---|");
    for (name, s) in rows {
        for (k, b) in BOUNDS.iter().enumerate() {
            let _ = writeln!(
                out,
                "| {name} | {} | {:.2}% | {:.0}% | {} | {}/{} | {:.1}% | {} | {}/{} | {:.1} | {:.2} points |",
                s.workloads,
                100.0 * mean(&s.ape_time),
                100.0 * b,
                s.violations[k],
                within(&s.gaps[k]),
                s.workloads,
                100.0 * mean(&s.savings[k]),
                s.node_violations[k],
                within(&s.node_gaps[k]),
                s.workloads,
                mean(&s.node_probes),
                100.0 * s.overshoot,
            );
        }
    }
    out
}

#[test]
fn sm_clock_validation() {
    let seeds: u64 = std::env::var("WATTSON_CLOCK_SEEDS").ok().and_then(|v| v.parse().ok()).unwrap_or(0);
    // The same workloads (same seeds) at each measurement noise, V100, A100 and H100 together.
    let set = |sigma: f64, style: Style| {
        let mut sweeps = synthetic(1530, 40.0, 300.0, 100, seeds + 1, sigma, style);
        sweeps.extend(synthetic(1410, 55.0, 400.0, 100, seeds + 2, sigma, style));
        sweeps.extend(synthetic(1980, 72.0, 700.0, 100, seeds + 3, sigma, style));
        let name = match style {
            Style::Windows => format!("synthetic, noise {:.2}%", 100.0 * sigma),
            Style::Measured => format!("measured sweep, noise {:.2}%", 100.0 * sigma),
        };
        (name, sigma, sweeps)
    };
    let mut sets: Vec<(String, f64, Vec<Sweep>)> =
        [0.0, 0.0025, 0.005, 0.01, 0.02].iter().map(|&sigma| set(sigma, Style::Windows)).collect();
    sets.push(("fake GPU H100".to_string(), 0.0, fake_gpu()));
    sets.extend([0.0025, 0.005, 0.01].iter().map(|&sigma| set(sigma, Style::Measured)));
    let mut rows = Vec::new();
    // Each noisy row's index and noise.
    let mut noisy = Vec::new();
    for (name, sigma, sweeps) in sets {
        if sigma > 0.0 {
            noisy.push((rows.len(), sigma));
        }
        let mut s = Stats::default();
        for sweep in &sweeps {
            assert!(sweep.clocks.iter().all(|&f| f >= FLOOR * sweep.clocks.last().unwrap()));
            evaluate(sweep, &mut s);
        }
        rows.push((name, s));
    }
    println!("{}", table(&rows));
    let decisions: usize = rows.iter().map(|(_, s)| 3 * s.workloads).sum();
    let three: usize = rows.iter().flat_map(|(_, s)| &s.gaps).map(|g| within(g)).sum();
    let node: usize = rows.iter().flat_map(|(_, s)| &s.node_gaps).map(|g| within(g)).sum();
    println!("within 3% of the oracle: three probes {three}/{decisions}, node plan {node}/{decisions}");

    for (name, s) in &rows {
        for (savings, bound) in s.savings.iter().zip(BOUNDS) {
            assert!(mean(savings) > 0.0, "{name}: no saving at bound {bound}");
        }
    }
    // Without measurement noise the bound always holds, and the node's plan finds the best
    // clock; the fake GPU's law is the model's own family.
    for (name, s) in [&rows[0], &rows[5]] {
        assert_eq!((s.violations, s.node_violations), ([0; 3], [0; 3]), "{name}: bound violated");
    }
    // The third probe lands where the decision is expected, so three probes already reach
    // the best clock nearly everywhere; the plan measures its way the rest.
    let (exact, fake) = (&rows[0].1, &rows[5].1);
    let count = |gaps: &[Vec<f64>; 3]| gaps.iter().map(|g| within(g)).sum::<usize>();
    assert!(
        count(&exact.node_gaps) * 100 >= 99 * 900,
        "node plan, no noise: {}/900",
        count(&exact.node_gaps)
    );
    assert!(count(&exact.gaps) * 100 >= 95 * 900, "three probes, no noise: {}/900", count(&exact.gaps));
    assert_eq!((count(&fake.node_gaps), count(&fake.gaps)), (15, 14), "fake GPU");
    // A published sweep (one measurement per clock, no error estimate, scored against itself):
    // at 0.25% noise no bound breaks. Before the floor came back for unmeasured windows, three
    // probes broke 5 of these 900 decisions (21 at 0.5%): a law residual on one degree of
    // freedom is near zero by chance.
    // And the aim on such sweeps, 85% within 3% of the best clock, holds for both.
    let measured = &rows[6].1;
    assert_eq!((measured.violations, measured.node_violations), ([0; 3], [0; 3]), "{}", rows[6].0);
    for (plan, gaps) in [("three probes", &measured.gaps), ("node plan", &measured.node_gaps)] {
        assert!(count(gaps) * 100 >= 85 * 900, "{}, {plan}: {}/900", rows[6].0, count(gaps));
    }
    // With noise, a window can measure a clock faster than it is: the margin (the windows'
    // own spread, at its one-sided 95% quantile) makes that rare and small. Over 1,800
    // decisions per noise level a few land past two standard errors of the measured slowdown
    // (the windows at the clock and at the top: √2 σ); none past four, and at most 5% of
    // decisions pass the bound at all (the same held for three other draws of the generator;
    // seed 30's stops first at the published-sweep assertion above, one violation of 0.05
    // points).
    for (i, sigma) in noisy {
        let (name, s) = &rows[i];
        let decisions = 3 * s.workloads;
        let violations: usize = s.violations.iter().chain(&s.node_violations).sum();
        assert!(violations * 100 <= 5 * 2 * decisions, "{name}: {violations} violations");
        assert!(s.overshoot <= 4.0 * 2f64.sqrt() * sigma, "{name}: {:.4} beyond the bound", s.overshoot);
    }
}
