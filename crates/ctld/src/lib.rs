//! `wattson ctld`: the engine's cluster policy acting on a real Slurm, through Slurm's own
//! machinery. Each loop reads Slurm's state with its public commands, asks the engine
//! ([`wattson_engine::cluster::decide`]) what to do, and asks Slurm to do it: idle nodes beyond
//! the warm set `power_down_asap` (a node that gets a job meanwhile is drained, never killed),
//! nodes the forecast needs `power_up`. Slurm's idle timer stays off; Slurm still wakes sleeping
//! nodes for the jobs it places on them, with or without this service.
//!
//! Also the power programs Slurm runs (`SuspendProgram`, `ResumeProgram`,
//! `ResumeFailProgram`): [`power`].

pub mod command;
pub mod hostlist;
pub mod power;
pub mod program;
pub mod prolog;
pub mod retry;
pub mod slurm;
pub mod view;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::{error, info, warn};

use wattson_config::Config;
use wattson_engine::cluster::{self, Policy, PolicyKind, Snapshot, Tuning};

use crate::retry::{Retries, Verdict};
use crate::slurm::{Node, Power, Slurm};
use crate::view::Memory;

/// The controller: its configuration, Slurm, and what it remembers between loops.
pub struct Ctld {
    config: Config,
    slurm: Slurm,
    memory: Memory,
    retries: Retries,
}

/// What one loop asked of Slurm.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Done {
    /// Nodes asked to power down.
    pub powered_down: Vec<String>,
    /// Nodes asked to power up.
    pub powered_up: Vec<String>,
    /// Nodes whose resume failed, powered up again.
    pub retried: Vec<String>,
    /// Nodes whose resume failed too often, left down for an administrator.
    pub gave_up: Vec<String>,
}

impl Ctld {
    /// A controller for `config`.
    pub fn new(config: Config) -> Ctld {
        let slurm = Slurm::new(config.ctld.command_timeout);
        let retries = Retries::new(config.ctld.resume_retries, config.ctld.resume_retry_pause.as_secs_f64());
        Ctld { config, slurm, memory: Memory::default(), retries }
    }

    /// One loop: read Slurm, decide, act.
    pub fn step(&mut self) -> Result<Done, String> {
        let nodes = self.slurm.nodes()?;
        let jobs = self.slurm.jobs()?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        let c = &self.config.ctld;
        let window_s = c.forecast_window.as_secs_f64();
        let view = self.memory.view(now, window_s, c.gpu_idle_w, &nodes, &jobs);
        let snapshot = Snapshot {
            now,
            utc_offset_s: 0,
            nodes: &view.nodes,
            gpu_types: &view.gpu_types,
            models: &view.models,
            queued: &view.queued,
            held: &[],
            running: &view.running,
            arrivals: &view.arrivals,
            tariff: &self.config.prices,
            budget_w: None,
            node: view::node_costs(c),
        };
        let policy = Policy {
            kind: PolicyKind::Wattson,
            tuning: Tuning { forecast_window_s: window_s, ..Tuning::default() },
        };
        let warm = cluster::power::warm_target(&policy, &snapshot);
        let actions = cluster::decide(&policy, &snapshot);
        // The engine only picks idle powered nodes to power down and sleeping ones to boot;
        // nodes an administrator holds were shown to it as busy.
        let names = |indices: &[u32]| -> Vec<String> {
            indices
                .iter()
                .filter(|&&i| view.managed[i as usize])
                .map(|&i| nodes[i as usize].name.clone())
                .collect()
        };
        let mut done = Done {
            powered_down: names(&actions.power_down),
            powered_up: names(&actions.power_up),
            ..Done::default()
        };
        self.failed_resumes(&nodes, now, &mut done);
        let idle = view.nodes.iter().filter(|n| n.idle_since.is_finite()).count();
        if !done.powered_down.is_empty() {
            info!(nodes = ?done.powered_down, warm_target = warm, idle, queued = view.queued.len(),
                "power_down_asap: idle beyond the warm set the arrival forecast needs");
            self.slurm.update_nodes(&done.powered_down, &["state=power_down_asap"])?;
        }
        if !done.powered_up.is_empty() {
            info!(nodes = ?done.powered_up, warm_target = warm, idle, queued = view.queued.len(),
                "power_up: the arrival forecast needs more warm nodes");
            self.slurm.update_nodes(&done.powered_up, &["state=power_up"])?;
        }
        Ok(done)
    }

    /// Powers up again the nodes whose resume failed, or gives up on them, as [`Retries`] says.
    fn failed_resumes(&mut self, nodes: &[Node], now: f64, done: &mut Done) {
        for node in nodes {
            if !node.resume_failed() {
                if node.power == Power::On && node.base != "DOWN" {
                    self.retries.recovered(&node.name);
                }
                continue;
            }
            let name = std::slice::from_ref(&node.name);
            match self.retries.failed(&node.name, now) {
                Verdict::Wait => {}
                Verdict::Retry(n) => {
                    warn!(node = %node.name, reason = %node.reason, try_ = n, "resume failed: powering it up again");
                    match self.slurm.update_nodes(name, &["state=power_up"]) {
                        Ok(()) => done.retried.push(node.name.clone()),
                        Err(e) => warn!(node = %node.name, error = %e, "cannot power the node up again"),
                    }
                }
                Verdict::GiveUp(n) => {
                    error!(node = %node.name, reason = %node.reason, tries = n,
                        "resume failed after every retry: the node stays down for an administrator");
                    let reason = format!("reason={}", slurm::GAVE_UP);
                    match self.slurm.update_nodes(name, &["state=down", &reason]) {
                        Ok(()) => done.gave_up.push(node.name.clone()),
                        Err(e) => warn!(node = %node.name, error = %e, "cannot set the node's reason"),
                    }
                }
            }
        }
    }

    /// Loops until the process is stopped; a failed loop is logged and the next one tried.
    pub fn run(mut self) {
        let every = self.config.ctld.interval;
        info!(interval = ?every, "wattson ctld running");
        loop {
            if let Err(e) = self.step() {
                warn!(error = %e, "loop failed; nothing done, retrying next loop");
            }
            std::thread::sleep(every.max(Duration::from_millis(100)));
        }
    }
}
