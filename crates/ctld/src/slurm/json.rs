//! Slurm's JSON forms of what the controller reads: `scontrol show node --json`,
//! `squeue --json` and `sacct --json` ([`sacct`]) (Slurm 23.02 and later). Only the fields the controller uses are read;
//! fields Slurm adds are ignored. Numbers are read both as plain numbers and as the
//! `{"set", "infinite", "number"}` objects 23.11 and later print.

use serde::Deserialize;

use wattson_sacct::{SlurmState, hostlist};

use super::gres::{gpus_per_node, gres_gpus, gres_type, gres_used_gpus, shard_gpus};
use super::{Job, Node};

pub mod sacct;

/// Why a command's JSON could not be read.
#[derive(Debug, thiserror::Error)]
pub enum JsonError {
    /// Not the JSON document expected.
    #[error("{command}: unreadable JSON: {error}")]
    Syntax {
        /// The command (`scontrol show node --json`).
        command: &'static str,
        /// What serde found wrong.
        error: serde_json::Error,
    },
    /// Slurm reported errors instead of data.
    #[error("{command}: Slurm says: {errors}")]
    Slurm {
        /// The command.
        command: &'static str,
        /// Its errors, joined.
        errors: String,
    },
    /// A value the controller cannot use.
    #[error("{command}: {what}")]
    Value {
        /// The command.
        command: &'static str,
        /// What is wrong, naming the record.
        what: String,
    },
}

/// `scontrol show node --json`.
pub const NODES: &str = "scontrol show node --json";
/// `squeue --json`.
pub const JOBS: &str = "squeue --json";

/// A number as Slurm's JSON gives it: plain, or `{"set", "infinite", "number"}`.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Number {
    Plain(i64),
    Object {
        #[serde(default = "yes")]
        set: bool,
        #[serde(default)]
        infinite: bool,
        #[serde(default)]
        number: i64,
    },
}

fn yes() -> bool {
    true
}

impl Number {
    /// The value; `None` when unset or infinite.
    fn value(&self) -> Option<i64> {
        match *self {
            Number::Plain(n) => Some(n),
            Number::Object { set, infinite, number } => (set && !infinite).then_some(number),
        }
    }
}

/// A state: one word (older releases) or a base word and flags.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Words {
    One(String),
    Many(Vec<String>),
}

impl Words {
    fn words(&self) -> Vec<String> {
        match self {
            Words::One(w) => w.split('+').map(str::to_string).collect(),
            Words::Many(w) => w.clone(),
        }
    }
}

/// A list: an array (newer releases) or a comma-separated string.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum List {
    Text(String),
    Many(Vec<String>),
}

impl List {
    fn entries(&self) -> Vec<String> {
        match self {
            List::Text(t) => super::list(t),
            List::Many(v) => v.iter().filter(|e| !e.is_empty()).cloned().collect(),
        }
    }
}

/// Slurm's reply: the records (`nodes` of scontrol's, `jobs` of squeue's), and errors
/// instead of data.
#[derive(Debug, Deserialize)]
struct Reply<T> {
    #[serde(default = "Vec::new")]
    nodes: Vec<T>,
    #[serde(default = "Vec::new")]
    jobs: Vec<T>,
    #[serde(default)]
    errors: Vec<serde_json::Value>,
}

fn reply<T: for<'de> Deserialize<'de>>(command: &'static str, text: &str) -> Result<Reply<T>, JsonError> {
    let reply: Reply<T> = serde_json::from_str(text).map_err(|error| JsonError::Syntax { command, error })?;
    if !reply.errors.is_empty() {
        let errors: Vec<String> = reply
            .errors
            .iter()
            .map(|e| {
                e.get("description")
                    .and_then(|d| d.as_str())
                    .filter(|d| !d.is_empty())
                    .or_else(|| e.get("error").and_then(|d| d.as_str()))
                    .unwrap_or("an error")
                    .to_string()
            })
            .collect();
        return Err(JsonError::Slurm { command, errors: errors.join("; ") });
    }
    Ok(reply)
}

#[derive(Debug, Deserialize)]
struct JsonNode {
    name: String,
    state: Words,
    #[serde(default)]
    gres: String,
    gres_used: Option<String>,
    #[serde(default)]
    alloc_cpus: u32,
    weight: Option<Number>,
    #[serde(default)]
    reason: String,
    #[serde(default)]
    address: String,
    partitions: Option<List>,
}

/// Parses `scontrol show node --json`.
pub fn parse_nodes(text: &str) -> Result<Vec<Node>, JsonError> {
    let reply: Reply<JsonNode> = reply(NODES, text)?;
    Ok(reply.nodes.into_iter().map(node).collect())
}

fn node(n: JsonNode) -> Node {
    let mut words = n.state.words().into_iter();
    let base = words.next().unwrap_or_default();
    let flags: Vec<String> = words.collect();
    Node {
        power: super::power_of(&flags),
        gpus: gres_gpus(&n.gres),
        gpu_type: gres_type(&n.gres),
        alloc_gpus: n.gres_used.as_deref().map(gres_used_gpus),
        shard_gpus: n.gres_used.as_deref().map_or_else(Vec::new, shard_gpus),
        alloc_cpus: n.alloc_cpus,
        weight: n.weight.and_then(|w| w.value()).and_then(|w| u32::try_from(w).ok()).unwrap_or(1),
        addr: if n.address.is_empty() { n.name.clone() } else { n.address },
        partitions: n.partitions.map_or_else(Vec::new, |p| p.entries()),
        reason: n.reason,
        name: n.name,
        base,
        flags,
    }
}

#[derive(Debug, Deserialize)]
struct JsonJob {
    job_id: u32,
    job_state: Words,
    #[serde(default)]
    state_reason: String,
    node_count: Option<Number>,
    tres_per_node: Option<String>,
    submit_time: Option<Number>,
    start_time: Option<Number>,
    time_limit: Option<Number>,
    priority: Option<Number>,
    nodes: Option<String>,
    partition: Option<String>,
    required_nodes: Option<String>,
    nice: Option<Number>,
}

/// Parses `squeue --json`, keeping pending, configuring and running jobs (what
/// `squeue -t PD,CF,R` lists), at `now` (Unix s; a running job's time so far is counted from
/// its start).
pub fn parse_jobs(text: &str, now: i64) -> Result<Vec<Job>, JsonError> {
    let reply: Reply<JsonJob> = reply(JOBS, text)?;
    let mut jobs = Vec::new();
    for j in reply.jobs {
        let words = j.job_state.words();
        let has = |w: &str| words.iter().any(|x| x == w);
        // A running job being configured shows as CONFIGURING in the text form.
        let state = if has("COMPLETING") {
            Some(SlurmState::Completing)
        } else if has("CONFIGURING") {
            Some(SlurmState::Configuring)
        } else {
            words.first().and_then(|w| w.parse().ok())
        };
        if !matches!(state, Some(SlurmState::Pending | SlurmState::Configuring | SlurmState::Running)) {
            continue;
        }
        let id = j.job_id;
        let hosts = |what: &str, list: Option<String>| -> Result<Vec<String>, JsonError> {
            match list.as_deref().map(str::trim) {
                None | Some("") | Some("(null)") => Ok(Vec::new()),
                Some(list) => hostlist::expand(list).map_err(|e| JsonError::Value {
                    command: JOBS,
                    what: format!("job {id}: {what} {list:?}: {e}"),
                }),
            }
        };
        let count = j.node_count.and_then(|n| n.value()).unwrap_or(1).max(1);
        let started = j.start_time.and_then(|t| t.value()).filter(|t| *t > 0);
        let running = state != Some(SlurmState::Pending);
        jobs.push(Job {
            id,
            state,
            reason: j.state_reason,
            gpus: gpus_per_node(j.tres_per_node.as_deref().unwrap_or("")) * u32::try_from(count).unwrap_or(1),
            submit: j.submit_time.and_then(|t| t.value()).unwrap_or(0),
            elapsed_s: match started {
                Some(start) if running => (now - start).max(0) as f64,
                _ => 0.0,
            },
            limit_s: j.time_limit.and_then(|t| t.value()).map(|m| m as f64 * 60.0),
            priority: j
                .priority
                .and_then(|p| p.value())
                .map(|p| u32::try_from(p.max(0)).unwrap_or(u32::MAX))
                .ok_or_else(|| JsonError::Value { command: JOBS, what: format!("job {id}: no priority") })?,
            nodes: if running { hosts("nodes", j.nodes)? } else { Vec::new() },
            partitions: j.partition.as_deref().map_or_else(Vec::new, super::list),
            requested: hosts("required nodes", j.required_nodes)?,
            nice: j.nice.and_then(|n| n.value()).unwrap_or(0),
        });
    }
    Ok(jobs)
}

#[cfg(test)]
mod tests;
