//! Slurm's state as the engine's [`Snapshot`]: nodes, queued and running jobs, recent
//! arrivals. What Slurm does not say (since when a node has been idle, which jobs arrived
//! lately) the controller remembers between loops.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use wattson_config::Config;
use wattson_config::ctld::CtldConfig;
use wattson_engine::cluster::{
    ClusterPolicy, Decider, GpuType, Held, JobNodes, JobView, Level, NodeCosts, NodePower, NodeView, Queued,
    Running, Snapshot, TunedPolicy,
};

use crate::nodes::JobLevels;
use crate::slurm::{Job, Node, Power};

/// Work assumed for a job without a time limit (s).
const UNLIMITED_WORK_S: f64 = 86_400.0;

/// What the controller remembers between loops.
#[derive(Debug, Default)]
pub struct Memory {
    /// Since when each node has been seen idle (Unix s), and in which power state: a node
    /// that comes up from a boot is idle from then, as the simulator counts it.
    idle_since: BTreeMap<String, (f64, Power)>,
    /// Jobs seen: (submission, GPUs), by id.
    arrivals: BTreeMap<u32, (f64, u32)>,
    /// The policy's steps, one per loop, with the wait-cost guard it keeps between them.
    pub decider: Decider,
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
    /// Jobs job_submit holds for the power budget, waiting for the controller's release.
    pub held: Vec<Held>,
    /// Jobs holding nodes.
    pub running: Vec<Running>,
    /// Recent submissions `(time, GPUs)`, oldest first.
    pub arrivals: Vec<(f64, u32)>,
    /// The GPU types the nodes' `Gres` name, in order of first appearance (one, untyped,
    /// when none names a type).
    pub gpu_types: Vec<GpuType>,
    /// The names of `gpu_types` as Slurm's `Gres` gives them (empty: untyped).
    pub gpu_type_names: Vec<String>,
    /// Level tables: the first for every job whose table the controller does not know (one
    /// level, a GPU at its largest power limit), then those running jobs' nodes gave
    /// ([`Learned::levels`]).
    pub models: Vec<Vec<Level>>,
    /// Where each queued job may run and each running job runs (node indices).
    pub job_nodes: JobNodes,
}

impl View {
    /// The engine's snapshot of this view at `now` (Unix s), under `config`.
    pub fn snapshot<'a>(&'a self, now: f64, config: &'a Config) -> Snapshot<'a> {
        Snapshot {
            now,
            utc_offset_s: 0,
            nodes: &self.nodes,
            gpu_types: &self.gpu_types,
            models: &self.models,
            queued: &self.queued,
            held: &self.held,
            running: &self.running,
            arrivals: &self.arrivals,
            arrival_types: &[],
            tariff: &config.prices,
            budget_w: config.budget.power_w,
            node: node_costs(&config.ctld),
            job_nodes: &self.job_nodes,
            sharing: None,
            lagging: &[],
        }
    }
}

/// The cluster policy the controller runs: wattson's, with `[ctld]`'s knobs (the simulator's
/// `[wattson]` table takes the same [`wattson_engine::cluster::Tuning`]).
pub fn policy(c: &CtldConfig) -> TunedPolicy {
    TunedPolicy { kind: ClusterPolicy::Wattson, tuning: c.tuning }
}

/// The node power model of `[ctld.node]`.
pub fn node_costs(c: &CtldConfig) -> NodeCosts {
    c.node
}

/// Idle draw of one GPU (W): `[ctld] gpu_idle_w`, else the engine's prior for the GPU type the
/// first GPU node's `Gres` names (the simulator's default too).
pub fn gpu_idle_w(c: &CtldConfig, nodes: &[Node]) -> f64 {
    c.gpu_idle_w.unwrap_or_else(|| {
        let named = nodes.iter().find(|n| n.gpus > 0).and_then(|n| n.gpu_type.as_deref());
        wattson_engine::idle_w_of(named.unwrap_or(""))
    })
}

/// What the controller learned beyond Slurm's listings, for the power budget.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Learned {
    /// The jobs job_submit holds for the budget, with the slowdown bound each one's
    /// AdminComment records.
    pub held: BTreeMap<u32, f64>,
    /// Running jobs' level tables, from their (first) nodes.
    pub levels: BTreeMap<u32, JobLevels>,
    /// What one GPU of a job whose table is unknown may draw (W).
    pub gpu_max_w: f64,
    /// The opted-in jobs, with `[ctld] share_pairs` ([`crate::share`]).
    pub shares: BTreeMap<u32, crate::share::ShareJob>,
}

impl Memory {
    /// The view of `nodes` and `jobs` at `now` (Unix s) for `policy` (its forecast window and
    /// wait-cost bound), with what the controller `learned` from job_submit's marks and the
    /// nodes; remembers what it needs.
    pub fn view(
        &mut self,
        now: f64,
        policy: &TunedPolicy,
        gpu_idle_w: Option<f64>,
        nodes: &[Node],
        jobs: &[Job],
        learned: &Learned,
    ) -> View {
        // Each GPU type Slurm names, in order of first appearance, at `[ctld] gpu_idle_w` or
        // its prior's idle draw.
        let mut names: Vec<&str> = Vec::new();
        for n in nodes.iter().filter(|n| n.gpus > 0) {
            let name = n.gpu_type.as_deref().unwrap_or("");
            if !names.contains(&name) {
                names.push(name);
            }
        }
        if names.is_empty() {
            names.push("");
        }
        let type_of = |n: &Node| -> u16 {
            let name = n.gpu_type.as_deref().unwrap_or("");
            names.iter().position(|t| *t == name).unwrap_or(0) as u16
        };
        let mut view = View {
            gpu_types: names
                .iter()
                .map(|t| GpuType { idle_w: gpu_idle_w.unwrap_or_else(|| wattson_engine::idle_w_of(t)) })
                .collect(),
            gpu_type_names: names.iter().map(|t| t.to_string()).collect(),
            models: vec![vec![Level {
                setting: 1.0,
                slowdown_hi: 0.0,
                energy_ratio: 1.0,
                power_w: 0.0,
                cap_w: learned.gpu_max_w,
            }]],
            ..View::default()
        };
        // The GPUs running opted-in jobs hold shards, by node, whatever `GresUsed` says.
        let mut shard_held: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
        for (node, gpus) in learned.shares.values().filter_map(|s| s.placed.as_ref()) {
            shard_held.entry(node.as_str()).or_default().extend(gpus);
        }
        for node in nodes {
            let managed = !node.is_held_by_admin();
            let up = matches!(node.power, Power::On | Power::PoweringUp);
            let idle = managed && up && node.is_idle();
            let idle_since = if idle {
                let seen = self.idle_since.entry(node.name.clone()).or_insert((now, node.power));
                if seen.1 != node.power {
                    *seen = (now, node.power);
                }
                seen.0
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
            let unlisted = shard_held
                .get(node.name.as_str())
                .map_or(0, |held| held.iter().filter(|i| !node.shard_gpus.contains(i)).count());
            let free_gpus = if managed { node.free_gpus().saturating_sub(unlisted as u32) } else { 0 };
            view.nodes.push(NodeView {
                power,
                idle_since,
                gpu_type: type_of(node),
                free_gpus,
                gpus: node.gpus,
            });
            view.managed.push(managed);
        }
        let mut usable = Usable::new(nodes, &view.managed);
        for job in jobs {
            let share = learned.shares.get(&job.id);
            // An opted-in job on shards asks part of each GPU it shares (per task, where
            // squeue's per-node request may not show it): as many GPUs as it shares.
            let gpus = share.map_or(job.gpus, |s| s.gpus);
            self.arrivals.entry(job.id).or_insert((job.submit as f64, gpus));
            let work_s = job.limit_s.unwrap_or(UNLIMITED_WORK_S).max(1.0);
            let view_of = |job: &Job| JobView {
                id: job.id,
                gpus,
                bound: share.map_or(0.0, |s| s.bound),
                work_s,
                model: 0,
                bounded: 0,
                zeus: 0,
                capped: 0,
                // A job released and still pending is Slurm's to place: no longer paired.
                share: share.filter(|s| s.held || !s.pending).and_then(|s| s.class),
            };
            if let Some(&bound) = learned.held.get(&job.id).filter(|_| job.is_held()) {
                let held = JobView { bound, ..view_of(job) };
                view.held.push(Held { job: held, submit: job.submit as f64, defer_window_s: 0.0 });
            } else if job.is_queued() || share.is_some_and(|s| s.held) {
                // A job held for the co-location decision waits for GPUs like any queued one.
                view.queued.push(Queued { job: view_of(job), eligible: job.submit as f64 });
                if let Some(usable) = usable.of(job) {
                    view.job_nodes.insert(job.id, usable);
                }
            } else if job.is_running() {
                let mut held: Vec<u32> =
                    job.nodes.iter().filter_map(|n| usable.index_of.get(n.as_str()).copied()).collect();
                held.sort_unstable();
                view.job_nodes.insert(job.id, held.into());
                let progress = (job.elapsed_s / work_s).clamp(0.0, 1.0);
                let (mut seen, mut level) = (view_of(job), 0);
                if let Some(known) = learned.levels.get(&job.id).filter(|l| !l.levels.is_empty()) {
                    seen.model = view.models.len() as u32;
                    seen.bound = known.bound;
                    level = known.level.min(known.levels.len() as u16 - 1);
                    view.models.push(known.levels.clone());
                }
                view.running.push(Running {
                    job: seen,
                    elapsed_s: job.elapsed_s,
                    progress,
                    level,
                    shared: share.is_some_and(|s| s.partnered),
                });
            }
        }
        self.arrivals.retain(|_, (at, _)| *at >= now - policy.tuning.forecast_window_s);
        let mut arrivals: Vec<(f64, u32)> = self.arrivals.values().copied().collect();
        arrivals.sort_by(|a, b| a.0.total_cmp(&b.0));
        view.arrivals = arrivals;
        view
    }
}

/// The nodes (indices into `nodes`) each pending job may run on: those of its partitions
/// that wattson manages (not drained, down or reserved), narrowed to the ones it asked for.
/// Jobs asking for the same share one list, worked out once per loop.
struct Usable<'a> {
    /// The managed nodes of each partition, sorted.
    by_partition: BTreeMap<&'a str, Vec<u32>>,
    /// The lists given so far, by what the jobs asked for.
    given: BTreeMap<Asked, Arc<[u32]>>,
    /// Each node's index, by name.
    index_of: BTreeMap<&'a str, u32>,
}

/// A pending job's partitions and the nodes it asked for.
type Asked = (Vec<String>, Vec<String>);

impl<'a> Usable<'a> {
    fn new(nodes: &'a [Node], managed: &[bool]) -> Usable<'a> {
        let mut by_partition: BTreeMap<&str, Vec<u32>> = BTreeMap::new();
        for (i, node) in nodes.iter().enumerate().filter(|(i, _)| managed[*i]) {
            for partition in &node.partitions {
                by_partition.entry(partition.as_str()).or_default().push(i as u32);
            }
        }
        let index_of = nodes.iter().enumerate().map(|(i, n)| (n.name.as_str(), i as u32)).collect();
        Usable { by_partition, given: BTreeMap::new(), index_of }
    }

    /// The nodes `job` may run on; `None` when Slurm names no partition for it (any node).
    fn of(&mut self, job: &Job) -> Option<Arc<[u32]>> {
        if job.partitions.is_empty() {
            return None;
        }
        let key = (job.partitions.clone(), job.requested.clone());
        if let Some(list) = self.given.get(&key) {
            return Some(list.clone());
        }
        let mut list: Vec<u32> = job
            .partitions
            .iter()
            .filter_map(|p| self.by_partition.get(p.as_str()))
            .flatten()
            .copied()
            .collect();
        if !job.requested.is_empty() {
            let asked: BTreeSet<u32> =
                job.requested.iter().filter_map(|n| self.index_of.get(n.as_str()).copied()).collect();
            list.retain(|n| asked.contains(n));
        }
        list.sort_unstable();
        list.dedup();
        let list: Arc<[u32]> = list.into();
        self.given.insert(key, list.clone());
        Some(list)
    }
}
