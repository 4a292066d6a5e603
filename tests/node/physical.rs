//! Per-job energy against physical truth, on fake GPUs that behave as real ones do
//! (fake-nvml's `realism`: a counter that steps every 100 ms, power readings averaged over
//! sampled windows, heat, settings that settle). The reference is the energy the GPU drew
//! between the instants the daemon gives as the job's begin and end, never its counter.

use wattson_harness::node as common;

use std::thread::sleep;
use std::time::Duration;

use common::{Bracket, Node, physical_errors};
use fake_nvml::{Config, GpuConfig};
use wattson_types::energy::Method;

fn secs(s: f64) {
    sleep(Duration::from_secs_f64(s));
}

/// Job `id` on GPUs 0 and 1 for 30 s, in six phases of 5 s at the loads `load(phase, gpu)`;
/// returns the intervals around its begin and end.
fn thirty_seconds(node: &Node, id: &str, load: impl Fn(u32, u32) -> f64) -> (Bracket, Bracket) {
    let begin = node.begin(id, 1000, "0,1");
    for phase in 0..6u32 {
        for g in 0..2 {
            node.sim.set_load(g, load(phase, g)).unwrap();
        }
        secs(5.0);
    }
    (begin, node.end(id))
}

/// The largest error of a job's GPUs, printed with the job's name.
fn worst(name: &str, errors: &[f64]) -> f64 {
    let worst = errors.iter().fold(0.0f64, |m, e| m.max(e.abs()));
    eprintln!("{name}: errors {errors:?}, worst {worst:e}");
    worst
}

#[test]
fn two_second_jobs_are_within_one_percent_of_what_the_gpus_drew() {
    two_second_jobs(Config::realistic("H100", 4));
}

/// The same on a slow driver: every counter read takes 5 ms, about an H200's p90 in a VM
/// (docs/accounting.md, "On a real GPU").
#[test]
fn two_second_jobs_on_a_slow_driver_are_within_one_percent_of_what_the_gpus_drew() {
    let mut config = Config::realistic("H100", 4);
    for gpu in &mut config.gpu {
        gpu.realism.as_mut().expect("realistic").read_latency_ms = Some(5.0);
    }
    two_second_jobs(config);
}

/// Four GPUs, their counters stepping at four phases; each job's work starts 0.3 s after its
/// begin and is still running when it ends (killed at its time limit): a plain read at the end
/// would miss up to a step of full power (65 J of a 1.1 kJ job).
fn two_second_jobs(gpus: Config) {
    let mut node = Node::new(gpus, "1s");
    node.start();
    let begins: Vec<_> = (0..4).map(|g| node.begin(&format!("20{g}"), 1000, &g.to_string())).collect();
    secs(0.3);
    (0..4).for_each(|g| node.sim.set_load(g, 1.0).unwrap());
    secs(1.7);
    let ends: Vec<_> = (0..4).map(|g| node.end(&format!("20{g}"))).collect();
    (0..4).for_each(|g| node.sim.set_load(g, 0.0).unwrap());
    for g in 0..4 {
        let record = node.record(&format!("20{g}"));
        assert_eq!(record.method(), Some(Method::Counter));
        let errors = physical_errors(&node, &record, begins[g as usize], ends[g as usize]);
        assert!(worst(&format!("2 s job on GPU {g}"), &errors) < 0.01, "{}", node.log());
    }
}

#[test]
fn a_thirty_second_job_is_within_a_tenth_of_a_percent() {
    let mut node = Node::new(Config::realistic("A100", 2), "1s");
    node.start();
    let (begin, end) =
        thirty_seconds(&node, "30", |phase, g| 0.1 + f64::from((phase * 3 + g * 5) % 10) / 10.0);
    let record = node.record("30");
    assert_eq!(record.method(), Some(Method::Counter));
    assert!(worst("30 s job", &physical_errors(&node, &record, begin, end)) < 0.001);
}

#[test]
fn without_a_counter_integrated_power_readings_are_within_two_percent_over_thirty_seconds() {
    // GPUs without the counter: wattson integrates the power readings, which on an H100 are
    // 1 s averages of 25 ms windows, on an A100 the latest window alone.
    let gpu = |model: &str| GpuConfig { energy_counter: Some(false), ..GpuConfig::preset(model).realistic() };
    let mut node = Node::new(Config { gpu: vec![gpu("H100"), gpu("A100")], ..Config::default() }, "1s");
    node.start();
    let (begin, end) =
        thirty_seconds(&node, "31", |phase, g| 0.2 + f64::from((phase * 7 + g * 3) % 8) / 10.0);
    let record = node.record("31");
    assert_eq!(record.method(), Some(Method::Power));
    assert!(worst("30 s job, power readings", &physical_errors(&node, &record, begin, end)) < 0.02);
}
