//! Constrained weighted least squares for the model family, hand-written for ≤ 3 unknowns
//! (normal equations + a tiny Cholesky; non-negativity by enumerating supports).

use super::model::{DvfsModel, Knob, effective_clock};

/// One measurement at one setting, per unit of work.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Sample {
    /// Power limit (W) or SM clock (MHz), by the knob.
    pub setting: f64,
    /// Time per unit of work (s).
    pub time: f64,
    /// Average power (W).
    pub power: f64,
    /// Relative weight (e.g. number of steps measured); must be > 0.
    pub weight: f64,
    /// Relative standard error of `time` as its window measured it (from the spread within
    /// the window); 0 where unknown.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rel_se: f64,
}

fn is_zero(x: &f64) -> bool {
    *x == 0.0
}

impl Sample {
    /// A measurement with no error estimate of its own.
    pub fn new(setting: f64, time: f64, power: f64, weight: f64) -> Sample {
        Sample { setting, time, power, weight, rel_se: 0.0 }
    }
}

/// Why a fit was refused.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FitError {
    /// Fewer distinct settings than the model needs.
    #[error("too few distinct settings: need {need}, got {got}")]
    TooFewSettings {
        /// Distinct settings needed.
        need: usize,
        /// Distinct settings given.
        got: usize,
    },
    /// A sample has a non-finite or non-positive field.
    #[error("sample {0} is invalid (non-finite or non-positive setting, time, power or weight)")]
    InvalidSample(usize),
    /// The samples do not determine the model.
    #[error("degenerate samples: {0}")]
    Degenerate(&'static str),
}

/// Default relative error floor (measurement noise between runs of the same workload).
pub const SIGMA_FLOOR: f64 = 0.01;

/// Checks samples, sorts them by setting and merges equal settings (weighted means).
fn merge(samples: &[Sample]) -> Result<Vec<Sample>, FitError> {
    for (i, s) in samples.iter().enumerate() {
        let ok = [s.setting, s.time, s.power, s.weight].iter().all(|v| v.is_finite() && *v > 0.0)
            && s.rel_se.is_finite()
            && s.rel_se >= 0.0;
        if !ok {
            return Err(FitError::InvalidSample(i));
        }
    }
    let mut v: Vec<Sample> = samples.to_vec();
    v.sort_by(|a, b| a.setting.total_cmp(&b.setting));
    let mut out: Vec<Sample> = Vec::with_capacity(v.len());
    for s in v {
        match out.last_mut() {
            Some(last) if (last.setting - s.setting).abs() <= 1e-9 * s.setting => {
                let w = last.weight + s.weight;
                // The weighted mean of independent measurements.
                last.rel_se = (last.rel_se * last.weight).hypot(s.rel_se * s.weight) / w;
                last.time = (last.time * last.weight + s.time * s.weight) / w;
                last.power = (last.power * last.weight + s.power * s.weight) / w;
                last.weight = w;
            }
            _ => out.push(s),
        }
    }
    Ok(out)
}

/// Weighted least squares `y ≈ X·β` for `k ≤ 3` columns; `None` if singular.
fn wls<const K: usize>(rows: &[([f64; K], f64, f64)]) -> Option<[f64; K]> {
    let mut a = [[0.0; K]; K];
    let mut r = [0.0; K];
    for (x, y, w) in rows {
        for i in 0..K {
            r[i] += w * x[i] * y;
            for j in 0..K {
                a[i][j] += w * x[i] * x[j];
            }
        }
    }
    // Cholesky A = L·Lᵀ, relative pivot check against the diagonal scale.
    let mut l = [[0.0; K]; K];
    for i in 0..K {
        for j in 0..=i {
            let s = a[i][j] - (0..j).map(|m| l[i][m] * l[j][m]).sum::<f64>();
            if i == j {
                // Also rejects NaN: `s.is_finite() && s > …` is false for it.
                if !(s.is_finite() && s > 1e-10 * a[i][i].abs()) {
                    return None;
                }
                l[i][i] = s.sqrt();
            } else {
                l[i][j] = s / l[j][j];
            }
        }
    }
    let mut z = [0.0; K];
    for i in 0..K {
        let s = r[i] - (0..i).map(|m| l[i][m] * z[m]).sum::<f64>();
        z[i] = s / l[i][i];
    }
    let mut b = [0.0; K];
    for i in (0..K).rev() {
        let s = z[i] - (i + 1..K).map(|m| l[m][i] * b[m]).sum::<f64>();
        b[i] = s / l[i][i];
    }
    b.iter().all(|v| v.is_finite()).then_some(b)
}

/// Non-negative weighted least squares over 3 columns: the best feasible solution over all
/// supports (exact NNLS for this size). Rows are `(x, y, w)`; returns `(β, weighted SSE)`.
fn nnls3(rows: &[([f64; 3], f64, f64)]) -> Option<([f64; 3], f64)> {
    let mut best: Option<([f64; 3], f64)> = None;
    for mask in 1u8..8 {
        let cols: Vec<usize> = (0..3).filter(|i| mask & (1 << i) != 0).collect();
        let beta = match cols.len() {
            1 => {
                let sub: Vec<_> = rows.iter().map(|(x, y, w)| ([x[cols[0]]], *y, *w)).collect();
                wls::<1>(&sub).map(|b| {
                    let mut f = [0.0; 3];
                    f[cols[0]] = b[0];
                    f
                })
            }
            2 => {
                let sub: Vec<_> = rows.iter().map(|(x, y, w)| ([x[cols[0]], x[cols[1]]], *y, *w)).collect();
                wls::<2>(&sub).map(|b| {
                    let mut f = [0.0; 3];
                    f[cols[0]] = b[0];
                    f[cols[1]] = b[1];
                    f
                })
            }
            _ => wls::<3>(rows),
        };
        let Some(beta) = beta else { continue };
        if beta.iter().any(|v| *v < 0.0) {
            continue;
        }
        let sse: f64 = rows
            .iter()
            .map(|(x, y, w)| {
                let e = y - (beta[0] * x[0] + beta[1] * x[1] + beta[2] * x[2]);
                w * e * e
            })
            .sum();
        if best.is_none_or(|(_, s)| sse < s * (1.0 - 1e-12)) {
            best = Some((beta, sse));
        }
    }
    best
}

/// Fits a workload's model on `knob` from ≥ 3 distinct probed settings.
///
/// Power: monotone (running max upward) piecewise-linear through the probes. Time's law:
/// `t = t0 + D/f(s)` with `t0, D ≥ 0` (so the law never rises with the setting), by
/// relative-error weighted NNLS; under the power-limit knob `f = (P − a)^(1/3)` with the floor
/// `a` searched over `[0, 0.98·min P)`, under the clock knob `f` is the clock. The model's
/// time follows that law between the measured times (see [`DvfsModel`]).
pub fn fit(knob: Knob, samples: &[Sample]) -> Result<DvfsModel, FitError> {
    let s = merge(samples)?;
    if s.len() < 3 {
        return Err(FitError::TooFewSettings { need: 3, got: s.len() });
    }
    let settings: Vec<f64> = s.iter().map(|x| x.setting).collect();
    let mut powers: Vec<f64> = s.iter().map(|x| x.power).collect();
    for i in 1..powers.len() {
        powers[i] = powers[i].max(powers[i - 1]);
    }
    let times: Vec<f64> = s.iter().map(|x| x.time).collect();
    let noise = s.windows(2).map(|w| (w[1].time - w[0].time) / w[0].time).fold(0.0, f64::max);
    let eval = |a: f64| -> Option<(f64, f64, f64)> {
        let rows: Vec<([f64; 3], f64, f64)> = s
            .iter()
            .zip(&powers)
            .map(|(x, &p)| {
                let f = effective_clock(knob, x.setting, p, a);
                ([1.0, 1.0 / f, 0.0], x.time, x.weight / (x.time * x.time))
            })
            .collect();
        nnls3(&rows).map(|(b, sse)| (sse, b[0], b[1]))
    };
    // The power floor: a grid in 1% steps of the lowest power (an exact 3-point fit, by
    // refining `a`, chases noise: it predicted worse on the Zeus data; see docs/engine.md).
    // The clock knob has none.
    let floors: Vec<f64> = match knob {
        Knob::PowerLimit => (0..99).map(|k| powers[0] * f64::from(k) / 100.0).collect(),
        Knob::SmClock => vec![0.0],
    };
    let mut best: Option<(f64, f64, f64, f64)> = None; // (sse, a, t0, d)
    for a in floors {
        let Some((sse, t0, d)) = eval(a) else { continue };
        if best.is_none_or(|(b, ..)| sse < b - 1e-12) {
            best = Some((sse, a, t0, d));
        }
    }
    let (sse, a, t0, d) = best.ok_or(FitError::Degenerate("no time curve fits the samples"))?;
    if t0 + d <= 0.0 {
        return Err(FitError::Degenerate("fitted time is zero"));
    }
    // Under the clock knob the law (t0 + D/f at a fixed memory clock) is physics, and where
    // the probes outnumber its two parameters its residual (relative, weighted, per degree of
    // freedom) bounds the curve's error. Under a power limit the law is a heuristic through
    // the observed power: its residual on a few probes misled (bounds broken in the
    // simulator's refits on Zeus data), so the straight line through the probes stays its
    // bound.
    let n = s.len();
    let wsum: f64 = s.iter().map(|x| x.weight).sum();
    let law_sigma = (knob == Knob::SmClock && n > 2).then(|| (sse / wsum * n as f64 / (n - 2) as f64).sqrt());
    let ses = s.iter().map(|x| x.rel_se).collect();
    Ok(DvfsModel { knob, settings, powers, times, ses, t0, d, a, noise, sigma_floor: SIGMA_FLOOR, law_sigma })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn smp(setting: f64, time: f64, power: f64) -> Sample {
        Sample::new(setting, time, power, 1.0)
    }

    #[test]
    fn clock_fit_recovers_the_clock_law_between_and_below_its_probes() {
        // t = t0 + D/f, power a + b·f + c·f³: the model never sees the law, only three probes.
        let (t0, d) = (0.02, 158.4);
        let truth = |f: f64| smp(f, t0 + d / f, 72.0 + 0.0876 * f + 5.26e-8 * f * f * f);
        let s: Vec<Sample> = [990.0, 1485.0, 1980.0].iter().map(|&f| truth(f)).collect();
        let m = fit(Knob::SmClock, &s).unwrap();
        assert_eq!((m.knob, m.a), (Knob::SmClock, 0.0));
        assert!((m.t0 - t0).abs() < 1e-9 && (m.d - d).abs() < 1e-6, "{m:?}");
        for f in [1000.0, 1200.0, 1700.0, 1900.0, 900.0] {
            let want = truth(f).time;
            assert!((m.time(f) - want).abs() / want < 1e-9, "{f}: {} vs {want}", m.time(f));
        }
        // Power between probes is the straight line: never below the convex truth.
        assert!(m.power(1200.0) >= truth(1200.0).power);
        assert_eq!(m.noise, 0.0);
    }

    #[test]
    fn clock_fit_keeps_the_law_from_rising_with_the_clock() {
        // Time that rises with the clock would need D < 0: the constraint clamps it to 0, and
        // the rise is the noise term.
        let s = [smp(800.0, 1.0, 100.0), smp(1000.0, 1.1, 150.0), smp(1400.0, 1.2, 250.0)];
        let m = fit(Knob::SmClock, &s).unwrap();
        assert!(m.d >= 0.0 && m.t0 >= 0.0);
        assert!(m.noise > 0.09);
        assert!(m.predict(1000.0).rel_sigma > 0.09);
    }

    #[test]
    fn power_limit_fit_recovers_a_curve_of_its_own_family() {
        let (t0, d, a) = (2.0, 40.0, 85.5); // a = 60% of the lowest power: on the grid
        let p_of = |p: f64| p.min(230.0) * 0.95;
        let s: Vec<Sample> = [150.0, 225.0, 300.0]
            .iter()
            .map(|&p| smp(p, t0 + d * (p_of(p) - a).powf(-1.0 / 3.0), p_of(p)))
            .collect();
        let m = fit(Knob::PowerLimit, &s).unwrap();
        for (got, want) in [(m.t0, t0), (m.d, d), (m.a, a)] {
            assert!((got - want).abs() <= 1e-3 * want, "{got} vs {want}");
        }
        for x in &s {
            assert!((m.time(x.setting) - x.time).abs() / x.time < 1e-9);
        }
        assert_eq!(m.noise, 0.0);
    }

    #[test]
    fn power_limit_time_passes_through_the_measurements_and_follows_the_law_between() {
        // Noisy: time rises from 175 to 250 W. The curve keeps the measurement and the rise
        // becomes the noise term.
        let s = [smp(100.0, 10.0, 90.0), smp(175.0, 7.0, 150.0), smp(250.0, 7.5, 140.0)];
        let m = fit(Knob::PowerLimit, &s).unwrap();
        for x in &s {
            assert!((m.time(x.setting) - x.time).abs() < 1e-12);
        }
        assert!((m.noise - 0.5 / 7.0).abs() < 1e-12);
        assert!(m.power(250.0) >= m.power(175.0));
        for p in (180..250).step_by(5) {
            let t = m.time(f64::from(p));
            assert!((7.0..=7.5).contains(&t), "{t} at {p} leaves its neighbours' range");
        }
        // More probes than the law has parameters: the law is a least-squares compromise, yet
        // each probe predicts its measurement, and between monotone measurements the curve
        // falls monotonically and lies below the straight line (the law is convex).
        let law = |p: f64| 2.0 + 40.0 * (0.95 * p - 50.0).powf(-1.0 / 3.0);
        let bumps = [1.0, 1.02, 0.99, 1.01, 1.0];
        let s: Vec<Sample> = [100.0, 150.0, 200.0, 250.0, 300.0]
            .iter()
            .zip(bumps)
            .map(|(&p, k)| smp(p, law(p) * k, 0.95 * p))
            .collect();
        let m = fit(Knob::PowerLimit, &s).unwrap();
        for x in &s {
            assert!((m.time(x.setting) - x.time).abs() < 1e-12);
        }
        let mut last = m.time(100.0);
        for p in (105..=150).step_by(5) {
            let t = m.time(f64::from(p));
            let line = s[0].time + (s[1].time - s[0].time) * (f64::from(p) - 100.0) / 50.0;
            assert!(t <= last + 1e-12 && t <= line + 1e-12, "{t} at {p}");
            last = t;
        }
    }

    #[test]
    fn repeated_windows_merge_their_errors_as_a_mean_does() {
        let a = Sample { rel_se: 0.02, ..smp(200.0, 1.0, 150.0) };
        let b = Sample { rel_se: 0.02, ..smp(200.0, 1.2, 150.0) };
        let merged = merge(&[a, b]).unwrap();
        assert_eq!(merged.len(), 1);
        assert!(
            (merged[0].time - 1.1).abs() < 1e-12 && (merged[0].rel_se - 0.02 / 2f64.sqrt()).abs() < 1e-12
        );
        let m = fit(Knob::SmClock, &[a, smp(100.0, 2.0, 90.0), smp(300.0, 0.8, 250.0)]).unwrap();
        assert_eq!(m.ses, [0.0, 0.02, 0.0]);
        assert_eq!(merge(&[Sample { rel_se: -1.0, ..a }]), Err(FitError::InvalidSample(0)));
    }

    #[test]
    fn degenerate_input_is_an_error() {
        assert_eq!(fit(Knob::PowerLimit, &[]), Err(FitError::TooFewSettings { need: 3, got: 0 }));
        let dup = [smp(200.0, 1.0, 100.0), smp(200.0, 1.1, 100.0), smp(250.0, 1.0, 120.0)];
        assert_eq!(fit(Knob::PowerLimit, &dup), Err(FitError::TooFewSettings { need: 3, got: 2 }));
        let bad = [smp(100.0, 1.0, 90.0), smp(150.0, f64::NAN, 100.0), smp(250.0, 1.0, 120.0)];
        assert_eq!(fit(Knob::PowerLimit, &bad), Err(FitError::InvalidSample(1)));
        let neg = [smp(100.0, 1.0, -90.0), smp(150.0, 1.0, 100.0), smp(250.0, 1.0, 120.0)];
        assert_eq!(fit(Knob::SmClock, &neg), Err(FitError::InvalidSample(0)));
    }
}
