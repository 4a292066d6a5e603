//! Enforcing a job's GPU setting, and always undoing it.
//!
//! Every change is journaled in the store and committed before it is applied; the entry is
//! cleared only once the GPU is back at its defaults. The journal is replayed at start-up,
//! at shutdown and after every job end: any GPU changed for a job that is no longer running
//! goes back to its defaults, so no GPU stays slowed by a dead job or a crashed daemon.

use tracing::{info, warn};

use super::core::Core;
use crate::gpu::{GpuSetting, now_ns};
use crate::job::{JobKey, JobRecord};
use crate::policy::Decision;
use crate::store::GpuChange;

impl Core {
    /// Applies `decision` to the GPUs of a job that just began; returns what was applied.
    /// A GPU that refuses the setting keeps its defaults and the job runs anyway.
    pub(super) fn enforce(&mut self, record: &JobRecord, decision: &Decision) -> Vec<(u32, GpuSetting)> {
        let mut applied = Vec::new();
        for gpu in &record.gpus {
            let info = self.backend().devices()[gpu.index as usize].clone();
            let Some(setting) = decision.setting_for(&info) else { continue };
            let change = GpuChange {
                gpu_index: gpu.index,
                uuid: info.uuid.clone(),
                job: record.key.clone(),
                setting,
                applied_ns: now_ns(),
            };
            if let Err(e) = self.store_mut().journal_gpu_change(&change) {
                warn!(job = %record.key, gpu = gpu.index, error = %e, "cannot journal a GPU change; leaving the GPU at its defaults");
                continue;
            }
            match self.backend().apply(gpu.index, setting) {
                Ok(()) => {
                    info!(job = %record.key, gpu = gpu.index, ?setting, "GPU setting applied");
                    applied.push((gpu.index, setting));
                }
                Err(e) => {
                    warn!(job = %record.key, gpu = gpu.index, error = %e, "GPU refused the setting; job runs at defaults");
                    self.restore(&change);
                }
            }
        }
        applied
    }

    /// The settings journaled for `job`, by GPU.
    pub(super) fn settings_of(&self, job: &JobKey) -> Vec<(u32, GpuSetting)> {
        match self.store().gpu_changes() {
            Ok(changes) => {
                changes.into_iter().filter(|c| &c.job == job).map(|c| (c.gpu_index, c.setting)).collect()
            }
            Err(e) => {
                warn!(error = %e, "cannot read the restore journal");
                Vec::new()
            }
        }
    }

    /// Returns to defaults every journaled GPU whose job is not running. Returns how many
    /// GPUs are still waiting to be restored (their restore failed).
    pub fn restore_orphans(&mut self) -> usize {
        let changes = match self.store().gpu_changes() {
            Ok(changes) => changes,
            Err(e) => {
                warn!(error = %e, "cannot read the restore journal");
                return 0;
            }
        };
        let orphans: Vec<GpuChange> = changes.into_iter().filter(|c| !self.is_running(&c.job)).collect();
        orphans.iter().filter(|change| !self.restore(change)).count()
    }

    /// Restores one GPU and clears its journal entry; false if the GPU could not be restored.
    fn restore(&mut self, change: &GpuChange) -> bool {
        let same_gpu =
            self.backend().devices().get(change.gpu_index as usize).is_some_and(|d| d.uuid == change.uuid);
        if same_gpu && let Err(e) = self.backend().restore_defaults(change.gpu_index) {
            warn!(gpu = change.gpu_index, job = %change.job, error = %e, "cannot restore GPU defaults; will retry");
            return false;
        }
        if let Err(e) = self.store_mut().clear_gpu_change(change.gpu_index) {
            warn!(gpu = change.gpu_index, error = %e, "GPU restored but its journal entry remains; will retry");
            return false;
        }
        info!(gpu = change.gpu_index, job = %change.job, "GPU back at its defaults");
        true
    }
}
