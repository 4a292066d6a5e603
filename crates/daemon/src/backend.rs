//! Opens the GPU backend `[gpu]` names (NVML, ROCm SMI, or whichever finds GPUs), read only
//! where `[gpu] read_only` says so, and says in the log which one drives the node.

use std::sync::Arc;

use tracing::info;
use wattson_config::{Backend, GpuConfig};
use wattson_gpu::{Choice, GpuBackend, Libraries};

/// The backend of `[gpu]`, opened; the error is worded for a person.
pub fn open(config: &GpuConfig) -> Result<Arc<dyn GpuBackend>, String> {
    let choice = match config.backend {
        Backend::Nvml => Choice::Nvml,
        Backend::Amd => Choice::Amd,
        Backend::Auto => Choice::Auto,
    };
    let libraries = Libraries { nvml: config.nvml_library.as_deref(), amd: config.amd_library.as_deref() };
    let opened = wattson_gpu::open(choice, libraries).map_err(|e| e.to_string())?;
    info!(gpus = opened.backend.devices().len(), backend = %opened.what, "GPUs found");
    if config.read_only {
        info!("[gpu] read_only: no GPU setting is changed, every job runs at what its GPUs have");
        return Ok(Arc::new(wattson_gpu::ReadOnly(opened.backend)));
    }
    Ok(opened.backend)
}
