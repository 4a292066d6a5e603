//! The planner on Slurm output: what it may and may not ask for.

use super::*;
use crate::slurm::{parse_jobs, parse_nodes};
use wattson_engine::cluster::QueueOrder;
use wattson_protocol::Pace;

const NOW: f64 = 1_795_500_000.0;

fn node(name: &str, state: &str, used: u32, extra: &str) -> String {
    let cpus = if used > 0 { 1 } else { 0 };
    format!(
        "NodeName={name} CPUAlloc={cpus} Gres=gpu:h100:4 GresUsed=gpu:h100:{used}(IDX:N/A) State={state} Partitions=lab,wattson {extra}\n"
    )
}

#[test]
fn idle_nodes_sleep_busy_and_admin_held_ones_never() {
    let text = node("busy", "MIXED", 2, "")
        + &node("idle", "IDLE", 0, "")
        + &node("drained", "IDLE+DRAIN", 0, "Reason=disk [root@2026-11-23T10:00:00]")
        + &node("reserved", "IDLE+RESERVED", 0, "")
        + &node("down", "DOWN", 0, "Reason=bad [root@2026-11-23T10:00:00]")
        + &node("asleep", "IDLE+POWERED_DOWN", 0, "");
    let nodes = parse_nodes(&text).unwrap();
    let jobs =
        parse_jobs("5|RUNNING|None|1|gres:gpu:2|2026-11-22T10:00:00|1:00:00|2:00:00|1|n1|lab||0\n").unwrap();
    let plan = Planner::new(Config::default()).plan(&nodes, &jobs, NOW);
    assert_eq!(plan.power_down, ["idle"], "{plan:?}");
    // Weights for the nodes wattson manages only (all at Slurm's default 1 so far).
    let weighted: Vec<&str> = plan.weights.iter().flat_map(|(_, n)| n.iter().map(String::as_str)).collect();
    assert_eq!(weighted.len(), 3, "{plan:?}");
    assert!(["busy", "idle", "asleep"].iter().all(|n| weighted.contains(n)), "{plan:?}");
    assert!(plan.power_up.is_empty() && plan.retry.is_empty() && plan.give_up.is_empty(), "{plan:?}");
}

#[test]
fn a_queue_boots_a_sleeping_node_and_a_failed_resume_is_retried_then_given_up() {
    let mut config = Config::default();
    config.ctld.resume_retries = 1;
    config.ctld.resume_retry_pause = Duration::from_secs(10);
    let mut planner = Planner::new(config);
    let nodes =
        parse_nodes(&(node("n1", "IDLE+POWERED_DOWN", 0, "") + &node("n2", "IDLE+POWERED_DOWN", 0, "")))
            .unwrap();
    let queued =
        parse_jobs("9|PENDING|Resources|1|gres:gpu:4|2026-11-23T10:00:00|0:00|1:00:00|1||lab||0\n").unwrap();
    let plan = planner.plan(&nodes, &queued, NOW);
    assert_eq!(plan.power_up.len(), 1, "{plan:?}");
    assert!(plan.power_down.is_empty());

    let failed = |reason: &str| {
        parse_nodes(&node(
            "n1",
            "DOWN+POWERED_DOWN+NOT_RESPONDING",
            0,
            &format!("Reason={reason} [slurm@2026-11-23T10:00:00]"),
        ))
        .unwrap()
    };
    let timed_out = failed("ResumeTimeout reached");
    assert!(planner.plan(&timed_out, &[], NOW).retry.is_empty(), "a pause before the first retry");
    assert_eq!(planner.plan(&timed_out, &[], NOW + 10.0).retry, [("n1".to_string(), 1)]);
    assert_eq!(planner.plan(&failed(slurm::RESUME_FAILED), &[], NOW + 40.0).give_up, [("n1".to_string(), 1)]);
    // Once given up, the node is an administrator's: nothing more is asked.
    let plan = planner.plan(&failed(slurm::GAVE_UP), &[], NOW + 100.0);
    assert!(plan.retry.is_empty() && plan.give_up.is_empty() && plan.power_up.is_empty(), "{plan:?}");
}

#[test]
fn the_warm_set_follows_the_configured_shortfall() {
    // One full node, two idle; two 2-GPU jobs submitted in the last hour. With the default
    // node model (400 W base, four H100s idle at 72 W by the engine's prior) the break-even
    // time is (500*60 + 700*300 - 15*360) / (688 - 15) = 348.6 s and the horizon 300 s of boot
    // plus that, so a further job within it has probability 1 - exp(-2 * 648.6 / 3600) =
    // 0.303: above a shortfall of 0.25, one idle node stays warm; under 0.5, both sleep.
    let nodes = parse_nodes(
        &(node("full", "ALLOCATED", 4, "") + &node("a", "IDLE", 0, "") + &node("b", "IDLE", 0, "")),
    )
    .unwrap();
    let jobs = parse_jobs(
        "5|RUNNING|None|1|gres:gpu:2|2026-11-23T10:00:00|1:00:00|2:00:00|1|full|lab||0\n\
         6|RUNNING|None|1|gres:gpu:2|2026-11-23T10:00:00|1:00:00|2:00:00|1|full|lab||0\n",
    )
    .unwrap();
    let submitted = jobs[0].submit as f64;
    let plan_with = |shortfall: f64| {
        let mut config = Config::default();
        config.ctld.tuning.warm_shortfall = shortfall;
        Planner::new(config).plan(&nodes, &jobs, submitted + 600.0)
    };
    let (tight, lax) = (plan_with(0.25), plan_with(0.5));
    assert_eq!((tight.warm_target, tight.power_down.len()), (1, 1), "{tight:?}");
    assert_eq!((lax.warm_target, lax.power_down.len()), (0, 2), "{lax:?}");
}

#[test]
fn with_the_response_ratio_order_pending_jobs_get_nice_offsets_in_the_engines_order() {
    // A full node; job 10 (4 GPUs, 1 h limit) queued before job 11 (1 GPU, 1 min limit), each
    // with the priority Slurm gave it. Waits of about an hour: 11's wait per square root of
    // GPU-seconds is some 15 times 10's, so 11 goes first: the most negative nice (-weight),
    // 10 half of it. Slurm subtracts them from the priorities it computes.
    let nodes = parse_nodes(&node("full", "ALLOCATED", 4, "")).unwrap();
    let jobs = parse_jobs(
        "5|RUNNING|None|1|gres:gpu:4|2026-11-23T10:00:00|1:00:00|2:00:00|4294901760|full|lab||0\n\
         10|PENDING|Resources|1|gres:gpu:4|2026-11-23T10:00:00|0:00|1:00:00|4294901759||lab||0\n\
         11|PENDING|Priority|1|gres:gpu:1|2026-11-23T10:00:30|0:00|1:00|4294901758||lab||0\n",
    )
    .unwrap();
    let now = jobs[0].submit as f64 + 3600.0;
    let mut config = Config::default();
    assert!(Planner::new(config.clone()).plan(&nodes, &jobs, now).nice.is_empty(), "fifo: Slurm's own");
    config.ctld.tuning.queue_order = QueueOrder::ResponseRatio;
    config.ctld.order_weight = 1000;
    let plan = Planner::new(config.clone()).plan(&nodes, &jobs, now);
    assert_eq!(plan.nice, [(11, -1000), (10, -500)], "{plan:?}");
    // Once Slurm has them, nothing more is asked; a held job is not ranked.
    let set = parse_jobs(
        "10|PENDING|Priority|1|gres:gpu:4|2026-11-23T10:00:00|0:00|1:00:00|4294901758||lab||-500\n\
         11|PENDING|Resources|1|gres:gpu:1|2026-11-23T10:00:30|0:00|1:00|4294901759||lab||-1000\n\
         12|PENDING|JobHeldUser|1|gres:gpu:1|2026-11-23T10:00:00|0:00|1:00|0||lab||0\n",
    )
    .unwrap();
    assert!(Planner::new(config).plan(&nodes, &set, now).nice.is_empty());
}

#[test]
fn a_queued_job_paces_only_the_running_job_it_waits_for_and_other_pending_reasons_none() {
    // n1 and n2 full, each with a 4-GPU job (5 ends in 10 min, 6 in 50 min), n3 asleep. Job 9
    // asks for n2 (`-w n2`) and has waited longer than its 10-minute limit: job 6 goes to full
    // speed, job 5 keeps saving though it ends first.
    let nodes = parse_nodes(
        &(node("n1", "ALLOCATED", 4, "")
            + &node("n2", "ALLOCATED", 4, "")
            + &node("n3", "IDLE+POWERED_DOWN", 0, "")),
    )
    .unwrap();
    let running = "5|RUNNING|None|1|gres:gpu:4|2026-11-23T10:00:00|50:00|1:00:00|1|n1|lab||0\n\
                   6|RUNNING|None|1|gres:gpu:4|2026-11-23T10:00:00|10:00|1:00:00|1|n2|lab||0\n";
    let pending = |reason: &str, requested: &str| {
        parse_jobs(&format!(
            "{running}9|PENDING|{reason}|1|gres:gpu:4|2026-11-23T10:00:00|0:00|10:00|1||lab|{requested}|0\n"
        ))
        .unwrap()
    };
    let now = pending("Resources", "").first().unwrap().submit as f64 + 3600.0;
    let paces = |jobs: &[Job]| -> Vec<(u32, Pace)> {
        Planner::new(Config::default())
            .plan(&nodes, jobs, now)
            .running
            .into_iter()
            .map(|(j, p, _)| (j, p))
            .collect()
    };
    assert_eq!(paces(&pending("Resources", "n2")), [(5, Pace::Saving), (6, Pace::Full)]);
    // Slurm's reason for a job behind another on the nodes it asked for (22.05, measured).
    let behind = pending("ReqNodeNotAvail, UnavailableNodes:n2", "n2");
    assert_eq!(paces(&behind), [(5, Pace::Saving), (6, Pace::Full)]);
    // Free to run anywhere in its partition: n3's GPUs are free (asleep), so it waits for no
    // running job.
    assert_eq!(paces(&pending("Resources", "")), [(5, Pace::Saving), (6, Pace::Saving)]);
    // Asking for n1 (pending behind a job that waits): job 5 is the one it waits for.
    assert_eq!(paces(&pending("Priority", "n1")), [(5, Pace::Full), (6, Pace::Saving)]);
    // Pending for a QOS limit, a dependency, a begin time, a reservation or a hold: nothing
    // would start if GPUs were freed, so no running job is raised; nor before Slurm's
    // scheduler has given a reason (a QOS limit may hold the job: seen on real Slurm).
    for reason in
        ["QOSMaxGRESPerUser", "Dependency", "BeginTime", "Reservation", "JobHeldUser", "AssocGrpGRES"]
    {
        assert_eq!(paces(&pending(reason, "n2")), [(5, Pace::Saving), (6, Pace::Saving)], "{reason}");
    }
    // Asking only for a node an administrator drained: nothing it waits for can be freed.
    let drained = parse_nodes(
        &(node("n1", "ALLOCATED", 4, "")
            + &node("n2", "ALLOCATED+DRAIN", 4, "Reason=fan [root@2026-11-23T10:00:00]")
            + &node("n3", "IDLE+POWERED_DOWN", 0, "")),
    )
    .unwrap();
    let plan = Planner::new(Config::default()).plan(
        &drained,
        &pending("ReqNodeNotAvail, UnavailableNodes:n2", "n2"),
        now,
    );
    assert!(plan.running.iter().all(|(_, p, _)| *p == Pace::Saving), "{plan:?}");
    // A queued job in a partition with none of n1-n3 raises nothing either.
    let elsewhere = parse_jobs(&format!(
        "{running}9|PENDING|Resources|1|gres:gpu:4|2026-11-23T10:00:00|0:00|10:00|1||other||0\n"
    ))
    .unwrap();
    assert_eq!(paces(&elsewhere), [(5, Pace::Saving), (6, Pace::Saving)]);
}

#[test]
fn the_gpu_types_slurm_names_reach_the_engine_with_their_idle_draw() {
    let text = "NodeName=a CPUAlloc=0 Gres=gpu:a100:4 State=IDLE\n\
                NodeName=h CPUAlloc=0 Gres=gpu:h100:4 State=IDLE\n\
                NodeName=a2 CPUAlloc=0 Gres=gpu:a100:4 State=IDLE\n";
    let nodes = parse_nodes(text).unwrap();
    let view = snapshot::Memory::default().view(
        NOW,
        &snapshot::policy(&Config::default().ctld),
        None,
        &nodes,
        &[],
        &Default::default(),
    );
    let types: Vec<u16> = view.nodes.iter().map(|n| n.gpu_type).collect();
    assert_eq!(types, [0, 1, 0]);
    let idle: Vec<f64> = view.gpu_types.iter().map(|t| t.idle_w).collect();
    let prior = |name: &str| wattson_engine::prior(name).unwrap().idle_w;
    assert_eq!(idle, [prior("A100"), prior("H100")]);
    // [ctld] gpu_idle_w holds for every type.
    let view = snapshot::Memory::default().view(
        NOW,
        &snapshot::policy(&Config::default().ctld),
        Some(40.0),
        &nodes,
        &[],
        &Default::default(),
    );
    assert!(view.gpu_types.iter().all(|t| t.idle_w == 40.0));
}

#[test]
fn under_a_budget_running_jobs_go_down_a_level_before_a_held_job_is_released_and_it_waits_when_even_that_is_short()
 {
    // n1 runs job 5 on 2 of its 4 H100s (at its top level, 700 W; its table has 300 W within
    // its 10% bound); n2 is idle; job 9 (1 GPU) is held for the budget. Committed: n1 at
    // 400 W + 4 x 72 W, n2 as it powers down (500 W), job 5's GPUs 2 x (700 - 72) W: 2444 W;
    // job 9's start on n1 adds 628 W.
    let nodes = parse_nodes(&(node("n1", "MIXED", 2, "") + &node("n2", "IDLE", 0, ""))).unwrap();
    let jobs = parse_jobs(
        "5|RUNNING|None|1|gres:gpu:2|2026-11-23T10:00:00|10:00|1:00:00|1|n1|lab||0\n\
         9|PENDING|JobHeldAdmin|1|gres:gpu:1|2026-11-23T10:00:00|0:00|1:00:00|0||lab||0\n",
    )
    .unwrap();
    let requests = crate::slurm::request::parse_requests(
        "JobId=9 UserId=alice(1000) Priority=0 JobState=PENDING Reason=JobHeldAdmin \
         AdminComment=wattson:policy=perf,held=budget TresPerNode=gres:gpu:1\n",
    );
    let level = |setting: f64, slowdown_hi: f64| wattson_engine::cluster::Level {
        setting,
        slowdown_hi,
        energy_ratio: 1.0,
        power_w: setting,
        cap_w: setting,
    };
    let mut learned = snapshot::Learned::default();
    learned.levels.insert(
        5,
        crate::nodes::JobLevels { levels: vec![level(300.0, 0.05), level(700.0, 0.0)], level: 1, bound: 0.1 },
    );
    learned.held = budget::held(&jobs, &requests);
    learned.gpu_max_w = 700.0;
    let now = jobs[0].submit as f64 + 600.0;
    let plan = |budget_w: f64| {
        let mut config = Config::default();
        config.budget.power_w = Some(budget_w);
        let plan = Planner::new(config).plan_with(&nodes, &jobs, &requests, &learned, now);
        let released: Vec<u32> = plan.release.iter().map(|(j, _)| *j).collect();
        (released, plan.running[0].1)
    };
    // Room for job 9 as things are (3072 W under 96% of 4000 W): job 5 keeps its own pace.
    assert_eq!(plan(4000.0), (vec![9], Pace::Saving));
    // Room only once job 5 goes down to 300 W (idle n2 powering down counts at its 500 W
    // shutdown draw): 3072 W over 96% of 3000 W, then 2272 W under it.
    assert_eq!(plan(3000.0), (vec![9], Pace::Level(0)));
    // Not even then: job 9 stays held, job 5 stays down.
    assert_eq!(plan(2000.0), (vec![], Pace::Level(0)));
    // The release carries the controller's mark in place of job_submit's.
    let mut config = Config::default();
    config.budget.power_w = Some(4000.0);
    let plan = Planner::new(config).plan_with(&nodes, &jobs, &requests, &learned, now);
    assert_eq!(plan.release, [(9, "wattson:policy=perf,released=budget".to_string())]);
}

/// What job 5's node reports: two levels, its lower one 5% slower (pessimistically), and job 5
/// at it, bound 10%.
fn slowed_job_5() -> snapshot::Learned {
    let level = |setting: f64, slowdown_hi: f64| wattson_engine::cluster::Level {
        setting,
        slowdown_hi,
        energy_ratio: setting / 700.0,
        power_w: setting,
        cap_w: setting,
    };
    let mut learned = snapshot::Learned::default();
    learned.levels.insert(
        5,
        crate::nodes::JobLevels { levels: vec![level(300.0, 0.05), level(700.0, 0.0)], level: 0, bound: 0.1 },
    );
    learned
}

/// Job 5 on n1's 4 GPUs, `elapsed` into its 8 h limit.
fn at(elapsed: &str) -> Vec<crate::slurm::Job> {
    parse_jobs(&format!("5|RUNNING|None|1|gres:gpu:4|2026-11-23T10:00:00|{elapsed}|8:00:00|1|n1|lab||0\n"))
        .unwrap()
}

#[test]
fn a_slowed_job_is_paced_full_once_it_has_fallen_max_lag_s_behind() {
    // n1's 4 GPUs run job 5 at its lower level, no job waits: 14,000 s later it has fallen
    // 14,000 · 0.05 / 1.05 = 667 s behind its full-speed pace.
    let nodes = parse_nodes(&node("n1", "ALLOCATED", 4, "")).unwrap();
    let learned = slowed_job_5();
    let t0 = at("10:00")[0].submit as f64 + 600.0;
    let paced = |max_lag_s: f64| {
        let mut config = Config::default();
        config.ctld.tuning.max_lag_s = max_lag_s;
        let mut planner = Planner::new(config);
        assert_eq!(planner.plan_with(&nodes, &at("10:00"), &[], &learned, t0).running[0].1, Pace::Saving);
        planner.plan_with(&nodes, &at("3:53:20"), &[], &learned, t0 + 14_000.0).running[0].1
    };
    // Past the default 600 s it runs at full speed; under a cap of 1,000 s it keeps its pace.
    assert_eq!(Config::default().ctld.tuning.max_lag_s, 600.0);
    assert_eq!(paced(600.0), Pace::Full);
    assert_eq!(paced(1000.0), Pace::Saving);
}

#[test]
fn a_restarted_controller_goes_on_from_the_lag_and_wait_cost_it_saved() {
    // Job 5 runs slowed as above; the controller saves its state 7,000 s in (333 s behind)
    // and is restarted: 7,000 s later the job is 667 s behind, past the 600 s cap, as if the
    // controller had never stopped. A controller that forgot would start it again from zero.
    let nodes = parse_nodes(&node("n1", "ALLOCATED", 4, "")).unwrap();
    let learned = slowed_job_5();
    let t0 = at("10:00")[0].submit as f64 + 600.0;
    let mut first = Planner::new(Config::default());
    first.plan_with(&nodes, &at("10:00"), &[], &learned, t0);
    assert_eq!(
        first.plan_with(&nodes, &at("1:56:40"), &[], &learned, t0 + 7_000.0).running[0].1,
        Pace::Saving
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ctld.json");
    power_status::save(first.ledger(), &path).unwrap();

    let mut restarted = Planner::new(Config::default()).going_on(power_status::saved(&path).unwrap());
    let plan = restarted.plan_with(&nodes, &at("3:53:20"), &[], &learned, t0 + 14_000.0);
    assert_eq!(plan.running[0].1, Pace::Full);
    first.plan_with(&nodes, &at("3:53:20"), &[], &learned, t0 + 14_000.0);
    assert_eq!(restarted.memory.decider, first.memory.decider, "as if never stopped");

    // A controller that starts afresh sees no lag yet.
    let mut fresh = Planner::new(Config::default());
    assert_eq!(
        fresh.plan_with(&nodes, &at("3:53:20"), &[], &learned, t0 + 14_000.0).running[0].1,
        Pace::Saving
    );
}

#[test]
fn past_the_wait_cost_bound_or_a_closed_gate_running_jobs_are_raised_and_the_status_says_so() {
    // n1's 4 GPUs run job 5 at its lower level (5% slower, bound 10%); after an hour job 9
    // (4 GPUs) has waited 10 minutes for them: 171 s of job 5's lag is 171 s of its wait.
    let nodes = parse_nodes(&node("n1", "ALLOCATED", 4, "")).unwrap();
    let alone =
        parse_jobs("5|RUNNING|None|1|gres:gpu:4|2026-11-23T10:00:00|10:00|4:00:00|1|n1|lab||0\n").unwrap();
    let queued = parse_jobs(
        "5|RUNNING|None|1|gres:gpu:4|2026-11-23T10:00:00|1:10:00|4:00:00|1|n1|lab||0\n\
         9|PENDING|Resources|1|gres:gpu:4|2026-11-23T11:00:00|0:00|1:00:00|0||lab||0\n",
    )
    .unwrap();
    let learned = slowed_job_5();
    let t0 = alone[0].submit as f64 + 600.0;
    let run = |bound: f64| {
        let mut config = Config::default();
        config.ctld.tuning.max_wait_cost = bound;
        let mut planner = Planner::new(config);
        planner.plan_with(&nodes, &alone, &[], &learned, t0);
        let plan = planner.plan_with(&nodes, &queued, &[], &learned, t0 + 3600.0);
        (plan.running[0].1, planner.ledger().wait_cost)
    };
    let (pace, status) = run(0.05);
    assert_eq!(pace, Pace::Full);
    let lag = 3600.0 * 0.05 / 1.05;
    let expected = lag / (600.0 - lag);
    assert!(
        (status.observed - expected).abs() < 1e-9 && status.guarding && status.bound == 0.05,
        "{status:?}"
    );
    // Under a looser bound the guard is off, but the observed cost is 40% of a bound of 1: a
    // job is slowed only while 40% of the GPUs are unallocated, and none is.
    let (pace, status) = run(1.0);
    assert_eq!(pace, Pace::Full);
    assert!(!status.guarding && (status.observed - expected).abs() < 1e-9, "{status:?}");
    assert!((status.gate - expected).abs() < 1e-9, "{status:?}");
    // With no bound job 5 keeps its pace: job 9 is not late yet (it waits for a running job
    // only once it waited its own time limit).
    let (pace, status) = run(wattson_engine::cluster::wait_cost::UNBOUNDED);
    assert_eq!(pace, Pace::Saving);
    assert!(!status.guarding && status.gate == 0.0, "{status:?}");

    // `dvfs_min_free`: no job is slowed while too few GPUs are unallocated (job 5 holds all
    // four of n1's).
    let gated = |share: f64| {
        let mut config = Config::default();
        config.ctld.tuning.dvfs_min_free = share;
        Planner::new(config).plan_with(&nodes, &alone, &[], &learned, t0).running[0].1
    };
    assert_eq!((gated(0.0), gated(0.25)), (Pace::Saving, Pace::Full));

    // `dvfs_horizon_s`: nor while the GPUs expected free that far ahead fall short (none is
    // free, none is freed within a minute, and the last hour's submission forecasts more).
    let paced = |horizon: u64, raise: f64| {
        let mut config = Config::default();
        config.ctld.tuning.dvfs_horizon_s = horizon as f64;
        config.ctld.tuning.congestion_raise = raise;
        Planner::new(config).plan_with(&nodes, &alone, &[], &learned, t0).running[0].1
    };
    assert_eq!((paced(0, 1.0), paced(60, 1.0)), (Pace::Saving, Pace::Full));
    // `congestion_raise` below 1: the engine's level that gives up that share of the job's
    // bound (half of it: the 5% level still fits; nine tenths: only the top does).
    assert_eq!((paced(60, 0.5), paced(60, 0.9)), (Pace::Level(0), Pace::Level(1)));
}
