//! `wattson job-summary <id>`: one finished job at a glance, as `seff` gives a job's CPU
//! efficiency: its GPU energy, energy per GPU-hour, mean and peak power, the setting wattson
//! chose and why, what that setting saved, and its cost and CO2.

use clap::Args;

use wattson_config::Config;
use wattson_types::energy::MeterEvent;
use wattson_types::gpu::GpuSetting;
use wattson_types::job::{JobKey, JobRecord};
use wattson_types::scope::EnergyScope;

use super::acct;
use crate::report::totals::{GroupBy, JobEnergy, totals};
use crate::report::units;

/// Print one job's GPU energy summary (like seff): energy, kWh per GPU-hour, mean and peak
/// power, the setting wattson chose and why, the energy it saved, cost and CO2. Reads the
/// job's summary in Slurm's accounting, else this node's records.
#[derive(Debug, Args)]
pub struct JobSummaryArgs {
    /// The job
    job: u32,
    /// Only this node's records (wattsond or its store), not Slurm's accounting
    #[arg(long)]
    local: bool,
}

/// What the summary shows, computed from the job's records (one per node).
#[derive(Debug, Clone, PartialEq)]
pub struct JobFigures {
    /// The job.
    pub job: u32,
    /// Its user.
    pub user: String,
    /// Its nodes.
    pub nodes: Vec<String>,
    /// Its GPUs, all nodes.
    pub gpus: usize,
    /// Elapsed, s (the longest node's).
    pub elapsed_s: f64,
    /// GPU energy, J.
    pub energy_j: f64,
    /// The energy Slurm was given, in the scope the job was metered under (`[energy] scope`),
    /// J, where it is not the GPUs' alone; `None` for a GPU-scope job.
    pub scoped: Option<(EnergyScope, f64)>,
    /// The highest power one GPU drew over a bin of its trace, W; `None` without traces.
    pub peak_gpu_w: Option<f64>,
    /// What wattson set, described.
    pub setting: String,
    /// Why.
    pub why: String,
    /// Estimate: energy the setting saved against the highest setting, J.
    pub saved_j: Option<f64>,
    /// Cost from the `[prices]` tariff.
    pub cost: Option<f64>,
    /// CO2 from the `[carbon]` table, kg.
    pub co2_kg: Option<f64>,
}

/// The figures of `job` from its job-level `records` (steps are left out: they are part of
/// the job), `peak_gpu_w` from its power traces, cost and CO2 from `config`.
pub fn figures(
    job: u32,
    records: &[JobRecord],
    peak_gpu_w: Option<f64>,
    config: &Config,
    now_ns: i64,
) -> JobFigures {
    let records: Vec<&JobRecord> = records.iter().filter(|r| r.key == JobKey::job(job)).collect();
    let energy_j: f64 = records.iter().map(|r| r.energy_j()).sum();
    // A CPU-only job's energy is its scope's (its CPU and DRAM or node share), as in reports.
    let scoped_j = |r: &JobRecord| r.scoped_energy_mj().map(|mj| mj / 1000.0).unwrap_or(0.0);
    let scope =
        records.first().and_then(|r| r.node_share).map(|s| s.scope).filter(|&s| s != EnergyScope::Gpu);
    let scoped = scope.map(|scope| (scope, records.iter().map(|r| scoped_j(r)).sum()));
    let rows: Vec<JobEnergy> = records
        .iter()
        .map(|r| JobEnergy {
            record: r,
            energy_j: if r.gpus.is_empty() { scoped_j(r) } else { r.energy_j() },
            gpus: r.gpus.len() as u32,
            from_slurm: false,
            user: r.user.clone().unwrap_or_else(|| r.uid.to_string()),
            account: "",
            partition: "",
        })
        .collect();
    let total =
        totals(&rows, GroupBy::User, &config.prices, &config.carbon, now_ns).pop().unwrap_or_default();
    let saved: Vec<f64> =
        records.iter().filter_map(|r| r.dvfs.as_ref().and_then(|d| d.energy_saved_j)).collect();
    let first = records.first();
    JobFigures {
        job,
        user: first.map(|r| r.user.clone().unwrap_or_else(|| r.uid.to_string())).unwrap_or_default(),
        nodes: records.iter().map(|r| r.node.clone()).collect(),
        gpus: records.iter().map(|r| r.gpus.len()).sum(),
        elapsed_s: records.iter().map(|r| r.elapsed_s(now_ns)).fold(0.0, f64::max),
        energy_j,
        scoped,
        peak_gpu_w,
        setting: setting_of(&records),
        why: first.map(|r| why(r)).unwrap_or_default(),
        saved_j: (!saved.is_empty()).then(|| saved.iter().sum()),
        cost: total.cost,
        co2_kg: total.co2_kg,
    }
}

/// The last setting wattson gave each GPU, described (`power limit 420 W on 2 GPUs`).
fn setting_of(records: &[&JobRecord]) -> String {
    let mut last: Vec<Option<GpuSetting>> = Vec::new();
    for gpu in records.iter().flat_map(|r| &r.gpus) {
        let set = gpu.meter.events.iter().rev().find_map(|e| match e {
            MeterEvent::Setting { setting, .. } => Some(*setting),
            _ => None,
        });
        last.push(set.flatten());
    }
    let mut kinds: Vec<(String, usize)> = Vec::new();
    for s in &last {
        let text = match s {
            Some(GpuSetting::PowerLimit { mw }) => format!("power limit {} W", mw / 1000),
            Some(GpuSetting::LockedClock { mhz }) => format!("SM clock locked at {mhz} MHz"),
            None => "GPU defaults".to_string(),
        };
        match kinds.iter_mut().find(|(k, _)| *k == text) {
            Some((_, n)) => *n += 1,
            None => kinds.push((text, 1)),
        }
    }
    let plural = |n: usize| if n == 1 { "GPU" } else { "GPUs" };
    kinds.iter().map(|(k, n)| format!("{k} on {n} {}", plural(*n))).collect::<Vec<_>>().join(", ")
}

/// Why the job ran as it did.
fn why(r: &JobRecord) -> String {
    let policy = r.policy.map(|p| p.to_string()).unwrap_or_else(|| "unrecorded".into());
    if let Some(freq) = &r.hints.gpu_freq {
        return format!("policy {policy}: the job asked Slurm for --gpu-freq={freq}, so wattson stood aside");
    }
    match &r.dvfs {
        Some(d) => {
            let reason = d.reason.as_deref().unwrap_or("no reason recorded");
            let mut text =
                format!("policy {policy}: the DVFS models chose it for workload {:?} ({reason})", d.tag);
            if let Some(s) = d.measured_slowdown {
                text.push_str(&format!("; measured slowdown {:.1}%", 100.0 * s));
            }
            text
        }
        None if r.policy == Some(wattson_types::job::EnergyPolicy::Perf) => {
            format!("policy {policy}: GPUs left at their defaults")
        }
        None => format!("policy {policy}: the site's fixed share for it ([policy] in wattson.toml)"),
    }
}

/// The summary as text, one `Name: value` line each (as seff prints).
pub fn render(f: &JobFigures) -> String {
    let kwh = f.energy_j / 3.6e6;
    let gpu_hours = f.gpus as f64 * f.elapsed_s / 3600.0;
    let per_s = |j: f64| if f.elapsed_s > 0.0 { j / f.elapsed_s } else { 0.0 };
    let mean_w = per_s(f.energy_j);
    let per_gpu = if f.gpus > 0 { mean_w / f.gpus as f64 } else { 0.0 };
    let na = |v: Option<String>, why: &str| v.unwrap_or_else(|| format!("n/a ({why})"));
    // A CPU-only job: its scope's energy and mean power; no GPU line to read.
    let (mean, setting) = match (f.gpus, f.scoped) {
        (0, Some((_, j))) => (format!("{:.0} W", per_s(j)), "none (no GPU)".to_string()),
        _ => (format!("{mean_w:.0} W ({per_gpu:.0} W per GPU)"), f.setting.clone()),
    };
    let mut lines = vec![
        ("Job ID", f.job.to_string()),
        ("User", f.user.clone()),
        ("Nodes", f.nodes.join(",")),
        ("GPUs", f.gpus.to_string()),
        ("Elapsed", units::elapsed(f.elapsed_s.round() as u64)),
        ("GPU energy", format!("{kwh:.3} kWh ({}J)", units::energy(units::joules_raw(f.energy_j)))),
        (
            "Energy per GPU-hour",
            na((gpu_hours > 0.0).then(|| format!("{:.3} kWh", kwh / gpu_hours)), "no GPU time"),
        ),
        ("Mean power", mean),
        ("Peak GPU power", na(f.peak_gpu_w.map(|w| format!("{w:.0} W")), "no power trace")),
        ("Setting", setting),
        ("Why", f.why.clone()),
        (
            "Saved (estimate)",
            na(
                f.saved_j.map(|j| format!("{:.3} kWh against the highest setting", j / 3.6e6)),
                "no model setting",
            ),
        ),
        ("Cost", na(f.cost.map(|c| format!("{c:.2}")), "no [prices] tariff")),
        ("CO2", na(f.co2_kg.map(|c| format!("{c:.2} kg")), "no [carbon] table")),
    ];
    if let Some((scope, j)) = f.scoped {
        let text = format!(
            "{:.3} kWh ({}J), scope {}",
            j / 3.6e6,
            units::energy(units::joules_raw(j)),
            scope.as_str()
        );
        lines.insert(6, ("Energy in Slurm", text));
    }
    lines.iter().map(|(k, v)| format!("{k}: {v}\n")).collect()
}

/// Runs `wattson job-summary`.
pub fn run(config: &Config, args: JobSummaryArgs) -> Result<(), String> {
    print!("{}", text(config, args.job, args.local)?);
    Ok(())
}

/// The summary of `job` as `wattson job-summary` prints it: from Slurm's accounting and this
/// node, or only this node (`local`).
pub fn text(config: &Config, job: u32, local: bool) -> Result<String, String> {
    let args = JobSummaryArgs { job, local };
    let key = JobKey::job(args.job);
    let window = acct::Window { start: None, end: None, states: false };
    let filter = acct::filter_for(std::slice::from_ref(&key), &[], false, window)?;
    let cluster = acct::gather(config, filter, args.local)?;
    if !cluster.records.iter().any(|r| r.key == key) {
        return Err(format!("job {} has no wattson record (yet) that you may see", args.job));
    }
    let summary = match args.local {
        true => None,
        false => {
            wattson_sacct::comment::from_accounting(args.job, config.ctld.command_timeout).unwrap_or(None)
        }
    };
    let peak = summary.and_then(|s| {
        s.nodes
            .iter()
            .flat_map(|n| &n.power)
            .flat_map(|p| p.watts.iter().map(|&w| f64::from(w)))
            .reduce(f64::max)
    });
    Ok(render(&figures(args.job, &cluster.records, peak, config, wattson_types::now_ns())))
}

#[cfg(test)]
mod tests;
