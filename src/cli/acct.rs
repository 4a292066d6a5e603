//! `wattson acct`: recorded jobs' GPU energy, with `sacct`'s flags and layout.
//!
//! Asks wattsond, which decides from the caller's credentials what it may see. When the daemon
//! is not running, reads the store directly and applies the same rule; then the file's
//! permissions decide who can read at all.

use clap::Args;

use super::caller_uid;
use crate::report::{self, Column, Format};
use wattson_config::Config;
use wattson_protocol::access::Access;
use wattson_protocol::{AcctFilter, ClientError, Reply, Request};
use wattson_store::Store;
use wattson_types::job::{JobKey, JobRecord};
use wattson_types::now_ns;

/// `wattson acct` options, as `sacct`'s.
#[derive(Debug, Args)]
pub struct AcctArgs {
    /// Jobs or steps, comma-separated: 42, 42.0, 42.batch (a job also shows its steps)
    #[arg(short = 'j', long = "jobs", value_delimiter = ',', value_parser = JobKey::parse)]
    jobs: Vec<JobKey>,
    /// Only this user's jobs (name or uid)
    #[arg(short = 'u', long = "user")]
    user: Option<String>,
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
    /// Fields to print, comma-separated (see --helpformat)
    #[arg(short = 'o', long = "format")]
    format: Option<String>,
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
}

/// Runs `wattson acct`.
pub fn run(config: &Config, args: AcctArgs) -> Result<(), String> {
    if args.help_format {
        println!("{}", Column::ALL.iter().map(|c| c.name()).collect::<Vec<_>>().join(" "));
        return Ok(());
    }
    let columns = match &args.format {
        Some(list) => Column::parse_list(list)?,
        None => report::DEFAULT_COLUMNS.to_vec(),
    };
    let format = match (args.json, args.parsable, args.parsable2) {
        (true, _, _) => Format::Json,
        (_, true, _) => Format::Parsable,
        (_, _, true) => Format::Parsable2,
        _ => Format::Table,
    };
    let filter = filter(&args)?;
    let records = fetch(config, filter)?;
    print!("{}", report::render(&records, &columns, format, now_ns()));
    Ok(())
}

fn filter(args: &AcctArgs) -> Result<AcctFilter, String> {
    let now = chrono::Local::now();
    let uid = match &args.user {
        Some(user) => Some(resolve_user(user)?),
        // Like sacct: a user sees their own jobs unless they name jobs or ask for all.
        None if !args.all_users && args.jobs.is_empty() && caller_uid() != 0 => Some(caller_uid()),
        None => None,
    };
    let start_ns = match &args.start {
        Some(s) => Some(report::parse_time(s, now)?),
        None if args.jobs.is_empty() => Some(report::parse_time("today", now)?),
        None => None,
    };
    let end_ns = args.end.as_deref().map(|s| report::parse_time(s, now)).transpose()?;
    Ok(AcctFilter { jobs: args.jobs.clone(), uid, start_ns, end_ns })
}

fn resolve_user(user: &str) -> Result<u32, String> {
    wattson_config::users::uid_of(user).ok_or_else(|| format!("unknown user {user:?}"))
}

/// Asks the daemon; if none runs, reads the store with the same visibility rule.
fn fetch(config: &Config, filter: AcctFilter) -> Result<Vec<JobRecord>, String> {
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
            store.query(&filter.query()).map_err(|e| e.to_string())
        }
        Err(e) => Err(e.to_string()),
    }
}
