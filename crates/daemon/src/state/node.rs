//! The state's part in the node's energy besides its GPUs: each new job starts a share, each
//! sample of the node's meters is shared among the running jobs ([`crate::node_energy::apportion`])
//! and the shares are persisted.

use tracing::warn;

use super::State;
use crate::node_energy::{NodeTotals, apportion};
use wattson_types::job::JobKey;
use wattson_types::scope::NodeShare;

impl State {
    /// From now on, each job begins with `empty` as its share of the node's energy (the
    /// scope, and zero of each part this node measures).
    pub fn measure_node(&mut self, empty: NodeShare) {
        self.node_share = Some(empty);
    }

    /// Shares what the node drew since the last call among the running jobs, and persists
    /// their shares.
    pub fn charge_node(&mut self, now: NodeTotals) {
        if let Some(prev) = self.last_node.replace(now) {
            apportion::charge(&prev, &now, &mut self.running);
        }
        let keys: Vec<JobKey> = self.running.keys().cloned().collect();
        self.save_node_shares(&keys);
    }

    /// Writes the shares of `keys` (running records, or ended ones not yet recorded).
    pub(super) fn save_node_shares(&mut self, keys: &[JobKey]) {
        let shares: Vec<(JobKey, NodeShare)> = keys
            .iter()
            .filter_map(|k| {
                let record = self.running.get(k).or_else(|| self.unrecorded_ends.get(k))?;
                // A share with no part measured holds nothing to keep but its scope, written
                // at the begin.
                let share = record.node_share.filter(|s| s.cpu_mj.or(s.dram_mj).or(s.node_mj).is_some())?;
                Some((k.clone(), share))
            })
            .collect();
        if shares.is_empty() {
            return;
        }
        if let Err(e) = self.store.save_node_shares(&shares) {
            warn!(error = %e, "cannot persist the jobs' node energy shares; will retry next sample");
        }
    }
}
