//! The wait-cost bound (`max_wait_cost`): how much wattson's DVFS lengthens the queue's waits,
//! as the policy observes it, and the tighter policy it falls back to while that passes the
//! site's bound; and each running job's lag, which `max_lag_s` caps ([`WaitCost::lagging`]).
//!
//! A job running at slowdown `s` does `1 / (1 + s)` of a second's work each second: it falls
//! behind by `s / (1 + s)` of each second ([`WaitCost::observe`] integrates that per running
//! job, from the levels it sees). While the queue's head waits for GPUs that running jobs hold
//! (the free GPUs of every node, powered or not, would not hold it), it starts as late as the
//! latest of the jobs it waits for (those that end first at their time limits) has fallen
//! behind; every job behind it is pushed back as far, so the queue's delay (`delay_s`) is the
//! largest such lag since the queue formed, and ends with it. A job that starts late by it ends
//! that much later too. A job that leaves the queue after waiting `w` was delayed by
//! `min(w, delay_s)`. The ratio of that added wait to the wait without it, decayed with a
//! half-life of [`HALF_LIFE_S`], grades DVFS against the bound ([`guarded`]): below it, a job
//! is slowed only while at least the ratio over the bound of the cluster's GPUs is
//! unallocated (none needed with no wait added, all of them at the bound), so DVFS gives way
//! as the observed cost nears the bound, and comes back as it decays ([`WaitCost::gate`]);
//! past it the guard is on ([`WaitCost::guarding`]): no job is slowed, and every job is raised
//! to full speed.

use std::collections::BTreeMap;

use super::{ClusterPolicy, Running, Snapshot, TunedPolicy};

/// Half-life of the observations (s): a week, as long as slowed jobs take to show in the queue.
pub const HALF_LIFE_S: f64 = 7.0 * 86400.0;

/// What the queue waited and how much of it wattson's DVFS added, as the policy observed it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct WaitCost {
    /// Job-seconds of queueing wait of the jobs that left the queue, decayed.
    pub waited_s: f64,
    /// Of them, the job-seconds slowed jobs added, decayed.
    pub added_s: f64,
    /// How far slowed jobs have pushed the current queue's starts back (s); 0 with no queue.
    pub delay_s: f64,
    /// When last observed.
    seen_at: Option<f64>,
    /// Running jobs' lost work (s), by id.
    lost: BTreeMap<u32, f64>,
    /// Queued jobs' wait so far (s), by id.
    waiting: BTreeMap<u32, f64>,
}

impl WaitCost {
    /// Counts the time since the last observation at `s`'s levels and queue (what `s` shows
    /// held since then).
    pub fn observe(&mut self, s: &Snapshot) {
        let dt = self.seen_at.map_or(0.0, |t| (s.now - t).max(0.0));
        self.seen_at = Some(s.now);
        let decay = 0.5f64.powf(dt / HALF_LIFE_S);
        self.waited_s *= decay;
        self.added_s *= decay;

        // Jobs gone from the queue started (or left it): charge their wait. A job that
        // started late by the queue's delay ends that much later too.
        let queued: BTreeMap<u32, f64> =
            s.queued.iter().map(|q| (q.job.id, (s.now - q.eligible).max(0.0))).collect();
        for (&id, &w) in &self.waiting {
            if !queued.contains_key(&id) {
                let added = w.min(self.delay_s);
                self.waited_s += w;
                self.added_s += added;
                self.lost.insert(id, added);
            }
        }

        // Each running job falls behind at its level's slowdown (pessimistic, at most its
        // bound) over the interval, or over its run if it started within it.
        let mut lost = BTreeMap::new();
        for r in s.running {
            let before = self.lost.get(&r.job.id).copied().unwrap_or(0.0);
            lost.insert(r.job.id, before + lag_rate(s, r) * dt.min(r.elapsed_s.max(0.0)));
        }
        self.lost = lost;

        self.delay_s = match self.head_delay(s) {
            // Every job behind the head is pushed back as far as the head.
            Some(d) => self.delay_s.max(d),
            None => 0.0,
        };
        self.waiting = queued;
    }

    /// The running jobs that have fallen `cap` or more behind their full-speed pace, by id
    /// (sorted), and when the next of the others falls that far at its current level (`None`:
    /// no other is slowed). A job that started late by the queue's delay counts it: it ends
    /// that much later too.
    pub fn lagging(&self, s: &Snapshot, cap: f64) -> (Vec<u32>, Option<f64>) {
        let mut over = Vec::new();
        let mut next: Option<f64> = None;
        for r in s.running {
            let lost = self.lost.get(&r.job.id).copied().unwrap_or(0.0);
            let rate = lag_rate(s, r);
            // Within a microsecond counts: woken when it gets there, it may fall short by a
            // rounding error, and must not ask to be woken again at once.
            if lost + LAG_SLACK_S >= cap {
                over.push(r.job.id);
            } else if rate > 0.0 {
                let at = s.now + (cap - lost) / rate;
                next = Some(next.map_or(at, |n| n.min(at)));
            }
        }
        over.sort_unstable();
        (over, next)
    }

    /// How long the running jobs the queue's head waits for (those that end first at their
    /// time limits, until enough GPUs are free on the nodes it may use, powered or not) have
    /// fallen behind:
    /// the latest of them. `None` when no job waits for a running one.
    fn head_delay(&self, s: &Snapshot) -> Option<f64> {
        let head = s.queued.first()?;
        // Only the nodes the head may use count ([`Snapshot::job_nodes`]), and only the
        // running jobs on them (a running job not listed frees GPUs it can use).
        let usable = s.job_nodes.get(&head.job.id);
        let on = |i: u32| usable.is_none_or(|u| u.binary_search(&i).is_ok());
        let mut free: u64 =
            (0u32..).zip(s.nodes).filter(|(i, _)| on(*i)).map(|(_, n)| u64::from(n.free_gpus)).sum();
        if free >= u64::from(head.job.gpus) {
            return None;
        }
        let mut ends: Vec<(f64, &Running)> = s
            .running
            .iter()
            .filter(|r| s.job_nodes.get(&r.job.id).is_none_or(|held| held.iter().any(|&i| on(i))))
            .map(|r| ((1.0 - r.progress) * r.job.work_s, r))
            .collect();
        ends.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.job.id.cmp(&b.1.job.id)));
        let mut delay: f64 = 0.0;
        for (_, r) in ends {
            delay = delay.max(self.lost.get(&r.job.id).copied().unwrap_or(0.0));
            free += u64::from(r.job.gpus);
            if free >= u64::from(head.job.gpus) {
                break;
            }
        }
        Some(delay)
    }

    /// The observed share by which DVFS lengthened the waits: `added / (waited − added)`, the
    /// wait without it taken as at least a job-second (all of a wait added is a large share,
    /// not a division by zero). The jobs still queued count with what they waited so far.
    pub fn ratio(&self) -> f64 {
        let waited = self.waited_s + self.waiting.values().sum::<f64>();
        let added = self.added_s + self.waiting.values().map(|w| w.min(self.delay_s)).sum::<f64>();
        added / (waited - added).max(1.0)
    }

    /// Whether the guard is on against `bound` (`max_wait_cost`): the ratio is past it, so no
    /// job is slowed (never under [`UNBOUNDED`]).
    pub fn guarding(&self, bound: f64) -> bool {
        bound < UNBOUNDED && self.ratio() > bound
    }

    /// The share of the cluster's GPUs that must be unallocated for DVFS to slow a job,
    /// against `bound` (`max_wait_cost`): the ratio over the bound (0 with no wait added; 1 at
    /// the bound, where the guard takes over; 0 under [`UNBOUNDED`]).
    pub fn gate(&self, bound: f64) -> f64 {
        if bound > 0.0 && bound < UNBOUNDED { (self.ratio() / bound).min(1.0) } else { 0.0 }
    }
}

/// How close to `max_lag_s` a job's observed lag counts as reaching it (s).
const LAG_SLACK_S: f64 = 1e-6;

/// How fast `r` falls behind its full-speed pace at its level: `s / (1 + s)` of each second
/// for its pessimistic slowdown `s` (at most its bound).
fn lag_rate(s: &Snapshot, r: &Running) -> f64 {
    let level = s.models.get(r.job.model as usize).and_then(|l| l.get(usize::from(r.level)));
    let slow = level.map_or(0.0, |l| l.slowdown_hi.min(r.job.bound));
    if slow.is_finite() && slow > 0.0 { slow / (1.0 + slow) } else { 0.0 }
}

/// A bound this high (the knob's top) is no bound: it neither gates nor guards.
pub const UNBOUNDED: f64 = 100.0;

/// `p` as it runs with `w` observed: wattson with the guard on slows no job (every job the
/// queue waits for is raised at once, to full speed); below the bound it slows a job only
/// while the [`WaitCost::gate`]'s share of the GPUs is unallocated (or `dvfs_min_free`'s, if
/// more).
pub fn guarded(p: &TunedPolicy, w: &WaitCost) -> TunedPolicy {
    if p.kind != ClusterPolicy::Wattson {
        return *p;
    }
    let bound = p.tuning.max_wait_cost;
    let mut tight = *p;
    if !w.guarding(bound) {
        tight.tuning.dvfs_min_free = p.tuning.dvfs_min_free.max(w.gate(bound));
        return tight;
    }
    tight.tuning.congestion_raise = 1.0;
    tight.tuning.raise_after_runs = 0.0;
    // No share of free GPUs is enough: DVFS is gated off.
    tight.tuning.dvfs_min_free = f64::INFINITY;
    tight
}
