//! Online probing, Zeus-style: measure a job at a few settings of its knob (power limits or
//! SM clocks), fit, choose, measure the choice itself, and settle. Pure: the daemon feeds
//! measurements and applies the answers.
//!
//! The first three probes are the highest setting (the full-speed reference), the one nearest
//! the middle of the range, and a third placed where the decision is expected (above the middle
//! when the middle breaks the slowdown bound, below it otherwise; [`third_probe`]). Then the
//! model is fitted and the safe setting chosen (pessimistic time plus margin). While windows
//! are left, the unmeasured setting nearest it that would beat it were it one standard error
//! faster and cheaper than predicted is probed; when none would, the safe setting itself is
//! probed if not measured yet. A run whose windows are spent, or that starts from earlier runs'
//! measurements (of the highest, the middle and one more setting), settles on the best measured
//! setting, so a workload that converged once settles at once, on the same setting, the next
//! time.

use super::choose::{Choice, ChooserConfig, Objective, choose, sigma_at, terms};
use super::fit::{Sample, fit};
use super::model::{DvfsModel, Knob, effective_clock};

/// What the job should do next.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Step {
    /// Hold this setting for one probe window and measure it.
    Probe(f64),
    /// Run the rest of the job at the decision's setting.
    Settle(Choice),
}

/// How a job is probed: its knob and the tunables.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ProbeConfig {
    /// The knob the settings are on.
    pub knob: Knob,
    /// Most probe windows one run may spend (the first three included).
    pub max_probes: usize,
    /// The chooser's tunables.
    pub chooser: ChooserConfig,
    /// Optimism of the search, in standard errors: an unmeasured setting is worth a probe
    /// when its time and energy this many errors below the prediction would beat the decision.
    pub explore_sigmas: f64,
}

impl Default for ProbeConfig {
    fn default() -> Self {
        ProbeConfig {
            knob: Knob::PowerLimit,
            max_probes: 6,
            chooser: ChooserConfig::default(),
            explore_sigmas: 1.0,
        }
    }
}

/// Whether a sample at `sample` is a measurement of `setting` (equal up to rounding).
fn same(sample: f64, setting: f64) -> bool {
    (sample - setting).abs() <= 1e-9 * setting.abs().max(1.0)
}

fn measured(samples: &[Sample], setting: f64) -> bool {
    samples.iter().any(|s| same(s.setting, setting))
}

/// The two settings probed first: the highest (the full-speed reference) and the one nearest
/// the middle of the range (without repeats).
pub fn reference_probes(settings: &[f64]) -> Vec<f64> {
    let valid = valid_sorted(settings);
    let (Some(&lo), Some(&hi)) = (valid.first(), valid.last()) else {
        return Vec::new();
    };
    let middle = 0.5 * (lo + hi);
    let mid =
        valid.iter().copied().min_by(|a, b| (a - middle).abs().total_cmp(&(b - middle).abs())).unwrap_or(hi);
    if mid == hi { vec![hi] } else { vec![hi, mid] }
}

/// The third probe, once the reference probes are measured: where the decision is expected,
/// so that it is likely to be judged on its own measurement. Under a slowdown bound, when the
/// middle setting is slower than the bound the decision lies above it: the setting nearest
/// where the straight line through the two measured times crosses the bound. Otherwise it lies
/// at or below the middle: the lowest setting that the knob's time law through the two
/// measurements (`t0 + D/f`, `f` the clock, or `(P − a)^(1/3)` with the power floor `a` taken
/// as half the lowest limit) keeps within the bound, else the one just below the middle. Any
/// other objective, or a grid without such a setting, probes the lowest unmeasured setting.
pub fn third_probe(samples: &[Sample], settings: &[f64], objective: Objective, knob: Knob) -> Option<f64> {
    let valid = valid_sorted(settings);
    let open: Vec<f64> = valid.iter().copied().filter(|&s| !measured(samples, s)).collect();
    let lowest = open.first().copied();
    let refs = reference_probes(settings);
    let (Objective::MinEnergy { max_slowdown: bound }, &[hi, mid]) = (objective, refs.as_slice()) else {
        return lowest;
    };
    let (Some(t_hi), Some(t_mid)) = (time_at(samples, hi), time_at(samples, mid)) else { return lowest };
    let slow_mid = t_mid / t_hi - 1.0;
    if slow_mid > bound {
        let cross = hi - bound / slow_mid * (hi - mid);
        let above = open.iter().copied().filter(|&s| s > mid && s < hi);
        return above.min_by(|a, b| (a - cross).abs().total_cmp(&(b - cross).abs())).or(lowest);
    }
    let a = match knob {
        Knob::PowerLimit => 0.5 * valid[0],
        Knob::SmClock => 0.0,
    };
    let inv = |s: f64| 1.0 / effective_clock(knob, s, s, a);
    let d = ((t_mid - t_hi) / (inv(mid) - inv(hi))).max(0.0);
    let below: Vec<f64> = open.iter().copied().filter(|&s| s < mid).collect();
    let within = below.iter().copied().find(|&s| (t_hi + d * (inv(s) - inv(hi))) / t_hi - 1.0 <= bound);
    within.or(below.last().copied()).or(lowest)
}

/// The valid settings (finite, positive), sorted, without repeats.
fn valid_sorted(settings: &[f64]) -> Vec<f64> {
    let mut v: Vec<f64> = settings.iter().copied().filter(|s| s.is_finite() && *s > 0.0).collect();
    v.sort_by(f64::total_cmp);
    v.dedup();
    v
}

/// The mean measured time at `setting`, weighted as the fit weighs samples.
fn time_at(samples: &[Sample], setting: f64) -> Option<f64> {
    let at = samples.iter().filter(|x| same(x.setting, setting));
    let (sum, w) = at.fold((0.0, 0.0), |(sum, w), x| (sum + x.weight * x.time, w + x.weight));
    (w > 0.0).then(|| sum / w)
}

/// The first three probes of the plan for `objective`, in order, each measured by `measure`
/// (fewer where the grid has fewer settings).
pub fn first_probes(
    settings: &[f64],
    objective: Objective,
    knob: Knob,
    mut measure: impl FnMut(f64) -> Sample,
) -> Vec<Sample> {
    let mut samples = Vec::new();
    while samples.len() < 3
        && let Some(s) = first_probe(&samples, settings, objective, knob)
    {
        samples.push(measure(s));
    }
    samples
}

/// The next of the first three probes, if one is still to be measured.
fn first_probe(samples: &[Sample], settings: &[f64], objective: Objective, knob: Knob) -> Option<f64> {
    if let Some(&s) = reference_probes(settings).iter().find(|&&s| !measured(samples, s)) {
        return Some(s);
    }
    if valid_sorted(settings).iter().filter(|&&s| measured(samples, s)).count() >= 3 {
        return None;
    }
    third_probe(samples, settings, objective, knob)
}

/// The next step for a workload measured as `samples` (this run's and earlier runs'), after
/// `probes_this_run` windows of this run, on a GPU with `settings`.
pub fn next_step(
    samples: &[Sample],
    settings: &[f64],
    objective: Objective,
    cfg: &ProbeConfig,
    probes_this_run: usize,
) -> Step {
    if matches!(objective, Objective::Perf) {
        return Step::Settle(Choice::fallback(settings, "perf policy: max setting"));
    }
    let budget_left = probes_this_run < cfg.max_probes;
    if let Some(next) = first_probe(samples, settings, objective, cfg.knob) {
        return if budget_left {
            Step::Probe(next)
        } else {
            Step::Settle(Choice::fallback(settings, "too few measurements: max setting"))
        };
    }
    let model = match fit(cfg.knob, samples) {
        Ok(m) => m,
        Err(_) => {
            return Step::Settle(Choice::fallback(
                settings,
                "measurements do not fit the model: max setting",
            ));
        }
    };
    if probes_this_run == 0 || !budget_left {
        // A run that starts from earlier runs' measurements does not probe, and a run whose
        // windows are spent settles: either chooses among the settings already measured.
        let known: Vec<f64> = settings.iter().copied().filter(|&s| measured(samples, s)).collect();
        return Step::Settle(choose(&model, &known, objective, &cfg.chooser));
    }
    let decision = choose(&model, settings, objective, &cfg.chooser);
    if let Some(s) = worth_probing(&model, settings, samples, objective, &decision, cfg) {
        return Step::Probe(s);
    }
    match decision.setting {
        Some(s) if !measured(samples, s) => Step::Probe(s),
        _ => Step::Settle(decision),
    }
}

/// The unmeasured setting most worth a probe, if any: among those that would meet the bound
/// and beat `decision`'s predicted cost were their time and energy `explore_sigmas` standard
/// errors below the model's, the one nearest the decision (a local search around it).
fn worth_probing(
    model: &DvfsModel,
    settings: &[f64],
    samples: &[Sample],
    objective: Objective,
    decision: &Choice,
    cfg: &ProbeConfig,
) -> Option<f64> {
    let chosen = decision.setting?;
    let max = settings.iter().copied().filter(|s| s.is_finite() && *s > 0.0).reduce(f64::max)?;
    let (bound, eta, max_power) = terms(model, max, objective)?;
    let top = model.predict(max);
    let cost = |time: f64, energy: f64| eta * energy + (1.0 - eta) * max_power * time;
    let at = model.predict(chosen);
    let to_beat = cost(at.time, at.energy);
    let mut best: Option<f64> = None;
    for &s in settings {
        if !(s.is_finite() && s > 0.0) || measured(samples, s) {
            continue;
        }
        let p = model.predict(s);
        let k = (1.0 - cfg.explore_sigmas * sigma_at(model, s, &p, &cfg.chooser)).max(0.0);
        let (time, energy) = (k * p.time, k * p.energy);
        let meets = bound.is_none_or(|b| time / top.time - 1.0 <= b);
        if meets
            && cost(time, energy) < to_beat
            && best.is_none_or(|o| (s - chosen).abs() < (o - chosen).abs())
        {
            best = Some(s);
        }
    }
    best
}

/// One measurement window at one setting: GPU energy over `energy_s` seconds, and `work`
/// units done over `work_s` seconds (the two clocks may differ: work is stamped by the job).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Window {
    /// The setting held (W or MHz, by the knob).
    pub setting: f64,
    /// Energy of all the job's GPUs (J).
    pub energy_j: f64,
    /// Seconds the energy was measured over.
    pub energy_s: f64,
    /// Units of work done.
    pub work: f64,
    /// Seconds the work was measured over.
    pub work_s: f64,
    /// Number of GPUs.
    pub gpus: u32,
    /// Relative standard error of the window's time per unit, from the spread of its parts
    /// ([`spread`]); 0 where unknown.
    pub rel_se: f64,
}

impl Window {
    /// The engine sample: GPU-seconds per unit of work (so runs on different GPU counts of a
    /// well-scaling workload agree), mean power per GPU, weighted by the seconds measured.
    /// `None` when the window saw no work or no time.
    pub fn sample(&self) -> Option<Sample> {
        let n = f64::from(self.gpus);
        let ok = [self.energy_j, self.energy_s, self.work, self.work_s, n]
            .iter()
            .all(|v| v.is_finite() && *v > 0.0);
        ok.then(|| Sample {
            setting: self.setting,
            time: n * self.work_s / self.work,
            power: self.energy_j / self.energy_s / n,
            weight: self.energy_s.min(self.work_s),
            rel_se: if self.rel_se.is_finite() { self.rel_se.max(0.0) } else { 0.0 },
        })
    }
}

/// The relative standard error of a window's mean time per unit from the times per unit of
/// its consecutive parts (of equal length): their sample standard deviation over their mean,
/// over √parts. 0 with fewer than two valid parts.
pub fn spread(part_times: &[f64]) -> f64 {
    let v: Vec<f64> = part_times.iter().copied().filter(|t| t.is_finite() && *t > 0.0).collect();
    if v.len() < 2 || v.len() != part_times.len() {
        return 0.0;
    }
    let n = v.len() as f64;
    let mean = v.iter().sum::<f64>() / n;
    let var = v.iter().map(|t| (t - mean).powi(2)).sum::<f64>() / (n - 1.0);
    var.sqrt() / mean / n.sqrt()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> Vec<f64> {
        crate::priors::power_limit_grid(200.0, 700.0, 5.0)
    }

    /// A GPU whose power saturates at 650 W and whose time follows `t = 0.02 + 158.4/f` at the
    /// clock where `72 + b·f + c·f³` meets the limit.
    fn truth(limit: f64) -> Sample {
        let (b, c) = (0.3 * 578.0 / 1980.0, 0.7 * 578.0 / 1980f64.powi(3));
        let curve = |f: f64| 72.0 + b * f + c * f * f * f;
        let (mut lo, mut hi) = (0.0, 1980.0);
        if curve(hi) <= limit {
            lo = hi;
        }
        for _ in 0..100 {
            let mid = 0.5 * (lo + hi);
            if curve(mid) > limit { hi = mid } else { lo = mid }
        }
        Sample::new(limit, 0.02 + 158.4 / lo, curve(lo).min(limit), 1.0)
    }

    #[test]
    fn first_probes_are_max_and_middle() {
        assert_eq!(reference_probes(&h100()), vec![700.0, 450.0]);
        assert_eq!(reference_probes(&[300.0, 300.0]), vec![300.0]);
        assert!(reference_probes(&[f64::NAN]).is_empty());
        let objective = Objective::MinEnergy { max_slowdown: 0.1 };
        let cfg = ProbeConfig::default();
        assert_eq!(next_step(&[], &h100(), objective, &cfg, 0), Step::Probe(700.0));
        assert_eq!(next_step(&[truth(700.0)], &h100(), objective, &cfg, 1), Step::Probe(450.0));
        let Step::Settle(d) = next_step(&[], &h100(), Objective::Perf, &cfg, 0) else { panic!() };
        assert_eq!(d.setting, Some(700.0));
    }

    #[test]
    fn the_third_probe_goes_where_the_decision_is_expected() {
        // 450 W measured 8% slower than 700 W.
        let measured = [Sample::new(700.0, 1.0, 650.0, 1.0), Sample::new(450.0, 1.08, 440.0, 1.0)];
        let third = |bound: f64| {
            third_probe(&measured, &h100(), Objective::MinEnergy { max_slowdown: bound }, Knob::PowerLimit)
        };
        // Over a 5% bound: on the line from 450 to 700 W, 5% falls at 543.75 W.
        assert_eq!(third(0.05), Some(545.0));
        // Within 10% and 20%: below the middle, where `t0 + D/(P − 100)^(1/3)` through the two
        // measurements reaches the bound (worked by hand: 10.0% at 415 W, 19.5% at 285 W).
        assert_eq!(third(0.10), Some(415.0));
        assert_eq!(third(0.20), Some(285.0));
        // No bound to aim at: the lowest setting, as a full sweep would.
        let balanced = Objective::Balanced { eta: 0.5 };
        assert_eq!(third_probe(&measured, &h100(), balanced, Knob::PowerLimit), Some(200.0));
        // Every first probe is a distinct setting, and the plan asks for three.
        let cfg = ProbeConfig::default();
        let objective = Objective::MinEnergy { max_slowdown: 0.1 };
        assert_eq!(next_step(&measured, &h100(), objective, &cfg, 2), Step::Probe(415.0));
        let firsts = first_probes(&h100(), objective, Knob::PowerLimit, truth);
        assert_eq!(firsts.len(), 3);
        assert_eq!((firsts[0].setting, firsts[1].setting), (700.0, 450.0));
        assert!(firsts[2].setting != 700.0 && firsts[2].setting != 450.0);
    }

    #[test]
    fn probing_converges_within_the_bound_and_the_next_run_settles_at_once() {
        let cfg = ProbeConfig::default();
        for bound in [0.05, 0.1, 0.2] {
            let objective = Objective::MinEnergy { max_slowdown: bound };
            let mut samples = Vec::new();
            let mut probes = 0;
            let decision = loop {
                match next_step(&samples, &h100(), objective, &cfg, probes) {
                    Step::Probe(s) => {
                        assert!(!samples.iter().any(|x: &Sample| x.setting == s), "{s} probed twice");
                        samples.push(truth(s));
                        probes += 1;
                    }
                    Step::Settle(d) => break d,
                }
            };
            assert!(probes <= cfg.max_probes);
            let s = decision.setting.unwrap();
            let slowdown = truth(s).time / truth(700.0).time - 1.0;
            assert!(slowdown <= bound, "bound {bound}: {s} W is {slowdown} slower");
            let energy = |x: Sample| x.time * x.power;
            let oracle = h100()
                .iter()
                .map(|&l| truth(l))
                .filter(|x| x.time / truth(700.0).time - 1.0 <= bound)
                .map(energy)
                .fold(f64::INFINITY, f64::min);
            let gap = energy(truth(s)) / oracle - 1.0;
            assert!(gap <= 0.03, "bound {bound}: {s} W is {gap} above the oracle");
            // The next run starts from these measurements and settles without probing.
            assert_eq!(next_step(&samples, &h100(), objective, &cfg, 0), Step::Settle(decision));
        }
    }

    #[test]
    fn an_exhausted_budget_settles_and_says_why() {
        let cfg = ProbeConfig { max_probes: 1, ..ProbeConfig::default() };
        let objective = Objective::Balanced { eta: 0.5 };
        let Step::Settle(d) = next_step(&[truth(700.0)], &h100(), objective, &cfg, 1) else { panic!() };
        assert_eq!((d.setting, d.reason), (Some(700.0), "too few measurements: max setting"));
    }

    #[test]
    fn a_windows_spread_is_the_standard_error_of_its_mean() {
        // Parts of 1.0, 1.02, 0.98, 1.0 s: sd 0.01633, mean 1.0, over √4.
        assert!((spread(&[1.0, 1.02, 0.98, 1.0]) - 0.016_329_93 / 2.0).abs() < 1e-8);
        assert_eq!(spread(&[1.0, 1.0, 1.0]), 0.0);
        assert_eq!(spread(&[1.0]), 0.0);
        assert_eq!(spread(&[1.0, f64::NAN, 1.1]), 0.0, "a part without work: unknown");
    }

    #[test]
    fn windows_become_per_gpu_samples() {
        let w = Window {
            setting: 300.0,
            energy_j: 1200.0,
            energy_s: 2.0,
            work: 40.0,
            work_s: 2.0,
            gpus: 2,
            rel_se: 0.01,
        };
        let s = w.sample().unwrap();
        assert_eq!((s.time, s.power, s.weight, s.rel_se), (0.1, 300.0, 2.0, 0.01));
        assert_eq!(Window { rel_se: f64::NAN, ..w }.sample().unwrap().rel_se, 0.0);
        assert!(Window { work: 0.0, ..w }.sample().is_none());
        assert!(Window { energy_s: f64::NAN, ..w }.sample().is_none());
    }
}
