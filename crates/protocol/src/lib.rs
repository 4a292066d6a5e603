//! The daemon's Unix-socket protocol: one JSON request per line, one JSON reply, then close.
//!
//! Who may do what is decided by the daemon from the socket's peer credentials, never from
//! anything in the request: root and the configured SlurmUser may begin and end jobs; anyone
//! may ask for status; a user's `acct` request is narrowed to that user's own jobs unless the
//! user is root or a configured admin.

pub mod access;
pub mod bounds;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixStream;
use std::path::Path;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use wattson_engine::Measurements;
use wattson_engine::decision::Decision;
use wattson_types::energy::{GpuReading, SeriesPoint};
use wattson_types::gpu::{GpuInfo, GpuSetting, GpuSettings};
use wattson_types::job::{GpuRef, Hints, JobKey, JobRecord};
pub use wattson_types::query::AcctQuery;
use wattson_types::summary::NodeSummary;

/// Largest request the daemon reads, in bytes.
pub const MAX_REQUEST_BYTES: usize = 64 * 1024;

/// A request to the daemon.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// A job or step starts on this node's GPUs.
    JobBegin(JobBegin),
    /// A job or step ended.
    JobEnd {
        /// Which job or step.
        job: JobKey,
    },
    /// The node's GPUs, their readings and owners. (A struct variant, so that unknown fields
    /// are refused as on every other request.)
    Status {},
    /// The energy decision and GPU settings of a running job (for its environment).
    JobSettings {
        /// Which job or step.
        job: JobKey,
    },
    /// Recorded jobs matching a filter.
    Acct(AcctQuery),
    /// A recorded job's power series on this node (the running record, else the newest):
    /// root, SlurmUser and admins may ask for any job, others for their own.
    JobSeries {
        /// Which job or step.
        job: JobKey,
    },
    /// From the controller, before it powers the node down: is the node free of jobs and of
    /// GPU processes? Refused (`Conflict`) when not.
    ConfirmIdle {},
    /// From the controller, for the cluster power budget: a running job's DVFS levels on this
    /// node (root and SlurmUser only). `NotRunning` when the job has no record running here.
    JobLevels {
        /// The job.
        job: u32,
    },
    /// From the controller: how fast a running job's GPUs should run now.
    JobPace {
        /// The job (its steps run on its settings).
        job: u32,
        /// The pace.
        pace: Pace,
    },
    /// A running job's GPU energy on this node up to now (read from the GPUs for this
    /// request), for Slurm's energy accounting: root, SlurmUser and admins may ask for any
    /// job, others for their own. `NotRunning` when the job has no record running here.
    JobEnergy {
        /// The job.
        job: u32,
        /// One of its steps (`0`, `batch`); empty for the whole job.
        #[serde(default, skip_serializing_if = "String::is_empty")]
        step: String,
    },
    /// From the controller: every workload's DVFS measurements stored on this node (root and
    /// SlurmUser only).
    Models {},
    /// From the controller: its merge of every node's measurements; each is taken where it is
    /// newer than this node's copy, and the node's model table is rewritten (root and
    /// SlurmUser only).
    MergeModels {
        /// The workloads, newest copies.
        models: Vec<Measurements>,
    },
    /// From the controller, after a job: this node's records of the job and its steps and its
    /// GPUs' power in at most about `bins` bins, for the job's summary in Slurm's accounting
    /// (root and SlurmUser only).
    JobSummary {
        /// The job.
        job: u32,
        /// Bins of each GPU's power trace (1 to [`MAX_SUMMARY_BINS`]).
        bins: u32,
    },
}

/// Most bins a [`Request::JobSummary`] may ask for per GPU.
pub const MAX_SUMMARY_BINS: u32 = 2000;

/// How fast the controller wants a running job to run, from the cluster's queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pace {
    /// No queue: the least-energy setting the node chose within the job's slowdown bound
    /// (every job starts so).
    #[default]
    Saving,
    /// Jobs are waiting: the GPUs at their defaults (full speed) until the queue clears.
    Full,
    /// The cluster power budget binds: the GPUs at this level of the job's table
    /// ([`Reply::JobLevels`]); the top level and above are the defaults.
    Level(u16),
}

/// What the daemon needs to know when a job starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobBegin {
    /// Which job or step.
    pub job: JobKey,
    /// The job owner's uid.
    pub uid: u32,
    /// The owner's user name, if known.
    #[serde(default)]
    pub user: Option<String>,
    /// The job name, if known.
    #[serde(default)]
    pub name: Option<String>,
    /// The job's Slurm account, if known (models may be shared within it).
    #[serde(default)]
    pub account: Option<String>,
    /// The GPUs the job owns on this node.
    pub gpus: Vec<GpuRef>,
    /// The user's energy hints.
    #[serde(default)]
    pub hints: Hints,
    /// Whether Slurm lets other jobs hold these GPUs at once (`gres/shard`, MPS); `false`
    /// (whole GPUs) when the sender does not say.
    #[serde(default)]
    pub shares_gpus: bool,
}

/// One GPU in a status reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuStatus {
    /// Identity and capabilities.
    pub info: GpuInfo,
    /// Latest reading, if the GPU answered.
    pub reading: Option<GpuReading>,
    /// Current settings, if the GPU answered.
    pub settings: Option<GpuSettings>,
    /// Why the GPU did not answer.
    pub error: Option<String>,
    /// Compute processes on the GPU (pids).
    #[serde(default)]
    pub processes: Vec<u32>,
    /// Jobs and steps using the GPU now.
    pub jobs: Vec<JobKey>,
}

/// A successful reply.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "reply", rename_all = "snake_case")]
pub enum Reply {
    /// The job is recorded (or was already, for a repeated identical request).
    Begun {
        /// Which job or step.
        job: JobKey,
        /// True when this was a repeat of a begin already recorded.
        already_running: bool,
        /// The energy policy the job gets.
        decision: Decision,
        /// The settings applied to its GPUs (none: the GPUs run at their defaults).
        settings: Vec<(u32, GpuSetting)>,
    },
    /// A running job's decision and settings.
    Settings {
        /// Which job or step.
        job: JobKey,
        /// The job owner.
        uid: u32,
        /// The energy policy the job gets.
        decision: Decision,
        /// The settings applied to its GPUs.
        settings: Vec<(u32, GpuSetting)>,
    },
    /// The job's final record.
    Ended {
        /// The record as stored.
        record: JobRecord,
    },
    /// The node's GPUs.
    Status {
        /// Node name.
        node: String,
        /// Every GPU by index.
        gpus: Vec<GpuStatus>,
    },
    /// Matching records.
    Acct {
        /// Records the caller may see.
        records: Vec<JobRecord>,
    },
    /// A job's series, in time then GPU order.
    Series {
        /// Which job or step.
        job: JobKey,
        /// Its owner.
        uid: u32,
        /// The points kept (one per `series_interval` per GPU).
        points: Vec<SeriesPoint>,
    },
    /// No job and no GPU process on the node: it may be powered down.
    Idle {
        /// Node name.
        node: String,
    },
    /// The job now runs at `pace`; `settings` are those applied to its GPUs (none: defaults).
    Paced {
        /// The job.
        job: u32,
        /// Its pace.
        pace: Pace,
        /// Its GPUs' settings now.
        settings: Vec<(u32, GpuSetting)>,
    },
    /// A running job's DVFS levels on this node, for the cluster power budget.
    JobLevels {
        /// The job.
        job: u32,
        /// Its level table (the engine's, over its GPU type's settings, the top level last:
        /// the defaults); one level when the job runs at its defaults and has no model.
        levels: Vec<wattson_engine::cluster::Level>,
        /// The level its GPUs run at now (index into `levels`).
        level: u16,
        /// Its slowdown bound (fraction; 0 when it may not be slowed).
        bound: f64,
    },
    /// A running job's GPU energy on this node since it began, and its GPUs' power now.
    JobEnergy {
        /// The job.
        job: u32,
        /// Energy of its GPUs here since the job began, in mJ (counter-exact where the GPUs
        /// have a counter).
        energy_mj: u64,
        /// Their power at this reading, in mW.
        power_mw: u64,
    },
    /// The workloads' measurements stored on this node.
    Models {
        /// Node name.
        node: String,
        /// Every stored workload (dropped ones as marks with no samples).
        models: Vec<Measurements>,
    },
    /// How many of a merge's workloads the node took (the others it had as new or newer).
    ModelsMerged {
        /// Node name.
        node: String,
        /// Workloads taken.
        taken: usize,
    },
    /// What this node knows of a job (no records: the job had no GPUs metered here).
    JobSummary {
        /// The node's part of the job's summary.
        summary: NodeSummary,
    },
}

/// What kind of refusal an [`Error`] is; callers branch on this, never on the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// The request is malformed or names something invalid (bad hints, no GPUs, unknown GPU).
    BadRequest,
    /// The caller may not do this.
    PermissionDenied,
    /// The job or step is not running on this node.
    NotRunning,
    /// The job is already running with other GPUs or another owner.
    Conflict,
    /// The daemon is too busy to take the request now; retry later.
    Busy,
    /// The store could not record or read what was asked.
    Store,
    /// Anything else inside the daemon.
    Internal,
}

/// A refusal from the daemon: a code to branch on and a one-line message for a person.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct Error {
    /// What kind of refusal.
    pub code: ErrorCode,
    /// What was wrong and, where it helps, what is allowed.
    pub message: String,
}

impl Error {
    /// An error of kind `code`.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Error {
        Error { code, message: message.into() }
    }
}

/// The daemon's answer: a reply or a typed error.
pub type Response = Result<Reply, Error>;

/// Why a call to the daemon failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No daemon listens on the socket (not running, or no permission to connect).
    #[error("wattsond is not reachable at {path}: {source}")]
    Unavailable {
        /// Socket path.
        path: String,
        /// What connect said.
        source: std::io::Error,
    },
    /// The daemon did not answer in time.
    #[error("wattsond did not answer within {0:?}")]
    Timeout(Duration),
    /// The daemon refused the request.
    #[error("{0}")]
    Refused(Error),
    /// The request is longer than the daemon reads ([`MAX_REQUEST_BYTES`]); nothing was sent.
    #[error(
        "the request is {0} bytes, more than the {MAX_REQUEST_BYTES} wattsond reads; ask for fewer jobs at once"
    )]
    TooLong(usize),
    /// Anything else on the wire.
    #[error("talking to wattsond: {0}")]
    Io(String),
}

/// Sends `request` to the daemon at `socket` and waits at most `timeout` for each read/write.
pub fn call(socket: &Path, request: &Request, timeout: Duration) -> Result<Reply, ClientError> {
    let mut line = serde_json::to_vec(request).map_err(|e| ClientError::Io(e.to_string()))?;
    line.push(b'\n');
    if line.len() > MAX_REQUEST_BYTES {
        return Err(ClientError::TooLong(line.len()));
    }
    let mut stream = UnixStream::connect(socket)
        .map_err(|source| ClientError::Unavailable { path: socket.display().to_string(), source })?;
    let io = |e: std::io::Error| match e.kind() {
        std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => ClientError::Timeout(timeout),
        _ => ClientError::Io(e.to_string()),
    };
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    // A daemon refusing the connection answers at once and closes: the request then meets a
    // closed socket, and the refusal waits to be read.
    let written = stream.write_all(&line);
    let mut text = String::new();
    let read = BufReader::new(stream).read_line(&mut text);
    if text.is_empty() {
        written.map_err(io)?;
        read.map_err(io)?;
        return Err(ClientError::Io("wattsond closed the connection without answering".into()));
    }
    let response: Response =
        serde_json::from_str(&text).map_err(|e| ClientError::Io(format!("bad reply: {e}")))?;
    response.map_err(ClientError::Refused)
}

/// The settings a job got, as one clause for a message: `, GPU 0 power limit 420 W, ...` or
/// `, GPUs at their defaults`.
pub fn describe_settings(settings: &[(u32, GpuSetting)]) -> String {
    if settings.is_empty() {
        return ", GPUs at their defaults".to_string();
    }
    let each: Vec<String> = settings
        .iter()
        .map(|(gpu, s)| match s {
            GpuSetting::PowerLimit { mw } => format!("GPU {gpu} power limit {} W", mw / 1000),
            GpuSetting::LockedClock { mhz } => format!("GPU {gpu} SM clock {mhz} MHz"),
        })
        .collect();
    format!(", {}", each.join(", "))
}

/// Parses one request line; the error says what was wrong.
pub fn parse_request(line: &str) -> Result<Request, String> {
    if line.len() > MAX_REQUEST_BYTES {
        return Err(format!("request longer than {MAX_REQUEST_BYTES} bytes"));
    }
    if !line.ends_with('\n') {
        return Err("request must be one JSON object ending with a newline".into());
    }
    serde_json::from_str(line).map_err(|e| format!("bad request: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_oversized_request_is_refused_before_it_is_sent() {
        let jobs = (0..10_000).map(JobKey::job).collect();
        let request = Request::Acct(AcctQuery { jobs, ..AcctQuery::default() });
        let err =
            call(Path::new("/nonexistent/wattsond.sock"), &request, Duration::from_secs(1)).unwrap_err();
        assert!(matches!(err, ClientError::TooLong(n) if n > MAX_REQUEST_BYTES), "{err}");
        assert!(err.to_string().contains("ask for fewer jobs"), "{err}");
    }

    /// The daemon refuses a connection by answering at once and closing, unread: whether the
    /// request then lands in the socket's buffer or meets a closed socket (EPIPE, which the
    /// CLI used to print as "Broken pipe"), the caller gets the refusal. Repeated, since which
    /// of the two happens depends on timing.
    #[test]
    fn a_refusal_sent_before_the_request_is_read_is_what_the_caller_sees() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.sock");
        let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
        let rounds = 200;
        let server = std::thread::spawn(move || {
            for _ in 0..rounds {
                let (mut stream, _) = listener.accept().unwrap();
                let refusal: Response = Err(Error::new(ErrorCode::Busy, "wattsond refused the connection"));
                let mut line = serde_json::to_vec(&refusal).unwrap();
                line.push(b'\n');
                stream.write_all(&line).unwrap();
            }
        });
        let jobs = (0..2000).map(JobKey::job).collect();
        let request = Request::Acct(AcctQuery { jobs, ..AcctQuery::default() });
        for _ in 0..rounds {
            let err = call(&path, &request, Duration::from_secs(2)).unwrap_err();
            assert!(matches!(&err, ClientError::Refused(e) if e.code == ErrorCode::Busy), "{err}");
        }
        server.join().unwrap();
    }

    #[test]
    fn unknown_fields_are_refused_on_every_request() {
        for line in [
            r#"{"op":"status","x":1}"#,
            r#"{"op":"job_end","job":{"job_id":1,"step":""},"x":1}"#,
            r#"{"op":"job_settings","job":{"job_id":1,"step":""},"x":1}"#,
            r#"{"op":"acct","jobs":[],"x":1}"#,
            r#"{"op":"job_begin","job":{"job_id":1,"step":""},"uid":0,"gpus":[0],"hints":{},"x":1}"#,
        ] {
            let err = parse_request(&format!("{line}\n")).unwrap_err();
            assert!(err.contains("unknown field"), "{line}: {err}");
        }
    }

    #[test]
    fn requests_round_trip_on_the_wire() {
        let line = r#"{"op":"job_begin","job":{"job_id":42,"step":"0"},"uid":1000,"gpus":[0,"GPU-x"],"hints":{"policy":"perf"}}"#;
        let req = parse_request(&format!("{line}\n")).unwrap();
        let Request::JobBegin(b) = &req else { panic!("{req:?}") };
        assert_eq!(b.job.to_string(), "42.0");
        assert_eq!(b.gpus, vec![GpuRef::Index(0), GpuRef::Id("GPU-x".into())]);
        assert_eq!(b.hints.policy, Some(wattson_types::job::EnergyPolicy::Perf));
        assert!(!b.shares_gpus, "an older sender's begin holds whole GPUs");
        let shared = line.replace(r#""uid":1000"#, r#""uid":1000,"shares_gpus":true"#);
        let Request::JobBegin(s) = parse_request(&format!("{shared}\n")).unwrap() else { panic!() };
        assert!(s.shares_gpus);
        assert_eq!(parse_request(&(serde_json::to_string(&req).unwrap() + "\n")).unwrap(), req);
        assert_eq!(parse_request("{\"op\":\"status\"}\n").unwrap(), Request::Status {});
    }

    #[test]
    fn bad_requests_are_refused_with_a_reason() {
        assert!(parse_request("{\"op\":\"status\"}").unwrap_err().contains("newline"));
        assert!(parse_request("{\"op\":\"reboot\"}\n").unwrap_err().contains("unknown variant"));
        assert!(parse_request("{\"op\":\"job_end\"}\n").unwrap_err().contains("missing field"));
        assert!(parse_request("not json\n").unwrap_err().starts_with("bad request"));
        let huge = format!("{{\"op\":\"status\",\"x\":\"{}\"}}\n", "a".repeat(MAX_REQUEST_BYTES));
        assert!(parse_request(&huge).unwrap_err().contains("longer than"));
        let e = parse_request("{\"op\":\"job_end\",\"job\":{\"job_id\":1},\"uid\":0}\n").unwrap_err();
        assert!(e.contains("unknown field"), "{e}");
    }
}
