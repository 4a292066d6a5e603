//! [`GpuBackend`] over AMD's ROCm SMI (`librocm_smi64.so.1`), the library Slurm's `gpu/rsmi`
//! plugin reads AMD GPUs with.
//!
//! The library is loaded at run time (`dlopen`, through the bindgen table of
//! `wattson-rocm-smi-sys`), never linked: wattsond starts on nodes without it. A function the
//! loaded library lacks answers [`GpuError::NotSupported`]. The same code drives real GPUs and
//! the simulated ones of the tests (`tests/fake-amdsmi`, named by `[gpu] amd_library`).
//!
//! Units as ROCm SMI gives them: energy in counts of a resolution in µJ (15.3 µJ on MI100 to
//! MI300), power and power caps in µW, clocks in Hz. wattson's are mJ, mW and MHz.

use std::ffi::{CStr, c_char};
use std::path::Path;

use super::{GpuBackend, GpuError, GpuInfo, GpuSettings};
use wattson_rocm_smi_sys::sys::*;
use wattson_types::energy::GpuReading;
use wattson_types::now_ns;

/// The render minor of the first GPU: `/dev/dri/renderD128` is GPU 0 for Slurm (`gpu/rsmi`
/// and a gres.conf naming `File=/dev/dri/renderD<128+N>`).
pub const RENDER_MINOR_BASE: u32 = 128;

/// Most compute processes asked for at once (a node runs far fewer).
const MAX_PROCESSES: u32 = 4096;

/// AMD GPUs through ROCm SMI.
pub struct RocmBackend {
    lib: RocmSmi,
    devices: Vec<GpuInfo>,
}

/// Calls a ROCm SMI function of `$lib` (a missing symbol is `NotSupported`) and maps its status.
macro_rules! rsmi {
    ($lib:expr, $f:ident($($arg:expr),* $(,)?)) => {{
        match $lib.$f.as_ref() {
            // SAFETY: a function of the loaded ROCm SMI, with the signature its header gives,
            // called with valid handles and out-pointers to live locals, as the header documents.
            Ok(f) => status(&$lib, unsafe { f($($arg),*) }),
            Err(_) => Err(GpuError::NotSupported),
        }
    }};
}

impl RocmBackend {
    /// Loads ROCm SMI (from `library` if given, else `librocm_smi64.so.1` by the system's
    /// library path), initialises it and enumerates the GPUs.
    pub fn open(library: Option<&Path>) -> Result<RocmBackend, GpuError> {
        let name = library.map_or_else(|| wattson_rocm_smi_sys::LIBRARY.into(), |p| p.as_os_str().to_owned());
        // SAFETY: loading ROCm SMI runs its initialisers, which have no preconditions.
        let lib = unsafe { RocmSmi::new(&name) }.map_err(|e| {
            GpuError::Driver(format!("cannot load ROCm SMI ({}): {e}", name.to_string_lossy()))
        })?;
        rsmi!(lib, rsmi_init(0)).map_err(|e| {
            let why = match e {
                GpuError::Driver(why) | GpuError::Other(why) => why,
                e => e.to_string(),
            };
            GpuError::Driver(format!("ROCm SMI did not start: {why}"))
        })?;
        let mut backend = RocmBackend { lib, devices: Vec::new() };
        let mut count = 0u32;
        rsmi!(backend.lib, rsmi_num_monitor_devices(&mut count))?;
        for index in 0..count {
            let info = backend.describe(index)?;
            backend.devices.push(info);
        }
        Ok(backend)
    }

    fn describe(&self, index: u32) -> Result<GpuInfo, GpuError> {
        let lib = &self.lib;
        let mut name = [0 as c_char; 256];
        rsmi!(lib, rsmi_dev_name_get(index, name.as_mut_ptr(), name.len()))?;
        name[name.len() - 1] = 0;
        // SAFETY: NUL-terminated just above.
        let name = unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().trim().to_string();
        let mut bdfid = 0u64;
        let pci_bus_id = match rsmi!(lib, rsmi_dev_pci_id_get(index, &mut bdfid)) {
            Ok(()) => pci_bus_id(bdfid),
            Err(_) => String::new(),
        };
        let mut unique = 0u64;
        // rocminfo's and ROCR_VISIBLE_DEVICES' form of an AMD GPU's UUID.
        let uuid = match rsmi!(lib, rsmi_dev_unique_id_get(index, &mut unique)) {
            Ok(()) => format!("GPU-{unique:016x}"),
            Err(_) if !pci_bus_id.is_empty() => format!("GPU-pci-{pci_bus_id}"),
            Err(e) => return Err(e),
        };
        let mut minor = 0u32;
        let minor_number = rsmi!(lib, rsmi_dev_drm_render_minor_get(index, &mut minor))
            .ok()
            .and_then(|()| minor.checked_sub(RENDER_MINOR_BASE));
        let (mut max_uw, mut min_uw, mut default_uw) = (0u64, 0u64, 0u64);
        let range = rsmi!(lib, rsmi_dev_power_cap_range_get(index, 0, &mut max_uw, &mut min_uw))
            .ok()
            .filter(|()| min_uw <= max_uw && max_uw > 0);
        let default = rsmi!(lib, rsmi_dev_power_cap_default_get(index, &mut default_uw)).ok();
        let mut sm_clocks_mhz = self.clocks(index, RSMI_CLK_TYPE_SYS).map(|(all, _)| all).unwrap_or_default();
        sm_clocks_mhz.sort_unstable_by(|a, b| b.cmp(a));
        Ok(GpuInfo {
            index,
            uuid,
            name,
            pci_bus_id,
            minor_number,
            energy_counter: !matches!(self.counter(index), Err(GpuError::NotSupported)),
            power_limit_min_mw: range.map(|()| uw_to_mw(min_uw)),
            power_limit_max_mw: range.map(|()| uw_to_mw(max_uw)),
            power_limit_default_mw: default.map(|()| uw_to_mw(default_uw)),
            sm_clocks_mhz,
            mem_clocks_mhz: self.clocks(index, RSMI_CLK_TYPE_MEM).map(|(all, _)| all).unwrap_or_default(),
            mig: Vec::new(),
        })
    }

    fn check_index(&self, index: u32) -> Result<(), GpuError> {
        if (index as usize) < self.devices.len() {
            Ok(())
        } else {
            Err(GpuError::NotFound(format!("index {index}")))
        }
    }

    /// The energy counter in mJ: ROCm SMI's count times its resolution (µJ).
    fn counter(&self, index: u32) -> Result<u64, GpuError> {
        let (mut count, mut resolution_uj, mut timestamp) = (0u64, 0f32, 0u64);
        rsmi!(self.lib, rsmi_dev_energy_count_get(index, &mut count, &mut resolution_uj, &mut timestamp))?;
        counter_mj(count, resolution_uj)
    }

    /// The clock's levels (MHz) and the current one, where the GPU says.
    fn clocks(&self, index: u32, clock: rsmi_clk_type_t) -> Result<(Vec<u32>, Option<u32>), GpuError> {
        // SAFETY: a plain C struct of integers; all zeroes is a valid value.
        let mut f: rsmi_frequencies_t = unsafe { std::mem::zeroed() };
        rsmi!(self.lib, rsmi_dev_gpu_clk_freq_get(index, clock, &mut f))?;
        let n = (f.num_supported as usize).min(f.frequency.len());
        let mhz: Vec<u32> = f.frequency[..n].iter().map(|&hz| (hz / 1_000_000) as u32).collect();
        let current = mhz.get(f.current as usize).copied();
        Ok((mhz, current))
    }

    /// The pids of every process ROCm SMI sees computing on any GPU.
    fn all_processes(&self) -> Result<Vec<u32>, GpuError> {
        // Processes may start between counting and listing: room for a few more, and the
        // count asked again if even that was short.
        for _ in 0..3 {
            let mut n = 0u32;
            rsmi!(self.lib, rsmi_compute_process_info_get(std::ptr::null_mut(), &mut n))?;
            let room = n.saturating_add(8).min(MAX_PROCESSES);
            // SAFETY: a plain C struct of integers; all zeroes is a valid value.
            let mut procs = vec![unsafe { std::mem::zeroed::<rsmi_process_info_t>() }; room as usize];
            let mut got = room;
            // SAFETY: as in `rsmi!`: `room` entries at `procs`, their count in `got`.
            let code = match self.lib.rsmi_compute_process_info_get.as_ref() {
                Ok(f) => unsafe { f(procs.as_mut_ptr(), &mut got) },
                Err(_) => return Err(GpuError::NotSupported),
            };
            if code == RSMI_STATUS_INSUFFICIENT_SIZE && room < MAX_PROCESSES {
                continue;
            }
            status(&self.lib, code)?;
            procs.truncate(got.min(room) as usize);
            return Ok(procs.iter().map(|p| p.process_id).collect());
        }
        Err(GpuError::Other("the compute processes kept changing while being listed".into()))
    }

    /// Whether process `pid` uses GPU `index`. A process gone meanwhile uses none.
    fn uses(&self, pid: u32, index: u32) -> Result<bool, GpuError> {
        let mut gpus = vec![0u32; self.devices.len().max(1)];
        let mut n = gpus.len() as u32;
        match rsmi!(self.lib, rsmi_compute_process_gpus_get(pid, gpus.as_mut_ptr(), &mut n)) {
            Ok(()) => Ok(gpus[..(n as usize).min(gpus.len())].contains(&index)),
            Err(GpuError::NotFound(_)) => Ok(false),
            Err(e) => Err(e),
        }
    }
}

impl Drop for RocmBackend {
    fn drop(&mut self) {
        let _ = rsmi!(self.lib, rsmi_shut_down());
    }
}

/// ROCm SMI's energy count in mJ: `count` × `resolution_uj` µJ, rounded down.
pub fn counter_mj(count: u64, resolution_uj: f32) -> Result<u64, GpuError> {
    if !(resolution_uj.is_finite() && resolution_uj > 0.0) {
        return Err(GpuError::Other(format!("energy counter resolution {resolution_uj} µJ")));
    }
    Ok((count as f64 * f64::from(resolution_uj) / 1000.0).floor() as u64)
}

/// `domain:bus:device.function` from ROCm SMI's BDFID (`domain << 32 | bus << 8 | device << 3
/// | function`).
pub fn pci_bus_id(bdfid: u64) -> String {
    let domain = (bdfid >> 32) & 0xffff_ffff;
    let bus = (bdfid >> 8) & 0xff;
    let device = (bdfid >> 3) & 0x1f;
    let function = bdfid & 0x7;
    format!("{domain:04x}:{bus:02x}:{device:02x}.{function:x}")
}

fn uw_to_mw(uw: u64) -> u32 {
    u32::try_from(uw / 1000).unwrap_or(u32::MAX)
}

/// Maps a ROCm SMI status to a [`GpuError`], with the library's own words for it.
fn status(lib: &RocmSmi, code: rsmi_status_t) -> Result<(), GpuError> {
    let words = || {
        let mut text: *const c_char = std::ptr::null();
        match lib.rsmi_status_string.as_ref() {
            // SAFETY: ROCm SMI's status_string writes a pointer to a static string.
            Ok(f) if unsafe { f(code, &mut text) } == RSMI_STATUS_SUCCESS && !text.is_null() => {
                // SAFETY: a NUL-terminated static string of the library.
                unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
            }
            _ => format!("ROCm SMI status {code}"),
        }
    };
    match code {
        RSMI_STATUS_SUCCESS => Ok(()),
        RSMI_STATUS_NOT_SUPPORTED | RSMI_STATUS_NOT_YET_IMPLEMENTED => Err(GpuError::NotSupported),
        RSMI_STATUS_PERMISSION => Err(GpuError::NoPermission),
        RSMI_STATUS_INVALID_ARGS | RSMI_STATUS_INPUT_OUT_OF_BOUNDS => Err(GpuError::InvalidValue(words())),
        RSMI_STATUS_NOT_FOUND => Err(GpuError::NotFound(words())),
        RSMI_STATUS_INIT_ERROR => Err(GpuError::Driver(words())),
        // The GPU's sysfs files could not be read: it is gone (removed, or in a reset).
        RSMI_STATUS_FILE_ERROR => Err(GpuError::Lost),
        _ => Err(GpuError::Other(words())),
    }
}

/// `Ok(None)` for "not supported", so a reading carries what the GPU has.
fn optional<T>(r: Result<T, GpuError>) -> Result<Option<T>, GpuError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(GpuError::NotSupported) => Ok(None),
        Err(e) => Err(e),
    }
}

impl GpuBackend for RocmBackend {
    fn devices(&self) -> &[GpuInfo] {
        &self.devices
    }

    fn read(&self, index: u32) -> Result<GpuReading, GpuError> {
        self.check_index(index)?;
        let energy_mj = optional(self.counter(index))?;
        let t_ns = now_ns();
        let mut power_uw = 0u64;
        let power_mw = optional(rsmi!(self.lib, rsmi_dev_power_ave_get(index, 0, &mut power_uw)))?
            .map(|()| uw_to_mw(power_uw));
        let mut busy = 0u32;
        let util_pct = optional(rsmi!(self.lib, rsmi_dev_busy_percent_get(index, &mut busy)))?.map(|()| busy);
        let sm_clock_mhz = optional(self.clocks(index, RSMI_CLK_TYPE_SYS))?.and_then(|(_, now)| now);
        Ok(GpuReading { t_ns, energy_mj, power_mw, sm_clock_mhz, util_pct })
    }

    fn read_counter(&self, index: u32) -> Result<(i64, Option<u64>), GpuError> {
        self.check_index(index)?;
        let energy_mj = optional(self.counter(index))?;
        Ok((now_ns(), energy_mj))
    }

    fn settings(&self, index: u32) -> Result<GpuSettings, GpuError> {
        self.check_index(index)?;
        let mut cap_uw = 0u64;
        let cap = optional(rsmi!(self.lib, rsmi_dev_power_cap_get(index, 0, &mut cap_uw)))?;
        Ok(GpuSettings { power_limit_mw: cap.map(|()| uw_to_mw(cap_uw)), app_sm_clock_mhz: None })
    }

    fn compute_processes(&self, index: u32) -> Result<Vec<u32>, GpuError> {
        self.check_index(index)?;
        let mut mine = Vec::new();
        for pid in self.all_processes()? {
            if self.uses(pid, index)? {
                mine.push(pid);
            }
        }
        Ok(mine)
    }

    fn set_power_limit(&self, index: u32, mw: u32) -> Result<(), GpuError> {
        self.check_index(index)?;
        let info = &self.devices[index as usize];
        if let (Some(lo), Some(hi)) = (info.power_limit_min_mw, info.power_limit_max_mw)
            && !(lo..=hi).contains(&mw)
        {
            return Err(GpuError::InvalidValue(format!(
                "power cap {} W is outside this GPU's range {}-{} W",
                mw / 1000,
                lo / 1000,
                hi / 1000
            )));
        }
        rsmi!(self.lib, rsmi_dev_power_cap_set(index, 0, u64::from(mw) * 1000))
    }

    /// The SM (`sclk`) range, as `rocm-smi --setsrange` sets it.
    fn set_locked_clocks(&self, index: u32, min_mhz: u32, max_mhz: u32) -> Result<(), GpuError> {
        self.check_index(index)?;
        if min_mhz > max_mhz {
            return Err(GpuError::InvalidValue(format!("clock range {min_mhz}-{max_mhz} MHz is empty")));
        }
        rsmi!(self.lib, rsmi_dev_clk_range_set(index, min_mhz.into(), max_mhz.into(), RSMI_CLK_TYPE_SYS))
    }

    /// The performance level back to `auto`: the driver chooses the clocks again.
    fn reset_locked_clocks(&self, index: u32) -> Result<(), GpuError> {
        self.check_index(index)?;
        rsmi!(self.lib, rsmi_dev_perf_level_set_v1(index, RSMI_DEV_PERF_LEVEL_AUTO))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bdfids_read_as_rocm_smi_documents_them() {
        // domain 0, bus 0xc1, device 0, function 0 (an MI250X GCD's address).
        assert_eq!(pci_bus_id(0xc1 << 8), "0000:c1:00.0");
        assert_eq!(pci_bus_id((1 << 32) | (0x2a << 8) | (3 << 3) | 1), "0001:2a:03.1");
    }

    #[test]
    fn counts_become_millijoules_by_their_resolution() {
        // 65 628 counts of 15.3 µJ: 1 004 108 µJ (amdsmi issue 38's reading), 1 004 mJ.
        assert_eq!(counter_mj(65_628, 15.3).unwrap(), 1004);
        assert_eq!(counter_mj(0, 15.3).unwrap(), 0);
        assert!(counter_mj(1, 0.0).is_err() && counter_mj(1, f32::NAN).is_err());
    }
}
