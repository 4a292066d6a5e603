//! Per-job, per-GPU energy metering from GPU readings. Pure: no I/O, no clock.
//!
//! The energy of a job on a GPU is the difference of NVML's cumulative energy counter between
//! the job's begin and end readings. Every sample also advances the meter, so that a counter
//! reset (driver reload) loses at most the gap between two samples, which is then estimated
//! from power, and so that a daemon restart resumes from the last persisted reading: the counter
//! kept counting while the daemon was down, so the next delta covers the gap exactly.
//! Only a GPU without the counter is metered by integrating sampled power (trapezoids).

use serde::{Deserialize, Serialize};
use strum::{EnumString, IntoStaticStr};

/// One reading of one GPU, as the GPU backend returns it.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct GpuReading {
    /// Wall-clock time of the reading, nanoseconds since the Unix epoch.
    pub t_ns: i64,
    /// Cumulative energy counter in mJ; `None` when the GPU has no counter.
    pub energy_mj: Option<u64>,
    /// Instantaneous power draw in mW.
    pub power_mw: Option<u32>,
    /// Current SM clock in MHz.
    pub sm_clock_mhz: Option<u32>,
    /// GPU utilisation in percent.
    pub util_pct: Option<u32>,
}

/// One point of a job's per-GPU time series (the daemon decides which samples to keep).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SeriesPoint {
    /// Time of the reading, ns since the Unix epoch.
    pub t_ns: i64,
    /// NVML index of the GPU.
    pub gpu_index: u32,
    /// Power draw in mW.
    pub power_mw: Option<u32>,
    /// SM clock in MHz.
    pub sm_clock_mhz: Option<u32>,
    /// Utilisation in percent.
    pub util_pct: Option<u32>,
    /// The job's energy on this GPU so far, in mJ.
    pub energy_mj: f64,
}

/// How a meter measured energy. Stored meters (JSON) name it `counter`, `power` or
/// `counter-and-power`; reports, metrics and [`std::str::FromStr`] say `counter+power`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, EnumString, IntoStaticStr)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Method {
    /// Differences of the GPU's cumulative energy counter only: exact.
    Counter,
    /// Integrated sampled power only: the GPU has no energy counter.
    Power,
    /// Mostly the counter, with at least one gap (counter reset) estimated from power.
    #[strum(serialize = "counter+power")]
    CounterAndPower,
}

impl Method {
    /// The name used in the store, reports and metrics.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The method of a job whose GPUs were measured with `a` and `b`.
    pub fn combine(a: Method, b: Method) -> Method {
        if a == b { a } else { Method::CounterAndPower }
    }
}

/// Something that happened to a GPU during a job, recorded with the job: what a meter saw
/// (`counter-reset`, `gpu-lost`, `gpu-back`; reports name them `counter-reset`, `lost`, `back`,
/// `<&str>::from`), and each setting wattson gave the GPU (`setting`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, IntoStaticStr)]
#[serde(tag = "event", rename_all = "kebab-case")]
pub enum MeterEvent {
    /// wattson set the GPU for the job: `setting`, or back to the GPU's defaults (`None`).
    #[strum(serialize = "setting")]
    Setting { t_ns: i64, setting: Option<crate::gpu::GpuSetting> },
    /// The counter went backwards (driver reload); the gap was estimated from power.
    #[strum(serialize = "counter-reset")]
    CounterReset { t_ns: i64, estimated_gap_mj: f64 },
    /// The GPU stopped answering; energy is counted up to the last good reading.
    #[strum(serialize = "lost")]
    GpuLost { t_ns: i64 },
    /// The GPU answered again after being lost.
    #[strum(serialize = "back")]
    GpuBack { t_ns: i64 },
}

/// The running energy account of one GPU within one job. Serializable, so the store can
/// persist it at every sample and the daemon can resume it after a restart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuMeter {
    /// Method so far.
    pub method: Method,
    /// Energy accumulated since the job began, in mJ.
    pub energy_mj: f64,
    /// Time of the first reading (job begin on this GPU).
    pub begin_ns: i64,
    /// Counter value at the first reading, if the GPU has a counter.
    pub begin_counter_mj: Option<u64>,
    /// Last good reading.
    pub last: GpuReading,
    /// Highest power seen, in mW.
    pub peak_power_mw: u32,
    /// Sum of SM clock readings (MHz) and how many there were.
    pub clock_sum_mhz: u64,
    /// Number of readings with an SM clock.
    pub clock_samples: u32,
    /// Sum of utilisation readings (%) and how many there were.
    pub util_sum_pct: u64,
    /// Number of readings with a utilisation.
    pub util_samples: u32,
    /// True while the GPU does not answer.
    pub lost: bool,
    /// What happened, in order.
    pub events: Vec<MeterEvent>,
    /// How the GPU's energy was divided with other jobs on it; `None` while the job had the
    /// GPU to itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub split: Option<crate::apportion::Split>,
    /// The job's own SM activity on a GPU it may share, alone and beside others; `None` for
    /// a GPU the job holds whole, or before its processes were seen on the SMs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm: Option<crate::apportion::SmActivity>,
    /// The GPU's MIG instances the job holds (empty for a whole GPU or a share of one): their
    /// compute slices weigh its part of the GPU's energy ([`crate::apportion::mig_weights`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig: Vec<crate::gpu::MigInstance>,
}

/// The GPU's energy over one interval between two readings, before it is divided among the
/// jobs on the GPU.
#[derive(Debug, Clone, PartialEq)]
pub struct Interval {
    /// Energy over the interval, mJ.
    pub mj: f64,
    /// The same, when it is a whole difference of the counter (then exactly divisible).
    pub counter_mj: Option<u64>,
    /// The method that measured it.
    pub method: Method,
    /// A counter reset seen in the interval.
    pub reset: Option<MeterEvent>,
}

impl GpuMeter {
    /// Starts a meter at the job's first reading.
    pub fn begin(first: GpuReading) -> GpuMeter {
        let mut meter = GpuMeter {
            method: if first.energy_mj.is_some() { Method::Counter } else { Method::Power },
            energy_mj: 0.0,
            begin_ns: first.t_ns,
            begin_counter_mj: first.energy_mj,
            last: first,
            peak_power_mw: 0,
            clock_sum_mhz: 0,
            clock_samples: 0,
            util_sum_pct: 0,
            util_samples: 0,
            lost: false,
            events: Vec::new(),
            split: None,
            sm: None,
            mig: Vec::new(),
        };
        meter.observe_gauges(&first);
        meter
    }

    /// Starts a meter for a GPU that could not be read when the job began.
    pub fn begin_lost(t_ns: i64) -> GpuMeter {
        let mut meter = GpuMeter::begin(GpuReading { t_ns, ..GpuReading::default() });
        meter.lost = true;
        meter.events.push(MeterEvent::GpuLost { t_ns });
        meter
    }

    /// Advances the meter with a new reading. Readings older than the last one are ignored.
    pub fn advance(&mut self, now: GpuReading) {
        if let Some(interval) = self.interval_to(&now) {
            let mj = interval.mj;
            self.advance_by(now, &interval, mj);
        }
    }

    /// The GPU's energy from the last reading to `now`; `None` for a reading to ignore (older
    /// than the last one, or late: see below).
    pub fn interval_to(&self, now: &GpuReading) -> Option<Interval> {
        // A counter that went back, but not below half its last value, did not restart from
        // zero (a restart leaves what the GPU drew since, far below a running counter): it is
        // an earlier reading with a later time (a reader held between reading the counter and
        // taking the time, while another read the same GPU). Ignored, as any late reading.
        if matches!((self.last.energy_mj, now.energy_mj), (Some(p), Some(c)) if c < p && c >= p / 2) {
            return None;
        }
        if now.t_ns < self.last.t_ns {
            // An older reading delivered late carries an older counter: ignored. A counter that
            // moved on under an earlier time means the wall clock was stepped back: the
            // counter, which runs on the GPU's own time, still counts.
            let counter_moved = matches!((self.last.energy_mj, now.energy_mj), (Some(p), Some(c)) if c > p);
            if !counter_moved {
                return None;
            }
        }
        let dt_s = (now.t_ns - self.last.t_ns).max(0) as f64 / 1e9;
        Some(match (self.last.energy_mj, now.energy_mj) {
            (Some(prev), Some(cur)) if cur >= prev => Interval {
                mj: (cur - prev) as f64,
                counter_mj: Some(cur - prev),
                method: Method::Counter,
                reset: None,
            },
            (Some(_), Some(cur)) => {
                // The counter restarted from zero somewhere in the gap: `cur` was consumed
                // since then; the part before the reset is estimated from power.
                let mean_w = mean_power_w(self.last.power_mw, now.power_mw);
                let gap_mj = (mean_w * dt_s * 1000.0 - cur as f64).max(0.0);
                Interval {
                    mj: cur as f64 + gap_mj,
                    counter_mj: None,
                    method: Method::CounterAndPower,
                    reset: Some(MeterEvent::CounterReset { t_ns: now.t_ns, estimated_gap_mj: gap_mj }),
                }
            }
            // No counter on one side: integrate power over the interval.
            _ => Interval {
                mj: mean_power_w(self.last.power_mw, now.power_mw) * dt_s * 1000.0,
                counter_mj: None,
                method: if self.method == Method::Power { Method::Power } else { Method::CounterAndPower },
                reset: None,
            },
        })
    }

    /// Advances the meter to `now` over `interval` (from [`GpuMeter::interval_to`]), counting
    /// `part_mj` of it: the whole, or this job's part of a GPU it shares.
    pub fn advance_by(&mut self, now: GpuReading, interval: &Interval, part_mj: f64) {
        if self.lost {
            self.lost = false;
            self.events.push(MeterEvent::GpuBack { t_ns: now.t_ns });
        }
        self.energy_mj += part_mj;
        if interval.method != Method::Counter && self.method == Method::Counter {
            self.method = Method::CounterAndPower;
        }
        if let Some(event) = &interval.reset {
            self.events.push(event.clone());
        }
        self.observe_gauges(&now);
        self.last = now;
    }

    /// Records that the GPU did not answer at `t_ns`. The energy stays at the last good
    /// reading; if the GPU comes back with its counter, the counter covers the gap.
    pub fn mark_lost(&mut self, t_ns: i64) {
        if !self.lost {
            self.lost = true;
            self.events.push(MeterEvent::GpuLost { t_ns });
        }
    }

    /// Mean SM clock over the job's readings, in MHz.
    pub fn avg_sm_clock_mhz(&self) -> Option<f64> {
        (self.clock_samples > 0).then(|| self.clock_sum_mhz as f64 / self.clock_samples as f64)
    }

    /// Mean utilisation over the job's readings, in percent.
    pub fn avg_util_pct(&self) -> Option<f64> {
        (self.util_samples > 0).then(|| self.util_sum_pct as f64 / self.util_samples as f64)
    }

    fn observe_gauges(&mut self, r: &GpuReading) {
        if let Some(p) = r.power_mw {
            self.peak_power_mw = self.peak_power_mw.max(p);
        }
        if let Some(c) = r.sm_clock_mhz {
            self.clock_sum_mhz += u64::from(c);
            self.clock_samples += 1;
        }
        if let Some(u) = r.util_pct {
            self.util_sum_pct += u64::from(u);
            self.util_samples += 1;
        }
    }
}

/// Mean of two power readings in W, using whichever exists.
fn mean_power_w(a: Option<u32>, b: Option<u32>) -> f64 {
    match (a, b) {
        (Some(a), Some(b)) => (f64::from(a) + f64::from(b)) / 2000.0,
        (Some(x), None) | (None, Some(x)) => f64::from(x) / 1000.0,
        (None, None) => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(t_s: f64, counter: Option<u64>, power_w: u32) -> GpuReading {
        GpuReading {
            t_ns: (t_s * 1e9) as i64,
            energy_mj: counter,
            power_mw: Some(power_w * 1000),
            sm_clock_mhz: Some(1500),
            util_pct: Some(50),
        }
    }

    #[test]
    fn counter_deltas_sum_exactly() {
        let mut m = GpuMeter::begin(r(0.0, Some(1_000_000), 300));
        m.advance(r(1.0, Some(1_250_000), 200));
        m.advance(r(2.0, Some(1_700_123), 400));
        assert_eq!(m.energy_mj, 700_123.0);
        assert_eq!(m.method, Method::Counter);
        assert_eq!(m.peak_power_mw, 400_000);
        assert_eq!(m.avg_sm_clock_mhz(), Some(1500.0));
    }

    #[test]
    fn a_long_gap_between_readings_is_still_exact() {
        // A daemon restart: the counter kept counting; the next delta covers the gap.
        let mut m = GpuMeter::begin(r(0.0, Some(5_000), 300));
        m.advance(r(600.0, Some(180_005_000), 300));
        assert_eq!(m.energy_mj, 180_000_000.0);
    }

    #[test]
    fn counter_reset_counts_new_counter_and_estimates_gap() {
        let mut m = GpuMeter::begin(r(0.0, Some(9_000_000), 100));
        // Reset happened; by t=2 the counter is back at 50 J. Mean power 100 W over 2 s = 200 J.
        m.advance(r(2.0, Some(50_000), 100));
        assert_eq!(m.method, Method::CounterAndPower);
        assert!((m.energy_mj - 200_000.0).abs() < 1e-6, "{}", m.energy_mj);
        assert!(matches!(m.events[0], MeterEvent::CounterReset { .. }));
        m.advance(r(3.0, Some(150_000), 100));
        assert!((m.energy_mj - 300_000.0).abs() < 1e-6);
    }

    #[test]
    fn a_counter_a_little_behind_under_a_later_time_is_a_late_reading_not_a_reset() {
        // Two readers of one GPU: one read the counter first but was held before taking its
        // time, so its reading comes with a later time and a slightly lower counter. Taking it
        // for a reset counted the whole counter (2 GJ) into the job.
        let mut m = GpuMeter::begin(r(0.0, Some(2_004_002_039), 220));
        m.advance(r(0.008, Some(2_004_001_500), 220));
        assert_eq!(m.energy_mj, 0.0);
        assert!(m.events.is_empty(), "{:?}", m.events);
        m.advance(r(1.0, Some(2_004_222_039), 220));
        assert_eq!(m.energy_mj, 220_000.0);
        assert_eq!(m.method, Method::Counter);
    }

    #[test]
    fn power_integration_without_counter() {
        let mut m = GpuMeter::begin(r(0.0, None, 100));
        m.advance(r(1.0, None, 300));
        m.advance(r(3.0, None, 300));
        assert_eq!(m.method, Method::Power);
        assert!((m.energy_mj - (200_000.0 + 600_000.0)).abs() < 1e-6);
    }

    #[test]
    fn lost_gpu_keeps_energy_and_counter_covers_the_gap_when_back() {
        let mut m = GpuMeter::begin(r(0.0, Some(0), 100));
        m.advance(r(1.0, Some(100_000), 100));
        m.mark_lost(2_000_000_000);
        m.mark_lost(3_000_000_000);
        assert!(m.lost);
        assert_eq!(m.events.len(), 1);
        assert_eq!(m.energy_mj, 100_000.0);
        m.advance(r(4.0, Some(400_000), 100));
        assert!(!m.lost);
        assert_eq!(m.energy_mj, 400_000.0);
        assert_eq!(m.method, Method::Counter);
    }

    #[test]
    fn stale_readings_are_ignored() {
        let mut m = GpuMeter::begin(r(5.0, Some(1000), 100));
        m.advance(r(4.0, Some(0), 100));
        assert_eq!(m.energy_mj, 0.0);
        assert!(m.events.is_empty());
    }

    #[test]
    fn meter_round_trips_through_json() {
        let mut m = GpuMeter::begin(r(0.0, Some(7), 100));
        m.mark_lost(1);
        let back: GpuMeter = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
        assert_eq!(back, m);
    }

    #[test]
    fn method_names_differ_between_reports_and_stored_meters_as_before() {
        let all = [
            (Method::Counter, "counter", "counter"),
            (Method::Power, "power", "power"),
            (Method::CounterAndPower, "counter+power", "counter-and-power"),
        ];
        for (method, report, stored) in all {
            assert_eq!(method.as_str(), report);
            assert_eq!(report.parse::<Method>(), Ok(method));
            assert_eq!(serde_json::to_string(&method).unwrap(), format!("{stored:?}"));
            assert_eq!(serde_json::from_str::<Method>(&format!("{stored:?}")).unwrap(), method);
        }
        assert!("counter-and-power".parse::<Method>().is_err());
    }

    #[test]
    fn events_have_a_stored_name_and_a_short_report_name() {
        let events = [
            (MeterEvent::CounterReset { t_ns: 1, estimated_gap_mj: 2.0 }, "counter-reset", "counter-reset"),
            (MeterEvent::GpuLost { t_ns: 1 }, "gpu-lost", "lost"),
            (MeterEvent::GpuBack { t_ns: 1 }, "gpu-back", "back"),
        ];
        for (event, stored, report) in events {
            assert_eq!(serde_json::to_value(&event).unwrap()["event"], stored);
            assert_eq!(<&str>::from(&event), report);
        }
    }
}
