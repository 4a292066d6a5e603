//! `wattson acct`: recorded jobs' GPU energy, with `sacct`'s flags and layout.
//!
//! Across the cluster from Slurm's accounting and the jobs' wattson summaries in it
//! ([`cluster`]), with this node's own records in place of the summary's for this node: asks
//! wattsond, which decides from the caller's credentials what it may see; when the daemon is
//! not running, reads the store directly and applies the same rule (then the file's
//! permissions decide who can read at all).

mod from_slurm;

pub(super) use from_slurm::Cluster;

use std::collections::BTreeMap;

use chrono::TimeZone;
use clap::Args;

use super::caller_uid;
use crate::report::{self, Column, Format, Style, units};
use wattson_config::Config;
use wattson_protocol::access::Access;
use wattson_protocol::{AcctQuery, ClientError, Reply, Request};
use wattson_sacct::{AccountingError, SlurmState};
use wattson_store::Store;
use wattson_types::job::{JobKey, JobRecord};
use wattson_types::now_ns;

/// `wattson acct` options, as `sacct`'s.
#[derive(Debug, Args)]
pub struct AcctArgs {
    /// Jobs or steps, comma-separated: 42, 42.0, 42.batch (a job also shows its steps)
    #[arg(short = 'j', long = "jobs", value_delimiter = ',', value_parser = JobKey::parse)]
    jobs: Vec<JobKey>,
    /// Only these users' jobs, comma-separated (names or uids)
    #[arg(short = 'u', long = "user", alias = "uid", value_delimiter = ',')]
    users: Vec<String>,
    /// Every user's jobs (root and configured admins; others always see only their own)
    #[arg(short = 'a', long = "allusers")]
    all_users: bool,
    /// Jobs running at or after this time [default: 00:00 today, or any time with -j].
    /// Forms: YYYY-MM-DD[THH:MM[:SS]], MM/DD[/YY], HH:MM[:SS], now[-N{seconds,minutes,hours,days,weeks}], today
    #[arg(short = 'S', long = "starttime")]
    start: Option<String>,
    /// Jobs running at or before this time [default: now]; same forms as -S
    #[arg(short = 'E', long = "endtime")]
    end: Option<String>,
    /// Fields to print, comma-separated (see --helpformat); Field%N sets a column's width
    #[arg(short = 'o', long = "format")]
    format: Option<String>,
    /// No header lines
    #[arg(short = 'n', long = "noheader")]
    no_header: bool,
    /// Only whole jobs (allocations), not their steps
    #[arg(short = 'X', long = "allocations")]
    allocations: bool,
    /// Only jobs in these states, comma-separated (names or sacct's short forms: R, CD, F, CA,
    /// TO, OOM...), Slurm's state from its accounting. Without -S/-E, only jobs in that state
    /// now, as sacct does
    #[arg(short = 's', long = "state", value_delimiter = ',', value_parser = SlurmState::parse)]
    states: Vec<SlurmState>,
    /// Only jobs with these names, comma-separated
    #[arg(long = "name", value_delimiter = ',')]
    names: Vec<String>,
    /// Only jobs recorded on these nodes (a Slurm hostlist: gpu[01-04],gpu09)
    #[arg(short = 'N', long = "nodelist")]
    nodelist: Option<String>,
    /// Energy in this unit: K, M, G, T or P
    #[arg(long = "units", value_parser = units::Unit::parse)]
    units: Option<units::Unit>,
    /// Field separator of -p/-P output [default: |]
    #[arg(long = "delimiter", default_value = "|")]
    delimiter: String,
    /// List the fields -o accepts
    #[arg(short = 'e', long = "helpformat")]
    help_format: bool,
    /// Parsable output: fields separated by '|', with a trailing '|'
    #[arg(short = 'p', long = "parsable", conflicts_with_all = ["parsable2", "json"])]
    parsable: bool,
    /// Parsable output: fields separated by '|', no trailing '|'
    #[arg(short = 'P', long = "parsable2", conflicts_with = "json")]
    parsable2: bool,
    /// Full records as JSON
    #[arg(long)]
    json: bool,
    /// Only this node's records (its wattsond, else its store), not Slurm's accounting
    #[arg(long)]
    local: bool,
    /// Draw one job's GPU power (-j) with every setting wattson gave its GPUs marked, into
    /// FILE: SVG, or PNG if FILE ends in .png. From the job's summary in Slurm's accounting
    /// (every node), else from this node's series
    #[arg(long, value_name = "FILE")]
    plot: Option<std::path::PathBuf>,
    /// Instead of the record, the job's power series on this node (one job with -j): time,
    /// GPU, power (W), SM clock (MHz), utilisation (%), the job's energy on that GPU so far
    /// (J); `|`-separated, or JSON with --json
    #[arg(long)]
    series: bool,
}

/// Runs `wattson acct`.
pub fn run(config: &Config, args: AcctArgs) -> Result<(), String> {
    if args.help_format {
        println!("{}", Column::ALL.iter().map(|c| c.name()).collect::<Vec<_>>().join(" "));
        return Ok(());
    }
    let (columns, widths) = match &args.format {
        Some(list) => report::parse_fields(list)?,
        None => (report::DEFAULT_COLUMNS.to_vec(), Vec::new()),
    };
    let mut style = Style {
        header: !args.no_header,
        widths,
        delimiter: args.delimiter.clone(),
        unit: args.units,
        ..Style::default()
    };
    let format = match (args.json, args.parsable, args.parsable2) {
        (true, _, _) => Format::Json,
        (_, true, _) => Format::Parsable,
        (_, _, true) => Format::Parsable2,
        _ => Format::Table,
    };
    if args.series {
        return print_series(config, &args);
    }
    if let Some(path) = &args.plot {
        return plot_job(config, &args, path);
    }
    let filter = filter(&args)?;
    let keep = Keep::from_args(&args)?;
    let gathered = gather(config, filter, args.local)?;
    style.sources = gathered.sources;
    let mut records = gathered.records;
    style.slurm_states = slurm_states(&records, config.ctld.command_timeout);
    records.retain(|r| keep.admits(r, &style));
    print!("{}", report::render_styled(&records, &columns, format, &style, now_ns(), &chrono::Local));
    Ok(())
}

/// What the records are narrowed to after the query: states, names, nodes, steps, users.
struct Keep {
    states: Vec<SlurmState>,
    names: Vec<String>,
    nodes: Vec<String>,
    allocations: bool,
    uids: Vec<u32>,
}

impl Keep {
    fn from_args(args: &AcctArgs) -> Result<Keep, String> {
        let nodes = match &args.nodelist {
            Some(list) => wattson_sacct::hostlist::expand(list).map_err(|e| format!("-N {list:?}: {e}"))?,
            None => Vec::new(),
        };
        let uids = args.users.iter().map(|u| resolve_user(u)).collect::<Result<_, _>>()?;
        Ok(Keep {
            states: args.states.clone(),
            names: args.names.clone(),
            nodes,
            allocations: args.allocations,
            uids,
        })
    }

    fn admits(&self, r: &JobRecord, style: &Style) -> bool {
        (self.states.is_empty() || self.states.contains(&style.state(r)))
            && (self.names.is_empty() || r.name.as_ref().is_some_and(|n| self.names.contains(n)))
            && (self.nodes.is_empty() || self.nodes.contains(&r.node))
            && (!self.allocations || r.key.step.is_empty())
            && (self.uids.is_empty() || self.uids.contains(&r.uid))
    }
}

fn filter(args: &AcctArgs) -> Result<AcctQuery, String> {
    let window =
        Window { start: args.start.as_deref(), end: args.end.as_deref(), states: !args.states.is_empty() };
    filter_for(&args.jobs, &args.users, args.all_users, window)
}

/// `-S`, `-E`, and whether `-s` was given.
pub(super) struct Window<'a> {
    pub(super) start: Option<&'a str>,
    pub(super) end: Option<&'a str>,
    pub(super) states: bool,
}

/// The query sacct's `-j`, `-u`, `-a`, `-S`, `-E` (and `-s`) ask for.
pub(super) fn filter_for(
    jobs: &[JobKey],
    users: &[String],
    all_users: bool,
    window: Window,
) -> Result<AcctQuery, String> {
    let now = chrono::Local::now();
    let uid = match users {
        [user] => Some(resolve_user(user)?),
        // Several users: asked for all (the daemon still narrows a user to their own), kept
        // after.
        [_, _, ..] => None,
        // Like sacct: a user sees their own jobs unless they name jobs or ask for all.
        [] if !all_users && jobs.is_empty() && caller_uid() != 0 => Some(caller_uid()),
        [] => None,
    };
    // sacct's default window: any time with -j; with -s, now (jobs in that state now); else
    // since midnight.
    let start_ns = match window.start {
        Some(s) => Some(report::parse_time(s, now)?),
        None if !jobs.is_empty() => None,
        None if window.states => Some(report::parse_time("now", now)?),
        None => Some(report::parse_time("today", now)?),
    };
    let end_ns = match window.end {
        Some(s) => Some(report::parse_time(s, now)?),
        None if window.start.is_none() && jobs.is_empty() && window.states => start_ns,
        None => None,
    };
    Ok(AcctQuery { jobs: jobs.to_vec(), uid, start_ns, end_ns, limit: None })
}

/// `--plot`: the job's power chart, from its summary or from this node.
fn plot_job(config: &Config, args: &AcctArgs, path: &std::path::Path) -> Result<(), String> {
    let [job] = &args.jobs[..] else { return Err("--plot takes exactly one job (-j)".into()) };
    let summary = match args.local {
        true => None,
        false => {
            wattson_sacct::comment::from_accounting(job.job_id, config.ctld.command_timeout).unwrap_or(None)
        }
    };
    let (traces, marks) = match summary {
        Some(summary) => report::plot::from_summary(&summary.nodes),
        None => {
            let points = series(config, job)?;
            let records = fetch(config, AcctQuery { jobs: vec![job.clone()], ..AcctQuery::default() })?;
            let record = records
                .iter()
                .rev()
                .find(|r| r.key == *job)
                .ok_or_else(|| format!("job {job} has no record here"))?;
            report::plot::from_series(record, &points)
        }
    };
    if traces.iter().all(|t| t.t_s.is_empty()) {
        return Err(format!("job {job} has no power readings to plot"));
    }
    let svg = report::plot::svg(&format!("job {job}: GPU power"), &traces, &marks);
    let bytes = match path.extension().and_then(|e| e.to_str()) {
        Some(ext) if ext.eq_ignore_ascii_case("png") => {
            let (png, has_text) = report::plot::png(&svg)?;
            if !has_text {
                eprintln!(
                    "wattson acct: no fonts found: the PNG has no text (install fonts-dejavu-core, or write .svg)"
                );
            }
            png
        }
        _ => svg.into_bytes(),
    };
    std::fs::write(path, bytes).map_err(|e| format!("{}: {e}", path.display()))
}

/// One job's power series from this node's wattsond (which decides who may see it).
fn series(config: &Config, job: &JobKey) -> Result<Vec<wattson_types::energy::SeriesPoint>, String> {
    let request = Request::JobSeries { job: job.clone() };
    match wattson_protocol::call(&config.daemon.socket, &request, config.daemon.request_timeout) {
        Ok(Reply::Series { points, .. }) => Ok(points),
        Ok(other) => Err(format!("unexpected reply from wattsond: {other:?}")),
        Err(e) => Err(e.to_string()),
    }
}

/// `--series`: asks wattsond for one job's series (the daemon decides who may see it).
fn print_series(config: &Config, args: &AcctArgs) -> Result<(), String> {
    let [job] = &args.jobs[..] else { return Err("--series takes exactly one job (-j)".into()) };
    let points = series(config, job)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&points).map_err(|e| e.to_string())?);
        return Ok(());
    }
    let d = &args.delimiter;
    if !args.no_header {
        println!("Time{d}GPU{d}Power{d}SMClock{d}Util{d}Energy");
    }
    let opt = |v: Option<u32>| v.map(|x| x.to_string()).unwrap_or_default();
    for p in points {
        let time = chrono::Local.timestamp_nanos(p.t_ns).format("%Y-%m-%dT%H:%M:%S%.3f");
        let watts = p.power_mw.map(|mw| format!("{:.1}", f64::from(mw) / 1000.0)).unwrap_or_default();
        println!(
            "{time}{d}{}{d}{watts}{d}{}{d}{}{d}{:.1}",
            p.gpu_index,
            opt(p.sm_clock_mhz),
            opt(p.util_pct),
            p.energy_mj / 1000.0
        );
    }
    Ok(())
}

/// Slurm's state of the records' jobs, from its accounting; empty (the records' own states
/// shown) where the cluster keeps none, with a word on stderr if sacct failed.
fn slurm_states(records: &[JobRecord], timeout: std::time::Duration) -> BTreeMap<String, SlurmState> {
    let mut jobs: Vec<u32> = records.iter().map(|r| r.key.job_id).collect();
    jobs.sort_unstable();
    jobs.dedup();
    if jobs.is_empty() {
        return BTreeMap::new();
    }
    match wattson_sacct::job_states(&jobs, timeout) {
        Ok(states) => states,
        Err(AccountingError::Absent) => BTreeMap::new(),
        Err(e) => {
            eprintln!("wattson acct: Slurm's job states unavailable, State shows wattson's records: {e}");
            BTreeMap::new()
        }
    }
}

pub(super) fn resolve_user(user: &str) -> Result<u32, String> {
    wattson_protocol::access::uid_of(user).ok_or_else(|| format!("unknown user {user:?}"))
}

/// The cluster's records from Slurm's accounting, with this node's own in place of their
/// summary's; this node's alone with `local_only`, or where Slurm keeps no accounting.
pub(super) fn gather(config: &Config, filter: AcctQuery, local_only: bool) -> Result<Cluster, String> {
    let local = fetch(config, filter.clone());
    let only_local = |records| Cluster { records, ..Cluster::default() };
    if local_only {
        return local.map(only_local);
    }
    let cluster = match from_slurm::fetch(&filter, config.ctld.command_timeout) {
        Ok(cluster) => cluster,
        Err(AccountingError::Absent) => return local.map(only_local),
        Err(e) => {
            let records = local.map_err(|local| format!("{local}; and from Slurm's accounting: {e}"))?;
            eprintln!("wattson: this node's jobs only: Slurm's accounting is unavailable: {e}");
            return Ok(only_local(records));
        }
    };
    // No wattsond and no store here (a login node): the cluster's view is the whole answer.
    let local = local.unwrap_or_default();
    let here: std::collections::BTreeSet<(String, String)> =
        local.iter().map(|r| (r.node.clone(), r.key.to_string())).collect();
    let mut records: Vec<JobRecord> = cluster
        .records
        .into_iter()
        .filter(|r| !here.contains(&(r.node.clone(), r.key.to_string())))
        .collect();
    records.extend(local);
    records.sort_by(|a, b| (a.key.job_id, &a.node, &a.key.step).cmp(&(b.key.job_id, &b.node, &b.key.step)));
    Ok(Cluster { records, ..cluster })
}

/// Asks the daemon; if none runs, reads the store with the same visibility rule.
fn fetch(config: &Config, filter: AcctQuery) -> Result<Vec<JobRecord>, String> {
    let request = Request::Acct(filter);
    match wattson_protocol::call(&config.daemon.socket, &request, config.daemon.request_timeout) {
        Ok(Reply::Acct { records }) => Ok(records),
        Ok(other) => Err(format!("unexpected reply from wattsond: {other:?}")),
        Err(ClientError::Unavailable { .. }) => {
            let (policy, _) = Access::resolve(&config.daemon.slurm_user, &config.daemon.admins);
            let Request::Acct(filter) = policy.authorize(caller_uid(), request).map_err(|e| e.to_string())?
            else {
                unreachable!("authorize keeps the request's kind")
            };
            let store = Store::open_read_only(&config.daemon.store)
                .map_err(|e| format!("wattsond is not running and the store cannot be read: {e}"))?;
            let read = store.query_readable(&filter).map_err(|e| e.to_string())?;
            for unreadable in &read.unreadable {
                eprintln!("wattson: left out a record that cannot be read: {}", unreadable.reason);
            }
            Ok(read.records)
        }
        Err(e) => Err(e.to_string()),
    }
}
