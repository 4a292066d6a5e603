//! `wattson ctld`'s own cost at scale:
//! - one loop at 1,000 nodes / 10,000 pending jobs and at 10,000 / 50,000: parsing Slurm's
//!   output (synthetic, in the exact format of Slurm 22.05's `scontrol -d -o show node` and
//!   `squeue`), building the engine's snapshot and deciding;
//! - the link's fan-out to 10,000 nodes (fake nodes on loopback, sealed with a real munged):
//!   all answering, and with hung nodes against the loop's deadline;
//! - the summary pass: the jobs Slurm is asked to list per pass as summarized jobs pile up,
//!   against the previous pass (the whole `summary_wait` window every loop);
//! - Slurm's own two commands per loop against a real slurmctld (the lab's three nodes).
//!
//! Run: `cargo bench --bench ctld` (as root: the fake nodes seal as root; WATTSON_BENCH_LOOPS,
//! default 50).

use wattson_harness::slurm_lab;

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use wattson_config::Config;
use wattson_config::link::LinkConfig;
use wattson_ctld::nodes::Nodes;
use wattson_ctld::summarize::passes::Passes;
use wattson_ctld::summarize::{self, Written};
use wattson_ctld::{Planner, slurm};
use wattson_harness::fake_link::FakeLink;
use wattson_sacct::summary::{self as job_summary, JobSummary};

/// `scontrol -d -o show node` for `nodes` nodes of 8 GPUs: a third busy, a third idle, a third
/// powered down.
fn nodes_text(nodes: usize) -> String {
    let mut text = String::new();
    for i in 0..nodes {
        let (state, used, cpus) = match i % 3 {
            0 => ("MIXED", 5, 40),
            1 => ("IDLE", 0, 0),
            _ => ("IDLE+POWERED_DOWN", 0, 0),
        };
        let _ = writeln!(
            text,
            "NodeName=gpu{i:05} Arch=x86_64 CoresPerSocket=32  CPUAlloc={cpus} CPUEfctv=64 CPUTot=64 CPULoad=12.01 \
             AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:h100:8(S:0-1) GresDrain=N/A \
             GresUsed=gpu:h100:{used}(IDX:0-{last}) NodeAddr=gpu{i:05} NodeHostName=gpu{i:05} Version=22.05.8 \
             OS=Linux 6.1.0-18-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.76-1 (2024-02-01)  RealMemory=1000000 \
             AllocMem=0 FreeMem=900000 Sockets=2 Boards=1 State={state} ThreadsPerCore=1 TmpDisk=0 Weight=1 \
             Owner=N/A MCS_label=N/A Partitions=gpu,wattson  BootTime=2026-11-20T10:00:00 \
             SlurmdStartTime=2026-11-20T10:01:00 LastBusyTime=2026-11-23T23:36:19 CfgTRES=cpu=64,mem=1000000M,billing=64 \
             AllocTRES=cpu={cpus} CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 \
             ExtSensorsTemp=n/s",
            last = used.max(1) - 1
        );
    }
    text
}

/// `squeue -h -o`: a running job on each busy node of `nodes`, then `pending` pending jobs.
fn jobs_text(nodes: usize, pending: usize) -> String {
    let mut text = String::new();
    for j in 0..nodes / 3 + pending {
        let (state, reason, used) =
            if j < nodes / 3 { ("RUNNING", "None", "3:12:09") } else { ("PENDING", "Priority", "0:00") };
        let _ = writeln!(
            text,
            "{}|{state}|{reason}|1|gres:gpu:{}|2026-11-23T{:02}:{:02}:00|{used}|1-00:00:00|{}|{}|gpu|(null)|0",
            100_000 + j,
            1 + j % 8,
            (j / 60) % 24,
            j % 60,
            1_000_000 - j,
            if state == "RUNNING" { format!("gpu{:05}", j * 3) } else { String::new() }
        );
    }
    text
}

fn main() {
    let loops = |default: u32| -> u32 {
        std::env::var("WATTSON_BENCH_LOOPS").ok().and_then(|s| s.parse().ok()).unwrap_or(default)
    };
    one_loop(1_000, 10_000, loops(50));
    one_loop(10_000, 50_000, loops(50));
    summary_passes();
    // Slurm's own commands per loop, against a real slurmctld (the lab's three nodes).
    let nodes = ["n1", "n2", "n3"].map(|n| slurm_lab::LabNode::new(n, 2, "h100")).to_vec();
    let lab = slurm_lab::SlurmLab::start(slurm_lab::LabOptions { nodes, ..Default::default() });
    let command = |args: &[&str]| {
        let mut t = Vec::new();
        for _ in 0..20 {
            let started = Instant::now();
            lab.run_ok(args[0], &args[1..]);
            t.push(started.elapsed());
        }
        t.sort();
        t[t.len() / 2]
    };
    let show = command(&["scontrol", "-d", "-o", "show", "node"]);
    let queue = command(&["squeue", "-h", "-t", "PD,CF,R", "-o", slurm::SQUEUE_FORMAT]);
    println!(
        "Slurm's commands per loop (real slurmctld, 3 nodes, p50 of 20): scontrol -d -o show node {:.1} ms, squeue {:.1} ms",
        ms(show),
        ms(queue)
    );
    fan_out(&lab);
    lab.stop();
}

/// Parse, snapshot and decide at `nodes` nodes and `pending` pending jobs, `loops` times.
fn one_loop(nodes: usize, pending: usize, loops: u32) {
    let (nodes_out, jobs_out) = (nodes_text(nodes), jobs_text(nodes, pending));
    let mut planner = Planner::new(Config::default());
    let mut times = Vec::new();
    for k in 0..loops {
        let started = Instant::now();
        let seen = slurm::parse_nodes(&nodes_out).unwrap();
        let queue = slurm::parse_jobs(&jobs_out).unwrap();
        let plan = planner.plan(&seen, &queue, 1_795_500_000.0 + f64::from(k) * 10.0);
        std::hint::black_box(plan);
        times.push(started.elapsed());
    }
    times.sort();
    let p99 = times[(times.len() * 99).div_ceil(100) - 1];
    println!(
        "wattson ctld, one loop at {nodes} nodes, {} running and {pending} pending jobs ({loops} loops): parse, snapshot, decide",
        nodes / 3
    );
    println!(
        "  p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; input {} KB of scontrol, {} KB of squeue output",
        ms(times[times.len() / 2]),
        ms(p99),
        ms(*times.last().unwrap()),
        nodes_out.len() / 1024,
        jobs_out.len() / 1024
    );
}

/// `confirm_idle` to 10,000 fake nodes within a 10 s loop: all answering, then with 1% and
/// 10% of them hung (each holds a worker for the 3 s link timeout).
fn fan_out(lab: &slurm_lab::SlurmLab) {
    let munge = lab.dir().join("run/munge.sock");
    let fake = FakeLink::start(&munge);
    let config = LinkConfig { port: fake.port, munge_socket: Some(munge), ..LinkConfig::default() };
    println!("fan-out to 10,000 nodes (confirm idle; link timeout 3 s, deadline 10 s):");
    for hung_per_1000 in [0, 10, 100] {
        let asked: Vec<(String, String)> = (0..10_000)
            .map(|i| {
                let addr = if i % 1000 < hung_per_1000 { FakeLink::HANGS } else { FakeLink::ANSWERS };
                (format!("gpu{i:05}"), addr.to_string())
            })
            .collect();
        let nodes = Nodes::new(config.clone()).within(Duration::from_secs(10));
        let started = Instant::now();
        let (confirmed, kept) = nodes.confirm_idle(&asked);
        let took = started.elapsed();
        let not_asked = kept.iter().filter(|(_, why)| why.contains("deadline")).count();
        println!(
            "  {:>4} hung: {:.2} s, {} confirmed, {} kept up ({} not asked by the deadline)",
            hung_per_1000 * 10,
            took.as_secs_f64(),
            confirmed.len(),
            kept.len(),
            not_asked
        );
    }
}

/// The summary pass as summarized jobs pile up (one job ending per second, a pass every 10 s,
/// `[ctld] summary_wait` at 1 day): how many jobs each pass has Slurm list, and the
/// controller's time to parse that list (`sacct`'s text, parsed by the controller's own reader),
/// for the passes' memory and for the previous pass, which listed the whole
/// `summary_wait + 2 loops + 1 min` window each loop.
fn summary_passes() {
    let t0: i64 = 1_800_000_000;
    let summarized = job_summary::admin_comment("", &JobSummary::default()).unwrap();
    // `sacct -X -n -P -o JobIDRaw,Cluster,NodeList,End,AdminComment,SystemComment`: jobs that
    // ended within `lookback` of `now`, with a summary once written.
    let sacct = |now: i64, lookback: Duration, written: &std::collections::BTreeSet<u32>| {
        let from = (now - lookback.as_secs() as i64).max(t0);
        let mut text = String::new();
        for end in from..=now {
            let job = u32::try_from(end - t0).unwrap();
            let comment = if written.contains(&job) { summarized.as_str() } else { "" };
            let _ = writeln!(text, "{job}|lab|gpu{:05}|{end}|{comment}|", job % 10_000);
        }
        text
    };
    let write = |jobs: &[summarize::Ended]| Written {
        written: jobs.iter().map(|j| (j.job, Vec::new())).collect(),
        ..Written::default()
    };
    let old_window = Duration::from_secs(86_400 + 20 + 60);
    println!("summary pass, one job ending per second, a pass every 10 s, summary_wait 1d:");
    println!(
        "  jobs summarized | jobs listed per pass (memory / previous) | ms per pass (memory / previous)"
    );
    let (mut passes, mut written) = (Passes::default(), std::collections::BTreeSet::new());
    let checkpoints = [1_000i64, 10_000, 80_000];
    let mut now = t0;
    for checkpoint in checkpoints {
        while now < t0 + checkpoint {
            now += 10;
            let pass = passes.pass(
                now,
                |lookback| Ok(slurm::ended::parse_ended(&sacct(now, lookback, &written))),
                write,
            );
            written.extend(pass.unwrap().written.iter().map(|(j, _)| *j));
        }
        let time = |lookback: Duration, written: &std::collections::BTreeSet<u32>| {
            let text = sacct(now, lookback, written);
            let started = Instant::now();
            std::hint::black_box(slurm::ended::parse_ended(&text));
            (text.lines().count(), started.elapsed())
        };
        let (rows, took) = time(passes.lookback(now + 10), &written);
        // The previous pass wrote each job at its first listing too: the same jobs are summarized.
        let (old_rows, old_took) = time(old_window, &written);
        println!(
            "  {:>15} | {rows:>6} / {old_rows:>6} | {:.2} / {:.2}",
            written.len(),
            ms(took),
            ms(old_took)
        );
    }
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
