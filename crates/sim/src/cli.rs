//! `wattson-sim` (also `wattson sim`): reads the trace, cluster file and Zeus measurements,
//! runs the simulator, prints the table and writes CSV, JSON and SVG files. All file I/O of
//! the simulator is here.

use std::path::{Path, PathBuf};

use clap::{Parser, ValueEnum};

use crate::{Catalog, ClusterConfig, TraceFormat};

/// Trace layouts `--format` accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FormatArg {
    /// Decide from the header.
    Auto,
    /// ElasticFlow's ITP columns (job_id,submission_time,...,num_gpu,duration).
    Itp,
    /// submit,gpus,duration and an optional tag (e.g. from a sacct export).
    Generic,
}

/// Replay a job trace on a simulated cluster under several scheduling/energy policies.
#[derive(Debug, Parser)]
#[command(name = "wattson-sim", version = wattson_program::version())]
pub struct SimArgs {
    /// Job trace (CSV): ITP layout, or submit,gpus,duration, an optional tag and optional columns (e.g. from `wattson trace export`)
    #[arg(long)]
    trace: PathBuf,
    /// Trace layout
    #[arg(long, value_enum, default_value = "auto")]
    format: FormatArg,
    /// Cluster model (TOML; see etc/sim/cluster.toml)
    #[arg(long, default_value = "etc/sim/cluster.toml")]
    cluster: PathBuf,
    /// Zeus measurements CSV of a one-GPU-type cluster [default: the cluster file's zeus_csv, relative to that file]
    #[arg(long)]
    zeus: Option<PathBuf>,
    /// Policies: all, or a comma list of slurm-default, slurm-powersave, slurm-shards, zeus-per-job, powersave-dvfs, wattson, uniform-cap, floor
    #[arg(long, default_value = "all")]
    policies: String,
    /// Seed of the per-job slowdown-bound and deferral draws
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Write summary.csv, summary.json, power_hourly.csv, energy_vs_jct.svg, energy_vs_wait.svg, energy_vs_imposed_wait.svg, power_over_time.svg here
    #[arg(long)]
    out: Option<PathBuf>,
    /// Also sweep wattson's knobs (six more runs) for the Pareto plot
    #[arg(long)]
    sweep: bool,
    /// Simulate only the first N jobs (by submission time)
    #[arg(long)]
    limit_jobs: Option<usize>,
}

fn read(path: &Path) -> Result<String, String> {
    std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))
}

/// Runs `wattson-sim`.
pub fn run(args: SimArgs) -> Result<(), String> {
    let policies = crate::policies::parse_list(&args.policies).map_err(|e| e.to_string())?;
    let cname = args.cluster.display().to_string();
    let cluster = ClusterConfig::from_toml(&read(&args.cluster)?, &cname).map_err(|e| e.to_string())?;
    let dir = args.cluster.parent().unwrap_or(Path::new("."));
    let zeus: Vec<PathBuf> = match &args.zeus {
        Some(z) if cluster.groups.len() == 1 => vec![z.clone()],
        Some(_) => {
            return Err(format!(
                "--zeus replaces one group's zeus_csv; {cname} has {} [[group]] tables (set each one's zeus_csv)",
                cluster.groups.len()
            ));
        }
        None => cluster.groups.iter().map(|g| dir.join(&g.zeus_csv)).collect(),
    };
    let texts = zeus.iter().map(|z| read(z)).collect::<Result<Vec<String>, String>>()?;
    let names: Vec<String> = zeus.iter().map(|z| z.display().to_string()).collect();
    let files: Vec<(&str, &str)> =
        texts.iter().map(String::as_str).zip(names.iter().map(String::as_str)).collect();
    let mut catalog = Catalog::from_zeus_csvs(&files).map_err(|e| e.to_string())?;
    if let Some(rel) = &cluster.colocation_json {
        let path = dir.join(rel);
        let text = read(&path)?;
        let colocation = crate::colocation::Colocation::from_gavel_json(&text, &path.display().to_string());
        catalog.colocation = Some(colocation.map_err(|e| e.to_string())?);
    }
    let format = match args.format {
        FormatArg::Auto => TraceFormat::Auto,
        FormatArg::Itp => TraceFormat::Itp,
        FormatArg::Generic => TraceFormat::Generic,
    };
    let tname = args.trace.display().to_string();
    let mut trace = crate::trace::parse(&read(&args.trace)?, &tname, format).map_err(|e| e.to_string())?;
    if let Some(n) = args.limit_jobs {
        if n == 0 {
            return Err("--limit-jobs must be at least 1".to_string());
        }
        trace.truncate(n);
    }
    let label = args.trace.file_name().map_or(tname.clone(), |f| f.to_string_lossy().into_owned());
    let mut outcome =
        crate::run(&cluster, &catalog, &trace, &label, &policies, args.seed).map_err(|e| e.to_string())?;
    if args.sweep {
        let more = crate::sweep_wattson(&cluster, &catalog, &trace, args.seed).map_err(|e| e.to_string())?;
        outcome.report.sweep.extend(more);
    }
    let r = &outcome.report;
    print!("{}", crate::metrics::to_table(r));
    if let Some(dir) = &args.out {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: cannot create: {e}", dir.display()))?;
        let files = [
            ("summary.csv", crate::metrics::to_csv(r)),
            ("summary.json", crate::metrics::to_json(r)),
            ("power_hourly.csv", crate::metrics::power_csv(r)),
            ("energy_vs_jct.svg", crate::plot::energy_vs_jct(r)),
            ("energy_vs_wait.svg", crate::plot::energy_vs_wait(r)),
            ("energy_vs_imposed_wait.svg", crate::plot::energy_vs_imposed_wait(r)),
            ("power_over_time.svg", crate::plot::power_over_time(r)),
        ];
        for (name, text) in files {
            let p = dir.join(name);
            std::fs::write(&p, text).map_err(|e| format!("{}: cannot write: {e}", p.display()))?;
        }
        println!(
            "wrote {}/{{summary.csv,summary.json,power_hourly.csv,energy_vs_jct.svg,energy_vs_wait.svg,energy_vs_imposed_wait.svg,power_over_time.svg}}",
            dir.display()
        );
    }
    Ok(())
}
