//! Placement as Slurm can be told it: node weights. Slurm gives a job the lowest-weight nodes
//! that fit it, so weights ordered as [`Placement::Pack`] orders nodes make Slurm place as the
//! simulator does: powered-on nodes first, then booting, then sleeping ones, and among them the
//! node with the fewest free GPUs that still fits (best fit). On a cluster of several GPU
//! types, [`type_order`] says which type a job should try first (a job runs on one type).

use super::{ClusterPolicy, JobView, Level, NodePower, Placement, Snapshot, TunedPolicy};

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
