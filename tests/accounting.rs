//! Per-job GPU energy against the simulated GPUs' exact ground truth, through the real daemon
//! and CLI: several jobs sharing a node, a daemon killed mid-job, and GPU faults.

mod common;

use std::thread::sleep;
use std::time::Duration;

use common::{Node, rel_err};
use fake_nvml::Fault;
use wattson::energy::{MeterEvent, Method};
use wattson::job::JobState;

const EXACT: f64 = 0.001; // 0.1 %

fn secs(s: f64) {
    sleep(Duration::from_secs_f64(s));
}

#[test]
fn jobs_sharing_a_node_each_get_their_exact_energy() {
    let mut node = Node::h100(4);
    node.start();
    node.sim.set_load(0, 0.9).unwrap();
    node.sim.set_load(1, 0.5).unwrap();
    node.begin("101", 1000, "0,1");
    secs(0.7);
    node.sim.set_load(2, 1.0).unwrap();
    node.begin("102", 1001, &node.gpu_uuid(2)); // GPUs may be named by UUID too
    secs(0.6);
    node.sim.set_load(0, 0.2).unwrap(); // a phase change in the middle of job 101
    node.sim.set_load(3, 0.7).unwrap(); // an idle GPU's load counts for nobody
    secs(0.9);
    node.end("101");
    secs(0.8);
    node.end("102");

    for (job, gpus) in [("101", vec![0, 1]), ("102", vec![2])] {
        let record = node.record(job);
        assert_eq!(record.state, JobState::Completed);
        assert_eq!(record.gpus.iter().map(|g| g.index).collect::<Vec<_>>(), gpus);
        assert_eq!(record.method(), Some(Method::Counter));
        let truth = node.truth_mj(&record);
        for (gpu, truth) in record.gpus.iter().zip(truth) {
            let err = rel_err(gpu.meter.energy_mj, truth);
            assert!(err < EXACT, "job {job} GPU {}: {} mJ vs truth {truth} mJ ({err:e})", gpu.index, gpu.meter.energy_mj);
        }
        // The record spans the job: from begin to end, measured by the daemon's own clock.
        assert!(record.elapsed_s(0) >= 1.3, "{record:?}");
    }
    // Bracketing: the truth over the wall-clock interval around job 101's calls bounds it.
    let r = node.record("101");
    assert!(r.energy_j() > 0.9 * (0.9 * 650.0 * 2.2), "{}", r.energy_j());
}

#[test]
fn a_killed_daemon_loses_no_energy_and_duplicates_no_record() {
    let mut node = Node::h100(2);
    node.start();
    node.sim.set_load(0, 0.8).unwrap();
    node.begin("7", 1000, "0");
    secs(0.8);
    node.kill9();
    // The GPU keeps drawing power while nobody watches; the load even changes.
    node.sim.set_load(0, 0.3).unwrap();
    secs(1.0);
    node.start();
    secs(0.6);
    node.end("7");
    let record = node.record("7");
    let truth = node.truth_mj(&record)[0];
    let err = rel_err(record.gpus[0].meter.energy_mj, truth);
    assert!(err < EXACT, "{} vs {truth} ({err:e})\n{}", record.gpus[0].meter.energy_mj, node.log());
    assert!(record.elapsed_s(0) > 2.3, "{}", record.elapsed_s(0));
    assert_eq!(record.method(), Some(Method::Counter));
    // Ending again (an Epilog retried) returns the same record and writes nothing new.
    node.end("7");
    let all = node.acct_json(&["-j", "7"]);
    assert_eq!(all.len(), 1, "{all:?}");
    assert_eq!(all[0].energy_j(), record.energy_j());
}

#[test]
fn a_lost_gpu_stops_only_its_own_meter() {
    let mut node = Node::h100(3);
    node.start();
    for gpu in 0..3 {
        node.sim.set_load(gpu, 0.6).unwrap();
    }
    node.begin("1", 1000, "0,1");
    node.begin("2", 1000, "2");
    secs(0.6);
    node.sim.set_fault(1, Fault::Lost).unwrap();
    secs(0.8);
    let status = node.wattson(&["status"]);
    common::assert_ok(&status);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(text.contains("GPU is lost"), "{text}");
    node.end("1");
    node.end("2");

    let job1 = node.record("1");
    let gpu1 = &job1.gpus[1];
    assert!(gpu1.meter.events.iter().any(|e| matches!(e, MeterEvent::GpuLost { .. })), "{gpu1:?}");
    // GPU 0 of the same job and job 2's GPU are still exact.
    let truth = node.truth_mj(&job1);
    assert!(rel_err(job1.gpus[0].meter.energy_mj, truth[0]) < EXACT);
    let job2 = node.record("2");
    assert!(rel_err(job2.gpus[0].meter.energy_mj, node.truth_mj(&job2)[0]) < EXACT);
    // GPU 1 is counted up to its last good reading, and the report says it was lost.
    assert!(gpu1.meter.energy_mj > 0.0 && gpu1.meter.energy_mj < truth[1]);
    let table = node.wattson(&["acct", "-j", "1", "-o", "JobID,Events", "-P"]);
    assert!(String::from_utf8_lossy(&table.stdout).contains("lost"), "{}", String::from_utf8_lossy(&table.stdout));
}

#[test]
fn a_gpu_without_energy_counter_is_metered_by_power_and_says_so() {
    let mut config = fake_nvml::Config::uniform("V100", 2);
    config.gpu[1].energy_counter = false;
    let mut node = Node::new(config, "");
    node.start();
    node.sim.set_load(0, 0.7).unwrap();
    node.sim.set_load(1, 0.7).unwrap();
    node.begin("5", 1000, "0,1");
    secs(2.0);
    node.end("5");
    let record = node.record("5");
    assert_eq!(record.gpus[0].meter.method, Method::Counter);
    assert_eq!(record.gpus[1].meter.method, Method::Power);
    assert_eq!(record.method(), Some(Method::CounterAndPower));
    let truth = node.truth_mj(&record);
    // Constant load: sampled power integrates to the truth closely, but not exactly.
    assert!(rel_err(record.gpus[1].meter.energy_mj, truth[1]) < 0.02);
    assert!(rel_err(record.gpus[0].meter.energy_mj, truth[0]) < EXACT);
}

#[test]
fn a_counter_reset_mid_job_is_detected_and_bridged() {
    let mut node = Node::h100(1);
    node.start();
    node.sim.set_load(0, 0.5).unwrap();
    node.begin("9", 1000, "0");
    secs(0.7);
    node.sim.set_fault(0, Fault::CounterReset).unwrap();
    secs(0.7);
    node.end("9");
    let record = node.record("9");
    let gpu = &record.gpus[0];
    assert_eq!(gpu.meter.method, Method::CounterAndPower);
    assert!(gpu.meter.events.iter().any(|e| matches!(e, MeterEvent::CounterReset { .. })), "{gpu:?}");
    // One sample interval (200 ms) of a constant load was estimated from power.
    let truth = node.truth_mj(&record)[0];
    assert!(rel_err(gpu.meter.energy_mj, truth) < 0.01, "{} vs {truth}", gpu.meter.energy_mj);
}
