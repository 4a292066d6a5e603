//! `wattson`, the command line: `acct` (sacct-style energy report), `job begin|end` (for Slurm
//! Prolog/Epilog scripts), `status` (the node's GPUs), `sim` (the trace-driven cluster
//! simulator), `ctld`, `power status` and `models sync` (on the controller).

mod acct;
mod ctld;
pub mod docs;
mod job;
mod job_summary;
mod models;
mod power;
mod report;
mod sim;
mod status;
mod summary;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use wattson_config::Config;

/// Exact per-job GPU energy accounting for Slurm clusters.
#[derive(Debug, Parser)]
#[command(name = "wattson", version = version(), about, long_about = None)]
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
    /// Replay a job trace on a simulated cluster: energy, cost and JCT per policy, with plots.
    Sim(sim::SimArgs),
    /// Run the controller service: power idle nodes down and up through Slurm's power saving,
    /// as the cluster policy decides (run on the Slurm controller, as root or SlurmUser).
    Ctld(ctld::CtldArgs),
    /// Node power as `wattson ctld` manages it.
    #[command(subcommand)]
    Power(power::PowerCommand),
    /// The DVFS models' measurements across the cluster (`wattson models sync`).
    #[command(subcommand)]
    Models(models::ModelsCommand),
    /// Jobs' summaries in Slurm's accounting (`wattson summary write|show`).
    #[command(subcommand)]
    Summary(summary::SummaryCommand),
    /// One job's GPU energy at a glance, like seff: energy, kWh per GPU-hour, power, the
    /// setting and why, what it saved, cost and CO2.
    JobSummary(job_summary::JobSummaryArgs),
}

/// The wattson node daemon: exact per-job GPU energy accounting into a local SQLite store.
///
/// Logs go to journald when started by systemd, else to stderr; set WATTSON_LOG (e.g. debug)
/// to change the level. Stops cleanly on SIGTERM or SIGINT; running jobs resume at next start.
#[derive(Debug, Parser)]
#[command(name = "wattsond", version = version())]
pub struct DaemonArgs {
    /// Configuration file [default: wattson.toml beside $SLURM_CONF's slurm.conf, else
    /// /etc/wattson/wattson.toml, else /etc/slurm/wattson.toml, else built-in defaults]
    #[arg(short = 'c', long, env = "WATTSON_CONFIG")]
    pub config: Option<PathBuf>,
    /// Check the configuration file and exit
    #[arg(long)]
    pub check_config: bool,
}

/// `--version`: wattson's own, and the Slurm version its plugins are built for (slurmctld
/// loads a job_submit plugin of exactly its own version only).
pub fn version() -> &'static str {
    static VERSION: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        format!(
            "{} (Slurm plugins built for Slurm {})",
            env!("CARGO_PKG_VERSION"),
            wattson_slurm::slurm_version()
        )
    });
    VERSION.as_str()
}

/// Runs the command line; returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Command::Sim(args) = cli.command {
        // The simulator needs no site configuration: it reads only the files it is given.
        return match sim::run(args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => fail(&e),
        };
    }
    let config = match Config::load_or_default(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => return fail(&e.to_string()),
    };
    let result = match cli.command {
        Command::Acct(args) => acct::run(&config, args),
        Command::Report(args) => report::run(&config, args),
        Command::Job(cmd) => job::run(&config, cmd),
        Command::Status(args) => status::run(&config, args),
        Command::Ctld(args) => ctld::run(config, args),
        Command::Power(command) => power::run(&config, command),
        Command::Models(command) => models::run(&config, command),
        Command::Summary(command) => summary::run(&config, command),
        Command::JobSummary(args) => job_summary::run(&config, args),
        Command::Sim(_) => Ok(()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("wattson: error: {message}");
    ExitCode::FAILURE
}

/// The calling process's real uid.
fn caller_uid() -> u32 {
    nix::unistd::getuid().as_raw()
}
