//! A GPU as the hardware really behaves, where published measurements say how; switched on per
//! GPU by a `[gpu.realism]` table in `config.toml` (every field optional, the model's values
//! below otherwise). Without it a GPU is ideal: its counter is exact at every read and its power
//! reading is the power it draws at that instant.
//!
//! What a realistic GPU does, and where each behaviour comes from:
//!
//! - **The energy counter advances in steps** of `counter_step_ms` (100 ms): between two
//!   updates a read returns the value of the last update. Published: the Zeus / ML.ENERGY
//!   measurement notes (`nvmlDeviceGetTotalEnergyConsumption` changes about every 100 ms).
//!   Each GPU's steps have their own phase.
//! - **The power reading is an average over sampled windows**: the sensor looks at a
//!   `power_duty` part of every step (on A100 and H100 a 25 ms window every 100 ms), and the
//!   reading averages the windows of the last `power_window_ms` (1 s on Ampere and later except
//!   GA100: H100; on A100, GA100, the latest window alone). Published: NVML's reference for
//!   `nvmlDeviceGetPowerUsage` (the 1 s average from Ampere on, GA100 excepted) and Yang et al.,
//!   "Accurate and Convenient Energy Measurements for GPUs" (SC'24: 25 ms of every 100 ms on
//!   A100/H100). V100's reading is taken as instantaneous per window over the whole step: an
//!   assumption.
//! - **Draw rises with temperature at the same work** (leakage): the die heats towards
//!   `ambient_c + c_per_w × power` with time constant `thermal_tau_s`, and the draw at equal work
//!   is multiplied by `1 + leakage_per_c × (T − T_idle)`; under a power cap a hotter GPU runs a
//!   lower clock. Published that it happens (the ML.ENERGY "thermally stable profiling" note);
//!   the figures (30 °C ambient, 0.08 °C/W, 60 s, 0.3 %/°C) are assumptions, and the tests that
//!   depend on them try a range.
//! - **A new power limit or clock lock settles** linearly over `settle_ms` (an assumption:
//!   200 ms), starting at the next counter step.
//!
//! The physics runs in ticks of one counter step: power changes at a tick (heat, settling) or
//! when the load or a setting changes, and is constant between, so the physical truth (the
//! history of drawn power, see `Sim::truth_energy_mj`) is still exact.

use serde::{Deserialize, Serialize};

/// The `[gpu.realism]` table: each field overrides the model's value.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RealismConfig {
    /// Period of the energy counter's updates, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counter_step_ms: Option<u32>,
    /// The span the power reading averages over, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_window_ms: Option<u32>,
    /// The part of each counter step the power sensor samples, in (0, 1].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_duty: Option<f64>,
    /// Thermal time constant, s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thermal_tau_s: Option<f64>,
    /// Temperature rise per watt drawn at equilibrium, °C/W.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub c_per_w: Option<f64>,
    /// Relative rise of the draw per °C above the idle temperature.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub leakage_per_c: Option<f64>,
    /// Ambient (inlet) temperature, °C.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ambient_c: Option<f64>,
    /// Time a new power limit or clock lock takes to take full effect, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settle_ms: Option<u32>,
    /// Time a counter read takes, ms, the value taken half way: an assumption from an H200 in
    /// a VM, where reads took 2.3 ms (median) to 5.6 ms (p90) (docs/accounting.md). Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub read_latency_ms: Option<f64>,
}

/// A realistic GPU's behaviour with every value filled in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Realism {
    /// Counter step (and physics tick), ns.
    pub step_ns: i64,
    /// Phase of this GPU's steps within the period, ns.
    pub phase_ns: i64,
    /// Span of the power reading's average, ns.
    pub window_ns: i64,
    /// Sampled part of each step.
    pub duty: f64,
    /// Thermal time constant, s.
    pub tau_s: f64,
    /// °C per W at equilibrium.
    pub c_per_w: f64,
    /// Relative draw per °C.
    pub leakage_per_c: f64,
    /// Ambient temperature, °C.
    pub ambient_c: f64,
    /// Settling time of a new setting, ns.
    pub settle_ns: i64,
    /// Time a counter read takes, ns.
    pub read_latency_ns: i64,
}

impl RealismConfig {
    /// The values for GPU `index` of preset `model`, validated.
    pub fn resolve(&self, model: &str, index: usize) -> Result<Realism, String> {
        let (window_ms, duty) = match model {
            "H100" => (1000, 0.25),
            "A100" => (100, 0.25),
            _ => (100, 1.0),
        };
        let step_ms = self.counter_step_ms.unwrap_or(100);
        let ms = |v: u32| i64::from(v) * 1_000_000;
        let r = Realism {
            step_ns: ms(step_ms),
            // Spread over the period so that no two GPUs of a node step together.
            phase_ns: (index as i64 * 37_000_000) % ms(step_ms.max(1)),
            window_ns: ms(self.power_window_ms.unwrap_or(window_ms)),
            duty: self.power_duty.unwrap_or(duty),
            tau_s: self.thermal_tau_s.unwrap_or(60.0),
            c_per_w: self.c_per_w.unwrap_or(0.08),
            leakage_per_c: self.leakage_per_c.unwrap_or(0.003),
            ambient_c: self.ambient_c.unwrap_or(30.0),
            settle_ns: ms(self.settle_ms.unwrap_or(200)),
            read_latency_ns: (self.read_latency_ms.unwrap_or(0.0) * 1e6).round() as i64,
        };
        let ok = r.step_ns >= 1_000_000
            && r.window_ns >= r.step_ns
            && r.duty > 0.0
            && r.duty <= 1.0
            && r.tau_s > 0.0
            && r.tau_s.is_finite()
            && (0.0..=1.0).contains(&r.c_per_w)
            && (0.0..=0.05).contains(&r.leakage_per_c)
            && (-40.0..=60.0).contains(&r.ambient_c)
            && (0..=100_000_000).contains(&r.read_latency_ns);
        if ok {
            Ok(r)
        } else {
            Err(format!(
                "gpu {index}: realism needs counter_step_ms >= 1, power_window_ms >= counter_step_ms, \
                 power_duty in (0, 1], thermal_tau_s > 0, c_per_w in [0, 1], leakage_per_c in [0, 0.05], \
                 ambient_c in [-40, 60], read_latency_ms in [0, 100]"
            ))
        }
    }
}

impl Realism {
    /// The first tick strictly after `t_ns`.
    pub fn next_tick(&self, t_ns: i64) -> i64 {
        let k = (t_ns - self.phase_ns).div_euclid(self.step_ns);
        self.phase_ns + (k + 1) * self.step_ns
    }

    /// The temperature at which the GPU idles at `idle_w`, where the draw is the nominal one.
    pub fn idle_c(&self, idle_w: f64) -> f64 {
        self.ambient_c + self.c_per_w * idle_w
    }

    /// The draw's factor at temperature `temp_c` (never below 1/2).
    pub fn leakage(&self, idle_w: f64, temp_c: f64) -> f64 {
        (1.0 + self.leakage_per_c * (temp_c - self.idle_c(idle_w))).max(0.5)
    }

    /// The temperature after `dt_ns` at constant draw `power_mw` from `temp_c`.
    pub fn heat(&self, temp_c: f64, power_mw: u32, dt_ns: u64) -> f64 {
        let eq = self.ambient_c + self.c_per_w * f64::from(power_mw) / 1000.0;
        eq + (temp_c - eq) * (-(dt_ns as f64) / 1e9 / self.tau_s).exp()
    }

    /// The power reading at `now`: the mean of the sampled windows (each the first `duty` of
    /// a step) that ended within the last `window_ns`, from `recent`, the draw's changes
    /// `(t_ns, mW)` in order. `None` when no sampled window has ended since the history began.
    pub fn power_reading(&self, recent: &[(i64, u32)], now: i64) -> Option<u32> {
        let first = recent.first()?.0;
        let sample_ns = ((self.step_ns as f64 * self.duty).round() as i64).max(1);
        let (mut sum, mut n) = (0.0, 0u32);
        // Windows start at ticks; the latest one that has ended starts at or before now - sample.
        let mut start = self.next_tick(now - sample_ns) - self.step_ns;
        while start + sample_ns > now - self.window_ns && start >= first {
            sum += mean_over(recent, start, start + sample_ns);
            n += 1;
            start -= self.step_ns;
        }
        (n > 0).then(|| (sum / f64::from(n)).round() as u32)
    }
}

/// Mean of a piecewise-constant history `(t_ns, mW)` over `[a, b)` (b > a); before its first
/// point the history holds its first value.
fn mean_over(points: &[(i64, u32)], a: i64, b: i64) -> f64 {
    let mut total = 0.0;
    for (k, &(t, p)) in points.iter().enumerate() {
        let from = if k == 0 { i64::MIN } else { t };
        let to = points.get(k + 1).map_or(i64::MAX, |n| n.0);
        let (lo, hi) = (from.max(a), to.min(b));
        if hi > lo {
            total += f64::from(p) * (hi - lo) as f64;
        }
    }
    total / (b - a) as f64
}

/// The realistic part of a GPU's live state (absent on an ideal GPU).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Physics {
    /// Die temperature, °C.
    pub temp_c: f64,
    /// The draw's leakage factor, as of the last tick.
    pub leakage: f64,
    /// The counter as of its last step: what a read returns, mJ.
    pub served_mj: u64,
    /// The power limit in effect (settling towards the set one), mW.
    pub limit_mw: u32,
    /// The SM clock target in effect (settling towards the set one), MHz.
    pub clock_mhz: u32,
    /// A setting change still settling: (since ns, limit mW and clock MHz it started from).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settling: Option<(i64, u32, u32)>,
    /// The draw's changes `(t_ns, mW)` over the power reading's window.
    #[serde(default)]
    pub recent: Vec<(i64, u32)>,
}

impl Physics {
    /// A GPU idling at its idle temperature, counter at `counter_mj`, settings in effect.
    pub fn fresh(r: &Realism, idle_w: f64, counter_mj: u64, limit_mw: u32, clock_mhz: u32) -> Physics {
        Physics {
            temp_c: r.idle_c(idle_w),
            leakage: 1.0,
            served_mj: counter_mj,
            limit_mw,
            clock_mhz,
            settling: None,
            recent: Vec::new(),
        }
    }

    /// Moves the settings in effect towards the set ones at tick `t_ns`.
    pub fn settle(&mut self, r: &Realism, t_ns: i64, set_limit_mw: u32, set_clock_mhz: u32) {
        let Some((since, from_limit, from_clock)) = self.settling else {
            (self.limit_mw, self.clock_mhz) = (set_limit_mw, set_clock_mhz);
            return;
        };
        let frac =
            if r.settle_ns == 0 { 1.0 } else { ((t_ns - since) as f64 / r.settle_ns as f64).clamp(0.0, 1.0) };
        let towards =
            |from: u32, to: u32| (f64::from(from) + (f64::from(to) - f64::from(from)) * frac).round() as u32;
        self.limit_mw = towards(from_limit, set_limit_mw);
        self.clock_mhz = towards(from_clock, set_clock_mhz);
        if frac >= 1.0 {
            self.settling = None;
        }
    }

    /// Records a change of the draw at `t_ns`, keeping what the power reading can still need.
    pub fn record(&mut self, r: &Realism, t_ns: i64, power_mw: u32) {
        if self.recent.last().is_some_and(|&(_, p)| p == power_mw) {
            return;
        }
        self.recent.push((t_ns, power_mw));
        let horizon = t_ns - r.window_ns - 2 * r.step_ns;
        let keep_from = self.recent.iter().rposition(|&(t, _)| t <= horizon).unwrap_or(0);
        self.recent.drain(..keep_from);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> Realism {
        RealismConfig::default().resolve("H100", 0).unwrap()
    }

    #[test]
    fn ticks_follow_the_phase() {
        let r = RealismConfig::default().resolve("H100", 1).unwrap();
        assert_eq!(r.phase_ns, 37_000_000);
        assert_eq!(r.next_tick(0), 37_000_000);
        assert_eq!(r.next_tick(37_000_000), 137_000_000);
        assert_eq!(r.next_tick(-1), 37_000_000);
    }

    #[test]
    fn the_reading_averages_only_the_sampled_windows() {
        let r = h100();
        // 100 W, except 500 W in the unsampled 50-90 ms of every step of the last second.
        let mut recent = vec![(-5_000_000_000, 100_000)];
        for k in 0..20i64 {
            recent.push((k * 100_000_000 + 50_000_000, 500_000));
            recent.push((k * 100_000_000 + 90_000_000, 100_000));
        }
        assert_eq!(r.power_reading(&recent, 2_000_000_000), Some(100_000));
        // The true mean over the last second is 260 W.
        assert!((mean_over(&recent, 1_000_000_000, 2_000_000_000) - 260_000.0).abs() < 1.0);
        // 500 W in the sampled first 25 ms instead: the reading sees only those.
        let burst = vec![(-5_000_000_000, 100_000), (1_000_000_000, 500_000), (1_025_000_000, 100_000)];
        assert_eq!(r.power_reading(&burst, 2_000_000_000), Some(140_000));
        assert_eq!(r.power_reading(&[], 0), None);
    }

    #[test]
    fn heat_approaches_equilibrium_and_raises_the_draw() {
        let r = h100();
        let idle = r.idle_c(72.0);
        let hot = r.heat(idle, 700_000, 600_000_000_000);
        assert!((hot - (30.0 + 56.0)).abs() < 0.01, "{hot}");
        let after_tau = r.heat(idle, 700_000, 60_000_000_000);
        let want = 86.0 + (idle - 86.0) * (-1.0f64).exp();
        assert!((after_tau - want).abs() < 1e-9);
        assert!(r.leakage(72.0, hot) > 1.1 && r.leakage(72.0, idle) == 1.0);
    }

    #[test]
    fn settings_settle_linearly() {
        let r = h100();
        let mut p = Physics::fresh(&r, 72.0, 0, 700_000, 1980);
        p.settling = Some((0, 700_000, 1980));
        p.settle(&r, 100_000_000, 300_000, 1980);
        assert_eq!(p.limit_mw, 500_000);
        p.settle(&r, 200_000_000, 300_000, 1980);
        assert_eq!((p.limit_mw, p.settling), (300_000, None));
    }

    #[test]
    fn bad_values_are_refused() {
        let bad = RealismConfig { power_duty: Some(0.0), ..RealismConfig::default() };
        assert!(bad.resolve("H100", 0).is_err());
        let bad = RealismConfig { power_window_ms: Some(50), ..RealismConfig::default() };
        assert!(bad.resolve("H100", 0).is_err());
    }
}
