//! Sustained load on wattsond: 100 job begin/end pairs per second on 8 simulated GPUs (root, as
//! Slurm's prolog and epilog) while 1,000 clients of an unprivileged user (uid 65534) ask for
//! `status` at once, every second, for a fixed time.
//!
//! Run: `cargo bench --bench load` (as root), for 60 s; `WATTSON_LOAD_SECS=600` for the
//! 10-minute run; `WATTSON_LOAD_CLIENTS=0` for the pairs alone (the baseline). Prints the pairs sent and failed, begin/end latency p50/p99, the status
//! clients' answers and failures, whether the stored records match the pairs one for one, and
//! the daemon's RSS at the start, each minute and at the end.

use wattson_harness::node as common;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use common::{NOBODY, Node, job_begin};
use wattson_protocol::{AcctQuery, Reply, Request};
use wattson_types::job::{JobKey, JobState};

const PAIRS_PER_S: u64 = 100;
const STATUS_CLIENTS: usize = 1_000;
const GPUS: u32 = 8;

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The unprivileged side: `STATUS_CLIENTS` threads asking for status every second for `secs`.
fn clients(socket: &Path, secs: u64) {
    let (answered, refused) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let started = Instant::now();
    let threads: Vec<_> = (0..STATUS_CLIENTS)
        .map(|_| {
            let (socket, answered, refused) = (socket.to_path_buf(), answered.clone(), refused.clone());
            std::thread::spawn(move || {
                for tick in 1..=secs {
                    match wattson_protocol::call(&socket, &Request::Status {}, Duration::from_secs(10)) {
                        Ok(_) => answered.fetch_add(1, Ordering::Relaxed),
                        Err(_) => refused.fetch_add(1, Ordering::Relaxed),
                    };
                    let next = started + Duration::from_secs(tick);
                    std::thread::sleep(next.saturating_duration_since(Instant::now()));
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    println!(
        "{STATUS_CLIENTS} unprivileged status clients every second: {} answered, {} refused (busy or over the per-user limit)",
        answered.load(Ordering::Relaxed),
        refused.load(Ordering::Relaxed)
    );
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--clients") {
        return clients(Path::new(&args[i + 1]), args[i + 2].parse().expect("seconds"));
    }
    let secs: u64 = std::env::var("WATTSON_LOAD_SECS").ok().and_then(|s| s.parse().ok()).unwrap_or(60);
    let mut node = Node::new(fake_nvml::Config::uniform("H100", GPUS as usize), "1s");
    node.start();
    let socket = node.socket.clone();
    let rss_start = rss_kib(node.pid());

    // 1,000 unprivileged clients, each asking for status once a second, at the same instants.
    let with_clients = std::env::var("WATTSON_LOAD_CLIENTS").map_or(true, |v| v != "0");
    let clients = with_clients.then(|| {
        std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--clients", &socket.display().to_string(), &secs.to_string()])
            .uid(NOBODY)
            .gid(NOBODY)
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("start the clients")
    });

    // The paced begin/end pairs, as Slurm's prolog and epilog would send them.
    let total = secs * PAIRS_PER_S;
    let mut took = Vec::with_capacity(2 * total as usize);
    let mut failed = 0u64;
    let period = Duration::from_secs(1) / PAIRS_PER_S as u32;
    let start = Instant::now();
    // The daemon's RSS each minute: does it level off?
    let mut rss_by_minute = vec![rss_start];
    for i in 0..total {
        let job = 1 + i as u32;
        if i > 0 && i % (60 * PAIRS_PER_S) == 0 {
            rss_by_minute.push(rss_kib(node.pid()));
        }
        std::thread::sleep((start + period * i as u32).saturating_duration_since(Instant::now()));
        for request in [job_begin(job, job % GPUS), Request::JobEnd { job: JobKey::job(job) }] {
            let t = Instant::now();
            match wattson_protocol::call(&socket, &request, Duration::from_secs(10)) {
                Ok(_) => took.push(t.elapsed()),
                Err(e) => {
                    failed += 1;
                    eprintln!("job {job}: {e}");
                }
            }
        }
    }
    let elapsed = start.elapsed();
    let clients = clients.map(|c| c.wait_with_output().expect("the clients' counts"));
    took.sort();
    let pct = |p: usize| took.get(took.len() * p / 100).copied().unwrap_or_default();
    let stored = stored_completed(&socket, total as u32);
    let rss_end = rss_kib(node.pid());

    println!("{secs} s of load on {GPUS} GPUs ({elapsed:.1?} to send the pairs)");
    println!("begin/end pairs: {total} sent, {failed} failed");
    println!("one call (begin or end): p50 {:.2?}, p99 {:.2?}, max {:.2?}", pct(50), pct(99), took.last());
    match clients {
        Some(out) => print!("{}", String::from_utf8_lossy(&out.stdout)),
        None => println!("no other clients (WATTSON_LOAD_CLIENTS=0)"),
    }
    println!(
        "completed records stored: {stored} of {total} ({})",
        if stored == total { "match" } else { "MISMATCH" }
    );
    println!("daemon RSS: {rss_start} KiB at the start, {rss_end} KiB at the end");
    println!("daemon RSS each minute (KiB): {rss_by_minute:?}");
}

/// How many of jobs 1..=n have exactly one completed record, asked in chunks the protocol takes.
fn stored_completed(socket: &Path, n: u32) -> u64 {
    let mut count = 0;
    for chunk in (1..=n).collect::<Vec<_>>().chunks(1_000) {
        let filter =
            AcctQuery { jobs: chunk.iter().map(|&j| JobKey::job(j)).collect(), ..AcctQuery::default() };
        match wattson_protocol::call(socket, &Request::Acct(filter), Duration::from_secs(60)) {
            Ok(Reply::Acct { records }) => {
                count += records.iter().filter(|r| r.state == JobState::Completed).count() as u64;
            }
            other => panic!("acct failed: {other:?}"),
        }
    }
    count
}
