//! The replay twin: a slice of a published ITP trace run through a real slurmctld with eight
//! slurmd nodes (wattsond on eight simulated GPUs each, every job's GPUs following the measured
//! curve of the workload the simulator gives it), Slurm's power saving with simulated boot and
//! shutdown delays, and either `wattson ctld` or Slurm's own `SuspendTime` timer deciding
//! which nodes sleep. The same slice goes through `wattson sim` with the same compression;
//! the energy, waits and power cycles of both are printed side by side (`--nocapture`) and
//! compared. docs/sim.md ("The replay twin") gives the figures and the command.
//!
//! The slice: 110 consecutive jobs of ITP `cluster04` (ElasticFlow, Apache-2.0) from the
//! 8,633rd of its jobs of at most 8 GPUs (larger jobs do not fit an 8-GPU node of the lab): all
//! of them 1-GPU jobs (three quarters of cluster04's jobs are), of all six ITP models, 678 to
//! 13,947 s long, submitted over 82 minutes in a few bursts: idle nodes to sleep and jobs that
//! wait for them.
//!
//! Time is compressed by [`COMPRESSION`]: a trace minute is a lab second. Slurm's scheduling
//! granularity is about a second (a job starts within about a second of its resources coming
//! free; backfill and the power-save thread run every second here), a minute of trace time,
//! against a median job of 2,524 trace seconds (42 lab seconds, the shortest 11); the whole
//! slice (4.4 trace hours) replays in about 4.5 minutes. The same factor makes the limits users ask Slurm for
//! (the shipped model: run time times up to 3, rounded up to 1, 4, 12, 24 or 72 hours) whole
//! minutes of lab time, as Slurm's `--time` takes them. Every duration of the shipped node
//! power model (boot, shutdown, `SuspendTimeout`, the idle timer) and of wattson's forecast
//! is divided by the same factor; the powers are the shipped ones.
//!
//! Slurm's start latency (allocation to a job's body running: the scheduling pass, the
//! prologs, the launch) is a second or two, a trace minute here, and shorter for a job that
//! waited (no sbatch, no pass to wait for): each replay measures both on its lab before it
//! starts and the simulator models them (`[slurm] start_latency_s`,
//! `queued_start_latency_s`). So are Slurm's power scan and ctld's loop, a second each
//! ([`LAB_TICK_S`]).
//!
//! Every job runs at full speed (no slowdown bound): the twin judges the cluster's decisions
//! (placement, queueing, power states); the DVFS decisions on measured curves are judged by
//! the node test `measured_curves`.

mod replay;

use std::fmt::Write as _;

use wattson_engine::cluster::ClusterPolicy;
use wattson_sim::power::NodeState;
use wattson_sim::{Catalog, ClusterConfig, TraceFormat, TraceJob};

use replay::{Calibration, Observed, Policy};

/// Trace seconds per lab second.
pub(super) const COMPRESSION: f64 = 60.0;
/// Nodes of the lab, and GPUs per node.
pub(super) const NODES: u32 = 8;
pub(super) const GPUS_PER_NODE: u32 = 8;
/// Slurm's power scan (`power_save_interval`) and ctld's loop (`interval`) in the lab, lab
/// seconds: the shortest Slurm allows, a trace minute; the simulator models both.
pub(super) const LAB_TICK_S: u32 = 1;
/// The idle timer of the reference, trace seconds (30 minutes).
const SUSPEND_TIME_S: f64 = 1800.0;
/// Seed of the simulator's draws (time limits, workloads).
const SEED: u64 = 1;

fn data(path: &str) -> String {
    let full = format!("{}/data/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full)
        .unwrap_or_else(|e| panic!("{full}: {e} (the twin needs the repository's data/)"))
}

/// The slice, compressed, each job with the time limit the shipped model draws for it.
fn slice(shipped: &ClusterConfig) -> Vec<TraceJob> {
    let mut all = wattson_sim::trace::parse(
        &data("traces/itp-elasticflow/cluster04.csv"),
        "cluster04.csv",
        TraceFormat::Itp,
    )
    .unwrap();
    all.retain(|j| j.gpus <= GPUS_PER_NODE);
    all.sort_by(|a, b| a.submit.total_cmp(&b.submit));
    let mut jobs: Vec<TraceJob> = all[8633..8633 + 110].to_vec();
    let limits = shipped.limits.limits(&jobs, SEED);
    let t0 = jobs[0].submit;
    for (j, limit) in jobs.iter_mut().zip(limits) {
        j.submit = (j.submit - t0) / COMPRESSION;
        j.duration /= COMPRESSION;
        j.time_limit = Some(limit / COMPRESSION);
    }
    jobs
}

/// The shipped cluster model (etc/sim/cluster.toml) as the lab is: 8 nodes of 8 V100s, every
/// duration compressed, every job at full speed, Slurm's FIFO order for both policies.
fn cluster(shipped: &ClusterConfig) -> ClusterConfig {
    let n = &shipped.node;
    let s = &shipped.slurm;
    let c = COMPRESSION;
    let toml = format!(
        "name = \"twin-8x8\"\nnodes = {NODES}\ngpus_per_node = {GPUS_PER_NODE}\ngpu = \"V100\"\n\
         zeus_csv = \"unused\"\ntrace_start_utc_s = 0\n\
         [node]\nbase_w = {}\noff_w = {}\nshutdown_s = {}\nshutdown_w = {}\nboot_s = {}\nboot_w = {}\n\
         [slurm]\nsuspend_times_s = [{}]\nsuspend_timeout_s = {}\nresume_timeout_s = {}\norder = \"fifo\"\n\
         power_save_interval_s = {LAB_TICK_S}\n\
         [prices]\nhourly_utc = [{}]\n\
         [hints]\nslowdown = [[0.0, 1.0]]\ndefer_fraction = 0.0\ndefer_window_s = [60.0, 60.0]\n\
         [wattson]\nforecast_window_s = {}\nqueue_order = \"fifo\"\nloop_interval_s = {LAB_TICK_S}\n",
        n.base_w,
        n.off_w,
        n.shutdown_s / c,
        n.shutdown_w,
        n.boot_s / c,
        n.boot_w,
        SUSPEND_TIME_S / c,
        s.suspend_timeout_s / c,
        s.resume_timeout_s / c,
        ["0.1"; 24].join(","),
        shipped.wattson.tuning.forecast_window_s / c,
    );
    ClusterConfig::from_toml(&toml, "twin").unwrap()
}

/// One policy's figures, simulated or observed.
#[derive(Debug, Clone, Copy)]
struct Figures {
    energy_kj: f64,
    gpu_busy_kj: f64,
    wait_mean_s: f64,
    wait_p99_s: f64,
    power_cycles: u64,
    makespan_s: f64,
}

fn simulated(s: &wattson_sim::metrics::Summary) -> Figures {
    Figures {
        energy_kj: s.energy_kwh * 3600.0,
        gpu_busy_kj: s.gpu_busy_kwh * 3600.0,
        wait_mean_s: s.wait_mean_s,
        wait_p99_s: s.wait_p99_s,
        power_cycles: s.power_state_changes,
        makespan_s: s.makespan_s,
    }
}

fn observed(o: &Observed) -> Figures {
    Figures {
        energy_kj: o.parts.total_j() / 1000.0,
        gpu_busy_kj: o.parts.gpu_busy_j / 1000.0,
        wait_mean_s: o.wait_mean_s(),
        wait_p99_s: o.wait_p99_s(),
        power_cycles: o.power_cycles(),
        makespan_s: o.makespan_s,
    }
}

/// Where one policy's lab and simulation parted: the jobs whose waits differ most, and the
/// power actions of both in time order (printed with the table).
fn divergence(name: &str, trace: &[TraceJob], run: &wattson_sim::RunResult, o: &Observed) -> String {
    let lab = o.wait_by_job();
    let mut jobs: Vec<(usize, f64, f64)> = run
        .jobs
        .iter()
        .zip(trace)
        .zip(&lab)
        .enumerate()
        .map(|(k, ((j, t), &l))| (k, j.start - t.submit, l))
        .collect();
    jobs.sort_by(|a, b| (b.2 - b.1).abs().total_cmp(&(a.2 - a.1).abs()));
    let mut s = format!("{name}: the jobs whose waits differ most (trace index: sim / lab wait s):");
    for (k, sim, lab) in jobs.iter().take(8) {
        let _ = write!(s, " {k}: {sim:.1} / {lab:.1};");
    }
    let mut sim_actions: Vec<(f64, bool)> = run
        .meter
        .intervals
        .iter()
        .filter(|i| matches!(i.state, NodeState::Booting | NodeState::ShuttingDown))
        .map(|i| (i.from, i.state == NodeState::Booting))
        .collect();
    sim_actions.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (label, actions) in [("sim", sim_actions), ("lab", o.power_actions())] {
        let _ = write!(s, "\n{name}: {label} power actions (s, + boot, - power-down):");
        for (t, boot) in actions {
            let _ = write!(s, " {}{t:.1}", if boot { '+' } else { '-' });
        }
    }
    s + "\n"
}

/// Each row: the policy, the start latencies its lab measured (the simulator's too), and the
/// simulated and observed figures.
fn table(rows: &[(&str, Calibration, Figures, Figures)]) -> String {
    let mut t = String::from(
        "| policy | start latency s (idle / queued) | energy kJ (sim / Slurm) | of it busy GPUs kJ | mean wait s | p99 wait s | power cycles | makespan s |\n|---|---|---|---|---|---|---|---|\n",
    );
    for (name, latency, s, o) in rows {
        let _ = writeln!(
            t,
            "| {name} | {:.2} / {:.2} | {:.0} / {:.0} ({:+.1}%) | {:.0} / {:.0} | {:.1} / {:.1} ({:+.1}%) | {:.1} / {:.1} | {} / {} | {:.0} / {:.0} |",
            latency.start_latency_s,
            latency.queued_start_latency_s,
            s.energy_kj,
            o.energy_kj,
            100.0 * (o.energy_kj / s.energy_kj - 1.0),
            s.gpu_busy_kj,
            o.gpu_busy_kj,
            s.wait_mean_s,
            o.wait_mean_s,
            100.0 * (o.wait_mean_s / s.wait_mean_s - 1.0),
            s.wait_p99_s,
            o.wait_p99_s,
            s.power_cycles,
            o.power_cycles,
            s.makespan_s,
            o.makespan_s,
        );
    }
    t
}

#[test]
fn twin_a_trace_slice_on_real_slurm_matches_the_simulators_prediction() {
    let shipped = ClusterConfig::from_toml(
        &std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/etc/sim/cluster.toml")).unwrap(),
        "etc/sim/cluster.toml",
    )
    .unwrap();
    let catalog = Catalog::from_zeus_csv(
        &data("dvfs/zeus-power-limit/summary_power_v100.csv"),
        "summary_power_v100.csv",
    )
    .unwrap();
    let trace = slice(&shipped);
    let mut cluster = cluster(&shipped);
    let jobs = wattson_sim::policies::prepare(&trace, &catalog, &cluster, SEED).unwrap();

    // One lab after the other (at once, eight nodes each on two cores, a burst of the trace
    // would wait for the host's CPUs rather than for Slurm), then the simulator with the
    // start latency each lab measured before its replay.
    let timer = Policy::Timer { suspend_time_s: (SUSPEND_TIME_S / COMPRESSION) as u32 };
    let mut sim = Vec::new();
    let mut real = Vec::new();
    let mut latency = Vec::new();
    let mut diverged = String::new();
    for (policy, kind, name) in [
        (timer, ClusterPolicy::SlurmPowersave, "SuspendTime"),
        (Policy::Ctld, ClusterPolicy::Wattson, "wattson ctld"),
    ] {
        let observed = replay::run(&jobs, &catalog, &cluster, policy);
        cluster.slurm.start_latency_s = observed.calibration.start_latency_s;
        cluster.slurm.queued_start_latency_s = Some(observed.calibration.queued_start_latency_s);
        let outcome = wattson_sim::run(&cluster, &catalog, &trace, "cluster04-twin", &[kind], SEED).unwrap();
        sim.push(simulated(&outcome.report.summaries[0]));
        real.push(self::observed(&observed));
        latency.push(observed.calibration);
        diverged += &divergence(name, &trace, &outcome.runs[0], &observed);
    }
    let report = table(&[
        ("slurm-powersave (SuspendTime)", latency[0], sim[0], real[0]),
        ("wattson ctld", latency[1], sim[1], real[1]),
    ]) + &diverged;
    println!("{report}");
    for (k, name) in ["SuspendTime", "wattson ctld"].iter().enumerate() {
        let (s, o) = (sim[k], real[k]);
        let energy = o.energy_kj / s.energy_kj - 1.0;
        let wait = o.wait_mean_s / s.wait_mean_s - 1.0;
        assert!(energy.abs() <= 0.05, "{name}: energy {:+.1}% off the prediction\n{report}", 100.0 * energy);
        assert!(wait.abs() <= 0.15, "{name}: mean wait {:+.1}% off the prediction\n{report}", 100.0 * wait);
    }
    // The same ordering of the two policies on energy and on wait.
    assert_eq!(
        sim[1].energy_kj < sim[0].energy_kj,
        real[1].energy_kj < real[0].energy_kj,
        "energy ordering differs\n{report}"
    );
    assert_eq!(
        sim[1].wait_mean_s < sim[0].wait_mean_s,
        real[1].wait_mean_s < real[0].wait_mean_s,
        "wait ordering differs\n{report}"
    );
}
