//! `wattson-ctld`'s command line: with no subcommand the controller service; `power status`,
//! `models sync` and `summary write` for the admin on the controller. The `wattson` command
//! runs these as `wattson ctld`, `wattson power`, `wattson models` and `wattson summary write`.

pub mod models;
pub mod power;
pub mod service;
pub mod summary;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

use wattson_config::Config;

/// wattson's controller service: powers idle nodes down and up through Slurm's power saving,
/// as the cluster policy decides (run on the Slurm controller, as root or SlurmUser).
#[derive(Debug, Parser)]
#[command(name = "wattson-ctld", version = wattson_program::version())]
pub struct Cli {
    /// Configuration file [default: wattson.toml beside $SLURM_CONF's slurm.conf, else
    /// /etc/wattson/wattson.toml, else /etc/slurm/wattson.toml, the first that exists]
    #[arg(short = 'c', long, global = true, env = "WATTSON_CONFIG")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub service: service::CtldArgs,
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The controller's admin commands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Node power as `wattson-ctld` manages it.
    #[command(subcommand)]
    Power(power::PowerCommand),
    /// The DVFS models' measurements across the cluster (`models sync`).
    #[command(subcommand)]
    Models(models::ModelsCommand),
    /// Jobs' summaries written into Slurm's accounting (`summary write`).
    #[command(subcommand)]
    Summary(summary::SummaryCommand),
}

/// Runs `wattson-ctld`; returns the process exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.service.once && cli.command.is_some() {
        return fail("--once is for the service (no subcommand)");
    }
    let config = match Config::load_or_default(cli.config.as_deref()) {
        Ok(c) => c,
        Err(e) => return fail(&e.to_string()),
    };
    let result = match cli.command {
        None => service::run(config, cli.service),
        Some(Command::Power(command)) => power::run(&config, command),
        Some(Command::Models(command)) => models::run(&config, command),
        Some(Command::Summary(command)) => summary::run(&config, command),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

fn fail(message: &str) -> ExitCode {
    eprintln!("{}: error: {message}", wattson_program::invoked_as("wattson-ctld"));
    ExitCode::FAILURE
}
