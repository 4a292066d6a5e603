//! GPUs renumbered between two starts of the daemon: the running records and the restore
//! journal follow each GPU to its new NVML index (the daemon finds it by UUID).

use rusqlite::params;

use super::{GpuChange, Store, StoreError, running_id};
use wattson_types::job::JobKey;

impl Store {
    /// Moves the GPUs of the RUNNING record `key` from old to new NVML indices, `(old, new)`
    /// pairs, in one commit (indices may swap). [`StoreError::NotRunning`] if there is no
    /// RUNNING record.
    pub fn move_running_gpus(&mut self, key: &JobKey, moves: &[(u32, u32)]) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        let id = running_id(&tx, key)?.ok_or_else(|| StoreError::NotRunning(key.clone()))?;
        // Through negative indices, so that two GPUs may trade places.
        for &(old, new) in moves {
            tx.execute(
                "UPDATE job_gpus SET gpu_index = ?1 WHERE job = ?2 AND gpu_index = ?3",
                params![-1 - i64::from(new), id, old],
            )?;
        }
        tx.execute(
            "UPDATE job_gpus SET gpu_index = -1 - gpu_index WHERE job = ?1 AND gpu_index < 0",
            params![id],
        )?;
        tx.commit()?;
        Ok(())
    }

    /// Replaces the whole restore journal with `changes`, in one commit.
    pub fn replace_gpu_changes(&mut self, changes: &[GpuChange]) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        tx.execute("DELETE FROM gpu_changes", [])?;
        tx.commit()?;
        self.journal_gpu_changes(changes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Hold;
    use wattson_types::energy::{GpuMeter, GpuReading};
    use wattson_types::gpu::GpuSetting;
    use wattson_types::job::{JobGpu, JobRecord, JobState};

    #[test]
    fn two_gpus_of_a_running_job_trade_places_and_the_journal_follows() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("s.db")).unwrap();
        let gpu = |index: u32| JobGpu {
            index,
            uuid: format!("GPU-{index}"),
            name: "H100".into(),
            meter: GpuMeter::begin(GpuReading {
                t_ns: 1,
                energy_mj: Some(u64::from(index) * 1000),
                ..Default::default()
            }),
        };
        let record = JobRecord {
            key: JobKey::job(7),
            uid: 1000,
            user: None,
            name: None,
            node: "n1".into(),
            begin_ns: 1,
            end_ns: None,
            state: JobState::Running,
            hints: Default::default(),
            policy: None,
            gpus: vec![gpu(0), gpu(1), gpu(2)],
            dvfs: None,
            node_share: None,
        };
        store.begin_job(&record, Hold::Shared).unwrap();
        store.move_running_gpus(&record.key, &[(0, 1), (1, 0)]).unwrap();
        let running = store.running_jobs().unwrap();
        let moved: Vec<(u32, &str)> = running[0].gpus.iter().map(|g| (g.index, g.uuid.as_str())).collect();
        assert_eq!(moved, [(0, "GPU-1"), (1, "GPU-0"), (2, "GPU-2")]);

        let change = |gpu_index: u32, uuid: &str| GpuChange {
            gpu_index,
            uuid: uuid.into(),
            job: JobKey::job(7),
            setting: GpuSetting::PowerLimit { mw: 420_000 },
            applied_ns: 1,
        };
        store.journal_gpu_changes(&[change(0, "GPU-0"), change(1, "GPU-1")]).unwrap();
        store.replace_gpu_changes(&[change(0, "GPU-1"), change(1, "GPU-0")]).unwrap();
        assert_eq!(store.gpu_changes().unwrap(), [change(0, "GPU-1"), change(1, "GPU-0")]);
        assert!(store.move_running_gpus(&JobKey::job(8), &[(0, 1)]).is_err());
    }
}
