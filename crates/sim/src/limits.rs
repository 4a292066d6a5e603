//! Time limits: all that Slurm, and so every policy, knows of a job's length.
//!
//! A trace may give each job's limit (`time_limit`). Where it does not, the limit is drawn from
//! a model of how users ask for time: the run time times a factor drawn uniformly from
//! `[1, max_factor]` (Mu'alem and Feitelson's "f-model" of overestimates), rounded up to the
//! next of a few round values (`values_h`; users pick from a handful of modal values, Tsafrir,
//! Etsion and Feitelson), and above the last value to a whole multiple of it. The draws are
//! seeded and independent of the hint draws. `perfect` makes every limit the true run time:
//! the perfect-knowledge what-if, labelled as such wherever it is reported.

use rand_chacha::ChaCha8Rng;
use rand_core::{Rng, SeedableRng};
use serde::Deserialize;

use super::trace::TraceJob;

/// The `[limits]` table of the cluster file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitModel {
    /// The what-if: every limit is the job's true run time, whatever the trace says.
    #[serde(default)]
    pub perfect: bool,
    /// The largest factor a drawn limit overstates the run time by (at least 1).
    #[serde(default = "default_factor")]
    pub max_factor: f64,
    /// The round values (h) a drawn limit is rounded up to, increasing.
    #[serde(default = "default_values")]
    pub values_h: Vec<f64>,
}

fn default_factor() -> f64 {
    3.0
}

fn default_values() -> Vec<f64> {
    vec![1.0, 4.0, 12.0, 24.0, 72.0]
}

impl Default for LimitModel {
    fn default() -> Self {
        LimitModel { perfect: false, max_factor: default_factor(), values_h: default_values() }
    }
}

/// Stream constant that keeps the limit draws apart from the hint draws of the same seed.
const STREAM: u64 = 0x6c69_6d69_7473_0001;

impl LimitModel {
    /// What the policies know of run times, as every report labels it.
    pub fn label(&self) -> &'static str {
        if self.perfect { "perfect knowledge (what-if)" } else { "time limits" }
    }

    /// Why the table is not usable, if it is not.
    pub fn check(&self) -> Result<(), String> {
        if !(self.max_factor.is_finite() && self.max_factor >= 1.0) {
            return Err(format!("limits.max_factor = {}: allowed a number >= 1", self.max_factor));
        }
        let increasing = self.values_h.windows(2).all(|w| w[0] < w[1]);
        if self.values_h.is_empty() || !increasing || !self.values_h.iter().all(|v| v.is_finite() && *v > 0.0)
        {
            return Err(format!(
                "limits.values_h = {:?}: allowed a non-empty list of hours above 0, increasing",
                self.values_h
            ));
        }
        Ok(())
    }

    /// `run_s` times `factor`, rounded up to the next round value (s).
    pub fn round_up(&self, run_s: f64, factor: f64) -> f64 {
        let want_h = run_s * factor / 3600.0;
        let last = self.values_h[self.values_h.len() - 1];
        let h = self
            .values_h
            .iter()
            .copied()
            .find(|&v| v >= want_h)
            .unwrap_or_else(|| (want_h / last).ceil() * last);
        h * 3600.0
    }

    /// Each job's time limit (s), in trace order: the trace's own where it gives one, else a
    /// draw (one draw per job, so a given limit does not shift the others).
    pub fn limits(&self, trace: &[TraceJob], seed: u64) -> Vec<f64> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed ^ STREAM);
        trace
            .iter()
            .map(|t| {
                let u = (rng.next_u64() >> 11) as f64 / (1u64 << 53) as f64;
                if self.perfect {
                    t.duration
                } else {
                    t.time_limit
                        .unwrap_or_else(|| self.round_up(t.duration, 1.0 + u * (self.max_factor - 1.0)))
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(duration: f64, time_limit: Option<f64>) -> TraceJob {
        TraceJob {
            id: String::new(),
            submit: 0.0,
            gpus: 1,
            duration,
            tag: String::new(),
            batch: None,
            time_limit,
            gpu_types: Vec::new(),
            gpu_fraction: 1.0,
            bound: None,
            defer_window: None,
        }
    }

    #[test]
    fn limits_round_up_to_the_values_and_never_understate_the_run() {
        let m = LimitModel::default();
        assert_eq!(m.round_up(600.0, 1.0), 3600.0);
        assert_eq!(m.round_up(3600.0, 1.0), 3600.0);
        assert_eq!(m.round_up(3601.0, 1.0), 4.0 * 3600.0);
        assert_eq!(m.round_up(2.0 * 3600.0, 3.0), 12.0 * 3600.0);
        assert_eq!(m.round_up(80.0 * 3600.0, 1.0), 144.0 * 3600.0, "above 72 h: whole multiples of 72 h");
        let trace: Vec<TraceJob> = (1..2000).map(|k| job(f64::from(k) * 97.0, None)).collect();
        let a = m.limits(&trace, 3);
        assert_eq!(a, m.limits(&trace, 3), "seeded");
        assert_ne!(a, m.limits(&trace, 4));
        let hours = [1.0, 4.0, 12.0, 24.0, 72.0];
        for (t, l) in trace.iter().zip(&a) {
            assert!(*l >= t.duration && *l <= m.round_up(t.duration, 3.0));
            let multiple = *l > 72.0 * 3600.0 && (*l / (72.0 * 3600.0)).fract() == 0.0;
            assert!(multiple || hours.iter().any(|h| h * 3600.0 == *l), "{l} is a round value");
        }
        // Overstatement is the rule: most limits are well above the run.
        let over = trace.iter().zip(&a).filter(|(t, l)| **l > 1.5 * t.duration).count();
        assert!(over > trace.len() / 2, "{over}");
    }

    #[test]
    fn a_trace_limit_is_kept_and_perfect_knowledge_is_the_run_time() {
        let trace = vec![job(100.0, Some(50.0)), job(100.0, None)];
        let m = LimitModel::default();
        assert_eq!(m.limits(&trace, 1), vec![50.0, 3600.0]);
        let p = LimitModel { perfect: true, ..LimitModel::default() };
        assert_eq!(p.limits(&trace, 1), vec![100.0, 100.0]);
        assert!(LimitModel { max_factor: 0.5, ..LimitModel::default() }.check().is_err());
        assert!(LimitModel { values_h: vec![4.0, 1.0], ..LimitModel::default() }.check().is_err());
        assert!(LimitModel::default().check().is_ok());
    }
}
