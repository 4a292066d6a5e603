//! `wattson-ctld models sync` (also `wattson models sync`): share what the DVFS models learned across the cluster now.

use clap::Subcommand;

use crate::models;
use crate::nodes::Nodes;
use crate::slurm::Slurm;
use wattson_config::Config;

/// The DVFS models' measurements across the cluster.
#[derive(Debug, Subcommand)]
pub enum ModelsCommand {
    /// Gather every powered GPU node's workload measurements over the link now, keep the
    /// newest of each (with the controller's saved copy, ctld.measurements_file), write the
    /// model table job_submit reads (engine.models_file) and hand the merge back to the nodes,
    /// as `wattson ctld` does every ctld.models_sync. Run on the controller as root or
    /// SlurmUser.
    Sync,
}

/// Runs a `wattson models` command.
pub fn run(config: &Config, command: ModelsCommand) -> Result<(), String> {
    let ModelsCommand::Sync = command;
    let seen = Slurm::new(config.ctld.command_timeout).nodes()?;
    let link = Nodes::new(config.link.clone());
    let synced = models::sync(&link, &seen, &config.ctld.measurements_file, &config.engine)?;
    println!(
        "{} workload(s) merged from {} node(s) ({}); the nodes took {}; model table {}",
        synced.workloads,
        synced.answered.len(),
        synced.answered.join(","),
        synced.taken,
        config.engine.models_file.display()
    );
    for (node, why) in &synced.failed {
        println!("{node}: not gathered: {why}");
    }
    if synced.answered.is_empty() && !synced.failed.is_empty() {
        return Err("no node answered".into());
    }
    Ok(())
}
