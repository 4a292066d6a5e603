//! Each job's share of the node's energy besides its GPUs (CPU, DRAM, the whole node) and
//! the scope of its figure in Slurm: one JSON column of `jobs`, written at every sample.

use rusqlite::{Connection, TransactionBehavior, params};

use super::{Store, StoreError};
use wattson_types::job::JobKey;
use wattson_types::scope::NodeShare;

/// Reads the column of `key`'s row.
pub(crate) fn decode(key: &JobKey, text: Option<String>) -> Result<Option<NodeShare>, StoreError> {
    text.map(|text| serde_json::from_str(&text))
        .transpose()
        .map_err(|e| StoreError::Corrupt(format!("job {key}: node_share: {e}")))
}

/// Writes the share of the row `id`.
pub(crate) fn write(conn: &Connection, id: i64, share: &NodeShare) -> Result<(), StoreError> {
    let text = serde_json::to_string(share).map_err(|e| StoreError::Corrupt(e.to_string()))?;
    conn.prepare_cached("UPDATE jobs SET node_share = ?1 WHERE id = ?2")?.execute(params![text, id])?;
    Ok(())
}

impl Store {
    /// Updates the node shares of running jobs, in one transaction; keys without a RUNNING
    /// record are skipped (the meters' own save reports them).
    pub fn save_node_shares(&mut self, shares: &[(JobKey, NodeShare)]) -> Result<(), StoreError> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        for (key, share) in shares {
            if let Some(id) = super::running_id(&tx, key)? {
                write(&tx, id, share)?;
            }
        }
        tx.commit()?;
        Ok(())
    }
}
