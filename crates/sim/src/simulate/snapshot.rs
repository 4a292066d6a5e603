//! The engine's view of the simulated cluster: the snapshot the policy decides on at each
//! instant, and each job's order of GPU types (from the engine's placement rule).

use wattson_engine::cluster::{
    self, Held, JobView as EngineJob, NodePower, NodeView, Queued, Running, Snapshot,
};

use super::Sim;
use crate::power::NodeState;

/// Reused buffers of the snapshot's slices.
#[derive(Default)]
pub(super) struct Bufs {
    nodes: Vec<NodeView>,
    queued: Vec<Queued>,
    held: Vec<Held>,
    running: Vec<Running>,
    job_nodes: cluster::JobNodes,
}

impl Sim<'_> {
    /// The policy's actions for the cluster as it is at `t`.
    pub(super) fn consult(&mut self, t: f64) -> cluster::Actions {
        let mut b = std::mem::take(&mut self.bufs);
        b.nodes.clear();
        for n in 0..self.pool.free.len() {
            let power = match self.meter.state[n] {
                NodeState::On => NodePower::On,
                NodeState::Booting => NodePower::Booting,
                NodeState::Off => NodePower::Off,
                NodeState::ShuttingDown | NodeState::OffWait => NodePower::Busy,
            };
            let idle_since = if self.is_idle(n) { self.idle_since[n] } else { f64::INFINITY };
            b.nodes.push(NodeView {
                power,
                idle_since,
                gpu_type: self.pool.group[n],
                free_gpus: self.pool.free[n],
                gpus: self.pool.gpn,
            });
        }
        b.queued.clear();
        b.queued.extend(
            self.queue
                .iter()
                .map(|&j| Queued { job: self.views[j as usize], eligible: self.runs[j as usize].eligible }),
        );
        b.held.clear();
        b.held.extend(self.held.iter().map(|&j| {
            let job = &self.jobs[j as usize];
            Held { job: self.views[j as usize], submit: job.submit, defer_window_s: job.defer_window }
        }));
        b.running.clear();
        b.job_nodes.clear();
        for &j in &self.running {
            let ju = j as usize;
            let l = &self.live[ju];
            // Progress as the daemons account it: work done at the top level, over the time
            // limit (the engine's `work_s`), so it never reveals the true run time.
            let (elapsed_s, progress) = if self.runs[ju].start.is_finite() {
                let full = self.full_time(ju, l.level);
                let p = if full > 0.0 { l.done + (t - l.seg) / full } else { 1.0 };
                let ty = usize::from(self.ty[ju]);
                let done_s = p.min(1.0) * self.jobs[ju].work_on(ty, self.cat);
                (t - self.runs[ju].start, (done_s / self.views[ju].work_s).min(1.0))
            } else {
                (0.0, 0.0)
            };
            // Its nodes, as the controller has them from Slurm: where the GPUs it frees are.
            let nodes: Vec<u32> = self.runs[ju].shares.iter().map(|s| s.0).collect();
            b.job_nodes.insert(j, nodes.into());
            b.running.push(Running {
                job: self.views[ju],
                elapsed_s,
                progress,
                level: l.level,
                shared: l.partner != super::NO_PARTNER,
            });
        }
        let window = self.policy.tuning.forecast_window_s;
        while self.arr_lo < self.arrivals.len() && self.arrivals[self.arr_lo].0 < t - window {
            self.arr_lo += 1;
        }
        let (arrivals, arrival_types, arr) = if self.c.wattson.sim.clairvoyant {
            // The measured bound: the forecast window holds the *coming* submissions.
            let lo = self.future.partition_point(|x| x.0 <= t);
            let hi = self.future.partition_point(|x| x.0 <= t + window);
            (&self.future, &self.future_types, lo..hi)
        } else {
            (&self.arrivals, &self.arrival_types, self.arr_lo..self.arrivals.len())
        };
        let snap = Snapshot {
            now: t,
            utc_offset_s: self.c.trace_start_utc_s,
            nodes: &b.nodes,
            gpu_types: &self.gpu_types,
            models: &self.models,
            queued: &b.queued,
            held: &b.held,
            running: &b.running,
            arrivals: &arrivals[arr.clone()],
            arrival_types: arrival_types.get(arr).unwrap_or(&[]),
            tariff: &self.c.prices,
            budget_w: self.c.budget.map(|x| x.power_w),
            node: self.c.node,
            job_nodes: &b.job_nodes,
            sharing: self.cat.colocation.as_ref().map(|c| cluster::Sharing {
                broken: &self.broken,
                unfit: &self.unfit,
                min_gain: self.policy.tuning.share_min_gain,
                try_bound: self.policy.tuning.share_try_bound,
                ..cluster::Sharing::learned_or(self.learning.as_ref(), &c.model)
            }),
            lagging: &[],
        };
        // One step of the policy and its guard, as the controller takes one per loop.
        let acts = self.decider.step(&self.policy, &snap);
        let runs = &self.runs;
        (self.observe)(&snap, &acts, &|j| runs[j as usize].shares.iter().map(|s| s.0).collect());
        self.bufs = b;
        acts
    }

    /// Whether the policy places by GPU type (and so forecasts demand per type).
    pub(super) fn types_matter(&self) -> bool {
        self.c.groups.len() > 1
            && self.policy.kind == cluster::ClusterPolicy::Wattson
            && self.policy.tuning.type_aware
    }

    /// Job `j`'s order of GPU types as the policy ranks them now, less the types the job does
    /// not accept (Slurm's `--gres=gpu:TYPE`); the accepted ones in configuration order if the
    /// policy offers none of them.
    pub(super) fn type_order(&self, j: u32) -> Vec<u16> {
        if self.c.groups.len() < 2 {
            return vec![0];
        }
        let job = &self.jobs[j as usize];
        let views: Vec<EngineJob> = (0..self.c.groups.len()).map(|g| job.view(j, g, self.cat)).collect();
        let share = self.c.node.base_w / f64::from(self.c.gpus_per_node);
        let mut order = cluster::placement::type_order(&self.policy, &self.models, &views, share);
        if !job.gpu_types.is_empty() {
            order.retain(|g| job.gpu_types.contains(g));
            if order.is_empty() {
                order.clone_from(&job.gpu_types);
            }
        }
        order
    }
}
