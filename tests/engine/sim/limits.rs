//! The simulator under what Slurm knows: time limits (backfill and the policies see limits, a
//! job past its limit is killed), the `gpu_types` column, and the comparison at one order.

use super::*;

/// Slurm's backfill sees time limits, not run times: a short job with a long limit cannot slip
/// in before a blocked head, though its true run would have ended in time; with perfect
/// knowledge (the what-if) it does. A job that runs past its limit is killed there.
#[test]
fn backfill_sees_limits_and_a_job_past_its_limit_is_killed() {
    let (c, cat) = inputs();
    // 79 of 80 nodes busy until 1000 s (limit 1000 s); a whole-cluster job blocks the queue;
    // an 8-GPU job of 500 s asks for 1 h; a last job runs 2 h on a 1 h limit.
    let text = "submit,gpus,duration,tag,time_limit\n0,632,1000,bert,1000\n1,640,100,bert,3600\n\
                2,8,500,bert,3600\n3000,8,7200,bert,3600\n";
    let t = wattson_sim::trace::parse(text, "g.csv", TraceFormat::Auto).unwrap();
    let starts = |perfect: bool| {
        let mut c = c.clone();
        c.limits.perfect = perfect;
        let o = wattson_sim::run(&c, &cat, &t, "g.csv", &[ClusterPolicy::SlurmDefault], 1).unwrap();
        check_conservation(&c, &o);
        check_no_double_booking(&c, &o);
        (o.runs[0].jobs.clone(), o.report.summaries[0].killed_jobs, o.report.knowledge.clone())
    };
    let (limits, killed, label) = starts(false);
    assert_eq!(label, "time limits");
    assert_eq!(limits[2].start, 1100.0, "no backfill on a 1 h limit: it starts after the head");
    assert_eq!(limits[3].end - limits[3].start, 3600.0, "killed at its limit");
    assert_eq!(killed, 1);
    let (perfect, killed, label) = starts(true);
    assert_eq!(label, "perfect knowledge (what-if)");
    assert_eq!(perfect[2].start, 2.0, "knowing it ends by 502 s, backfill starts it at once");
    assert_eq!(perfect[3].end - perfect[3].start, 7200.0);
    assert_eq!(killed, 0);
}

/// Slurm's start latency (`[slurm] start_latency_s`): a job's body begins that long after its
/// allocation, its GPUs held meanwhile, so the next job waits for them too.
#[test]
fn a_start_latency_delays_each_body_and_holds_its_gpus() {
    let (mut c, cat) = inputs();
    c.slurm.start_latency_s = 5.0;
    let text = "submit,gpus,duration,tag,time_limit\n0,640,100,bert,3600\n1,8,50,bert,3600\n";
    let t = wattson_sim::trace::parse(text, "g.csv", TraceFormat::Auto).unwrap();
    let o = wattson_sim::run(&c, &cat, &t, "g.csv", &[ClusterPolicy::SlurmDefault], 1).unwrap();
    check_conservation(&c, &o);
    check_no_double_booking(&c, &o);
    let j = &o.runs[0].jobs;
    assert_eq!((j[0].alloc, j[0].start, j[0].end), (0.0, 5.0, 105.0));
    assert_eq!((j[1].alloc, j[1].start, j[1].end), (105.0, 110.0, 160.0));
    // A job that waited (here for the GPUs) has its own latency: no sbatch, no pass to wait for.
    c.slurm.queued_start_latency_s = Some(1.0);
    let o = wattson_sim::run(&c, &cat, &t, "g.csv", &[ClusterPolicy::SlurmDefault], 1).unwrap();
    let j = &o.runs[0].jobs;
    assert_eq!((j[0].start, j[1].alloc, j[1].start), (5.0, 105.0, 106.0));
    let bad = read(&Path::new(ROOT).join("etc/sim/cluster.toml"))
        .replace("start_latency_s = 0.0", "start_latency_s = -1.0");
    let e = ClusterConfig::from_toml(&bad, "c.toml").unwrap_err().to_string();
    assert!(e.contains("slurm.start_latency_s = -1"), "{e}");
}

/// Slurm's power scan (`[slurm] power_save_interval_s`) and ctld's loop (`[wattson]
/// loop_interval_s`): Slurm's idle timer fires and a boot begins only on a scan; the
/// controller powers a node down only on its loop.
#[test]
fn power_actions_wait_for_slurms_scan_and_the_controllers_loop() {
    let (mut c, cat) = inputs();
    c.groups[0].nodes = 1;
    c.slurm.suspend_times_s = vec![305.0];
    // One job ends at 103 s; the next comes at 5003 s, when the node sleeps.
    let text = "submit,gpus,duration,tag,time_limit\n0,8,103,bert,3600\n5003,8,100,bert,3600\n";
    let t = wattson_sim::trace::parse(text, "g.csv", TraceFormat::Auto).unwrap();
    let run = |c: &ClusterConfig, p: ClusterPolicy| {
        let o = wattson_sim::run(c, &cat, &t, "g.csv", &[p], 1).unwrap();
        check_conservation(c, &o);
        let r = o.runs[0].clone();
        let downs: Vec<f64> =
            r.meter.intervals.iter().filter(|i| i.state == NodeState::ShuttingDown).map(|i| i.from).collect();
        (downs, r.jobs[1].start)
    };
    let boot = c.node.boot_s;
    assert_eq!(run(&c, ClusterPolicy::SlurmPowersave), (vec![408.0], 5003.0 + boot), "at once");
    c.slurm.power_save_interval_s = 10.0;
    assert_eq!(
        run(&c, ClusterPolicy::SlurmPowersave),
        (vec![410.0], 5010.0 + boot),
        "the timer fires on the scan after 408 s; the resume program runs on the scan after 5003 s"
    );
    // The controller sleeps the idle node at once, wakes it for each job, and sleeps it again
    // when the job ends (the first job's run slowed within its bound).
    c.slurm.power_save_interval_s = 0.0;
    let (downs, start) = run(&c, ClusterPolicy::Wattson);
    assert_eq!((downs.len(), downs[0], downs[2], start), (3, 0.0, 5403.0, 5003.0 + boot), "at once");
    assert!(downs[1] > 525.0 && downs[1] < 525.5, "{downs:?}");
    c.wattson.sim.loop_interval_s = 7.0;
    assert_eq!(
        run(&c, ClusterPolicy::Wattson),
        (vec![0.0, 532.0], 5003.0 + boot),
        "each power-down on the controller's next loop (every 7 s; the run ends with the last job, \
         before the loop at 5404 s); Slurm wakes the node at once"
    );
}

/// A job's `gpu_types` keeps it on those types; a type the cluster lacks is an error.
#[test]
fn gpu_types_column_restricts_placement() {
    let (c, cat) = hetero_inputs();
    let text = "submit,gpus,duration,tag,gpu_types\n0,8,600,resnet50,P100\n0,8,600,resnet50,p100;A40\n\
                0,8,600,resnet50,\n";
    let t = wattson_sim::trace::parse(text, "g.csv", TraceFormat::Auto).unwrap();
    let o =
        wattson_sim::run(&c, &cat, &t, "g.csv", &[ClusterPolicy::SlurmDefault, ClusterPolicy::Wattson], 1)
            .unwrap();
    let groups = c.node_groups();
    let name = |n: u32| c.groups[usize::from(groups[n as usize])].gpu.as_str();
    for r in &o.runs {
        assert_eq!(name(r.jobs[0].shares[0].0), "P100", "{:?}", r.policy);
        assert!(["P100", "A40"].contains(&name(r.jobs[1].shares[0].0)), "{:?}", r.policy);
    }
    let bad = wattson_sim::trace::parse(
        "submit,gpus,duration,gpu_types\n0,1,60,H100\n",
        "b.csv",
        TraceFormat::Auto,
    )
    .unwrap();
    let e =
        wattson_sim::run(&c, &cat, &bad, "b.csv", &[ClusterPolicy::SlurmDefault], 1).unwrap_err().to_string();
    assert!(e.contains("accepts GPU types H100") && e.contains("V100, A40, P100"), "{e}");
}

/// The honest comparison (full cluster04, seed 1, both sizes): every policy sees time limits
/// only (drawn by `[limits]`), keeps FIFO order, and waits count from submission. With the
/// shipped settings wattson keeps every bound, its mean wait stays within the shipped
/// `max_wait_cost` (5%, read from the knobs) of what the same wattson waits with DVFS off, for
/// less energy, and no bound-keeping policy spends less GPU energy than the floor. Without
/// the wait-cost bound and the lag cap (`max_wait_cost=100 max_lag_s=10000000`) it uses less
/// energy than slurm-powersave and powersave-dvfs, and at 80 nodes lengthens the mean wait by
/// more than the bound (so the bound and the cap are what hold it). With deferral off, DVFS
/// only while 30% of GPUs are unallocated and no lag cap (`dvfs_min_free=0.3
/// congestion_raise=1 raise_after_runs=0 min_price_drop=100 max_lag_s=10000000`), its mean
/// and p99 waits are within 5% of slurm-powersave's at both sizes, and at 123 nodes its
/// energy is below powersave-dvfs's. Seeds 1-5: `brain -- cluster04.csv 80,123 5 order=fifo [...]`.
#[test]
fn cluster04_under_time_limits_and_one_order() {
    let (mut base, cat) = inputs();
    wattson_sim::overrides::apply(&mut base, "order=fifo").unwrap();
    assert!(!base.limits.perfect);
    let t = wattson_sim::trace::parse(
        &read(&data("traces/itp-elasticflow/cluster04.csv")),
        "cluster04.csv",
        TraceFormat::Auto,
    )
    .expect("trace parses");
    let refs = [
        ClusterPolicy::SlurmPowersave,
        ClusterPolicy::PowersaveDvfs,
        ClusterPolicy::Wattson,
        ClusterPolicy::Floor,
    ];
    for nodes in [123, 80] {
        let mut c = base.clone();
        c.groups[0].nodes = nodes;
        let o = wattson_sim::run(&c, &cat, &t, "cluster04.csv", &refs, 1).unwrap();
        assert_eq!(o.report.knowledge, "time limits");
        let by = |p: ClusterPolicy| o.report.summary(p).unwrap();
        let (w, ps, pd, f) = (
            by(ClusterPolicy::Wattson),
            by(ClusterPolicy::SlurmPowersave),
            by(ClusterPolicy::PowersaveDvfs),
            by(ClusterPolicy::Floor),
        );
        let wattson_with = |kvs: &[&str]| {
            let mut tuned = c.clone();
            for kv in kvs {
                wattson_sim::overrides::apply(&mut tuned, kv).unwrap();
            }
            let o =
                wattson_sim::run(&tuned, &cat, &t, "cluster04.csv", &[ClusterPolicy::Wattson], 1).unwrap();
            o.report.summaries[0].clone()
        };
        let unbounded = wattson_with(&["max_wait_cost=100", "max_lag_s=10000000"]);
        let dvfs_off = wattson_with(&["max_wait_cost=100", "dvfs_min_free=1", "congestion_raise=1"]);
        eprintln!(
            "{nodes} nodes: shipped {} kWh {} s; unbounded {} kWh {} s; DVFS off {} kWh {} s",
            w.energy_kwh,
            w.wait_mean_s,
            unbounded.energy_kwh,
            unbounded.wait_mean_s,
            dvfs_off.energy_kwh,
            dvfs_off.wait_mean_s
        );
        assert_eq!(w.bound_violations + unbounded.bound_violations, 0, "{nodes} nodes");
        for s in [w, ps, pd, &unbounded] {
            assert!(f.gpu_busy_kwh <= s.gpu_busy_kwh, "{nodes} nodes: floor GPU energy above {}", s.policy);
        }
        let allowed = 1.0 + c.wattson.tuning.max_wait_cost;
        assert!(
            w.wait_mean_s <= allowed * dvfs_off.wait_mean_s && w.energy_kwh < dvfs_off.energy_kwh,
            "{nodes} nodes: the wait-cost bound: {} s, {} kWh against DVFS off {} s, {} kWh",
            w.wait_mean_s,
            w.energy_kwh,
            dvfs_off.wait_mean_s,
            dvfs_off.energy_kwh
        );
        if nodes == 80 {
            // At 123 nodes DVFS unbounded lengthens the mean wait by less than the bound (4%:
            // with nodes booted for the known demand only, DVFS off waits for more boots too).
            assert!(unbounded.wait_mean_s > allowed * dvfs_off.wait_mean_s, "{nodes} nodes: the bound binds");
        }
        assert!(
            unbounded.energy_kwh < pd.energy_kwh && unbounded.energy_kwh < ps.energy_kwh,
            "{nodes} nodes: energy"
        );
        assert!(w.defer_mean_s > 0.0 && w.wait_mean_s > w.queue_wait_mean_s, "deferral counts in the wait");
        let mut tuned = c.clone();
        for kv in [
            "dvfs_min_free=0.3",
            "congestion_raise=1",
            "raise_after_runs=0",
            "min_price_drop=100",
            "max_lag_s=10000000",
        ] {
            wattson_sim::overrides::apply(&mut tuned, kv).unwrap();
        }
        let o = wattson_sim::run(&tuned, &cat, &t, "cluster04.csv", &[ClusterPolicy::Wattson], 1).unwrap();
        let tw = &o.report.summaries[0];
        assert_eq!(tw.bound_violations, 0);
        assert!(
            tw.wait_mean_s <= 1.05 * ps.wait_mean_s,
            "{nodes} nodes: mean wait {} vs {}",
            tw.wait_mean_s,
            ps.wait_mean_s
        );
        assert!(
            tw.wait_p99_s <= 1.05 * ps.wait_p99_s,
            "{nodes} nodes: p99 wait {} vs {}",
            tw.wait_p99_s,
            ps.wait_p99_s
        );
        if nodes == 123 {
            assert!(
                tw.energy_kwh < pd.energy_kwh,
                "123 nodes: {} vs powersave-dvfs {}",
                tw.energy_kwh,
                pd.energy_kwh
            );
        }
    }
}
