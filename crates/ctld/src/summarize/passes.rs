//! What the controller's summary passes remember from loop to loop. Each pass asks Slurm only
//! about the jobs that ended since the last one (with [`SLACK`] for accounting's delay); jobs
//! still waiting for a node, or whose write failed, stay in memory rather than being listed
//! again, and jobs already written are never looked at once they are older than the slack. So
//! a pass costs what ended since the last loop, whatever `[ctld] summary_wait` is and however
//! many jobs were summarized before.

use std::collections::BTreeMap;
use std::time::Duration;

use tracing::warn;

use super::{Ended, EndedError, Written};

/// How much earlier than the last pass each pass starts looking: slurmctld hands a job's end
/// to slurmdbd a moment after it happens, so `sacct` may show the job a little late.
pub const SLACK: Duration = Duration::from_secs(60);

/// How far back the first pass looks (jobs that ended while the controller was down), and how
/// long a job whose summary cannot be written is kept and retried.
pub const CATCH_UP: Duration = Duration::from_secs(86_400);

/// The summary passes' memory, owned by the controller's loop.
#[derive(Debug, Default)]
pub struct Passes {
    /// When the last pass listed the ended jobs, s since the Unix epoch (`None`: no pass yet).
    listed_at: Option<i64>,
    /// Jobs listed and not written yet, by id.
    pending: BTreeMap<u32, Ended>,
    /// Jobs written, with their end, while a later pass may still list them (`sacct` shows
    /// the new comment a moment after it is written).
    written: BTreeMap<u32, i64>,
}

impl Passes {
    /// How far back the pass at `now` (s since the Unix epoch) asks Slurm to look.
    pub fn lookback(&self, now: i64) -> Duration {
        match self.listed_at {
            None => CATCH_UP,
            Some(at) => Duration::from_secs(u64::try_from(now - at).unwrap_or(0)) + SLACK,
        }
    }

    /// Jobs kept for a later pass.
    pub fn pending(&self) -> usize {
        self.pending.len()
    }

    /// One pass at `now`: `list` gives the jobs that ended within the lookback it is handed
    /// and hold no summary; `write` writes what it can of the jobs not written yet.
    pub fn pass(
        &mut self,
        now: i64,
        list: impl FnOnce(Duration) -> Result<Vec<Ended>, EndedError>,
        write: impl FnOnce(&[Ended]) -> Written,
    ) -> Result<Written, EndedError> {
        let ended = list(self.lookback(now))?;
        self.listed_at = Some(now);
        for job in ended.into_iter().filter(|job| !self.written.contains_key(&job.job)) {
            self.pending.insert(job.job, job);
        }
        let jobs: Vec<Ended> = self.pending.values().take(super::PER_LOOP).cloned().collect();
        let done = write(&jobs);
        for (job, _) in &done.written {
            if let Some(ended) = self.pending.remove(job) {
                self.written.insert(*job, ended.end);
            }
        }
        // The next pass lists jobs that ended after `now - SLACK`: older ones cannot come back.
        let slack = SLACK.as_secs() as i64;
        self.written.retain(|_, end| *end >= now - 2 * slack);
        let given_up = now - CATCH_UP.as_secs() as i64;
        self.pending.retain(|job, ended| {
            let keep = ended.end >= given_up;
            if !keep {
                warn!(job, "no summary written within a day of the job's end; given up");
            }
            keep
        });
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(job: u32, end: i64) -> Ended {
        Ended { job, cluster: "c".into(), nodes: vec!["n1".into()], end, comment: String::new() }
    }

    /// Slurm's accounting as the passes see it: jobs ending one per second from `t0`, each
    /// summarized (and so no longer listed) once written; jobs in `stuck` wait for a node.
    /// `scanned` counts the jobs each listing reads, summarized or not.
    struct Cluster {
        t0: i64,
        summarized: BTreeMap<u32, i64>,
        stuck: Vec<u32>,
        scanned: Vec<i64>,
    }

    impl Cluster {
        fn list(&mut self, now: i64, lookback: Duration) -> Vec<Ended> {
            let from = now - lookback.as_secs() as i64;
            self.scanned.push(now - from.max(self.t0) + 1);
            (from.max(self.t0)..=now)
                .map(|end| ended(u32::try_from(end - self.t0).unwrap(), end))
                .filter(|job| !self.summarized.contains_key(&job.job))
                .collect()
        }

        fn write(&mut self, jobs: &[Ended]) -> Written {
            let mut done = Written::default();
            for job in jobs.iter().take(super::super::PER_LOOP) {
                if self.stuck.contains(&job.job) {
                    done.waiting.push((job.job, "waiting for n1".into()));
                } else {
                    self.summarized.insert(job.job, job.end);
                    done.written.push((job.job, Vec::new()));
                }
            }
            done
        }
    }

    #[test]
    fn each_pass_lists_what_ended_since_the_last_and_every_job_is_written_once() {
        let t0 = 1_800_000_000;
        let cluster = Cluster { t0, summarized: BTreeMap::new(), stuck: vec![5], scanned: Vec::new() };
        // Both of a pass's calls reach the same accounting, one after the other.
        let cluster = std::cell::RefCell::new(cluster);
        let mut passes = Passes::default();
        let mut written = Vec::new();
        // An hour of passes every 10 s, one job ending per second.
        for k in 0..360 {
            let now = t0 + 10 * k;
            if k == 100 {
                cluster.borrow_mut().stuck.clear();
            }
            let pass = passes
                .pass(
                    now,
                    |lookback| Ok(cluster.borrow_mut().list(now, lookback)),
                    |jobs| cluster.borrow_mut().write(jobs),
                )
                .unwrap();
            written.extend(pass.written.into_iter().map(|(job, _)| job));
        }
        // After the first, each listing reads what ended since the last and the slack's jobs.
        let most = *cluster.borrow().scanned[1..].iter().max().unwrap();
        assert!(most <= 10 + SLACK.as_secs() as i64 + 1, "a listing read {most} jobs");
        let mut once = written.clone();
        once.sort_unstable();
        once.dedup();
        assert_eq!(once.len(), written.len(), "a job written twice");
        assert_eq!(written.len(), 3591, "every job that ended before the last pass");
        assert!(written.contains(&5), "the job that waited for its node, kept in memory");
        assert_eq!(passes.pending(), 0);
    }
}
