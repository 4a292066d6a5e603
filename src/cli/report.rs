//! `wattson report`: GPU energy summed by user, account, partition or GPU type over a window,
//! from the same records as `wattson acct` (the cluster's, as `sacct` lets the caller see them).

use clap::Args;

use super::acct::{self, Cluster, Window};
use crate::report::totals::{GroupBy, JobEnergy, Totals, totals};
use crate::report::{self, Source};
use wattson_config::Config;
use wattson_types::job::JobRecord;
use wattson_types::now_ns;

/// `wattson report` options.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Jobs running at or after this time [default: 00:00 today]; the forms of `wattson acct -S`
    #[arg(short = 'S', long = "starttime")]
    start: Option<String>,
    /// Jobs running at or before this time [default: now]
    #[arg(short = 'E', long = "endtime")]
    end: Option<String>,
    /// Group by
    #[arg(long, value_enum, default_value = "user")]
    by: GroupBy,
    /// Only these users' jobs, comma-separated (names or uids)
    #[arg(short = 'u', long = "user", value_delimiter = ',')]
    users: Vec<String>,
    /// Every user's jobs that Slurm lets you see (root and admins: all; others: their own
    /// unless the site's PrivateData allows more)
    #[arg(short = 'a', long = "allusers")]
    all_users: bool,
    /// Only this node's records (its wattsond, else its store), not Slurm's accounting
    #[arg(long)]
    local: bool,
    /// No header line
    #[arg(short = 'n', long = "noheader")]
    no_header: bool,
    /// Parsable output: fields separated by '|'
    #[arg(short = 'P', long = "parsable2", conflicts_with = "json")]
    parsable: bool,
    /// The totals as JSON
    #[arg(long)]
    json: bool,
}

const HEADER: [&str; 9] = [
    "Group",
    "Jobs",
    "GPUHours",
    "EnergyKWh",
    "KWhPerGPUHour",
    "Cost",
    "CO2Kg",
    "SavedKWhEst",
    "FromSlurmKWh",
];

/// Runs `wattson report`.
pub fn run(config: &Config, args: ReportArgs) -> Result<(), String> {
    let window = Window { start: args.start.as_deref(), end: args.end.as_deref(), states: false };
    let filter = acct::filter_for(&[], &args.users, args.all_users, window)?;
    let cluster = acct::gather(config, filter, args.local)?;
    let now = now_ns();
    let jobs = jobs_of(&cluster, &args.users)?;
    let rows = totals(&jobs, args.by, &config.prices, &config.carbon, now);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&rows).map_err(|e| e.to_string())?);
        return Ok(());
    }
    print!("{}", render(&rows, args.parsable, !args.no_header));
    Ok(())
}

/// A job's energy in the report: its GPUs' (or Slurm's figure); for a job without GPUs on its
/// node (a CPU-only job, on a node whose scope counts the CPUs or the node), its scope's: its
/// share of the CPU packages and DRAM, or of the node.
fn energy_j(source: Source, r: &JobRecord) -> f64 {
    match source {
        Source::Node | Source::Summary if r.gpus.is_empty() => {
            r.scoped_energy_mj().map(|mj| mj / 1000.0).unwrap_or(0.0)
        }
        _ => source.energy_j(r),
    }
}

/// The job-level records (steps are part of their job's energy), each with its energy, GPUs
/// and where its figures come from.
fn jobs_of<'a>(cluster: &'a Cluster, users: &[String]) -> Result<Vec<JobEnergy<'a>>, String> {
    let uids: Vec<u32> = users.iter().map(|u| acct::resolve_user(u)).collect::<Result<_, _>>()?;
    let mut out = Vec::new();
    for r in cluster.records.iter().filter(|r| r.key.step.is_empty()) {
        if !uids.is_empty() && !uids.contains(&r.uid) {
            continue;
        }
        let slurm = cluster.jobs.get(&r.key.job_id);
        let source = report::source_of(&cluster.sources, r);
        let (gpus, from_slurm) = match source {
            Source::Slurm(_) => {
                // Slurm's GPUs for the job less those the job's other records account for.
                let counted: usize = cluster
                    .records
                    .iter()
                    .filter(|o| o.key == r.key && o.node != r.node)
                    .map(|o| o.gpus.len())
                    .sum();
                let total = slurm.and_then(|s| s.gpus).unwrap_or(0);
                (total.saturating_sub(counted as u32), true)
            }
            Source::Node | Source::Summary => (r.gpus.len() as u32, false),
        };
        out.push(JobEnergy {
            record: r,
            energy_j: energy_j(source, r),
            gpus,
            from_slurm,
            user: match slurm.map(|s| s.user.as_str()).filter(|u| !u.is_empty()) {
                Some(user) => user.to_string(),
                None => r.user.clone().unwrap_or_else(|| r.uid.to_string()),
            },
            account: slurm.map_or("", |s| s.account.as_str()),
            partition: slurm.map_or("", |s| s.partition.as_str()),
        });
    }
    Ok(out)
}

fn render(rows: &[Totals], parsable: bool, header: bool) -> String {
    let opt = |v: Option<f64>, digits: usize| v.map(|x| format!("{x:.digits$}")).unwrap_or_default();
    let cells = |t: &Totals| {
        vec![
            t.group.clone(),
            t.jobs.to_string(),
            format!("{:.2}", t.gpu_hours),
            format!("{:.3}", t.energy_kwh),
            opt(t.kwh_per_gpu_hour(), 3),
            opt(t.cost, 2),
            opt(t.co2_kg, 2),
            format!("{:.3}", t.saved_kwh_estimate),
            format!("{:.3}", t.from_slurm_kwh),
        ]
    };
    let mut lines: Vec<Vec<String>> = Vec::new();
    if header {
        lines.push(HEADER.iter().map(|h| h.to_string()).collect());
    }
    lines.extend(rows.iter().map(cells));
    if parsable {
        return lines.iter().map(|l| l.join("|") + "\n").collect();
    }
    let widths: Vec<usize> =
        (0..HEADER.len()).map(|i| lines.iter().map(|l| l[i].len()).max().unwrap_or(0).max(8)).collect();
    let mut out = String::new();
    for (n, line) in lines.iter().enumerate() {
        let text: Vec<String> = line
            .iter()
            .zip(&widths)
            .enumerate()
            .map(|(i, (v, w))| if i == 0 { format!("{v:<w$}") } else { format!("{v:>w$}") })
            .collect();
        out.push_str(text.join(" ").trim_end());
        out.push('\n');
        if header && n == 0 {
            out.push_str(&widths.iter().map(|w| "-".repeat(*w)).collect::<Vec<_>>().join(" "));
            out.push('\n');
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattson_types::scope::{EnergyScope, NodeShare};

    #[test]
    fn a_cpu_only_jobs_energy_is_its_scopes_and_a_gpu_jobs_its_gpus() {
        let share =
            NodeShare { scope: EnergyScope::Cpu, cpu_mj: Some(9000.0), dram_mj: Some(1000.0), node_mj: None };
        let record = JobRecord {
            key: wattson_types::job::JobKey::job(7),
            uid: 1,
            user: None,
            name: None,
            node: "c1".into(),
            begin_ns: 0,
            end_ns: Some(1),
            state: wattson_types::job::JobState::Completed,
            hints: Default::default(),
            policy: None,
            gpus: Vec::new(),
            dvfs: None,
            node_share: Some(share),
        };
        assert_eq!(energy_j(Source::Node, &record), 10.0, "CPU + DRAM");
        assert_eq!(energy_j(Source::Slurm(Some(12.0)), &record), 12.0, "Slurm's figure stays Slurm's");
        let node =
            JobRecord { node_share: Some(NodeShare { scope: EnergyScope::Node, ..share }), ..record.clone() };
        assert_eq!(energy_j(Source::Node, &node), 0.0, "no node part measured: nothing, not the CPU's");
    }
}
