//! Slurm's state as its public commands show it (`scontrol show node`, `squeue`), and the
//! node updates wattson asks of it. Parsing is pure, for tests; [`Slurm`] runs the commands,
//! reading their JSON where the running release has it ([`Form`]) and their text elsewhere.

pub mod ended;
pub mod gres;
pub mod json;
pub mod request;

use std::collections::BTreeMap;
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use chrono::{Local, NaiveDateTime, TimeZone};

use wattson_deadline::{self as deadline, CommandError};
use wattson_sacct::{SlurmState, hostlist};

use gres::{gpus_per_node, gres_gpus, gres_type, gres_used_gpus, shard_gpus};

/// `squeue`'s format: job id, state, reason, nodes, TRES per node, submit time, time used,
/// time limit, priority, node list, partitions, requested nodes, nice.
pub const SQUEUE_FORMAT: &str = "%A|%T|%r|%D|%b|%V|%M|%l|%Q|%N|%P|%n|%y";

/// The reason wattson's resume program gives a node whose power action failed.
pub const RESUME_FAILED: &str = "wattson: resume action failed";

/// The reason a node keeps once the controller gave up resuming it.
pub const GAVE_UP: &str = "wattson: resume failed after retries";

/// The reason the controller gives a node before it powers the node up again, followed by the
/// try's number (`wattson: resume retry 2`). Slurm keeps it when that resume fails too (a down
/// node's reason stays, or Slurm appends its own), so a controller that takes over, or one
/// restarted, counts on from it.
pub const RETRIED: &str = "wattson: resume retry";

/// A node's power as Slurm reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Power {
    /// Up.
    On,
    /// Being resumed.
    PoweringUp,
    /// Asked to power down, or shutting down.
    PoweringDown,
    /// Powered down.
    Off,
}

/// One node of `scontrol -o show node`.
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    /// NodeName.
    pub name: String,
    /// The state's base word: IDLE, MIXED, ALLOCATED, DOWN...
    pub base: String,
    /// The state's flags: DRAIN, POWERED_DOWN, RESERVED...
    pub flags: Vec<String>,
    /// Power, from the flags.
    pub power: Power,
    /// GPUs (`Gres=gpu:...`).
    pub gpus: u32,
    /// The first GPU type `Gres` names (`gpu:h100:4`: `h100`), if any.
    pub gpu_type: Option<String>,
    /// GPUs allocated to jobs (`GresUsed`), whole or in shares; `None` when Slurm does not say.
    pub alloc_gpus: Option<u32>,
    /// The GPUs `GresUsed` says hold shards or MPS shares of jobs (22.05 forgets a GPU's
    /// shards once one of two jobs on it ends: [`crate::share`] adds those it knows of).
    pub shard_gpus: Vec<u32>,
    /// CPUs allocated to jobs.
    pub alloc_cpus: u32,
    /// Scheduling weight (Slurm places jobs on the lowest first).
    pub weight: u32,
    /// Reason, if any (without the `[user@time]` suffix).
    pub reason: String,
    /// `NodeAddr`: where its wattsond is reached.
    pub addr: String,
    /// The partitions it belongs to.
    pub partitions: Vec<String>,
}

impl Node {
    /// Whether an administrator (or a failure) took the node out of service: drained, down,
    /// failing, in maintenance or reserved. wattson never touches such a node. Its own
    /// `power_down_asap` drain does not count.
    pub fn is_held_by_admin(&self) -> bool {
        let ours = self.reason.starts_with("POWER_DOWN_ASAP");
        let held = [
            "DRAIN",
            "DRAINING",
            "DRAINED",
            "FAIL",
            "MAINT",
            "RESERVED",
            "REBOOT_REQUESTED",
            "REBOOT_ISSUED",
        ];
        self.base == "DOWN"
            || self.base == "FUTURE"
            || self.flags.iter().any(|f| held.contains(&f.as_str())) && !ours
    }

    /// Whether the node is down because its resume failed (Slurm's `ResumeTimeout`, or
    /// wattson's resume program saw the power action fail): the controller's to retry.
    /// A node being powered up again is not failed (yet): its retry is under way. Slurm 24.11
    /// appends a new reason to the one the node had (`POWER_DOWN_ASAP : ResumeTimeout
    /// reached`), so each ` : `-separated part is looked at.
    pub fn resume_failed(&self) -> bool {
        self.base == "DOWN"
            && self.power != Power::PoweringUp
            && self.reason.split(" : ").any(|part| {
                part.starts_with("ResumeTimeout reached")
                    || part.starts_with(RESUME_FAILED)
                    || part.starts_with(RETRIED)
            })
    }

    /// How many times the controller has powered the node up again since its resume first
    /// failed, as its reason says ([`RETRIED`]); 0 without such a reason.
    pub fn retries(&self) -> u32 {
        self.reason
            .split(" : ")
            .filter_map(|part| part.strip_prefix(RETRIED)?.split_whitespace().next()?.parse().ok())
            .max()
            .unwrap_or(0)
    }

    /// Whether no job holds any of the node.
    pub fn is_idle(&self) -> bool {
        self.base == "IDLE" && self.alloc_cpus == 0 && self.alloc_gpus.unwrap_or(0) == 0
    }

    /// GPUs free for jobs.
    pub fn free_gpus(&self) -> u32 {
        match self.alloc_gpus {
            Some(n) => self.gpus.saturating_sub(n),
            // Slurm does not say: a node with any job counts as full.
            None if self.is_idle() => self.gpus,
            None => 0,
        }
    }
}

/// One job of `squeue` (pending or running).
#[derive(Debug, Clone, PartialEq)]
pub struct Job {
    /// Job id.
    pub id: u32,
    /// State: PENDING, CONFIGURING, RUNNING...; `None`: one this release does not know.
    pub state: Option<SlurmState>,
    /// Why it is pending.
    pub reason: String,
    /// GPUs over all its nodes.
    pub gpus: u32,
    /// Submission, Unix seconds.
    pub submit: i64,
    /// Run time so far (s).
    pub elapsed_s: f64,
    /// Time limit (s); `None`: unlimited.
    pub limit_s: Option<f64>,
    /// Slurm's priority (0: held).
    pub priority: u32,
    /// The nodes it holds (none while pending).
    pub nodes: Vec<String>,
    /// The partitions it may run in (one while running).
    pub partitions: Vec<String>,
    /// The nodes it asked for (`--nodelist`); empty: any of its partitions'.
    pub requested: Vec<String>,
    /// Its nice (subtracted from the priority Slurm computes).
    pub nice: i64,
}

impl Job {
    /// Whether it waits for resources now: pending for `Resources`, for `Priority` (behind
    /// jobs that do), or for `ReqNodeNotAvail` (Slurm's reason for a job behind another on the
    /// nodes it asked for, busy or not; the view keeps only the nodes wattson manages as
    /// usable). A job pending for anything else (held, a begin time, a dependency, a QOS or
    /// association limit, a reservation) would not start if GPUs were freed, so the policy
    /// does not count it; nor a job with no reason yet (`None`: Slurm's scheduler has not
    /// looked at it, and a QOS limit may hold it).
    pub fn is_queued(&self) -> bool {
        self.state == Some(SlurmState::Pending)
            && (matches!(self.reason.as_str(), "Resources" | "Priority")
                || self.reason.starts_with("ReqNodeNotAvail"))
    }

    /// Whether it is pending on a hold (priority 0: an administrator's, its owner's or
    /// job_submit's for the power budget).
    pub fn is_held(&self) -> bool {
        self.state == Some(SlurmState::Pending) && self.priority == 0
    }

    /// Whether it holds nodes.
    pub fn is_running(&self) -> bool {
        matches!(self.state, Some(SlurmState::Running | SlurmState::Configuring | SlurmState::Completing))
    }
}

/// Splits an `-o` record into its `Key=value` fields; words without a key continue the last
/// value (values with spaces).
fn record(line: &str) -> BTreeMap<&str, String> {
    let mut fields: BTreeMap<&str, String> = BTreeMap::new();
    let mut last = None;
    for word in line.split(' ').filter(|w| !w.is_empty()) {
        match word.split_once('=').filter(|(k, _)| {
            !k.is_empty() && k.chars().all(|c| c.is_ascii_alphanumeric() || "_:/".contains(c))
        }) {
            Some((k, v)) => {
                fields.insert(k, v.to_string());
                last = Some(k);
            }
            None => {
                if let Some(value) = last.and_then(|k| fields.get_mut(k)) {
                    value.push(' ');
                    value.push_str(word);
                }
            }
        }
    }
    fields
}

/// The `gres/gpu=N` entry of a TRES list.
fn tres_gpus(tres: &str) -> Option<u32> {
    tres.split(',').find_map(|e| e.strip_prefix("gres/gpu=")?.parse().ok())
}

/// A node's power from its state's flags.
fn power_of(flags: &[String]) -> Power {
    let has = |flag: &str| flags.iter().any(|f| f == flag);
    if has("POWERING_UP") {
        Power::PoweringUp
    } else if has("POWERED_DOWN") {
        Power::Off
    } else if has("POWERING_DOWN") || has("POWER_DOWN") {
        Power::PoweringDown
    } else {
        Power::On
    }
}

/// Parses `scontrol -d -o show node`, one node per line.
pub fn parse_nodes(text: &str) -> Result<Vec<Node>, String> {
    let mut nodes = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let f = record(line);
        let name = f.get("NodeName").ok_or_else(|| format!("no NodeName in {line:?}"))?.clone();
        let state = f.get("State").ok_or_else(|| format!("no State for node {name}"))?;
        let mut words = state.split('+').map(|w| w.trim_end_matches('*').to_string());
        let base = words.next().unwrap_or_default();
        let flags: Vec<String> = words.collect();
        let power = power_of(&flags);
        // `GresUsed` (shown with `-d`), else the TRES when Slurm counts gres/gpu there.
        let counted = f.get("CfgTRES").and_then(|t| tres_gpus(t)).is_some();
        let shard_gpus = f.get("GresUsed").map_or_else(Vec::new, |u| shard_gpus(u));
        let alloc_gpus = match f.get("GresUsed") {
            Some(used) => Some(gres_used_gpus(used)),
            None => counted.then(|| f.get("AllocTRES").and_then(|t| tres_gpus(t)).unwrap_or(0)),
        };
        let reason =
            f.get("Reason").map(|r| r.split(" [").next().unwrap_or("").to_string()).unwrap_or_default();
        nodes.push(Node {
            gpus: f.get("Gres").map_or(0, |g| gres_gpus(g)),
            gpu_type: f.get("Gres").and_then(|g| gres_type(g)),
            alloc_gpus,
            shard_gpus,
            alloc_cpus: f.get("CPUAlloc").and_then(|c| c.parse().ok()).unwrap_or(0),
            weight: f.get("Weight").and_then(|w| w.parse().ok()).unwrap_or(1),
            addr: f.get("NodeAddr").cloned().unwrap_or_else(|| name.clone()),
            partitions: f.get("Partitions").map_or_else(Vec::new, |p| list(p)),
            name,
            base,
            flags,
            power,
            reason,
        });
    }
    Ok(nodes)
}

/// The entries of a comma-separated list (`(null)` and empty: none).
fn list(text: &str) -> Vec<String> {
    match text.trim() {
        "" | "(null)" | "N/A" => Vec::new(),
        t => t.split(',').map(str::to_string).collect(),
    }
}

/// Seconds of a Slurm duration: `MM:SS`, `HH:MM:SS`, `D-HH:MM:SS`; `None` for `UNLIMITED`.
fn duration_s(text: &str) -> Option<f64> {
    let (days, rest) = match text.split_once('-') {
        Some((d, r)) => (d.parse::<f64>().ok()?, r),
        None => (0.0, text),
    };
    let parts: Vec<f64> = rest.split(':').map(|p| p.parse().ok()).collect::<Option<_>>()?;
    let s = match parts[..] {
        [m, s] => m * 60.0 + s,
        [h, m, s] => h * 3600.0 + m * 60.0 + s,
        [m] => m * 60.0,
        _ => return None,
    };
    Some(days * 86400.0 + s)
}

/// Unix seconds of a Slurm time stamp (local time, as Slurm prints it).
fn timestamp(text: &str) -> Option<i64> {
    let naive = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S").ok()?;
    Local.from_local_datetime(&naive).earliest().map(|t| t.timestamp())
}

/// Parses `squeue -h -o` [`SQUEUE_FORMAT`].
pub fn parse_jobs(text: &str) -> Result<Vec<Job>, String> {
    let mut jobs = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split('|').collect();
        let [
            id,
            state,
            reason,
            nodes,
            tres,
            submit,
            used,
            limit,
            priority,
            nodelist,
            partition,
            requested,
            nice,
        ] = f[..]
        else {
            return Err(format!("unexpected squeue line {line:?}"));
        };
        let id = id.parse().map_err(|_| format!("bad job id in {line:?}"))?;
        let nodes: u32 = nodes.parse().unwrap_or(1);
        jobs.push(Job {
            id,
            state: state.parse().ok(),
            reason: reason.to_string(),
            gpus: gpus_per_node(tres) * nodes.max(1),
            submit: timestamp(submit).unwrap_or(0),
            elapsed_s: duration_s(used).unwrap_or(0.0),
            limit_s: duration_s(limit),
            priority: priority.parse().map_err(|_| format!("bad priority in {line:?}"))?,
            nodes: match nodelist.trim() {
                "" | "(null)" => Vec::new(),
                list => hostlist::expand(list).map_err(|e| format!("job {id}: node list {list:?}: {e}"))?,
            },
            partitions: list(partition),
            nice: nice.trim().parse().map_err(|_| format!("bad nice in {line:?}"))?,
            requested: match requested.trim() {
                "" | "(null)" => Vec::new(),
                list => {
                    hostlist::expand(list).map_err(|e| format!("job {id}: requested nodes {list:?}: {e}"))?
                }
            },
        });
    }
    Ok(jobs)
}

/// Which form of `scontrol show node`, `squeue` and `sacct` the controller reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// `scontrol -d -o show node`, `squeue -o` [`SQUEUE_FORMAT`] and `sacct -P`.
    Text,
    /// `scontrol show node --json`, `squeue --json` and `sacct --json`.
    Json,
}

/// The form to read from the release `scontrol --version` names (`slurm-wlm 24.11.5`,
/// `slurm 23.02.7`): JSON from 23.02 on (read as 24.11 and 26.05 print it; the readers take
/// 23.02's plain numbers and one-word states too), text before (Debian 12's 22.05 `scontrol`
/// has no `--json`) and for a version it cannot read.
pub fn form_of(version: &str) -> Form {
    let release = version.split_whitespace().last().and_then(|v| {
        let mut parts = v.split('.');
        Some((parts.next()?.parse::<u32>().ok()?, parts.next()?.parse::<u32>().ok()?))
    });
    match release {
        Some(release) if release >= (23, 2) => Form::Json,
        _ => Form::Text,
    }
}

/// Puts `jobs` in the order Slurm's scheduler tries them: highest priority first, ties by job
/// id. squeue lists equal priorities in no set order (22.05's text) or by id (the JSON), and
/// the engine takes the list's order as Slurm's own.
pub fn in_slurms_order(jobs: &mut [Job]) {
    jobs.sort_by_key(|j| (std::cmp::Reverse(j.priority), j.id));
}

/// Slurm's commands, each with a deadline (found on `PATH`; `SLURM_CONF` from the environment).
pub struct Slurm {
    timeout: Duration,
    form: OnceLock<Form>,
}

impl Slurm {
    /// Commands that are killed after `timeout`.
    pub fn new(timeout: Duration) -> Slurm {
        Slurm { timeout, form: OnceLock::new() }
    }

    fn run(&self, program: &str, args: &[&str]) -> Result<String, CommandError> {
        deadline::run(Command::new(program).args(args), self.timeout)
    }

    /// The form this Slurm's commands are read in, from `scontrol --version` (asked once).
    pub fn form(&self) -> Result<Form, String> {
        if let Some(form) = self.form.get() {
            return Ok(*form);
        }
        let version = self.run("scontrol", &["--version"]).map_err(|e| e.to_string())?;
        let version = version.trim();
        let form = form_of(version);
        match form {
            Form::Json => {
                tracing::info!(%version, "reading Slurm's JSON (scontrol show node --json, squeue --json, sacct --json)")
            }
            Form::Text => tracing::info!(
                %version,
                "reading Slurm's text (scontrol -o, squeue -o, sacct -P): a release before 23.02, or one it cannot name"
            ),
        }
        Ok(*self.form.get_or_init(|| form))
    }

    /// Every node.
    pub fn nodes(&self) -> Result<Vec<Node>, String> {
        match self.form()? {
            Form::Json => {
                let text = self.run("scontrol", &["show", "node", "--json"]).map_err(|e| e.to_string())?;
                json::parse_nodes(&text).map_err(|e| e.to_string())
            }
            Form::Text => {
                let text = self.run("scontrol", &["-d", "-o", "show", "node"]).map_err(|e| e.to_string())?;
                parse_nodes(&text)
            }
        }
    }

    /// Pending and running jobs, in the order Slurm tries them ([`in_slurms_order`]).
    pub fn jobs(&self) -> Result<Vec<Job>, String> {
        let mut jobs = match self.form()? {
            Form::Json => {
                let text = self.run("squeue", &["--json"]).map_err(|e| e.to_string())?;
                json::parse_jobs(&text, chrono::Utc::now().timestamp()).map_err(|e| e.to_string())?
            }
            Form::Text => {
                let text = self
                    .run("squeue", &["-h", "-t", "PD,CF,R", "-o", SQUEUE_FORMAT])
                    .map_err(|e| e.to_string())?;
                parse_jobs(&text)?
            }
        };
        in_slurms_order(&mut jobs);
        Ok(jobs)
    }

    /// The cluster's slurmctld, in `SlurmctldHost` order, each up or not (`scontrol ping`).
    pub fn controllers(&self) -> Result<Vec<crate::failover::Controller>, String> {
        let text = self.run("scontrol", &["ping"]).map_err(|e| e.to_string())?;
        Ok(crate::failover::parse_ping(&text))
    }

    /// `scontrol update jobid=<id> nice=<nice>`: Slurm subtracts it from the priority it
    /// computes for the job (negative values need an operator, as SlurmUser is).
    pub fn set_nice(&self, job: u32, nice: i64) -> Result<(), String> {
        let (job, nice) = (format!("jobid={job}"), format!("nice={nice}"));
        self.run("scontrol", &["update", &job, &nice]).map(|_| ()).map_err(|e| e.to_string())
    }

    /// Every job as `scontrol -d -o show job` shows it ([`request`]).
    pub fn requests(&self) -> Result<Vec<request::Request>, String> {
        let text = self.run("scontrol", &["-d", "-o", "show", "job"]).map_err(|e| e.to_string())?;
        Ok(request::parse_requests(&text))
    }

    /// `scontrol update jobid=<id> excnodelist=<nodes>`: the pending job may not start on
    /// them (empty: on any of its nodes), names checked first.
    pub fn exclude_nodes(&self, job: u32, nodes: &[String]) -> Result<(), String> {
        for name in nodes {
            hostlist::check_name(name).map_err(|e| e.to_string())?;
        }
        let (job, list) = (format!("jobid={job}"), format!("excnodelist={}", hostlist::join(nodes)));
        self.run("scontrol", &["update", &job, &list]).map(|_| ()).map_err(|e| e.to_string())
    }

    /// `scontrol update jobid=<id> nodelist=<nodes>`: the pending job starts on them
    /// (`ReqNodeList`; none: anywhere), names checked first.
    pub fn require_nodes(&self, job: u32, nodes: &[String]) -> Result<(), String> {
        for name in nodes {
            hostlist::check_name(name).map_err(|e| e.to_string())?;
        }
        let (job, list) = (format!("jobid={job}"), format!("nodelist={}", hostlist::join(nodes)));
        self.run("scontrol", &["update", &job, &list]).map(|_| ()).map_err(|e| e.to_string())
    }

    /// Releases a job job_submit held for the controller (power budget, co-location): its AdminComment becomes
    /// `comment` (the controller's mark), then `scontrol release`.
    pub fn release_held(&self, job: u32, comment: &str) -> Result<(), String> {
        let (id, comment) = (format!("jobid={job}"), format!("admincomment={comment}"));
        self.run("scontrol", &["update", &id, &comment]).map_err(|e| e.to_string())?;
        self.run("scontrol", &["release", &job.to_string()]).map(|_| ()).map_err(|e| e.to_string())
    }

    /// `scontrol update nodename=<names> <what>`, names checked first.
    pub fn update_nodes(&self, names: &[String], what: &[&str]) -> Result<(), String> {
        for name in names {
            hostlist::check_name(name).map_err(|e| e.to_string())?;
        }
        let nodename = format!("nodename={}", hostlist::join(names));
        let mut args = vec!["update", nodename.as_str()];
        args.extend_from_slice(what);
        self.run("scontrol", &args).map(|_| ()).map_err(|e| e.to_string())
    }
}

#[cfg(test)]
mod tests;
