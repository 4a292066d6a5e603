//! The exported NVML C symbols, with the names and calling protocols nvml-wrapper 0.13 uses.
//!
//! Device handles are `(index + 1)` as a pointer-sized token.  No panic crosses the C
//! boundary: every body runs under `catch_unwind` and maps a panic to
//! `NVML_ERROR_UNKNOWN`.

// The bindgen constants used as match patterns are lower-case.
#![allow(non_upper_case_globals)]

use crate::config::{Config, GpuSpec, parse_pci_bus_id};
use crate::state::{self, Code, GpuState};
use nvml_wrapper_sys::bindings::*;
use std::ffi::{CStr, c_char, c_uint, c_ulonglong};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::Mutex;

mod clocks;
mod mig;
mod processes;

/// Environment variable naming the fake driver directory, read by `nvmlInit_v2`.
pub const DIR_ENV: &str = "WATTSON_FAKE_NVML_DIR";

const SUCCESS: Code = nvmlReturn_enum_NVML_SUCCESS;
const INVALID: Code = nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;
const UNKNOWN: Code = nvmlReturn_enum_NVML_ERROR_UNKNOWN;
const MAX_GPUS: usize = 4096;

/// (driver directory, init reference count) while initialised.
static INIT: Mutex<Option<(PathBuf, u32)>> = Mutex::new(None);

/// Each GPU's counter read time (`read_latency_ms`), ns, by NVML index: read from the
/// configuration at init, as it changes only between driver loads.
static READ_LATENCY_NS: Mutex<Vec<u64>> = Mutex::new(Vec::new());

type R<T = ()> = Result<T, Code>;

fn run(f: impl FnOnce() -> R) -> Code {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(())) => SUCCESS,
        Ok(Err(code)) => code,
        Err(_) => UNKNOWN,
    }
}

fn init_slot() -> std::sync::MutexGuard<'static, Option<(PathBuf, u32)>> {
    INIT.lock().unwrap_or_else(|e| e.into_inner())
}

fn driver_dir() -> R<PathBuf> {
    init_slot().as_ref().map(|(d, _)| d.clone()).ok_or(nvmlReturn_enum_NVML_ERROR_UNINITIALIZED)
}

fn do_init() -> R {
    let mut slot = init_slot();
    if let Some((_, count)) = slot.as_mut() {
        *count += 1;
        return Ok(());
    }
    let not_loaded = nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED;
    let dir = PathBuf::from(std::env::var_os(DIR_ENV).ok_or(not_loaded)?);
    let cfg = match Config::load(&dir) {
        Ok(cfg) if dir.is_dir() => cfg,
        _ => return Err(not_loaded),
    };
    let latency = |i| cfg.spec(i).ok().and_then(|s| s.realism).map_or(0, |r| r.read_latency_ns as u64);
    *READ_LATENCY_NS.lock().unwrap_or_else(|e| e.into_inner()) = (0..cfg.gpu.len()).map(latency).collect();
    // Touch the state so that a missing state.json is created at load time.
    state::with_state(&dir, |_, _, _| ()).map_err(|_| not_loaded)?;
    *slot = Some((dir, 1));
    Ok(())
}

/// Runs `f` on the locked, advanced state; I/O problems become `NVML_ERROR_UNKNOWN`.
fn locked<T>(f: impl FnOnce(&Config, &mut state::State) -> R<T>) -> R<T> {
    let dir = driver_dir()?;
    state::with_state(&dir, |cfg, st, _| f(cfg, st)).map_err(|_| UNKNOWN)?
}

fn handle_index(device: nvmlDevice_t) -> R<usize> {
    let v = device.addr();
    if v == 0 || v > MAX_GPUS { Err(INVALID) } else { Ok(v - 1) }
}

fn handle_for(index: usize) -> nvmlDevice_t {
    std::ptr::without_provenance_mut(index + 1)
}

/// Runs `f` for a valid, present (not lost) device.
fn with_device<T>(device: nvmlDevice_t, f: impl FnOnce(&Config, &GpuSpec, &mut GpuState) -> R<T>) -> R<T> {
    with_device_at(device, |cfg, spec, gs, _| f(cfg, spec, gs))
}

/// [`with_device`], also passing the instant (CLOCK_REALTIME ns) the state was advanced to.
/// While the GPU has `Fault::Hang`, the call waits outside the state lock and looks again.
fn with_device_at<T>(
    device: nvmlDevice_t,
    f: impl FnOnce(&Config, &GpuSpec, &mut GpuState, i64) -> R<T>,
) -> R<T> {
    let index = handle_index(device)?;
    let mut f = Some(f);
    loop {
        let done = locked(|cfg, st| {
            let t_ns = st.t_ns;
            let gs = st.gpus.get_mut(index).ok_or(INVALID)?;
            if gs.hung {
                return Ok(None);
            }
            let spec = cfg.spec(index).map_err(|_| UNKNOWN)?;
            if gs.lost {
                return Err(nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST);
            }
            let f = f.take().expect("called once: the loop ends when it runs");
            f(cfg, &spec, gs, t_ns).map(Some)
        })?;
        match done {
            Some(value) => return Ok(value),
            None => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
}

/// Like `with_device`, for setters: the caller's effective uid must be privileged.
fn with_device_priv(device: nvmlDevice_t, f: impl FnOnce(&GpuSpec, &mut GpuState) -> R) -> R {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    with_device(device, |cfg, spec, gs| {
        state::check_privilege(euid, &cfg.privileged_uids)?;
        f(spec, gs)
    })
}

fn out<T>(ptr: *mut T, value: T) -> R {
    if ptr.is_null() {
        return Err(INVALID);
    }
    // SAFETY: non-null pointer supplied by the caller for exactly this output.
    unsafe { ptr.write(value) };
    Ok(())
}

fn out_str(buf: *mut c_char, len: c_uint, s: &str) -> R {
    if buf.is_null() {
        return Err(INVALID);
    }
    if s.len() + 1 > len as usize {
        return Err(nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE);
    }
    // SAFETY: the caller guarantees `len` writable bytes at `buf`; we write s.len() + 1 <= len.
    unsafe {
        std::ptr::copy_nonoverlapping(s.as_ptr().cast::<c_char>(), buf, s.len());
        buf.add(s.len()).write(0);
    }
    Ok(())
}

fn in_str<'a>(s: *const c_char) -> R<&'a str> {
    if s.is_null() {
        return Err(INVALID);
    }
    // SAFETY: non-null, NUL-terminated string supplied by the caller.
    unsafe { CStr::from_ptr(s) }.to_str().map_err(|_| INVALID)
}

/// Size protocol: writes the needed count; fills what fits; INSUFFICIENT_SIZE if it does not all fit.
fn out_list(count: *mut c_uint, items: *mut c_uint, values: &[u32]) -> R {
    if count.is_null() {
        return Err(INVALID);
    }
    // SAFETY: non-null in/out count pointer.
    let room = unsafe { count.read() } as usize;
    let n = values.len().min(room);
    if n > 0 {
        if items.is_null() {
            return Err(INVALID);
        }
        // SAFETY: the caller provides `room` >= n writable entries.
        unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), items, n) };
    }
    // SAFETY: as above.
    unsafe { count.write(values.len() as c_uint) };
    if room < values.len() { Err(nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE) } else { Ok(()) }
}

fn find_device(pred: impl Fn(&GpuSpec) -> bool, device: *mut nvmlDevice_t) -> R {
    if device.is_null() {
        return Err(INVALID);
    }
    let index = locked(|cfg, st| {
        for i in 0..cfg.gpu.len() {
            if pred(&cfg.spec(i).map_err(|_| UNKNOWN)?) {
                return if st.gpus[i].lost { Err(nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST) } else { Ok(i) };
            }
        }
        Err(nvmlReturn_enum_NVML_ERROR_NOT_FOUND)
    })?;
    out(device, handle_for(index))
}

// ---- library and system -------------------------------------------------------------------

/// Initialises the fake driver from `$WATTSON_FAKE_NVML_DIR` (DRIVER_NOT_LOADED if unusable).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit_v2() -> nvmlReturn_t {
    run(do_init)
}

/// Legacy alias of `nvmlInit_v2`.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInit() -> nvmlReturn_t {
    run(do_init)
}

/// `nvmlInit_v2` ignoring the flags.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlInitWithFlags(_flags: c_uint) -> nvmlReturn_t {
    run(do_init)
}

/// Drops one init reference (UNINITIALIZED if not initialised).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlShutdown() -> nvmlReturn_t {
    run(|| {
        let mut slot = init_slot();
        match slot.as_mut() {
            None => Err(nvmlReturn_enum_NVML_ERROR_UNINITIALIZED),
            Some((_, count)) if *count > 1 => {
                *count -= 1;
                Ok(())
            }
            Some(_) => {
                *slot = None;
                Ok(())
            }
        }
    })
}

/// Static description of a return code.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlErrorString(result: nvmlReturn_t) -> *const c_char {
    let s: &'static CStr = match result {
        nvmlReturn_enum_NVML_SUCCESS => c"Success",
        nvmlReturn_enum_NVML_ERROR_UNINITIALIZED => c"Uninitialized",
        nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT => c"Invalid Argument",
        nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED => c"Not Supported",
        nvmlReturn_enum_NVML_ERROR_NO_PERMISSION => c"Insufficient Permissions",
        nvmlReturn_enum_NVML_ERROR_NOT_FOUND => c"Not Found",
        nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE => c"Insufficient Size",
        nvmlReturn_enum_NVML_ERROR_DRIVER_NOT_LOADED => c"Driver Not Loaded",
        nvmlReturn_enum_NVML_ERROR_GPU_IS_LOST => c"GPU is lost",
        _ => c"Unknown Error",
    };
    s.as_ptr()
}

/// Driver version string ("550.54.15").
#[unsafe(no_mangle)]
pub extern "C" fn nvmlSystemGetDriverVersion(version: *mut c_char, length: c_uint) -> nvmlReturn_t {
    run(|| {
        driver_dir()?;
        out_str(version, length, "550.54.15")
    })
}

/// NVML version string ("12.550.54.15").
#[unsafe(no_mangle)]
pub extern "C" fn nvmlSystemGetNVMLVersion(version: *mut c_char, length: c_uint) -> nvmlReturn_t {
    run(|| out_str(version, length, "12.550.54.15"))
}

/// CUDA driver version (12040).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlSystemGetCudaDriverVersion_v2(version: *mut i32) -> nvmlReturn_t {
    run(|| out(version, 12040))
}

/// CUDA driver version (12040).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlSystemGetCudaDriverVersion(version: *mut i32) -> nvmlReturn_t {
    run(|| out(version, 12040))
}

// ---- handles -------------------------------------------------------------------------------

/// Number of configured GPUs.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetCount_v2(count: *mut c_uint) -> nvmlReturn_t {
    run(|| {
        let n = locked(|cfg, _| Ok(cfg.gpu.len()))?;
        out(count, n as c_uint)
    })
}

/// Handle of GPU `index` (GPU_IS_LOST while it is lost).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetHandleByIndex_v2(index: c_uint, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    run(|| {
        if device.is_null() {
            return Err(INVALID);
        }
        // Handles name GPUs by their place in the configuration, whatever NVML's numbering.
        let gpu = locked(|cfg, _| Ok(cfg.gpu_at(index as usize)))?;
        if gpu >= MAX_GPUS {
            return Err(INVALID);
        }
        let h = handle_for(gpu);
        with_device(h, |_, _, _| Ok(()))?;
        out(device, h)
    })
}

/// Handle of the GPU with this UUID.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetHandleByUUID(uuid: *const c_char, device: *mut nvmlDevice_t) -> nvmlReturn_t {
    run(|| {
        let uuid = in_str(uuid)?;
        find_device(|s| s.uuid == uuid, device)
    })
}

/// Handle of the GPU at this PCI bus id (either domain width, any case).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetHandleByPciBusId_v2(
    bus_id: *const c_char,
    device: *mut nvmlDevice_t,
) -> nvmlReturn_t {
    run(|| {
        let want = parse_pci_bus_id(in_str(bus_id)?).ok_or(INVALID)?;
        find_device(|s| s.pci == want, device)
    })
}

// ---- identity ------------------------------------------------------------------------------

/// Product name.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetName(device: nvmlDevice_t, name: *mut c_char, length: c_uint) -> nvmlReturn_t {
    run(|| {
        let s = match mig::instance_of(device)? {
            Some(instance) => mig::name_of(&instance)?,
            None => with_device(device, |_, spec, _| Ok(spec.name.clone()))?,
        };
        out_str(name, length, &s)
    })
}

/// UUID.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetUUID(device: nvmlDevice_t, uuid: *mut c_char, length: c_uint) -> nvmlReturn_t {
    run(|| {
        let s = match mig::instance_of(device)? {
            Some(instance) => instance.uuid,
            None => with_device(device, |_, spec, _| Ok(spec.uuid.clone()))?,
        };
        out_str(uuid, length, &s)
    })
}

/// NVML index.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetIndex(device: nvmlDevice_t, index: *mut c_uint) -> nvmlReturn_t {
    run(|| {
        let gpu = handle_index(device)?;
        let index_now = with_device(device, |cfg, _, _| Ok(cfg.index_of(gpu)))?;
        out(index, index_now as c_uint)
    })
}

/// Minor number of `/dev/nvidiaN`.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetMinorNumber(device: nvmlDevice_t, minor: *mut c_uint) -> nvmlReturn_t {
    run(|| out(minor, with_device(device, |_, spec, _| Ok(spec.minor_number))?))
}

/// PCI information (v3 layout, with sub-system id).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPciInfo_v3(device: nvmlDevice_t, pci: *mut nvmlPciInfo_t) -> nvmlReturn_t {
    run(|| {
        let spec = with_device(device, |_, spec, _| Ok(spec.clone()))?;
        let (domain, bus, dev, func) = spec.pci;
        let mut info = nvmlPciInfo_t {
            busIdLegacy: [0; 16],
            domain,
            bus,
            device: dev,
            pciDeviceId: spec.pci_device_id,
            pciSubSystemId: 0x16c1_10de,
            busId: [0; 32],
        };
        let long = format!("{domain:08X}:{bus:02X}:{dev:02X}.{func:X}");
        let legacy = format!("{:04X}:{bus:02X}:{dev:02X}.{func:X}", domain & 0xffff);
        out_str(info.busId.as_mut_ptr(), 32, &long)?;
        out_str(info.busIdLegacy.as_mut_ptr(), 16, &legacy)?;
        out(pci, info)
    })
}

// ---- energy and power ----------------------------------------------------------------------

/// Energy counter in mJ since the last driver load (NOT_SUPPORTED without a counter).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetTotalEnergyConsumption(
    device: nvmlDevice_t,
    energy: *mut c_ulonglong,
) -> nvmlReturn_t {
    run(|| {
        // A slow driver (`read_latency_ms`): the value is taken half way through the call.
        let latency =
            READ_LATENCY_NS.lock().unwrap_or_else(|e| e.into_inner()).get(handle_index(device)?).copied();
        let half = std::time::Duration::from_nanos(latency.unwrap_or(0) / 2);
        std::thread::sleep(half);
        let (t_ns, v) = with_device_at(device, |_, spec, gs, t_ns| {
            if !spec.energy_counter || gs.counter_unsupported {
                Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED)
            } else {
                Ok((t_ns, gs.counter_read()))
            }
        })?;
        // Ground truth for tests: the exact instant this counter value was served.
        state::log_counter_read(&driver_dir()?, handle_index(device)?, t_ns, v).map_err(|_| UNKNOWN)?;
        std::thread::sleep(half);
        out(energy, v)
    })
}

/// Power draw, mW: the instant's on an ideal GPU, a realistic one's averaged reading.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPowerUsage(device: nvmlDevice_t, power: *mut c_uint) -> nvmlReturn_t {
    run(|| out(power, with_device_at(device, |_, spec, gs, t_ns| Ok(gs.power_reading(spec, t_ns)))?))
}

/// Current power limit, mW.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPowerManagementLimit(
    device: nvmlDevice_t,
    limit: *mut c_uint,
) -> nvmlReturn_t {
    run(|| out(limit, with_device(device, |_, _, gs| Ok(gs.power_limit_mw))?))
}

/// Enforced power limit, mW (same as the management limit here).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetEnforcedPowerLimit(device: nvmlDevice_t, limit: *mut c_uint) -> nvmlReturn_t {
    run(|| out(limit, with_device(device, |_, _, gs| Ok(gs.power_limit_mw))?))
}

/// Default power limit, mW.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPowerManagementDefaultLimit(
    device: nvmlDevice_t,
    limit: *mut c_uint,
) -> nvmlReturn_t {
    run(|| out(limit, with_device(device, |_, spec, _| Ok(spec.limit_default_mw))?))
}

/// Settable power limit range, mW.
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetPowerManagementLimitConstraints(
    device: nvmlDevice_t,
    min: *mut c_uint,
    max: *mut c_uint,
) -> nvmlReturn_t {
    run(|| {
        if min.is_null() || max.is_null() {
            return Err(INVALID);
        }
        let (lo, hi) = with_device(device, |_, spec, _| Ok((spec.limit_min_mw, spec.limit_max_mw)))?;
        out(min, lo)?;
        out(max, hi)
    })
}

/// Sets the power limit, mW (root; within the constraints).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceSetPowerManagementLimit(device: nvmlDevice_t, limit: c_uint) -> nvmlReturn_t {
    run(|| with_device_priv(device, |spec, gs| state::set_power_limit(spec, gs, limit)))
}

// ---- activity ------------------------------------------------------------------------------

/// GPU utilisation = round(load × 100) %; memory = round(load × 60) % (NOT_SUPPORTED in MIG
/// mode, as the driver answers).
#[unsafe(no_mangle)]
pub extern "C" fn nvmlDeviceGetUtilizationRates(
    device: nvmlDevice_t,
    util: *mut nvmlUtilization_t,
) -> nvmlReturn_t {
    run(|| {
        if mig::mig_on(device)? {
            return Err(nvmlReturn_enum_NVML_ERROR_NOT_SUPPORTED);
        }
        let load = with_device(device, |_, _, gs| Ok(gs.load))?;
        out(
            util,
            nvmlUtilization_t {
                gpu: (load * 100.0).round() as c_uint,
                memory: (load * 60.0).round() as c_uint,
            },
        )
    })
}
