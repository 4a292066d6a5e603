//! Placement as Slurm can be told it: node weights. Slurm gives a job the lowest-weight nodes
//! that fit it, so weights ordered as [`Placement::Pack`] orders nodes make Slurm place as the
//! simulator does: powered-on nodes first, then booting, then sleeping ones, and among them the
//! node with the fewest free GPUs that still fits (best fit).

use super::{NodePower, Placement, Policy, Snapshot};

/// A weight per node of `s` (1 and up), or `None` when `p` places first fit (Slurm's default
/// order, no weights to set).
pub fn node_weights(p: &Policy, s: &Snapshot) -> Option<Vec<u32>> {
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
