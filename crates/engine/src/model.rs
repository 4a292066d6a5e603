//! Model families: step time and power as functions of the SM clock or of the power limit.
//!
//! Both families predict, per unit of work (a step or an epoch), the time `t`, the average
//! power `P` and the energy `E = P·t`, each with a relative standard error.

use serde::{Deserialize, Serialize};

/// Exponent of the effective-clock law: dynamic power grows as `f³`, so `f ∝ (P − a)^(1/3)`.
pub const CUBE_EXPONENT: f64 = 1.0 / 3.0;

/// One prediction at one setting, per unit of work.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Prediction {
    /// Time per unit of work (s).
    pub time: f64,
    /// Average power while working (W).
    pub power: f64,
    /// Energy per unit of work (J), `power · time`.
    pub energy: f64,
    /// Relative standard error of the time (and, to first order, of the energy).
    pub rel_sigma: f64,
    /// A pessimistic time (s): the larger of the model and a straight line through the
    /// probes (time is convex in the setting, so the line errs on the slow side).
    pub time_hi: f64,
}

/// SM-clock knob: `t(f) = t0 + D/f` (valid above ~0.45·fmax), `P(f) = a + b·f + c·f³`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ClockModel {
    /// Clock-independent time per unit of work (s).
    pub t0: f64,
    /// Clock-bound work (s·MHz).
    pub d: f64,
    /// Static power (W).
    pub a: f64,
    /// Linear power term (W/MHz).
    pub b: f64,
    /// Cubic power term (W/MHz³).
    pub c: f64,
    /// Relative standard error of the fit (residual-based, with a floor).
    pub rel_sigma: f64,
    /// Lowest clock the model is valid for (MHz); below it the error is inflated.
    pub f_valid_min: f64,
}

impl ClockModel {
    /// Time per unit of work at clock `f` (MHz).
    pub fn time(&self, f: f64) -> f64 {
        self.t0 + self.d / f
    }

    /// Average power at clock `f` (MHz).
    pub fn power(&self, f: f64) -> f64 {
        self.a + self.b * f + self.c * f * f * f
    }

    /// Prediction at clock `f`; the error grows below the validity limit.
    pub fn predict(&self, f: f64) -> Prediction {
        let time = self.time(f);
        let power = self.power(f);
        let outside = if f < self.f_valid_min { (self.f_valid_min - f) / self.f_valid_min } else { 0.0 };
        Prediction { time, power, energy: time * power, rel_sigma: self.rel_sigma + outside, time_hi: time }
    }
}

/// Power-limit knob.
///
/// Observed average power `P(p)` is the monotone piecewise-linear interpolation through the
/// probed limits (it saturates at the unconstrained draw). The time's shape follows the
/// effective-clock law `t = t0 + D·(P(p) − a)^(−1/3)` (`a`: the fitted power floor at which
/// progress stops), anchored on the measurements: at a probed limit the time is the measured
/// one, between two probes it moves from one to the other along that law's shape. Where the
/// measured time rises with the limit (noise), so does the curve, and the `noise` term widens
/// every margin. The relative error combines a model-disagreement term (this curve vs a straight line through
/// the probes, zero at probed limits), the noise seen in the probes, and a floor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerLimitModel {
    /// Probed limits (W), strictly increasing.
    pub limits: Vec<f64>,
    /// Monotone (non-decreasing) observed power at each probed limit (W).
    pub powers: Vec<f64>,
    /// Observed time at each probed limit (s).
    pub times: Vec<f64>,
    /// Limit-independent time (s).
    pub t0: f64,
    /// Power-bound work coefficient (s·W^(1/3)).
    pub d: f64,
    /// Power floor (W), below every observed power.
    pub a: f64,
    /// Noise seen in the probes: largest relative time increase when the limit was raised.
    pub noise: f64,
    /// Relative error floor.
    pub sigma_floor: f64,
}

/// Linear interpolation through `(xs, ys)`; linear extrapolation below, flat above.
fn interp(xs: &[f64], ys: &[f64], x: f64) -> f64 {
    let n = xs.len().min(ys.len());
    if n == 0 {
        return f64::NAN;
    }
    if n == 1 || x >= xs[n - 1] {
        return ys[n - 1];
    }
    let mut i = 0;
    while i + 2 < n && x > xs[i + 1] {
        i += 1;
    }
    let w = (x - xs[i]) / (xs[i + 1] - xs[i]);
    ys[i] + w * (ys[i + 1] - ys[i])
}

impl PowerLimitModel {
    /// Predicted average power under limit `p` (W).
    pub fn power(&self, p: f64) -> f64 {
        let floor = self.a + 0.01 * (self.powers.first().copied().unwrap_or(1.0) - self.a).max(1e-9);
        interp(&self.limits, &self.powers, p).max(floor)
    }

    /// The fitted law alone (s), not anchored on the measurements.
    fn law(&self, p: f64) -> f64 {
        self.t0 + self.d * (self.power(p) - self.a).powf(-CUBE_EXPONENT)
    }

    /// Predicted time per unit of work under limit `p` (s): the measured time at a probed
    /// limit; between probes `i` and `i+1`, `t_i + (t_{i+1} − t_i)·(law(p) − law_i) /
    /// (law_{i+1} − law_i)` (linear in `p` where the law is flat), so it stays between the two
    /// measurements; below the lowest probe the law scaled to it; above the highest, flat.
    pub fn time(&self, p: f64) -> f64 {
        let (xs, ts) = (&self.limits, &self.times);
        let n = xs.len().min(ts.len());
        if n == 0 {
            return self.law(p);
        }
        if p >= xs[n - 1] {
            return ts[n - 1];
        }
        if p <= xs[0] {
            let at = self.law(xs[0]);
            return if at > 0.0 { ts[0] * self.law(p) / at } else { ts[0] };
        }
        let i = xs.partition_point(|&x| x <= p).saturating_sub(1).min(n - 2);
        let (l0, l1) = (self.law(xs[i]), self.law(xs[i + 1]));
        let w = if l0 - l1 > 1e-12 * l0.abs() {
            (l0 - self.law(p)) / (l0 - l1)
        } else {
            (p - xs[i]) / (xs[i + 1] - xs[i])
        };
        ts[i] + w.clamp(0.0, 1.0) * (ts[i + 1] - ts[i])
    }

    /// Prediction under limit `p`, with its relative error.
    pub fn predict(&self, p: f64) -> Prediction {
        let power = self.power(p);
        let time = self.time(p);
        let line = interp(&self.limits, &self.times, p);
        let disagreement = if time > 0.0 { (time - line).abs() / time } else { 1.0 };
        let lo = self.limits.first().copied().unwrap_or(p);
        let outside = if p < lo && lo > 0.0 { (lo - p) / lo } else { 0.0 };
        let rel_sigma =
            (disagreement * disagreement + self.noise * self.noise + self.sigma_floor * self.sigma_floor)
                .sqrt()
                + outside;
        Prediction { time, power, energy: time * power, rel_sigma, time_hi: time.max(line) }
    }
}

/// A fitted model of either knob.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "knob", rename_all = "snake_case")]
pub enum DvfsModel {
    /// Settings are SM clocks (MHz).
    Clock(ClockModel),
    /// Settings are power limits (W).
    PowerLimit(PowerLimitModel),
}

impl DvfsModel {
    /// Prediction at `setting` (MHz or W, by knob).
    pub fn predict(&self, setting: f64) -> Prediction {
        match self {
            DvfsModel::Clock(m) => m.predict(setting),
            DvfsModel::PowerLimit(m) => m.predict(setting),
        }
    }

    /// Whether a setting was measured directly (its prediction is the measurement).
    pub fn is_probed(&self, setting: f64) -> bool {
        match self {
            DvfsModel::Clock(_) => false,
            DvfsModel::PowerLimit(m) => m.limits.iter().any(|&l| (l - setting).abs() < 1e-9),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn interp_is_linear_inside_flat_above_and_linear_below() {
        let xs = [100.0, 200.0, 300.0];
        let ys = [10.0, 20.0, 40.0];
        assert_eq!(interp(&xs, &ys, 150.0), 15.0);
        assert_eq!(interp(&xs, &ys, 250.0), 30.0);
        assert_eq!(interp(&xs, &ys, 400.0), 40.0);
        assert_eq!(interp(&xs, &ys, 50.0), 5.0);
        assert!(interp(&[], &[], 1.0).is_nan());
    }

    #[test]
    fn clock_model_energy_is_power_times_time() {
        let m =
            ClockModel { t0: 0.1, d: 100.0, a: 50.0, b: 0.01, c: 1e-8, rel_sigma: 0.01, f_valid_min: 600.0 };
        let p = m.predict(1000.0);
        assert!((p.time - 0.2).abs() < 1e-12);
        assert!((p.power - (50.0 + 10.0 + 10.0)).abs() < 1e-9);
        assert!((p.energy - p.time * p.power).abs() < 1e-12);
        assert!(m.predict(300.0).rel_sigma > 0.4);
    }
}
