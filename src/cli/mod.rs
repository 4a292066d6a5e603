//! `wattson`, the command line: `acct` (sacct-style energy report), `report`, `job begin|end`
//! (for Slurm Prolog/Epilog scripts), `status` (the node's GPUs), `summary show` and `trace
//! export` (accounting history as a simulator trace); `sim`,
//! `ctld`, `power`, `models` and `summary write` run the simulator's and the controller's own
//! programs (`forward`).

mod acct;
mod forward;
mod job;
mod job_summary;
pub mod mail;
mod report;
mod status;
mod summary;
mod trace;

use std::path::{Path, PathBuf};
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use wattson_config::Config;

/// Exact per-job GPU energy accounting for Slurm clusters.
#[derive(Debug, Parser)]
#[command(name = "wattson", version = wattson_program::version(), about, long_about = None)]
pub struct Cli {
    /// Configuration file [default: wattson.toml beside $SLURM_CONF's slurm.conf, else
    /// /etc/wattson/wattson.toml, else /etc/slurm/wattson.toml, the first that exists]
    #[arg(short = 'c', long, global = true, env = "WATTSON_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Report recorded jobs' GPU energy, in the layout and units of sacct.
    Acct(acct::AcctArgs),
    /// GPU energy, GPU-hours, cost and CO2 summed by user, account, partition or GPU type.
    Report(report::ReportArgs),
    /// Tell wattsond that a job began or ended (for Slurm Prolog/Epilog scripts).
    #[command(subcommand)]
    Job(job::JobCommand),
    /// Show this node's GPUs: power, clocks, utilisation, energy counter and owning jobs.
    Status(status::StatusArgs),
    /// Replay a job trace on a simulated cluster: energy, cost and JCT per policy, with plots
    /// (runs wattson-sim; `wattson sim --help` for its options).
    Sim(forward::Passed),
    /// Run the controller service: power idle nodes down and up through Slurm's power saving,
    /// as the cluster policy decides (runs wattson-ctld, on the Slurm controller, as root or
    /// SlurmUser; `wattson ctld --help` for its options).
    Ctld(forward::Passed),
    /// Node power as `wattson ctld` manages it (`wattson power status`; runs wattson-ctld).
    Power(forward::Passed),
    /// The DVFS models' measurements across the cluster (`wattson models sync`; runs
    /// wattson-ctld).
    Models(forward::Passed),
    /// Jobs' summaries in Slurm's accounting (`wattson summary show`; `summary write` runs
    /// wattson-ctld).
    #[command(subcommand)]
    Summary(summary::SummaryCommand),
    /// Job traces for the simulator: `wattson trace export` turns Slurm's accounting into a
    /// trace `wattson sim` replays.
    #[command(subcommand)]
    Trace(trace::TraceCommand),
    /// One job's GPU energy at a glance, like seff: energy, kWh per GPU-hour, power, the
    /// setting and why, what it saved, cost and CO2.
    JobSummary(job_summary::JobSummaryArgs),
}

/// Runs the command line; returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let file = cli.config.as_deref();
    let result = match cli.command {
        Command::Acct(args) => with_config(file, |c| acct::run(c, args)),
        Command::Report(args) => with_config(file, |c| report::run(c, args)),
        Command::Job(cmd) => with_config(file, |c| job::run(c, cmd)),
        Command::Status(args) => with_config(file, |c| status::run(c, args)),
        Command::JobSummary(args) => with_config(file, |c| job_summary::run(c, args)),
        Command::Summary(summary::SummaryCommand::Show(args)) => {
            with_config(file, |c| summary::show(c, args))
        }
        // The simulator and its traces need no site configuration: they read only the files
        // they are given (and sacct).
        Command::Trace(cmd) => trace::run(cmd),
        Command::Sim(passed) => Err(forward::exec(forward::SIM, None, &[], passed, "sim")),
        Command::Ctld(passed) => Err(forward::exec(forward::CTLD, file, &[], passed, "ctld")),
        Command::Power(passed) => Err(forward::exec(forward::CTLD, file, &["power"], passed, "power")),
        Command::Models(passed) => Err(forward::exec(forward::CTLD, file, &["models"], passed, "models")),
        Command::Summary(summary::SummaryCommand::Write(passed)) => {
            Err(forward::exec(forward::CTLD, file, &["summary", "write"], passed, "summary"))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

/// Runs `run` with the site configuration read from `file` (or the default place).
fn with_config(file: Option<&Path>, run: impl FnOnce(&Config) -> Result<(), String>) -> Result<(), String> {
    run(&Config::load_or_default(file).map_err(|e| e.to_string())?)
}

fn fail(message: &str) -> ExitCode {
    eprintln!("wattson: error: {message}");
    ExitCode::FAILURE
}

/// The calling process's real uid.
fn caller_uid() -> u32 {
    nix::unistd::getuid().as_raw()
}
