//! `wattson status`: the node's GPUs as the daemon sees them now.

use clap::Args;

use wattson_config::Config;
use wattson_protocol::{Reply, Request};

/// `wattson status` options.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print the daemon's full answer as JSON
    #[arg(long)]
    json: bool,
}

/// Runs `wattson status`.
pub fn run(config: &Config, args: StatusArgs) -> Result<(), String> {
    let reply =
        wattson_protocol::call(&config.daemon.socket, &Request::Status {}, config.daemon.request_timeout)
            .map_err(|e| e.to_string())?;
    let Reply::Status { node, gpus } = reply else {
        return Err(format!("unexpected reply from wattsond: {reply:?}"));
    };
    if args.json {
        let doc = serde_json::json!({ "node": node, "gpus": gpus });
        println!("{}", serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?);
        return Ok(());
    }
    println!("Node {node}: {} GPU(s)", gpus.len());
    println!(
        "{:>3} {:<24} {:>8} {:>8} {:>7} {:>5} {:>14} {:<8} Jobs",
        "GPU", "Name", "Power", "Limit", "SMClock", "Util", "EnergyCounter", "Method"
    );
    let opt = |v: Option<String>| v.unwrap_or_else(|| "-".to_string());
    for g in &gpus {
        let r = g.reading.as_ref();
        let jobs: Vec<String> = g.jobs.iter().map(|k| k.to_string()).collect();
        let method = if g.info.energy_counter { "counter" } else { "power" };
        println!(
            "{:>3} {:<24} {:>8} {:>8} {:>7} {:>5} {:>14} {:<8} {}",
            g.info.index,
            truncate(&g.info.name, 24),
            opt(r.and_then(|r| r.power_mw).map(|p| format!("{:.1}W", f64::from(p) / 1000.0))),
            opt(g.settings.and_then(|s| s.power_limit_mw).map(|p| format!("{}W", p / 1000))),
            opt(r.and_then(|r| r.sm_clock_mhz).map(|c| format!("{c}MHz"))),
            opt(r.and_then(|r| r.util_pct).map(|u| format!("{u}%"))),
            opt(r.and_then(|r| r.energy_mj).map(|e| format!("{:.0}J", e as f64 / 1000.0))),
            method,
            match &g.error {
                Some(e) => format!("ERROR: {e}"),
                None if jobs.is_empty() => "idle".to_string(),
                None => jobs.join(","),
            }
        );
    }
    Ok(())
}

fn truncate(s: &str, width: usize) -> String {
    if s.chars().count() <= width { s.to_string() } else { s.chars().take(width - 1).chain(['+']).collect() }
}
