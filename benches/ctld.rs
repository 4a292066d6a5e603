//! `wattson ctld`'s own cost per loop at 1,000 nodes and 10,000 jobs: parsing Slurm's output
//! (synthetic, in the exact format of `scontrol -d -o show node` and `squeue` of Slurm 22.05),
//! building the engine's snapshot and deciding. Slurm's commands are not included; their cost
//! is measured against a real Slurm in the lab at its size (three nodes), reported beside.
//!
//! Run: `cargo bench --bench ctld` (WATTSON_BENCH_LOOPS, default 50).

use wattson_harness::slurm_lab;

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use wattson_config::Config;
use wattson_ctld::{Planner, slurm};

const NODES: usize = 1000;
const JOBS: usize = 10_000;

/// `scontrol -d -o show node` for `NODES` nodes of 8 GPUs: a third busy, a third idle, a third
/// powered down.
fn nodes_text() -> String {
    let mut text = String::new();
    for i in 0..NODES {
        let (state, used, cpus) = match i % 3 {
            0 => ("MIXED", 5, 40),
            1 => ("IDLE", 0, 0),
            _ => ("IDLE+POWERED_DOWN", 0, 0),
        };
        let _ = writeln!(
            text,
            "NodeName=gpu{i:04} Arch=x86_64 CoresPerSocket=32  CPUAlloc={cpus} CPUEfctv=64 CPUTot=64 CPULoad=12.01 \
             AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:h100:8(S:0-1) GresDrain=N/A \
             GresUsed=gpu:h100:{used}(IDX:0-{last}) NodeAddr=gpu{i:04} NodeHostName=gpu{i:04} Version=22.05.8 \
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

/// `squeue -h -o` of `JOBS` jobs: running ones on the busy nodes, the rest pending.
fn jobs_text() -> String {
    let mut text = String::new();
    for j in 0..JOBS {
        let (state, reason, used) =
            if j < NODES / 3 { ("RUNNING", "None", "3:12:09") } else { ("PENDING", "Priority", "0:00") };
        let _ = writeln!(
            text,
            "{}|{state}|{reason}|1|gres:gpu:{}|2026-11-23T{:02}:{:02}:00|{used}|1-00:00:00|{}",
            100_000 + j,
            1 + j % 8,
            (j / 60) % 24,
            j % 60,
            if state == "RUNNING" { format!("gpu{:04}", j * 3) } else { String::new() }
        );
    }
    text
}

fn main() {
    let loops: u32 = std::env::var("WATTSON_BENCH_LOOPS").ok().and_then(|s| s.parse().ok()).unwrap_or(50);
    let (nodes_out, jobs_out) = (nodes_text(), jobs_text());
    let mut planner = Planner::new(Config::default());
    let mut times = Vec::new();
    for k in 0..loops {
        let started = Instant::now();
        let nodes = slurm::parse_nodes(&nodes_out).unwrap();
        let jobs = slurm::parse_jobs(&jobs_out).unwrap();
        let plan = planner.plan(&nodes, &jobs, 1_795_500_000.0 + f64::from(k) * 10.0);
        std::hint::black_box(plan);
        times.push(started.elapsed());
    }
    times.sort();
    let p50 = times[times.len() / 2];
    let max = *times.last().unwrap();
    println!(
        "wattson ctld, one loop at {NODES} nodes and {JOBS} jobs ({loops} loops): parse, snapshot, decide"
    );
    println!("  p50 {:.1} ms, max {:.1} ms (target: under 100 ms)", ms(p50), ms(max));
    println!(
        "  input: {} KB of scontrol output, {} KB of squeue output",
        nodes_out.len() / 1024,
        jobs_out.len() / 1024
    );

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
    lab.stop();
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}
