//! MIG (Multi-Instance GPU) in the fake driver: a GPU whose `mig` list names profiles
//! (`["3g.40gb", "3g.40gb"]`) is in MIG mode with one instance per entry, in that order.
//!
//! As on A100 and H100, an instance is a GPU instance (GI) of `g` of the GPU's 7 slices with one
//! compute instance (CI) of `c` of them (`<c>c.<g>g.<mem>gb`; `<g>g.<mem>gb` when `c = g`). Each
//! instance has a `MIG-...` UUID, a GI and a CI id, and two capability device minors laid out as
//! the driver's `/proc/driver/nvidia-caps/mig-minors` lays them out. Energy, power, clocks and
//! power limits stay the physical GPU's: NVML gives no energy per instance, and a setting made
//! on the GPU applies to every instance. While MIG is on, the driver gives no utilisation (nor
//! per-process utilisation) for the GPU.

use crate::config::{Config, GpuConfig};
use serde::{Deserialize, Serialize};

/// Slices of an A100 or H100 that GPU instances are made of.
pub const GPU_SLICES: u32 = 7;

/// Most MIG instances on one GPU (one per slice).
pub const MAX_INSTANCES: u32 = GPU_SLICES;

/// Handles of MIG instances start here, above every physical GPU's handle.
const HANDLE_BASE: usize = 1 << 24;

/// A MIG profile's shape: `<c>c.<g>g.<mem>gb` or `<g>g.<mem>gb`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MigProfile {
    /// Compute slices of the compute instance (`c`; `g` when not given).
    pub compute_slices: u32,
    /// Slices of the GPU instance (`g`).
    pub gpu_slices: u32,
    /// Memory of the GPU instance, GB.
    pub memory_gb: u32,
}

/// Parses a MIG profile name such as `3g.40gb` or `1c.3g.40gb`.
pub fn parse_profile(name: &str) -> Result<MigProfile, String> {
    let bad = || format!("MIG profile {name:?}: expected <g>g.<mem>gb or <c>c.<g>g.<mem>gb (e.g. 3g.40gb)");
    let parts: Vec<&str> = name.split('.').collect();
    let num = |s: &str, suffix: &str| s.strip_suffix(suffix).and_then(|n| n.parse::<u32>().ok());
    let (c, g, mem) = match parts[..] {
        [g, mem] => (None, g, mem),
        [c, g, mem] => (Some(num(c, "c").ok_or_else(bad)?), g, mem),
        _ => return Err(bad()),
    };
    let gpu_slices = num(g, "g").ok_or_else(bad)?;
    let memory_gb = num(mem, "gb").ok_or_else(bad)?;
    if ![1, 2, 3, 4, 7].contains(&gpu_slices) || memory_gb == 0 {
        return Err(format!(
            "MIG profile {name:?}: a GPU instance has 1, 2, 3, 4 or 7 slices and some memory"
        ));
    }
    let compute_slices = c.unwrap_or(gpu_slices);
    if compute_slices == 0 || compute_slices > gpu_slices {
        return Err(format!("MIG profile {name:?}: a compute instance has 1 to {gpu_slices} slices"));
    }
    Ok(MigProfile { compute_slices, gpu_slices, memory_gb })
}

/// Checks GPU `index`'s MIG instances: a MIG-capable model (A100, H100), valid profiles, and
/// no more slices than the GPU has.
pub fn validate(gpu: &GpuConfig, index: usize) -> Result<(), String> {
    let Some(profiles) = &gpu.mig else { return Ok(()) };
    if !matches!(gpu.model.as_str(), "A100" | "H100") {
        return Err(format!("gpu {index}: a {} has no MIG (A100 and H100 do)", gpu.model));
    }
    let mut slices = 0;
    for p in profiles {
        slices += parse_profile(p).map_err(|e| format!("gpu {index}: {e}"))?.gpu_slices;
    }
    if slices > GPU_SLICES {
        return Err(format!("gpu {index}: MIG instances of {slices} slices; the GPU has {GPU_SLICES}"));
    }
    Ok(())
}

/// One MIG instance as the fake driver exposes it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MigInstance {
    /// The physical GPU (its place in the configuration).
    pub gpu: u32,
    /// The instance's MIG index on its GPU (`nvmlDeviceGetMigDeviceHandleByIndex`).
    pub index: u32,
    /// `MIG-...` UUID.
    pub uuid: String,
    /// Profile name, e.g. `3g.40gb`.
    pub profile: String,
    /// GPU instance id.
    pub gpu_instance_id: u32,
    /// Compute instance id within the GPU instance.
    pub compute_instance_id: u32,
    /// Compute slices of the compute instance.
    pub compute_slices: u32,
    /// Slices of the GPU instance.
    pub gpu_slices: u32,
    /// Memory of the GPU instance, MB.
    pub memory_mb: u64,
    /// Minor of `/dev/nvidia-caps/nvidia-cap<N>` that gives access to the GPU instance.
    pub gi_cap_minor: u32,
    /// Minor of `/dev/nvidia-caps/nvidia-cap<N>` that gives access to the compute instance.
    pub ci_cap_minor: u32,
}

/// The MIG instances of the GPU at place `gpu` (none when MIG is off or the place is empty).
pub fn instances(cfg: &Config, gpu: usize) -> Vec<MigInstance> {
    let (Some(g), Ok(spec)) = (cfg.gpu.get(gpu), cfg.spec(gpu)) else { return Vec::new() };
    let Some(profiles) = &g.mig else { return Vec::new() };
    profiles
        .iter()
        .enumerate()
        .filter_map(|(k, name)| {
            let p = parse_profile(name).ok()?;
            let (gi, ci) = (k as u32 + 1, 0);
            // mig-minors: 1 and 2 are `config` and `monitor`; then per GPU 15 GPU instances,
            // each one minor for itself and 8 for its compute instances.
            let gi_cap_minor = 3 + spec.minor_number * 135 + gi * 9;
            Some(MigInstance {
                gpu: gpu as u32,
                index: k as u32,
                uuid: mig_uuid(&spec.uuid, k),
                profile: name.clone(),
                gpu_instance_id: gi,
                compute_instance_id: ci,
                compute_slices: p.compute_slices,
                gpu_slices: p.gpu_slices,
                memory_mb: u64::from(p.memory_gb) * 1024,
                gi_cap_minor,
                ci_cap_minor: gi_cap_minor + 1 + ci,
            })
        })
        .collect()
}

/// Whether the GPU at place `gpu` is in MIG mode.
pub fn enabled(cfg: &Config, gpu: usize) -> bool {
    cfg.gpu.get(gpu).is_some_and(|g| g.mig.is_some())
}

/// A deterministic `MIG-` UUID for instance `k` of the GPU with UUID `parent`.
fn mig_uuid(parent: &str, k: usize) -> String {
    let h = parent
        .bytes()
        .chain((k as u64).to_le_bytes())
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    let l = h.rotate_left(29).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    format!(
        "MIG-{:08x}-{:04x}-5{:03x}-8{:03x}-{:012x}",
        (h >> 32) as u32,
        (h >> 16) as u16,
        (h & 0xfff) as u16,
        (l >> 52) as u16 & 0xfff,
        l & 0xffff_ffff_ffff
    )
}

/// The handle token of instance `k` of the GPU at place `gpu`.
pub(crate) fn handle(gpu: usize, k: u32) -> usize {
    HANDLE_BASE + gpu * MAX_INSTANCES as usize + k as usize + 1
}

/// The (GPU place, instance) a handle token names, if it is a MIG handle.
pub(crate) fn from_handle(token: usize) -> Option<(usize, u32)> {
    let v = token.checked_sub(HANDLE_BASE + 1)?;
    Some((v / MAX_INSTANCES as usize, (v % MAX_INSTANCES as usize) as u32))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_parse_and_bad_ones_are_refused() {
        assert_eq!(
            parse_profile("3g.40gb"),
            Ok(MigProfile { compute_slices: 3, gpu_slices: 3, memory_gb: 40 })
        );
        assert_eq!(
            parse_profile("1c.3g.40gb"),
            Ok(MigProfile { compute_slices: 1, gpu_slices: 3, memory_gb: 40 })
        );
        for bad in ["3g", "5g.40gb", "4c.3g.40gb", "0c.1g.10gb", "3g.0gb", "x", "1g.10gb.x.y"] {
            assert!(parse_profile(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn instances_have_distinct_uuids_ids_and_cap_minors() {
        let text = "[[gpu]]\nmodel = \"H100\"\nmig = [\"3g.40gb\", \"3g.40gb\"]\n[[gpu]]\nmodel = \"H100\"\nmig = [\"4g.40gb\", \"2g.20gb\", \"1g.10gb\"]\n";
        let cfg = Config::from_toml(text).unwrap();
        let a = instances(&cfg, 0);
        let b = instances(&cfg, 1);
        assert_eq!(a.len(), 2);
        assert_eq!(b.iter().map(|i| i.compute_slices).collect::<Vec<_>>(), vec![4, 2, 1]);
        let all: Vec<&MigInstance> = a.iter().chain(&b).collect();
        for (i, x) in all.iter().enumerate() {
            assert!(x.uuid.starts_with("MIG-") && x.uuid.len() == 40, "{}", x.uuid);
            for y in &all[i + 1..] {
                assert_ne!(x.uuid, y.uuid);
                assert_ne!(x.gi_cap_minor, y.gi_cap_minor);
                assert_ne!(x.ci_cap_minor, y.ci_cap_minor);
            }
        }
        // GPU 0's first GPU instance (gi 1): minors 12 and 13, as the driver numbers them.
        assert_eq!((a[0].gi_cap_minor, a[0].ci_cap_minor), (12, 13));
        assert!(enabled(&cfg, 0) && !enabled(&cfg, 2));
        for (gpu, k) in [(0, 0), (1, 2), (4095, 6)] {
            assert_eq!(from_handle(handle(gpu, k)), Some((gpu, k)));
        }
        assert_eq!(from_handle(5), None);
    }

    #[test]
    fn too_many_slices_or_a_gpu_without_mig_is_refused() {
        let over = "[[gpu]]\nmodel = \"A100\"\nmig = [\"4g.20gb\", \"4g.20gb\"]\n";
        assert!(Config::from_toml(over).unwrap_err().to_string().contains("8 slices"));
        let v100 = "[[gpu]]\nmodel = \"V100\"\nmig = [\"1g.5gb\"]\n";
        assert!(Config::from_toml(v100).is_err());
        assert!(Config::from_toml("[[gpu]]\nmodel = \"A100\"\nmig = [\"7g.40gb\"]\n").is_ok());
    }
}
