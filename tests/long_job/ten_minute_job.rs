//! A 10-minute job (the long end of the accuracy requirement) on a node of 8 GPUs at the
//! default 1 s sampling, with the load changing every 20 s, next to a 2-second job, judged
//! against physical truth on GPUs that behave as real ones do (a counter that steps every
//! 100 ms, heat). Takes ten minutes of wall time, on purpose.

use wattson_harness::node as common;

use std::thread::sleep;
use std::time::{Duration, Instant};

use common::{Node, physical_errors};
use wattson_types::energy::Method;

#[test]
fn a_ten_minute_job_is_within_a_hundredth_of_a_percent_of_what_its_gpus_drew() {
    let mut node = Node::new(fake_nvml::Config::realistic("A100", 8), "1s");
    node.start();

    let long = node.begin("500", 1000, "0,1,2,3,4,5");
    let short_begin = node.begin("501", 1001, "6");
    sleep(Duration::from_secs(2));
    let short_end = node.end("501");

    let start = Instant::now();
    let mut phase = 0u32;
    while start.elapsed() < Duration::from_secs(600) {
        // A deterministic pattern of loads between 0.05 and 1.0, different per GPU.
        for gpu in 0..6 {
            let load = 0.05 + f64::from((phase * 7 + gpu * 3) % 20) / 20.0;
            node.sim.set_load(gpu, load).unwrap();
        }
        phase += 1;
        sleep(Duration::from_secs(20).min(Duration::from_secs(600).saturating_sub(start.elapsed())));
    }
    let long_end = node.end("500");

    let record = node.record("500");
    assert_eq!(record.method(), Some(Method::Counter));
    assert!(record.elapsed_s(0) >= 600.0);
    let errors = physical_errors(&node, &record, long, long_end);
    eprintln!("10-minute job, relative errors per GPU: {errors:?}");
    assert!(errors.iter().all(|e| e.abs() < 1e-4), "10-minute job: {errors:?}");
    let short = node.record("501");
    let errors = physical_errors(&node, &short, short_begin, short_end);
    eprintln!("2-second job: {errors:?}");
    assert!(errors.iter().all(|e| e.abs() < 0.01), "2-second job: {errors:?}");
    assert!(short.elapsed_s(0) >= 2.0 && short.elapsed_s(0) < 3.0);
}
