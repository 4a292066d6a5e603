//! The processes on a GPU: the running compute processes and their utilisation.

use super::{INVALID, out, run, with_device, with_device_at};
use nvml_wrapper_sys::bindings::*;
use std::ffi::{c_uint, c_ulonglong};

/// Running compute processes: those set with `Sim::set_processes` (none by default).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetComputeRunningProcesses_v3(
    device: nvmlDevice_t,
    count: *mut c_uint,
    infos: *mut nvmlProcessInfo_t,
) -> nvmlReturn_t {
    run(|| {
        let processes = with_device(device, |_, _, gs| Ok(gs.processes.clone()))?;
        if count.is_null() {
            return Err(INVALID);
        }
        // SAFETY: non-null pointer from the caller.
        let room = unsafe { count.read() } as usize;
        out(count, processes.len() as c_uint)?;
        if processes.is_empty() {
            return Ok(());
        }
        if infos.is_null() || room < processes.len() {
            return Err(nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE);
        }
        for (i, p) in processes.iter().enumerate() {
            let info = nvmlProcessInfo_t {
                pid: p.pid,
                usedGpuMemory: 0,
                gpuInstanceId: u32::MAX,
                computeInstanceId: u32::MAX,
            };
            // SAFETY: the caller's buffer holds `room` >= len entries.
            unsafe { infos.add(i).write(info) };
        }
        Ok(())
    })
}

/// Per-process utilisation: one sample per process set with `Sim::set_processes`, stamped now
/// (µs; NOT_SUPPORTED in MIG mode); `NVML_ERROR_NOT_FOUND` without processes, as the driver answers without samples. With
/// a null buffer or a short one, the count needed and `NVML_ERROR_INSUFFICIENT_SIZE`.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetProcessUtilization(
    device: nvmlDevice_t,
    utilization: *mut nvmlProcessUtilizationSample_t,
    count: *mut c_uint,
    _last_seen_timestamp: c_ulonglong,
) -> nvmlReturn_t {
    run(|| {
        let (supported, processes, t_ns) = with_device_at(device, |_, _, gs, t_ns| {
            Ok((gs.process_utilization, gs.processes.clone(), t_ns))
        })?;
        if !supported || super::mig::mig_on(device)? {
            return Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED);
        }
        if count.is_null() {
            return Err(INVALID);
        }
        if processes.is_empty() {
            return Err(nvmlReturn_enum_NVML_ERROR_NOT_FOUND);
        }
        // SAFETY: non-null pointer from the caller.
        let room = unsafe { count.read() } as usize;
        out(count, processes.len() as c_uint)?;
        if utilization.is_null() || room < processes.len() {
            return Err(nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE);
        }
        for (i, p) in processes.iter().enumerate() {
            let sample = nvmlProcessUtilizationSample_t {
                pid: p.pid,
                timeStamp: (t_ns / 1000).max(0) as c_ulonglong,
                smUtil: p.sm_pct,
                memUtil: 0,
                encUtil: 0,
                decUtil: 0,
            };
            // SAFETY: the caller's buffer holds `room` >= len samples.
            unsafe { utilization.add(i).write(sample) };
        }
        Ok(())
    })
}
