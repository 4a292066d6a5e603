//! The exported ROCm SMI functions, with the signatures of `rocm_smi.h` (5.2.3).
//!
//! A device index names the GPU NVML's index of the same number would (the configuration's
//! `order`). No panic crosses the C boundary: every body runs under `catch_unwind` and maps a
//! panic to `RSMI_STATUS_UNKNOWN_ERROR`.

use std::ffi::c_char;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::Mutex;

use fake_nvml::state::{self, GpuState};
use fake_nvml::{Config, GpuSpec};
use wattson_rocm_smi_sys::sys::*;

use crate::{RESOLUTION_UJ, UPDATE_INTERVAL_NS, clock_levels, unique_id};

/// Environment variable naming the fake driver directory (a `fake_nvml::Sim`'s), read by
/// `rsmi_init`.
pub const DIR_ENV: &str = "WATTSON_FAKE_AMDSMI_DIR";

const SUCCESS: rsmi_status_t = RSMI_STATUS_SUCCESS;
const INVALID: rsmi_status_t = RSMI_STATUS_INVALID_ARGS;
const UNKNOWN: rsmi_status_t = RSMI_STATUS_UNKNOWN_ERROR;
/// NVML's "no permission", as fake-nvml's shared checks return it.
const NVML_NO_PERMISSION: u32 = 4;

/// (driver directory, init reference count) while initialised.
static INIT: Mutex<Option<(PathBuf, u32)>> = Mutex::new(None);

type R<T = ()> = Result<T, rsmi_status_t>;

fn run(f: impl FnOnce() -> R) -> rsmi_status_t {
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
    init_slot().as_ref().map(|(d, _)| d.clone()).ok_or(RSMI_STATUS_INIT_ERROR)
}

fn out<T>(ptr: *mut T, value: T) -> R {
    if ptr.is_null() {
        return Err(INVALID);
    }
    // SAFETY: non-null pointer supplied by the caller for exactly this output.
    unsafe { ptr.write(value) };
    Ok(())
}

/// Runs `f` on device `dv`'s locked, advanced state, with the instant it was advanced to.
/// A lost GPU's files cannot be read (`RSMI_STATUS_FILE_ERROR`); a hung one blocks.
fn with_device<T>(dv: u32, f: impl FnOnce(&Config, &GpuSpec, &mut GpuState, i64) -> R<T>) -> R<T> {
    let dir = driver_dir()?;
    let mut f = Some(f);
    loop {
        let done = state::with_state(&dir, |cfg, st, _| {
            let place = cfg.gpu_at(dv as usize);
            let t_ns = st.t_ns;
            let gs = st.gpus.get_mut(place).ok_or(INVALID)?;
            if gs.hung {
                return Ok(None);
            }
            if gs.lost {
                return Err(RSMI_STATUS_FILE_ERROR);
            }
            let spec = cfg.spec(place).map_err(|_| UNKNOWN)?;
            let f = f.take().expect("called once: the loop ends when it runs");
            f(cfg, &spec, gs, t_ns).map(Some)
        })
        .map_err(|_| UNKNOWN)??;
        match done {
            Some(value) => return Ok(value),
            None => std::thread::sleep(std::time::Duration::from_millis(20)),
        }
    }
}

/// [`with_device`] for setters: the caller's effective uid must be privileged.
fn with_device_priv(dv: u32, f: impl FnOnce(&GpuSpec, &mut GpuState) -> R) -> R {
    // SAFETY: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    with_device(dv, |cfg, spec, gs, _| {
        state::check_privilege(euid, &cfg.privileged_uids).map_err(|_| RSMI_STATUS_PERMISSION)?;
        f(spec, gs)
    })
}

fn nvml_to_rsmi(code: u32) -> rsmi_status_t {
    if code == NVML_NO_PERMISSION { RSMI_STATUS_PERMISSION } else { INVALID }
}

// ---- init ----------------------------------------------------------------------------------

/// Starts the library on the directory in `WATTSON_FAKE_AMDSMI_DIR`.
#[unsafe(no_mangle)]
pub extern "C" fn rsmi_init(_init_flags: u64) -> rsmi_status_t {
    run(|| {
        let mut slot = init_slot();
        if let Some((_, count)) = slot.as_mut() {
            *count += 1;
            return Ok(());
        }
        let dir = PathBuf::from(std::env::var_os(DIR_ENV).ok_or(RSMI_STATUS_INIT_ERROR)?);
        if !dir.is_dir() || Config::load(&dir).is_err() {
            return Err(RSMI_STATUS_INIT_ERROR);
        }
        state::with_state(&dir, |_, _, _| ()).map_err(|_| RSMI_STATUS_INIT_ERROR)?;
        *slot = Some((dir, 1));
        Ok(())
    })
}

/// Stops the library (reference-counted, as ROCm SMI's).
#[unsafe(no_mangle)]
pub extern "C" fn rsmi_shut_down() -> rsmi_status_t {
    run(|| {
        let mut slot = init_slot();
        match slot.as_mut() {
            Some((_, count)) if *count > 1 => *count -= 1,
            Some(_) => *slot = None,
            None => return Err(RSMI_STATUS_INIT_ERROR),
        }
        Ok(())
    })
}

/// A static description of a status.
#[unsafe(no_mangle)]
pub extern "C" fn rsmi_status_string(status: rsmi_status_t, text: *mut *const c_char) -> rsmi_status_t {
    let words: &'static [u8] = match status {
        RSMI_STATUS_SUCCESS => b"RSMI_STATUS_SUCCESS: The function has been executed successfully.\0",
        RSMI_STATUS_INVALID_ARGS => b"RSMI_STATUS_INVALID_ARGS: The provided arguments are invalid.\0",
        RSMI_STATUS_NOT_SUPPORTED => b"RSMI_STATUS_NOT_SUPPORTED: The requested function is not supported.\0",
        RSMI_STATUS_FILE_ERROR => b"RSMI_STATUS_FILE_ERROR: A problem accessing a file.\0",
        RSMI_STATUS_PERMISSION => b"RSMI_STATUS_PERMISSION: Permission denied.\0",
        RSMI_STATUS_INIT_ERROR => b"RSMI_STATUS_INIT_ERROR: The library is not initialised.\0",
        _ => b"An unknown error occurred\0",
    };
    run(|| out(text, words.as_ptr().cast::<c_char>()))
}

/// How many GPUs.
#[unsafe(no_mangle)]
pub extern "C" fn rsmi_num_monitor_devices(num_devices: *mut u32) -> rsmi_status_t {
    run(|| {
        let dir = driver_dir()?;
        let n = Config::load(&dir).map_err(|_| UNKNOWN)?.gpu.len();
        out(num_devices, n as u32)
    })
}

// ---- identity ------------------------------------------------------------------------------

/// The marketing name; `RSMI_STATUS_INSUFFICIENT_SIZE` (and as much as fits) when `len` is short.
#[unsafe(no_mangle)]
pub extern "C" fn rsmi_dev_name_get(dv_ind: u32, name: *mut c_char, len: usize) -> rsmi_status_t {
    run(|| {
        if name.is_null() || len == 0 {
            return Err(INVALID);
        }
        let text = with_device(dv_ind, |_, spec, _, _| Ok(spec.name.clone()))?;
        let n = text.len().min(len - 1);
        // SAFETY: the caller provides `len` writable bytes at `name`; n + 1 <= len are written.
        unsafe {
            std::ptr::copy_nonoverlapping(text.as_ptr().cast::<c_char>(), name, n);
            name.add(n).write(0);
        }
        if n < text.len() { Err(RSMI_STATUS_INSUFFICIENT_SIZE) } else { Ok(()) }
    })
}

/// The GPU's 64-bit unique id ([`crate::unique_id`] of its UUID).
#[unsafe(no_mangle)]
pub extern "C" fn rsmi_dev_unique_id_get(dv_ind: u32, id: *mut u64) -> rsmi_status_t {
    run(|| out(id, with_device(dv_ind, |_, spec, _, _| Ok(unique_id(&spec.uuid)))?))
}

/// The BDFID: `domain << 32 | bus << 8 | device << 3 | function`.
#[unsafe(no_mangle)]
pub extern "C" fn rsmi_dev_pci_id_get(dv_ind: u32, bdfid: *mut u64) -> rsmi_status_t {
    run(|| {
        let (d, b, v, f) = with_device(dv_ind, |_, spec, _, _| Ok(spec.pci))?;
        out(
            bdfid,
            (u64::from(d) << 32) | (u64::from(b & 0xff) << 8) | (u64::from(v & 0x1f) << 3) | u64::from(f & 7),
        )
    })
}

/// The minor of the GPU's render node `/dev/dri/renderD<minor>`: 128 + its Slurm number.
#[unsafe(no_mangle)]
pub extern "C" fn rsmi_dev_drm_render_minor_get(dv_ind: u32, minor: *mut u32) -> rsmi_status_t {
    run(|| out(minor, with_device(dv_ind, |_, spec, _, _| Ok(128 + spec.minor_number))?))
}

// ---- energy and power ----------------------------------------------------------------------

/// The energy count in units of [`RESOLUTION_UJ`] as of the last whole millisecond, the
/// resolution, and that instant (ns).
#[unsafe(no_mangle)]
pub extern "C" fn rsmi_dev_energy_count_get(
    dv_ind: u32,
    power: *mut u64,
    counter_resolution: *mut f32,
    timestamp: *mut u64,
) -> rsmi_status_t {
    run(|| {
        if power.is_null() || counter_resolution.is_null() || timestamp.is_null() {
            return Err(INVALID);
        }
        let (place, at_ns, count) = with_device(dv_ind, |cfg, spec, gs, t_ns| {
            if !spec.energy_counter || gs.counter_unsupported {
                return Err(RSMI_STATUS_NOT_SUPPORTED);
            }
            let (at_ns, uj) = served_energy_uj(gs, t_ns);
            Ok((cfg.gpu_at(dv_ind as usize), at_ns, (uj / f64::from(RESOLUTION_UJ)).floor() as u64))
        })?;
        // Ground truth for tests: the instant the served count was the GPU's energy, with the
        // count in mJ by the published conversion (count × resolution µJ).
        let mj = (count as f64 * f64::from(RESOLUTION_UJ) / 1000.0).floor() as u64;
        state::log_counter_read(&driver_dir()?, place, at_ns, mj).map_err(|_| UNKNOWN)?;
        out(power, count)?;
        out(counter_resolution, RESOLUTION_UJ)?;
        out(timestamp, at_ns as u64)
    })
}

/// The energy (µJ) the library serves at `t_ns` and the instant it is of: on an ideal GPU
/// the energy at the last whole millisecond (taken back from now at the present power, so a
/// read within a millisecond of a change of the draw is off by up to that change over the
/// millisecond); on a realistic one the counter's last step, as fake-nvml serves it.
fn served_energy_uj(gs: &GpuState, t_ns: i64) -> (i64, f64) {
    if gs.physics.is_some() {
        return (t_ns, gs.counter_read() as f64 * 1000.0);
    }
    let now_uj = gs.counter_mj as f64 * 1000.0 + gs.counter_rem_mw_ns as f64 / 1e6;
    let at_ns = t_ns - t_ns.rem_euclid(UPDATE_INTERVAL_NS);
    let since_uj = f64::from(gs.power_mw) * (t_ns - at_ns) as f64 / 1e6;
    (at_ns, (now_uj - since_uj).max(0.0))
}

/// Average power, µW.
#[unsafe(no_mangle)]
pub extern "C" fn rsmi_dev_power_ave_get(dv_ind: u32, _sensor_ind: u32, power: *mut u64) -> rsmi_status_t {
    run(|| {
        let mw = with_device(dv_ind, |_, spec, gs, t_ns| Ok(gs.power_reading(spec, t_ns)))?;
        out(power, u64::from(mw) * 1000)
    })
}

/// The power cap, µW.
#[unsafe(no_mangle)]
pub extern "C" fn rsmi_dev_power_cap_get(dv_ind: u32, _sensor_ind: u32, cap: *mut u64) -> rsmi_status_t {
    run(|| out(cap, u64::from(with_device(dv_ind, |_, _, gs, _| Ok(gs.power_limit_mw))?) * 1000))
}

/// The default power cap, µW.
#[unsafe(no_mangle)]
pub extern "C" fn rsmi_dev_power_cap_default_get(dv_ind: u32, default_cap: *mut u64) -> rsmi_status_t {
    run(|| {
        out(default_cap, u64::from(with_device(dv_ind, |_, spec, _, _| Ok(spec.limit_default_mw))?) * 1000)
    })
}

/// The settable power cap range, µW: the maximum first, as ROCm SMI's signature has it.
#[unsafe(no_mangle)]
pub extern "C" fn rsmi_dev_power_cap_range_get(
    dv_ind: u32,
    _sensor_ind: u32,
    max: *mut u64,
    min: *mut u64,
) -> rsmi_status_t {
    run(|| {
        if max.is_null() || min.is_null() {
            return Err(INVALID);
        }
        let (lo, hi) = with_device(dv_ind, |_, spec, _, _| Ok((spec.limit_min_mw, spec.limit_max_mw)))?;
        out(max, u64::from(hi) * 1000)?;
        out(min, u64::from(lo) * 1000)
    })
}

/// Sets the power cap, µW (root; within the range).
#[unsafe(no_mangle)]
pub extern "C" fn rsmi_dev_power_cap_set(dv_ind: u32, _sensor_ind: u32, cap: u64) -> rsmi_status_t {
    run(|| {
        let mw = u32::try_from(cap / 1000).map_err(|_| INVALID)?;
        with_device_priv(dv_ind, |spec, gs| state::set_power_limit(spec, gs, mw).map_err(nvml_to_rsmi))
    })
}

/// How busy the GPU is, percent.
#[unsafe(no_mangle)]
pub extern "C" fn rsmi_dev_busy_percent_get(dv_ind: u32, busy_percent: *mut u32) -> rsmi_status_t {
    run(|| out(busy_percent, with_device(dv_ind, |_, _, gs, _| Ok((gs.load * 100.0).round() as u32))?))
}

// ---- clocks --------------------------------------------------------------------------------

/// The clock's levels (Hz) and the current one: the system clock's levels
/// ([`clock_levels`]), the one memory clock.
#[unsafe(no_mangle)]
pub extern "C" fn rsmi_dev_gpu_clk_freq_get(
    dv_ind: u32,
    clk_type: rsmi_clk_type_t,
    f: *mut rsmi_frequencies_t,
) -> rsmi_status_t {
    run(|| {
        let (levels, now) = with_device(dv_ind, |_, spec, gs, _| match clk_type {
            RSMI_CLK_TYPE_SYS => Ok((clock_levels(&spec.sm_clocks_mhz), gs.sm_clock_mhz)),
            RSMI_CLK_TYPE_MEM => Ok((vec![spec.mem_clock_mhz], spec.mem_clock_mhz)),
            _ => Err(RSMI_STATUS_NOT_SUPPORTED),
        })?;
        // SAFETY: a plain C struct of integers; all zeroes is a valid value.
        let mut table: rsmi_frequencies_t = unsafe { std::mem::zeroed() };
        table.num_supported = levels.len() as u32;
        for (slot, mhz) in table.frequency.iter_mut().zip(&levels) {
            *slot = u64::from(*mhz) * 1_000_000;
        }
        // The level nearest the clock the GPU runs at.
        table.current = (0..levels.len()).min_by_key(|&i| levels[i].abs_diff(now)).unwrap_or(0) as u32;
        out(f, table)
    })
}

/// Sets the system clock's range, MHz (root; within the GPU's lowest and highest clocks).
#[unsafe(no_mangle)]
pub extern "C" fn rsmi_dev_clk_range_set(
    dv_ind: u32,
    minclkvalue: u64,
    maxclkvalue: u64,
    clk_type: rsmi_clk_type_t,
) -> rsmi_status_t {
    run(|| {
        if clk_type != RSMI_CLK_TYPE_SYS {
            return Err(RSMI_STATUS_NOT_SUPPORTED);
        }
        with_device_priv(dv_ind, |spec, gs| {
            let (lo, hi) = (u64::from(spec.min_clock()), u64::from(spec.max_clock()));
            if minclkvalue > maxclkvalue || minclkvalue < lo || maxclkvalue > hi {
                return Err(INVALID);
            }
            gs.locked_clocks_mhz = Some((minclkvalue as u32, maxclkvalue as u32));
            Ok(())
        })
    })
}

/// The performance level: `manual` while a clock range is set, else `auto`.
#[unsafe(no_mangle)]
pub extern "C" fn rsmi_dev_perf_level_get(dv_ind: u32, perf: *mut rsmi_dev_perf_level_t) -> rsmi_status_t {
    run(|| {
        let manual = with_device(dv_ind, |_, _, gs, _| Ok(gs.locked_clocks_mhz.is_some()))?;
        out(perf, if manual { RSMI_DEV_PERF_LEVEL_MANUAL } else { RSMI_DEV_PERF_LEVEL_AUTO })
    })
}

/// Sets the performance level (root): `auto` gives the clocks back to the driver; the others
/// are not simulated.
#[unsafe(no_mangle)]
pub extern "C" fn rsmi_dev_perf_level_set_v1(dv_ind: u32, perf_lvl: rsmi_dev_perf_level_t) -> rsmi_status_t {
    run(|| {
        if perf_lvl != RSMI_DEV_PERF_LEVEL_AUTO {
            return Err(RSMI_STATUS_NOT_SUPPORTED);
        }
        with_device_priv(dv_ind, |_, gs| {
            gs.locked_clocks_mhz = None;
            Ok(())
        })
    })
}

// ---- processes -----------------------------------------------------------------------------

/// Every process computing on any GPU, by ROCm SMI's size protocol: with `procs` null, the
/// count; else up to `*num_items` entries, their count, and `INSUFFICIENT_SIZE` if some did
/// not fit.
#[unsafe(no_mangle)]
pub extern "C" fn rsmi_compute_process_info_get(
    procs: *mut rsmi_process_info_t,
    num_items: *mut u32,
) -> rsmi_status_t {
    run(|| {
        if num_items.is_null() {
            return Err(INVALID);
        }
        let mut pids: Vec<u32> = state::with_state(&driver_dir()?, |_, st, _| {
            st.gpus.iter().flat_map(|g| g.processes.iter().map(|p| p.pid)).collect()
        })
        .map_err(|_| UNKNOWN)?;
        pids.sort_unstable();
        pids.dedup();
        if procs.is_null() {
            return out(num_items, pids.len() as u32);
        }
        // SAFETY: non-null in/out count.
        let room = unsafe { num_items.read() } as usize;
        let n = room.min(pids.len());
        for (i, pid) in pids.iter().take(n).enumerate() {
            // SAFETY: the caller provides `room` >= n entries at `procs`.
            let entry = unsafe { &mut *procs.add(i) };
            // SAFETY: a plain C struct of integers; all zeroes is a valid value.
            *entry = unsafe { std::mem::zeroed() };
            entry.process_id = *pid;
            entry.pasid = *pid;
        }
        out(num_items, n as u32)?;
        if n < pids.len() { Err(RSMI_STATUS_INSUFFICIENT_SIZE) } else { Ok(()) }
    })
}

/// The device indices process `pid` computes on (`RSMI_STATUS_NOT_FOUND` for a process on
/// none), by the same size protocol.
#[unsafe(no_mangle)]
pub extern "C" fn rsmi_compute_process_gpus_get(
    pid: u32,
    dv_indices: *mut u32,
    num_devices: *mut u32,
) -> rsmi_status_t {
    run(|| {
        if num_devices.is_null() {
            return Err(INVALID);
        }
        let indices: Vec<u32> = state::with_state(&driver_dir()?, |cfg, st, _| {
            (0..st.gpus.len())
                .filter(|&place| st.gpus[place].processes.iter().any(|p| p.pid == pid))
                .map(|place| cfg.index_of(place) as u32)
                .collect()
        })
        .map_err(|_| UNKNOWN)?;
        if indices.is_empty() {
            return Err(RSMI_STATUS_NOT_FOUND);
        }
        if dv_indices.is_null() {
            return out(num_devices, indices.len() as u32);
        }
        // SAFETY: non-null in/out count.
        let room = unsafe { num_devices.read() } as usize;
        let n = room.min(indices.len());
        // SAFETY: the caller provides `room` >= n entries at `dv_indices`.
        unsafe { std::ptr::copy_nonoverlapping(indices.as_ptr(), dv_indices, n) };
        out(num_devices, n as u32)?;
        if n < indices.len() { Err(RSMI_STATUS_INSUFFICIENT_SIZE) } else { Ok(()) }
    })
}
