//! A simulated ROCm SMI (`librocm_smi64.so`) for wattson's tests: AMD GPUs on the same
//! physics, state files and ground truth as the fake NVML (`fake_nvml::Sim`), so one fake
//! driver directory can be driven and checked the same way whichever vendor's library reads
//! it.
//!
//! Built as a cdylib (`libfake_amdsmi.so`), it exports the ROCm SMI functions wattson's AMD
//! backend calls, with the types of `wattson-rocm-smi-sys` (bindgen over `rocm_smi.h`), so
//! the layouts are the header's. `rsmi_init` reads the directory from [`DIR_ENV`].
//!
//! ROCm SMI's published quirks it models:
//! - **Counter resolution.** The energy count is in units of a resolution in µJ that the call
//!   returns beside it, 15.3 µJ on MI100 to MI300 (e.g. `counter_resolution: 15.300000190734863`
//!   in AMDResearch/hpcfund issue 21, `res=15.3` in ROCm/amdsmi issue 115; `rocm-smi
//!   --showenergycount` prints "Energy counter: 65628 / Accumulated Energy (uJ): 1004108.41",
//!   ROCm/amdsmi issue 38): [`RESOLUTION_UJ`]; the count is the energy in whole units.
//! - **Update interval.** The driver reads the counter at most every millisecond and serves
//!   its cached value to calls within that interval (AMD's answer in
//!   ROCm/legacy-rocm-build issue 1649): the count served is the energy at the last whole
//!   millisecond, [`UPDATE_INTERVAL_NS`].
//! - **Units.** Power and power caps in µW, clocks in Hz, `rsmi_dev_power_cap_range_get`
//!   writing the maximum before the minimum, the render node `/dev/dri/renderD<128+N>` as the
//!   device's minor (what Slurm's `gpu/rsmi` names GPUs by).
//!
//! Each counter read is logged as the fake NVML logs its reads (`fake_nvml::Sim::
//! counter_read_instants`), with the count in mJ by the published conversion and the instant
//! at which the served value was the GPU's energy.

mod ffi;

pub use ffi::DIR_ENV;

use std::path::{Path, PathBuf};

/// File name cargo gives the cdylib.
pub const LIBRARY_FILE: &str = "libfake_amdsmi.so";

/// The energy counter's resolution, µJ per count, as MI100 to MI300 report it.
pub const RESOLUTION_UJ: f32 = 15.3;

/// How often the counter the library serves is refreshed, ns (1 ms).
pub const UPDATE_INTERVAL_NS: i64 = 1_000_000;

/// Finds `libfake_amdsmi.so` built in the same cargo profile directory as `exe`.
pub fn library_path_next_to(exe: &Path) -> Option<PathBuf> {
    fake_nvml::library_named_next_to(exe, LIBRARY_FILE)
}

/// The 64-bit unique id the fake reports for a GPU of this UUID (`rsmi_dev_unique_id_get`):
/// the UUID's last 16 hex digits. wattson names the GPU `GPU-<id as 16 hex digits>`.
pub fn unique_id(uuid: &str) -> u64 {
    let hex: String = uuid.chars().filter(char::is_ascii_hexdigit).collect();
    let tail = &hex[hex.len().saturating_sub(16)..];
    u64::from_str_radix(tail, 16).unwrap_or(0)
}

/// The UUID wattson's AMD backend gives the GPU the fake driver describes with `uuid`.
pub fn wattson_uuid(uuid: &str) -> String {
    format!("GPU-{:016x}", unique_id(uuid))
}

/// The SM clock levels the fake reports (at most ROCm SMI's 32): every k-th of the GPU's
/// clocks, highest first, always with the lowest.
pub fn clock_levels(clocks_desc: &[u32]) -> Vec<u32> {
    let max = wattson_rocm_smi_sys::sys::RSMI_MAX_NUM_FREQUENCIES as usize;
    let step = clocks_desc.len().div_ceil(max - 1).max(1);
    let mut levels: Vec<u32> = clocks_desc.iter().step_by(step).copied().collect();
    if let Some(&last) = clocks_desc.last()
        && levels.last() != Some(&last)
    {
        levels.push(last);
    }
    levels
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clock_levels_fit_rocm_smis_table() {
        let clocks: Vec<u32> = (500..=2100).rev().filter(|f| (2100 - f) % 15 == 0).collect();
        let levels = clock_levels(&clocks);
        assert!(levels.len() <= 32, "{}", levels.len());
        assert_eq!((levels[0], *levels.last().unwrap()), (2100, clocks[clocks.len() - 1]));
        assert_eq!(clock_levels(&[1200, 900]), vec![1200, 900]);
    }

    #[test]
    fn unique_ids_come_from_the_uuid() {
        assert_eq!(unique_id("GPU-01234567-89ab-4cde-a001-0123456789ab"), 0xa001_0123_4567_89ab);
        assert_eq!(wattson_uuid("GPU-00000000-0000-4000-a000-000000000001"), "GPU-a000000000000001");
    }
}
