//! GPUs known by UUID across restarts. NVML may number the GPUs otherwise from one start of the
//! daemon to the next (a reboot, a driver reload, a GPU added, removed or replaced), so what
//! outlived the process (running records, the restore journal) is matched to the GPUs present
//! by UUID before anything is read or set by index.

use std::collections::BTreeMap;

use tracing::{info, warn};

use wattson_gpu::GpuBackend;
use wattson_store::{GpuChange, Store};
use wattson_types::job::{JobKey, JobRecord};

/// The NVML index of the GPU with `uuid` now, if it is present.
fn index_of(backend: &dyn GpuBackend, uuid: &str) -> Option<u32> {
    backend.devices().iter().find(|d| d.uuid == uuid).map(|d| d.index)
}

/// Matches resumed running records and the restore journal to the GPUs present now, by UUID.
/// A GPU that moved takes its new index, in the store too; a record with a GPU that is gone is
/// closed at `now`, the gone GPU's meter marked lost with the energy it had (the others read a
/// last time). Returns the records still running.
pub(crate) fn match_gpus(
    backend: &dyn GpuBackend,
    store: &mut Store,
    records: Vec<JobRecord>,
    now: i64,
) -> Result<BTreeMap<JobKey, JobRecord>, String> {
    let mut running = BTreeMap::new();
    for mut record in records {
        let found: Vec<Option<u32>> = record.gpus.iter().map(|g| index_of(backend, &g.uuid)).collect();
        if found.iter().all(Option::is_some) {
            let moves: Vec<(u32, u32)> = record
                .gpus
                .iter()
                .zip(&found)
                .filter_map(|(g, &new)| new.filter(|&new| new != g.index).map(|new| (g.index, new)))
                .collect();
            if !moves.is_empty() {
                store
                    .move_running_gpus(&record.key, &moves)
                    .map_err(|e| format!("cannot renumber the GPUs of job {}: {e}", record.key))?;
                for (gpu, new) in record.gpus.iter_mut().zip(&found) {
                    if let Some(new) = *new
                        && new != gpu.index
                    {
                        info!(job = %record.key, uuid = %gpu.uuid, from = gpu.index, to = new, "GPU renumbered since the last start; the job's meter follows it");
                        gpu.index = new;
                    }
                }
                record.gpus.sort_by_key(|g| g.index);
            }
            running.insert(record.key.clone(), record);
            continue;
        }
        close_lost(backend, store, record, &found, now);
    }
    rekey_journal(backend, store);
    Ok(running)
}

/// Closes a record some of whose GPUs are gone: they are marked lost at `now`, the others read
/// a last time; the record keeps the indices it ran on.
fn close_lost(
    backend: &dyn GpuBackend,
    store: &mut Store,
    mut record: JobRecord,
    found: &[Option<u32>],
    now: i64,
) {
    let mut end_ns = now.max(record.begin_ns);
    for (gpu, index) in record.gpus.iter_mut().zip(found) {
        match index.map(|i| backend.read(i)) {
            Some(Ok(reading)) => {
                gpu.meter.advance(reading);
                end_ns = end_ns.max(reading.t_ns);
            }
            _ => gpu.meter.mark_lost(now),
        }
    }
    let gone: Vec<&str> =
        record.gpus.iter().zip(found).filter(|(_, i)| i.is_none()).map(|(g, _)| g.uuid.as_str()).collect();
    warn!(job = %record.key, gone = ?gone, "a GPU of a running job is gone since the last start: the job is closed, the GPU marked lost with the energy it had");
    if let Err(e) = store.end_job(&record.key, end_ns, &record.gpus) {
        warn!(job = %record.key, error = %e, "cannot close the job of a gone GPU");
    }
}

/// Gives every journal entry the index its GPU has now; entries of GPUs that are gone are
/// dropped (nothing is left to restore).
fn rekey_journal(backend: &dyn GpuBackend, store: &mut Store) {
    let changes = match store.gpu_changes() {
        Ok(changes) => changes,
        Err(e) => return warn!(error = %e, "cannot read the restore journal"),
    };
    let mut rekeyed: Vec<GpuChange> = Vec::with_capacity(changes.len());
    for change in &changes {
        match index_of(backend, &change.uuid) {
            Some(index) => rekeyed.push(GpuChange { gpu_index: index, ..change.clone() }),
            None => {
                warn!(uuid = %change.uuid, job = %change.job, "a GPU wattson changed is gone; its journal entry is dropped")
            }
        }
    }
    if rekeyed != changes
        && let Err(e) = store.replace_gpu_changes(&rekeyed)
    {
        warn!(error = %e, "cannot renumber the restore journal");
    }
}

/// Returns to its defaults every GPU no running job owns: one left changed by anything
/// (an older daemon, a crash between a change and its journal) goes back at the start.
pub(crate) fn restore_unowned(backend: &dyn GpuBackend, running: &BTreeMap<JobKey, JobRecord>) {
    for device in backend.devices() {
        let owned = running.values().any(|r| r.gpus.iter().any(|g| g.uuid == device.uuid));
        if owned {
            continue;
        }
        if let Err(e) = backend.restore_defaults(device.index) {
            warn!(gpu = device.index, error = %e, "cannot return a GPU no job owns to its defaults");
        }
    }
}
