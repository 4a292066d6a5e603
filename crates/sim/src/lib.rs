//! `wattson sim`: a trace-driven, event-driven cluster simulator. It holds the physics (time,
//! GPUs, node power states, watts); every policy decision comes from the engine's cluster
//! policy ([`wattson_engine::cluster::decide`]) at each instant. Pure computation: the CLI
//! reads and writes files.
//!
//! [`cluster`] is the TOML cluster model, [`trace`] the job traces, [`limits`] their time limits, [`workloads`] the Zeus
//! measurements and stand-ins, [`policies`] the policies' per-job hints and engine choices,
//! [`events`] the event queue, [`scheduler`] Slurm's FIFO + EASY backfill, [`power`] node
//! power states and the energy meter, [`simulate`] the event loop, [`record`] its records,
//! [`floor`] the energy reference, [`metrics`] results and their CSV/JSON, [`waits`] the waits
//! users chose apart from those imposed, [`table`] the terminal table, [`plot`] the SVG charts,
//! [`parallel`] the examples' runs on every core. See docs/sim.md.

pub mod cli;
pub mod cluster;
pub mod colocation;
pub mod events;
pub mod floor;
pub mod limits;
pub mod metrics;
pub mod overrides;
pub mod parallel;
pub mod plot;
pub mod policies;
pub mod power;
pub mod record;
pub mod scheduler;
pub mod simulate;
pub mod table;
pub mod trace;
pub mod waits;
pub mod workloads;

pub use cluster::ClusterConfig;
pub use metrics::Report;
pub use policies::{ClusterPolicy, SimJob};
pub use simulate::RunResult;
pub use trace::{TraceFormat, TraceJob};
pub use workloads::Catalog;

use wattson_engine::cluster::{QueueOrder, TunedPolicy};

/// Why a simulation could not run.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SimError {
    /// Bad input: the message says which file, where and what is wrong.
    #[error("{0}")]
    Input(String),
}

/// Everything one comparison produced: the report and each simulated run.
#[derive(Debug, Clone)]
pub struct Outcome {
    /// The summary and power series.
    pub report: Report,
    /// The prepared jobs (hints and settings), in submission order.
    pub jobs: Vec<SimJob>,
    /// Each simulated policy's reported run (the floor is not simulated; an idle-timer
    /// policy's least-energy `SuspendTime`).
    pub runs: Vec<RunResult>,
}

/// Runs `policies` over `trace` on `cluster`; `trace_name` labels the report. The idle-timer
/// policies run at every `slurm.suspend_times_s` and report their least-energy run;
/// `uniform-cap` runs only with a budget, `slurm-shards` only where a job may share a GPU.
pub fn run(
    cluster: &ClusterConfig,
    catalog: &Catalog,
    trace: &[TraceJob],
    trace_name: &str,
    policies: &[ClusterPolicy],
    seed: u64,
) -> Result<Outcome, SimError> {
    let jobs = policies::prepare(trace, catalog, cluster, seed)?;
    let models = policies::level_tables(catalog)?;
    let mut summaries = Vec::new();
    let mut power = Vec::new();
    let mut runs = Vec::new();
    let mut sweep = Vec::new();
    for &p in policies {
        if p == ClusterPolicy::UniformCap && cluster.budget.is_none()
            || p == ClusterPolicy::SlurmShards && !jobs.iter().any(|j| j.share.is_some())
        {
            continue;
        }
        if p == ClusterPolicy::Floor {
            let (s, ps) = floor::floor(&jobs, catalog, cluster);
            summaries.push(s);
            power.push(ps);
            continue;
        }
        let knobs: Vec<f64> =
            if p.uses_idle_timer() { cluster.slurm.suspend_times_s.clone() } else { vec![f64::NAN] };
        let mut best: Option<(RunResult, metrics::Summary, metrics::PowerSeries)> = None;
        for st in knobs {
            let policy = TunedPolicy { kind: p, tuning: cluster.tuning(st) };
            let r = simulate::simulate(cluster, catalog, &models, &jobs, policy);
            let (s, ps) = metrics::summarize(&r, &jobs, cluster);
            if p.uses_idle_timer() {
                sweep.push(metrics::SweepPoint::of(p.name(), format!("SuspendTime={st:.0}"), &s));
            }
            if best.as_ref().is_none_or(|b| s.energy_kwh < b.1.energy_kwh) {
                best = Some((r, s, ps));
            }
        }
        if let Some((r, s, ps)) = best {
            runs.push(r);
            summaries.push(s);
            power.push(ps);
        }
    }
    metrics::add_ratios(&mut summaries);
    let report = Report {
        cluster: cluster.name.clone(),
        trace: trace_name.to_string(),
        seed,
        summaries,
        power,
        sweep,
        budget_w: cluster.budget.map(|b| b.power_w),
        knowledge: cluster.limits.label().to_string(),
    };
    Ok(Outcome { report, jobs, runs })
}

/// wattson's knob sweep for the Pareto plot: the shipped tuning with `congestion_raise` at 0
/// and 1, with DVFS off (`dvfs_min_free` 1 and `congestion_raise` 1), with the response-ratio
/// queue order, and with `warm_break_evens` 0 and 4.
pub fn sweep_wattson(
    cluster: &ClusterConfig,
    catalog: &Catalog,
    trace: &[TraceJob],
    seed: u64,
) -> Result<Vec<metrics::SweepPoint>, SimError> {
    let jobs = policies::prepare(trace, catalog, cluster, seed)?;
    let models = policies::level_tables(catalog)?;
    let shipped = cluster.tuning(f64::NAN);
    let variants = [
        ("congestion_raise=0", wattson_engine::cluster::Tuning { congestion_raise: 0.0, ..shipped }),
        ("congestion_raise=1", wattson_engine::cluster::Tuning { congestion_raise: 1.0, ..shipped }),
        (
            "queue_order=response-ratio",
            wattson_engine::cluster::Tuning { queue_order: QueueOrder::ResponseRatio, ..shipped },
        ),
        (
            "dvfs off",
            wattson_engine::cluster::Tuning { dvfs_min_free: 1.0, congestion_raise: 1.0, ..shipped },
        ),
        ("warm_break_evens=0", wattson_engine::cluster::Tuning { warm_break_evens: 0.0, ..shipped }),
        ("warm_break_evens=4", wattson_engine::cluster::Tuning { warm_break_evens: 4.0, ..shipped }),
    ];
    let mut out = Vec::new();
    for (knob, tuning) in variants {
        let r = simulate::simulate(
            cluster,
            catalog,
            &models,
            &jobs,
            TunedPolicy { kind: ClusterPolicy::Wattson, tuning },
        );
        let (s, _) = metrics::summarize(&r, &jobs, cluster);
        out.push(metrics::SweepPoint::of(ClusterPolicy::Wattson.name(), knob.to_string(), &s));
    }
    Ok(out)
}
