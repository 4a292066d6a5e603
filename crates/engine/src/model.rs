//! The model family: step time and power as functions of one DVFS knob (the SM clock or the
//! power limit).
//!
//! It predicts, per unit of work (a step or an epoch), the time `t`, the average
//! power `P` and the energy `E = P·t`, each with a relative standard error.

use serde::{Deserialize, Serialize};

pub use wattson_types::gpu::Knob;

/// The windows' measured error enters the margin at its one-sided 95% quantile: the plan puts
/// the decision on a measured setting near the bound on purpose, so a window that erred fast
/// must rarely pass a setting that is over it (at one standard error, one in six would).
pub const MEASURED_ERROR_QUANTILE: f64 = 1.645;

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

/// A fitted model of one workload on one knob (power limit or SM clock): one family for
/// any knob whose setting, raised, never slows the work.
///
/// Observed average power `P(s)` is the monotone (running-max) piecewise-linear interpolation
/// through the probed settings (under a power limit it saturates at the unconstrained draw).
/// The time's shape follows the effective-clock law `t = t0 + D/f(s)`: under the SM-clock knob
/// `f` is the clock itself; under the power-limit knob dynamic power grows as `f³`, so
/// `f ∝ (P(s) − a)^(1/3)` with `a` the fitted power floor at which progress stops. The law is
/// anchored on the measurements: at a probed setting the time is the measured one, between two
/// probes it moves from one to the other along the law's shape. Where the measured time rises
/// with the setting (noise), so does the curve, and the `noise` term widens every margin. The
/// relative error combines a model-disagreement term (this curve vs a straight line through
/// the probes, zero at probed settings), the noise seen in the probes, and a floor.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct DvfsModel {
    /// The knob the settings are on.
    #[serde(default)]
    pub knob: Knob,
    /// Probed settings (W or MHz, by knob), strictly increasing.
    #[serde(alias = "limits")]
    pub settings: Vec<f64>,
    /// Monotone (non-decreasing) observed power at each probed setting (W).
    pub powers: Vec<f64>,
    /// Observed time at each probed setting (s).
    pub times: Vec<f64>,
    /// Relative standard error of each observed time, as its windows measured it (0: unknown).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub ses: Vec<f64>,
    /// Setting-independent time (s).
    pub t0: f64,
    /// Clock-bound work coefficient (s·MHz under the clock knob, s·W^(1/3) under the power
    /// limit).
    pub d: f64,
    /// Power floor (W), below every observed power; 0 under the clock knob (unused there).
    pub a: f64,
    /// Noise seen in the probes: largest relative time increase when the setting was raised.
    pub noise: f64,
    /// Relative error floor.
    pub sigma_floor: f64,
    /// Under the clock knob, how well the law fits the probes where they outnumber its two
    /// parameters: the relative residual standard error. `None` where the law is unchecked
    /// (three probes under a power limit only determine it; see [`fn@crate::fit`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub law_sigma: Option<f64>,
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

/// The effective clock of the law for a knob: the clock itself, or `(P − a)^(1/3)`.
pub(crate) fn effective_clock(knob: Knob, setting: f64, power: f64, a: f64) -> f64 {
    match knob {
        Knob::SmClock => setting,
        Knob::PowerLimit => (power - a).powf(CUBE_EXPONENT),
    }
}

impl DvfsModel {
    /// Predicted average power at setting `s` (W).
    pub fn power(&self, s: f64) -> f64 {
        let floor = self.a + 0.01 * (self.powers.first().copied().unwrap_or(1.0) - self.a).max(1e-9);
        interp(&self.settings, &self.powers, s).max(floor)
    }

    /// The fitted law alone (s), not anchored on the measurements.
    fn law(&self, s: f64) -> f64 {
        self.t0 + self.d / effective_clock(self.knob, s, self.power(s), self.a)
    }

    /// Predicted time per unit of work at setting `s` (s): the measured time at a probed
    /// setting; between probes `i` and `i+1`, `t_i + (t_{i+1} − t_i)·(law(s) − law_i) /
    /// (law_{i+1} − law_i)` (linear in `s` where the law is flat), so it stays between the two
    /// measurements; below the lowest probe the law scaled to it; above the highest, flat.
    pub fn time(&self, s: f64) -> f64 {
        let (xs, ts) = (&self.settings, &self.times);
        let n = xs.len().min(ts.len());
        if n == 0 {
            return self.law(s);
        }
        if s >= xs[n - 1] {
            return ts[n - 1];
        }
        if s <= xs[0] {
            let at = self.law(xs[0]);
            return if at > 0.0 { ts[0] * self.law(s) / at } else { ts[0] };
        }
        let i = xs.partition_point(|&x| x <= s).saturating_sub(1).min(n - 2);
        let (l0, l1) = (self.law(xs[i]), self.law(xs[i + 1]));
        let w = if l0 - l1 > 1e-12 * l0.abs() {
            (l0 - self.law(s)) / (l0 - l1)
        } else {
            (s - xs[i]) / (xs[i + 1] - xs[i])
        };
        ts[i] + w.clamp(0.0, 1.0) * (ts[i + 1] - ts[i])
    }

    /// Prediction at setting `s`, with its relative error.
    pub fn predict(&self, s: f64) -> Prediction {
        let power = self.power(s);
        let time = self.time(s);
        let line = interp(&self.settings, &self.times, s);
        // A straight line through the probes errs slow (time is convex in the setting): how
        // far the curve lies from it bounds its error, unless the probes checked the law, which
        // then bounds it by its residual.
        let gap = if time > 0.0 { (time - line).abs() / time } else { 1.0 };
        let disagreement = self.law_sigma.map_or(gap, |r| gap.min(r));
        let time_hi = time.max(line.min(time * (1.0 + disagreement)));
        let lo = self.settings.first().copied().unwrap_or(s);
        let outside = if s < lo && lo > 0.0 { (lo - s) / lo } else { 0.0 };
        // The floor stands in for what an unchecked law may miss and for measurement noise
        // nobody measured. A checked law's residual and the windows' own errors measure both,
        // but only together: three probes leave the residual one degree of freedom, so it is
        // near zero by chance often enough that alone it let measured sweeps break bounds.
        let floor = if self.law_sigma.is_some() && self.errors_measured() { 0.0 } else { self.sigma_floor };
        let rel_sigma = (disagreement * disagreement
            + self.noise * self.noise
            + floor * floor
            + self.measurement_error(s).powi(2))
        .sqrt()
            + outside;
        Prediction { time, power, energy: time * power, rel_sigma, time_hi }
    }

    /// Whether every probe's window measured its own error (`ses`; 0 is unknown).
    pub fn errors_measured(&self) -> bool {
        !self.ses.is_empty() && self.ses.iter().all(|&e| e > 0.0)
    }

    /// Whether a setting was measured directly (its prediction is the measurement).
    pub fn is_probed(&self, setting: f64) -> bool {
        self.settings.iter().any(|&l| (l - setting).abs() < 1e-9)
    }

    /// The measurement error of the slowdown at `s` against the top setting: the windows'
    /// own standard errors, pooled over every probe (one method measured them all, and one
    /// window's spread over a few parts is itself a rough estimate), at `s` and at the top,
    /// counted at [`MEASURED_ERROR_QUANTILE`].
    pub fn measurement_error(&self, s: f64) -> f64 {
        // No allocation: this runs for every setting the chooser weighs.
        let (sum_sq, known) =
            self.ses.iter().filter(|&&e| e > 0.0).fold((0.0, 0usize), |(sq, n), e| (sq + e * e, n + 1));
        if known == 0 || s >= self.settings.last().copied().unwrap_or(s) {
            return 0.0;
        }
        MEASURED_ERROR_QUANTILE * (sum_sq / known as f64).sqrt() * std::f64::consts::SQRT_2
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
    fn a_checked_clock_law_drops_the_floor_only_where_windows_measured_their_error() {
        // Three probes exactly on t = 0.1 + 150/f: the law's residual is zero.
        let law = |f: f64| 0.1 + 150.0 / f;
        let model = |ses: Vec<f64>| DvfsModel {
            knob: Knob::SmClock,
            settings: vec![900.0, 1400.0, 1980.0],
            powers: vec![200.0, 350.0, 700.0],
            times: vec![law(900.0), law(1400.0), law(1980.0)],
            ses,
            t0: 0.1,
            d: 150.0,
            a: 0.0,
            noise: 0.0,
            sigma_floor: 0.01,
            law_sigma: Some(0.0),
        };
        // No window measured its error: the floor stands in for the noise.
        assert!(model(Vec::new()).predict(1200.0).rel_sigma >= 0.01);
        assert!(model(vec![0.002, 0.0, 0.002]).predict(1200.0).rel_sigma >= 0.01);
        // Every window did: their pooled error, at its 95% quantile, replaces it.
        let measured = model(vec![0.002; 3]).predict(1200.0).rel_sigma;
        let expected = MEASURED_ERROR_QUANTILE * 0.002 * std::f64::consts::SQRT_2;
        assert!((measured - expected).abs() < 1e-9, "{measured}");
    }

    #[test]
    fn old_power_limit_models_still_read() {
        // A model table written before the clock knob: `knob` in snake case, `limits`.
        let json = r#"{"knob":"power_limit","limits":[100,200,300],"powers":[90,150,180],
            "times":[3,2,1.8],"t0":1,"d":4,"a":10,"noise":0,"sigma_floor":0.01}"#;
        let m: DvfsModel = serde_json::from_str(json).unwrap();
        assert_eq!((m.knob, m.settings.len()), (Knob::PowerLimit, 3));
        assert_eq!(m.time(200.0), 2.0);
        let clock: DvfsModel = serde_json::from_str(&json.replace("power_limit", "sm-clock")).unwrap();
        assert_eq!(clock.knob, Knob::SmClock);
    }
}
