//! Shared GPUs in the simulator: users of 1-GPU jobs (and, with `[hints] share_gpus`, of
//! jobs of several GPUs) opt in, the engine pairs them on a running job's GPUs from its interference model fitted on Gavel's V100 pairs, and the
//! simulator charges the measured pair slowdowns. Checked from the raw records: energy and
//! GPU-seconds still add up, two jobs overlap on a GPU only as recorded partners, no pair that
//! Gavel found not to fit ran, every job wattson paired kept its bound, and besides wattson
//! only the reference `slurm-shards` shares (packing as Slurm does, so it breaks bounds).

use wattson_sim::colocation::Colocation;
use wattson_sim::{Catalog, ClusterConfig, ClusterPolicy, Outcome, TraceFormat, TraceJob};

use super::{check_conservation, check_no_double_booking, data, inputs, read};

const TRACE: &str = "traces/itp-elasticflow/cluster04.csv";

/// The cluster and catalog with Gavel's pairs, every job of at most `share_gpus` GPUs opted in
/// at a 50% bound, and the trace's first 1500 jobs.
fn sharing_inputs(share_gpus: u32) -> (ClusterConfig, Catalog, Vec<TraceJob>) {
    let (mut c, mut cat) = inputs();
    let gavel = data("colocation/gavel/simulation_throughputs.json");
    cat.colocation = Some(Colocation::from_gavel_json(&read(&gavel), "gavel").expect("Gavel data parses"));
    c.hints.share_fraction = 1.0;
    c.hints.share_bound = 0.5;
    c.hints.share_gpus = share_gpus;
    let mut t = wattson_sim::trace::parse(&read(&data(TRACE)), TRACE, TraceFormat::Auto).unwrap();
    t.truncate(1500);
    (c, cat, t)
}

/// The floor is below every policy that keeps the bounds.
fn check_floor_below_bound_keepers(o: &Outcome) {
    let floor = o.report.summary(ClusterPolicy::Floor).unwrap().energy_kwh;
    for s in
        o.report.summaries.iter().filter(|s| {
            ![ClusterPolicy::Floor, ClusterPolicy::SlurmShards].iter().any(|p| p.name() == s.policy)
        })
    {
        assert!(floor < s.energy_kwh, "the floor {floor} kWh is not below {:?}'s {}", s.policy, s.energy_kwh);
    }
}

#[test]
fn opted_in_jobs_share_gpus_within_their_bounds_and_every_joule_is_accounted() {
    let (mut c, mut cat, t) = sharing_inputs(1);
    let colo = cat.colocation.clone().unwrap();
    let name = TRACE;
    let o = wattson_sim::run(&c, &cat, &t, name, &wattson_sim::policies::ALL, 1).expect("simulation runs");
    check_conservation(&c, &o);
    check_no_double_booking(&c, &o);
    for r in &o.runs {
        let shared: Vec<usize> = (0..r.jobs.len()).filter(|&k| !r.jobs[k].partners.is_empty()).collect();
        if ![ClusterPolicy::Wattson, ClusterPolicy::SlurmShards].contains(&r.policy) {
            assert!(shared.is_empty(), "{:?} shares no GPU", r.policy);
            continue;
        }
        assert!(shared.len() >= 20, "{:?} shared GPUs for {} jobs only", r.policy, shared.len());
        let over = shared.iter().filter(|&&k| r.jobs[k].slowdown > o.jobs[k].bound + 1e-9).count();
        if r.policy == ClusterPolicy::SlurmShards {
            assert!(over > 0, "Slurm's packing knows no bound, yet every pair kept them");
        } else {
            assert_eq!(over, 0, "wattson paired jobs beyond their bounds");
        }
        for &k in &shared {
            let (job, run) = (&o.jobs[k], &r.jobs[k]);
            assert_eq!(job.gpus, 1, "job {}: only 1-GPU jobs share", job.id);
            for &(other, _, _) in &run.partners {
                let (a, b) = (job.share.expect("an opted-in job"), o.jobs[other as usize].share.unwrap());
                assert!(
                    colo.slowdown(a, b).is_some(),
                    "job {} ran beside a class it does not fit with",
                    job.id
                );
                assert!(
                    r.jobs[other as usize].partners.iter().any(|p| p.0 as usize == k),
                    "job {}: its partner does not record it",
                    job.id
                );
            }
        }
        let s = o.report.summary(r.policy).unwrap();
        assert_eq!(s.shared_jobs, shared.len());
        assert!(s.shared_gpu_time > 0.0 && s.shared_gpu_time < 1.0);
    }
    // The floor may share as the jobs may: below every policy that keeps the bounds, and
    // below the floor of the same jobs without pair data.
    check_floor_below_bound_keepers(&o);
    let floor = o.report.summary(ClusterPolicy::Floor).unwrap().energy_kwh;
    let mut whole = cat.clone();
    whole.colocation = None;
    let whole = wattson_sim::run(&c, &whole, &t, name, &[ClusterPolicy::Floor], 1).unwrap();
    let whole = whole.report.summary(ClusterPolicy::Floor).unwrap().energy_kwh;
    assert!(floor < whole, "sharing lowers the floor: {floor} against {whole} kWh");
    // Without opt-ins nothing shares, and the run is the one without a model; the shard
    // reference does not run.
    c.hints.share_fraction = 0.0;
    let shards = wattson_sim::run(&c, &cat, &t, name, &[ClusterPolicy::SlurmShards], 1).unwrap();
    assert!(shards.runs.is_empty() && shards.report.summaries.is_empty());
    let none = wattson_sim::run(&c, &cat, &t, name, &[ClusterPolicy::Wattson], 1).unwrap();
    cat.colocation = None;
    let bare = wattson_sim::run(&c, &cat, &t, name, &[ClusterPolicy::Wattson], 1).unwrap();
    assert!(none.runs[0].jobs.iter().all(|x| x.partners.is_empty()));
    assert_eq!(none.report.summaries[0].energy_kwh, bare.report.summaries[0].energy_kwh);
}

#[test]
fn a_job_of_several_gpus_shares_all_of_them_with_one_partner_of_as_many() {
    let (c, cat, t) = sharing_inputs(8);
    let o = wattson_sim::run(&c, &cat, &t, TRACE, &wattson_sim::policies::ALL, 1).expect("simulation runs");
    check_conservation(&c, &o);
    check_no_double_booking(&c, &o);
    check_floor_below_bound_keepers(&o);
    for r in
        o.runs.iter().filter(|r| [ClusterPolicy::Wattson, ClusterPolicy::SlurmShards].contains(&r.policy))
    {
        let shared: Vec<usize> = (0..r.jobs.len()).filter(|&k| !r.jobs[k].partners.is_empty()).collect();
        let wide = shared.iter().filter(|&&k| o.jobs[k].gpus > 1).count();
        assert!(wide >= 10, "{:?}: {wide} jobs of several GPUs shared", r.policy);
        for &k in &shared {
            for &(other, _, _) in &r.jobs[k].partners {
                let o_k = other as usize;
                assert_eq!(
                    o.jobs[o_k].gpus, o.jobs[k].gpus,
                    "job {}: a partner of another size",
                    o.jobs[k].id
                );
                assert_eq!(
                    r.jobs[o_k].shares, r.jobs[k].shares,
                    "job {}: not on all its partner's GPUs",
                    o.jobs[k].id
                );
            }
        }
        if r.policy == ClusterPolicy::Wattson {
            let over = shared.iter().filter(|&&k| r.jobs[k].slowdown > o.jobs[k].bound + 1e-9).count();
            assert_eq!(over, 0, "wattson paired jobs beyond their bounds");
        }
    }
}

#[test]
fn with_share_first_more_jobs_pair_before_taking_a_free_gpu_and_all_keep_their_bounds() {
    let (mut c, cat, t) = sharing_inputs(8);
    let wattson = [ClusterPolicy::Wattson];
    let shared = |o: &Outcome| o.runs[0].jobs.iter().filter(|r| !r.partners.is_empty()).count();
    c.wattson.tuning.share_first = false;
    let waiting = wattson_sim::run(&c, &cat, &t, TRACE, &wattson, 1).expect("simulation runs");
    c.wattson.tuning.share_first = true;
    let first = wattson_sim::run(&c, &cat, &t, TRACE, &wattson, 1).expect("simulation runs");
    check_conservation(&c, &first);
    check_no_double_booking(&c, &first);
    let (before, after) = (shared(&waiting), shared(&first));
    assert!(after > 2 * before, "share_first paired {after} jobs, against {before} that would wait");
    let r = &first.runs[0];
    let over = (0..r.jobs.len())
        .filter(|&k| !r.jobs[k].partners.is_empty() && r.jobs[k].slowdown > first.jobs[k].bound + 1e-9);
    assert_eq!(over.count(), 0, "wattson paired jobs beyond their bounds");
    // Jobs that joined a partner the instant they were submitted: released and paired in one
    // decision, before Slurm's pass could give them a GPU of their own.
    let at_once = (0..r.jobs.len())
        .filter(|&k| {
            r.jobs[k]
                .partners
                .first()
                .is_some_and(|p| p.1 == r.jobs[k].start && r.jobs[k].start == first.jobs[k].submit)
        })
        .count();
    assert!(at_once > 0, "no job joined a partner at its submission");
}

#[test]
fn without_a_prior_pairs_are_learned_from_trials_and_no_pair_breaks_a_bound_after_its_first() {
    let (mut c, cat, t) = sharing_inputs(1);
    c.wattson.sim.pair_prior = false;
    let wattson = [ClusterPolicy::Wattson];
    // No pair data and no trials: nothing shares.
    let o = wattson_sim::run(&c, &cat, &t, TRACE, &wattson, 1).expect("simulation runs");
    assert_eq!(o.report.summary(ClusterPolicy::Wattson).unwrap().shared_jobs, 0);

    c.wattson.tuning.share_try_bound = 0.5;
    let o = wattson_sim::run(&c, &cat, &t, TRACE, &wattson, 1).expect("simulation runs");
    check_conservation(&c, &o);
    check_no_double_booking(&c, &o);
    let r = &o.runs[0];
    let class = |k: usize| o.jobs[k].share.expect("an opted-in job");
    // The pairs of classes that shared a GPU.
    let mut tried = std::collections::BTreeSet::new();
    let mut shared = 0;
    for (k, run) in r.jobs.iter().enumerate() {
        shared += usize::from(!run.partners.is_empty());
        for &(other, _, _) in &run.partners {
            let (a, b) = (class(k), class(other as usize));
            tried.insert((a.min(b), a.max(b)));
        }
    }
    assert!(shared >= 20, "wattson shared GPUs for {shared} jobs only");
    assert!(tried.len() >= 3, "only {} pairs of classes were tried", tried.len());
    assert_eq!(
        wattson_sim::metrics::repeat_violations(r, &o.jobs),
        0,
        "a job broke its bound in later admissions of its pairs of classes only"
    );
    let over = (r.jobs.iter().enumerate())
        .filter(|(k, run)| !run.partners.is_empty() && run.slowdown > o.jobs[*k].bound + 1e-9)
        .count();
    assert!(over < shared / 10, "{over} of {shared} jobs that shared broke their bound");
    // Each job's slowdown is learned at its end, as the controller reads it from the job's
    // record: no second GPU takes a pair of classes before both jobs of its first admission
    // have ended (one of them, for a class beside its own kind: one job's record is both ways).
    // Seed 5 re-admits a pair between its two jobs' ends where both were learned as it parted.
    for seed in [1, 5] {
        let o = wattson_sim::run(&c, &cat, &t, TRACE, &wattson, seed).expect("simulation runs");
        let (r, class) = (&o.runs[0], |k: usize| o.jobs[k].share.expect("an opted-in job"));
        let admissions = (r.jobs.iter().enumerate()).flat_map(|(k, run)| {
            run.partners.iter().map(move |&(other, start, _)| (k, other as usize, start))
        });
        let mut first: std::collections::BTreeMap<(u16, u16), (f64, f64)> = Default::default();
        for (k, other, start) in admissions.clone() {
            let (a, b) = (class(k), class(other));
            let (x, y) = (r.jobs[k].end, r.jobs[other].end);
            let ends = if a == b { x.min(y) } else { x.max(y) };
            let f = first.entry((a.min(b), a.max(b))).or_insert((start, ends));
            if start < f.0 {
                *f = (start, ends);
            }
        }
        for (k, other, start) in admissions {
            let (a, b) = (class(k), class(other));
            let (at, ends) = first[&(a.min(b), a.max(b))];
            assert!(
                start == at || start >= ends,
                "seed {seed}: classes {a} and {b} shared again at {start}, before {ends}"
            );
        }
    }
}

/// Pairs that never pay: each job of any pair of the two classes runs 2.0075 times as long as
/// alone, so a shared GPU does 0.996 of one job's work per second (a held-out production
/// trace's one class).
const COSTLY: &str = r#"{"v100": {
    "('ResNet-50 (batch size 64)', 1)": {"null": 2.0075,
        "('ResNet-50 (batch size 64)', 1)": [1.0, 1.0], "('Transformer (batch size 32)', 1)": [1.0, 1.0]},
    "('Transformer (batch size 32)', 1)": {"null": 2.0075,
        "('ResNet-50 (batch size 64)', 1)": [1.0, 1.0], "('Transformer (batch size 32)', 1)": [1.0, 1.0]}
}}"#;

#[test]
fn where_pairing_does_not_pay_wattson_pairs_nothing_and_the_floor_does_not_rise() {
    let (mut c, mut cat, t) = sharing_inputs(1);
    cat.colocation = Some(Colocation::from_gavel_json(COSTLY, "costly").unwrap());
    // Bounds wide enough for every pair: only the gain keeps wattson from pairing.
    c.hints.share_bound = 1.5;
    let policies = [ClusterPolicy::Floor, ClusterPolicy::Wattson, ClusterPolicy::SlurmShards];
    let o = wattson_sim::run(&c, &cat, &t, TRACE, &policies, 1).expect("simulation runs");
    let by = |o: &Outcome, p| o.report.summary(p).unwrap().clone();
    assert_eq!(by(&o, ClusterPolicy::Wattson).shared_jobs, 0, "wattson paired jobs that gain nothing");
    let shards = by(&o, ClusterPolicy::SlurmShards);
    assert!(shards.shared_jobs >= 20, "slurm-shards shared GPUs for {} jobs only", shards.shared_jobs);
    assert!(
        shards.energy_kwh > by(&o, ClusterPolicy::Wattson).energy_kwh,
        "pairing that does not pay cost nothing"
    );
    check_floor_below_bound_keepers(&o);
    // The floor without any pair data: pairs that never pay add only ways it does not take.
    cat.colocation = None;
    let alone = wattson_sim::run(&c, &cat, &t, TRACE, &[ClusterPolicy::Floor], 1).expect("simulation runs");
    let (with, without) =
        (by(&o, ClusterPolicy::Floor).energy_kwh, by(&alone, ClusterPolicy::Floor).energy_kwh);
    assert!(
        with <= without * (1.0 + 1e-9),
        "the floor rose from {without} to {with} kWh with pairs that never pay"
    );
}

#[test]
fn gavels_exactly_zero_slowdowns_are_read_as_missing() {
    let text = read(&data("colocation/gavel/simulation_throughputs.json"));
    let colo = Colocation::from_gavel_json(&text, "gavel").unwrap();
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let table = doc["v100"].as_object().unwrap();
    let names: Vec<&String> = table.keys().filter(|k| k.ends_with(", 1)")).collect();
    let mut zero = 0;
    for (a, victim) in names.iter().enumerate() {
        let alone = table[*victim]["null"].as_f64().unwrap();
        for (b, neighbour) in names.iter().enumerate() {
            if table[*victim][neighbour.as_str()][0].as_f64() == Some(alone) {
                zero += 1;
                assert_eq!(colo.slowdown(a as u16, b as u16), None, "{victim} beside {neighbour}");
            }
        }
    }
    assert_eq!(zero, 80, "docs/sim.md counts 80 ordered V100 pairs shared exactly as alone");
}

#[test]
fn a_job_shares_again_only_where_its_record_still_teaches_a_pair() {
    let (mut c, cat, t) = sharing_inputs(1);
    c.wattson.sim.pair_prior = false;
    c.wattson.tuning.share_try_bound = 0.5;
    let wattson = [ClusterPolicy::Wattson];
    for seed in 1..=10 {
        let o = wattson_sim::run(&c, &cat, &t, TRACE, &wattson, seed).expect("simulation runs");
        let (r, class) = (&o.runs[0], |k: usize| o.jobs[k].share.expect("an opted-in job"));
        // A job's record teaches its class's slowdown beside the one class it shared with, at
        // its end; one that shared with two classes teaches nothing.
        let mut learned: std::collections::BTreeMap<(u16, u16), f64> = Default::default();
        for (k, run) in r.jobs.iter().enumerate() {
            let withs: std::collections::BTreeSet<u16> =
                run.partners.iter().map(|p| class(p.0 as usize)).collect();
            if let (Some(&with), 1) = (withs.first(), withs.len()) {
                let at = learned.entry((class(k), with)).or_insert(run.end);
                *at = at.min(run.end);
            }
        }
        // Each admission that gives a job a second class: its slowdown beside every class it
        // then shares or shared with was learned before, so nothing its record held is lost.
        for (k, run) in r.jobs.iter().enumerate() {
            let mut withs = std::collections::BTreeSet::new();
            for &(other, start, _) in &run.partners {
                withs.insert(class(other as usize));
                if withs.len() < 2 {
                    continue;
                }
                for &n in &withs {
                    let at = learned.get(&(class(k), n)).copied().unwrap_or(f64::INFINITY);
                    assert!(
                        at <= start,
                        "seed {seed}: job {} of class {} shared with classes {withs:?} at {start}, its slowdown beside {n} unlearned",
                        o.jobs[k].id,
                        class(k)
                    );
                }
            }
        }
    }
}
