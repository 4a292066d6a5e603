//! `wattson job begin|end`: what a Slurm Prolog/Epilog calls when no wattson plugin is loaded.

use clap::{Args, Subcommand};

use wattson_config::Config;
use wattson_protocol::{JobBegin, Reply, Request, describe_settings};
use wattson_types::job::{EnergyPolicy, GpuRef, Hints, JobKey};

/// `wattson job` subcommands.
#[derive(Debug, Subcommand)]
pub enum JobCommand {
    /// Record that a job began on this node's GPUs (run as root or SlurmUser).
    Begin(BeginArgs),
    /// Record that a job ended and print its GPU energy (run as root or SlurmUser).
    End(EndArgs),
}

/// `wattson job begin` options; most default to the variables Slurm sets in a Prolog.
#[derive(Debug, Args)]
pub struct BeginArgs {
    /// Job id, optionally with step (42, 42.0)
    #[arg(long, env = "SLURM_JOB_ID", value_parser = JobKey::parse)]
    job: JobKey,
    /// Owner's uid
    #[arg(long, env = "SLURM_JOB_UID")]
    uid: u32,
    /// Owner's user name
    #[arg(long, env = "SLURM_JOB_USER")]
    user: Option<String>,
    /// Job name
    #[arg(long, env = "SLURM_JOB_NAME")]
    name: Option<String>,
    /// The job's Slurm account (models are shared within it with `[engine] model_owner = "account"`)
    #[arg(long, env = "SLURM_JOB_ACCOUNT")]
    account: Option<String>,
    /// The job's GPUs on this node: indices or UUIDs, comma-separated
    /// [default: $SLURM_JOB_GPUS, else $CUDA_VISIBLE_DEVICES; $CUDA_VISIBLE_DEVICES first where
    /// it names MIG instances (MIG-...)]
    #[arg(long)]
    gpus: Option<String>,
    /// Energy policy: min-energy, balanced or perf
    #[arg(long)]
    energy: Option<EnergyPolicy>,
    /// Largest tolerated slowdown against full speed, in percent
    #[arg(long)]
    energy_slowdown: Option<f64>,
    /// Workload signature that lets models learn across runs
    #[arg(long)]
    energy_tag: Option<String>,
    /// The GPU clocks the job asked Slurm for (its --gpu-freq): wattson stands aside
    #[arg(long)]
    gpu_freq: Option<String>,
    /// The job lets wattson put it on a GPU another opted-in job uses: yes or no
    #[arg(long, value_parser = wattson_types::job::parse_share)]
    energy_share: Option<bool>,
    /// Other jobs may hold these GPUs at once (gres/shard, MPS): the GPUs' energy is divided
    /// among them. Without it, a job already recorded on these GPUs is closed (its end was lost)
    /// [default: set when $SLURM_SHARDS_ON_NODE or $CUDA_MPS_ACTIVE_THREAD_PERCENTAGE is]
    #[arg(long)]
    shares_gpus: bool,
}

/// `wattson job end` options.
#[derive(Debug, Args)]
pub struct EndArgs {
    /// Job id, optionally with step
    #[arg(long, env = "SLURM_JOB_ID", value_parser = JobKey::parse)]
    job: JobKey,
}

/// Runs a `wattson job` subcommand.
pub fn run(config: &Config, cmd: JobCommand) -> Result<(), String> {
    let request = match cmd {
        JobCommand::Begin(args) => {
            let gpus = args
                .gpus
                .or_else(|| {
                    let var = |name: &str| std::env::var(name).ok();
                    wattson_types::job::gpus_from_env(var("SLURM_JOB_GPUS"), var("CUDA_VISIBLE_DEVICES"))
                })
                .unwrap_or_default();
            let gpus: Vec<GpuRef> =
                gpus.split(',').filter(|s| !s.trim().is_empty()).map(GpuRef::parse).collect();
            // A job without GPUs has a record where the scope counts the node's CPUs or the
            // whole node.
            if gpus.is_empty() && config.energy.scope == wattson_config::energy::EnergyScope::Gpu {
                println!("job {} has no GPUs on this node: nothing to account (scope \"gpu\")", args.job);
                return Ok(());
            }
            let hints = Hints {
                policy: args.energy,
                slowdown_pct: args.energy_slowdown,
                tag: args.energy_tag,
                gpu_freq: args.gpu_freq,
                share: args.energy_share,
            };
            hints.validate()?;
            Request::JobBegin(JobBegin {
                job: args.job,
                uid: args.uid,
                user: args.user,
                name: args.name,
                account: args.account,
                gpus,
                hints,
                shares_gpus: args.shares_gpus
                    || wattson_types::apportion::shares_gpus(|name| std::env::var(name).ok()),
            })
        }
        JobCommand::End(args) => Request::JobEnd { job: args.job },
    };
    match wattson_protocol::call(&config.daemon.socket, &request, config.daemon.request_timeout)
        .map_err(|e| e.to_string())?
    {
        Reply::Begun { job, already_running, decision, settings } => {
            let how = if already_running { "was already recorded as running" } else { "began" };
            println!("job {job} {how}: policy {}{}", decision.policy, describe_settings(&settings));
            if let Some(note) = decision.note {
                println!("note: {note}");
            }
        }
        Reply::Ended { record } => println!(
            "job {} ended: {:.0} J on {} GPU(s), method {}",
            record.key,
            record.energy_j(),
            record.gpus.len(),
            record.method().map(|m| m.as_str()).unwrap_or("none")
        ),
        other => return Err(format!("unexpected reply from wattsond: {other:?}")),
    }
    Ok(())
}
