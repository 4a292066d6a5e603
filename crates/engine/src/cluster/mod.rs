//! The cluster brain: one pure function, [`decide`], from a [`Snapshot`] of the cluster (nodes,
//! queued, held and running jobs, recent arrivals, tariff, budget) to [`Actions`] (power nodes
//! down or up, the placement rule, a DVFS level per job, deferred jobs to release, the order
//! of Slurm's queue, when to be asked again). The simulator calls it after every instant's
//! events; `wattson ctld` calls it each loop. No I/O, no clock: `now` is an input, and equal
//! snapshots give equal actions.
//!
//! [`ClusterPolicy`] names every policy, the references included, so the simulator holds no
//! policy logic: [`power`] decides node power (Slurm's idle timer or wattson's right-sizing),
//! [`levels`] each job's DVFS level (fixed per job, or wattson's queue-aware lifetime choice
//! under the job's slowdown bound), [`order`] the order queued jobs start in (FIFO, or
//! wattson's wait per unit of size), [`budget`] keeps wattson under the cluster power budget
//! (DVFS and start gating), [`wait_cost`] gates wattson's DVFS as it lengthens the queue's
//! waits toward `max_wait_cost` and stops it past it (and finds the jobs lagging `max_lag_s`
//! behind), [`share`] starts a queued job on a running job's GPU where both let their GPU be
//! shared and the co-location model keeps both within bounds.

pub mod budget;
pub mod levels;
pub mod order;
pub mod placement;
pub mod power;
pub mod share;
mod tuning;
pub mod wait_cost;

use serde::{Deserialize, Serialize};
use strum::{EnumString, IntoStaticStr, VariantNames};

use wattson_types::prices::PriceSchedule;

pub use crate::colocation::Sharing;
pub use order::QueueOrder;
pub use tuning::Tuning;

/// A cluster policy: the references the simulator compares and wattson's own.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, EnumString, IntoStaticStr, VariantNames,
)]
#[strum(serialize_all = "kebab-case")]
pub enum ClusterPolicy {
    /// Slurm as shipped: max power limit, every node always on, first fit.
    SlurmDefault,
    /// Slurm's idle timer (`SuspendTime`), max power limit.
    SlurmPowersave,
    /// [`ClusterPolicy::SlurmPowersave`] with opted-in jobs on shards, packed as Slurm packs
    /// them: beside any lone opted-in job, whatever the pair does to either (the co-location
    /// reference; run only where jobs opt in).
    SlurmShards,
    /// Each job at the engine's `Balanced { eta: 0.5 }` limit; nodes always on.
    ZeusPerJob,
    /// Slurm's idle timer plus each job's own bounded DVFS choice, no cluster awareness.
    PowersaveDvfs,
    /// Right-sizing from an arrival forecast, packing, queue-aware lifetime DVFS, queue order
    /// by wait per unit of size, budget.
    Wattson,
    /// Budget reference: every GPU capped at the one power limit that keeps the whole
    /// cluster under `[budget] power_w`; nodes always on (run only with a budget).
    UniformCap,
    /// Energy reference: every job at its least-energy level within its bound, no idle energy.
    Floor,
}

impl ClusterPolicy {
    /// Command-line and report name.
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// Whether the policy runs Slurm's idle timer (and so is swept over `SuspendTime`).
    pub fn uses_idle_timer(self) -> bool {
        matches!(
            self,
            ClusterPolicy::SlurmPowersave | ClusterPolicy::SlurmShards | ClusterPolicy::PowersaveDvfs
        )
    }
}

/// How the scheduler picks nodes for a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Placement {
    /// Slurm's default: nodes in configuration order (powered-on ones first), first fit.
    FirstFit,
    /// Best fit on powered-on nodes (the most loaded node that fits), whole free nodes for
    /// multi-node jobs, lowest node weight first.
    Pack,
}

/// Power state of a node as the policy sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum NodePower {
    /// Powered on, can run jobs.
    On,
    /// Booting; jobs may be allocated to it and start when it is up.
    Booting,
    /// Powered off and resumable.
    Off,
    /// Shutting down or waiting out Slurm's `SuspendTimeout`: no action possible.
    Busy,
}

/// One node.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NodeView {
    /// Power state.
    pub power: NodePower,
    /// Since when the node has had no job (s); `INFINITY` while it holds one.
    pub idle_since: f64,
    /// Index of its GPU type in [`Snapshot::gpu_types`].
    pub gpu_type: u16,
    /// Free GPUs.
    pub free_gpus: u32,
    /// GPUs.
    pub gpus: u32,
}

/// One DVFS level of a workload on a GPU type, as the engine's model predicts it.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Level {
    /// The setting (power limit in W, or SM clock in MHz).
    pub setting: f64,
    /// Pessimistic slowdown vs the top level (model time, upper line and safety margin).
    pub slowdown_hi: f64,
    /// Predicted energy per unit of work / at the top level.
    pub energy_ratio: f64,
    /// Predicted average power per GPU (W).
    pub power_w: f64,
    /// The most a GPU is expected to draw at this level (W), for the budget: under a power
    /// limit, the limit or the power measured at the next probed limit above, whichever is
    /// less (power does not fall as the limit rises); under a clock, the prediction plus
    /// three standard errors.
    pub cap_w: f64,
}

/// A job as every policy sees it, queued, held or running.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct JobView {
    /// The caller's job id (actions name it).
    pub id: u32,
    /// GPUs.
    pub gpus: u32,
    /// Slowdown bound the user gave (fraction).
    pub bound: f64,
    /// Run time at the top level (s), as the scheduler estimates it.
    pub work_s: f64,
    /// Index of its level table in [`Snapshot::models`].
    pub model: u32,
    /// The engine's per-job choice under the job's bound (index into its levels).
    pub bounded: u16,
    /// The engine's per-job Zeus `Balanced { eta: 0.5 }` choice.
    pub zeus: u16,
    /// The highest level at or under the cluster's uniform power cap (with a budget).
    pub capped: u16,
    /// Its co-location class ([`crate::colocation`]) when its user let it share a GPU;
    /// `None`: it never shares.
    pub share: Option<u16>,
}

/// A queued job Slurm has not started (it is eligible now).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Queued {
    /// The job.
    pub job: JobView,
    /// When it entered Slurm's queue (s): its submission, or its release if it was held.
    pub eligible: f64,
}

/// A submitted job held back from Slurm's queue (a deferrable job, `--begin` not yet given).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Held {
    /// The job.
    pub job: JobView,
    /// Submission (s).
    pub submit: f64,
    /// How long it may wait for cheaper electricity (s); 0: release at once.
    pub defer_window_s: f64,
}

/// A job holding GPUs (running, or allocated and waiting for its nodes to boot).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Running {
    /// The job.
    pub job: JobView,
    /// Time it has run so far (s).
    pub elapsed_s: f64,
    /// Work done at the top level over `job.work_s` (its time limit), in `[0, 1]`.
    pub progress: f64,
    /// Its current level.
    pub level: u16,
    /// Whether another job shares its GPU (it then runs at the top level).
    pub shared: bool,
}

/// Power model of one node (everything but the GPUs) and its transitions: the simulator's
/// `[node]` table and the controller's `[ctld.node]`, one set of defaults ([`Default`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields, default)]
pub struct NodeCosts {
    /// Draw of a powered-on node without its GPUs (CPUs, memory, fans, NICs, PSU losses) (W).
    #[schemars(extend("x-allowed" = "0 to 100000"))]
    pub base_w: f64,
    /// Draw of a powered-off node (BMC) (W).
    #[schemars(extend("x-allowed" = "0 to 100000"))]
    pub off_w: f64,
    /// Time to shut down (s).
    #[schemars(extend("x-allowed" = "1 to 3600"))]
    pub shutdown_s: f64,
    /// Average draw while shutting down, GPUs included (W).
    #[schemars(extend("x-allowed" = "0 to 100000"))]
    pub shutdown_w: f64,
    /// Time to boot until Slurm can start jobs on it (s).
    #[schemars(extend("x-allowed" = "1 to 3600"))]
    pub boot_s: f64,
    /// Average draw while booting, GPUs included (W).
    #[schemars(extend("x-allowed" = "0 to 100000"))]
    pub boot_w: f64,
}

impl Default for NodeCosts {
    /// A GPU server of the DGX-1 class (estimates; docs/sim.md gives the reasoning): 400 W
    /// without its GPUs, 15 W off, 60 s shutdown at 500 W, 300 s boot at 700 W.
    fn default() -> Self {
        NodeCosts {
            base_w: 400.0,
            off_w: 15.0,
            shutdown_s: 60.0,
            shutdown_w: 500.0,
            boot_s: 300.0,
            boot_w: 700.0,
        }
    }
}

impl NodeCosts {
    /// Checks every draw is 0 to 100,000 W and each transition 1 s to 1 h.
    pub fn check(&self) -> Result<(), String> {
        let watts = [
            ("base_w", self.base_w),
            ("off_w", self.off_w),
            ("shutdown_w", self.shutdown_w),
            ("boot_w", self.boot_w),
        ];
        for (k, w) in watts {
            if !(0.0..=100_000.0).contains(&w) {
                return Err(format!("node {k} = {w} W: allowed 0 to 100000"));
            }
        }
        for (k, t) in [("shutdown_s", self.shutdown_s), ("boot_s", self.boot_s)] {
            if !(1.0..=3600.0).contains(&t) {
                return Err(format!("node {k} = {t} s: allowed 1 to 3600"));
            }
        }
        Ok(())
    }

    /// Break-even idle time (s) of a node drawing `idle_w` when idle: an idle gap longer than
    /// this makes power-down pay off,
    /// `(P_down·t_down + P_up·t_up − P_off·(t_down + t_up)) / (P_idle − P_off)`.
    pub fn break_even_s(&self, idle_w: f64) -> f64 {
        let num = self.shutdown_w * self.shutdown_s + self.boot_w * self.boot_s
            - self.off_w * (self.shutdown_s + self.boot_s);
        let den = idle_w - self.off_w;
        if den <= 0.0 { f64::INFINITY } else { (num / den).max(0.0) }
    }
}

/// A GPU type of the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct GpuType {
    /// Idle draw of one GPU (W).
    pub idle_w: f64,
}

/// Everything the policy may know at one instant.
#[derive(Debug, Clone, Copy)]
pub struct Snapshot<'a> {
    /// Now (s, the caller's time base).
    pub now: f64,
    /// Seconds to add to `now` for UTC epoch seconds (tariff lookups).
    pub utc_offset_s: i64,
    /// Nodes, in configuration order.
    pub nodes: &'a [NodeView],
    /// GPU types, by [`NodeView::gpu_type`].
    pub gpu_types: &'a [GpuType],
    /// Level tables by [`JobView::model`], each ordered by setting, the top level last.
    pub models: &'a [Vec<Level>],
    /// Jobs in Slurm's queue that did not start, in queue order.
    pub queued: &'a [Queued],
    /// Submitted jobs held back from the queue.
    pub held: &'a [Held],
    /// Jobs holding GPUs.
    pub running: &'a [Running],
    /// Recent submissions `(time, GPUs)`, oldest first, at least `forecast_window_s` of them.
    pub arrivals: &'a [(f64, u32)],
    /// The GPU type each of `arrivals` is best placed on ([`placement::type_order`]'s first),
    /// parallel to it; empty when not known (then the warm set ignores GPU types).
    pub arrival_types: &'a [u16],
    /// The tariff.
    pub tariff: &'a PriceSchedule,
    /// Cluster power budget (W), if any.
    pub budget_w: Option<f64>,
    /// Node power model.
    pub node: NodeCosts,
    /// Where jobs may or do run, by job id, as indices into `nodes` (sorted): a queued job's
    /// usable nodes (its partitions' nodes, narrowed to those it asked for), a running job's
    /// nodes. A queued job not listed may run on any node; a running job not listed frees GPUs
    /// any queued job can use. Empty when every job may run anywhere (the simulator).
    pub job_nodes: &'a JobNodes,
    /// The co-location model and the classes not paired again; `None`: no job shares a GPU.
    pub sharing: Option<Sharing<'a>>,
    /// Running jobs that have fallen `max_lag_s` behind their full-speed pace, by id (sorted):
    /// wattson runs them at full speed. [`Decider`] fills it from what it observed.
    pub lagging: &'a [u32],
}

/// Nodes of each job, by job id ([`Snapshot::job_nodes`]); jobs with the same usable nodes
/// (the same partitions) share one list.
pub type JobNodes = std::collections::BTreeMap<u32, std::sync::Arc<[u32]>>;

/// No job restricted to any node: every job may run anywhere.
pub static ANYWHERE: JobNodes = JobNodes::new();

/// What the policy asks for at one instant.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Actions {
    /// Idle powered-on nodes to power down.
    pub power_down: Vec<u32>,
    /// Powered-off nodes to boot.
    pub power_up: Vec<u32>,
    /// Level changes `(job id, level)` for running jobs.
    pub levels: Vec<(u32, u16)>,
    /// Running jobs raised toward full speed now, by id (sorted): those late queued work waits
    /// for ([`levels::waited_for`]) and those lagging `max_lag_s` behind ([`Snapshot::lagging`]),
    /// or all of them while the capacity gates are closed. The others run at their own saving
    /// level. The controller paces jobs by it.
    pub raised: Vec<u32>,
    /// Running jobs whose level the power budget lowered below what they would run at
    /// otherwise, by id (sorted).
    pub shed: Vec<u32>,
    /// Held jobs to put in Slurm's queue now.
    pub release: Vec<u32>,
    /// When to be asked again even if nothing happens (an idle timer, a release, the forecast).
    pub wake_at: Option<f64>,
    /// The queued jobs' ids in the order Slurm should try them; empty: as they are.
    pub queue_order: Vec<u32>,
    /// Queued jobs to start now on the GPU of a running job, `(queued, running)` ([`share`]).
    pub share: Vec<(u32, u32)>,
}

impl Actions {
    /// Asks to be decided again at `at` at the latest.
    pub fn wake_by(&mut self, at: f64) {
        self.wake_at = Some(self.wake_at.map_or(at, |w| w.min(at)));
    }
}

/// The policy's settings for one run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TunedPolicy {
    /// Which policy.
    pub kind: ClusterPolicy,
    /// Its tunables.
    pub tuning: Tuning,
}

impl TunedPolicy {
    /// How this policy places jobs.
    pub fn placement(&self) -> Placement {
        if self.kind == ClusterPolicy::Wattson && self.tuning.pack {
            Placement::Pack
        } else {
            Placement::FirstFit
        }
    }

    /// The level a job starts at before the policy has seen it run.
    pub fn start_level(&self, job: &JobView, top: u16) -> u16 {
        levels::fixed_level(self.kind, job).unwrap_or(top)
    }
}

/// The cluster policy with what it keeps between decisions: the wait-cost guard
/// ([`wait_cost::WaitCost`]). The controller takes one step per loop, the simulator one per
/// instant; nothing else holds the guard's state (the controller saves it in its state file
/// and reads it back when it starts).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Decider {
    /// What the queue waited and DVFS added, as observed at each step.
    pub wait_cost: wait_cost::WaitCost,
}

impl Decider {
    /// Counts the waits since the last step at `s`, then decides on `s` under `p`, with DVFS
    /// graded by the observed wait cost ([`wait_cost::guarded`]) and the jobs that lag
    /// `max_lag_s` behind at full speed ([`wait_cost::WaitCost::lagging`]); asks to be woken
    /// when the next slowed job reaches it.
    pub fn step(&mut self, p: &TunedPolicy, s: &Snapshot) -> Actions {
        self.wait_cost.observe(s);
        if p.kind != ClusterPolicy::Wattson {
            return decide(p, s);
        }
        let (lagging, next) = self.wait_cost.lagging(s, p.tuning.max_lag_s);
        let mut a = decide(&wait_cost::guarded(p, &self.wait_cost), &Snapshot { lagging: &lagging, ..*s });
        if let Some(at) = next {
            a.wake_by(at);
        }
        a
    }
}

/// The cluster policy: actions for `s` under `p`, with no memory of earlier decisions (the
/// references need none; wattson's guard is [`Decider`]'s). Pure and deterministic.
pub fn decide(p: &TunedPolicy, s: &Snapshot) -> Actions {
    let mut a = Actions::default();
    // Every later decision sees the queue in the order Slurm will try it.
    let ranked = order::rank(p, s.now, s.queued);
    let reordered;
    let s = match &ranked {
        Some(q) => {
            a.queue_order = q.iter().map(|q| q.job.id).collect();
            reordered = Snapshot { queued: q, ..*s };
            &reordered
        }
        None => s,
    };
    release(p, s, &mut a);
    share::decide(p, s, &mut a);
    // The rest see the jobs that start on a shared GPU as running there, not queued.
    let (queued, held, running);
    let s = if a.share.is_empty() {
        s
    } else {
        (queued, held, running) = share::started(s, &a.share);
        &Snapshot { queued: &queued, held: &held, running: &running, ..*s }
    };
    power::decide(p, s, &mut a);
    levels::decide(p, s, &mut a);
    budget::enforce(p, s, &mut a);
    a
}

/// Held jobs: released at once, except wattson's deferrable ones, held until the cheapest
/// hour within their window when it is at least `min_price_drop` cheaper than now.
fn release(p: &TunedPolicy, s: &Snapshot, a: &mut Actions) {
    for h in s.held {
        let at = release_time(p, s, h);
        if at <= s.now {
            a.release.push(h.job.id);
        } else {
            a.wake_by(at);
        }
    }
}

/// When a held job should enter the queue (s); `submit` when it is not deferred.
pub fn release_time(p: &TunedPolicy, s: &Snapshot, h: &Held) -> f64 {
    begin_time(p, s.tariff, s.utc_offset_s, h.submit, h.defer_window_s)
}

/// The begin time job_submit gives a job submitted at `submit` (s; `utc_offset_s` more in
/// UTC) that allows `window_s` of deferral, under `p` and `tariff`: `submit` when it is not
/// deferred (by any policy but wattson, never).
pub fn begin_time(
    p: &TunedPolicy,
    tariff: &PriceSchedule,
    utc_offset_s: i64,
    submit: f64,
    window_s: f64,
) -> f64 {
    if p.kind != ClusterPolicy::Wattson || window_s <= 0.0 {
        return submit;
    }
    let now = submit.floor() as i64 + utc_offset_s;
    let start = tariff.deferred_start(now, window_s.floor() as i64, p.tuning.min_price_drop);
    if start > now { submit + (start - now) as f64 - submit.fract() } else { submit }
}

#[cfg(test)]
pub(crate) mod tests;
