//! After each job: the controller asks every node of the job for its part of the job's summary
//! over the link and writes the whole into Slurm's accounting (`sacctmgr modify job ... set
//! AdminComment=...`, which works after the job, when `scontrol update` no longer does). A
//! node that cannot answer, or whose record of the job is still open, is asked again at the
//! next loop; after `[ctld] summary_wait` the summary is written without it, naming it.

pub mod passes;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use tracing::{info, warn};

use crate::nodes::Nodes;
pub use crate::slurm::ended::Ended;
use crate::slurm::ended::parse_ended;
use crate::slurm::json::{self, JsonError};
use crate::slurm::{Form, Node, Power};
use wattson_deadline as deadline;
use wattson_protocol::{Reply, Request};
use wattson_sacct::AccountingError;
use wattson_sacct::comment;
use wattson_sacct::summary::{JobSummary, Missing};
use wattson_types::job::JobState;
use wattson_types::summary::NodeSummary;

/// The states of a job that has ended, as `sacct -s` takes them.
const ENDED: &str = "BF,CA,CD,DL,F,NF,OOM,PR,TO";

/// Most summaries written in one loop (each is a `sacctmgr` call); the rest wait for the next.
const PER_LOOP: usize = 50;

/// What one pass did.
#[derive(Debug, Default)]
pub struct Written {
    /// Jobs whose summary was written, with the nodes missing from it.
    pub written: Vec<(u32, Vec<String>)>,
    /// Jobs left for a later pass, with why.
    pub waiting: Vec<(u32, String)>,
    /// Jobs whose summary could not be written, with why.
    pub failed: Vec<(u32, String)>,
}

/// How the summaries are gathered.
#[derive(Debug, Clone)]
pub struct Settings {
    /// How long after a job's end its summary waits for every node.
    pub wait: Duration,
    /// Bins of each GPU's power trace.
    pub bins: u32,
    /// Deadline of each Slurm command.
    pub timeout: Duration,
}

/// Why the ended jobs could not be listed.
#[derive(Debug, thiserror::Error)]
pub enum EndedError {
    /// `sacct` failed, or the cluster keeps no accounting.
    #[error(transparent)]
    Accounting(#[from] AccountingError),
    /// Its JSON could not be read.
    #[error(transparent)]
    Json(#[from] JsonError),
}

/// `sacct`'s arguments listing the jobs that ended within `lookback` of now, in `form` (the
/// text form's End in Unix s needs `SLURM_TIME_FORMAT=%s`).
pub fn sacct_args(form: Form, lookback: Duration) -> Vec<String> {
    let mut args: Vec<String> = match form {
        Form::Json => vec!["--json".into()],
        Form::Text => Vec::new(),
    };
    args.extend(["-X", "-a", "-s", ENDED, "-E", "now", "-S"].map(String::from));
    args.push(format!("now-{}", lookback.as_secs().max(1)));
    if form == Form::Text {
        let fields = format!("JobIDRaw,Cluster,NodeList,End,{}", comment::FIELDS);
        args.extend(["-n".into(), "-P".into(), "-o".into(), fields]);
    }
    args
}

/// Jobs that ended within `lookback` of now and whose comments hold no summary, read from
/// `sacct` in `form` (the form [`crate::slurm::Slurm::form`] chose).
pub fn ended_without_summary(
    settings: &Settings,
    lookback: Duration,
    form: Form,
) -> Result<Vec<Ended>, EndedError> {
    let mut sacct = Command::new("sacct");
    sacct.env("SLURM_TIME_FORMAT", "%s").args(sacct_args(form, lookback));
    let text = wattson_sacct::sacct_run(&mut sacct, settings.timeout)?;
    Ok(match form {
        Form::Json => json::sacct::parse_ended(&text)?,
        Form::Text => parse_ended(&text),
    })
}

/// Gathers and writes the summary of each of `ended` (the first `PER_LOOP`), asking the
/// nodes at their addresses in `seen`, at `now` (Unix s).
pub fn write(link: &Nodes, seen: &[Node], ended: &[Ended], settings: &Settings, now: i64) -> Written {
    let nodes: BTreeMap<&str, &Node> = seen.iter().map(|n| (n.name.as_str(), n)).collect();
    let mut done = Written::default();
    // A node that cannot be reached costs one link timeout per pass, not one per job.
    let mut unreachable = BTreeMap::new();
    for job in ended.iter().take(PER_LOOP) {
        let (parts, missing) = gather(link, &nodes, &mut unreachable, job, settings.bins);
        let waited = now - job.end >= settings.wait.as_secs() as i64;
        if !missing.is_empty() && !waited {
            let names: Vec<&str> = missing.iter().map(|m| m.node.as_str()).collect();
            done.waiting.push((job.job, format!("waiting for {}", names.join(","))));
            continue;
        }
        let summary = JobSummary { job: job.job, written: now, nodes: parts, missing };
        match store(&summary, job, settings.timeout) {
            Ok(()) => done.written.push((job.job, summary.missing.iter().map(|m| m.node.clone()).collect())),
            Err(e) => done.failed.push((job.job, e)),
        }
    }
    for (job, missing) in &done.written {
        info!(job, missing = ?missing, "job summary written into Slurm's accounting");
    }
    for (job, why) in &done.failed {
        warn!(job, error = %why, "cannot write the job's summary; next loop");
    }
    done
}

/// Each node's part of `job`, and the nodes that gave none; nodes in `unreachable` are not
/// asked, and those that cannot be reached are added to it with why.
fn gather(
    link: &Nodes,
    nodes: &BTreeMap<&str, &Node>,
    unreachable: &mut BTreeMap<String, String>,
    job: &Ended,
    bins: u32,
) -> (Vec<NodeSummary>, Vec<Missing>) {
    let missing = |node: &str, why: String| Missing { node: node.to_string(), why };
    let (mut parts, mut gone) = (Vec::new(), Vec::new());
    let mut asks = Vec::new();
    for name in &job.nodes {
        if let Some(why) = unreachable.get(name) {
            gone.push(missing(name, why.clone()));
            continue;
        }
        match nodes.get(name.as_str()) {
            Some(node) if node.power != Power::On => gone.push(missing(name, "powered down".into())),
            Some(node) => asks.push((name, node.addr.as_str())),
            None => asks.push((name, name.as_str())),
        }
    }
    let requests: Vec<(&str, Request)> =
        asks.iter().map(|(_, addr)| (*addr, Request::JobSummary { job: job.job, bins })).collect();
    for ((name, _), answer) in asks.iter().zip(link.call_all(&requests)) {
        match answer {
            Ok(Ok(Reply::JobSummary { mut summary })) => {
                if summary.records.iter().any(|r| r.state == JobState::Running) {
                    gone.push(missing(name, "its record of the job is still open".into()));
                } else {
                    summary.node = name.to_string();
                    parts.push(summary);
                }
            }
            Ok(Ok(other)) => gone.push(missing(name, format!("unexpected answer {other:?}"))),
            Ok(Err(refusal)) => gone.push(missing(name, format!("wattsond: {refusal}"))),
            Err(why) => {
                unreachable.insert(name.to_string(), why.clone());
                gone.push(missing(name, why));
            }
        }
    }
    (parts, gone)
}

/// Writes `summary` into `job`'s record beside what other tools keep there ([`comment`]),
/// read again just before.
fn store(summary: &JobSummary, job: &Ended, timeout: Duration) -> Result<(), String> {
    let (admin, system) = comment::current(job.job, &job.cluster, timeout).map_err(|e| e.to_string())?;
    let placement = comment::place(&admin, &system, summary).map_err(|e| e.to_string())?;
    let mut sacctmgr = Command::new("sacctmgr");
    sacctmgr.args(comment::sacctmgr_args(job.job, &job.cluster, &placement));
    deadline::run(&mut sacctmgr, timeout).map(drop).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sacct_is_asked_for_the_ended_jobs_in_the_form_chosen() {
        let json = sacct_args(Form::Json, Duration::from_secs(90));
        assert_eq!(json[0], "--json");
        assert!(!json.contains(&"-o".to_string()), "{json:?}");
        let text = sacct_args(Form::Text, Duration::from_secs(90));
        for args in [&json, &text] {
            let at = args.iter().position(|a| a == "-s").unwrap();
            assert_eq!((args[at + 1].as_str(), args[at + 5].as_str()), (ENDED, "now-90"));
        }
        assert_eq!(&text[text.len() - 4..text.len() - 1], ["-n", "-P", "-o"]);
    }
}
