//! Waits users chose apart from waits a policy imposes.
//!
//! A job whose user asked for deferral (`--energy-defer=6h`, a window `W`) waits by its own
//! choice for up to `W` after submission. The plain wait (`start − submit`) counts that choice
//! against the policy; the yardsticks here do not:
//!
//! - **imposed wait** of every job: `max(0, wait − W)` (`W` = 0 for a job that asked for none),
//!   the wait the policy and the cluster imposed beyond what the user chose;
//! - **lateness** of a deferrable job: the same `max(0, wait − W)`, the time it started past
//!   the end of its window, reported over the deferrable jobs alone with how many were late;
//! - the deferrable jobs' plain waits, reported apart.
//!
//! The plain waits from submission are reported beside these, never replaced.

use serde::Serialize;

use super::metrics::nearest_rank;

/// The wait a policy imposed on a job that waited `wait` s after asking for a deferral window
/// of `window` s (0: none): the wait beyond the window, never below 0.
pub fn imposed(wait: f64, window: f64) -> f64 {
    (wait - window).max(0.0)
}

/// The wait yardsticks of one run, gathered job by job.
#[derive(Debug, Clone, Default)]
pub struct Waits {
    /// Each job's imposed wait (s).
    pub imposed: Vec<f64>,
    /// Each deferrable job's plain wait from submission (s).
    pub deferrable: Vec<f64>,
    /// Each deferrable job's lateness beyond its window (s).
    pub lateness: Vec<f64>,
}

impl Waits {
    /// Adds a job that waited `wait` s from submission with a deferral window of `window` s.
    pub fn push(&mut self, wait: f64, window: f64) {
        let over = imposed(wait, window);
        self.imposed.push(over);
        if window > 0.0 {
            self.deferrable.push(wait);
            self.lateness.push(over);
        }
    }

    /// The figures a summary reports.
    pub fn figures(&self) -> WaitFigures {
        let mut imposed = self.imposed.clone();
        imposed.sort_by(f64::total_cmp);
        WaitFigures {
            imposed_wait_mean_s: mean(&self.imposed),
            imposed_wait_p99_s: if imposed.is_empty() { 0.0 } else { nearest_rank(&imposed, 0.99) },
            deferrable_jobs: self.deferrable.len(),
            deferrable_wait_mean_s: mean(&self.deferrable),
            late_jobs: self.lateness.iter().filter(|&&l| l > 0.0).count(),
            lateness_mean_s: mean(&self.lateness),
            lateness_max_s: self.lateness.iter().copied().fold(0.0, f64::max),
        }
    }
}

/// The wait yardsticks a summary reports (the means of an empty set are 0: nothing waited).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct WaitFigures {
    /// Mean imposed wait over every job (s).
    pub imposed_wait_mean_s: f64,
    /// 99th percentile imposed wait, nearest rank (s).
    pub imposed_wait_p99_s: f64,
    /// Jobs whose users asked for a deferral window.
    pub deferrable_jobs: usize,
    /// Mean plain wait from submission of the deferrable jobs (s).
    pub deferrable_wait_mean_s: f64,
    /// Deferrable jobs that started after their window closed.
    pub late_jobs: usize,
    /// Mean lateness beyond the window over the deferrable jobs (s).
    pub lateness_mean_s: f64,
    /// Largest lateness beyond the window (s).
    pub lateness_max_s: f64,
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() { 0.0 } else { v.iter().sum::<f64>() / v.len() as f64 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_a_user_chose_is_not_counted_against_the_policy() {
        assert_eq!(imposed(5000.0, 0.0), 5000.0);
        assert_eq!(imposed(3000.0, 7200.0), 0.0);
        assert_eq!(imposed(9000.0, 7200.0), 1800.0);
        assert_eq!(imposed(0.0, 0.0), 0.0);
    }

    #[test]
    fn figures_by_hand() {
        // Jobs (wait, window): two plain, three deferrable (one started within its 2 h window,
        // one 1800 s late, one 600 s late).
        let mut w = Waits::default();
        for (wait, window) in
            [(100.0, 0.0), (300.0, 0.0), (3600.0, 7200.0), (9000.0, 7200.0), (4200.0, 3600.0)]
        {
            w.push(wait, window);
        }
        let f = w.figures();
        // Imposed: 100, 300, 0, 1800, 600 -> mean 2800 / 5 = 560; p99 = the largest, 1800.
        assert_eq!(f.imposed_wait_mean_s, 560.0);
        assert_eq!(f.imposed_wait_p99_s, 1800.0);
        assert_eq!(f.deferrable_jobs, 3);
        // Plain waits of the deferrable: (3600 + 9000 + 4200) / 3 = 5600.
        assert_eq!(f.deferrable_wait_mean_s, 5600.0);
        assert_eq!(f.late_jobs, 2);
        // Lateness 0, 1800, 600 -> mean 800, max 1800.
        assert_eq!(f.lateness_mean_s, 800.0);
        assert_eq!(f.lateness_max_s, 1800.0);
    }

    #[test]
    fn no_deferrable_job_means_no_lateness_and_imposed_equals_plain() {
        let mut w = Waits::default();
        for wait in [10.0, 20.0, 30.0] {
            w.push(wait, 0.0);
        }
        let f = w.figures();
        assert_eq!((f.imposed_wait_mean_s, f.imposed_wait_p99_s), (20.0, 30.0));
        assert_eq!((f.deferrable_jobs, f.late_jobs, f.lateness_mean_s, f.lateness_max_s), (0, 0, 0.0, 0.0));
        assert_eq!(Waits::default().figures(), WaitFigures::default());
    }
}
