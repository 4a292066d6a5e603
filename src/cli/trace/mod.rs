//! `wattson trace export`: a site's own job history, from Slurm's accounting, as a trace that
//! `wattson sim` replays (docs/sim.md, "Your own cluster").

mod export;

use std::io::Write as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use chrono::Timelike;
use clap::{Args, Subcommand};

/// Job traces for the simulator.
#[derive(Debug, Subcommand)]
pub enum TraceCommand {
    /// Turn Slurm's accounting (sacct) into a trace for `wattson sim`: per job that started,
    /// ended and held GPUs, its submission, run time, time limit, GPUs and their type,
    /// partition, wattson's hints, and its user as a keyed hash (never the name). Steps and
    /// jobs that never started, still run, held no GPU or ran 0 s are left out and counted on
    /// stderr
    Export(ExportArgs),
}

/// `wattson trace export` options.
#[derive(Debug, Args)]
pub struct ExportArgs {
    /// Read this file of `sacct --parsable2 --noheader --format=JobID,Submit,Start,End,Timelimit,ReqTRES,AllocTRES,Partition,User,State,AdminComment,SystemComment`
    /// output instead of running sacct (its times taken as printed)
    #[arg(long, value_name = "FILE")]
    from_file: Option<PathBuf>,
    /// File holding the site's secret salt that keys the users' hash (at least 16 bytes; keep
    /// it to compare exports, change it to unlink them) [env: WATTSON_TRACE_SALT holds the salt
    /// itself when this is not given]
    #[arg(long, value_name = "FILE")]
    salt_file: Option<PathBuf>,
    /// Jobs from this time on (sacct -S; its forms, e.g. 2026-11-01 or now-30days)
    #[arg(short = 'S', long, default_value = "now-30days")]
    starttime: String,
    /// Jobs up to this time (sacct -E)
    #[arg(short = 'E', long, default_value = "now")]
    endtime: String,
    /// Only these partitions (sacct -r, a comma list)
    #[arg(short = 'r', long)]
    partition: Option<String>,
    /// This cluster's accounting (sacct -M) [default: the local one]
    #[arg(short = 'M', long)]
    clusters: Option<String>,
    /// Longest wait for sacct, in seconds
    #[arg(long, default_value_t = 300)]
    timeout: u64,
    /// Write the trace here [default: standard output]
    #[arg(short = 'o', long, value_name = "FILE")]
    output: Option<PathBuf>,
}

/// Least salt length, in bytes.
const MIN_SALT: usize = 16;

/// The environment variable that may hold the salt.
const SALT_VAR: &str = "WATTSON_TRACE_SALT";

/// Runs `wattson trace ...`.
pub fn run(cmd: TraceCommand) -> Result<(), String> {
    let TraceCommand::Export(args) = cmd;
    let salt = salt(&args)?;
    let (text, name) = match &args.from_file {
        Some(path) => (
            std::fs::read_to_string(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?,
            path.display().to_string(),
        ),
        None => (sacct(&args)?, "sacct".to_string()),
    };
    let export = export::export(&text, &name, &salt)?;
    for w in &export.warnings {
        eprintln!("wattson trace export: {w}");
    }
    let s = &export.skipped;
    eprintln!(
        "wattson trace export: {} jobs written; left out: {} steps, {} never started, {} still running, {} without GPUs, {} of 0 s",
        export.jobs, s.steps, s.never_started, s.running, s.no_gpus, s.zero_length
    );
    if export.jobs == 0 {
        return Err(format!(
            "no job in {name} started, ended and held GPUs{}",
            if s.no_gpus > 0 { " (does slurm.conf's AccountingStorageTRES list gres/gpu?)" } else { "" }
        ));
    }
    if let Some(o) = export.origin {
        eprintln!(
            "wattson trace export: time 0 is {o}{}; for the tariff's hours set trace_start_utc_s = {} in the cluster file",
            if args.from_file.is_some() { " (as the file gives it)" } else { " UTC" },
            o.num_seconds_from_midnight()
        );
    }
    match &args.output {
        Some(path) => {
            std::fs::write(path, &export.csv).map_err(|e| format!("{}: cannot write: {e}", path.display()))
        }
        None => {
            std::io::stdout().write_all(export.csv.as_bytes()).map_err(|e| format!("standard output: {e}"))
        }
    }
}

/// The salt: the file's bytes (one trailing line break dropped), else `WATTSON_TRACE_SALT`.
fn salt(args: &ExportArgs) -> Result<Vec<u8>, String> {
    let mut salt = match &args.salt_file {
        Some(path) => std::fs::read(path).map_err(|e| format!("{}: cannot read: {e}", path.display()))?,
        None => std::env::var(SALT_VAR)
            .map_err(|_| {
                format!("a salt keys the users' hash: give --salt-file FILE or set {SALT_VAR} (at least {MIN_SALT} bytes)")
            })?
            .into_bytes(),
    };
    if salt.last() == Some(&b'\n') {
        salt.pop();
    }
    if salt.len() < MIN_SALT {
        return Err(format!(
            "the salt has {} bytes: at least {MIN_SALT} are needed, or the users' names could be guessed back",
            salt.len()
        ));
    }
    Ok(salt)
}

/// Runs sacct for every user's jobs in the window, times in UTC and Slurm's standard form.
fn sacct(args: &ExportArgs) -> Result<String, String> {
    let mut sacct = Command::new("sacct");
    sacct.env("TZ", "UTC").env("SLURM_TIME_FORMAT", "standard");
    sacct.args(["--allusers", "--parsable2", "--noheader", "--format", export::FIELDS]);
    sacct.args(["--starttime", &args.starttime, "--endtime", &args.endtime]);
    if let Some(p) = &args.partition {
        sacct.args(["--partition", p]);
    }
    if let Some(c) = &args.clusters {
        sacct.args(["--clusters", c]);
    }
    wattson_sacct::sacct_run(&mut sacct, Duration::from_secs(args.timeout)).map_err(|e| format!("sacct: {e}"))
}
