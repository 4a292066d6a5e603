//! Read-only check of a node's NVIDIA GPUs through wattson's own NVML backend: what it
//! enumerates, and how the energy counter and the power readings behave while the GPUs run.
//! It changes no setting (the backend is wrapped in [`ReadOnly`]).
//!
//! `cargo run --release -p wattson-gpu --example read_only_check -- [SECONDS] [CSV] [LIBRARY]`
//!
//! For SECONDS (default 10) it reads every GPU's counter as fast as it can and the power every
//! 10 ms, then prints per GPU: the counter's steps (interval between changes, energy per
//! change) and the counter's energy against the power readings integrated over the same time;
//! four times, each GPU's compute processes and their SM use.
//! CSV (optional) gets every counter change and power reading: `kind,gpu,t_ns,value,window_ns`
//! (`gpu` the UUID) with
//! kind `counter` (mJ, `value` as read, `t_ns` the read that saw the change, `window_ns` the
//! time since the read before it) or `power` (mW). LIBRARY loads another NVML (the fake).

use std::io::Write;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wattson_gpu::{GpuBackend, NvmlBackend, ReadOnly};

/// One GPU's observations.
#[derive(Default)]
struct Watch {
    /// (t_ns of the read that saw it, window since the previous read in ns, counter mJ).
    changes: Vec<(i64, i64, u64)>,
    /// (t_ns, power mW).
    power: Vec<(i64, u32)>,
    last: Option<(i64, u64)>,
    reads: u64,
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let seconds: f64 = args.first().map(|s| s.parse().expect("SECONDS is a number")).unwrap_or(10.0);
    let csv = args.get(1).filter(|s| !s.is_empty()).map(|p| std::fs::File::create(p).expect("CSV"));
    let library = args.get(2).map(std::path::PathBuf::from);
    let nvml = NvmlBackend::open(library.as_deref()).unwrap_or_else(|e| panic!("NVML: {e}"));
    println!("driver {}", nvml.driver_version().unwrap_or_else(|| "unknown".into()));
    let gpus = ReadOnly(Arc::new(nvml));
    for d in gpus.devices() {
        let now = gpus.settings(d.index);
        let clocks = |v: &[u32]| match (v.iter().min(), v.iter().max()) {
            (Some(lo), Some(hi)) => format!("{} values {lo}-{hi} MHz", v.len()),
            _ => "none".into(),
        };
        println!(
            "gpu {} {} {} pci {} minor {:?} counter {} power limit min/max/default {:?}/{:?}/{:?} mW, now {:?}; \
             SM clocks {}; memory clocks {}; MIG instances {}",
            d.index,
            d.name,
            d.uuid,
            d.pci_bus_id,
            d.minor_number,
            d.energy_counter,
            d.power_limit_min_mw,
            d.power_limit_max_mw,
            d.power_limit_default_mw,
            now.map(|s| (s.power_limit_mw, s.app_sm_clock_mhz)),
            clocks(&d.sm_clocks_mhz),
            clocks(&d.mem_clocks_mhz),
            d.mig.len()
        );
    }
    let indices: Vec<u32> = gpus.devices().iter().map(|d| d.index).collect();
    for &index in &indices {
        let took = |read: &dyn Fn()| {
            let t = Instant::now();
            read();
            t.elapsed().as_secs_f64() * 1e6
        };
        let counter: Vec<f64> = (0..200).map(|_| took(&|| drop(gpus.read_counter(index)))).collect();
        let full: Vec<f64> = (0..200).map(|_| took(&|| drop(gpus.read(index)))).collect();
        println!("gpu {index}: one counter read takes (µs) {}", spread(counter));
        println!("gpu {index}: one full read (counter, power, clock, use) takes (µs) {}", spread(full));
    }
    let mut watches: Vec<Watch> = indices.iter().map(|_| Watch::default()).collect();
    let start = Instant::now();
    let mut next_power = start;
    let mut processes_told = 0;
    while start.elapsed().as_secs_f64() < seconds {
        if processes_told < 4
            && start.elapsed().as_secs_f64() >= seconds * f64::from(processes_told + 1) / 5.0
        {
            processes_told += 1;
            // What the shared-GPU split reads: the GPU's processes and each one's SM use.
            let since_us = (wattson_types::now_ns() / 1000 - 1_000_000) as u64;
            for &index in &indices {
                println!(
                    "gpu {index} at {:.1} s: compute processes {:?}; SM use in the last 1 s (pid, %) {:?}",
                    start.elapsed().as_secs_f64(),
                    gpus.compute_processes(index),
                    gpus.process_utilization(index, since_us)
                );
            }
        }
        for (w, r) in watches.iter_mut().zip(gpus.read_counters(&indices)) {
            let Ok((t, Some(mj))) = r else { continue };
            w.reads += 1;
            if let Some((t0, e0)) = w.last
                && mj != e0
            {
                w.changes.push((t, t - t0, mj));
            }
            w.last = Some((t, mj));
        }
        if Instant::now() >= next_power {
            next_power += Duration::from_millis(10);
            for (w, r) in watches.iter_mut().zip(gpus.read_many(&indices)) {
                if let Ok(reading) = r
                    && let Some(mw) = reading.power_mw
                {
                    w.power.push((reading.t_ns, mw));
                }
            }
        }
    }
    for (index, w) in indices.iter().zip(&watches) {
        summarise(*index, w, seconds);
    }
    if let Some(mut file) = csv {
        writeln!(file, "kind,gpu,t_ns,value,window_ns").unwrap();
        for (d, w) in gpus.devices().iter().zip(&watches) {
            for (t, window, mj) in &w.changes {
                writeln!(file, "counter,{},{t},{mj},{window}", d.uuid).unwrap();
            }
            for (t, mw) in &w.power {
                writeln!(file, "power,{},{t},{mw},", d.uuid).unwrap();
            }
        }
    }
}

/// Percentiles 10, 50 and 90 of `v` (sorted here).
fn spread(mut v: Vec<f64>) -> String {
    if v.is_empty() {
        return "none".into();
    }
    v.sort_by(f64::total_cmp);
    let at = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    format!("p10 {:.1} / median {:.1} / p90 {:.1}", at(0.1), at(0.5), at(0.9))
}

fn summarise(index: u32, w: &Watch, seconds: f64) {
    let ms = |ns: i64| ns as f64 / 1e6;
    println!("gpu {index}: {} counter reads in {seconds} s, {} changes", w.reads, w.changes.len());
    let windows: Vec<f64> = w.changes.iter().map(|c| ms(c.1)).collect();
    println!("  window around each change (ms): {}", spread(windows));
    let gaps: Vec<f64> = w.changes.windows(2).map(|p| ms(p[1].0 - p[0].0)).collect();
    println!("  time between changes (ms): {}", spread(gaps));
    let steps: Vec<f64> = w.changes.windows(2).map(|p| (p[1].2 - p[0].2) as f64).collect();
    println!("  energy per change (mJ): {}", spread(steps));
    let (Some(first), Some(last)) = (w.changes.first(), w.changes.last()) else { return };
    // Power readings integrated (trapezoid) between the first and the last change seen.
    let inside: Vec<&(i64, u32)> = w.power.iter().filter(|p| p.0 >= first.0 && p.0 <= last.0).collect();
    let integrated: f64 =
        inside.windows(2).map(|p| (p[1].0 - p[0].0) as f64 / 1e9 * (p[0].1 + p[1].1) as f64 / 2.0).sum();
    let span_inside = inside.last().zip(inside.first()).map(|(b, a)| (b.0 - a.0) as f64 / 1e9).unwrap_or(0.0);
    let span_counter = (last.0 - first.0) as f64 / 1e9;
    let counter = (last.2 - first.2) as f64;
    // Scaled to the counter's span, which the power readings may fall short of at the ends.
    let integrated = if span_inside > 0.0 { integrated * span_counter / span_inside } else { 0.0 };
    println!(
        "  over {span_counter:.3} s: counter {:.1} J, power readings integrated {:.1} J ({:+.2}%), mean power {:.1} W",
        counter / 1e3,
        integrated / 1e3,
        (integrated / counter - 1.0) * 100.0,
        counter / 1e3 / span_counter
    );
}
