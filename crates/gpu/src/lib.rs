//! The GPU backend: the only code in wattson that talks to GPUs.
//!
//! [`GpuBackend`] is blocking (NVML and ROCm SMI calls are); the daemon runs it off the async
//! runtime. Errors are per GPU, so one failing GPU never stops the others from being read.
//! Two implementations: NVIDIA's NVML ([`NvmlBackend`]) and AMD's ROCm SMI ([`RocmBackend`]);
//! [`open`] picks one as the configuration says.

mod nvml;
mod open;
mod read_only;
pub mod rocm;

pub use nvml::NvmlBackend;
pub use open::{Choice, Libraries, Opened, open};
pub use read_only::ReadOnly;
pub use rocm::RocmBackend;

use wattson_types::energy::GpuReading;
pub use wattson_types::gpu::{GpuInfo, GpuSetting, GpuSettings, MigInstance};
use wattson_types::job::GpuRef;

/// Why a GPU call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GpuError {
    /// The GPU fell off the bus or stopped answering.
    #[error("GPU is lost")]
    Lost,
    /// No GPU matches the given index, UUID or PCI bus id.
    #[error("no such GPU: {0}")]
    NotFound(String),
    /// The GPU does not support this call.
    #[error("not supported by this GPU")]
    NotSupported,
    /// The caller lacks the privilege (root) for this call.
    #[error("permission denied (setting GPU clocks and power limits needs root)")]
    NoPermission,
    /// A value outside what the GPU supports.
    #[error("invalid value: {0}")]
    InvalidValue(String),
    /// The driver or library could not be used at all.
    #[error("GPU driver unavailable: {0}")]
    Driver(String),
    /// The GPU did not answer within the deadline (a wedged driver or a GPU in reset).
    #[error("GPU did not answer within {0:?}")]
    Timeout(std::time::Duration),
    /// wattson reads this node's GPUs and changes none of them (`[gpu] read_only`).
    #[error("GPU settings are read only here ([gpu] read_only)")]
    ReadOnly,
    /// Anything else the driver reported.
    #[error("GPU error: {0}")]
    Other(String),
}

/// Access to a node's GPUs. Implementations must be cheap to call from several threads.
pub trait GpuBackend: Send + Sync {
    /// Every GPU on the node, by index.
    fn devices(&self) -> &[GpuInfo];
    /// Reads the energy counter (timestamped at the read), power, SM clock and utilisation.
    fn read(&self, index: u32) -> Result<GpuReading, GpuError>;
    /// Current settings.
    fn settings(&self, index: u32) -> Result<GpuSettings, GpuError>;
    /// Process ids of the compute processes running on the GPU.
    fn compute_processes(&self, index: u32) -> Result<Vec<u32>, GpuError>;
    /// Each process's SM utilisation on the GPU (percent) in the driver's samples since
    /// `since_us` (µs since the Unix epoch): (pid, SM %) per sample. `NotSupported` where the
    /// driver gives no per-process figures.
    fn process_utilization(&self, index: u32, since_us: u64) -> Result<Vec<(u32, u32)>, GpuError> {
        let _ = (index, since_us);
        Err(GpuError::NotSupported)
    }
    /// Sets the power limit, in mW.
    fn set_power_limit(&self, index: u32, mw: u32) -> Result<(), GpuError>;
    /// Locks the SM clock into `[min, max]` MHz.
    fn set_locked_clocks(&self, index: u32, min_mhz: u32, max_mhz: u32) -> Result<(), GpuError>;
    /// Returns the SM clock to the driver's control.
    fn reset_locked_clocks(&self, index: u32) -> Result<(), GpuError>;

    /// Reads only the energy counter (mJ; `None` where the GPU has none), with the instant it
    /// was read at (ns since the Unix epoch): the quick read for watching the counter step.
    fn read_counter(&self, index: u32) -> Result<(i64, Option<u64>), GpuError> {
        self.read(index).map(|r| (r.t_ns, r.energy_mj))
    }

    /// [`GpuBackend::read_counter`] of several GPUs, results in the order given.
    fn read_counters(&self, indices: &[u32]) -> Vec<Result<(i64, Option<u64>), GpuError>> {
        indices.iter().map(|&i| self.read_counter(i)).collect()
    }

    /// Reads several GPUs, results in the order given. Implementations may read them at once.
    fn read_many(&self, indices: &[u32]) -> Vec<Result<GpuReading, GpuError>> {
        indices.iter().map(|&i| self.read(i)).collect()
    }

    /// Applies a setting.
    fn apply(&self, index: u32, setting: GpuSetting) -> Result<(), GpuError> {
        match setting {
            GpuSetting::PowerLimit { mw } => self.set_power_limit(index, mw),
            GpuSetting::LockedClock { mhz } => self.set_locked_clocks(index, mhz, mhz),
        }
    }

    /// Returns the GPU to its defaults: default power limit, SM clock under driver control.
    fn restore_defaults(&self, index: u32) -> Result<(), GpuError> {
        let info =
            self.devices().get(index as usize).ok_or_else(|| GpuError::NotFound(format!("index {index}")))?;
        if let Some(mw) = info.power_limit_default_mw {
            self.set_power_limit(index, mw)?;
        }
        self.reset_locked_clocks(index)
    }

    /// Resolves Slurm's number of a GPU (see [`GpuInfo::slurm_number`]), a UUID or a PCI bus id
    /// to the GPU's NVML index; a MIG instance to its GPU's ([`GpuBackend::resolve_instance`]).
    fn resolve(&self, gpu: &GpuRef) -> Result<u32, GpuError> {
        self.resolve_instance(gpu).map(|(index, _)| index)
    }

    /// Resolves a GPU as a job names it to its NVML index and, for a MIG instance, which of the
    /// GPU's instances: a `MIG-` UUID (or `MIG-<GPU UUID>/<GI id>/<CI id>`), Slurm's number, a
    /// GPU's UUID or PCI bus id. On a node with a GPU in MIG mode Slurm's numbers follow its
    /// GPU GRES list ([`slurm_places`]).
    fn resolve_instance(&self, gpu: &GpuRef) -> Result<(u32, Option<MigInstance>), GpuError> {
        let devices = self.devices();
        match gpu {
            GpuRef::Id(id) if id.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("MIG-")) => devices
                .iter()
                .find_map(|d| {
                    d.mig.iter().find(|m| m.is_named(&d.uuid, id)).map(|m| (d.index, Some(m.clone())))
                })
                .ok_or_else(|| GpuError::NotFound(format!("MIG instance {id}"))),
            GpuRef::Index(n) if devices.iter().any(|d| !d.mig.is_empty()) => {
                let places = slurm_places(devices);
                places.get(*n as usize).cloned().ok_or_else(|| {
                    GpuError::NotFound(format!(
                        "index {n} (this node's GPUs and MIG instances are {})",
                        places.len()
                    ))
                })
            }
            _ => self.resolve_whole(gpu).map(|index| (index, None)),
        }
    }

    /// [`GpuBackend::resolve`] for a whole GPU.
    fn resolve_whole(&self, gpu: &GpuRef) -> Result<u32, GpuError> {
        let found = match gpu {
            GpuRef::Index(n) => self.devices().iter().find(|d| d.slurm_number() == *n),
            GpuRef::Id(id) => self
                .devices()
                .iter()
                .find(|d| d.uuid.eq_ignore_ascii_case(id) || pci_bus_ids_match(&d.pci_bus_id, id)),
        };
        found.map(|d| d.index).ok_or_else(|| {
            GpuError::NotFound(match gpu {
                GpuRef::Index(n) => format!("index {n} (this node has {} GPUs)", self.devices().len()),
                GpuRef::Id(id) => id.clone(),
            })
        })
    }
}

/// Slurm's numbers of a node's GPUs where one is in MIG mode: its GPU GRES in the order
/// `AutoDetect=nvml` lists them (and a gres.conf written like it): the GPUs by their number
/// ([`GpuInfo::slurm_number`]), a GPU in MIG mode as its instances in MIG index order, each one
/// number. Each place: the GPU's NVML index, and the instance.
pub fn slurm_places(devices: &[GpuInfo]) -> Vec<(u32, Option<MigInstance>)> {
    let mut gpus: Vec<&GpuInfo> = devices.iter().collect();
    gpus.sort_by_key(|d| (d.slurm_number(), d.index));
    gpus.into_iter()
        .flat_map(|d| {
            if d.mig.is_empty() {
                vec![(d.index, None)]
            } else {
                d.mig.iter().map(|m| (d.index, Some(m.clone()))).collect()
            }
        })
        .collect()
}

/// Compares PCI bus ids as numbers, so `00000000:17:00.0`, `0000:17:00.0` and `17:00.0` match.
fn pci_bus_ids_match(a: &str, b: &str) -> bool {
    matches!((parse_pci(a), parse_pci(b)), (Some(x), Some(y)) if x == y)
}

/// `[domain:]bus:device.function` as numbers (hex), domain 0 when absent.
fn parse_pci(s: &str) -> Option<[u32; 4]> {
    let (rest, function) = s.rsplit_once('.')?;
    let parts: Vec<&str> = rest.split(':').collect();
    let (domain, bus, device) = match parts[..] {
        [d, b, v] => (d, b, v),
        [b, v] => ("0", b, v),
        _ => return None,
    };
    let hex = |x: &str| u32::from_str_radix(x, 16).ok();
    Some([hex(domain)?, hex(bus)?, hex(device)?, hex(function)?])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pci_ids_match_long_and_short_forms() {
        assert!(pci_bus_ids_match("00000000:17:00.0", "00000000:17:00.0"));
        assert!(pci_bus_ids_match("00000000:17:00.0", "0000:17:00.0"));
        assert!(pci_bus_ids_match("00000000:17:00.0", "17:00.0"));
        assert!(!pci_bus_ids_match("00000000:17:00.0", "18:00.0"));
        assert!(!pci_bus_ids_match("00000000:17:00.0", ""));
        assert!(!pci_bus_ids_match("GPU-17:00.0", "17:00.0"));
    }
}
