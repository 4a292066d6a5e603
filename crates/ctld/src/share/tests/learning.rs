//! Learning on the nodes' records: which pairs share again, which never, and which are on
//! trial.

use super::*;
use wattson_types::apportion::SmActivity;
use wattson_types::energy::{GpuMeter, GpuReading};
use wattson_types::job::{JobGpu, JobKey, JobRecord, JobState};

/// The opted-in jobs of `requests`, with the `running` jobs running on their nodes.
fn shares_of(requests: &str, running: &[(u32, &str)], pairs: &mut Pairs) -> BTreeMap<u32, ShareJob> {
    share_jobs(&parse_requests(requests), &parse_jobs(&squeue(running, &[], &[])).unwrap(), pairs)
}

/// Job `id`'s record as its node answers it: ended or not, with its SM activity on GPU 0.
fn record(id: u32, ended: bool, sm: Option<SmActivity>) -> JobRecord {
    let mut meter = GpuMeter::begin(GpuReading::default());
    meter.sm = sm;
    JobRecord {
        key: JobKey::job(id),
        uid: 1000,
        user: None,
        name: None,
        node: "n1".into(),
        begin_ns: 0,
        end_ns: ended.then_some(10),
        state: if ended { JobState::Completed } else { JobState::Running },
        hints: Default::default(),
        policy: None,
        gpus: vec![JobGpu { index: 0, uuid: String::new(), name: String::new(), meter }],
        dvfs: None,
        node_share: None,
    }
}

/// SM activity of a job that ran 5 s alone and 5 s shared at `pair` times its rate alone: its
/// run took `10 / (5 + 5 / (1 + pair))` times as long as alone.
fn slowed(pair: f64) -> Option<SmActivity> {
    Some(SmActivity { alone_s: 5.0, alone: 5000.0, shared_s: 5.0, shared: 5000.0 / (1.0 + pair) })
}

#[test]
fn a_class_whose_measured_slowdown_broke_a_bound_is_paired_no_more() {
    let mut pairs = pairs();
    let mut judge = judge::Judge::default();
    // Jobs 1 and 2 (small) share n1's GPU 0; job 3 (small) runs alone on GPU 1.
    let both = request(1, "small", Is::On(0), "") + &request(2, "small", Is::On(0), "");
    let lone = request(3, "small", Is::On(1), "");
    let shares = shares_of(&(both.clone() + &lone), &[(1, "n1"), (2, "n1"), (3, "n1")], &mut pairs);
    judge.watch(&shares);
    assert!(judge.due(&shares).is_empty(), "all still run");

    // Job 1 ended (job 3 too, never shared: never asked): its node is asked for its record.
    let shares = shares_of(&request(2, "small", Is::On(0), ""), &[(2, "n1")], &mut pairs);
    assert_eq!(judge.due(&shares), [(1, "n1".to_string())]);
    // Not answered, then still open on the node: asked again.
    assert_eq!(judge.judge(1, None, &mut pairs), None);
    assert_eq!(judge.judge(1, Some(&[record(1, false, slowed(0.5))]), &mut pairs), None);
    assert_eq!(judge.due(&shares).len(), 1);
    // 50% slower beside job 2 for half its run: its run 20% longer, over its 10% bound:
    // `small` pairs no more.
    let verdict = judge.judge(1, Some(&[record(1, true, slowed(0.5))]), &mut pairs).unwrap();
    assert!(
        matches!(verdict, judge::Verdict::Measured { slowdown, broke: true } if (slowdown - 0.2).abs() < 1e-9),
        "{verdict:?}"
    );
    assert!(judge.due(&shares).is_empty(), "judged once");
    // What the state file keeps, read back by the next controller.
    assert_eq!(pairs.broken_tags(), ["small"]);
    let mut next = self::pairs();
    next.break_tags(&["small".to_string(), "gone".to_string()]);
    assert_eq!(next.sharing().broken, pairs.sharing().broken);
    // Job 5 (small) would have been released beside job 2, now alone on GPU 0 (as job 2 was
    // in the first test): it waits.
    let requests = request(2, "small", Is::On(0), "") + &request(5, "small", Is::Held, "");
    let squeue_text = squeue(&[(2, "n1")], &[5], &[]);
    let gate = gate_with(pairs.clone(), &node("n1", 1, "0"), &squeue_text, &requests);
    assert!(gate.release.is_empty(), "{gate:?}");
    assert_eq!(
        released(&gate_of(&node("n1", 1, "0"), &squeue_text, &requests)),
        [(5, Place::Beside { node: "n1".into(), partner: 2 })],
        "without the measurement it would have been"
    );

    // Within its bound, or unmeasured: nothing changes.
    let mut fresh = self::pairs();
    let shares = shares_of(&both, &[(1, "n1"), (2, "n1")], &mut fresh);
    judge.watch(&shares);
    let none = BTreeMap::new();
    assert_eq!(judge.due(&none).len(), 2);
    // 15% slower beside job 2 for half its run: its run 7% longer, within its bound.
    let within = judge.judge(1, Some(&[record(1, true, slowed(0.15))]), &mut fresh).unwrap();
    assert!(matches!(within, judge::Verdict::Measured { broke: false, .. }), "{within:?}");
    let unmeasured = judge.judge(2, Some(&[record(2, true, None)]), &mut fresh);
    assert_eq!(unmeasured, Some(judge::Verdict::Unmeasured));
    assert!(fresh.sharing().broken.is_empty());

    // A node that never answers: the job is given up after a few loops.
    judge.watch(&shares);
    for _ in 0..20 {
        judge.judge(1, None, &mut fresh);
    }
    assert_eq!(judge.due(&none), [(2, "n1".to_string())]);
}

#[test]
fn learning_a_pair_measured_within_its_bounds_pairs_again_and_one_over_them_never() {
    let tuning = cluster::Tuning { share_learn: true, share_try_bound: 0.1, ..cluster::Tuning::default() };
    let mut pairs = Pairs::new(&[]).with_tuning(&tuning);
    let candidate = |pairs: &Pairs, job, tag: &str| Candidate {
        job,
        class: usize::from(pairs.class(tag).expect("a tag seen")),
        gpus: 1,
        bound: 0.1,
        left_s: f64::INFINITY,
    };
    let fits = |pairs: &Pairs, a: &str, b: &str| {
        slowdowns(&pairs.sharing(), &candidate(pairs, 10, a), &candidate(pairs, 11, b)).is_some()
    };
    // No pair data: jobs 1 (a) and 2 (b) share GPU 0 of n1, 3 (a) and 4 (c) GPU 1, each a
    // trial (both bounds, 10%, reach the try bound); each tag a class as first seen.
    let running = [(1, "n1"), (2, "n1"), (3, "n1"), (4, "n1")];
    let requests = request(1, "a", Is::On(0), "")
        + &request(2, "b", Is::On(0), "")
        + &request(3, "a", Is::On(1), "")
        + &request(4, "c", Is::On(1), "");
    let shares = shares_of(&requests, &running, &mut pairs);
    assert_eq!([pairs.class("a"), pairs.class("b"), pairs.class("c")], [Some(0), Some(1), Some(2)]);
    assert!(fits(&pairs, "a", "b") && fits(&pairs, "a", "c"), "never measured: tried");
    let mut judge = judge::Judge::default();
    judge.watch(&shares);
    // All four ended; their nodes measured each beside its one partner.
    let ended = shares_of("", &[], &mut pairs);
    assert_eq!(judge.due(&ended).len(), 4);
    for (id, pair, broke) in [(1, 0.05, false), (2, 0.06, false), (3, 0.3, true), (4, 0.02, false)] {
        let verdict = judge.judge(id, Some(&[record(id, true, slowed(pair))]), &mut pairs).unwrap();
        assert!(
            matches!(verdict, judge::Verdict::Measured { slowdown, broke: b } if (slowdown - pair).abs() < 1e-9 && b == broke),
            "job {id}: {verdict:?}"
        );
    }
    // a beside b: measured within both bounds, and together 1.9 jobs' work per second: paired
    // again without a trial. a beside c broke a's bound: never again.
    assert!(fits(&pairs, "a", "b"));
    assert!(!fits(&pairs, "a", "c") && !fits(&pairs, "c", "a"));
    assert!(pairs.broken_tags().is_empty(), "learning drops a pair, not a class");
    // A new tag is tried where even the worst slowdown measured in a pair of either tag keeps
    // both jobs within their bounds: beside a (30% beside c) not at a 10% bound, beside b (in
    // mild pairs only) at the try bound; on trial, neither class is tried again meanwhile.
    let d = pairs.class_or_new("d").unwrap();
    assert!(!fits(&pairs, "d", "a"), "30% over a 10% bound");
    assert!(fits(&pairs, "d", "b"), "b's worst, 6%, is within the try bound");
    let (a, b) = (pairs.class("a").unwrap(), pairs.class("b").unwrap());
    let wide = |job, class: u16| Candidate {
        job,
        class: usize::from(class),
        gpus: 1,
        bound: 0.3,
        left_s: f64::INFINITY,
    };
    assert!(slowdowns(&pairs.sharing(), &wide(10, d), &wide(11, a)).is_some());
    pairs.on_trial([(20, d, b), (21, b, d)]);
    assert!(slowdowns(&pairs.sharing(), &wide(10, d), &wide(11, a)).is_none(), "d on trial");
    assert!(slowdowns(&pairs.sharing(), &wide(10, b), &wide(11, b)).is_none(), "b on trial");
    // What the state file keeps, read back by the next controller: the same decisions.
    let mut next = Pairs::new(&[]).with_tuning(&tuning);
    next.relearn(&pairs.learned(), &pairs.unfit_tags());
    assert_eq!(pairs.learned().len(), 4);
    assert!(fits(&next, "a", "b"));
    assert!(!fits(&next, "a", "c"));
}

#[test]
fn a_pair_is_on_trial_while_it_shares_and_until_judged_measured_or_not() {
    let tuning = cluster::Tuning { share_learn: true, share_try_bound: 0.1, ..cluster::Tuning::default() };
    let mut pairs = Pairs::new(&[]).with_tuning(&tuning);
    // Jobs 1 (a) and 2 (b) share GPU 0, jobs 3 (a) and 4 (c) GPU 1: both pairs on trial.
    let requests = request(1, "a", Is::On(0), "")
        + &request(2, "b", Is::On(0), "")
        + &request(3, "a", Is::On(1), "")
        + &request(4, "c", Is::On(1), "");
    let shares = shares_of(&requests, &[(1, "n1"), (2, "n1"), (3, "n1"), (4, "n1")], &mut pairs);
    let [a, b, c] = ["a", "b", "c"].map(|t| usize::from(pairs.class(t).unwrap()));
    let mut judge = judge::Judge::default();
    judge.watch(&shares);
    let none = Released::default();
    on_trial(&mut pairs, &none, &shares, &judge);
    let trying = |pairs: &Pairs| pairs.sharing().trying.iter().copied().collect::<Vec<_>>();
    assert_eq!(trying(&pairs), [(a, b), (a, c)]);
    // All four ended: on trial until judged.
    let ended = shares_of("", &[], &mut pairs);
    on_trial(&mut pairs, &none, &ended, &judge);
    assert_eq!(trying(&pairs), [(a, b), (a, c)]);
    // Job 1's record has no slowdown, job 2 measured 5% beside a: a and b stay on trial until
    // both are judged (one way is not both).
    assert_eq!(judge.judge(1, Some(&[record(1, true, None)]), &mut pairs), Some(judge::Verdict::Unmeasured));
    on_trial(&mut pairs, &none, &ended, &judge);
    assert_eq!(trying(&pairs), [(a, b), (a, c)]);
    judge.judge(2, Some(&[record(2, true, slowed(0.05))]), &mut pairs).unwrap();
    on_trial(&mut pairs, &none, &ended, &judge);
    assert_eq!(trying(&pairs), [(a, c)], "judged: off trial, b beside a learned");
    // Job 3's and 4's nodes never answer: given up, a and c leave theirs too (else a node that
    // measures nothing would stop both classes' trials until the controller restarts).
    for _ in 0..20 {
        judge.judge(3, None, &mut pairs);
        judge.judge(4, None, &mut pairs);
    }
    on_trial(&mut pairs, &none, &ended, &judge);
    assert!(trying(&pairs).is_empty());
    assert_eq!(pairs.learned().len(), 1, "only b beside a was measured");
}

#[test]
fn a_job_released_beside_its_partner_on_trial_keeps_its_place_while_it_pends() {
    // Learning from no pair data: job 2 (small) is released beside job 1 (small) to try the
    // pair (both 10% bounds reach the try bound).
    let tuning = cluster::Tuning { share_learn: true, share_try_bound: 0.1, ..cluster::Tuning::default() };
    let mut pairs = Pairs::new(&[]).with_tuning(&tuning);
    pairs.class_or_new("small");
    let mut planner = Planner::new(Config::default()).sharing(pairs.clone());
    let nodes = node("n1", 1, "0");
    let lone = request(1, "small", Is::On(0), "");
    let held = lone.clone() + &request(2, "small", Is::Held, "");
    let gate = planner_loop(&mut planner, &pairs, &nodes, &squeue(&[(1, "n1")], &[2], &[]), &held);
    assert_eq!(released(&gate), [(2, Place::Beside { node: "n1".into(), partner: 1 })]);
    // The controller's loop notes the pair on trial from what it released.
    let requests = lone + &requiring(request(2, "small", Is::Released, ""), "n1");
    let jobs = squeue(&[(1, "n1")], &[], &[2]);
    let shares = share_jobs(&parse_requests(&requests), &parse_jobs(&jobs).unwrap(), &mut pairs);
    let judge = judge::Judge::default();
    let own = planner.pairs.as_mut().unwrap();
    on_trial(own, &planner.ledger.share_released, &shares, &judge);
    assert_eq!(own.sharing().trying.len(), 1);
    // Slurm has not started job 2 yet: its own trial does not take its place beside job 1.
    let gate = planner_loop(&mut planner, &pairs, &nodes, &jobs, &requests);
    assert_eq!((gate.require.len(), gate.exclude.len()), (0, 0), "{gate:?}");
    // Job 1 ended first: job 2 gets its node list back, and the next loop takes the pair,
    // never shared, off its trial (else no two jobs of its class would share until the
    // controller restarts).
    let requests = requiring(request(2, "small", Is::Released, ""), "n1");
    let jobs = squeue(&[], &[], &[2]);
    let gate = planner_loop(&mut planner, &pairs, &nodes, &jobs, &requests);
    assert_eq!(gate.require, [(2, vec![])]);
    let shares = share_jobs(&parse_requests(&requests), &parse_jobs(&jobs).unwrap(), &mut pairs);
    let own = planner.pairs.as_mut().unwrap();
    on_trial(own, &planner.ledger.share_released, &shares, &judge);
    assert!(own.sharing().trying.is_empty());
}

#[test]
fn a_job_whose_slowdown_beside_its_partner_is_unmeasured_shares_again_only_with_that_tag() {
    let tuning = cluster::Tuning { share_learn: true, share_try_bound: 0.1, ..cluster::Tuning::default() };
    let mut pairs = pairs().with_tuning(&tuning);
    // Job 1 (small) tried a new tag beside it, job 2's, on n1's GPU 0.
    let lone = request(1, "small", Is::On(0), "");
    let both = lone.clone() + &request(2, "new", Is::On(0), "");
    let mut judge = judge::Judge::default();
    judge.watch(&shares_of(&both, &[(1, "n1"), (2, "n1")], &mut pairs));
    // Job 2 ended, 2% slower beside small; job 1 runs on alone, its record not yet read.
    let shares = shares_of(&lone, &[(1, "n1")], &mut pairs);
    judge.judge(2, Some(&[record(2, true, slowed(0.02))]), &mut pairs).unwrap();
    let (before, mut after) = (pairs.clone(), pairs);
    on_trial(&mut after, &Released::default(), &shares, &judge);
    // Job 5 (small, measured 5% beside small) would join job 1, whose record would then
    // teach nothing of small beside new: it waits.
    let requests = lone + &request(5, "small", Is::Held, "");
    let squeue_text = squeue(&[(1, "n1")], &[5], &[]);
    let gate = gate_with(after, &node("n1", 1, "0"), &squeue_text, &requests);
    assert!(gate.release.is_empty(), "{gate:?}");
    assert_eq!(
        released(&gate_with(before, &node("n1", 1, "0"), &squeue_text, &requests)),
        [(5, Place::Beside { node: "n1".into(), partner: 1 })],
        "had job 1 never shared, it would have been"
    );
}
