//! Picking a setting under an objective, with a safety margin that grows with the model's error.

use serde::{Deserialize, Serialize};

use wattson_types::job::EnergyPolicy;

use super::model::{DvfsModel, Knob};

/// What the chooser optimises: an [`EnergyPolicy`] with its parameter. The wire form keeps
/// the tag `policy` (`{"policy":"min_energy","max_slowdown":0.1}`).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "policy", rename_all = "snake_case")]
pub enum Objective {
    /// Maximum setting: no slowdown.
    Perf,
    /// Minimum energy with predicted slowdown (vs the max setting) within `max_slowdown`
    /// (a fraction: 0.1 = 10%) minus a safety margin.
    MinEnergy {
        /// Slowdown bound, as a fraction.
        max_slowdown: f64,
    },
    /// Minimum Zeus cost `η·E + (1−η)·P_max·T` per unit of work (`P_max` in watts: the top
    /// power limit, or the predicted draw at the top SM clock).
    Balanced {
        /// Weight of energy, in `[0, 1]`.
        eta: f64,
    },
}

impl Objective {
    /// The objective of `policy`: `min-energy` under `max_slowdown` (a fraction), `balanced`
    /// with energy weight `eta`, `perf` at full speed (the parameter it does not use is ignored).
    pub fn for_policy(policy: EnergyPolicy, max_slowdown: f64, eta: f64) -> Objective {
        match policy {
            EnergyPolicy::MinEnergy => Objective::MinEnergy { max_slowdown },
            EnergyPolicy::Balanced => Objective::Balanced { eta },
            EnergyPolicy::Perf => Objective::Perf,
        }
    }
}

/// The chosen setting and what the model expects of it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Choice {
    /// Chosen setting (W or MHz); `None` when nothing is known: leave the GPU as it is.
    pub setting: Option<f64>,
    /// Predicted slowdown vs the max setting (fraction).
    pub predicted_slowdown: f64,
    /// Predicted energy at the chosen setting / at the max setting.
    pub predicted_energy_ratio: f64,
    /// Relative standard error of the prediction at the chosen setting.
    pub uncertainty: f64,
    /// Why this setting.
    pub reason: &'static str,
}

/// Tunables of the chooser.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct ChooserConfig {
    /// Safety margin in standard errors: a setting qualifies when its pessimistic slowdown
    /// (see [`crate::Prediction::time_hi`]) plus `z·σ` is within the bound.
    pub z: f64,
    /// A model whose noise or error exceeds this (relative) is not trusted: max setting.
    pub max_model_error: f64,
    /// Under a slowdown bound, leave the max setting only for a predicted energy saving of
    /// at least this many standard errors (a saving inside the noise is not worth a slowdown).
    pub min_saving_sigmas: f64,
    /// Judge the bound on the pessimistic time (`time_hi`); `false` uses the model's own
    /// time (probing uses that to find the setting most worth measuring).
    #[serde(default = "yes")]
    pub pessimistic: bool,
    /// Floor of the relative error at a setting that was measured (its time is the
    /// measurement, so only the noise seen in the probes counts, plus this floor).
    #[serde(default)]
    pub probed_sigma_floor: f64,
}

fn yes() -> bool {
    true
}

impl ChooserConfig {
    /// The chooser that points probing at the likely best setting: no margin, model time.
    pub fn optimistic(&self) -> ChooserConfig {
        ChooserConfig { z: 0.0, min_saving_sigmas: 0.0, pessimistic: false, ..*self }
    }
}

impl Default for ChooserConfig {
    fn default() -> Self {
        ChooserConfig {
            z: 1.0,
            max_model_error: 0.15,
            min_saving_sigmas: 0.5,
            pessimistic: true,
            probed_sigma_floor: 0.0,
        }
    }
}

impl Choice {
    /// The conservative answer: the highest setting (or none), with the reason.
    pub fn fallback(settings: &[f64], reason: &'static str) -> Choice {
        Choice {
            setting: max_setting(settings),
            predicted_slowdown: 0.0,
            predicted_energy_ratio: 1.0,
            uncertainty: 0.0,
            reason,
        }
    }
}

fn max_setting(settings: &[f64]) -> Option<f64> {
    settings.iter().copied().filter(|s| s.is_finite() && *s > 0.0).reduce(f64::max)
}

/// What an objective weighs, for `model` whose top setting is `max`: the slowdown bound (if
/// any), the energy weight `η` and `P_max` (W). `None` for `Perf` or an invalid parameter.
pub(crate) fn terms(model: &DvfsModel, max: f64, objective: Objective) -> Option<(Option<f64>, f64, f64)> {
    let (bound, eta) = match objective {
        Objective::MinEnergy { max_slowdown } if max_slowdown.is_finite() && max_slowdown >= 0.0 => {
            (Some(max_slowdown), 1.0)
        }
        Objective::Balanced { eta } if (0.0..=1.0).contains(&eta) => (None, eta),
        _ => return None,
    };
    // Zeus's cost weighs time by the GPU's maximum power: the top power limit under that
    // knob, the predicted draw at the top clock under the clock knob (watts either way).
    let max_power = match model.knob {
        Knob::PowerLimit => max,
        Knob::SmClock => model.predict(max).power,
    };
    Some((bound, eta, max_power))
}

/// Relative error of the prediction `p` at setting `s`: at a measured setting the time is the
/// measurement, so only its windows' own error, the noise seen in the probes and the
/// configured floor remain.
pub(crate) fn sigma_at(model: &DvfsModel, s: f64, p: &crate::Prediction, cfg: &ChooserConfig) -> f64 {
    if model.is_probed(s) {
        model.noise.hypot(cfg.probed_sigma_floor).hypot(model.measurement_error(s))
    } else {
        p.rel_sigma
    }
}

/// Chooses among `settings` (any order) for `model` under `objective`. Never panics; bad input
/// (no valid settings, a bad objective parameter, non-finite predictions) gives a fallback.
pub fn choose(model: &DvfsModel, settings: &[f64], objective: Objective, cfg: &ChooserConfig) -> Choice {
    let Some(max) = max_setting(settings) else {
        return Choice::fallback(settings, "no valid settings");
    };
    let top = model.predict(max);
    if !(top.time > 0.0 && top.energy > 0.0 && top.time.is_finite() && top.energy.is_finite()) {
        return Choice::fallback(settings, "model predicts nonsense at the max setting");
    }
    if matches!(objective, Objective::Perf) {
        return Choice::fallback(settings, "perf policy: max setting");
    }
    let Some((bound, eta, max_power)) = terms(model, max, objective) else {
        return Choice::fallback(settings, "invalid policy parameter");
    };
    if model.noise > cfg.max_model_error {
        return Choice::fallback(settings, "model error too large: max setting");
    }
    let cost = |time: f64, energy: f64| eta * energy + (1.0 - eta) * max_power * time;
    let mut best = Choice {
        setting: Some(max),
        predicted_slowdown: 0.0,
        predicted_energy_ratio: 1.0,
        uncertainty: sigma_at(model, max, &top, cfg),
        reason: if bound.is_some() {
            "max setting is the least energy within the bound"
        } else {
            "max setting has the least cost"
        },
    };
    let mut best_cost = cost(top.time, top.energy);
    // A setting within the bound minus the margin, with its prediction and relative error.
    let qualifies = |s: f64| -> Option<(crate::Prediction, f64)> {
        if !(s.is_finite() && s > 0.0) || s == max {
            return None;
        }
        let p = model.predict(s);
        let sigma = sigma_at(model, s, &p, cfg);
        if !(p.time.is_finite() && p.energy.is_finite() && sigma.is_finite()) {
            return None;
        }
        let judged = if cfg.pessimistic { p.time_hi.max(p.time) } else { p.time };
        let breaks = bound.is_some_and(|b| {
            judged / top.time - 1.0 + cfg.z * sigma > b
                || 1.0 - p.energy / top.energy < cfg.min_saving_sigmas * sigma
        });
        (!breaks).then_some((p, sigma))
    };
    // Under a bound, an unmeasured setting must also save that much against the least-energy
    // measured one that qualifies: a step past a measurement is not worth a saving inside the
    // noise.
    let measured_energy = settings
        .iter()
        .filter(|&&s| model.is_probed(s))
        .filter_map(|&s| qualifies(s))
        .map(|(p, _)| p.energy)
        .fold(top.energy, f64::min);
    for &s in settings {
        let Some((p, sigma)) = qualifies(s) else { continue };
        if bound.is_some()
            && !model.is_probed(s)
            && 1.0 - p.energy / measured_energy < cfg.min_saving_sigmas * sigma
        {
            continue;
        }
        let slowdown = p.time / top.time - 1.0;
        let c = cost(p.time, p.energy);
        if c < best_cost {
            best_cost = c;
            best = Choice {
                setting: Some(s),
                predicted_slowdown: slowdown,
                predicted_energy_ratio: p.energy / top.energy,
                uncertainty: sigma,
                reason: if bound.is_some() {
                    "least predicted energy within the bound minus the safety margin"
                } else {
                    "least predicted Zeus cost"
                },
            };
        }
    }
    best
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fit::{Sample, fit};

    fn plm() -> DvfsModel {
        DvfsModel {
            knob: Knob::PowerLimit,
            settings: vec![100.0, 175.0, 250.0],
            powers: vec![95.0, 160.0, 200.0],
            times: vec![12.0, 8.5, 8.0],
            ses: Vec::new(),
            t0: 2.0,
            d: 25.0,
            a: 60.0,
            noise: 0.0,
            sigma_floor: 0.01,
            law_sigma: None,
        }
    }

    const LIMITS: [f64; 7] = [100.0, 125.0, 150.0, 175.0, 200.0, 225.0, 250.0];

    #[test]
    fn each_policy_has_its_objective() {
        assert_eq!(Objective::for_policy(EnergyPolicy::Perf, 0.1, 0.5), Objective::Perf);
        assert_eq!(
            Objective::for_policy(EnergyPolicy::MinEnergy, 0.25, 0.5),
            Objective::MinEnergy { max_slowdown: 0.25 }
        );
        assert_eq!(Objective::for_policy(EnergyPolicy::Balanced, 0.1, 0.3), Objective::Balanced { eta: 0.3 });
        let wire = serde_json::to_string(&Objective::MinEnergy { max_slowdown: 0.1 }).unwrap();
        assert_eq!(wire, r#"{"policy":"min_energy","max_slowdown":0.1}"#);
    }

    #[test]
    fn perf_and_bad_input_give_the_max_setting() {
        let cfg = ChooserConfig::default();
        assert_eq!(choose(&plm(), &LIMITS, Objective::Perf, &cfg).setting, Some(250.0));
        let d = choose(&plm(), &LIMITS, Objective::MinEnergy { max_slowdown: f64::NAN }, &cfg);
        assert_eq!((d.setting, d.reason), (Some(250.0), "invalid policy parameter"));
        assert_eq!(choose(&plm(), &[], Objective::Perf, &cfg).setting, None);
        assert_eq!(choose(&plm(), &[f64::NAN, -3.0], Objective::Balanced { eta: 0.5 }, &cfg).setting, None);
        assert_eq!(choose(&plm(), &LIMITS, Objective::Balanced { eta: 1.5 }, &cfg).setting, Some(250.0));
    }

    #[test]
    fn min_energy_never_exceeds_the_bound_on_its_own_model() {
        let cfg = ChooserConfig::default();
        let m = plm();
        for b in [0.0, 0.01, 0.05, 0.1, 0.2, 0.5] {
            let d = choose(&m, &LIMITS, Objective::MinEnergy { max_slowdown: b }, &cfg);
            let s = d.setting.unwrap();
            let true_slow = m.predict(s).time / m.predict(250.0).time - 1.0;
            assert!(true_slow <= b + 1e-12, "bound {b}: slowdown {true_slow}");
            assert!(d.predicted_slowdown + cfg.z * d.uncertainty <= b + 1e-12 || s == 250.0);
            // Nothing that meets the margin has less energy.
            for &o in &LIMITS {
                let p = m.predict(o);
                let top = m.predict(250.0);
                if p.time_hi / top.time - 1.0 + cfg.z * p.rel_sigma <= b
                    && 1.0 - p.energy / top.energy >= cfg.min_saving_sigmas * p.rel_sigma
                {
                    assert!(p.energy >= m.predict(s).energy - 1e-9);
                }
            }
        }
        let loose = choose(&m, &LIMITS, Objective::MinEnergy { max_slowdown: 0.5 }, &cfg);
        assert!(loose.setting.unwrap() < 250.0 && loose.predicted_energy_ratio < 1.0);
    }

    #[test]
    fn a_measured_setting_is_judged_on_its_measurement_and_the_probes_noise() {
        // 175 W was measured 4.5% slower than 250 W: within a 5% bound unless an error floor
        // or the noise seen in the probes says the measurement could be 0.5 points off.
        let m = |noise: f64| DvfsModel { times: vec![12.0, 8.36, 8.0], noise, ..plm() };
        let bound = Objective::MinEnergy { max_slowdown: 0.05 };
        let cfg = ChooserConfig::default();
        let d = choose(&m(0.0), &LIMITS, bound, &cfg);
        assert_eq!((d.setting, d.uncertainty), (Some(175.0), 0.0));
        assert!((d.predicted_slowdown - 0.045).abs() < 1e-12);
        assert_ne!(choose(&m(0.01), &LIMITS, bound, &cfg).setting, Some(175.0));
        let floored = ChooserConfig { probed_sigma_floor: 0.01, ..cfg };
        assert_ne!(choose(&m(0.0), &LIMITS, bound, &floored).setting, Some(175.0));
        // Its windows' own spread (0.4% at 175 W and at the top) is a 0.57% standard error,
        // 0.93% at the one-sided 95% quantile: out of the bound's reach too.
        let spread = DvfsModel { ses: vec![0.0, 0.004, 0.004], ..m(0.0) };
        let d = choose(&spread, &LIMITS, bound, &cfg);
        assert_ne!(d.setting, Some(175.0), "{d:?}");
        let expected = crate::model::MEASURED_ERROR_QUANTILE * 0.004 * 2f64.sqrt();
        assert!((spread.measurement_error(175.0) - expected).abs() < 1e-12);
    }

    #[test]
    fn noisy_model_falls_back() {
        let m = DvfsModel { noise: 0.3, ..plm() };
        let d = choose(&m, &LIMITS, Objective::MinEnergy { max_slowdown: 0.5 }, &ChooserConfig::default());
        assert_eq!((d.setting, d.reason), (Some(250.0), "model error too large: max setting"));
    }

    #[test]
    fn balanced_trades_energy_for_time() {
        // Every clock measured: t = 1000/f, P = 50 + 1e-7·f³.
        let clocks: Vec<f64> = (7..=14).map(|k| f64::from(k) * 100.0).collect();
        let samples: Vec<Sample> =
            clocks.iter().map(|&f| Sample::new(f, 1000.0 / f, 50.0 + 1e-7 * f * f * f, 1.0)).collect();
        let m = fit(Knob::SmClock, &samples).unwrap();
        let cfg = ChooserConfig::default();
        let e = choose(&m, &clocks, Objective::Balanced { eta: 1.0 }, &cfg);
        let t = choose(&m, &clocks, Objective::Balanced { eta: 0.0 }, &cfg);
        assert_eq!(t.setting, Some(1400.0));
        // E(f) = (50 + 1e-7 f³)·1000/f is least at f = (50/2e-7)^(1/3) ≈ 630 → 700 of the grid.
        assert_eq!(e.setting, Some(700.0));
        assert!(e.predicted_energy_ratio < 1.0 && e.predicted_slowdown > 0.0);
        // η = 0.5 weighs time by the top clock's draw, 50 + 1e-7·1400³ = 324.4 W (not by
        // 1400 MHz): cost ∝ (374.4 + 1e-7 f³)/f, least at f ≈ 1232 → 1200 of the grid.
        let half = choose(&m, &clocks, Objective::Balanced { eta: 0.5 }, &cfg);
        assert_eq!(half.setting, Some(1200.0));
    }
}
