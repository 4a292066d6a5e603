//! `wattson summary`: jobs' summaries in Slurm's accounting (`AdminComment`): `show` reads one
//! from any host; `write` runs the controller's `wattson-ctld summary write`.

use clap::{Args, Subcommand};

use wattson_config::Config;

use super::forward::Passed;

/// Jobs' summaries in Slurm's accounting.
#[derive(Debug, Subcommand)]
pub enum SummaryCommand {
    /// Gather the summary of every job that ended recently and has none, and write it into the
    /// job's AdminComment, as `wattson ctld` does after each job (runs `wattson-ctld summary
    /// write`, on the controller as root or SlurmUser; `--lookback` as there)
    Write(Passed),
    /// Print one job's summary from Slurm's accounting, as JSON (what sacct lets you see)
    Show(ShowArgs),
}

/// `wattson summary show` options.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The job
    #[arg(short = 'j', long = "job")]
    job: u32,
}

/// Prints one job's summary from Slurm's accounting.
pub fn show(config: &Config, args: ShowArgs) -> Result<(), String> {
    let job = args.job;
    match wattson_sacct::comment::from_accounting(job, config.ctld.command_timeout)? {
        Some(summary) => {
            println!("{}", serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?);
            Ok(())
        }
        None => Err(format!("job {job} has no wattson summary in Slurm's accounting (yet)")),
    }
}
