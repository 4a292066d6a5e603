//! [`GpuBackend`] over NVML, through nvml-wrapper.
//!
//! The same code drives real GPUs (the driver's `libnvidia-ml.so.1`) and the simulated GPUs
//! of the tests (a library path in the configuration).

use std::path::Path;

use nvml_wrapper::enum_wrappers::device::Clock;
use nvml_wrapper::enums::device::GpuLockedClocksSetting;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::{Device, Nvml};

use super::{GpuBackend, GpuError, GpuInfo, GpuSettings};
use nvml_wrapper_sys::bindings::{NvmlLib, nvmlDevice_t, nvmlReturn_t};
use wattson_types::energy::GpuReading;
use wattson_types::gpu::MigInstance;
use wattson_types::now_ns;

/// NVML-backed GPUs. Devices are looked up per call, as nvml-wrapper's `Device` borrows `Nvml`.
pub struct NvmlBackend {
    nvml: Nvml,
    devices: Vec<GpuInfo>,
}

impl NvmlBackend {
    /// Loads NVML (from `library` if given) and enumerates the GPUs.
    pub fn open(library: Option<&Path>) -> Result<NvmlBackend, GpuError> {
        let nvml = match library {
            Some(path) => Nvml::builder().lib_path(path.as_os_str()).init(),
            None => Nvml::init(),
        }
        .map_err(|e| GpuError::Driver(format!("cannot load NVML{}: {e}", describe(library))))?;
        let count = nvml.device_count().map_err(map_err)?;
        let mut devices = Vec::with_capacity(count as usize);
        for index in 0..count {
            devices.push(describe_device(&nvml.device_by_index(index).map_err(map_err)?, index)?);
        }
        Ok(NvmlBackend { nvml, devices })
    }

    /// The driver's version string.
    pub fn driver_version(&self) -> Option<String> {
        self.nvml.sys_driver_version().ok()
    }

    fn device(&self, index: u32) -> Result<Device<'_>, GpuError> {
        if index as usize >= self.devices.len() {
            return Err(GpuError::NotFound(format!("index {index}")));
        }
        self.nvml.device_by_index(index).map_err(map_err)
    }
}

fn describe(library: Option<&Path>) -> String {
    library.map(|p| format!(" from {}", p.display())).unwrap_or_default()
}

fn describe_device(d: &Device<'_>, index: u32) -> Result<GpuInfo, GpuError> {
    let constraints = d.power_management_limit_constraints().ok();
    let mem_clocks_mhz = d.supported_memory_clocks().unwrap_or_default();
    let sm_clocks_mhz =
        mem_clocks_mhz.iter().max().and_then(|m| d.supported_graphics_clocks(*m).ok()).unwrap_or_default();
    Ok(GpuInfo {
        index,
        uuid: d.uuid().map_err(map_err)?,
        name: d.name().map_err(map_err)?,
        pci_bus_id: d.pci_info().map(|p| p.bus_id).unwrap_or_default(),
        minor_number: d.minor_number().ok(),
        energy_counter: !matches!(d.total_energy_consumption(), Err(NvmlError::NotSupported)),
        power_limit_min_mw: constraints.as_ref().map(|c| c.min_limit),
        power_limit_max_mw: constraints.as_ref().map(|c| c.max_limit),
        power_limit_default_mw: d.power_management_limit_default().ok(),
        sm_clocks_mhz,
        mem_clocks_mhz,
        mig: mig_instances(d),
    })
}

/// The GPU's MIG instances, in MIG index order; none where MIG is off or not supported. An
/// instance the driver does not describe is left out (its jobs are then refused by name).
fn mig_instances(d: &Device<'_>) -> Vec<MigInstance> {
    if !d.mig_mode().is_ok_and(|m| m.current == 1) {
        return Vec::new();
    }
    let most = d.mig_device_count().unwrap_or(0);
    // The driver numbers the instances from 0 without gaps.
    (0..most).map_while(|k| d.mig_device_by_index(k).ok()).filter_map(|m| describe_mig(&m)).collect()
}

fn describe_mig(m: &Device<'_>) -> Option<MigInstance> {
    let uuid = m.uuid().ok()?;
    let attributes = m.attributes().ok()?;
    // "NVIDIA A100-SXM4-40GB MIG 3g.20gb": the profile is the last word; else from the slices.
    let profile = m
        .name()
        .ok()
        .and_then(|name| name.rsplit_once(" MIG ").map(|(_, p)| p.trim().to_string()))
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| {
            let (c, g) = (attributes.compute_instance_slice_count, attributes.gpu_instance_slice_count);
            let gb = attributes.memory_size_mb.div_ceil(1024);
            if c == g { format!("{g}g.{gb}gb") } else { format!("{c}c.{g}g.{gb}gb") }
        });
    Some(MigInstance {
        uuid,
        profile,
        gpu_instance_id: instance_id(m, |lib| lib.nvmlDeviceGetGpuInstanceId.as_ref().ok().copied()),
        compute_instance_id: instance_id(m, |lib| lib.nvmlDeviceGetComputeInstanceId.as_ref().ok().copied()),
        compute_slices: attributes.compute_instance_slice_count,
    })
}

type IdCall = unsafe extern "C" fn(nvmlDevice_t, *mut std::ffi::c_uint) -> nvmlReturn_t;

/// A MIG instance's GPU or compute instance id: nvml-wrapper 0.13 wraps neither call, so it
/// is made through the library's own symbol (`None` where the driver lacks it or says nothing).
fn instance_id(m: &Device<'_>, call: impl FnOnce(&NvmlLib) -> Option<IdCall>) -> Option<u32> {
    let f = call(m.nvml().lib())?;
    let mut id = 0;
    // SAFETY: the symbol is NVML's, called with the handle nvml-wrapper holds for this device
    // (valid while `m` lives) and a valid out-pointer, as NVML documents.
    let rc = unsafe { f(m.handle(), &mut id) };
    (rc == 0).then_some(id)
}

fn map_err(e: NvmlError) -> GpuError {
    match e {
        NvmlError::GpuLost => GpuError::Lost,
        NvmlError::NotSupported => GpuError::NotSupported,
        NvmlError::NoPermission => GpuError::NoPermission,
        NvmlError::InvalidArg => GpuError::InvalidValue("rejected by the driver".into()),
        NvmlError::NotFound => GpuError::NotFound("no such device".into()),
        NvmlError::DriverNotLoaded | NvmlError::Uninitialized | NvmlError::LibraryNotFound => {
            GpuError::Driver(e.to_string())
        }
        other => GpuError::Other(other.to_string()),
    }
}

/// Turns "not supported" into `None` and keeps real failures.
fn optional<T>(r: Result<T, NvmlError>) -> Result<Option<T>, GpuError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(NvmlError::NotSupported) => Ok(None),
        Err(e) => Err(map_err(e)),
    }
}

impl GpuBackend for NvmlBackend {
    fn devices(&self) -> &[GpuInfo] {
        &self.devices
    }

    fn read(&self, index: u32) -> Result<GpuReading, GpuError> {
        let d = self.device(index)?;
        // The counter is read first and timestamped at once: only it needs a precise time.
        let energy_mj = optional(d.total_energy_consumption())?;
        let t_ns = now_ns();
        Ok(GpuReading {
            t_ns,
            energy_mj,
            power_mw: optional(d.power_usage())?,
            sm_clock_mhz: optional(d.clock_info(Clock::SM))?,
            util_pct: optional(d.utilization_rates().map(|u| u.gpu))?,
        })
    }

    fn read_counter(&self, index: u32) -> Result<(i64, Option<u64>), GpuError> {
        let energy_mj = optional(self.device(index)?.total_energy_consumption())?;
        Ok((now_ns(), energy_mj))
    }

    fn settings(&self, index: u32) -> Result<GpuSettings, GpuError> {
        let d = self.device(index)?;
        Ok(GpuSettings {
            power_limit_mw: optional(d.power_management_limit())?,
            app_sm_clock_mhz: optional(d.applications_clock(Clock::Graphics))?,
        })
    }

    fn compute_processes(&self, index: u32) -> Result<Vec<u32>, GpuError> {
        let processes = self.device(index)?.running_compute_processes().map_err(map_err)?;
        Ok(processes.into_iter().map(|p| p.pid).collect())
    }

    fn process_utilization(&self, index: u32, since_us: u64) -> Result<Vec<(u32, u32)>, GpuError> {
        match self.device(index)?.process_utilization_stats(since_us) {
            Ok(samples) => Ok(samples.into_iter().map(|s| (s.pid, s.sm_util)).collect()),
            // The driver's answer when it holds no sample since `since_us`.
            Err(NvmlError::NotFound) => Ok(Vec::new()),
            Err(e) => Err(map_err(e)),
        }
    }

    fn set_power_limit(&self, index: u32, mw: u32) -> Result<(), GpuError> {
        let info =
            self.devices.get(index as usize).ok_or_else(|| GpuError::NotFound(format!("index {index}")))?;
        if let (Some(lo), Some(hi)) = (info.power_limit_min_mw, info.power_limit_max_mw)
            && !(lo..=hi).contains(&mw)
        {
            return Err(GpuError::InvalidValue(format!(
                "power limit {} W is outside this GPU's range {}-{} W",
                mw / 1000,
                lo / 1000,
                hi / 1000
            )));
        }
        self.device(index)?.set_power_management_limit(mw).map_err(map_err)
    }

    fn set_locked_clocks(&self, index: u32, min_mhz: u32, max_mhz: u32) -> Result<(), GpuError> {
        if min_mhz > max_mhz {
            return Err(GpuError::InvalidValue(format!(
                "locked clock range {min_mhz}-{max_mhz} MHz is empty"
            )));
        }
        let setting = GpuLockedClocksSetting::Numeric { min_clock_mhz: min_mhz, max_clock_mhz: max_mhz };
        self.device(index)?.set_gpu_locked_clocks(setting).map_err(map_err)
    }

    fn reset_locked_clocks(&self, index: u32) -> Result<(), GpuError> {
        self.device(index)?.reset_gpu_locked_clocks().map_err(map_err)
    }
}
