//! Cooperating local users flooding the daemon (16 and 64 uids, each holding 100 idle
//! connections to the socket; 64 half-open `/metrics` connections kept open): every one of
//! root's begin/end pairs, another user's own calls and the scrapes is still answered, each
//! within the client's timeout. The verdict counts answers; it never compares latencies, which
//! on a shared machine measure the machine as much as the daemon (issue 55, item 8: a p99
//! bound failed on a loaded 2-core machine). The latencies are printed, idle and under the
//! flood; `cargo bench --bench flood` measures the daemon's latency under floods
//! (docs/benchmarks.md). The daemon runs under an open-files limit of 1,024, as in a
//! container, so its admission totals are fitted to it. Loopback and the unix socket only;
//! every child is bounded in count and time.

use wattson_harness::node as common;

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use common::{Node, job_begin};
use wattson_protocol::{JobBegin, Reply, Request};
use wattson_types::job::{GpuRef, Hints, JobKey};

const CHILD_SOCKET: &str = "WATTSON_FLOOD_SOCKET";
const CHILD_CALLS: &str = "WATTSON_FLOOD_CALLS";
/// Idle connections each flooding user holds.
const CONNECTIONS_EACH: usize = 100;
/// Calls measured in each phase.
const CALLS: usize = 200;
/// The user whose own calls are measured (not one of the flooders).
const PROBE_UID: u32 = 40_000;
/// The probe user's job, whose settings it asks for as the SPANK plugin does.
const PROBE_JOB: u32 = 1;

/// Not a test on its own: a flooding user. Opens `WATTSON_FLOOD_CALLS` connections that send
/// nothing, says how many, and holds them until its stdin closes (at most 120 s).
#[test]
#[ignore = "run by the flood tests as a flooding uid"]
fn child_floods() {
    let socket = std::env::var(CHILD_SOCKET).expect("run by a flood test");
    let n: usize = std::env::var(CHILD_CALLS).unwrap().parse().unwrap();
    let held: Vec<UnixStream> = (0..n).filter_map(|_| UnixStream::connect(&socket).ok()).collect();
    println!("HOLDING {}", held.len());
    let (done, wait) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = std::io::stdin().read(&mut [0u8; 1]);
        let _ = done.send(());
    });
    let _ = wait.recv_timeout(Duration::from_secs(120));
}

/// Not a test on its own: the measured user. Makes `WATTSON_FLOOD_CALLS` calls, alternately
/// `status` and its job's settings, and prints each one's latency (µs) or failure.
#[test]
#[ignore = "run by the flood tests as the measured uid"]
fn child_probes() {
    let socket = std::path::PathBuf::from(std::env::var(CHILD_SOCKET).expect("run by a flood test"));
    let n: usize = std::env::var(CHILD_CALLS).unwrap().parse().unwrap();
    for i in 0..n {
        let request = if i % 2 == 0 {
            Request::Status {}
        } else {
            Request::JobSettings { job: JobKey::job(PROBE_JOB) }
        };
        let t = Instant::now();
        match wattson_protocol::call(&socket, &request, Duration::from_secs(10)) {
            Ok(_) => println!("LATENCY {}", t.elapsed().as_micros()),
            Err(e) => println!("FAILED {e}"),
        }
    }
}

/// Children killed and reaped when dropped, whatever happens to the test.
struct Children(Vec<Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn child(test: &str, uid: u32, socket: &std::path::Path, calls: usize) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &wattson_harness::test_name(module_path!(), test),
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_SOCKET, socket)
        .env(CHILD_CALLS, calls.to_string())
        .uid(uid)
        .gid(uid)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The nearest-rank 99th percentile.
fn p99(mut samples: Vec<Duration>) -> Duration {
    assert!(!samples.is_empty());
    samples.sort();
    samples[(samples.len() * 99).div_ceil(100) - 1]
}

/// The measured user's call latencies; panics if any call failed.
fn probe(socket: &std::path::Path) -> Vec<Duration> {
    let out = child("child_probes", PROBE_UID, socket, CALLS).wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(!text.contains("FAILED"), "the measured user's calls failed:\n{text}");
    let latencies: Vec<Duration> = text
        .lines()
        .filter_map(|l| {
            l.split_once("LATENCY ").map(|(_, us)| Duration::from_micros(us.trim().parse().unwrap()))
        })
        .collect();
    assert_eq!(latencies.len(), CALLS, "{text}");
    latencies
}

/// Root's begin/end pairs on GPU 1 (jobs `first..first + CALLS`): each pair's latency.
fn root_pairs(node: &Node, first: u32) -> Vec<Duration> {
    let call = |request: &Request| wattson_protocol::call(&node.socket, request, Duration::from_secs(10));
    (first..first + CALLS as u32)
        .map(|job| {
            let t = Instant::now();
            call(&job_begin(job, 1)).unwrap_or_else(|e| panic!("root's begin of job {job}: {e}"));
            match call(&Request::JobEnd { job: JobKey::job(job) }) {
                Ok(Reply::Ended { .. }) => {}
                other => panic!("root's end of job {job}: {other:?}"),
            }
            t.elapsed()
        })
        .collect()
}

/// Prints what the calls took, idle and under the flood: a figure, not a verdict.
fn report(what: &str, idle: Duration, flood: Duration) {
    println!("{what}: p99 idle {idle:?}, under the flood {flood:?} (every call answered)");
}

fn flood(users: u32) {
    let mut node = Node::h100(2);
    node.start_under(&["prlimit".to_string(), "--nofile=1024:1024".to_string()], &[]);
    let begin = Request::JobBegin(JobBegin {
        job: JobKey::job(PROBE_JOB),
        uid: PROBE_UID,
        user: None,
        name: None,
        account: None,
        gpus: vec![GpuRef::Index(0)],
        hints: Hints::default(),
        shares_gpus: false,
    });
    wattson_protocol::call(&node.socket, &begin, Duration::from_secs(5)).unwrap();

    let (idle_root, idle_user) = (p99(root_pairs(&node, 1000)), p99(probe(&node.socket)));

    let mut flooders = Children(
        (0..users).map(|u| child("child_floods", 20_000 + u, &node.socket, CONNECTIONS_EACH)).collect(),
    );
    let mut held = 0;
    for flooder in &mut flooders.0 {
        let mut out = BufReader::new(flooder.stdout.as_mut().unwrap());
        let mut line = String::new();
        // libtest writes its own lines before the child's.
        held += loop {
            line.clear();
            assert!(out.read_line(&mut line).unwrap() > 0, "a flooder ended before saying HOLDING");
            if let Some((_, n)) = line.split_once("HOLDING ") {
                break n.trim().parse::<usize>().unwrap();
            }
        };
    }
    assert!(held >= users as usize * CONNECTIONS_EACH / 2, "the flooders connected {held} times");

    let (flood_root, flood_user) = (p99(root_pairs(&node, 2000)), p99(probe(&node.socket)));
    for flooder in &mut flooders.0 {
        drop(flooder.stdin.take());
    }
    drop(flooders);
    report(&format!("{users} users: root's begin/end"), idle_root, flood_root);
    report(&format!("{users} users: another user's calls"), idle_user, flood_user);
}

#[test]
fn sixteen_cooperating_users_leave_root_and_other_users_answered() {
    flood(16);
}

#[test]
fn sixty_four_cooperating_users_leave_root_and_other_users_answered() {
    flood(64);
}

/// 64 half-open `/metrics` connections, each opened again as soon as the daemon closes it:
/// every one of 20 scrapes meanwhile is answered.
#[test]
fn metrics_are_scraped_while_64_half_open_connections_are_held() {
    let mut node = Node::h100(1);
    let port = node.serve_metrics("");
    node.start();
    std::thread::sleep(Duration::from_millis(300));
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let holder = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let open = || {
                let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
                let _ = s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n");
                s.set_nonblocking(true).unwrap();
                s
            };
            let mut held: Vec<std::net::TcpStream> = (0..64).map(|_| open()).collect();
            let deadline = Instant::now() + Duration::from_secs(60);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && Instant::now() < deadline {
                for s in &mut held {
                    // Closed by the daemon (EOF or reset): open another at once.
                    let closed = match s.read(&mut [0u8; 512]) {
                        Ok(_) => true,
                        Err(e) => e.kind() != std::io::ErrorKind::WouldBlock,
                    };
                    if closed {
                        *s = open();
                    }
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(300));
    let mut answered = 0;
    for _ in 0..20 {
        if scrape(port) {
            answered += 1;
        }
        std::thread::sleep(Duration::from_millis(150));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    holder.join().unwrap();
    assert_eq!(answered, 20, "scrapes answered while 64 half-open connections were held");
}

/// One scrape on loopback: whether it got a 200 within 5 s.
fn scrape(port: u16) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out.starts_with("HTTP/1.1 200")
}
