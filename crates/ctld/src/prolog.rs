//! `wattson-ctld-prolog`, Slurm's `PrologSlurmctld`: holds a job in CONFIGURING until the
//! nodes Slurm woke for it are up, then lets it start at once. Without it Slurm starts a batch
//! job on a just-woken node only at its next periodic pass, up to 30 s later. It always exits
//! 0 (a failing `PrologSlurmctld` would requeue the job): past its deadline, or when Slurm
//! cannot be asked, the job goes on as Slurm would run it anyway.

use std::process::{Command, ExitCode};
use std::time::{Duration, Instant};

use wattson_config::Config;

use wattson_deadline as deadline;
use wattson_sacct::hostlist;

use crate::{slurm, slurm_program};

/// How often the nodes are looked at.
const POLL: Duration = Duration::from_millis(250);

/// Node flags that mean "not up yet".
const NOT_UP: [&str; 3] = ["POWERING_UP", "POWERED_DOWN", "NOT_RESPONDING"];

/// Waits for the job's nodes (`SLURM_JOB_NODELIST`) to be up, at most twice `[ctld.node] boot_s`.
pub fn main() -> ExitCode {
    slurm_program::reset_process();
    let config = Config::load(&slurm_program::config_path()).unwrap_or_default();
    let Some(nodes) = std::env::var("SLURM_JOB_NODELIST").ok().and_then(|l| hostlist::expand(&l).ok()) else {
        return ExitCode::SUCCESS;
    };
    let deadline = Instant::now() + std::time::Duration::from_secs_f64(config.ctld.node.boot_s * 2.0);
    let ask = || {
        let mut scontrol = Command::new("scontrol");
        scontrol.args(["-o", "show", "node", &hostlist::join(&nodes)]);
        deadline::run(&mut scontrol, config.ctld.command_timeout)
            .ok()
            .and_then(|t| slurm::parse_nodes(&t).ok())
    };
    while Instant::now() < deadline {
        match ask() {
            Some(seen) if seen.iter().all(|n| !n.flags.iter().any(|f| NOT_UP.contains(&f.as_str()))) => break,
            Some(_) => std::thread::sleep(POLL),
            None => break,
        }
    }
    ExitCode::SUCCESS
}
