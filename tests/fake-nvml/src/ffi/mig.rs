//! The NVML symbols of MIG ([`crate::mig`]): the mode, the instances' handles and what each
//! is (UUID, name, GPU and compute instance ids, slices). Energy, power and settings are
//! asked of the physical GPU; on a MIG handle those calls answer `INVALID_ARGUMENT`.

use super::{INVALID, R, handle_for, handle_index, locked, out, run, with_device};
use crate::mig::{self, MigInstance};
use nvml_wrapper_sys::bindings::*;
use std::ffi::c_uint;

const NOT_SUPPORTED: nvmlReturn_t = nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED;

/// The instance a MIG handle names (`Ok(None)`: a physical GPU's handle); lost GPUs' instances
/// are lost too.
pub(super) fn instance_of(device: nvmlDevice_t) -> R<Option<MigInstance>> {
    let Some((gpu, k)) = mig::from_handle(device.addr()) else { return Ok(None) };
    let instance = locked(|cfg, st| {
        let gs = st.gpus.get(gpu).ok_or(INVALID)?;
        if gs.lost {
            return Err(nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST);
        }
        mig::instances(cfg, gpu).into_iter().find(|m| m.index == k).ok_or(INVALID)
    })?;
    Ok(Some(instance))
}

/// The name of a MIG instance: its GPU's, then `MIG` and the profile.
pub(super) fn name_of(instance: &MigInstance) -> R<String> {
    let gpu = handle_for(instance.gpu as usize);
    with_device(gpu, |_, spec, _| Ok(format!("{} MIG {}", spec.name, instance.profile)))
}

/// Whether the GPU of a physical handle is in MIG mode.
pub(super) fn mig_on(device: nvmlDevice_t) -> R<bool> {
    let gpu = handle_index(device)?;
    with_device(device, |cfg, _, _| Ok(mig::enabled(cfg, gpu)))
}

/// Current and pending MIG mode: 1 with instances configured, else 0 (NOT_SUPPORTED on a GPU
/// without MIG, such as a V100).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMigMode(
    device: nvmlDevice_t,
    current: *mut c_uint,
    pending: *mut c_uint,
) -> nvmlReturn_t {
    run(|| {
        if current.is_null() || pending.is_null() {
            return Err(INVALID);
        }
        let gpu = handle_index(device)?;
        let mode = with_device(device, |cfg, _, _| match cfg.gpu[gpu].model.as_str() {
            "A100" | "H100" => Ok(u32::from(mig::enabled(cfg, gpu))),
            _ => Err(NOT_SUPPORTED),
        })?;
        out(current, mode)?;
        out(pending, mode)
    })
}

/// Most MIG instances the GPU can hold (7 on A100 and H100).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMaxMigDeviceCount(device: nvmlDevice_t, count: *mut c_uint) -> nvmlReturn_t {
    run(|| {
        let gpu = handle_index(device)?;
        let n = with_device(device, |cfg, _, _| match cfg.gpu[gpu].model.as_str() {
            "A100" | "H100" => Ok(mig::MAX_INSTANCES),
            _ => Err(NOT_SUPPORTED),
        })?;
        out(count, n)
    })
}

/// The handle of MIG instance `index` of a GPU (NOT_FOUND past its instances).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMigDeviceHandleByIndex(
    device: nvmlDevice_t,
    index: c_uint,
    mig_device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    run(|| {
        if mig_device.is_null() || index >= mig::MAX_INSTANCES {
            return Err(INVALID);
        }
        let gpu = handle_index(device)?;
        let n = with_device(device, |cfg, _, _| {
            if mig::enabled(cfg, gpu) { Ok(mig::instances(cfg, gpu).len()) } else { Err(INVALID) }
        })?;
        if index as usize >= n {
            return Err(nvmlReturn_enum_NVML_ERROR_NOT_FOUND);
        }
        out(mig_device, std::ptr::without_provenance_mut(mig::handle(gpu, index)))
    })
}

/// The physical GPU of a MIG handle.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetDeviceHandleFromMigDeviceHandle(
    mig_device: nvmlDevice_t,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    run(|| {
        let instance = instance_of(mig_device)?.ok_or(INVALID)?;
        out(device, handle_for(instance.gpu as usize))
    })
}

/// 1 for a MIG handle, 0 for a physical GPU's.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceIsMigDeviceHandle(device: nvmlDevice_t, is_mig: *mut c_uint) -> nvmlReturn_t {
    run(|| {
        let mig = match instance_of(device)? {
            Some(_) => 1,
            None => {
                handle_index(device)?;
                0
            }
        };
        out(is_mig, mig)
    })
}

/// The GPU instance id of a MIG handle (NOT_SUPPORTED on a physical GPU's).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetGpuInstanceId(device: nvmlDevice_t, id: *mut c_uint) -> nvmlReturn_t {
    run(|| out(id, instance_or_unsupported(device)?.gpu_instance_id))
}

/// The compute instance id of a MIG handle (NOT_SUPPORTED on a physical GPU's).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetComputeInstanceId(device: nvmlDevice_t, id: *mut c_uint) -> nvmlReturn_t {
    run(|| out(id, instance_or_unsupported(device)?.compute_instance_id))
}

fn instance_or_unsupported(device: nvmlDevice_t) -> R<MigInstance> {
    match instance_of(device)? {
        Some(instance) => Ok(instance),
        None => {
            handle_index(device)?;
            Err(NOT_SUPPORTED)
        }
    }
}

/// What a GPU or MIG instance is made of: its slices and memory (a whole GPU: all 7 slices).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetAttributes_v2(
    device: nvmlDevice_t,
    attributes: *mut nvmlDeviceAttributes_t,
) -> nvmlReturn_t {
    run(|| {
        let (gi, ci, memory_mb) = match instance_of(device)? {
            Some(m) => (m.gpu_slices, m.compute_slices, m.memory_mb),
            None => {
                let gpu = handle_index(device)?;
                let memory_gb =
                    with_device(device, |cfg, _, _| Ok(if cfg.gpu[gpu].model == "A100" { 40 } else { 80 }))?;
                (mig::GPU_SLICES, mig::GPU_SLICES, memory_gb * 1024)
            }
        };
        out(
            attributes,
            nvmlDeviceAttributes_t {
                multiprocessorCount: ci * 16,
                sharedCopyEngineCount: gi,
                sharedDecoderCount: gi / 2,
                sharedEncoderCount: 0,
                sharedJpegCount: gi / 7,
                sharedOfaCount: gi / 7,
                gpuInstanceSliceCount: gi,
                computeInstanceSliceCount: ci,
                memorySizeMB: memory_mb,
            },
        )
    })
}
