//! The restore journal: which GPUs wattson changed, for which job. A change is journaled and
//! committed before it is applied, and cleared only after the GPU is back at its defaults, so
//! after any crash the daemon knows every GPU it may have left slowed.

use rusqlite::params;

use super::{Store, StoreError};
use wattson_types::gpu::GpuSetting;
use wattson_types::job::JobKey;

/// One journaled change of a GPU's settings.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuChange {
    /// NVML index.
    pub gpu_index: u32,
    /// GPU UUID, to notice a different GPU at the same index after a reboot.
    pub uuid: String,
    /// The job the change was made for.
    pub job: JobKey,
    /// What was applied.
    pub setting: GpuSetting,
    /// When, ns since the epoch.
    pub applied_ns: i64,
}

impl Store {
    /// Journals changes (replacing earlier entries for the same GPUs), durably, in one commit.
    pub fn journal_gpu_changes(&mut self, changes: &[GpuChange]) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        for change in changes {
            let setting =
                serde_json::to_string(&change.setting).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            tx.execute(
                "INSERT OR REPLACE INTO gpu_changes (gpu_index, uuid, job_id, step, setting, applied_ns)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
                params![
                    change.gpu_index,
                    change.uuid,
                    change.job.job_id,
                    change.job.step,
                    setting,
                    change.applied_ns
                ],
            )?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Every journaled change, by GPU index.
    pub fn gpu_changes(&self) -> Result<Vec<GpuChange>, StoreError> {
        let mut stmt = self.conn.prepare(
            "SELECT gpu_index, uuid, job_id, step, setting, applied_ns FROM gpu_changes ORDER BY gpu_index",
        )?;
        let rows = stmt.query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get::<_, String>(4)?, r.get(5)?))
        })?;
        let mut out = Vec::new();
        for row in rows {
            let (gpu_index, uuid, job_id, step, setting, applied_ns) = row?;
            let setting = serde_json::from_str(&setting).map_err(|e| StoreError::Corrupt(e.to_string()))?;
            out.push(GpuChange { gpu_index, uuid, job: JobKey { job_id, step }, setting, applied_ns });
        }
        Ok(out)
    }

    /// Removes the journal entries of GPUs that are back at their defaults, in one commit.
    pub fn clear_gpu_changes(&mut self, gpu_indices: &[u32]) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        for index in gpu_indices {
            tx.execute("DELETE FROM gpu_changes WHERE gpu_index = ?1", params![index])?;
        }
        tx.commit()?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn journal_round_trips_and_clears() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("s.db")).unwrap();
        let change = GpuChange {
            gpu_index: 3,
            uuid: "GPU-3".into(),
            job: JobKey { job_id: 42, step: String::new() },
            setting: GpuSetting::PowerLimit { mw: 420_000 },
            applied_ns: 7,
        };
        store.journal_gpu_changes(std::slice::from_ref(&change)).unwrap();
        drop(store);
        let mut store = Store::open(&dir.path().join("s.db")).unwrap();
        assert_eq!(store.gpu_changes().unwrap(), vec![change]);
        store.clear_gpu_changes(&[3]).unwrap();
        assert!(store.gpu_changes().unwrap().is_empty());
    }
}
