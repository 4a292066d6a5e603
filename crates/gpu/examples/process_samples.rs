//! Read-only: the per-process SM samples NVML keeps for the first GPU, as wattsond's split of a
//! shared GPU reads them (`GpuBackend::process_utilization`), with their timestamps.
//!
//! `cargo run --release -p wattson-gpu --example process_samples -- [SECONDS] [EVERY_MS]`
//!
//! Every EVERY_MS (default 1000, wattsond's sample interval) for SECONDS (default 8) it asks
//! for the samples since the newest seen, prints each (pid, µs since the first, SM %), and at
//! the end each process's share of all the SM % (what the split gives it) and its sample count.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use nvml_wrapper::Nvml;

fn main() {
    let args: Vec<f64> = std::env::args().skip(1).map(|a| a.parse().expect("a number")).collect();
    let (seconds, every_ms) = (args.first().copied().unwrap_or(8.0), args.get(1).copied().unwrap_or(1000.0));
    let nvml = Nvml::init().expect("NVML");
    let gpu = nvml.device_by_index(0).expect("GPU 0");
    let start = Instant::now();
    let mut newest = 0u64;
    let mut origin = None;
    let mut by_pid: BTreeMap<u32, (u64, u32)> = BTreeMap::new();
    while start.elapsed().as_secs_f64() < seconds {
        std::thread::sleep(Duration::from_secs_f64(every_ms / 1e3));
        let samples = match gpu.process_utilization_stats(newest) {
            Ok(samples) => samples,
            Err(e) => {
                println!("{:.2} s: {e}", start.elapsed().as_secs_f64());
                continue;
            }
        };
        let at = start.elapsed().as_secs_f64();
        for s in &samples {
            let origin = *origin.get_or_insert(s.timestamp);
            println!(
                "{at:.2} s: pid {} at {} µs SM {}%",
                s.pid,
                s.timestamp.saturating_sub(origin),
                s.sm_util
            );
            let e = by_pid.entry(s.pid).or_default();
            e.0 += u64::from(s.sm_util);
            e.1 += 1;
            newest = newest.max(s.timestamp);
        }
    }
    let total: u64 = by_pid.values().map(|v| v.0).sum();
    for (pid, (sum, n)) in by_pid {
        println!(
            "pid {pid}: {n} samples, {:.1}% of the SM % summed",
            sum as f64 / total.max(1) as f64 * 100.0
        );
    }
}
