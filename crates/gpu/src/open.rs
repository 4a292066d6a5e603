//! Which backend drives a node's GPUs: NVIDIA's NVML, AMD's ROCm SMI, or whichever of the two
//! finds GPUs (`[gpu] backend = "nvml" | "amd" | "auto"`).

use std::path::Path;
use std::sync::Arc;

use super::{GpuBackend, GpuError, NvmlBackend, RocmBackend};

/// The backend a configuration asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// NVIDIA's NVML.
    Nvml,
    /// AMD's ROCm SMI.
    Amd,
    /// NVML where it loads and finds a GPU, else ROCm SMI where it does.
    Auto,
}

/// Libraries to load instead of the system's (`None`: the system's).
#[derive(Debug, Clone, Copy, Default)]
pub struct Libraries<'a> {
    /// NVML (`libnvidia-ml.so.1`).
    pub nvml: Option<&'a Path>,
    /// ROCm SMI (`librocm_smi64.so.1`).
    pub amd: Option<&'a Path>,
}

/// An open backend and what it is, for the log: `NVML (driver 550.54)` or `ROCm SMI`.
pub struct Opened {
    /// The backend.
    pub backend: Arc<dyn GpuBackend>,
    /// Which one it is, in words.
    pub what: String,
}

/// Opens the backend `choice` names. With [`Choice::Auto`] a library that does not load, or
/// finds no GPU, gives way to the next; when neither finds one, the error gives both reasons.
pub fn open(choice: Choice, libraries: Libraries<'_>) -> Result<Opened, GpuError> {
    let nvml = || {
        NvmlBackend::open(libraries.nvml).map(|b| {
            let what = format!("NVML (driver {})", b.driver_version().unwrap_or_else(|| "unknown".into()));
            Opened { backend: Arc::new(b), what }
        })
    };
    let amd =
        || RocmBackend::open(libraries.amd).map(|b| Opened { backend: Arc::new(b), what: "ROCm SMI".into() });
    match choice {
        Choice::Nvml => nvml(),
        Choice::Amd => amd(),
        Choice::Auto => {
            let why_not_nvml = match nvml() {
                Ok(o) if !o.backend.devices().is_empty() => return Ok(o),
                Ok(_) => "NVML found no GPU".to_string(),
                Err(e) => e.to_string(),
            };
            match amd() {
                Ok(o) if !o.backend.devices().is_empty() => Ok(o),
                Ok(_) => Err(GpuError::Driver(format!("{why_not_nvml}; ROCm SMI found no GPU"))),
                Err(e) => Err(GpuError::Driver(format!("{why_not_nvml}; {e}"))),
            }
        }
    }
}
