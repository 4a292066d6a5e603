//! Daemon cost at 8 GPUs and 1 s sampling: CPU time per sample per GPU and resident memory of
//! the real `wattsond`, with no job (baseline: reading the GPUs only) and with 8 running jobs
//! (reading, metering and persisting), plus the simulated NVML library's own cost per GPU
//! read measured in-process, so the share that belongs to the stand-in is visible.
//!
//! Run: `cargo bench --bench daemon` (WATTSON_BENCH_SECS sets the measured seconds, default 30).

use wattson_harness::node as common;

use std::time::Duration;

use common::Node;

use fake_nvml::{Config, Sim};
use wattson_gpu::{GpuBackend, NvmlBackend};

const GPUS: u32 = 8;

fn main() {
    let secs: u64 = std::env::var("WATTSON_BENCH_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(30);

    println!("wattsond at {GPUS} simulated GPUs, 1 s sampling, {secs} s measured per case");
    println!("{:<28} {:>18} {:>12} {:>12}", "case", "CPU/sample/GPU", "RSS", "peak RSS");
    let mut per_gpu = Vec::new();
    for jobs in [0, GPUS] {
        let mut daemon = Node::new(Config::uniform("H100", GPUS as usize), "1s");
        daemon.start();
        for gpu in 0..GPUS {
            daemon.sim.set_load(gpu, 0.8).unwrap();
        }
        for job in 0..jobs {
            wattson_protocol::call(&daemon.socket, &common::job_begin(job + 1, job), Duration::from_secs(5))
                .unwrap();
        }
        std::thread::sleep(Duration::from_secs(2));
        let cpu0 = cpu_ns(daemon.pid());
        std::thread::sleep(Duration::from_secs(secs));
        let cpu1 = cpu_ns(daemon.pid());
        let (rss, hwm) = rss_kib(daemon.pid());
        let cpu_s = (cpu1 - cpu0) as f64 / 1e9;
        let us = cpu_s / (secs as f64 * f64::from(GPUS)) * 1e6;
        per_gpu.push(us);
        let case = format!("{jobs} running jobs");
        println!("{case:<28} {:>15.1} µs {:>9} KiB {:>8} KiB", us, rss, hwm);
    }

    // The stand-in's own cost: what one GPU read through nvml-wrapper costs in this process.
    let dir = tempfile::tempdir().unwrap();
    let sim = Sim::create(&dir.path().join("gpus"), &Config::uniform("H100", GPUS as usize)).unwrap();
    // SAFETY: single-threaded at this point; the variable is read by the library at init.
    unsafe { std::env::set_var(fake_nvml::DIR_ENV, sim.dir()) };
    let backend = NvmlBackend::open(Some(&common::fake_library())).unwrap();
    let reads = 2000;
    let cpu0 = own_cpu_s();
    for i in 0..reads {
        backend.read(i % GPUS).unwrap();
    }
    let fake_us = (own_cpu_s() - cpu0) / f64::from(reads) * 1e6;
    println!("{:<28} {:>15.1} µs  (CPU per read, in-process)", "simulated NVML read alone", fake_us);
    println!(
        "metering+persisting 8 jobs vs reading only: {:.2}x CPU per sample per GPU",
        per_gpu[1] / per_gpu[0].max(f64::MIN_POSITIVE)
    );
}

/// CPU time a process has run so far, in ns (`/proc/PID/schedstat`, summed over its threads).
fn cpu_ns(pid: u32) -> u64 {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

/// Current and peak resident memory, KiB.
fn rss_kib(pid: u32) -> (u64, u64) {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let field = |name: &str| {
        status
            .lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse().ok())
            .unwrap_or(0)
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// CPU time (user + system) of this process so far, seconds.
fn own_cpu_s() -> f64 {
    // SAFETY: getrusage writes one rusage struct through a valid pointer.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        libc::getrusage(libc::RUSAGE_SELF, &mut usage);
        usage
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    secs(usage.ru_utime) + secs(usage.ru_stime)
}
