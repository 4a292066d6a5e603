//! Measured workload curves: a GPU that runs a workload as it was measured on real hardware
//! (time per unit of work and average power at each power limit), with a seeded noise on its
//! speed, instead of the built-in law.

use serde::{Deserialize, Serialize};

/// One measurement: at power limit `limit_w`, a unit of work took `time_s` at `power_w` on average.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct CurvePoint {
    /// The power limit it was measured at, W.
    pub limit_w: f64,
    /// Seconds per unit of work there.
    pub time_s: f64,
    /// Average power drawn there, W (may exceed the limit, as measured).
    pub power_w: f64,
}

/// The noise on a curve's speed: over each `period_ms` slice of CLOCK_REALTIME the work
/// progresses at the curve's rate times `1 + sigma·z`, `z` a standard normal drawn from
/// (`seed`, slice number) and cut at ±4, so the same seed gives the same noise at the same
/// instants. Its mean is the curve's rate: the curve is the truth, the noise what a window sees.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Noise {
    /// Relative standard deviation of the speed over one slice (0 for none; at most 0.2).
    pub sigma: f64,
    /// Length of a slice, ms (at least 1).
    pub period_ms: u32,
    /// Seed of the draws.
    pub seed: u64,
}

impl Noise {
    /// No noise: the work progresses exactly at the curve's rate.
    pub const NONE: Noise = Noise { sigma: 0.0, period_ms: 1000, seed: 0 };

    /// The speed factor over slice `slice` (a slice is `period_ms` of CLOCK_REALTIME).
    pub fn factor(&self, slice: i64) -> f64 {
        if self.sigma == 0.0 {
            return 1.0;
        }
        let a = splitmix64(self.seed ^ (slice as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15));
        let b = splitmix64(a);
        // Box–Muller from two uniforms in (0, 1].
        let u1 = ((a >> 11) as f64 + 1.0) / (1u64 << 53) as f64;
        let u2 = (b >> 11) as f64 / (1u64 << 53) as f64;
        let z = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
        1.0 + self.sigma * z.clamp(-4.0, 4.0)
    }

    fn period_ns(&self) -> i64 {
        i64::from(self.period_ms.max(1)) * 1_000_000
    }
}

fn splitmix64(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// What a unit of work truly costs at one setting: the curve's noise-free values.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TruePoint {
    /// The power limit, W.
    pub limit_w: f64,
    /// Seconds per unit of work.
    pub time_s: f64,
    /// Average power, W.
    pub power_w: f64,
}

impl TruePoint {
    /// Joules per unit of work.
    pub fn energy_j(&self) -> f64 {
        self.time_s * self.power_w
    }
}

/// A workload as measured: its points by power limit and the noise on its speed.
///
/// Between two measured limits both the time per unit and the power are interpolated linearly
/// in the limit (the straight line between the two measurements, no law assumed); below the
/// lowest or above the highest measured limit the nearest measurement holds, so give the GPU
/// the curve's range as its power-limit range.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MeasuredCurve {
    points: Vec<CurvePoint>,
    noise: Noise,
}

impl MeasuredCurve {
    /// A curve through `points` (any order; limits distinct), with `noise` on its speed.
    pub fn new(mut points: Vec<CurvePoint>, noise: Noise) -> Result<MeasuredCurve, String> {
        let positive = |x: f64| x.is_finite() && x > 0.0;
        if points.is_empty() {
            return Err("a measured curve needs at least one point".to_string());
        }
        if !points.iter().all(|p| positive(p.limit_w) && positive(p.time_s) && positive(p.power_w)) {
            return Err("curve points must be finite and positive".to_string());
        }
        points.sort_by(|a, b| a.limit_w.total_cmp(&b.limit_w));
        if points.windows(2).any(|w| w[0].limit_w == w[1].limit_w) {
            return Err("curve points must have distinct limits".to_string());
        }
        if !(0.0..=0.2).contains(&noise.sigma) || noise.period_ms == 0 {
            return Err("noise sigma must be within 0..=0.2 and its period at least 1 ms".to_string());
        }
        Ok(MeasuredCurve { points, noise })
    }

    /// The measured points, by increasing limit.
    pub fn points(&self) -> &[CurvePoint] {
        &self.points
    }

    /// The noise on the speed.
    pub fn noise(&self) -> Noise {
        self.noise
    }

    /// The truth at power limit `limit_w` (interpolated between measurements, see the type).
    pub fn at(&self, limit_w: f64) -> TruePoint {
        let p = &self.points;
        let (time_s, power_w) = match p.iter().position(|x| x.limit_w >= limit_w) {
            None => (p[p.len() - 1].time_s, p[p.len() - 1].power_w),
            Some(0) => (p[0].time_s, p[0].power_w),
            Some(i) => {
                let (a, b) = (p[i - 1], p[i]);
                let s = (limit_w - a.limit_w) / (b.limit_w - a.limit_w);
                (a.time_s + s * (b.time_s - a.time_s), a.power_w + s * (b.power_w - a.power_w))
            }
        };
        TruePoint { limit_w, time_s, power_w }
    }

    /// The truth at the highest measured limit.
    pub fn top(&self) -> TruePoint {
        self.at(self.points[self.points.len() - 1].limit_w)
    }

    /// Units of work done at limit `limit_w` over [from_ns, from_ns + dt_ns), noise included:
    /// the curve's rate times each slice's factor, integrated slice by slice.
    pub fn work(&self, limit_w: f64, from_ns: i64, dt_ns: u64) -> f64 {
        let rate = 1.0 / self.at(limit_w).time_s;
        let period = self.noise.period_ns();
        let end = from_ns.saturating_add(dt_ns as i64);
        let (mut t, mut units) = (from_ns, 0.0);
        while t < end {
            let slice = t.div_euclid(period);
            let next = ((slice + 1) * period).min(end);
            units += rate * self.noise.factor(slice) * (next - t) as f64 / 1e9;
            t = next;
        }
        units
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn curve(noise: Noise) -> MeasuredCurve {
        let pts = [(250.0, 1.0, 200.0), (100.0, 2.0, 95.0), (150.0, 1.2, 140.0)];
        let points = pts.map(|(limit_w, time_s, power_w)| CurvePoint { limit_w, time_s, power_w });
        MeasuredCurve::new(points.to_vec(), noise).unwrap()
    }

    #[test]
    fn interpolates_linearly_between_measurements_and_holds_the_ends() {
        let c = curve(Noise::NONE);
        assert_eq!(c.points().iter().map(|p| p.limit_w).collect::<Vec<_>>(), [100.0, 150.0, 250.0]);
        let mid = c.at(200.0);
        assert!((mid.time_s - 1.1).abs() < 1e-12 && (mid.power_w - 170.0).abs() < 1e-12, "{mid:?}");
        assert!((c.at(125.0).time_s - 1.6).abs() < 1e-12);
        assert_eq!((c.at(150.0).time_s, c.at(150.0).power_w), (1.2, 140.0));
        assert_eq!((c.at(50.0).time_s, c.at(300.0).time_s), (2.0, 1.0));
        assert_eq!(c.top(), TruePoint { limit_w: 250.0, time_s: 1.0, power_w: 200.0 });
        assert!((c.at(200.0).energy_j() - 1.1 * 170.0).abs() < 1e-9);
    }

    #[test]
    fn rejects_bad_points_and_noise() {
        let p = |limit_w, time_s| CurvePoint { limit_w, time_s, power_w: 100.0 };
        assert!(MeasuredCurve::new(vec![], Noise::NONE).is_err());
        assert!(MeasuredCurve::new(vec![p(100.0, 0.0)], Noise::NONE).is_err());
        assert!(MeasuredCurve::new(vec![p(100.0, f64::NAN)], Noise::NONE).is_err());
        assert!(MeasuredCurve::new(vec![p(100.0, 1.0), p(100.0, 2.0)], Noise::NONE).is_err());
        let loud = Noise { sigma: 0.3, period_ms: 100, seed: 1 };
        assert!(MeasuredCurve::new(vec![p(100.0, 1.0)], loud).is_err());
        let no_period = Noise { sigma: 0.01, period_ms: 0, seed: 1 };
        assert!(MeasuredCurve::new(vec![p(100.0, 1.0)], no_period).is_err());
    }

    #[test]
    fn noise_is_seeded_has_the_stated_spread_and_averages_out() {
        let n = Noise { sigma: 0.02, period_ms: 100, seed: 7 };
        let draws: Vec<f64> = (0..20_000).map(|k| n.factor(k)).collect();
        let again: Vec<f64> = (0..20_000).map(|k| n.factor(k)).collect();
        assert_eq!(draws, again, "the same seed gives the same noise");
        let other = Noise { seed: 8, ..n };
        assert_ne!(draws[..10], (0..10).map(|k| other.factor(k)).collect::<Vec<_>>()[..]);
        let mean = draws.iter().sum::<f64>() / draws.len() as f64;
        let sd = (draws.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / draws.len() as f64).sqrt();
        assert!((mean - 1.0).abs() < 0.001, "mean {mean}");
        assert!((sd - 0.02).abs() < 0.001, "sd {sd}");
        assert_eq!(Noise::NONE.factor(3), 1.0);
    }

    #[test]
    fn work_integrates_the_noisy_rate_slice_by_slice() {
        let quiet = curve(Noise::NONE);
        // 200 W: 1.1 s per unit, so 11 s make 10 units, however the interval is cut.
        assert!((quiet.work(200.0, 5, 11_000_000_000) - 10.0).abs() < 1e-9);
        let n = Noise { sigma: 0.05, period_ms: 100, seed: 3 };
        let noisy = curve(n);
        // One slice: the rate times that slice's factor.
        let one = noisy.work(200.0, 1_000_000_000, 100_000_000);
        assert!((one - 0.1 / 1.1 * n.factor(10)).abs() < 1e-12, "{one}");
        // Cut anywhere, the total is the same; over many slices it tends to the truth.
        let whole = noisy.work(200.0, 123_456_789, 50_000_000_000);
        let parts: f64 =
            (0..50).map(|k| noisy.work(200.0, 123_456_789 + k * 1_000_000_000, 1_000_000_000)).sum();
        assert!((whole - parts).abs() < 1e-9, "{whole} vs {parts}");
        assert!((whole / (50.0 / 1.1) - 1.0).abs() < 0.01, "{whole}");
        assert_ne!(whole, 50.0 / 1.1);
    }
}
