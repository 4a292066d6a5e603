//! `wattson-ctld` with no subcommand: the controller service (see [`crate::Ctld`]).

use clap::Args;

use wattson_config::Config;

/// Reads Slurm's nodes and jobs every `[ctld] interval`, asks the cluster policy which idle
/// nodes to power down and which to power up ahead of demand, and asks Slurm to
/// (`scontrol update nodename=... state=power_down_asap|power_up`). Needs Slurm's power saving
/// on with its own idle timer off (docs/ctld.md). Logs every decision with its reason.
#[derive(Debug, Args)]
pub struct CtldArgs {
    /// Run one loop, print what was asked of Slurm, and exit
    #[arg(long)]
    pub once: bool,
}

/// Runs the service (or one loop).
pub fn run(config: Config, args: CtldArgs) -> Result<(), String> {
    wattson_program::init_logging();
    let mut ctld = crate::Ctld::new(config)?;
    if args.once {
        let plan = ctld.step()?;
        let names = |v: &[(String, u32)]| v.iter().map(|(n, _)| n.as_str()).collect::<Vec<_>>().join(",");
        println!("power_down_asap: {}", plan.power_down.join(","));
        println!("power_up: {}", plan.power_up.join(","));
        println!("resume retried: {}", names(&plan.retry));
        println!("resume given up: {}", names(&plan.give_up));
        let full: Vec<String> = plan
            .running
            .iter()
            .filter(|(_, pace, _)| *pace == wattson_protocol::Pace::Full)
            .map(|(job, _, _)| job.to_string())
            .collect();
        println!("full speed (queued work waits for them): {}", full.join(","));
        return Ok(());
    }
    ctld.run();
    Ok(())
}
