//! Enforcing a job's GPU setting, and always undoing it.
//!
//! Every change is journaled in the store and committed before it is applied; the entry is
//! cleared only once the GPU is back at its defaults. The journal is replayed at start-up,
//! at shutdown and after every job end: any GPU changed for a job that is no longer running
//! goes back to its defaults, so no GPU stays slowed by a dead job or a crashed daemon.
//!
//! Functions of the GPUs and the store they are handed; the state owner calls them.

use tracing::{info, warn};

use crate::adapt::Changes;
use wattson_config::policy::Decision;
use wattson_gpu::GpuBackend;
use wattson_store::{GpuChange, Store};
use wattson_types::job::{JobKey, JobRecord};

/// A step of a setting change where the fault tests kill the daemon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "kebab-case")]
pub(crate) enum Step {
    /// The change is journaled; no GPU changed yet.
    Journaled,
    /// The GPUs changed; the caller not yet answered.
    Applied,
    /// A GPU is back at its defaults; its journal entry not yet cleared.
    Restored,
}

/// Debug builds only: `WATTSON_KILL_AT=<step>` kills the daemon (SIGKILL, as `kill -9` would)
/// at that step, for the fault tests. Release builds have no such hook.
fn kill_point(step: Step) {
    #[cfg(debug_assertions)]
    if std::env::var("WATTSON_KILL_AT").is_ok_and(|v| v == <&str>::from(step)) {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGKILL);
    }
    #[cfg(not(debug_assertions))]
    let _ = step;
}

/// `decision`'s fixed setting for each GPU of `record` that has one.
pub(crate) fn fixed(backend: &dyn GpuBackend, record: &JobRecord, decision: &Decision) -> Changes {
    record
        .gpus
        .iter()
        .filter_map(|gpu| Some((gpu.index, decision.setting_for(&backend.devices()[gpu.index as usize])?)))
        .collect()
}

/// Journals, then applies, settings of `job`'s GPUs at `now`; returns what was applied. A GPU
/// that refuses keeps (or returns to) its defaults, and the job runs anyway.
pub(crate) fn apply(
    backend: &dyn GpuBackend,
    store: &mut Store,
    job: &JobKey,
    wanted: &[(u32, wattson_gpu::GpuSetting)],
    now: i64,
) -> Changes {
    let changes: Vec<GpuChange> = wanted
        .iter()
        .map(|&(gpu_index, setting)| GpuChange {
            gpu_index,
            uuid: backend.devices()[gpu_index as usize].uuid.clone(),
            job: job.clone(),
            setting,
            applied_ns: now,
        })
        .collect();
    if changes.is_empty() {
        return Vec::new();
    }
    if let Err(e) = store.journal_gpu_changes(&changes) {
        warn!(job = %job, error = %e, "cannot journal GPU changes; leaving the GPUs as they are");
        return Vec::new();
    }
    kill_point(Step::Journaled);
    let mut applied = Vec::new();
    let mut refused = Vec::new();
    for change in changes {
        match backend.apply(change.gpu_index, change.setting) {
            Ok(()) => {
                info!(job = %job, gpu = change.gpu_index, setting = ?change.setting, "GPU setting applied");
                applied.push((change.gpu_index, change.setting));
            }
            Err(e) => {
                warn!(job = %job, gpu = change.gpu_index, error = %e, "GPU refused the setting; it goes back to its defaults");
                refused.push(change);
            }
        }
    }
    restore(backend, store, &refused);
    kill_point(Step::Applied);
    applied
}

/// Applies again every journaled setting whose job is still running: after a crash between
/// the journal and the GPU (or a GPU reset), the job gets what was decided for it.
pub(crate) fn reapply_running(backend: &dyn GpuBackend, store: &Store, is_running: impl Fn(&JobKey) -> bool) {
    let Ok(changes) = store.gpu_changes() else { return };
    for change in changes.iter().filter(|c| is_running(&c.job)) {
        let same_gpu =
            backend.devices().get(change.gpu_index as usize).is_some_and(|d| d.uuid == change.uuid);
        if !same_gpu {
            continue;
        }
        match backend.apply(change.gpu_index, change.setting) {
            Ok(()) => {
                info!(job = %change.job, gpu = change.gpu_index, setting = ?change.setting, "setting of a resumed job applied again")
            }
            Err(e) => {
                warn!(job = %change.job, gpu = change.gpu_index, error = %e, "cannot apply a resumed job's setting again")
            }
        }
    }
}

/// The settings journaled for `job`, by GPU.
pub(crate) fn journaled(store: &Store, job: &JobKey) -> Changes {
    match store.gpu_changes() {
        Ok(changes) => {
            changes.into_iter().filter(|c| &c.job == job).map(|c| (c.gpu_index, c.setting)).collect()
        }
        Err(e) => {
            warn!(error = %e, "cannot read the restore journal");
            Vec::new()
        }
    }
}

/// Returns `job`'s journaled GPUs to their defaults (the job keeps running at full speed);
/// returns how many could not be restored.
pub(crate) fn release(backend: &dyn GpuBackend, store: &mut Store, job: &JobKey) -> usize {
    match store.gpu_changes() {
        Ok(changes) => {
            let mine: Vec<GpuChange> = changes.into_iter().filter(|c| &c.job == job).collect();
            restore(backend, store, &mine)
        }
        Err(e) => {
            warn!(error = %e, "cannot read the restore journal");
            0
        }
    }
}

/// Returns to defaults every journaled GPU whose job is not running. Returns how many GPUs
/// are still waiting to be restored (their restore failed).
pub(crate) fn restore_orphans(
    backend: &dyn GpuBackend,
    store: &mut Store,
    is_running: impl Fn(&JobKey) -> bool,
) -> usize {
    match store.gpu_changes() {
        Ok(changes) => {
            let orphans: Vec<GpuChange> = changes.into_iter().filter(|c| !is_running(&c.job)).collect();
            restore(backend, store, &orphans)
        }
        Err(e) => {
            warn!(error = %e, "cannot read the restore journal");
            0
        }
    }
}

/// Restores GPUs and clears their journal entries; returns how many could not be restored.
fn restore(backend: &dyn GpuBackend, store: &mut Store, changes: &[GpuChange]) -> usize {
    let mut done = Vec::new();
    for change in changes {
        // A different GPU at this index (hardware changed while the daemon was down) was
        // never touched by wattson: only its journal entry goes.
        let same_gpu =
            backend.devices().get(change.gpu_index as usize).is_some_and(|d| d.uuid == change.uuid);
        match if same_gpu { backend.restore_defaults(change.gpu_index) } else { Ok(()) } {
            Ok(()) => {
                info!(gpu = change.gpu_index, job = %change.job, "GPU back at its defaults");
                kill_point(Step::Restored);
                done.push(change.gpu_index);
            }
            Err(e) => {
                warn!(gpu = change.gpu_index, job = %change.job, error = %e, "cannot restore GPU defaults; will retry")
            }
        }
    }
    if let Err(e) = store.clear_gpu_changes(&done) {
        warn!(error = %e, "GPUs restored but their journal entries remain; will retry");
        return changes.len();
    }
    changes.len() - done.len()
}
