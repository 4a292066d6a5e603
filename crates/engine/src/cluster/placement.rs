//! Placement as Slurm can be told it: node weights. Slurm gives a job the lowest-weight nodes
//! that fit it, so weights ordered as [`Placement::Pack`] orders nodes make Slurm place as the
//! simulator does: powered-on nodes first, then booting, then sleeping ones, and among them the
//! node with the fewest free GPUs that still fits (best fit). On a cluster of several GPU
//! types, [`type_order`] says which type a job should try first (a job runs on one type).

use super::{ClusterPolicy, JobView, Level, NodePower, Placement, Snapshot, TunedPolicy};
use crate::table::ModelTable;
use wattson_types::model_owner::ModelOwner;

/// The GPU types a job should try, best first, given its view on each type (`views[t]`: its
/// level table, bounded level and work on type `t`). wattson (with `type_aware`) ranks them by
/// the energy the job is predicted to use at its bounded level: its GPUs' draw and, with
/// `count_node_base`, their share of node base (`base_share_w` per GPU) over the predicted
/// time; ties keep configuration order; a type predicted to cost more than `type_max_cost`
/// times the best is left out (the job waits for a better one). Every other policy, and
/// wattson without `type_aware`, tries them all in configuration order, as Slurm would.
pub fn type_order(p: &TunedPolicy, models: &[Vec<Level>], views: &[JobView], base_share_w: f64) -> Vec<u16> {
    let mut order: Vec<u16> = (0..views.len() as u16).collect();
    if p.kind != ClusterPolicy::Wattson || !p.tuning.type_aware || views.len() < 2 {
        return order;
    }
    let base = if p.tuning.count_node_base { base_share_w } else { 0.0 };
    let cost = |v: &JobView| -> f64 {
        let levels = &models[v.model as usize];
        let (Some(top), Some(l)) = (levels.last(), levels.get(usize::from(v.bounded))) else {
            return f64::INFINITY;
        };
        // Time at the level / at the top: energy ratio × top power / level power.
        let top_j = top.power_w * v.work_s;
        let time_ratio = if l.power_w > 0.0 { l.energy_ratio * top.power_w / l.power_w } else { 1.0 };
        l.energy_ratio * top_j + base * v.work_s * time_ratio
    };
    let costs: Vec<f64> = views.iter().map(cost).collect();
    order.sort_by(|&a, &b| costs[usize::from(a)].total_cmp(&costs[usize::from(b)]));
    let best = costs[usize::from(order[0])];
    order.retain(|&t| costs[usize::from(t)] <= p.tuning.type_max_cost * best);
    order
}

/// A queued job's workload as the model table names it, for [`ranked_types`].
#[derive(Debug, Clone, Copy)]
pub struct Workload<'a> {
    /// Whose models decide it.
    pub owner: &'a ModelOwner,
    /// The tag its models learn under.
    pub tag: &'a str,
    /// Its slowdown bound (fraction; 0: the top level).
    pub bound: f64,
    /// Its time limit (s).
    pub limit_s: f64,
}

/// The GPU types (indices into `types`, the names Slurm gives them) a queued job should be
/// offered, best first, from `table`'s models of its workload ([`type_order`] over its level
/// table on each type, at the least-energy level within its bound). Empty when the job's
/// workload is not modelled on every type (nothing to compare: left to Slurm) or `p` does not
/// place by type. The time limit is taken as the run on the fastest type, the others
/// stretched by their modelled time per unit of work.
pub fn ranked_types(
    p: &TunedPolicy,
    table: &ModelTable,
    job: &Workload,
    types: &[&str],
    base_share_w: f64,
) -> Vec<u16> {
    if p.kind != ClusterPolicy::Wattson || !p.tuning.type_aware || types.len() < 2 {
        return Vec::new();
    }
    let mut models = Vec::with_capacity(types.len());
    let mut times = Vec::with_capacity(types.len());
    for t in types {
        let Some(entry) = table.get(job.owner, job.tag, t) else { return Vec::new() };
        let Some(&top) = entry.settings.last() else { return Vec::new() };
        let time = entry.model.predict(top).time;
        let levels = super::levels::table(&entry.model, &entry.settings, &table.config);
        if !(time.is_finite() && time > 0.0) || levels.is_empty() {
            return Vec::new();
        }
        times.push(time);
        models.push(levels);
    }
    let fastest = times.iter().copied().fold(f64::INFINITY, f64::min);
    let views: Vec<JobView> = (0..types.len())
        .map(|t| JobView {
            id: 0,
            gpus: 0,
            bound: job.bound,
            work_s: job.limit_s * times[t] / fastest,
            model: t as u32,
            bounded: super::levels::least_energy_within(&models[t], job.bound, 0.0),
            zeus: 0,
            capped: 0,
            share: None,
        })
        .collect();
    type_order(p, &models, &views, base_share_w)
}

/// Of the types `ranked` for queued job `id` of `gpus` GPUs, the first whose nodes it may use
/// in `s` (powered or not, not busy) have that many GPUs free, as the simulator's scheduler
/// tries them; the best when none has; `None` when nothing is ranked.
pub fn type_to_start(s: &Snapshot, id: u32, gpus: u32, ranked: &[u16]) -> Option<u16> {
    let usable = s.job_nodes.get(&id);
    let free_on = |t: u16| -> u32 {
        s.nodes
            .iter()
            .enumerate()
            .filter(|(i, n)| {
                n.gpu_type == t
                    && n.power != NodePower::Busy
                    && usable.is_none_or(|u| u.binary_search(&(*i as u32)).is_ok())
            })
            .map(|(_, n)| n.free_gpus)
            .sum()
    };
    ranked.iter().copied().find(|&t| free_on(t) >= gpus).or(ranked.first().copied())
}

/// A weight per node of `s` (1 and up), or `None` when `p` places first fit (Slurm's default
/// order, no weights to set).
pub fn node_weights(p: &TunedPolicy, s: &Snapshot) -> Option<Vec<u32>> {
    if p.placement() != Placement::Pack {
        return None;
    }
    let span = s.nodes.iter().map(|n| n.gpus).max().unwrap_or(0) + 1;
    let weights = s
        .nodes
        .iter()
        .map(|n| {
            let tier = match n.power {
                NodePower::On => 0,
                NodePower::Booting => 1,
                NodePower::Off => 2,
                NodePower::Busy => 3,
            };
            1 + tier * span + n.free_gpus.min(span - 1)
        })
        .collect();
    Some(weights)
}

#[cfg(test)]
mod tests {
    use super::super::tests::node;
    use super::super::{ANYWHERE, GpuType, NodeCosts, NodeView, Tuning};
    use super::*;
    use crate::fit::{Sample, fit};
    use crate::model::Knob;
    use crate::table::ModelEntry;
    use wattson_types::prices::PriceSchedule;

    const ALICE: ModelOwner = ModelOwner::User(1000);

    /// `alice`'s `train` on `gpu`: the same time per unit of work at three limits, at `watts`.
    fn entry(limits: [f64; 3], watts: [f64; 3]) -> ModelEntry {
        let s: Vec<Sample> =
            (0..3).map(|i| Sample::new(limits[i], [1.3, 1.1, 1.0][i], watts[i], 1.0)).collect();
        ModelEntry { model: fit(Knob::PowerLimit, &s).unwrap(), settings: limits.to_vec() }
    }

    #[test]
    fn a_queued_job_is_offered_the_types_its_workload_is_modelled_cheapest_on() {
        let wattson = TunedPolicy { kind: ClusterPolicy::Wattson, tuning: Tuning::default() };
        let mut table = ModelTable::new();
        // The same work on an A100 at 160 W and on an H100 at 700 W: with a 200 W base share
        // per GPU the H100 costs (700 + 200) / (160 + 200) = 2.5 times as much, over the 2× cut.
        table.insert(&ALICE, "train", "A100", entry([200.0, 300.0, 400.0], [130.0, 150.0, 160.0]));
        table.insert(&ALICE, "train", "H100", entry([400.0, 550.0, 700.0], [560.0, 650.0, 700.0]));
        let job = Workload { owner: &ALICE, tag: "train", bound: 0.0, limit_s: 3600.0 };
        assert_eq!(ranked_types(&wattson, &table, &job, &["h100", "a100"], 200.0), [1]);
        // Within three times the best, both, cheapest first.
        let loose = TunedPolicy { tuning: Tuning { type_max_cost: 3.0, ..Tuning::default() }, ..wattson };
        assert_eq!(ranked_types(&loose, &table, &job, &["h100", "a100"], 200.0), [1, 0]);
        // Not modelled on every type, another owner's, not type-aware, one type: nothing.
        assert!(ranked_types(&wattson, &table, &job, &["h100", "a100", "v100"], 200.0).is_empty());
        let bob = Workload { owner: &ModelOwner::User(1001), ..job };
        assert!(ranked_types(&wattson, &table, &bob, &["h100", "a100"], 200.0).is_empty());
        let blind = TunedPolicy { tuning: Tuning { type_aware: false, ..Tuning::default() }, ..wattson };
        assert!(ranked_types(&blind, &table, &job, &["h100", "a100"], 200.0).is_empty());
        assert!(ranked_types(&wattson, &table, &job, &["a100"], 200.0).is_empty());
    }

    #[test]
    fn a_job_starts_on_the_first_ranked_type_with_room_else_waits_for_the_best() {
        let tariff = PriceSchedule::default();
        let two = [GpuType { idle_w: 57.0 }, GpuType { idle_w: 40.0 }];
        // Node 0 of type 0 with 4 GPUs free, node 1 of type 1 full, node 2 of type 1 busy.
        let nodes = [
            node(NodePower::On, 4, 0.0),
            NodeView { gpu_type: 1, ..node(NodePower::On, 0, 0.0) },
            NodeView { gpu_type: 1, ..node(NodePower::Busy, 8, 0.0) },
        ];
        let s = Snapshot {
            now: 0.0,
            utc_offset_s: 0,
            nodes: &nodes,
            gpu_types: &two,
            models: &[],
            queued: &[],
            held: &[],
            running: &[],
            arrivals: &[],
            arrival_types: &[],
            tariff: &tariff,
            budget_w: None,
            node: NodeCosts::default(),
            job_nodes: &ANYWHERE,
            sharing: None,
            lagging: &[],
        };
        assert_eq!(type_to_start(&s, 7, 2, &[1, 0]), Some(0));
        assert_eq!(type_to_start(&s, 7, 6, &[1, 0]), Some(1));
        assert_eq!(type_to_start(&s, 7, 2, &[1]), Some(1));
        assert_eq!(type_to_start(&s, 7, 2, &[]), None);
        // A job that may not use node 0 waits for its best type.
        let only = super::super::JobNodes::from([(7, std::sync::Arc::from([1u32, 2]))]);
        assert_eq!(type_to_start(&Snapshot { job_nodes: &only, ..s }, 7, 2, &[1, 0]), Some(1));
    }
}
