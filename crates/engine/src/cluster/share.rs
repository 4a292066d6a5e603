//! Co-location: which queued job starts now on the GPUs of a running job, only jobs whose
//! users let them share, each paired with a job of as many GPUs (each GPU of one shared with
//! the other). Under wattson, only a job that would otherwise wait (the GPUs free on
//! powered-on nodes are taken by the jobs ahead of it in the queue), so that a job that can
//! have a GPU of its own runs alone; with `share_first`, any opted-in job, and one released
//! from hold now, before Slurm gives it a free GPU. Partners come from
//! [`crate::colocation::pair`], within both jobs' bounds (the running job's bound is what its
//! run so far left of it). The reference `slurm-shards` pairs as Slurm packs shards: every
//! such job beside the first lone one.

use super::levels::allowance;
use super::{Actions, ClusterPolicy, Held, NodePower, Queued, Running, Snapshot, TunedPolicy};
use crate::colocation::{self, Candidate, Interference, Learning, Sharing};
use std::collections::{BTreeMap, BTreeSet};

/// No class, no pair of classes.
static NO_CLASSES: BTreeSet<usize> = BTreeSet::new();
static NO_PAIRS: BTreeSet<(usize, usize)> = BTreeSet::new();
/// No job.
static NO_JOBS: BTreeMap<u32, BTreeSet<usize>> = BTreeMap::new();

impl<'a> Sharing<'a> {
    /// Deciding with `model` alone: nothing broken, unfit, on trial or shared before, and the
    /// shipped `share_min_gain` and `share_try_bound`.
    pub fn with_model(model: &'a Interference) -> Sharing<'a> {
        let t = super::Tuning::default();
        Sharing {
            model,
            broken: &NO_CLASSES,
            unfit: &NO_PAIRS,
            min_gain: t.share_min_gain,
            try_bound: t.share_try_bound,
            trying: &NO_PAIRS,
            shared_with: &NO_JOBS,
        }
    }

    /// [`Sharing::with_model`] on `learning`'s model, its pairs on trial and the classes beside
    /// its jobs where pairs are learned, else on `given`.
    pub fn learned_or(learning: Option<&'a Learning>, given: &'a Interference) -> Sharing<'a> {
        match learning {
            Some(l) => {
                Sharing { trying: l.trying(), shared_with: l.shared_with(), ..Sharing::with_model(l.model()) }
            }
            None => Sharing::with_model(given),
        }
    }
}

/// Adds to `a.share` the queued jobs that start now on a running job's GPU.
pub fn decide(p: &TunedPolicy, s: &Snapshot, a: &mut Actions) {
    let Some(sharing) = s.sharing else { return };
    match p.kind {
        ClusterPolicy::Wattson => by_model(p, s, &sharing, a),
        ClusterPolicy::SlurmShards => packed(s, &sharing, a),
        _ => {}
    }
}

/// The opted-in running jobs that run alone and have begun (a job whose nodes still boot
/// is no partner yet), as candidates.
fn lone(s: &Snapshot) -> Vec<Candidate> {
    s.running
        .iter()
        .filter_map(|r| {
            let class = r.job.share.filter(|_| !r.shared && r.elapsed_s > 0.0)?;
            Some(Candidate {
                job: r.job.id,
                class: usize::from(class),
                gpus: r.job.gpus,
                bound: allowance(r),
                left_s: (1.0 - r.progress).max(0.0) * r.job.work_s,
            })
        })
        .collect()
}

/// Slurm's packing: each queued opted-in job, in queue order, beside the first lone opted-in
/// job of as many GPUs on a node it may use, whatever the pair's slowdowns (only a pair seen not to
/// fit on one GPU is not tried again).
fn packed(s: &Snapshot, sharing: &Sharing, a: &mut Actions) {
    let mut lone = lone(s);
    for q in s.queued {
        let Some(class) = q.job.share.map(usize::from) else { continue };
        let unfit = |r: &Candidate| {
            r.gpus != q.job.gpus
                || sharing.unfit.contains(&(class, r.class))
                || sharing.unfit.contains(&(r.class, class))
        };
        if let Some(k) = lone.iter().position(|r| !unfit(r) && may_join(s, q.job.id, r.job)) {
            a.share.push((q.job.id, lone.remove(k).job));
        }
    }
}

/// wattson's pairs by the interference model: the queued jobs that would otherwise wait, or,
/// with `share_first`, every queued job and those released from hold now (in that order).
fn by_model(p: &TunedPolicy, s: &Snapshot, sharing: &Sharing, a: &mut Actions) {
    let running = lone(s);
    if running.is_empty() {
        return;
    }
    let first = p.tuning.share_first;
    let waiting =
        s.queued.iter().zip(free_gpus_hold(s)).filter(|(_, holds)| first || !holds).map(|(q, _)| q.job);
    let released = s.held.iter().filter(|h| first && a.release.contains(&h.job.id)).map(|h| h.job);
    let pending: Vec<Candidate> = waiting
        .chain(released)
        .filter_map(|j| {
            Some(Candidate {
                job: j.id,
                class: usize::from(j.share?),
                gpus: j.gpus,
                bound: j.bound,
                left_s: j.work_s,
            })
        })
        .collect();
    let may = |queued: u32, running: u32| may_join(s, queued, running);
    a.share = colocation::pair(sharing, &pending, &running, may);
}

/// For each queued job, in queue order, whether the GPUs free on powered-on nodes hold it once
/// the jobs ahead of it took theirs: a job they do not hold would wait.
pub fn free_gpus_hold(s: &Snapshot) -> Vec<bool> {
    let mut free: u32 = s.nodes.iter().filter(|n| n.power == NodePower::On).map(|n| n.free_gpus).sum();
    s.queued
        .iter()
        .map(|q| {
            let held = q.job.gpus <= free;
            if held {
                free -= q.job.gpus;
            }
            held
        })
        .collect()
}

/// The queue, the held jobs and the running jobs once the `pairs` (queued or held, running)
/// have formed: each joining job of a pair runs, shared, as does its partner.
pub fn started(s: &Snapshot, pairs: &[(u32, u32)]) -> (Vec<Queued>, Vec<Held>, Vec<Running>) {
    let joins = |id: u32| pairs.iter().any(|&(q, _)| q == id);
    let hosts = |id: u32| pairs.iter().any(|&(_, r)| r == id);
    let queued = s.queued.iter().filter(|q| !joins(q.job.id)).copied().collect();
    let held = s.held.iter().filter(|h| !joins(h.job.id)).copied().collect();
    let mut running: Vec<Running> =
        s.running.iter().map(|r| Running { shared: r.shared || hosts(r.job.id), ..*r }).collect();
    let joined = s.queued.iter().map(|q| q.job).chain(s.held.iter().map(|h| h.job));
    running.extend(joined.filter(|j| joins(j.id)).map(|job| Running {
        job,
        elapsed_s: 0.0,
        progress: 0.0,
        level: top(s, &job),
        shared: true,
    }));
    (queued, held, running)
}

/// The top level of job `j`'s level table.
fn top(s: &Snapshot, j: &super::JobView) -> u16 {
    s.models.get(j.model as usize).map_or(0, |l| l.len().saturating_sub(1) as u16)
}

/// Whether queued job `queued` may run on running job `running`'s node: it is among the nodes
/// the queued job may use ([`Snapshot::job_nodes`]; unlisted: any).
fn may_join(s: &Snapshot, queued: u32, running: u32) -> bool {
    match (s.job_nodes.get(&queued), s.job_nodes.get(&running)) {
        (Some(usable), Some(held)) => held.iter().any(|n| usable.binary_search(n).is_ok()),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::super::tests::{job, levels, node, snap};
    use super::super::{JobView, Queued, Running, Sharing, Tuning, decide as brain};
    use super::*;
    use crate::colocation::{Interference, PairSlowdown};
    use wattson_types::prices::PriceSchedule;

    /// Class 0 barely slows anyone (1% each way with itself); class 1 slows a class-0
    /// neighbour by 20%.
    fn model() -> Interference {
        let s = [0.05, 0.5];
        let pr = [0.2, 4.0];
        let pairs: Vec<PairSlowdown> = (0..2)
            .flat_map(|a| (0..2).map(move |b| (a, b)))
            .map(|(a, b)| PairSlowdown { victim: a, neighbour: b, slowdown: s[a] * pr[b] })
            .collect();
        Interference::fit(2, &pairs)
    }

    fn one(id: u32, class: Option<u16>) -> JobView {
        JobView { gpus: 1, share: class, ..job(id, 0.10) }
    }

    #[test]
    fn a_queued_job_that_would_wait_shares_the_gpu_of_a_running_job_within_both_bounds() {
        let m = levels();
        let tariff = PriceSchedule::default();
        let model = model();
        let sharing = Some(Sharing::with_model(&model));
        // Only a job that would otherwise wait shares.
        let tuning = Tuning { share_first: false, ..Tuning::default() };
        let p = TunedPolicy { kind: ClusterPolicy::Wattson, tuning };
        let full = [node(NodePower::On, 0, f64::INFINITY)];
        let run = |id, class| Running {
            job: one(id, class),
            elapsed_s: 10.0,
            progress: 0.01,
            level: 3,
            shared: false,
        };
        let running = [run(1, Some(1)), run(2, Some(0)), run(3, None)];
        let queued =
            [Queued { job: one(10, Some(0)), eligible: 0.0 }, Queued { job: one(11, None), eligible: 0.0 }];
        let s = Snapshot { sharing, ..snap(100.0, &full, &m, &queued, &running, &[], &tariff) };
        // Job 10 would be slowed 20% by job 1 (over its 10%); with job 2, 1% each way. Job 11
        // did not opt in, nor did job 3.
        assert_eq!(brain(&p, &s).share, vec![(10, 2)]);
        // Once paired, job 10 is no queued job to boot a node for; unpaired, it would be.
        let asleep = [full[0], node(NodePower::Off, 8, f64::NEG_INFINITY)];
        let only = Snapshot { nodes: &asleep, queued: &queued[..1], ..s };
        let paired = brain(&p, &only);
        assert_eq!((paired.share, paired.power_up), (vec![(10, 2)], vec![]));
        assert_eq!(brain(&p, &Snapshot { sharing: None, ..only }).power_up, vec![1]);
        // A free GPU on a powered node: job 10 runs alone.
        let free = [node(NodePower::On, 1, f64::INFINITY)];
        assert!(brain(&p, &Snapshot { nodes: &free, ..s }).share.is_empty());
        // The GPU goes to job 11 ahead of it; job 10 still shares.
        let ahead = [queued[1], queued[0]];
        assert_eq!(brain(&p, &Snapshot { nodes: &free, queued: &ahead, ..s }).share, vec![(10, 2)]);
        // A running job already sharing takes no third; a broken class pairs no more.
        let shared = [run(1, Some(1)), Running { shared: true, ..run(2, Some(0)) }];
        assert!(brain(&p, &Snapshot { running: &shared, ..s }).share.is_empty());
        let broken = BTreeSet::from([0]);
        let s_broken =
            Snapshot { sharing: Some(Sharing { broken: &broken, ..Sharing::with_model(&model) }), ..s };
        assert!(brain(&p, &s_broken).share.is_empty());
        // Without the model, or under a reference policy, nothing shares.
        assert!(brain(&p, &Snapshot { sharing: None, ..s }).share.is_empty());
        let slurm = TunedPolicy { kind: ClusterPolicy::SlurmPowersave, ..p };
        assert!(brain(&slurm, &s).share.is_empty());
        // A running job whose run so far used its bound has no room left for a neighbour.
        let late = [Running { elapsed_s: 199.0, progress: 0.1, ..run(2, Some(0)) }];
        assert!(brain(&p, &Snapshot { running: &late, ..s }).share.is_empty());
        // A shared job runs at the top level, whatever its bound allows.
        let slow = [Running { level: 1, ..shared[1] }];
        assert_eq!(brain(&p, &Snapshot { running: &slow, queued: &[], ..s }).levels, vec![(2, 3)]);

        // Slurm's packing (the reference): beside the first lone opted-in job, whatever it
        // does to either, with a free GPU or not, broken class or not; only a pair seen not to
        // fit is not tried again.
        let shards = TunedPolicy { kind: ClusterPolicy::SlurmShards, ..p };
        assert_eq!(brain(&shards, &s).share, vec![(10, 1)]);
        assert_eq!(brain(&shards, &Snapshot { nodes: &free, ..s }).share, vec![(10, 1)]);
        assert_eq!(brain(&shards, &s_broken).share, vec![(10, 1)]);
        let unfit = BTreeSet::from([(1, 0)]);
        let s_unfit =
            Snapshot { sharing: Some(Sharing { unfit: &unfit, ..Sharing::with_model(&model) }), ..s };
        assert_eq!(brain(&shards, &s_unfit).share, vec![(10, 2)]);
        assert!(
            brain(&shards, &Snapshot { running: &shared[..1], queued: &queued[1..], ..s }).share.is_empty()
        );

        // A job of two GPUs pairs only with a running job of two, under either policy.
        let two = |job: JobView| JobView { gpus: 2, ..job };
        let wide = [Queued { job: two(one(12, Some(0))), eligible: 0.0 }];
        assert!(brain(&p, &Snapshot { queued: &wide, ..s }).share.is_empty());
        assert!(brain(&shards, &Snapshot { queued: &wide, ..s }).share.is_empty());
        let pair_of_two = [run(1, Some(1)), Running { job: two(one(2, Some(0))), ..run(2, Some(0)) }];
        let s_two = Snapshot { queued: &wide, running: &pair_of_two, ..s };
        assert_eq!(brain(&p, &s_two).share, vec![(12, 2)]);
        assert_eq!(brain(&shards, &s_two).share, vec![(12, 2)]);
    }

    #[test]
    fn with_share_first_an_opted_in_job_joins_a_fitting_partner_though_a_free_gpu_would_hold_it() {
        let m = levels();
        let tariff = PriceSchedule::default();
        let model = model();
        let sharing = Some(Sharing::with_model(&model));
        let first = TunedPolicy { kind: ClusterPolicy::Wattson, tuning: Tuning::default() };
        assert!(first.tuning.share_first, "the default");
        let waits = TunedPolicy { tuning: Tuning { share_first: false, ..Tuning::default() }, ..first };
        let free = [node(NodePower::On, 1, f64::INFINITY)];
        let running =
            [Running { job: one(2, Some(0)), elapsed_s: 10.0, progress: 0.01, level: 3, shared: false }];
        let queued = [Queued { job: one(10, Some(0)), eligible: 0.0 }];
        let s = Snapshot { sharing, ..snap(100.0, &free, &m, &queued, &running, &[], &tariff) };
        // The free GPU holds job 10: it runs alone unless pairing comes first.
        assert!(brain(&waits, &s).share.is_empty());
        assert_eq!(brain(&first, &s).share, vec![(10, 2)]);
        // A job released from hold now pairs before Slurm's pass could give it the free GPU,
        // and the rest of the decision sees it running (not held, not queued).
        let held = [Held { job: one(11, Some(0)), submit: 100.0, defer_window_s: 0.0 }];
        let arriving = Snapshot { queued: &[], held: &held, ..s };
        let a = brain(&first, &arriving);
        assert_eq!((a.release, a.share), (vec![11], vec![(11, 2)]));
        let (queued, held_left, running) = started(&arriving, &[(11, 2)]);
        assert!(queued.is_empty() && held_left.is_empty());
        assert_eq!(
            running.iter().map(|r| (r.job.id, r.shared)).collect::<Vec<_>>(),
            vec![(2, true), (11, true)]
        );
        // A held job not yet due (deferred) is not paired, nor one that did not opt in.
        let night = 23.0 * 3600.0 + 10.0;
        let later = [Held { defer_window_s: 7200.0, submit: night, ..held[0] }];
        let tou = PriceSchedule { hourly_utc: (0..24).map(|h| if h < 6 { 0.1 } else { 0.3 }).collect() };
        let deferred = Snapshot { held: &later, tariff: &tou, now: night, ..arriving };
        assert!(brain(&first, &deferred).share.is_empty());
        let plain = [Held { job: one(12, None), ..held[0] }];
        assert!(brain(&first, &Snapshot { held: &plain, ..arriving }).share.is_empty());
        // Without a fitting partner it runs alone, as without share_first.
        let unfit = [Queued { job: one(13, Some(1)), eligible: 0.0 }];
        let hostile = [Running { job: one(3, Some(1)), ..running[0] }];
        assert!(brain(&first, &Snapshot { queued: &unfit, running: &hostile, ..s }).share.is_empty());
    }
}
