//! `wattson sim`: a trace-driven, event-driven cluster simulator that runs the engine's
//! per-job decisions (fit from three probes, then [`wattson_engine::choose`]) against Slurm's
//! behaviour and published baselines. Pure computation: the CLI reads and writes files.
//!
//! [`cluster`] is the TOML cluster model, [`trace`] the job traces, [`workloads`] the Zeus
//! measurements and stand-ins, [`policies`] the five policies and per-job hints,
//! [`events`] the event queue, [`scheduler`] FIFO + EASY backfill and placement, [`power`]
//! node power states and the energy meter, [`simulate`] the event loop, [`metrics`] results
//! and their CSV/JSON, [`plot`] the SVG charts. See docs/sim.md.

pub mod cluster;
pub mod events;
pub mod metrics;
pub mod plot;
pub mod policies;
pub mod power;
pub mod scheduler;
pub mod simulate;
pub mod trace;
pub mod workloads;

pub use cluster::ClusterConfig;
pub use metrics::Report;
pub use policies::{PolicyKind, SimJob};
pub use simulate::RunResult;
pub use trace::{TraceFormat, TraceJob};
pub use workloads::Catalog;

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
    /// Each simulated policy's run (the oracle is not simulated).
    pub runs: Vec<RunResult>,
}

/// Runs `policies` over `trace` on `cluster`; `trace_name` labels the report.
pub fn run(
    cluster: &ClusterConfig,
    catalog: &Catalog,
    trace: &[TraceJob],
    trace_name: &str,
    policies: &[PolicyKind],
    seed: u64,
) -> Result<Outcome, SimError> {
    let jobs = policies::prepare(trace, catalog, cluster, seed)?;
    let mut summaries = Vec::new();
    let mut power = Vec::new();
    let mut runs = Vec::new();
    for &p in policies {
        let (s, ps) = if p == PolicyKind::Oracle {
            metrics::oracle(&jobs, catalog, cluster)
        } else {
            let r = simulate::simulate(cluster, catalog, &jobs, p);
            let out = metrics::summarize(&r, &jobs, cluster);
            runs.push(r);
            out
        };
        summaries.push(s);
        power.push(ps);
    }
    metrics::add_ratios(&mut summaries);
    let report =
        Report { cluster: cluster.name.clone(), trace: trace_name.to_string(), seed, summaries, power };
    Ok(Outcome { report, jobs, runs })
}
