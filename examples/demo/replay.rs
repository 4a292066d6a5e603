//! The demo's own jobs through the simulator: `wattson trace export` turns the demo Slurm's
//! accounting into a trace (users hashed), and `wattson sim` replays it under every policy on
//! the shipped cluster model cut to the demo's one node of four GPUs (the model's GPU is the
//! V100 that Zeus measured: there are no public H100 curves).

use std::path::{Path, PathBuf};

use wattson_harness::slurm_lab::SlurmLab;

use super::{Installed, step};

/// Exports the lab's accounting since an hour ago into `dir/trace.csv`; returns its path.
pub fn export(from: &Installed, lab: &SlurmLab, dir: &Path) -> Result<PathBuf, String> {
    step("The demo's jobs as a trace: wattson trace export reads Slurm's accounting");
    let (salt, trace) = (dir.join("trace.salt"), dir.join("trace.csv"));
    std::fs::write(&salt, "the demo's own salt: keep a site's secret\n").unwrap();
    println!("$ wattson trace export -S now-1hour --salt-file {} -o {}", salt.display(), trace.display());
    let out = lab
        .command(&from.wattson)
        .args(["trace", "export", "-S", "now-1hour", "--salt-file"])
        .arg(&salt)
        .arg("-o")
        .arg(&trace)
        .output()
        .map_err(|e| format!("wattson trace export: {e}"))?;
    print!("{}", String::from_utf8_lossy(&out.stderr));
    if !out.status.success() {
        return Err("wattson trace export failed".into());
    }
    print!("{}", std::fs::read_to_string(&trace).unwrap_or_default());
    Ok(trace)
}

/// Replays `trace` (of `jobs` jobs) under every policy; the plots go to `dir/sim`.
pub fn simulate(from: &Installed, dir: &Path, trace: &Path, jobs: usize) -> Result<(), String> {
    step("wattson sim replays the demo's jobs under Slurm's policies and wattson's");
    let cluster = dir.join("sim-cluster.toml");
    std::fs::write(&cluster, wattson_harness::programs::one_node_cluster()).unwrap();
    let out_dir = dir.join("sim");
    println!(
        "$ wattson sim --trace {} --cluster {} --out {}",
        trace.display(),
        cluster.display(),
        out_dir.display()
    );
    let out = std::process::Command::new(&from.wattson)
        .args(["sim", "--trace"])
        .arg(trace)
        .arg("--cluster")
        .arg(&cluster)
        .arg("--out")
        .arg(&out_dir)
        .output()
        .map_err(|e| format!("wattson sim: {e}"))?;
    print!("{}", String::from_utf8_lossy(&out.stdout));
    if !out.status.success() {
        return Err(format!("wattson sim failed: {}", String::from_utf8_lossy(&out.stderr)));
    }
    let summary: serde_json::Value = std::fs::read_to_string(out_dir.join("summary.json"))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .ok_or("wattson sim wrote no summary.json")?;
    let summaries = summary["summaries"].as_array().cloned().unwrap_or_default();
    if !summaries.iter().any(|s| s["policy"] == "wattson") {
        return Err("wattson sim's summary has no wattson run".into());
    }
    if let Some(s) = summaries.iter().find(|s| s["jobs"] != jobs) {
        return Err(format!("{} replayed {} jobs of {jobs}", s["policy"], s["jobs"]));
    }
    // The demo's jobs are seconds long: its energy in watt-hours, where the table's kWh round off.
    let wh = summaries
        .iter()
        .map(|s| {
            format!(
                "{} {:.2}",
                s["policy"].as_str().unwrap_or("?"),
                s["energy_kwh"].as_f64().unwrap_or(0.0) * 1e3
            )
        })
        .collect::<Vec<_>>();
    println!("energy (Wh): {}", wh.join(", "));
    println!("Plots: {}", out_dir.display());
    Ok(())
}
