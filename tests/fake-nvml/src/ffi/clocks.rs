//! The clocks: the supported ones, the locked range and the application clocks.

use super::{INVALID, R, out, out_list, run, with_device, with_device_priv};
use crate::config::GpuSpec;
use crate::state::{self, GpuState};
use nvml_wrapper_sys::bindings::*;
use std::ffi::c_uint;

/// The supported memory clock(s), size protocol.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetSupportedMemoryClocks(
    device: nvmlDevice_t,
    count: *mut c_uint,
    clocks: *mut c_uint,
) -> nvmlReturn_t {
    run(|| {
        let list = with_device(device, |_, spec, _| Ok(vec![spec.mem_clock_mhz]))?;
        out_list(count, clocks, &list)
    })
}

/// Supported SM clocks (descending) for the given memory clock, size protocol.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetSupportedGraphicsClocks(
    device: nvmlDevice_t,
    mem_clock: c_uint,
    count: *mut c_uint,
    clocks: *mut c_uint,
) -> nvmlReturn_t {
    run(|| {
        let list = with_device(device, |_, spec, _| {
            if mem_clock == spec.mem_clock_mhz {
                Ok(spec.sm_clocks_mhz.clone())
            } else {
                Err(nvmlReturn_enum_NVML_ERROR_NOT_FOUND)
            }
        })?;
        out_list(count, clocks, &list)
    })
}

/// Locks the SM clock range (root; supported clocks, min <= max).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceSetGpuLockedClocks(
    device: nvmlDevice_t,
    min: c_uint,
    max: c_uint,
) -> nvmlReturn_t {
    run(|| with_device_priv(device, |spec, gs| state::set_locked_clocks(spec, gs, min, max)))
}

/// Removes the SM clock lock (root).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceResetGpuLockedClocks(device: nvmlDevice_t) -> nvmlReturn_t {
    run(|| {
        with_device_priv(device, |_, gs| {
            gs.locked_clocks_mhz = None;
            Ok(())
        })
    })
}

/// Sets application clocks (root; supported memory and SM clocks).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceSetApplicationsClocks(
    device: nvmlDevice_t,
    mem: c_uint,
    graphics: c_uint,
) -> nvmlReturn_t {
    run(|| with_device_priv(device, |spec, gs| state::set_app_clocks(spec, gs, mem, graphics)))
}

/// Restores the default application clocks (root).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceResetApplicationsClocks(device: nvmlDevice_t) -> nvmlReturn_t {
    run(|| {
        with_device_priv(device, |spec, gs| {
            gs.app_clock_mhz = spec.max_clock();
            Ok(())
        })
    })
}

/// Current application clock of the given type, MHz.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetApplicationsClock(
    device: nvmlDevice_t,
    kind: nvmlClockType_t,
    mhz: *mut c_uint,
) -> nvmlReturn_t {
    run(|| {
        let v = with_device(device, |_, spec, gs| match kind {
            nvmlClockType_enum_NVML_CLOCK_GRAPHICS | nvmlClockType_enum_NVML_CLOCK_SM => Ok(gs.app_clock_mhz),
            _ => clock_of(spec, gs, kind, true),
        })?;
        out(mhz, v)
    })
}

/// Default application clock of the given type, MHz.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetDefaultApplicationsClock(
    device: nvmlDevice_t,
    kind: nvmlClockType_t,
    mhz: *mut c_uint,
) -> nvmlReturn_t {
    run(|| out(mhz, with_device(device, |_, spec, gs| clock_of(spec, gs, kind, true))?))
}

/// Current effective clock of the given type, MHz (lowered when the power cap binds).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetClockInfo(
    device: nvmlDevice_t,
    kind: nvmlClockType_t,
    mhz: *mut c_uint,
) -> nvmlReturn_t {
    run(|| out(mhz, with_device(device, |_, spec, gs| clock_of(spec, gs, kind, false))?))
}

/// Highest clock of the given type, MHz.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMaxClockInfo(
    device: nvmlDevice_t,
    kind: nvmlClockType_t,
    mhz: *mut c_uint,
) -> nvmlReturn_t {
    run(|| out(mhz, with_device(device, |_, spec, gs| clock_of(spec, gs, kind, true))?))
}

fn clock_of(spec: &GpuSpec, gs: &GpuState, clock: nvmlClockType_t, max: bool) -> R<u32> {
    let sm = if max { spec.max_clock() } else { gs.sm_clock_mhz };
    match clock {
        nvmlClockType_enum_NVML_CLOCK_GRAPHICS | nvmlClockType_enum_NVML_CLOCK_SM => Ok(sm),
        nvmlClockType_enum_NVML_CLOCK_MEM => Ok(spec.mem_clock_mhz),
        nvmlClockType_enum_NVML_CLOCK_VIDEO => Ok(sm * 9 / 10),
        _ => Err(INVALID),
    }
}
