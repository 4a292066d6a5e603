//! The queue under the cluster policy: which running jobs a queued job's wait raises, the
//! queue's order, and the wait cost.

use super::*;

#[test]
fn only_the_jobs_the_queue_waits_for_are_raised() {
    // Three nodes, all 24 GPUs held by three 8-GPU jobs at their saving level (1); they end
    // at full speed in 100 s (job 1), 500 s (job 2) and 900 s (job 3).
    let m = levels();
    let tariff = PriceSchedule::default();
    let nodes = [node(NodePower::On, 0, f64::INFINITY); 3];
    let run = |id: u32, left_s: f64| Running {
        job: job(id, 0.10),
        elapsed_s: 1000.0 - left_s,
        progress: 1.0 - left_s / 1000.0,
        level: 1,
        shared: false,
    };
    let r = [run(3, 900.0), run(1, 100.0), run(2, 500.0)];
    let p = TunedPolicy {
        kind: ClusterPolicy::Wattson,
        tuning: Tuning { congestion_raise: 1.0, ..Tuning::default() },
    };
    let queued = |gpus: &[u32]| -> Vec<Queued> {
        gpus.iter()
            .enumerate()
            .map(|(i, &g)| Queued { job: JobView { gpus: g, ..job(10 + i as u32, 0.0) }, eligible: -1000.0 })
            .collect()
    };
    // Each queued job has waited its own run (1000 s): it is late. One 8-GPU job waits: job 1,
    // ending first, frees its GPUs; jobs 2 and 3 end after it could start, so slowing them
    // delays no one and they keep saving.
    let q = queued(&[8]);
    let s = snap(0.0, &nodes, &m, &q, &r, &[], &tariff);
    assert_eq!(levels::waited_for(&p, &s), vec![1]);
    assert_eq!(decide(&p, &s).levels, vec![(1, 3)]);
    // A 4-GPU job behind it fits in what job 2 frees too; a 16-GPU job needs all three.
    let q = queued(&[8, 4]);
    assert_eq!(levels::waited_for(&p, &snap(0.0, &nodes, &m, &q, &r, &[], &tariff)), vec![1, 2]);
    let q = queued(&[16]);
    assert_eq!(levels::waited_for(&p, &snap(0.0, &nodes, &m, &q, &r, &[], &tariff)), vec![1, 2]);
    let q = queued(&[8, 16]);
    let s = snap(0.0, &nodes, &m, &q, &r, &[], &tariff);
    assert_eq!(levels::waited_for(&p, &s), vec![1, 2, 3]);
    // The 16-GPU job queued only 500 s ago is not late yet: only the 8-GPU job counts; with
    // raise_after_runs = 0 both do.
    let mut young = q.clone();
    young[1].eligible = -500.0;
    let s_young = snap(0.0, &nodes, &m, &young, &r, &[], &tariff);
    assert_eq!(levels::waited_for(&p, &s_young), vec![1]);
    let at_once = TunedPolicy { tuning: Tuning { raise_after_runs: 0.0, ..p.tuning }, ..p };
    assert_eq!(levels::waited_for(&at_once, &s_young), vec![1, 2, 3]);
    assert_eq!(decide(&p, &s).levels, vec![(3, 3), (1, 3), (2, 3)]);
    // 8 GPUs unallocated (a fourth node): the 8-GPU job waits for no one.
    let four = [node(NodePower::On, 0, f64::INFINITY), nodes[0], nodes[0], node(NodePower::Off, 8, 0.0)];
    let q = queued(&[8]);
    let s = snap(0.0, &four, &m, &q, &r, &[], &tariff);
    assert_eq!(levels::waited_for(&p, &s), Vec::<u32>::new());
    assert_eq!(decide(&p, &s).levels, Vec::new());
    // DVFS gated off (dvfs_min_free 1: only with every GPU free): every job is raised,
    // waited for or not.
    let gated = TunedPolicy { tuning: Tuning { dvfs_min_free: 1.0, ..p.tuning }, ..p };
    assert_eq!(decide(&gated, &s).levels, vec![(3, 3), (1, 3), (2, 3)]);
}

#[test]
fn a_queued_job_raises_only_the_running_jobs_on_nodes_it_may_use() {
    // Jobs 1, 2 and 3 hold nodes 0, 1 and 2 (8 GPUs each), ending in 100, 500 and 900 s; node 3
    // is off with 8 free GPUs. A late 8-GPU job that may use only node 2 (its partition) waits
    // for job 3 alone, though job 1 ends first and node 3 is free.
    let m = levels();
    let tariff = PriceSchedule::default();
    let nodes = [
        node(NodePower::On, 0, f64::INFINITY),
        node(NodePower::On, 0, f64::INFINITY),
        node(NodePower::On, 0, f64::INFINITY),
        node(NodePower::Off, 8, 0.0),
    ];
    let run = |id: u32, left_s: f64| Running {
        job: job(id, 0.10),
        elapsed_s: 1000.0 - left_s,
        progress: 1.0 - left_s / 1000.0,
        level: 1,
        shared: false,
    };
    let r = [run(1, 100.0), run(2, 500.0), run(3, 900.0)];
    let q = [Queued { job: job(10, 0.0), eligible: -1000.0 }];
    let p = TunedPolicy {
        kind: ClusterPolicy::Wattson,
        tuning: Tuning { congestion_raise: 1.0, ..Tuning::default() },
    };
    let mut where_: JobNodes =
        [(1, vec![0]), (2, vec![1]), (3, vec![2]), (10, vec![2])].map(|(j, n)| (j, n.into())).into();
    let s = Snapshot { job_nodes: &where_, ..snap(0.0, &nodes, &m, &q, &r, &[], &tariff) };
    assert_eq!(levels::waited_for(&p, &s), vec![3]);
    let a = decide(&p, &s);
    assert_eq!((a.raised.clone(), a.levels), (vec![3], vec![(3, 3)]));
    // May use nodes 0 and 2: job 1 ends first there.
    where_.insert(10, vec![0, 2].into());
    let s = Snapshot { job_nodes: &where_, ..snap(0.0, &nodes, &m, &q, &r, &[], &tariff) };
    assert_eq!(decide(&p, &s).raised, vec![1]);
    // May use node 3 (free): waits for no one. Any node (not listed): node 3's GPUs serve it.
    where_.insert(10, vec![3].into());
    let s = Snapshot { job_nodes: &where_, ..snap(0.0, &nodes, &m, &q, &r, &[], &tariff) };
    assert!(decide(&p, &s).raised.is_empty());
    where_.remove(&10);
    let s = Snapshot { job_nodes: &where_, ..snap(0.0, &nodes, &m, &q, &r, &[], &tariff) };
    assert!(decide(&p, &s).raised.is_empty());
    // With node 3 held by an administrator (no free GPUs shown), the unrestricted job waits for
    // the first to end, as it would with no nodes known.
    let held = [nodes[0], nodes[1], nodes[2], NodeView { free_gpus: 0, ..nodes[3] }];
    let s = Snapshot { job_nodes: &where_, ..snap(0.0, &held, &m, &q, &r, &[], &tariff) };
    assert_eq!(decide(&p, &s).raised, vec![1]);
}

#[test]
fn a_queued_job_waits_for_the_running_jobs_that_free_a_place_its_shape_fits() {
    // Two 8-GPU nodes, each half held: job 1 (4 GPUs on node 0) ends in 100 s, job 2 (4 GPUs
    // on node 1) in 500 s. Eight GPUs are free, but on two nodes: a late 8-GPU job (one
    // node's) waits for job 1, a late 16-GPU job (two whole nodes) for both; a 4-GPU job fits
    // now and waits for no one.
    let m = levels();
    let tariff = PriceSchedule::default();
    let nodes = [node(NodePower::On, 4, f64::INFINITY); 2];
    let run = |id: u32, left_s: f64| Running {
        job: JobView { gpus: 4, ..job(id, 0.10) },
        elapsed_s: 1000.0 - left_s,
        progress: 1.0 - left_s / 1000.0,
        level: 1,
        shared: false,
    };
    let r = [run(2, 500.0), run(1, 100.0)];
    let where_: JobNodes = [(1, vec![0]), (2, vec![1])].map(|(j, n)| (j, n.into())).into();
    let p = TunedPolicy {
        kind: ClusterPolicy::Wattson,
        tuning: Tuning { congestion_raise: 1.0, ..Tuning::default() },
    };
    let waits_for = |gpus: u32| {
        let q = [Queued { job: JobView { gpus, ..job(10, 0.0) }, eligible: -1000.0 }];
        let s = Snapshot { job_nodes: &where_, ..snap(0.0, &nodes, &m, &q, &r, &[], &tariff) };
        levels::waited_for(&p, &s)
    };
    assert_eq!(waits_for(8), vec![1]);
    assert_eq!(waits_for(16), vec![1, 2]);
    assert_eq!(waits_for(4), Vec::<u32>::new());
}

#[test]
fn wattson_orders_the_queue_by_wait_per_unit_of_size_and_references_keep_fifo() {
    let m = levels();
    let tariff = PriceSchedule::default();
    let nodes = [node(NodePower::On, 0, f64::INFINITY)];
    let sized =
        |id: u32, gpus: u32, eligible: f64| Queued { job: JobView { gpus, ..job(id, 0.0) }, eligible };
    // Work 1000 s each. At 200 s: job 1 (8 GPUs) waited 200 s, job 2 (1 GPU) 100 s, job 3
    // (8 GPUs) 150 s. Keys wait / sqrt(GPUs·1000): 200/89.44 = 2.24, 100/31.62 = 3.16,
    // 150/89.44 = 1.68: the small job first, then the two large ones in FIFO order.
    let q = [sized(1, 8, 0.0), sized(2, 1, 100.0), sized(3, 8, 50.0)];
    let p = TunedPolicy {
        kind: ClusterPolicy::Wattson,
        tuning: Tuning { queue_order: QueueOrder::ResponseRatio, ..Tuning::default() },
    };
    assert_eq!(decide(&p, &snap(200.0, &nodes, &m, &q, &[], &[], &tariff)).queue_order, vec![2, 1, 3]);
    // Nobody starves: a job √8 times larger has only to have waited √8 times as long. At
    // 1000 s job 1 (1000/89.44 = 11.18) goes before a 1-GPU job queued at 800 s (200/31.62 =
    // 6.32), whichever place it had.
    let q2 = [sized(1, 8, 0.0), sized(4, 1, 800.0)];
    assert!(decide(&p, &snap(1000.0, &nodes, &m, &q2, &[], &[], &tariff)).queue_order.is_empty());
    let q2 = [sized(4, 1, 800.0), sized(1, 8, 0.0)];
    assert_eq!(decide(&p, &snap(1000.0, &nodes, &m, &q2, &[], &[], &tariff)).queue_order, vec![1, 4]);
    // size_exponent 0: by wait alone, which is FIFO by the time each entered the queue.
    let by_wait = TunedPolicy { tuning: Tuning { size_exponent: 0.0, ..p.tuning }, ..p };
    assert_eq!(decide(&by_wait, &snap(200.0, &nodes, &m, &q, &[], &[], &tariff)).queue_order, vec![1, 3, 2]);
    // FIFO for wattson (the default), and the references' Slurm: the queue is left as it is.
    let fifo = TunedPolicy { kind: ClusterPolicy::Wattson, tuning: Tuning::default() };
    assert!(decide(&fifo, &snap(200.0, &nodes, &m, &q, &[], &[], &tariff)).queue_order.is_empty());
    let slurm = TunedPolicy { kind: ClusterPolicy::SlurmPowersave, tuning: Tuning::default() };
    assert!(decide(&slurm, &snap(200.0, &nodes, &m, &q, &[], &[], &tariff)).queue_order.is_empty());
    // The what-if: the references' Slurm given wattson's order.
    let what_if =
        TunedPolicy { tuning: Tuning { slurm_order: QueueOrder::ResponseRatio, ..slurm.tuning }, ..slurm };
    assert_eq!(decide(&what_if, &snap(200.0, &nodes, &m, &q, &[], &[], &tariff)).queue_order, vec![2, 1, 3]);
}

#[test]
fn the_wait_cost_charges_a_queued_job_the_work_its_blockers_lost_and_past_the_bound_slows_none() {
    use wait_cost::WaitCost;
    let full = [node(NodePower::On, 0, f64::INFINITY), node(NodePower::On, 0, f64::INFINITY)];
    let m = levels();
    let tariff = PriceSchedule::default();
    // Job 1 at level 1 (8% pessimistic slowdown, bound 10%) ends first; job 2 runs at the top.
    let slowed = Running { job: job(1, 0.10), elapsed_s: 5000.0, progress: 0.5, level: 1, shared: false };
    let top = Running { job: job(2, 0.10), elapsed_s: 5000.0, progress: 0.1, level: 3, shared: false };
    let lag = |s: f64| s * 0.08 / 1.08;
    let mut w = WaitCost::default();
    w.observe(&snap(0.0, &full, &m, &[], &[slowed, top], &[], &tariff));
    w.observe(&snap(1000.0, &full, &m, &[], &[slowed, top], &[], &tariff));
    // No queue: slowing costs no wait.
    assert_eq!((w.delay_s, w.ratio(), w.guarding(0.05)), (0.0, 0.0, false));
    // An 8-GPU job queues: it waits for job 1 (ending first), 1100 s behind by now.
    let q = [Queued { job: job(9, 0.0), eligible: 1000.0 }];
    w.observe(&snap(1100.0, &full, &m, &q, &[slowed, top], &[], &tariff));
    assert!((w.delay_s - lag(1100.0)).abs() < 1e-9, "{w:?}");
    // Still queued, it counts with its wait so far: 81.5 of its 100 s were added.
    assert!((w.ratio() - lag(1100.0) / (100.0 - lag(1100.0))).abs() < 1e-9, "{}", w.ratio());
    assert!(w.guarding(0.05));
    // Past the bound wattson slows no job: every running job is raised. The decider that saw
    // the same states keeps the guard; a decision with no memory does not.
    let both = [slowed, top];
    let p = TunedPolicy { kind: ClusterPolicy::Wattson, tuning: Tuning::default() };
    let mut decider = Decider::default();
    assert!(decider.step(&p, &snap(1000.0, &full, &m, &[], &both, &[], &tariff)).raised.is_empty());
    let now = snap(1100.0, &full, &m, &q, &both, &[], &tariff);
    assert_eq!(decider.step(&p, &now).raised, vec![1, 2]);
    assert!(decide(&p, &now).raised.is_empty());
    // It started (job 1 ended): charged, the queue's delay gone; the guard stays on while the
    // share is past the bound.
    let started = Running { job: job(9, 0.10), elapsed_s: 50.0, progress: 0.05, level: 3, shared: false };
    w.observe(&snap(1200.0, &full, &m, &[], &[top, started], &[], &tariff));
    assert!(w.waited_s == 100.0 && (w.added_s - lag(1100.0)).abs() < 1e-9, "{w:?}");
    // An hour on with no queue, the share stays (both decay alike).
    w.observe(&snap(4800.0, &full, &m, &[], &[top, started], &[], &tariff));
    let decay = 0.5f64.powf(3600.0 / wait_cost::HALF_LIFE_S);
    assert!((w.waited_s - 100.0 * decay).abs() < 1e-9, "{w:?}");
    assert!((w.ratio() - lag(1100.0) / (100.0 - lag(1100.0))).abs() < 1e-9);
    assert_eq!(w.delay_s, 0.0);
    assert!(w.guarding(0.05));

    // A wait the lag covers whole is all added: a large share, not none.
    let mut w = WaitCost::default();
    let late = [Queued { job: job(9, 0.0), eligible: 1050.0 }];
    w.observe(&snap(0.0, &full, &m, &[], &[slowed, top], &[], &tariff));
    w.observe(&snap(1100.0, &full, &m, &late, &[slowed, top], &[], &tariff));
    assert!(w.ratio() == 50.0 && w.guarding(0.05), "{w:?}");
    // With no bound, a share past it (150, of a wait the lag covers whole) neither guards nor
    // gates.
    let mut w = WaitCost::default();
    let later = [Queued { job: job(9, 0.0), eligible: 2550.0 }];
    let none = wait_cost::UNBOUNDED;
    w.observe(&snap(0.0, &full, &m, &[], &[slowed, top], &[], &tariff));
    w.observe(&snap(2700.0, &full, &m, &later, &[slowed, top], &[], &tariff));
    assert!(w.ratio() == 150.0 && !w.guarding(none) && w.gate(none) == 0.0, "{w:?}");

    // A queue that a sleeping node's free GPUs hold waits for a boot, not for job 1.
    let sleeping = [full[0], full[1], node(NodePower::Off, 8, 0.0)];
    let mut w = WaitCost::default();
    w.observe(&snap(0.0, &sleeping, &m, &[], &[slowed], &[], &tariff));
    w.observe(&snap(1100.0, &sleeping, &m, &q, &[slowed], &[], &tariff));
    w.observe(&snap(1300.0, &sleeping, &m, &[], &[slowed], &[], &tariff));
    assert!(w.waited_s > 0.0 && w.added_s == 0.0 && !w.guarding(0.05), "{w:?}");
    // Unless the job may not use that node (its partition holds the full nodes only).
    let only: JobNodes = [(9, std::sync::Arc::from([0u32, 1])), (1, std::sync::Arc::from([0u32]))].into();
    let mut w = WaitCost::default();
    let one = [slowed];
    for (t, queue) in [(0.0, &[][..]), (1100.0, &q[..]), (1300.0, &[][..])] {
        let s = Snapshot { job_nodes: &only, ..snap(t, &sleeping, &m, queue, &one, &[], &tariff) };
        w.observe(&s);
    }
    assert!(w.waited_s == 100.0 && (w.added_s - lag(1100.0)).abs() < 1e-9 && w.guarding(0.05), "{w:?}");

    // The references never change.
    let r = TunedPolicy { kind: ClusterPolicy::PowersaveDvfs, tuning: Tuning::default() };
    assert_eq!(wait_cost::guarded(&r, &w), r);
}

#[test]
fn below_the_wait_cost_bound_a_job_is_slowed_only_while_the_observed_share_of_the_bound_of_gpus_is_free() {
    use wait_cost::WaitCost;
    let m = levels();
    let tariff = PriceSchedule::default();
    // Four 8-GPU nodes. Running 8-GPU jobs at full speed, bound 10%: each may go to level 1
    // (8% pessimistic slowdown); no queue.
    let run =
        |id: u32| Running { job: job(id, 0.10), elapsed_s: 500.0, progress: 0.5, level: 3, shared: false };
    let p = TunedPolicy { kind: ClusterPolicy::Wattson, tuning: Tuning::default() };
    let bound = p.tuning.max_wait_cost;
    // DVFS observed to have added 3% to the waits, against the 5% bound: 60% of the GPUs must
    // be unallocated for a job to be slowed.
    let cost = |waited_s: f64, added_s: f64| {
        let mut w = WaitCost::default();
        (w.waited_s, w.added_s) = (waited_s, added_s);
        w
    };
    let observed = cost(1030.0, 30.0);
    assert!((observed.ratio() - 0.03).abs() < 1e-12 && bound == 0.05);
    assert!((observed.gate(bound) - 0.6).abs() < 1e-12);
    let step = |w: &WaitCost, jobs: &[Running]| {
        let held = jobs.len();
        let nodes: Vec<NodeView> =
            (0..4)
                .map(|i| {
                    if i < held { node(NodePower::On, 0, f64::INFINITY) } else { node(NodePower::On, 8, 0.0) }
                })
                .collect();
        let mut d = Decider { wait_cost: w.clone() };
        let a = d.step(&p, &snap(100.0, &nodes, &m, &[], jobs, &[], &tariff));
        assert!(!d.wait_cost.guarding(bound), "{d:?}");
        a
    };
    // 24 of 32 GPUs free (75%): job 1 is slowed to level 1.
    assert_eq!(step(&observed, &[run(1)]).levels, vec![(1, 1)]);
    // 16 of 32 free (50%): no job is slowed; both are held at full speed.
    let a = step(&observed, &[run(1), run(2)]);
    assert!(a.levels.is_empty() && a.raised == vec![1, 2], "{a:?}");
    // With no wait added, the same 50% free slows both.
    assert_eq!(step(&WaitCost::default(), &[run(1), run(2)]).levels, vec![(1, 1), (2, 1)]);
    // At the bound every GPU must be free: past it the guard is on.
    let at = cost(1050.0, 50.0);
    assert_eq!(at.gate(bound), 1.0);
    assert_eq!(step(&at, &[run(1)]).levels, vec![]);
}

#[test]
fn a_slowed_job_runs_at_full_speed_once_it_has_fallen_max_lag_s_behind_and_is_woken_for_it() {
    let m = levels();
    let tariff = PriceSchedule::default();
    // One 8-GPU node held by job 1 at level 1 (8% pessimistic slowdown, within its 10% bound):
    // it falls 0.08 / 1.08 of each second behind, 600 s (the default cap) in 8,100 s.
    let nodes = [node(NodePower::On, 0, f64::INFINITY)];
    // A day's work, at level 1 since it started.
    let run = |elapsed_s: f64| Running {
        job: JobView { work_s: 86_400.0, ..job(1, 0.10) },
        elapsed_s,
        progress: elapsed_s / 1.08 / 86_400.0,
        level: 1,
        shared: false,
    };
    let p = TunedPolicy { kind: ClusterPolicy::Wattson, tuning: Tuning::default() };
    assert_eq!(p.tuning.max_lag_s, 600.0);
    let mut d = Decider::default();
    let a = d.step(&p, &snap(100.0, &nodes, &m, &[], &[run(1000.0)], &[], &tariff));
    assert!(a.levels.is_empty() && a.raised.is_empty(), "{a:?}");
    let due = 100.0 + 600.0 * 1.08 / 0.08;
    assert!((a.wake_at.unwrap() - due).abs() < 1e-6, "{a:?}");
    // Woken then, it runs at full speed (level 3) and is raised, so the controller paces it
    // so; a second short of it, it keeps its level.
    let mut early = d.clone();
    let a = early.step(&p, &snap(due - 1.0, &nodes, &m, &[], &[run(9000.0)], &[], &tariff));
    assert!(a.levels.is_empty() && a.raised.is_empty(), "{a:?}");
    let a = d.step(&p, &snap(due, &nodes, &m, &[], &[run(9100.0)], &[], &tariff));
    assert_eq!((a.levels, a.raised, a.wake_at), (vec![(1, 3)], vec![1], None));
    // With the cap at its top no job is raised for its lag.
    let uncapped = TunedPolicy { tuning: Tuning { max_lag_s: 1e7, ..p.tuning }, ..p };
    let mut d = Decider::default();
    d.step(&uncapped, &snap(100.0, &nodes, &m, &[], &[run(1000.0)], &[], &tariff));
    assert!(d.step(&uncapped, &snap(due, &nodes, &m, &[], &[run(9100.0)], &[], &tariff)).raised.is_empty());
}
