//! Per-job GPU energy against the simulated GPUs' exact ground truth, through the real daemon
//! and CLI: several jobs sharing a node, a daemon killed mid-job, and GPU faults.

use wattson_harness::node as common;

use std::thread::sleep;
use std::time::Duration;

use common::{Node, assert_exact};
use fake_nvml::Fault;
use wattson_harness::vendor::Vendor;
use wattson_types::energy::{MeterEvent, Method};
use wattson_types::job::{JobRecord, JobState};

per_vendor!(
    jobs_sharing_a_node_each_get_their_exact_energy,
    a_killed_daemon_loses_no_energy_and_duplicates_no_record
);

const EXACT: f64 = 0.001; // 0.1 %

fn secs(s: f64) {
    sleep(Duration::from_secs_f64(s));
}

fn jobs_sharing_a_node_each_get_their_exact_energy(vendor: Vendor) {
    let mut node = Node::gpus_of(vendor, 4);
    node.start();
    node.sim.set_load(0, 0.9).unwrap();
    node.sim.set_load(1, 0.5).unwrap();
    let begin_101 = node.begin("101", 1000, "0,1");
    secs(0.7);
    node.sim.set_load(2, 1.0).unwrap();
    let begin_102 = node.begin("102", 1001, &node.gpu_uuid(2)); // GPUs may be named by UUID too
    secs(0.6);
    node.sim.set_load(0, 0.2).unwrap(); // a phase change in the middle of job 101
    node.sim.set_load(3, 0.7).unwrap(); // an idle GPU's load counts for nobody
    secs(0.9);
    let end_101 = node.end("101");
    secs(0.8);
    let end_102 = node.end("102");

    for (job, gpus, begin, end) in
        [("101", vec![0, 1], begin_101, end_101), ("102", vec![2], begin_102, end_102)]
    {
        let record = node.record(job);
        assert_eq!(record.state, JobState::Completed);
        assert_eq!(record.gpus.iter().map(|g| g.index).collect::<Vec<_>>(), gpus);
        assert_eq!(record.method(), Some(Method::Counter));
        assert_exact(&node, &record, begin, end, EXACT);
    }
}

fn a_killed_daemon_loses_no_energy_and_duplicates_no_record(vendor: Vendor) {
    let mut node = Node::gpus_of(vendor, 2);
    node.start();
    node.sim.set_load(0, 0.8).unwrap();
    let begin = node.begin("7", 1000, "0");
    secs(0.8);
    node.kill9();
    // The GPU keeps drawing power while nobody watches; the load even changes.
    node.sim.set_load(0, 0.3).unwrap();
    secs(1.0);
    node.start();
    secs(0.6);
    let end = node.end("7");
    let record = node.record("7");
    assert_exact(&node, &record, begin, end, EXACT);
    assert_eq!(record.method(), Some(Method::Counter));
    // Ending again (an Epilog retried) returns the same record and writes nothing new.
    node.end("7");
    let all = node.acct_json(&["-j", "7"]);
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0]["energy_j"].as_f64(), Some(record.energy_j()));
}

#[test]
fn a_lost_gpu_stops_only_its_own_meter() {
    let mut node = Node::h100(3);
    node.start();
    for gpu in 0..3 {
        node.sim.set_load(gpu, 0.6).unwrap();
    }
    let begin_1 = node.begin("1", 1000, "0,1");
    let begin_2 = node.begin("2", 1000, "2");
    secs(0.6);
    node.sim.set_fault(1, Fault::Lost).unwrap();
    secs(0.8);
    let status = node.wattson(&["status"]);
    common::assert_ok(&status);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("GPU is lost"), "{text}");
    let end_1 = node.end("1");
    let end_2 = node.end("2");

    let job1 = node.record("1");
    let gpu1 = &job1.gpus[1];
    assert!(gpu1.meter.events.iter().any(|e| matches!(e, MeterEvent::GpuLost { .. })), "{gpu1:?}");
    // GPU 0 of the same job and job 2's GPU are still exact.
    let truth = node.truth_mj(&job1);
    let job1_gpu0 = JobRecord { gpus: vec![job1.gpus[0].clone()], ..job1.clone() };
    assert_exact(&node, &job1_gpu0, begin_1, end_1, EXACT);
    assert_exact(&node, &node.record("2"), begin_2, end_2, EXACT);
    // GPU 1 is counted exactly up to its last good reading, which is short of what it drew
    // over the whole job; the report says it was lost.
    assert!(common::rel_err(gpu1.meter.energy_mj, truth[1]) < EXACT);
    let (first, _) = node.read_intervals(&job1)[1];
    let whole_job = node.sim.truth_energy_mj(1, first, job1.end_ns.unwrap()).unwrap();
    assert!(gpu1.meter.energy_mj < 0.8 * whole_job, "{} vs {whole_job}", gpu1.meter.energy_mj);
    let table = node.wattson(&["acct", "-j", "1", "-o", "JobID,Events", "-P"]);
    assert!(
        String::from_utf8_lossy(&table.stdout).contains("lost"),
        "{}",
        String::from_utf8_lossy(&table.stdout)
    );
}

#[test]
fn a_gpu_without_energy_counter_is_metered_by_power_and_says_so() {
    let mut config = fake_nvml::Config::uniform("V100", 2);
    config.gpu[1].energy_counter = Some(false);
    let mut node = Node::new(config, "200ms");
    node.start();
    node.sim.set_load(0, 0.7).unwrap();
    node.sim.set_load(1, 0.7).unwrap();
    let begin = node.begin("5", 1000, "0,1");
    secs(2.0);
    let end = node.end("5");
    let record = node.record("5");
    assert_eq!(record.gpus[0].meter.method, Method::Counter);
    assert_eq!(record.gpus[1].meter.method, Method::Power);
    assert_eq!(record.method(), Some(Method::CounterAndPower));
    // Constant load: sampled power integrates to the truth closely, but not exactly.
    assert_exact(&node, &record, begin, end, 0.02);
    let gpu0 = JobRecord { gpus: vec![record.gpus[0].clone()], ..record.clone() };
    assert_exact(&node, &gpu0, begin, end, EXACT);
}

#[test]
fn a_counter_reset_mid_job_is_detected_and_bridged() {
    let mut node = Node::h100(1);
    node.start();
    node.sim.set_load(0, 0.5).unwrap();
    let begin = node.begin("9", 1000, "0");
    secs(0.7);
    node.sim.set_fault(0, Fault::CounterReset).unwrap();
    secs(0.7);
    let end = node.end("9");
    let record = node.record("9");
    let gpu = &record.gpus[0];
    assert_eq!(gpu.meter.method, Method::CounterAndPower);
    assert!(gpu.meter.events.iter().any(|e| matches!(e, MeterEvent::CounterReset { .. })), "{gpu:?}");
    // At most one sample interval (200 ms) of a constant load was estimated from power.
    assert_exact(&node, &record, begin, end, 0.01);
}

#[test]
fn a_job_whose_end_was_lost_is_closed_when_its_gpus_are_given_away() {
    let mut node = Node::h100(1);
    node.start();
    node.sim.set_load(0, 0.6).unwrap();
    // Both jobs hold the whole GPU (neither says it shares it).
    let begin = node.begin("20", 1000, "0");
    secs(0.5);
    // The Epilog of job 20 never ran; Slurm gives GPU 0 to job 21.
    let handover = node.begin("21", 1001, "0");
    let old = node.record("20");
    assert_eq!(old.state, JobState::Completed);
    assert_exact(&node, &old, begin, handover, EXACT);
    assert_eq!(old.split(), None, "job 20 shared its GPU with no one");
    assert!(node.log().contains("ending the job whose end was never reported"));
    secs(0.3);
    let end = node.end("21");
    let new = node.record("21");
    assert_eq!(new.split(), None, "job 21 has the GPU to itself");
    assert_exact(&node, &new, handover, end, EXACT);
}

/// The same after a restart of wattsond between the lost end and the next job (a kill -9,
/// then a clean stop): the resumed record still holds its GPU whole, so the next job closes
/// it instead of sharing the GPU's energy with it (issue 55, item 1: it was halved).
#[test]
fn a_job_whose_end_was_lost_is_closed_after_a_restart_when_its_gpus_are_given_away() {
    let mut node = Node::h100(1);
    node.start();
    node.sim.set_load(0, 0.6).unwrap();
    for (old, new) in [("40", "41"), ("42", "43")] {
        let begin = node.begin(old, 1000, "0");
        secs(0.4);
        // Job `old` ends while wattsond is down: its Epilog never reaches it.
        if old == "40" {
            node.kill9();
        } else {
            node.stop();
        }
        node.start();
        let handover = node.begin(new, 1001, "0");
        let lost = node.record(old);
        assert_eq!(lost.state, JobState::Completed, "job {old}'s record was left running");
        assert_exact(&node, &lost, begin, handover, EXACT);
        secs(0.4);
        let end = node.end(new);
        let record = node.record(new);
        assert_eq!(record.split(), None, "job {new} shared its GPU with job {old}'s stale record");
        assert_exact(&node, &record, handover, end, EXACT);
    }
    let log = node.log();
    assert_eq!(log.matches("ending the job whose end was never reported").count(), 2, "{log}");
    // A job that shares its GPUs gets no setting: these had theirs.
    assert!(!log.contains("job shares its GPUs"), "{log}");
}

#[test]
fn steps_are_metered_on_their_jobs_gpus_and_end_with_their_job() {
    let mut node = Node::h100(2);
    node.start();
    node.sim.set_load(0, 0.8).unwrap();
    node.sim.set_load(1, 0.8).unwrap();
    let begin = node.begin("30", 1000, "0,1");
    let step_begin = node.begin("30.0", 1000, "1");
    secs(0.6);
    let step_end = node.end("30.0");
    node.begin("30.1", 1000, "0"); // its end is never reported
    secs(0.4);
    let end = node.end("30");
    assert_exact(&node, &node.record("30"), begin, end, EXACT);
    assert_exact(&node, &node.record("30.0"), step_begin, step_end, EXACT);
    let lost_step = node.record("30.1");
    assert_eq!(lost_step.state, JobState::Completed, "a step ends with its job");
    let table = node.wattson(&["acct", "-j", "30", "-o", "JobID,NGPUs", "-P"]);
    let out = String::from_utf8_lossy(&table.stdout).to_string();
    assert_eq!(out.lines().skip(1).collect::<Vec<_>>(), vec!["30|2", "30.0|1", "30.1|1"], "{out}");
}

#[test]
fn a_step_is_recorded_under_its_jobs_policy_whatever_it_asks() {
    let mut node = Node::h100(2);
    node.start();
    let begin = |job: &str, more: &[&str]| {
        let args = [&["job", "begin", "--job", job, "--uid", "1000"][..], more].concat();
        common::assert_ok(&node.wattson(&args));
    };
    begin("32", &["--gpus", "0,1", "--energy", "perf"]);
    begin("32.0", &["--gpus", "1"]);
    begin("32.1", &["--gpus", "0", "--energy", "min-energy"]);
    let policy = |job: &str| node.record(job).policy;
    let of_job = policy("32");
    assert!(of_job.is_some());
    for step in ["32.0", "32.1"] {
        assert_eq!(policy(step), of_job, "{step} runs on its job's settings");
    }
    node.end("32");
}

#[test]
fn the_share_hint_given_to_job_begin_is_recorded_and_a_bad_one_refused() {
    let mut node = Node::h100(1);
    node.start();
    let begin = |job: &str, share: &str| {
        node.wattson(&["job", "begin", "--job", job, "--uid", "1000", "--gpus", "0", "--energy-share", share])
    };
    let refused = begin("34", "maybe");
    assert!(!refused.status.success());
    assert!(String::from_utf8_lossy(&refused.stderr).contains("not one of yes, no"));
    common::assert_ok(&begin("34", "yes"));
    assert_eq!(node.record("34").hints.share, Some(true));
    node.end("34");
}

/// A kill -9 load run: begins and ends at 50 pairs a second on four GPUs, wattsond killed five
/// times with the calls going on (the ends sent while it is down are lost). Every job's record
/// is exact against its GPU's truth over its readings, none is split with a stale record, and
/// every record whose end was lost is closed when its GPU is given to the next job.
#[test]
fn a_kill_9_load_run_keeps_every_job_exact() {
    use std::time::Instant;
    use wattson_protocol::{Reply, Request};
    use wattson_types::job::JobKey;

    const GPUS: u32 = 4;
    let mut node = Node::h100(GPUS as usize);
    node.start();
    for gpu in 0..GPUS {
        node.sim.set_load(gpu, 0.5 + 0.1 * f64::from(gpu)).unwrap();
    }
    let socket = node.socket.clone();
    let call = |request: &Request| wattson_protocol::call(&socket, request, Duration::from_secs(2));
    // Each GPU's running job (by id), the jobs begun, and those whose end was answered.
    let mut on_gpu: Vec<Option<u32>> = vec![None; GPUS as usize];
    let (mut begun, mut ended) = (Vec::new(), Vec::new());
    let mut next_job = 1000u32;
    let started = Instant::now();
    let mut kills = 0;
    let mut down_since: Option<Instant> = None;
    let mut tick = 0u32;
    // Back from the last kill, a second more: every GPU goes to a new job after it.
    let mut last_back: Option<Instant> = None;
    while last_back.is_none_or(|at| at.elapsed() < Duration::from_secs(1)) {
        // A pair every 20 ms: the next GPU's job ends and another begins there.
        let gpu = (tick % GPUS) as usize;
        tick += 1;
        if let Some(job) = on_gpu[gpu].take()
            && matches!(call(&Request::JobEnd { job: JobKey::job(job) }), Ok(Reply::Ended { .. }))
        {
            ended.push(job);
        }
        next_job += 1;
        if matches!(call(&common::job_begin(next_job, gpu as u32)), Ok(Reply::Begun { .. })) {
            begun.push(next_job);
            on_gpu[gpu] = Some(next_job);
        }
        sleep(Duration::from_millis(20));
        // Killed every 2 s, back 0.5 s later.
        let since = started.elapsed();
        match down_since {
            None if kills < 5 && since > Duration::from_secs(2 * (kills + 1)) => {
                node.kill9();
                kills += 1;
                down_since = Some(Instant::now());
            }
            Some(at) if at.elapsed() > Duration::from_millis(500) => {
                node.start();
                down_since = None;
                if kills == 5 {
                    last_back = Some(Instant::now());
                }
            }
            _ => {}
        }
    }
    for job in on_gpu.into_iter().flatten() {
        node.end(&job.to_string());
        ended.push(job);
    }
    let lost: Vec<u32> = begun.iter().copied().filter(|j| !ended.contains(j)).collect();
    assert!(!lost.is_empty() && ended.len() > 100, "{} ended, {} lost", ended.len(), lost.len());
    for job in &begun {
        let record = node.record(&job.to_string());
        assert_eq!(record.state, JobState::Completed, "job {job} was left running");
        assert_eq!(record.split(), None, "job {job} shared its GPU with a stale record");
        let (truth, got) = (node.truth_mj(&record)[0], record.gpus[0].meter.energy_mj);
        assert!(common::rel_err(got, truth) < EXACT, "job {job}: {got} mJ against the GPU's {truth} mJ");
    }
    let log = node.log();
    assert!(log.matches("ending the job whose end was never reported").count() >= lost.len(), "{log}");
}
