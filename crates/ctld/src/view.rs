//! Slurm's state as the engine's [`Snapshot`]: nodes, queued and running jobs, recent
//! arrivals. What Slurm does not say (since when a node has been idle, which jobs arrived
//! lately) the controller remembers between loops.

use std::collections::BTreeMap;

use wattson_config::ctld::CtldConfig;
use wattson_engine::cluster::{GpuType, JobView, Level, NodeCosts, NodePower, NodeView, Queued, Running};

use crate::slurm::{Job, Node, Power};

/// Work assumed for a job without a time limit (s).
const UNLIMITED_WORK_S: f64 = 86_400.0;

/// What the controller remembers between loops.
#[derive(Debug, Default)]
pub struct Memory {
    /// Since when each node has been seen idle (Unix s).
    idle_since: BTreeMap<String, f64>,
    /// Jobs seen: (submission, GPUs), by id.
    arrivals: BTreeMap<u32, (f64, u32)>,
}

/// The engine's view of the cluster, owned (a [`Snapshot`] borrows from it).
///
/// [`Snapshot`]: wattson_engine::cluster::Snapshot
#[derive(Debug, Default)]
pub struct View {
    /// Nodes in Slurm's order.
    pub nodes: Vec<NodeView>,
    /// Whether wattson may act on each node (no admin drain, down, reservation...).
    pub managed: Vec<bool>,
    /// Jobs waiting for resources.
    pub queued: Vec<Queued>,
    /// Jobs holding nodes.
    pub running: Vec<Running>,
    /// Recent submissions `(time, GPUs)`, oldest first.
    pub arrivals: Vec<(f64, u32)>,
    /// One GPU type (heterogeneous clusters are not modelled by the controller yet).
    pub gpu_types: Vec<GpuType>,
    /// One level table: the controller decides node power, not DVFS levels.
    pub models: Vec<Vec<Level>>,
}

/// The node power model of `[ctld]`.
pub fn node_costs(c: &CtldConfig) -> NodeCosts {
    NodeCosts {
        base_w: c.node_base_w,
        off_w: c.node_off_w,
        shutdown_s: c.shutdown_time.as_secs_f64(),
        shutdown_w: c.shutdown_w,
        boot_s: c.boot_time.as_secs_f64(),
        boot_w: c.boot_w,
    }
}

impl Memory {
    /// The view of `nodes` and `jobs` at `now` (Unix s), remembering what it needs.
    pub fn view(&mut self, now: f64, window_s: f64, gpu_idle_w: f64, nodes: &[Node], jobs: &[Job]) -> View {
        let mut view = View {
            gpu_types: vec![GpuType { idle_w: gpu_idle_w }],
            models: vec![vec![Level {
                setting: 1.0,
                slowdown_hi: 0.0,
                energy_ratio: 1.0,
                power_w: 0.0,
                cap_w: 0.0,
            }]],
            ..View::default()
        };
        for node in nodes {
            let managed = !node.is_held_by_admin();
            let idle = managed && node.power == Power::On && node.is_idle();
            let idle_since = if idle {
                *self.idle_since.entry(node.name.clone()).or_insert(now)
            } else {
                self.idle_since.remove(&node.name);
                f64::INFINITY
            };
            let power = match node.power {
                _ if !managed => NodePower::Busy,
                Power::On => NodePower::On,
                Power::PoweringUp => NodePower::Booting,
                Power::PoweringDown => NodePower::Busy,
                Power::Off => NodePower::Off,
            };
            let free_gpus = if managed { node.free_gpus() } else { 0 };
            view.nodes.push(NodeView { power, idle_since, gpu_type: 0, free_gpus, gpus: node.gpus });
            view.managed.push(managed);
        }
        for job in jobs {
            self.arrivals.entry(job.id).or_insert((job.submit as f64, job.gpus));
            let work_s = job.limit_s.unwrap_or(UNLIMITED_WORK_S).max(1.0);
            let view_of = |job: &Job| JobView {
                id: job.id,
                gpus: job.gpus,
                bound: 0.0,
                work_s,
                model: 0,
                bounded: 0,
                zeus: 0,
                capped: 0,
            };
            if job.is_queued() {
                view.queued.push(Queued { job: view_of(job), eligible: job.submit as f64 });
            } else if job.is_running() {
                let progress = (job.elapsed_s / work_s).clamp(0.0, 1.0);
                view.running.push(Running {
                    job: view_of(job),
                    elapsed_s: job.elapsed_s,
                    progress,
                    level: 0,
                });
            }
        }
        self.arrivals.retain(|_, (at, _)| *at >= now - window_s);
        let mut arrivals: Vec<(f64, u32)> = self.arrivals.values().copied().collect();
        arrivals.sort_by(|a, b| a.0.total_cmp(&b.0));
        view.arrivals = arrivals;
        view
    }
}
