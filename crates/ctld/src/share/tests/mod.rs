//! The co-location gate on Slurm's text: which held opted-in jobs the planner releases, where.

use wattson_config::Config;
use wattson_config::pairs::PairMeasurement;

use super::*;
use crate::slurm::request::parse_requests;
use crate::slurm::{parse_jobs, parse_nodes};
use crate::{Plan, Planner, snapshot};

/// `small` beside `small`: 5% each; `big` beside `big`: 50%. Fitted rank-one, `big` beside
/// `small` is predicted 50% slower and `small` beside `big` 5%.
fn pairs() -> Pairs {
    let pair =
        |job: &str, with: &str, slowdown| PairMeasurement { job: job.into(), with: with.into(), slowdown };
    Pairs::new(&[pair("small", "small", 0.05), pair("big", "big", 0.5)])
}

/// Node `name` with `gpus` H100s (4 shards each), shards held on the GPUs `used` (`0-1`).
fn node(name: &str, gpus: u32, used: &str) -> String {
    let held = if used.is_empty() {
        "shard:h100:0(IDX:N/A)".to_string()
    } else {
        format!("shard:h100:2(IDX:{used})")
    };
    format!(
        "NodeName={name} CPUAlloc=1 Gres=gpu:h100:{gpus},shard:h100:{} GresUsed=gpu:h100:0(IDX:N/A),{held} \
         State=MIXED Weight=1 NodeAddr=127.0.0.1 Partitions=lab\n",
        gpus * 4
    )
}

/// Where an opted-in job is.
#[derive(Clone, Copy)]
enum Is {
    /// Running on this GPU of its node.
    On(u32),
    /// Held by job_submit.
    Held,
    /// Released by the controller, not started.
    Released,
}

/// An opted-in job's `scontrol -d -o show job` line.
fn request(id: u32, tag: &str, is: Is, excluded: &str) -> String {
    let (gres, mark) = match is {
        Is::On(i) => (format!(" GRES=shard:2(IDX:{i})"), ",released=share"),
        Is::Held => (String::new(), ",held=share"),
        Is::Released => (String::new(), ",released=share"),
    };
    format!(
        "JobId={id} JobName=j UserId=alice(1000){gres} ExcNodeList={excluded} \
         AdminComment=wattson:policy=balanced,slowdown=10%,tag={tag},share=yes,shards=2{mark} TresPerNode=gres:shard:2\n"
    )
}

/// A held or running opted-in job of two GPUs, one task per GPU on shards (`shared_gpus=2`),
/// running on the GPUs `on` as 24.11 shows them (`GRES=shard:4(2/4,2/4)`).
fn request_of_two(id: u32, tag: &str, on: Option<[u32; 2]>) -> String {
    let (gres, mark) = match on {
        Some(gpus) => {
            let each: Vec<&str> =
                (0..=gpus[1]).map(|i| if gpus.contains(&i) { "2/4" } else { "0/4" }).collect();
            (format!(" GRES=shard:4({})", each.join(",")), ",released=share")
        }
        None => (String::new(), ",held=share"),
    };
    format!(
        "JobId={id} JobName=j UserId=alice(1000){gres} ExcNodeList= \
         AdminComment=wattson:policy=balanced,slowdown=10%,tag={tag},share=yes,shards=2,shared_gpus=2{mark} \
         TresPerTask=cpu:1,gres/shard:2\n"
    )
}

/// Squeue lines: running job ids on their node, then pending ones (held, or released).
fn squeue(running: &[(u32, &str)], held: &[u32], released: &[u32]) -> String {
    let mut text = String::new();
    for (id, node) in running {
        text += &format!(
            "{id}|RUNNING|None|1|gres:shard:2|2026-11-23T10:00:00|10:00|1:00:00|100|{node}|lab||0\n"
        );
    }
    for id in held {
        text +=
            &format!("{id}|PENDING|JobHeldAdmin|1|gres:shard:2|2026-11-23T10:05:00|0:00|1:00:00|0||lab||0\n");
    }
    for id in released {
        text +=
            &format!("{id}|PENDING|Resources|1|gres:shard:2|2026-11-23T10:05:00|0:00|1:00:00|90||lab||0\n");
    }
    text
}

fn gate_of(nodes: &str, jobs: &str, requests: &str) -> Gate {
    gate_with(pairs(), nodes, jobs, requests)
}

fn gate_with(pairs: Pairs, nodes: &str, jobs: &str, requests: &str) -> Gate {
    gate_in(Config::default(), pairs, nodes, jobs, requests)
}

/// [`gate_of`] for a controller that shares only jobs that would otherwise wait (`[ctld]
/// share_first = false`).
fn gate_waiting(nodes: &str, jobs: &str, requests: &str) -> Gate {
    let mut config = Config::default();
    config.ctld.tuning.share_first = false;
    gate_in(config, pairs(), nodes, jobs, requests)
}

/// The co-location gate of a fresh planner on `config` and `pairs`, one loop on Slurm's text.
fn gate_in(config: Config, pairs: Pairs, nodes: &str, jobs: &str, requests: &str) -> Gate {
    let mut planner = Planner::new(config).sharing(pairs.clone());
    planner_loop(&mut planner, &pairs, nodes, jobs, requests)
}

/// One loop of `planner` (which keeps what it released) on Slurm's text, 10 minutes after the
/// first job's submission: its co-location gate.
fn planner_loop(planner: &mut Planner, pairs: &Pairs, nodes: &str, jobs: &str, requests: &str) -> Gate {
    plan_at(planner, pairs, nodes, jobs, requests, 600.0).share
}

/// The whole plan of one loop of `planner` on Slurm's text, `after_s` seconds after the first
/// job's submission.
fn plan_at(
    planner: &mut Planner,
    pairs: &Pairs,
    nodes: &str,
    jobs: &str,
    requests: &str,
    after_s: f64,
) -> Plan {
    let (nodes, jobs, requests) =
        (parse_nodes(nodes).unwrap(), parse_jobs(jobs).unwrap(), parse_requests(requests));
    let learned =
        snapshot::Learned { shares: share_jobs(&requests, &jobs, &mut pairs.clone()), ..Default::default() };
    let now = jobs[0].submit as f64 + after_s;
    planner.plan_with(&nodes, &jobs, &requests, &learned, now)
}

/// `line` (a job's) with `ReqNodeList=nodes` added.
fn requiring(line: String, nodes: &str) -> String {
    line.replace(" ExcNodeList=", &format!(" ReqNodeList={nodes} ExcNodeList="))
}

fn released(gate: &Gate) -> Vec<(u32, Place)> {
    gate.release.iter().map(|r| (r.job, r.place.clone())).collect()
}

#[test]
fn a_held_job_is_released_beside_the_job_it_pairs_with_and_one_that_would_break_a_bound_waits() {
    // n1's one GPU runs job 1 (small) alone. Job 2 (small) pairs with it; job 3 (big) would be
    // slowed 50% beside either (bound 10%), job 4's tag is in no pair: both stay held.
    let requests = request(1, "small", Is::On(0), "")
        + &request(2, "small", Is::Held, "")
        + &request(3, "big", Is::Held, "")
        + &request(4, "other", Is::Held, "");
    let gate = gate_of(&node("n1", 1, "0"), &squeue(&[(1, "n1")], &[2, 3, 4], &[]), &requests);
    assert_eq!(released(&gate), [(2, Place::Beside { node: "n1".into(), partner: 1 })]);
    assert_eq!(
        gate.release[0].comment,
        "wattson:policy=balanced,slowdown=10%,tag=small,share=yes,shards=2,released=share"
    );
    assert!(gate.exclude.is_empty());

    // Its user excluded job 1's node: it waits.
    let excluded = request(1, "small", Is::On(0), "") + &request(2, "small", Is::Held, "n1");
    assert!(gate_of(&node("n1", 1, "0"), &squeue(&[(1, "n1")], &[2], &[]), &excluded).release.is_empty());

    // Job 1 shares its GPU with job 2 already: it takes no third.
    let shared = request(1, "small", Is::On(0), "")
        + &request(2, "small", Is::On(0), "")
        + &request(5, "small", Is::Held, "");
    let gate = gate_of(&node("n1", 1, "0"), &squeue(&[(1, "n1"), (2, "n1")], &[5], &[]), &shared);
    assert!(gate.release.is_empty(), "{gate:?}");
}

#[test]
fn without_share_first_a_job_the_free_gpus_hold_starts_alone_off_the_nodes_of_lone_jobs_it_may_not_join() {
    // n1 runs job 1 (small) alone on GPU 0 and has GPU 1 free; n2 has both free. Job 3 (big)
    // would be slowed 50% beside job 1: released alone, kept off n1 and the node it excluded.
    let requests = request(1, "small", Is::On(0), "") + &request(3, "big", Is::Held, "n9");
    let nodes = node("n1", 2, "0") + &node("n2", 2, "") + &node("n9", 2, "");
    let gate = gate_waiting(&nodes, &squeue(&[(1, "n1")], &[3], &[]), &requests);
    assert_eq!(released(&gate), [(3, Place::Alone(vec!["n1".into(), "n9".into()]))]);

    // Job 5 (small) may join job 1: released alone with no exclusion (Slurm may pack it beside
    // job 1). Job 6 (big) may not share with job 5, released and not started: it waits a loop.
    let requests = request(1, "small", Is::On(0), "")
        + &request(5, "small", Is::Held, "")
        + &request(6, "big", Is::Held, "");
    let gate = gate_waiting(&nodes, &squeue(&[(1, "n1")], &[5, 6], &[]), &requests);
    assert_eq!(released(&gate), [(5, Place::Alone(vec![]))]);

    // Next loop job 5 is pending, released: job 6 still waits, and job 3, released before
    // job 1 started, is now kept off job 1's node.
    let requests = request(1, "small", Is::On(0), "")
        + &request(5, "small", Is::Released, "")
        + &request(6, "big", Is::Held, "")
        + &request(3, "big", Is::Released, "");
    let gate = gate_waiting(&nodes, &squeue(&[(1, "n1")], &[6], &[5, 3]), &requests);
    assert!(gate.release.is_empty(), "{gate:?}");
    assert_eq!(gate.exclude, [(3, vec!["n1".to_string()])]);
}

#[test]
fn with_share_first_a_job_the_free_gpus_hold_is_released_beside_the_job_it_pairs_with() {
    // As above: n1 runs job 1 (small) on GPU 0 and has GPU 1 free, n2 is free. Job 5 (small)
    // may join job 1. With [ctld] share_first it is released beside job 1, not alone.
    let requests = request(1, "small", Is::On(0), "") + &request(5, "small", Is::Held, "");
    let nodes = node("n1", 2, "0") + &node("n2", 2, "");
    let jobs = squeue(&[(1, "n1")], &[5], &[]);
    assert_eq!(released(&gate_waiting(&nodes, &jobs, &requests)), [(5, Place::Alone(vec![]))]);
    // The default: share_first.
    let mut planner = Planner::new(Config::default()).sharing(pairs());
    let gate = planner_loop(&mut planner, &pairs(), &nodes, &jobs, &requests);
    assert_eq!(released(&gate), [(5, Place::Beside { node: "n1".into(), partner: 1 })]);
    // Job 3 (big) would be slowed 50% beside job 1: alone, kept off n1, share_first or not.
    let requests = request(1, "small", Is::On(0), "") + &request(3, "big", Is::Held, "");
    let gate = planner_loop(&mut planner, &pairs(), &nodes, &squeue(&[(1, "n1")], &[3], &[]), &requests);
    assert_eq!(released(&gate), [(3, Place::Alone(vec!["n1".into()]))]);
}

#[test]
fn a_released_job_that_still_waits_is_no_longer_the_engines_to_pair_and_gets_a_node_booted() {
    // n1's one GPU runs job 1 (small) alone; n2 sleeps. Job 5 (small), released alone, still
    // pends (short of CPUs on n1, say): the controller no longer places it, so the engine
    // must not count it as paired with job 1, and boots n2 for it.
    let requests = request(1, "small", Is::On(0), "") + &request(5, "small", Is::Released, "");
    let asleep = "NodeName=n2 CPUAlloc=0 Gres=gpu:h100:1,shard:h100:4 \
                  GresUsed=gpu:h100:0(IDX:N/A),shard:h100:0(IDX:N/A) State=IDLE+POWERED_DOWN Weight=1 \
                  NodeAddr=127.0.0.1 Partitions=lab\n";
    let (nodes, jobs) = (node("n1", 1, "0") + asleep, squeue(&[(1, "n1")], &[], &[5]));
    let (pairs, mut planner) = (pairs(), Planner::new(Config::default()).sharing(pairs()));
    // Two hours on: no recent submission keeps a node warm; only job 5 can boot one.
    let plan = plan_at(&mut planner, &pairs, &nodes, &jobs, &requests, 7200.0);
    assert_eq!(plan.power_up, ["n2"], "{plan:?}");
}

#[test]
fn a_job_of_two_gpus_joins_only_a_lone_job_of_two_and_is_kept_off_jobs_of_other_sizes() {
    // n1's two GPUs run job 1 (2 GPUs, small) alone; none is free. Job 5 (2 GPUs, small)
    // joins it on both; job 6 (1 GPU, small) may not: it would share one GPU of job 1's two.
    let requests = request_of_two(1, "small", Some([0, 1]))
        + &request_of_two(5, "small", None)
        + &request(6, "small", Is::Held, "");
    // A job asking shards per task shows no per-node request (24.11's squeue): the GPUs it
    // shares are the ones job_submit recorded.
    let per_task = |jobs: String| jobs.replace("|gres:shard:2|", "|N/A|");
    let jobs = per_task(squeue(&[(1, "n1")], &[5, 6], &[]));
    let shares = share_jobs(&parse_requests(&requests), &parse_jobs(&jobs).unwrap(), &mut pairs());
    assert_eq!((shares[&1].gpus, shares[&1].placed.clone()), (2, Some(("n1".to_string(), vec![0, 1]))));
    assert_eq!((shares[&5].gpus, shares[&6].gpus), (2, 1));
    let gate = gate_of(&node("n1", 2, "0-1"), &jobs, &requests);
    assert_eq!(released(&gate), [(5, Place::Beside { node: "n1".into(), partner: 1 })]);

    // Both run on GPUs 0 and 1: partners.
    let both = request_of_two(1, "small", Some([0, 1])) + &request_of_two(5, "small", Some([0, 1]));
    let shares = share_jobs(
        &parse_requests(&both),
        &parse_jobs(&squeue(&[(1, "n1"), (5, "n1")], &[], &[])).unwrap(),
        &mut pairs(),
    );
    assert!(shares[&1].partnered && shares[&5].partnered);

    // A third GPU of n1 runs job 2 (1 GPU, small) alone: Slurm could put job 5 across jobs 1
    // and 2, so it waits.
    let requests = request_of_two(1, "small", Some([0, 1]))
        + &request(2, "small", Is::On(2), "")
        + &request_of_two(5, "small", None);
    let running = [(1, "n1"), (2, "n1")];
    let gate = gate_of(&node("n1", 3, "0-2"), &per_task(squeue(&running, &[5], &[])), &requests);
    assert!(gate.release.is_empty(), "{gate:?}");

    // n2's free GPUs hold it: released alone, kept off n1, share_first or not (with it, the
    // engine pairs job 5 with job 1, whose node it may not be placed on).
    let nodes = node("n1", 3, "0-2") + &node("n2", 4, "");
    let jobs = per_task(squeue(&running, &[5], &[]));
    for gate in [gate_of(&nodes, &jobs, &requests), gate_waiting(&nodes, &jobs, &requests)] {
        assert_eq!(released(&gate), [(5, Place::Alone(vec!["n1".into()]))]);
    }
}

#[test]
fn the_pair_file_names_classes_by_tag_and_predicts_pairs_never_measured() {
    let p = pairs();
    assert_eq!((p.class("big"), p.class("small"), p.class("other")), (Some(0), Some(1), None));
    let c = |job, class, bound| Candidate { job, class, gpus: 1, bound, left_s: f64::INFINITY };
    let sharing = p.sharing();
    assert!((slowdowns(&sharing, &c(1, 1, 0.1), &c(2, 1, 0.1)).unwrap() - 0.1).abs() < 1e-9);
    // Each tag measured only beside its own kind: nothing relates big's sensitivity to small's
    // pressure, so big beside small is not predicted, whatever the bounds.
    assert_eq!(slowdowns(&sharing, &c(1, 0, 5.0), &c(2, 1, 5.0)), None, "nothing relates them");
    // Small measured beside big (10%) links them: big beside small is 0.5 · 0.05 / 0.1 = 25%.
    let pair =
        |job: &str, with: &str, slowdown| PairMeasurement { job: job.into(), with: with.into(), slowdown };
    let p = Pairs::new(&[pair("small", "small", 0.05), pair("big", "big", 0.5), pair("small", "big", 0.1)]);
    let sharing = p.sharing();
    assert_eq!(slowdowns(&sharing, &c(1, 0, 0.2), &c(2, 1, 0.1)), None, "25% over a 20% bound");
    assert!(slowdowns(&sharing, &c(1, 0, 0.3), &c(2, 1, 0.1)).is_some(), "within a 30% bound");
}

#[test]
fn the_controllers_exclusions_follow_the_lone_jobs_and_the_jobs_own_stay() {
    let nodes = node("n1", 2, "0") + &node("n2", 2, "") + &node("n9", 2, "");
    let (pairs, mut planner) = (pairs(), Planner::new(Config::default()).sharing(pairs()));
    let mut planner_loop =
        |jobs: &str, requests: &str| planner_loop(&mut planner, &pairs, &nodes, jobs, requests);
    // Released alone off n1 (job 1, which it may not join) and n9 (its user's).
    let gate = planner_loop(
        &squeue(&[(1, "n1")], &[3], &[]),
        &(request(1, "small", Is::On(0), "") + &request(3, "big", Is::Held, "n9")),
    );
    assert_eq!(released(&gate), [(3, Place::Alone(vec!["n1".into(), "n9".into()]))]);
    // Job 1 ended before job 3 started: n1 is no longer kept off; n9 is.
    let gate = planner_loop(
        &squeue(&[(4, "n2")], &[], &[3]),
        &(request(4, "other", Is::On(0), "") + &request(3, "big", Is::Released, "n[1,9]")),
    );
    assert_eq!(
        gate.exclude,
        [(3, vec!["n2".to_string(), "n9".to_string()])],
        "job 4 (on n2) is no partner either"
    );
}

#[test]
fn a_job_released_beside_a_partner_that_ends_before_it_starts_gets_its_own_node_list_back() {
    // Job 2's user asked for n1 or n2 (`--nodelist` of several, `-N1`), then for no node; the
    // controller goes on, or another starts from its state file.
    let nodes = node("n1", 1, "0") + &node("n2", 1, "0");
    let state = tempfile::tempdir().unwrap();
    let both = || vec!["n1".to_string(), "n2".to_string()];
    for (own, back, restarted) in [("n[1-2]", both(), false), ("", vec![], false), ("n[1-2]", both(), true)] {
        let (pairs, mut planner) = (pairs(), Planner::new(Config::default()).sharing(pairs()));
        let running = [(1, "n1"), (4, "n2")];
        let lone = request(1, "small", Is::On(0), "") + &request(4, "big", Is::On(0), "");
        let held = lone.clone() + &requiring(request(2, "small", Is::Held, ""), own);
        let gate = planner_loop(&mut planner, &pairs, &nodes, &squeue(&running, &[2], &[]), &held);
        assert_eq!(released(&gate), [(2, Place::Beside { node: "n1".into(), partner: 1 })], "{own}");
        // Slurm has not started it yet: its partner still waits for it, nothing changes.
        let beside = requiring(request(2, "small", Is::Released, "n2"), "n1");
        let gate =
            planner_loop(&mut planner, &pairs, &nodes, &squeue(&running, &[], &[2]), &(lone + &beside));
        assert_eq!((gate.require.len(), gate.exclude.len()), (0, 0), "{own}: {gate:?}");
        if restarted {
            let file = state.path().join("ctld.json");
            crate::power_status::save(planner.ledger(), &file).unwrap();
            let before = crate::power_status::load(&file).unwrap();
            planner = Planner::new(Config::default()).sharing(pairs.clone()).going_on(before);
        }
        // Job 1 ended first: job 2 gets its own node list back, kept off n2 (job 4, big).
        let after = |requested: &str| {
            (
                squeue(&[(4, "n2")], &[], &[2]),
                request(4, "big", Is::On(0), "")
                    + &requiring(request(2, "small", Is::Released, "n2"), requested),
            )
        };
        let (jobs, requests) = after("n1");
        let gate = planner_loop(&mut planner, &pairs, &nodes, &jobs, &requests);
        assert_eq!(gate.require, [(2, back)], "{own}, restarted: {restarted}");
        assert_eq!(gate.exclude, [], "{own}: n2 is excluded already");
        // Given back once.
        let (jobs, requests) = after(own);
        let gate = planner_loop(&mut planner, &pairs, &nodes, &jobs, &requests);
        assert!(gate.require.is_empty(), "{own}: {gate:?}");
    }
}

#[test]
fn a_job_released_beside_a_partner_that_still_pends_after_the_patience_gets_its_node_list_back() {
    // Job 2 joins job 1 on n1 but pends there (short of CPUs on n1, say) while job 1 runs on:
    // past BESIDE_PATIENCE_S it gets its own node list back, free to run elsewhere.
    let nodes = node("n1", 2, "0") + &node("n2", 1, "");
    let mut config = Config::default();
    config.ctld.tuning.share_first = true;
    let (pairs, mut planner) = (pairs(), Planner::new(config).sharing(pairs()));
    let lone = request(1, "small", Is::On(0), "");
    let held = lone.clone() + &request(2, "small", Is::Held, "");
    let gate = planner_loop(&mut planner, &pairs, &nodes, &squeue(&[(1, "n1")], &[2], &[]), &held);
    assert_eq!(released(&gate), [(2, Place::Beside { node: "n1".into(), partner: 1 })]);
    let pending = lone + &requiring(request(2, "small", Is::Released, ""), "n1");
    let jobs = squeue(&[(1, "n1")], &[], &[2]);
    let after =
        |planner: &mut Planner, s: f64| plan_at(planner, &pairs, &nodes, &jobs, &pending, 600.0 + s).share;
    assert!(after(&mut planner, BESIDE_PATIENCE_S - 1.0).require.is_empty(), "still within its patience");
    assert_eq!(after(&mut planner, BESIDE_PATIENCE_S + 1.0).require, [(2, vec![])]);
    assert!(after(&mut planner, BESIDE_PATIENCE_S + 2.0).require.is_empty(), "given back once");
}

#[test]
fn a_job_released_beside_a_partner_gets_its_node_list_back_once_a_job_it_may_not_join_runs_there() {
    let n1 = |gpu_used: &str, shards_on: &str| {
        format!(
            "NodeName=n1 CPUAlloc=2 Gres=gpu:h100:2,shard:h100:8 GresUsed=gpu:h100:{gpu_used},\
             shard:h100:2(IDX:{shards_on}) State=MIXED Weight=1 NodeAddr=127.0.0.1 Partitions=lab\n"
        )
    };
    let (pairs, mut planner) = (pairs(), Planner::new(Config::default()).sharing(pairs()));
    // Job 1 (small) alone on GPU 0 of n1, job 8 (not opted in) on GPU 1: job 2 joins job 1.
    let whole = "8|RUNNING|None|1|gres:gpu:1|2026-11-23T10:00:00|10:00|1:00:00|100|n1|lab||0\n";
    let jobs = squeue(&[(1, "n1")], &[2], &[]) + whole;
    let held = request(1, "small", Is::On(0), "") + &request(2, "small", Is::Held, "");
    let gate = planner_loop(&mut planner, &pairs, &n1("1(IDX:1)", "0"), &jobs, &held);
    assert_eq!(released(&gate), [(2, Place::Beside { node: "n1".into(), partner: 1 })]);
    // Before it starts, job 8 ends and job 5 (big, 50% slower beside it) starts alone on GPU 1.
    let jobs = squeue(&[(1, "n1"), (5, "n1")], &[], &[2]);
    let requests = request(1, "small", Is::On(0), "")
        + &request(5, "big", Is::On(1), "")
        + &requiring(request(2, "small", Is::Released, ""), "n1");
    let gate = planner_loop(&mut planner, &pairs, &n1("0(IDX:N/A)", "0-1"), &jobs, &requests);
    assert_eq!(gate.require, [(2, vec![])], "{gate:?}");
    assert_eq!(gate.exclude, [(2, vec!["n1".to_string()])]);
}

#[test]
fn a_gpu_running_an_opted_in_job_is_not_free_though_gres_used_forgot_it() {
    // 22.05 shows no shard in use once one of two jobs on a GPU ends; job 1 still runs on it.
    let requests = request(1, "small", Is::On(0), "") + &request(3, "big", Is::Held, "");
    let gate = gate_of(&node("n1", 1, ""), &squeue(&[(1, "n1")], &[3], &[]), &requests);
    assert!(gate.release.is_empty(), "{gate:?}");
}

mod learning;
