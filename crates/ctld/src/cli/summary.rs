//! `wattson-ctld summary write` (also `wattson summary write`): jobs' summaries written into
//! Slurm's accounting (`AdminComment`).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use clap::Subcommand;

use wattson_config::Config;

use crate::nodes::Nodes;
use crate::slurm::Slurm;
use crate::summarize::{self, Settings};

/// Jobs' summaries in Slurm's accounting.
#[derive(Debug, Subcommand)]
pub enum SummaryCommand {
    /// Gather the summary of every job that ended within --lookback and has none from its
    /// nodes' wattsond over the link, and write it into the job's AdminComment, as `wattson
    /// ctld` does after each job. Run on the controller as root or SlurmUser. A node that does
    /// not answer is named in the summary once ctld.summary_wait has passed since the job
    /// ended; before that the job waits
    Write {
        /// How far back to look for ended jobs (e.g. 1h, 2d)
        #[arg(long, default_value = "1d", value_parser = humantime::parse_duration)]
        lookback: Duration,
    },
}

/// Runs a `wattson-ctld summary` command.
pub fn run(config: &Config, command: SummaryCommand) -> Result<(), String> {
    let timeout = config.ctld.command_timeout;
    let SummaryCommand::Write { lookback } = command;
    let settings = Settings { wait: config.ctld.summary_wait, bins: config.ctld.summary_bins, timeout };
    let slurm = Slurm::new(timeout);
    let ended =
        summarize::ended_without_summary(&settings, lookback, slurm.form()?).map_err(|e| e.to_string())?;
    let seen = slurm.nodes()?;
    let link = Nodes::new(config.link.clone());
    let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs() as i64);
    let done = summarize::write(&link, &seen, &ended, &settings, now);
    for (job, missing) in &done.written {
        match &missing[..] {
            [] => println!("{job}: written"),
            nodes => println!("{job}: written without {}", nodes.join(",")),
        }
    }
    for (job, why) in &done.waiting {
        println!("{job}: {why}");
    }
    for (job, why) in &done.failed {
        println!("{job}: not written: {why}");
    }
    if !done.failed.is_empty() {
        return Err(format!("{} summaries not written", done.failed.len()));
    }
    Ok(())
}
