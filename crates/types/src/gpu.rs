//! What a GPU is, what it is set to, and what wattson may set it to: plain data shared by the
//! backend, the daemon, the protocol, the store and the policy.

use serde::{Deserialize, Serialize};

/// What a GPU is and what it can be set to; read once at start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// NVML index on this node.
    pub index: u32,
    /// `GPU-...` UUID.
    pub uuid: String,
    /// Model name.
    pub name: String,
    /// PCI bus id, `domain:bus:device.function`.
    pub pci_bus_id: String,
    /// Minor number of `/dev/nvidiaN`: the number Slurm gives the GPU (`SLURM_JOB_GPUS`).
    /// NVML's index follows PCI order and may differ. `None` where the driver does not say.
    #[serde(default)]
    pub minor_number: Option<u32>,
    /// Whether the GPU has a cumulative energy counter (Volta and newer).
    pub energy_counter: bool,
    /// Power-limit range and default, in mW.
    pub power_limit_min_mw: Option<u32>,
    /// Upper end of the power-limit range, in mW.
    pub power_limit_max_mw: Option<u32>,
    /// Default power limit, in mW.
    pub power_limit_default_mw: Option<u32>,
    /// Supported SM clocks at the (fixed) memory clock, MHz, highest first.
    pub sm_clocks_mhz: Vec<u32>,
    /// Supported memory clocks, MHz.
    pub mem_clocks_mhz: Vec<u32>,
}

impl GpuInfo {
    /// The number Slurm gives this GPU: its device file's minor number, else (the driver does
    /// not say) its NVML index.
    pub fn slurm_number(&self) -> u32 {
        self.minor_number.unwrap_or(self.index)
    }
}

/// The GPU's settings as they are now.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct GpuSettings {
    /// Current power limit, in mW.
    pub power_limit_mw: Option<u32>,
    /// Application (default) SM clock, MHz.
    pub app_sm_clock_mhz: Option<u32>,
}

/// A setting wattson applies to a GPU for a job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "knob", rename_all = "kebab-case")]
pub enum GpuSetting {
    /// A power limit, in mW.
    PowerLimit {
        /// The limit, mW.
        mw: u32,
    },
    /// The SM clock locked at one frequency, MHz.
    LockedClock {
        /// The clock, MHz.
        mhz: u32,
    },
}

/// The DVFS knob the models turn on a GPU type: its power limit or its locked SM clock.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
    strum::EnumString,
    strum::IntoStaticStr,
)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Knob {
    /// Settings are power limits, W.
    #[default]
    #[serde(alias = "power_limit")]
    PowerLimit,
    /// Settings are locked SM clocks, MHz.
    #[serde(alias = "sm_clock")]
    SmClock,
}

impl Knob {
    /// `power-limit` or `sm-clock`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// The unit of a setting: `W` or `MHz`.
    pub fn unit(self) -> &'static str {
        match self {
            Knob::PowerLimit => "W",
            Knob::SmClock => "MHz",
        }
    }

    /// The GPU setting that holds `value` (W or MHz) on this knob.
    pub fn setting(self, value: f64) -> GpuSetting {
        match self {
            Knob::PowerLimit => GpuSetting::PowerLimit { mw: (value * 1000.0).round() as u32 },
            Knob::SmClock => GpuSetting::LockedClock { mhz: value.round() as u32 },
        }
    }
}

/// Nanoseconds since the Unix epoch, now.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}
