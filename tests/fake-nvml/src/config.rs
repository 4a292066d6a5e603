//! `config.toml`: which GPUs the fake driver exposes and how they behave.
//!
//! Every field of [`GpuConfig`] except `model` is optional; missing values come
//! from the model preset ("H100", "A100", "V100", or the AMD "MI300X" and "MI250X"), so `[[gpu]]` with
//! `model = "H100"` alone describes a complete GPU.

use crate::realism::{Realism, RealismConfig};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::Path;

/// File name of the configuration inside a fake driver directory.
pub const CONFIG_FILE: &str = "config.toml";

/// One simulated GPU as written in `config.toml`; `None` fields take the preset's value.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuConfig {
    /// Preset the other fields default to: "H100", "A100" or "V100".
    #[serde(default = "default_model")]
    pub model: String,
    /// Marketing name reported by `nvmlDeviceGetName`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// UUID ("GPU-…"); defaults to a value derived from the driver directory and the index
    /// (`uuid_in`), so that no two simulations share a GPU, as no two machines do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uuid: Option<String>,
    /// PCI bus id ("00000000:17:00.0"); defaults to bus 0x17 + index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pci_bus_id: Option<String>,
    /// Minor number of `/dev/nvidiaN` (what Slurm numbers GPUs by); defaults to the index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub minor_number: Option<u32>,
    /// Supported SM (graphics) clocks in MHz; reported in descending order.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_clocks_mhz: Option<Vec<u32>>,
    /// The single supported memory clock in MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_clock_mhz: Option<u32>,
    /// Lowest settable power limit, W.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_min_w: Option<f64>,
    /// Highest settable power limit, W.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_max_w: Option<f64>,
    /// Power limit after a driver load, W.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_default_w: Option<f64>,
    /// Power at zero load, W.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_w: Option<f64>,
    /// Linear term of the load power curve, W per MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub b_w_per_mhz: Option<f64>,
    /// Cubic term of the load power curve, W per MHz³.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub c_w_per_mhz3: Option<f64>,
    /// Whether the GPU has a total-energy counter (false: pre-Volta behaviour).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_counter: Option<bool>,
    /// Present (even empty): the GPU behaves as real ones do (`crate::realism`); absent: ideal.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub realism: Option<RealismConfig>,
    /// MIG instances, by profile (`["3g.40gb", "3g.40gb"]`): the GPU is in MIG mode with these
    /// instances, in this order ([`crate::mig`]); absent, MIG is off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mig: Option<Vec<String>>,
}

fn default_model() -> String {
    "H100".to_string()
}

/// The whole `config.toml`: a list of `[[gpu]]` tables, plus who counts as root.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Effective uids allowed to change settings (default `[0]`, i.e. root only).
    #[serde(default = "default_privileged")]
    pub privileged_uids: Vec<u32>,
    /// The GPUs. Their place in this list is their identity in the simulation (state,
    /// history, ground truth); NVML numbers them by `order`.
    #[serde(default)]
    pub gpu: Vec<GpuConfig>,
    /// NVML's enumeration: index `i` is the GPU at place `order[i]` of `gpu`; absent, the
    /// listed order. Rewritten between driver loads, it renumbers the GPUs as a reboot can.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub order: Option<Vec<u32>>,
}

fn default_privileged() -> Vec<u32> {
    vec![0]
}

impl GpuConfig {
    /// A GPU of the given preset with every field defaulted.
    pub fn preset(model: &str) -> GpuConfig {
        GpuConfig {
            model: model.to_string(),
            name: None,
            uuid: None,
            pci_bus_id: None,
            minor_number: None,
            sm_clocks_mhz: None,
            mem_clock_mhz: None,
            power_limit_min_w: None,
            power_limit_max_w: None,
            power_limit_default_w: None,
            idle_w: None,
            b_w_per_mhz: None,
            c_w_per_mhz3: None,
            energy_counter: None,
            realism: None,
            mig: None,
        }
    }

    /// The same GPU, behaving as real ones do with the model's values (`crate::realism`).
    pub fn realistic(mut self) -> GpuConfig {
        self.realism = Some(RealismConfig::default());
        self
    }
}

impl Default for GpuConfig {
    /// An H100 with every field from the preset.
    fn default() -> GpuConfig {
        GpuConfig::preset("H100")
    }
}

impl Default for Config {
    /// No GPUs; only root may change settings.
    fn default() -> Config {
        Config { privileged_uids: default_privileged(), gpu: Vec::new(), order: None }
    }
}

impl Config {
    /// `n` identical GPUs of preset `model` ("H100", "A100", "V100").
    pub fn uniform(model: &str, n: usize) -> Config {
        Config { privileged_uids: default_privileged(), gpu: vec![GpuConfig::preset(model); n], order: None }
    }

    /// `n` identical GPUs of preset `model` that behave as real ones do (`crate::realism`).
    pub fn realistic(model: &str, n: usize) -> Config {
        Config { gpu: vec![GpuConfig::preset(model).realistic(); n], ..Config::uniform(model, 0) }
    }

    /// Parses and validates TOML text.
    pub fn from_toml(text: &str) -> io::Result<Config> {
        let cfg: Config = toml::from_str(text).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        for i in 0..cfg.gpu.len() {
            cfg.spec(i).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
            crate::mig::validate(&cfg.gpu[i], i)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
        }
        if let Some(order) = &cfg.order {
            let mut sorted = order.clone();
            sorted.sort_unstable();
            if !sorted.iter().copied().eq(0..cfg.gpu.len() as u32) {
                let msg = format!("order {order:?} is not a permutation of the {} GPUs", cfg.gpu.len());
                return Err(io::Error::new(io::ErrorKind::InvalidData, msg));
            }
        }
        Ok(cfg)
    }

    /// The GPU (its place in `gpu`) that NVML index `index` names.
    pub fn gpu_at(&self, index: usize) -> usize {
        match &self.order {
            Some(order) => order.get(index).map_or(usize::MAX, |&g| g as usize),
            None => index,
        }
    }

    /// The NVML index of the GPU at place `gpu` of `gpu`.
    pub fn index_of(&self, gpu: usize) -> usize {
        match &self.order {
            Some(order) => order.iter().position(|&g| g as usize == gpu).unwrap_or(usize::MAX),
            None => gpu,
        }
    }

    /// Serialises to TOML text.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).expect("config serialises")
    }

    /// Reads `config.toml` from a fake driver directory.
    pub fn load(dir: &Path) -> io::Result<Config> {
        Config::from_toml(&std::fs::read_to_string(dir.join(CONFIG_FILE))?)
    }

    /// Fully resolved description of GPU `index` (preset plus overrides), validated.
    pub fn spec(&self, index: usize) -> Result<GpuSpec, String> {
        let g = self.gpu.get(index).ok_or_else(|| format!("no gpu {index}"))?;
        resolve(g, index)
    }
}

/// A GPU description with every value filled in; what the physics works from.
#[derive(Clone, Debug, PartialEq)]
pub struct GpuSpec {
    /// Name reported by NVML.
    pub name: String,
    /// UUID reported by NVML.
    pub uuid: String,
    /// PCI bus id, `DDDDDDDD:BB:DD.F`.
    pub pci_bus_id: String,
    /// (domain, bus, device, function) parsed from the bus id.
    pub pci: (u32, u32, u32, u32),
    /// Minor number of the device file.
    pub minor_number: u32,
    /// PCI device id (device << 16 | vendor).
    pub pci_device_id: u32,
    /// Supported SM clocks, descending.
    pub sm_clocks_mhz: Vec<u32>,
    /// The memory clock.
    pub mem_clock_mhz: u32,
    /// Power limit range and default, mW.
    pub limit_min_mw: u32,
    /// Highest power limit, mW.
    pub limit_max_mw: u32,
    /// Default power limit, mW.
    pub limit_default_mw: u32,
    /// Idle power, W.
    pub idle_w: f64,
    /// Linear curve coefficient, W/MHz.
    pub b: f64,
    /// Cubic curve coefficient, W/MHz³.
    pub c: f64,
    /// Whether the energy counter exists.
    pub energy_counter: bool,
    /// How it departs from an ideal GPU; `None`: ideal.
    pub realism: Option<Realism>,
}

impl GpuSpec {
    /// Highest supported SM clock.
    pub fn max_clock(&self) -> u32 {
        self.sm_clocks_mhz[0]
    }
    /// Lowest supported SM clock.
    pub fn min_clock(&self) -> u32 {
        *self.sm_clocks_mhz.last().expect("validated non-empty")
    }
}

struct Preset {
    name: &'static str,
    pci_device: u32,
    max_clock: u32,
    min_clock: u32,
    mem_clock: u32,
    limits_w: (f64, f64, f64),
    idle_w: f64,
    full_w: f64,
}

fn preset(model: &str) -> Option<Preset> {
    Some(match model {
        "H100" => Preset {
            name: "NVIDIA H100 80GB HBM3",
            pci_device: 0x2330,
            max_clock: 1980,
            min_clock: 345,
            mem_clock: 2619,
            limits_w: (200.0, 700.0, 700.0),
            idle_w: 72.0,
            full_w: 650.0,
        },
        "A100" => Preset {
            name: "NVIDIA A100-SXM4-40GB",
            pci_device: 0x20b0,
            max_clock: 1410,
            min_clock: 210,
            mem_clock: 1215,
            limits_w: (100.0, 400.0, 400.0),
            idle_w: 55.0,
            full_w: 380.0,
        },
        "V100" => Preset {
            name: "Tesla V100-SXM2-16GB",
            pci_device: 0x1db1,
            max_clock: 1530,
            min_clock: 135,
            mem_clock: 877,
            limits_w: (150.0, 300.0, 300.0),
            idle_w: 57.0,
            full_w: 290.0,
        },
        // AMD Instinct GPUs, for the fake ROCm SMI (`tests/fake-amdsmi`) on the same physics:
        // AMD's published peak engine clocks and board power (MI300X 2100 MHz, 750 W; MI250X
        // 1700 MHz, 500-560 W per package), PCI device ids 0x74a1 and 0x740c.
        "MI300X" => Preset {
            name: "AMD Instinct MI300X",
            pci_device: 0x74a1,
            max_clock: 2100,
            min_clock: 500,
            mem_clock: 1300,
            limits_w: (200.0, 750.0, 750.0),
            idle_w: 140.0,
            full_w: 720.0,
        },
        "MI250X" => Preset {
            name: "AMD Instinct MI250X",
            pci_device: 0x740c,
            max_clock: 1700,
            min_clock: 500,
            mem_clock: 1600,
            limits_w: (100.0, 560.0, 500.0),
            idle_w: 90.0,
            full_w: 490.0,
        },
        _ => return None,
    })
}

/// Parses `DDDD[DDDD]:BB:DD.F` (hex, case-insensitive) into its four numbers.
pub fn parse_pci_bus_id(s: &str) -> Option<(u32, u32, u32, u32)> {
    let (domain, rest) = s.trim().split_once(':')?;
    let (bus, rest) = rest.split_once(':')?;
    let (dev, func) = rest.split_once('.')?;
    let h = |x: &str| if x.is_empty() { None } else { u32::from_str_radix(x, 16).ok() };
    Some((h(domain)?, h(bus)?, h(dev)?, h(func)?))
}

fn mw(w: f64) -> u32 {
    (w * 1000.0).round() as u32
}

fn resolve(g: &GpuConfig, index: usize) -> Result<GpuSpec, String> {
    let p = preset(&g.model).ok_or_else(|| format!("gpu {index}: unknown model {:?}", g.model))?;
    let mut clocks = g.sm_clocks_mhz.clone().unwrap_or_else(|| {
        (p.min_clock..=p.max_clock).rev().filter(|f| (p.max_clock - f) % 15 == 0).collect()
    });
    clocks.sort_unstable_by(|a, b| b.cmp(a));
    clocks.dedup();
    if clocks.is_empty() || clocks.contains(&0) {
        return Err(format!("gpu {index}: sm_clocks_mhz must be non-empty and positive"));
    }
    let fmax = f64::from(clocks[0]);
    let idle_w = g.idle_w.unwrap_or(p.idle_w);
    // Preset curve: 30 % of the dynamic power is linear in f, 70 % cubic, at the top clock.
    let dynamic = p.full_w - p.idle_w;
    let b = g.b_w_per_mhz.unwrap_or(0.3 * dynamic / fmax);
    let c = g.c_w_per_mhz3.unwrap_or(0.7 * dynamic / fmax.powi(3));
    let (pmin, pmax, pdef) = p.limits_w;
    let min = mw(g.power_limit_min_w.unwrap_or(pmin));
    let max = mw(g.power_limit_max_w.unwrap_or(pmax));
    let def = mw(g.power_limit_default_w.unwrap_or(pdef.min(f64::from(max) / 1000.0)));
    if !(min <= def && def <= max) || min == 0 {
        return Err(format!("gpu {index}: power limits need 0 < min <= default <= max"));
    }
    if !(idle_w >= 0.0 && b >= 0.0 && c >= 0.0 && idle_w.is_finite() && b.is_finite() && c.is_finite()) {
        return Err(format!("gpu {index}: power curve coefficients must be finite and >= 0"));
    }
    if idle_w * 1000.0 >= f64::from(min) {
        return Err(format!("gpu {index}: idle_w must be below the minimum power limit"));
    }
    let pci_bus_id = g.pci_bus_id.clone().unwrap_or_else(|| format!("00000000:{:02X}:00.0", 0x17 + index));
    let pci = parse_pci_bus_id(&pci_bus_id).ok_or_else(|| format!("gpu {index}: bad pci_bus_id"))?;
    let uuid = g.uuid.clone().unwrap_or_else(|| default_uuid(index));
    Ok(GpuSpec {
        name: g.name.clone().unwrap_or_else(|| p.name.to_string()),
        uuid,
        pci_bus_id,
        pci,
        minor_number: g.minor_number.unwrap_or(index as u32),
        pci_device_id: (p.pci_device << 16) | 0x10de,
        sm_clocks_mhz: clocks,
        mem_clock_mhz: g.mem_clock_mhz.unwrap_or(p.mem_clock),
        limit_min_mw: min,
        limit_max_mw: max,
        limit_default_mw: def,
        idle_w,
        b,
        c,
        energy_counter: g.energy_counter.unwrap_or(true),
        realism: g.realism.as_ref().map(|r| r.resolve(&g.model, index)).transpose()?,
    })
}

/// Deterministic, well-formed UUID for GPU `index` of a configuration not yet given a driver
/// directory.
pub fn default_uuid(index: usize) -> String {
    uuid_from(0, index)
}

/// The UUID of GPU `index` simulated in driver directory `dir`: deterministic, and another in
/// every directory.
pub fn uuid_in(dir: &std::path::Path, index: usize) -> String {
    // FNV-1a over the directory's path.
    let seed = dir
        .as_os_str()
        .as_encoded_bytes()
        .iter()
        .fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3));
    uuid_from(seed, index)
}

fn uuid_from(seed: u64, index: usize) -> String {
    // A fixed odd multiplier spreads consecutive indices over the hex digits.
    let x = (seed ^ (index as u64 + 1)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    format!(
        "GPU-{:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}",
        (x >> 32) as u32,
        (x >> 16) as u16,
        (x & 0xfff) as u16,
        index & 0xfff,
        (seed ^ index as u64) & 0xffff_ffff_ffff
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_gpu_table_uses_preset() {
        let cfg = Config::from_toml("[[gpu]]\nmodel = \"H100\"\n[[gpu]]\nmodel = \"A100\"\n").unwrap();
        let h = cfg.spec(0).unwrap();
        assert_eq!(h.name, "NVIDIA H100 80GB HBM3");
        assert_eq!(h.max_clock(), 1980);
        assert_eq!(h.min_clock(), 345);
        assert_eq!(h.sm_clocks_mhz.len(), 110);
        assert_eq!((h.limit_min_mw, h.limit_max_mw, h.limit_default_mw), (200_000, 700_000, 700_000));
        let full = h.idle_w + h.b * 1980.0 + h.c * 1980f64.powi(3);
        assert!((full - 650.0).abs() < 1e-9, "{full}");
        let a = cfg.spec(1).unwrap();
        assert_eq!(a.pci_bus_id, "00000000:18:00.0");
        assert_ne!(a.uuid, h.uuid);
        assert_eq!(cfg.privileged_uids, vec![0]);
    }

    #[test]
    fn overrides_and_rejections() {
        let cfg = Config::from_toml(
            "[[gpu]]\nmodel = \"V100\"\nidle_w = 40.0\nsm_clocks_mhz = [900, 1200, 600]\nenergy_counter = false\n",
        )
        .unwrap();
        let s = cfg.spec(0).unwrap();
        assert_eq!(s.sm_clocks_mhz, vec![1200, 900, 600]);
        assert_eq!(s.idle_w, 40.0);
        assert!(!s.energy_counter);
        assert!(Config::from_toml("[[gpu]]\nmodel = \"H100\"\nbogus = 1\n").is_err());
        assert!(Config::from_toml("[[gpu]]\nmodel = \"K80\"\n").is_err());
        assert!(Config::from_toml("[[gpu]]\npower_limit_min_w = 800.0\n").is_err());
        assert_eq!(Config::default().privileged_uids, vec![0]);
        assert_eq!(GpuConfig::default(), GpuConfig::preset("H100"));
        let round = Config::uniform("A100", 3);
        assert_eq!(Config::from_toml(&round.to_toml()).unwrap(), round);
    }

    #[test]
    fn pci_parsing() {
        assert_eq!(parse_pci_bus_id("00000000:1A:00.0"), Some((0, 0x1a, 0, 0)));
        assert_eq!(parse_pci_bus_id("0000:1a:00.0"), Some((0, 0x1a, 0, 0)));
        assert_eq!(parse_pci_bus_id("zz:1a:00.0"), None);
        assert_eq!(parse_pci_bus_id("0000:1a"), None);
    }
}
