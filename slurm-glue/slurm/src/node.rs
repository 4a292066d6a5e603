//! What the SPANK plugin does on a compute node, apart from the FFI: tell wattsond that a job
//! began or ended, and fetch the decision for the job's environment. Every call is bounded by
//! the configured timeout; every failure is a log line, never a failed job.

use std::path::PathBuf;
use std::time::Duration;

use wattson_config::Config;
use wattson_protocol::{ClientError, ErrorCode, JobBegin, Reply, Request};
use wattson_types::gpu::GpuSetting;
use wattson_types::job::{GpuRef, Hints, JobKey};

/// The plugin's arguments in `plugstack.conf`: `config=PATH`, `timeout=DURATION`, and, only
/// with the `test-hooks` feature, `test_panic=CALLBACK` (makes that callback panic, to prove
/// Slurm survives it).
#[derive(Debug, Clone, PartialEq)]
pub struct PluginArgs {
    /// wattson's configuration file (for the daemon's socket and timeout).
    pub config: PathBuf,
    /// Overrides the configured request timeout.
    pub timeout: Option<Duration>,
    /// Test only: the callback that panics on purpose.
    #[cfg(feature = "test-hooks")]
    pub test_panic: Option<String>,
}

impl Default for PluginArgs {
    fn default() -> Self {
        PluginArgs::new(PathBuf::from(wattson_config::DEFAULT_PATH), None)
    }
}

impl PluginArgs {
    /// The arguments `config=PATH` and, if given, `timeout=DURATION`.
    pub fn new(config: PathBuf, timeout: Option<Duration>) -> PluginArgs {
        PluginArgs {
            config,
            timeout,
            #[cfg(feature = "test-hooks")]
            test_panic: None,
        }
    }

    /// Parses `key=value` arguments; the error names the bad one.
    pub fn parse<'a>(args: impl IntoIterator<Item = &'a str>) -> Result<PluginArgs, String> {
        let mut out = PluginArgs::default();
        for arg in args {
            match arg.split_once('=') {
                Some(("config", path)) => out.config = PathBuf::from(path),
                #[cfg(feature = "test-hooks")]
                Some(("test_panic", point)) => out.test_panic = Some(point.to_string()),
                Some(("timeout", t)) => {
                    out.timeout = Some(
                        humantime::parse_duration(t).map_err(|e| format!("plugin argument {arg}: {e}"))?,
                    )
                }
                _ => {
                    return Err(format!(
                        "unknown plugin argument {arg:?}: allowed config=PATH, timeout=DURATION"
                    ));
                }
            }
        }
        Ok(out)
    }

    /// wattson's configuration, from `config` where it exists, else the defaults.
    pub fn load(&self) -> Result<Config, String> {
        Config::load_or_default(Some(&self.config).filter(|p| p.exists()).map(|p| p.as_path()))
            .map_err(|e| e.to_string())
    }

    pub(crate) fn call_with(&self, config: &Config, request: &Request) -> Result<Reply, ClientError> {
        let timeout = self.timeout.unwrap_or(config.daemon.request_timeout);
        wattson_protocol::call(&config.daemon.socket, request, timeout)
    }

    pub(crate) fn call(&self, request: &Request) -> Result<Reply, String> {
        self.call_with(&self.load()?, request).map_err(|e| e.to_string())
    }
}

pub use wattson_types::job::gpus_from_env;

/// What the node knows about a job when its prolog runs.
#[derive(Debug, Clone, Default)]
pub struct NodeJob {
    /// Slurm job id.
    pub job_id: u32,
    /// Owner's uid.
    pub uid: u32,
    /// Owner's name (`SLURM_JOB_USER`).
    pub user: Option<String>,
    /// Job name (`SLURM_JOB_NAME`).
    pub name: Option<String>,
    /// Slurm account (`SLURM_JOB_ACCOUNT`).
    pub account: Option<String>,
    /// The job's GPUs on this node (`SLURM_JOB_GPUS`, else `CUDA_VISIBLE_DEVICES`; the latter
    /// first where it names MIG instances: [`gpus_from_env`]).
    pub gpus: String,
    /// The user's hints.
    pub hints: Hints,
    /// Whether Slurm lets other jobs hold its GPUs at once
    /// ([`crate::sharing::from_prolog_env`]).
    pub shares_gpus: bool,
}

/// Whether wattsond keeps a record of jobs without GPUs on this node: where its energy scope
/// counts the node's CPUs (`gpu+cpu`, `cpu`) or the whole node (`node`).
pub fn records_cpu_only_jobs(config: &Config) -> bool {
    config.energy.scope != wattson_config::energy::EnergyScope::Gpu
}

/// Registers a job with wattsond; returns the log line. A job without GPUs is skipped where
/// the energy scope is the GPUs' alone ([`records_cpu_only_jobs`]).
pub fn begin(args: &PluginArgs, job: NodeJob) -> Result<String, String> {
    let gpus: Vec<GpuRef> = job.gpus.split(',').filter(|s| !s.trim().is_empty()).map(GpuRef::parse).collect();
    let config = args.load()?;
    if gpus.is_empty() && !records_cpu_only_jobs(&config) {
        return Ok(format!("wattson: job {} has no GPUs on this node", job.job_id));
    }
    let request = Request::JobBegin(JobBegin {
        job: JobKey::job(job.job_id),
        uid: job.uid,
        user: job.user,
        name: job.name,
        account: job.account,
        gpus,
        hints: job.hints,
        shares_gpus: job.shares_gpus,
    });
    match args.call_with(&config, &request).map_err(|e| e.to_string())? {
        Reply::Begun { job, decision, settings, .. } => Ok(format!(
            "wattson: job {job} began: policy {}{}{}",
            decision.policy,
            wattson_protocol::describe_settings(&settings),
            decision.note.map(|n| format!(" ({n})")).unwrap_or_default()
        )),
        other => Err(format!("unexpected reply {other:?}")),
    }
}

/// Closes a job's record; returns the log line.
pub fn end(args: &PluginArgs, job_id: u32) -> Result<String, String> {
    match args.call(&Request::JobEnd { job: JobKey::job(job_id) })? {
        Reply::Ended { record } => Ok(format!(
            "wattson: job {} ended: {:.0} J GPU energy ({})",
            record.key,
            record.energy_j(),
            record.method().map(|m| m.as_str()).unwrap_or("no GPU")
        )),
        other => Err(format!("unexpected reply {other:?}")),
    }
}

/// The variables that tell a job what it got: `WATTSON_POLICY`; `WATTSON_GPU_POWER_LIMIT_W`
/// or `WATTSON_GPU_CLOCK_MHZ` when its GPUs were set (at that moment: the models may probe
/// other limits later); and `WATTSON_PROGRESS_FILE` when the models choose its setting.
/// `None` when wattsond does not know the job (it has no GPUs on this node).
pub fn job_env(args: &PluginArgs, job_id: u32) -> Result<Option<Vec<(&'static str, String)>>, String> {
    let config = args.load()?;
    let reply = match args.call_with(&config, &Request::JobSettings { job: JobKey::job(job_id) }) {
        Ok(reply) => reply,
        Err(ClientError::Refused(e)) if e.code == ErrorCode::NotRunning => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    match reply {
        Reply::Settings { decision, settings, .. } => {
            let mut env = vec![("WATTSON_POLICY", decision.policy.to_string())];
            if decision.by_model() {
                let path = config.engine.progress_dir.join(job_id.to_string());
                env.push(("WATTSON_PROGRESS_FILE", path.display().to_string()));
            }
            match settings.first().map(|(_, s)| *s) {
                Some(GpuSetting::PowerLimit { mw }) => {
                    env.push(("WATTSON_GPU_POWER_LIMIT_W", (mw / 1000).to_string()))
                }
                Some(GpuSetting::LockedClock { mhz }) => env.push(("WATTSON_GPU_CLOCK_MHZ", mhz.to_string())),
                None => {}
            }
            Ok(Some(env))
        }
        other => Err(format!("unexpected reply {other:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plugin_arguments_parse() {
        let a = PluginArgs::parse(["config=/etc/w.toml", "timeout=2s"]).unwrap();
        assert_eq!(a.config, PathBuf::from("/etc/w.toml"));
        assert_eq!(a.timeout, Some(Duration::from_secs(2)));
        assert_eq!(PluginArgs::parse([]).unwrap(), PluginArgs::default());
        assert!(
            PluginArgs::parse(["sokcet=/x"]).unwrap_err().contains("allowed config=PATH, timeout=DURATION")
        );
        assert!(PluginArgs::parse(["timeout=soon"]).is_err());
    }

    #[test]
    fn the_test_panic_hook_exists_only_with_the_test_hooks_feature() {
        let parsed = PluginArgs::parse(["test_panic=job_prolog"]);
        #[cfg(not(feature = "test-hooks"))]
        assert!(
            parsed.unwrap_err().starts_with("unknown plugin argument \"test_panic=job_prolog\""),
            "a default build must refuse the test-only argument"
        );
        #[cfg(feature = "test-hooks")]
        assert_eq!(parsed.unwrap().test_panic.as_deref(), Some("job_prolog"));
    }

    #[test]
    fn an_unreachable_daemon_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("w.toml");
        std::fs::write(&config, format!("[daemon]\nsocket = {:?}\n", dir.path().join("none.sock"))).unwrap();
        let args = PluginArgs::new(config.clone(), Some(Duration::from_millis(200)));
        let job = NodeJob { job_id: 1, gpus: "0".into(), ..NodeJob::default() };
        assert!(begin(&args, job).unwrap_err().contains("not reachable"));
        let no_gpus = NodeJob { job_id: 2, ..NodeJob::default() };
        assert!(begin(&args, no_gpus.clone()).unwrap().contains("no GPUs"));
        // Where the scope counts the node's CPUs, a job without GPUs is registered too.
        for scope in ["cpu", "gpu+cpu", "node"] {
            std::fs::write(
                &config,
                format!(
                    "[daemon]\nsocket = {:?}\n[energy]\nscope = \"{scope}\"\n",
                    dir.path().join("none.sock")
                ),
            )
            .unwrap();
            let said = begin(&args, no_gpus.clone()).unwrap_err();
            assert!(said.contains("not reachable"), "{scope}: {said}");
        }
    }
}
