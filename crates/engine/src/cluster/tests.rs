//! Unit tests of the cluster policy on hand-built snapshots.

use super::levels::allowance;
use super::*;
use wattson_types::prices::PriceSchedule;

mod queue;

pub(crate) fn node(power: NodePower, free: u32, idle_since: f64) -> NodeView {
    NodeView { power, idle_since, gpu_type: 0, free_gpus: free, gpus: 8 }
}

pub(crate) fn costs() -> NodeCosts {
    NodeCosts {
        base_w: 400.0,
        off_w: 15.0,
        shutdown_s: 60.0,
        shutdown_w: 500.0,
        boot_s: 300.0,
        boot_w: 700.0,
    }
}

pub(crate) fn levels() -> Vec<Vec<Level>> {
    vec![vec![
        Level { setting: 100.0, slowdown_hi: 0.30, energy_ratio: 0.80, power_w: 90.0, cap_w: 95.0 },
        Level { setting: 150.0, slowdown_hi: 0.08, energy_ratio: 0.85, power_w: 130.0, cap_w: 140.0 },
        Level { setting: 200.0, slowdown_hi: 0.02, energy_ratio: 0.95, power_w: 180.0, cap_w: 190.0 },
        Level { setting: 250.0, slowdown_hi: 0.0, energy_ratio: 1.0, power_w: 200.0, cap_w: 210.0 },
    ]]
}

pub(crate) fn job(id: u32, bound: f64) -> JobView {
    JobView { id, gpus: 8, bound, work_s: 1000.0, model: 0, bounded: 1, zeus: 0, capped: 2, share: None }
}

pub(crate) fn snap<'a>(
    now: f64,
    nodes: &'a [NodeView],
    models: &'a [Vec<Level>],
    queued: &'a [Queued],
    running: &'a [Running],
    arrivals: &'a [(f64, u32)],
    tariff: &'a PriceSchedule,
) -> Snapshot<'a> {
    const GPU: [GpuType; 1] = [GpuType { idle_w: 57.0 }];
    Snapshot {
        now,
        utc_offset_s: 0,
        nodes,
        gpu_types: &GPU,
        models,
        queued,
        held: &[],
        running,
        arrivals,
        arrival_types: &[],
        tariff,
        budget_w: None,
        node: costs(),
        job_nodes: &ANYWHERE,
        sharing: None,
        lagging: &[],
    }
}

#[test]
fn idle_timer_fires_at_suspend_time_and_asks_to_be_woken_then() {
    let nodes =
        [node(NodePower::On, 8, 100.0), node(NodePower::On, 8, 900.0), node(NodePower::On, 3, f64::INFINITY)];
    let m = levels();
    let tariff = PriceSchedule::default();
    let mut p = TunedPolicy { kind: ClusterPolicy::SlurmPowersave, tuning: Tuning::default() };
    p.tuning.suspend_time_s = 600.0;
    let a = decide(&p, &snap(700.0, &nodes, &m, &[], &[], &[], &tariff));
    assert_eq!(a.power_down, vec![0]);
    assert_eq!(a.wake_at, Some(1500.0));
    let a = decide(&p, &snap(699.0, &nodes, &m, &[], &[], &[], &tariff));
    assert!(a.power_down.is_empty());
    assert_eq!(a.wake_at, Some(700.0));
    p.kind = ClusterPolicy::SlurmDefault;
    assert_eq!(decide(&p, &snap(5000.0, &nodes, &m, &[], &[], &[], &tariff)), Actions::default());
}

#[test]
fn right_sizing_sleeps_idle_nodes_without_forecast_demand_and_keeps_a_forecast_warm_set() {
    let nodes: Vec<NodeView> = (0..6).map(|_| node(NodePower::On, 8, 0.0)).collect();
    let m = levels();
    let tariff = PriceSchedule::default();
    let p = TunedPolicy { kind: ClusterPolicy::Wattson, tuning: Tuning::default() };
    // No arrivals: every idle node sleeps at once (no floor of warm nodes).
    let a = decide(&p, &snap(10.0, &nodes, &m, &[], &[], &[], &tariff));
    assert_eq!(a.power_down, vec![0, 1, 2, 3, 4, 5]);
    // Twelve 8-GPU jobs in the 3600 s window: 1.93 expected within 300 s + one break-even
    // (234600 J / 841 W = 278.95 s). Poisson: P(more than 2) = 0.304, P(more than 3) = 0.130,
    // so three nodes keep the shortfall below the default 0.3.
    let arrivals: Vec<(f64, u32)> = (0..12).map(|k| (f64::from(k) * 100.0, 8)).collect();
    let a = decide(&p, &snap(3000.0, &nodes, &m, &[], &[], &arrivals, &tariff));
    assert_eq!(a.power_down, vec![3, 4, 5]);
    // Four nodes off, none idle: the forecast boots none (it only keeps nodes on); a queued
    // 16-GPU job that can start boots two.
    let mut busy: Vec<NodeView> = (0..4).map(|_| node(NodePower::On, 0, f64::INFINITY)).collect();
    busy.extend((0..4).map(|_| node(NodePower::Off, 8, 0.0)));
    let a = decide(&p, &snap(3000.0, &busy, &m, &[], &[], &arrivals, &tariff));
    assert_eq!((a.power_up.clone(), a.power_down.len()), (vec![], 0));
    assert_eq!(power::warm_target(&p, &snap(3000.0, &busy, &m, &[], &[], &arrivals, &tariff)), 3);
    let q = [Queued { job: JobView { gpus: 16, ..job(9, 0.0) }, eligible: 2900.0 }];
    let a = decide(&p, &snap(3000.0, &busy, &m, &q, &[], &arrivals, &tariff));
    assert_eq!((a.power_up, a.power_down.len()), (vec![4, 5], 0));
}

#[test]
fn queued_jobs_keep_nodes_warm_only_if_they_can_start_within_the_horizon() {
    // Four nodes busy with 8-GPU jobs, two idle; a 48-GPU job waits. While the busy jobs run
    // past the horizon (300 s boot + 278.95 s break-even) it cannot start, and the idle nodes
    // sleep; once they end within it, 16 + 32 GPUs fit it and the idle two stay warm.
    let mut nodes: Vec<NodeView> = (0..4).map(|_| node(NodePower::On, 0, f64::INFINITY)).collect();
    nodes.extend((0..2).map(|_| node(NodePower::On, 8, 0.0)));
    let m = levels();
    let tariff = PriceSchedule::default();
    let p = TunedPolicy { kind: ClusterPolicy::Wattson, tuning: Tuning::default() };
    let q = [Queued { job: JobView { gpus: 48, ..job(9, 0.0) }, eligible: 0.0 }];
    let running = |progress: f64| -> Vec<Running> {
        (0..4)
            .map(|i| Running { job: job(i, 0.0), elapsed_s: 0.0, progress, level: 3, shared: false })
            .collect()
    };
    let far = running(0.0);
    let a = decide(&p, &snap(10.0, &nodes, &m, &q, &far, &[], &tariff));
    assert_eq!(a.power_down, vec![4, 5]);
    let near = running(0.9);
    let a = decide(&p, &snap(10.0, &nodes, &m, &q, &near, &[], &tariff));
    assert!(a.power_down.is_empty(), "{a:?}");
}

#[test]
fn a_sleeping_node_is_booted_when_a_queued_jobs_start_comes_within_the_horizon() {
    // Node 0 runs an 8-GPU job with 2000 s left, node 1 sleeps; a 16-GPU job waits for both.
    // The horizon is 300 s of boot + one break-even (278.95 s): nothing to boot yet, and the
    // policy asks to look again when the running job's end enters it (2000 − 578.95 s, on the
    // next whole second); then node 1 boots for the queued job.
    let nodes = [node(NodePower::On, 0, f64::INFINITY), node(NodePower::Off, 8, 0.0)];
    let m = levels();
    let tariff = PriceSchedule::default();
    let p = TunedPolicy { kind: ClusterPolicy::Wattson, tuning: Tuning::default() };
    let q = [Queued { job: JobView { gpus: 16, ..job(9, 0.0) }, eligible: 0.0 }];
    let at = |now: f64, left: f64| {
        let work_s = 2000.0;
        let r = [Running {
            job: JobView { work_s, ..job(1, 0.0) },
            elapsed_s: now,
            progress: 1.0 - left / work_s,
            level: 3,
            shared: false,
        }];
        decide(&p, &snap(now, &nodes, &m, &q, &r, &[], &tariff))
    };
    let a = at(0.0, 2000.0);
    assert!(a.power_up.is_empty(), "{a:?}");
    assert_eq!(a.wake_at, Some(1422.0));
    let a = at(1422.0, 578.0);
    assert_eq!(a.power_up, vec![1]);
}

#[test]
fn the_warm_set_keeps_a_node_when_a_job_is_likely_not_merely_possible() {
    let nodes: Vec<NodeView> = (0..6).map(|_| node(NodePower::On, 8, 0.0)).collect();
    let m = levels();
    let tariff = PriceSchedule::default();
    let p = TunedPolicy { kind: ClusterPolicy::Wattson, tuning: Tuning::default() };
    let warm = |p: &TunedPolicy, arrivals: &[(f64, u32)]| {
        6 - decide(p, &snap(3000.0, &nodes, &m, &[], &[], arrivals, &tariff)).power_down.len()
    };
    // The horizon is 578.95 s of a 3600 s window. One 1-GPU job in the hour: a job within the
    // horizon with probability 1 - exp(-0.1608) = 0.149, under the default 0.3: no node stays
    // warm. Two: 1 - exp(-0.3216) = 0.275, still under. Three: 1 - exp(-0.4824) = 0.383, so one
    // node stays warm (nine would be needed for two).
    assert_eq!(warm(&p, &[(100.0, 1)]), 0);
    assert_eq!(warm(&p, &[(100.0, 1), (200.0, 1)]), 0);
    assert_eq!(warm(&p, &[(100.0, 1), (200.0, 1), (300.0, 1)]), 1);
    // Two 1-GPU jobs and one 8-GPU job: 0.275 and 0.149 alone, but some node is needed with
    // probability 1 - exp(-0.3216 - 0.1608) = 0.383, so the two classes together keep one.
    assert_eq!(warm(&p, &[(100.0, 1), (200.0, 1), (300.0, 8)]), 1);
    // Twelve 8-GPU jobs: P(more than 2 nodes) = 0.304, P(more than 3) = 0.130. A shortfall of
    // 0.5 keeps two nodes, 0.3 three, 0.1 four (P(more than 4) = 0.047).
    let twelve: Vec<(f64, u32)> = (0..12).map(|k| (f64::from(k) * 100.0, 8)).collect();
    let with = |q: f64| TunedPolicy { tuning: Tuning { warm_shortfall: q, ..p.tuning }, ..p };
    assert_eq!(warm(&with(0.5), &twelve), 2);
    assert_eq!(warm(&p, &twelve), 3);
    assert_eq!(warm(&with(0.1), &twelve), 4);
}

#[test]
fn a_node_kept_warm_for_the_forecast_is_looked_at_again_when_the_forecast_ages_out() {
    let nodes: Vec<NodeView> = (0..6).map(|_| node(NodePower::On, 8, 0.0)).collect();
    let m = levels();
    let tariff = PriceSchedule::default();
    let p = TunedPolicy { kind: ClusterPolicy::Wattson, tuning: Tuning::default() };
    let arrivals = [(100.0, 1), (200.0, 1), (300.0, 1)];
    let at = |now: f64| decide(&p, &snap(now, &nodes, &m, &[], &[], &arrivals, &tariff));
    // Three 1-GPU jobs in the hour keep one node warm (the test above), until the one of 100 s
    // leaves the 3600 s window: strictly after 3700 s. Nothing else happens then, so the
    // decision asks to be taken again on the first whole second after, when the node sleeps.
    let a = at(3000.0);
    assert_eq!(a.power_down.len(), 5);
    assert_eq!(a.wake_at, Some(3701.0));
    assert_eq!(at(3700.0).power_down.len(), 5);
    let a = at(3701.0);
    assert_eq!(a.power_down.len(), 6);
    assert_eq!(a.wake_at, None, "no node is kept, nothing to look at again");
}

#[test]
fn lifetime_dvfs_is_queue_aware_and_keeps_the_bound_over_the_run() {
    let m = levels();
    let tariff = PriceSchedule::default();
    let nodes = [node(NodePower::On, 0, f64::INFINITY)];
    let p = TunedPolicy {
        kind: ClusterPolicy::Wattson,
        tuning: Tuning { congestion_raise: 0.5, ..Tuning::default() },
    };
    // Fresh job, bound 10%: the least energy within 0.10 is level 1 (0.85).
    let fresh = [Running { job: job(7, 0.10), elapsed_s: 0.0, progress: 0.0, level: 3, shared: false }];
    let a = decide(&p, &snap(0.0, &nodes, &m, &[], &fresh, &[], &tariff));
    assert_eq!(a.levels, vec![(7, 1)]);
    // A job queued just now is not late: the running job keeps saving. Once the queued job
    // has waited its own run (1000 s) it is: with congestion_raise = 0.5 the job it
    // waits for gives up half the bound (0.05 admits level 2 at 0.02); with
    // congestion_raise = 1, full speed.
    let slow = [Running { job: job(7, 0.10), elapsed_s: 0.0, progress: 0.0, level: 1, shared: false }];
    let fresh_queue = [Queued { job: job(9, 0.0), eligible: 0.0 }];
    let a = decide(&p, &snap(0.0, &nodes, &m, &fresh_queue, &slow, &[], &tariff));
    assert_eq!(a.levels, Vec::new());
    let q = [Queued { job: job(9, 0.0), eligible: -1000.0 }];
    let a = decide(&p, &snap(0.0, &nodes, &m, &q, &slow, &[], &tariff));
    assert_eq!(a.levels, vec![(7, 2)]);
    let mut full_raise = p;
    full_raise.tuning.congestion_raise = 1.0;
    let a = decide(&full_raise, &snap(0.0, &nodes, &m, &q, &slow, &[], &tariff));
    assert_eq!(a.levels, vec![(7, 3)]);
    // Half the work done at full speed (500 s): the other half may take 600 s, slowdown
    // 0.2 < 0.30, so still level 1; at 0.1 of the work left in 100 s, level 0 (0.30) fits.
    let half = [Running { job: job(7, 0.10), elapsed_s: 500.0, progress: 0.5, level: 3, shared: false }];
    assert!((allowance(&half[0]) - 0.2).abs() < 1e-9);
    let a = decide(&p, &snap(0.0, &nodes, &m, &[], &half, &[], &tariff));
    assert_eq!(a.levels, vec![(7, 1)]);
    let late = Running { job: job(7, 0.10), elapsed_s: 900.0, progress: 0.9, level: 3, shared: false };
    assert!((allowance(&late) - 1.0).abs() < 1e-9);
    // Level 0 fits, but counting the node's base draw (400 W / 8 = 50 W per GPU) its cost is
    // 0.80·(1 + 50/90) = 1.244 against level 1's 0.85·(1 + 50/130) = 1.177: level 1 stays.
    // On GPU energy alone level 0 (0.80) wins.
    let a = decide(&p, &snap(0.0, &nodes, &m, &[], &[late], &[], &tariff));
    assert_eq!(a.levels, vec![(7, 1)]);
    let mut gpu_only = p;
    gpu_only.tuning.count_node_base = false;
    let a = decide(&gpu_only, &snap(0.0, &nodes, &m, &[], &[late], &[], &tariff));
    assert_eq!(a.levels, vec![(7, 0)]);
    // A job already late has no allowance: top level.
    let over = Running { job: job(7, 0.10), elapsed_s: 900.0, progress: 0.5, level: 1, shared: false };
    assert_eq!(allowance(&over), 0.0);
    let a = decide(&p, &snap(0.0, &nodes, &m, &[], &[over], &[], &tariff));
    assert_eq!(a.levels, vec![(7, 3)]);
}

#[test]
fn references_hold_their_fixed_levels() {
    let m = levels();
    let tariff = PriceSchedule::default();
    let nodes = [node(NodePower::On, 0, f64::INFINITY)];
    let r = [Running { job: job(3, 0.05), elapsed_s: 0.0, progress: 0.0, level: 3, shared: false }];
    for (kind, want) in [
        (ClusterPolicy::ZeusPerJob, vec![(3, 0)]),
        (ClusterPolicy::PowersaveDvfs, vec![(3, 1)]),
        (ClusterPolicy::UniformCap, vec![(3, 2)]),
        (ClusterPolicy::SlurmDefault, vec![]),
        (ClusterPolicy::SlurmPowersave, vec![]),
    ] {
        let p = TunedPolicy { kind, tuning: Tuning::default() };
        assert_eq!(decide(&p, &snap(0.0, &nodes, &m, &[], &r, &[], &tariff)).levels, want, "{kind:?}");
    }
}

#[test]
fn deferrable_jobs_wait_for_a_cheaper_hour_only_under_wattson() {
    let m = levels();
    let nodes = [node(NodePower::On, 8, 0.0)];
    let tariff = PriceSchedule { hourly_utc: (0..24).map(|h| if h < 6 { 0.1 } else { 0.3 }).collect() };
    let held = [
        Held { job: job(1, 0.0), submit: 23.0 * 3600.0 + 10.0, defer_window_s: 7200.0 },
        Held { job: job(2, 0.0), submit: 23.0 * 3600.0 + 10.0, defer_window_s: 0.0 },
    ];
    let mut s = snap(23.0 * 3600.0 + 10.0, &nodes, &m, &[], &[], &[], &tariff);
    s.held = &held;
    let p = TunedPolicy { kind: ClusterPolicy::Wattson, tuning: Tuning::default() };
    let a = decide(&p, &s);
    assert_eq!(a.release, vec![2]);
    assert_eq!(a.wake_at, Some(24.0 * 3600.0));
    let p = TunedPolicy { kind: ClusterPolicy::PowersaveDvfs, tuning: Tuning::default() };
    assert_eq!(decide(&p, &s).release, vec![1, 2]);
}

#[test]
fn the_budget_sheds_power_within_bounds_and_gates_starts() {
    let m = levels();
    let tariff = PriceSchedule::default();
    // Two busy nodes (856 W idle each), two off (15 W): committed 1742 W before jobs.
    let nodes = [
        node(NodePower::On, 0, f64::INFINITY),
        node(NodePower::On, 0, f64::INFINITY),
        node(NodePower::Off, 8, 0.0),
        node(NodePower::Off, 8, 0.0),
    ];
    // Two running 8-GPU jobs at the top level (power bound 210 W, 153 W above idle per GPU).
    let r = [
        Running { job: job(1, 0.10), elapsed_s: 0.0, progress: 0.0, level: 3, shared: false },
        Running { job: job(2, 0.0), elapsed_s: 0.0, progress: 0.0, level: 3, shared: false },
    ];
    let held = [Held { job: job(5, 0.0), submit: 0.0, defer_window_s: 0.0 }];
    let mut s = snap(0.0, &nodes, &m, &[], &r, &[], &tariff);
    s.held = &held;
    let mut p = TunedPolicy { kind: ClusterPolicy::Wattson, tuning: Tuning::default() };
    p.tuning.congestion_raise = 1.0;
    // No budget: job 1 goes to its least-energy level (1), job 5 is released.
    let a = decide(&p, &s);
    assert_eq!((a.levels.clone(), a.release.clone()), (vec![(1, 1)], vec![5]));
    // Budget 4000 W (3840 usable): 1742 + 8·(140−57) + 8·153 = 3630 W; job 5 would add a
    // wake (856 − 15) and 8·153: it is held, and the policy asks to look again.
    s.budget_w = Some(4000.0);
    let a = decide(&p, &s);
    assert_eq!(a.release, Vec::<u32>::new());
    assert_eq!(a.wake_at, Some(60.0));
    // Budget 3300 W (3168 usable): job 1 sheds to its least-power level within 10% (level 1,
    // bound 140 W); job 2 (bound 0) cannot: 3630 W stays over, so nothing starts.
    s.budget_w = Some(3300.0);
    let a = decide(&p, &s);
    assert_eq!(a.levels, vec![(1, 1)]);
    assert!(a.release.is_empty());
    // With a large budget everything passes.
    s.budget_w = Some(1e6);
    assert_eq!(decide(&p, &s).release, vec![5]);
    // References ignore the budget.
    let p = TunedPolicy { kind: ClusterPolicy::PowersaveDvfs, tuning: Tuning::default() };
    s.budget_w = Some(1000.0);
    assert_eq!(decide(&p, &s).release, vec![5]);
}

#[test]
fn node_weights_make_slurm_pick_the_packed_node() {
    // Slurm gives a job the lowest-weight node that fits: with these weights a 2-GPU job goes
    // to the on node with 3 free (best fit), a 4-GPU job to the one with 5 free, an 8-GPU job
    // to the idle on node, and a sleeping node only after every powered one.
    let nodes = [
        node(NodePower::Off, 8, 0.0),
        node(NodePower::On, 8, 10.0),
        node(NodePower::On, 5, f64::INFINITY),
        node(NodePower::On, 3, f64::INFINITY),
        node(NodePower::Booting, 8, 0.0),
    ];
    let m = levels();
    let tariff = PriceSchedule::default();
    let s = snap(100.0, &nodes, &m, &[], &[], &[], &tariff);
    let w =
        placement::node_weights(&TunedPolicy { kind: ClusterPolicy::Wattson, tuning: Tuning::default() }, &s)
            .unwrap();
    let pick = |need: u32| {
        (0..nodes.len()).filter(|&i| nodes[i].free_gpus >= need).min_by_key(|&i| (w[i], i)).unwrap()
    };
    assert_eq!((pick(2), pick(4), pick(8)), (3, 2, 1), "{w:?}");
    assert!(w[4] < w[0] && w[1] < w[4], "on, then booting, then sleeping: {w:?}");
    assert!(w.iter().all(|&x| x >= 1));
    // Slurm's own order for the references.
    let first_fit = TunedPolicy { kind: ClusterPolicy::SlurmPowersave, tuning: Tuning::default() };
    assert_eq!(placement::node_weights(&first_fit, &s), None);
}

#[test]
fn type_order_ranks_gpu_types_by_predicted_energy_under_the_bound() {
    // One level table on three types; the job's work takes 1000 s on type 0, 500 s on type 1
    // and 1100 s on type 2. At its bounded level (150 W: 0.85 of the top energy, time ratio
    // 0.85·200/130) with a 50 W base share, each type costs 235.4 J per second of work: type 1
    // is best, type 0 costs 2×, type 2 2.2× (over the 2× cut).
    let m = levels();
    let on = |work_s: f64| JobView { work_s, ..job(0, 0.1) };
    let views = [on(1000.0), on(500.0), on(1100.0)];
    let wattson = TunedPolicy { kind: ClusterPolicy::Wattson, tuning: Tuning::default() };
    assert_eq!(placement::type_order(&wattson, &m, &views, 50.0), vec![1, 0]);
    let loose = TunedPolicy { tuning: Tuning { type_max_cost: 3.0, ..Tuning::default() }, ..wattson };
    assert_eq!(placement::type_order(&loose, &m, &views, 50.0), vec![1, 0, 2]);
    let blind = TunedPolicy { tuning: Tuning { type_aware: false, ..Tuning::default() }, ..wattson };
    assert_eq!(placement::type_order(&blind, &m, &views, 50.0), vec![0, 1, 2]);
    let slurm = TunedPolicy { kind: ClusterPolicy::SlurmPowersave, tuning: Tuning::default() };
    assert_eq!(placement::type_order(&slurm, &m, &views, 50.0), vec![0, 1, 2]);
}

/// On six idle nodes, 0-3 of GPU type 0 and 4-5 of type 1: the warm target and the nodes
/// powered down under `p`, given recent `arrivals` and the type each wants (`types`).
fn two_types_warm(p: &TunedPolicy, arrivals: &[(f64, u32)], types: &[u16]) -> (usize, Vec<u32>) {
    let two = [GpuType { idle_w: 57.0 }, GpuType { idle_w: 40.0 }];
    let nodes: Vec<NodeView> =
        (0..6).map(|i| NodeView { gpu_type: u16::from(i >= 4), ..node(NodePower::On, 8, 0.0) }).collect();
    let m = levels();
    let tariff = PriceSchedule::default();
    let s = Snapshot {
        gpu_types: &two,
        arrival_types: types,
        ..snap(3000.0, &nodes, &m, &[], &[], arrivals, &tariff)
    };
    (power::warm_target(p, &s), decide(p, &s).power_down)
}

#[test]
fn the_warm_set_keeps_the_gpu_types_recent_jobs_want() {
    // Twelve 8-GPU jobs: the forecast keeps two nodes warm at a shortfall of 0.5 (see the
    // shortfall test). Untyped arrivals keep the first two nodes; arrivals that want type 1
    // keep its two; half and half keep one of each.
    let p = TunedPolicy {
        kind: ClusterPolicy::Wattson,
        tuning: Tuning { warm_shortfall: 0.5, ..Tuning::default() },
    };
    let arrivals: Vec<(f64, u32)> = (0..12).map(|k| (f64::from(k) * 100.0, 8)).collect();
    let at = |types: &[u16]| two_types_warm(&p, &arrivals, types).1;
    assert_eq!(at(&[]), vec![2, 3, 4, 5]);
    assert_eq!(at(&[1; 12]), vec![0, 1, 2, 3]);
    let half: Vec<u16> = (0..12).map(|k| u16::from(k % 2 == 1)).collect();
    assert_eq!(at(&half), vec![1, 2, 3, 5]);
}

#[test]
fn each_gpu_type_gets_its_own_warm_count() {
    // Six 1-GPU jobs in the hour, three wanting each type. The horizon is 578.95 s of the
    // 3600 s window (as in the shortfall test), so each type alone sees a job within it with
    // probability 1 - exp(-0.4824) = 0.383, over the default 0.3 shortfall: one node of each
    // type stays warm. Cluster-wide the six jobs fit one node (nine would be needed for a
    // second), which is all untyped arrivals keep.
    let p = TunedPolicy { kind: ClusterPolicy::Wattson, tuning: Tuning::default() };
    let arrivals = [(100.0, 1), (200.0, 1), (300.0, 1), (400.0, 1), (500.0, 1), (600.0, 1)];
    let at = |types: &[u16]| two_types_warm(&p, &arrivals, types);
    assert_eq!(at(&[0, 1, 0, 1, 0, 1]), (2, vec![1, 2, 3, 5]));
    assert_eq!(at(&[]), (1, vec![1, 2, 3, 4, 5]));
    // All six wanting type 1: one node of type 1 covers them.
    assert_eq!(at(&[1; 6]), (1, vec![0, 1, 2, 3, 5]));
}
