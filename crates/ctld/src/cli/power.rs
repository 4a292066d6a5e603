//! `wattson-ctld power status` (also `wattson power status`): what `wattson ctld` did to each node's power, and what it saved.

use clap::{Args, Subcommand};

use crate::failover::Role;
use crate::power_status;
use wattson_config::Config;

/// Node power as the controller manages it.
#[derive(Debug, Subcommand)]
pub enum PowerCommand {
    /// Each node's power (on, off, powering-up, powering-down, held) and since when, the
    /// controller's last decision about it and why, its time off, and the energy right-sizing
    /// saved (an estimate from the ctld.node power model), as of the controller's last loop.
    Status(StatusArgs),
}

/// `wattson power status` options.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print the controller's state file as JSON
    #[arg(long)]
    json: bool,
}

/// Runs a `wattson power` command.
pub fn run(config: &Config, command: PowerCommand) -> Result<(), String> {
    let PowerCommand::Status(args) = command;
    let ledger = power_status::load(&config.ctld.state_file)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&ledger).map_err(|e| e.to_string())?);
        return Ok(());
    }
    let time = |t: f64| {
        chrono::DateTime::from_timestamp(t as i64, 0)
            .map(|d| d.with_timezone(&chrono::Local).format("%Y-%m-%dT%H:%M:%S").to_string())
            .unwrap_or_else(|| "-".into())
    };
    match &ledger.role {
        Role::Acting => println!("as of {} (the controller's last loop)", time(ledger.updated)),
        Role::Standby(in_control) => {
            let other = in_control.as_deref().map_or("no slurmctld answers".to_string(), |host| {
                format!("the slurmctld on {host} is in control; its controller acts")
            });
            println!("this controller stands by: {other}");
            println!("as of {} (this controller's last loop acting)", time(ledger.updated));
        }
    }
    let w = &ledger.wait_cost;
    let graded = if w.guarding {
        ": past it, no job is slowed".to_string()
    } else if w.gate > 0.0 {
        format!(": a job is slowed only while {:.0}% of the GPUs are unallocated", 100.0 * w.gate)
    } else {
        String::new()
    };
    println!(
        "wait cost: DVFS lengthened the queue's waits by {:.1}% as observed (bound {:.1}%){graded}",
        100.0 * w.observed,
        100.0 * w.bound,
    );
    if !ledger.share_broken.is_empty() {
        println!(
            "co-location: paired no more (measured over a bound while sharing): {}",
            ledger.share_broken.join(", ")
        );
    }
    if !ledger.share_learned.is_empty() {
        let learned: Vec<String> = ledger
            .share_learned
            .iter()
            .map(|p| format!("{} beside {} {:+.1}%", p.job, p.with, 100.0 * p.slowdown))
            .collect();
        println!("co-location: pairs measured on the nodes: {}", learned.join(", "));
    }
    if !ledger.share_unfit.is_empty() {
        let unfit: Vec<String> = ledger.share_unfit.iter().map(|[a, b]| format!("{a} beside {b}")).collect();
        println!("co-location: pairs that share no more (measured over a bound): {}", unfit.join(", "));
    }
    println!(
        "{:<16} {:<14} {:<20} {:>10} {:>6} {:>14}  LAST DECISION",
        "NODE", "POWER", "SINCE", "OFF", "CYCLES", "SAVED (est.)"
    );
    let mut total = 0.0;
    for (name, node) in &ledger.nodes {
        let saved = ledger.saved_j(node);
        total += saved;
        let decision = if node.last_decision.is_empty() {
            "-".to_string()
        } else {
            format!("{} at {}", node.last_decision, time(node.decided_at))
        };
        println!(
            "{name:<16} {:<14} {:<20} {:>10} {:>6} {:>10.2} kWh  {decision}",
            node.power,
            time(node.since),
            humantime::format_duration(std::time::Duration::from_secs(node.off_s as u64)).to_string(),
            node.cycles,
            saved / 3.6e6
        );
    }
    println!(
        "{:<16} {:>76.2} kWh  (estimate: time off x (idle - off draw) - extra energy of each power cycle)",
        "TOTAL",
        total / 3.6e6
    );
    Ok(())
}
