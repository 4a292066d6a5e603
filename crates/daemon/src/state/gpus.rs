//! Which GPUs a job names, and which of their MIG instances: a job on MIG instances holds
//! their GPUs (one record per GPU, however many of its instances it holds), with the instances
//! in the record's meter, whose compute slices weigh its part of the GPU's energy. Also a job's
//! meter on each GPU as it starts, and the settings each GPU was given, noted in its meter.

use std::collections::BTreeMap;

use tracing::warn;

use wattson_gpu::{GpuBackend, GpuError, GpuSetting, MigInstance};
use wattson_types::energy::{GpuMeter, GpuReading, MeterEvent};
use wattson_types::job::{GpuRef, JobGpu, JobKey, JobRecord};

/// The MIG instances `job` holds, by their GPU's index (none without a job).
pub(super) fn instances_of(job: Option<&JobRecord>) -> BTreeMap<u32, Vec<MigInstance>> {
    job.into_iter()
        .flat_map(|job| job.gpus.iter())
        .filter(|g| !g.meter.mig.is_empty())
        .map(|g| (g.index, g.meter.mig.clone()))
        .collect()
}

/// Resolves `names` and adds each GPU's index to `indices` once, and each MIG instance to
/// `instances` under its GPU's index. A GPU named twice (whole twice, whole and as an
/// instance, or the same instance twice) is an error; two instances of one GPU are not.
pub(super) fn resolve(
    backend: &dyn GpuBackend,
    names: &[GpuRef],
    indices: &mut Vec<u32>,
    instances: &mut BTreeMap<u32, Vec<MigInstance>>,
) -> Result<(), String> {
    for name in names {
        let (index, instance) = backend.resolve_instance(name).map_err(|e| e.to_string())?;
        let held = instances.get(&index);
        let twice = match &instance {
            Some(m) => held.map_or(indices.contains(&index), |held| held.iter().any(|h| h.uuid == m.uuid)),
            None => indices.contains(&index),
        };
        if twice {
            return Err(format!("GPU {index} is named twice"));
        }
        if let Some(m) = instance {
            instances.entry(index).or_default().push(m);
        }
        if !indices.contains(&index) {
            indices.push(index);
        }
    }
    Ok(())
}

/// The jobs among `running` that hold MIG instances (by job id).
pub(super) fn mig_jobs(running: &BTreeMap<JobKey, JobRecord>) -> Vec<u32> {
    running
        .values()
        .filter(|r| r.gpus.iter().any(|g| !g.meter.mig.is_empty()))
        .map(|r| r.key.job_id)
        .collect()
}

/// A job's meter on GPU `index`, started at its first reading (or lost, at `t`, if the GPU
/// did not answer).
pub(super) fn begin_gpu(
    backend: &dyn GpuBackend,
    index: u32,
    reading: Result<GpuReading, GpuError>,
    t: i64,
) -> JobGpu {
    let info = &backend.devices()[index as usize];
    let meter = match reading {
        Ok(reading) => GpuMeter::begin(reading),
        Err(e) => {
            warn!(gpu = index, error = %e, "GPU did not answer at job start");
            GpuMeter::begin_lost(t)
        }
    };
    JobGpu { index, uuid: info.uuid.clone(), name: info.name.clone(), meter }
}

/// Most setting events kept per GPU of a job (a long job paced back and forth by the
/// controller keeps its first ones).
const MAX_SETTING_EVENTS: usize = 64;

/// Records on `record`'s GPUs that each was set (`None`: back to its defaults) at `now`.
pub(super) fn note_settings(
    record: &mut JobRecord,
    changes: impl Iterator<Item = (u32, Option<GpuSetting>)>,
    now: i64,
) {
    for (index, setting) in changes {
        let Some(gpu) = record.gpus.iter_mut().find(|g| g.index == index) else { continue };
        let kept = gpu.meter.events.iter().filter(|e| matches!(e, MeterEvent::Setting { .. })).count();
        if kept < MAX_SETTING_EVENTS {
            gpu.meter.events.push(MeterEvent::Setting { t_ns: now, setting });
        }
    }
}
