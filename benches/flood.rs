//! Root job begin/end latency while unprivileged users flood wattsond with `acct` queries.
//!
//! Run: `cargo bench --bench flood` (as root: the flood runs as uid 65534).
//!
//! Starts the real `wattsond` on 4 simulated GPUs with a store of 2,000 completed jobs, then
//! times `N` begin+end pairs sent as root over the socket: first with the daemon idle (the
//! baseline), then while 64 threads of an unprivileged process send `acct` requests for 900 job
//! ids each, back to back. Prints p50/p99 of both and their ratio (same run, same daemon).

use wattson_harness::node as common;

use std::os::unix::process::CommandExt;
use std::path::Path;
use std::time::{Duration, Instant};

use common::{NOBODY, Node, job_begin};
use wattson_protocol::{AcctQuery, Request};
use wattson_types::job::JobKey;

const FLOODERS: usize = 64;
const IDS: u32 = 900;
const PAIRS: u32 = 200;

fn main() {
    // Re-executed as the unprivileged flooder: `flood SOCKET`.
    let args: Vec<String> = std::env::args().collect();
    if let Some(i) = args.iter().position(|a| a == "--flood") {
        return flood(Path::new(&args[i + 1]));
    }
    let mut node = Node::h100(4);
    node.start();
    for job in 0..2000 {
        let gpu = job % 4;
        call(&node.socket, &job_begin(100_000 + job, gpu));
        call(&node.socket, &Request::JobEnd { job: JobKey::job(100_000 + job) });
    }
    let idle = time_pairs(&node.socket, 1);
    let mut flooder = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--flood", &node.socket.display().to_string()])
        .uid(NOBODY)
        .gid(NOBODY)
        .spawn()
        .expect("start the flooder");
    std::thread::sleep(Duration::from_secs(2));
    let flooded = time_pairs(&node.socket, 1 + PAIRS);
    let _ = flooder.kill();
    let _ = flooder.wait();

    println!("root job begin+end over the socket, {PAIRS} pairs each (one call = half a pair)");
    println!("{:<40} {:>10} {:>10}", "case", "p50", "p99");
    println!("{:<40} {:>10.2?} {:>10.2?}", "idle", idle.0, idle.1);
    println!(
        "{:<40} {:>10.2?} {:>10.2?}",
        format!("{FLOODERS} unprivileged acct floods"),
        flooded.0,
        flooded.1
    );
    println!(
        "ratio flooded/idle: p50 {:.2}x, p99 {:.2}x",
        flooded.0.as_secs_f64() / idle.0.as_secs_f64(),
        flooded.1.as_secs_f64() / idle.1.as_secs_f64()
    );
}

fn call(socket: &Path, request: &Request) {
    wattson_protocol::call(socket, request, Duration::from_secs(10)).expect("root call");
}

/// p50 and p99 of one call (begin or end) over `PAIRS` begin+end pairs starting at job `first`.
fn time_pairs(socket: &Path, first: u32) -> (Duration, Duration) {
    let mut took: Vec<Duration> = (first..first + PAIRS)
        .map(|job| {
            let t = Instant::now();
            call(socket, &job_begin(job, job % 4));
            call(socket, &Request::JobEnd { job: JobKey::job(job) });
            t.elapsed() / 2
        })
        .collect();
    took.sort();
    (took[took.len() / 2], took[took.len() * 99 / 100])
}

/// 64 threads sending `acct` for 900 job ids each, back to back, until killed.
fn flood(socket: &Path) {
    let filter = AcctQuery { jobs: (1..=IDS).map(JobKey::job).collect(), ..AcctQuery::default() };
    let request = Request::Acct(filter);
    let threads: Vec<_> = (0..FLOODERS)
        .map(|_| {
            let (socket, request) = (socket.to_path_buf(), request.clone());
            std::thread::spawn(move || {
                loop {
                    let _ = wattson_protocol::call(&socket, &request, Duration::from_secs(30));
                }
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
}
