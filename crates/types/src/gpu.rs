//! What a GPU is, what it is set to, and what wattson may set it to: plain data shared by the
//! backend, the daemon, the protocol, the store and the policy.

use serde::{Deserialize, Serialize};

/// What a GPU is and what it can be set to; read once at start.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// The backend's index on this node (NVML's or ROCm SMI's).
    pub index: u32,
    /// `GPU-...` UUID.
    pub uuid: String,
    /// Model name.
    pub name: String,
    /// PCI bus id, `domain:bus:device.function`.
    pub pci_bus_id: String,
    /// Minor number of `/dev/nvidiaN` (AMD: `N` of the render node `/dev/dri/renderD<128+N>`):
    /// the number Slurm gives the GPU (`SLURM_JOB_GPUS`). NVML's (ROCm SMI's) index follows PCI
    /// order and may differ. `None` where the driver does not say.
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
    /// The GPU's MIG instances, in MIG index order; empty when MIG is off (or not supported).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub mig: Vec<MigInstance>,
}

/// One MIG instance of a GPU in MIG mode: what Slurm gives a job as a GPU (one GRES each with
/// `AutoDetect=nvml`). Energy, power, clocks and power limits stay the whole GPU's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigInstance {
    /// `MIG-...` UUID (what Slurm puts in `CUDA_VISIBLE_DEVICES` for it).
    pub uuid: String,
    /// Profile, e.g. `3g.40gb` (`1c.3g.40gb`: one compute slice of a 3-slice GPU instance).
    pub profile: String,
    /// GPU instance id, where the driver says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_instance_id: Option<u32>,
    /// Compute instance id within its GPU instance, where the driver says.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_instance_id: Option<u32>,
    /// Compute slices (of the GPU's 7): the weight its jobs' part of the GPU's energy is
    /// divided by ([`crate::apportion::mig_weights`]).
    pub compute_slices: u32,
}

impl MigInstance {
    /// Whether `name` names this instance of the GPU with UUID `gpu_uuid`: its `MIG-` UUID
    /// (drivers R470 and later), or `MIG-<GPU UUID>/<GI id>/<CI id>` (earlier ones); any case.
    pub fn is_named(&self, gpu_uuid: &str, name: &str) -> bool {
        if name.eq_ignore_ascii_case(&self.uuid) {
            return true;
        }
        let (Some(gi), Some(ci)) = (self.gpu_instance_id, self.compute_instance_id) else { return false };
        let Some(rest) = name.strip_prefix("MIG-") else { return false };
        let mut parts = rest.split('/');
        matches!(
            (parts.next(), parts.next(), parts.next(), parts.next()),
            (Some(uuid), Some(g), Some(c), None)
                if uuid.eq_ignore_ascii_case(gpu_uuid) && g.parse() == Ok(gi) && c.parse() == Ok(ci)
        )
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mig_instance_is_named_by_its_uuid_or_its_gpus_uuid_and_ids() {
        let m = MigInstance {
            uuid: "MIG-5a1b2c3d-0000-5000-8000-000000000001".into(),
            profile: "3g.40gb".into(),
            gpu_instance_id: Some(2),
            compute_instance_id: Some(0),
            compute_slices: 3,
        };
        let gpu = "GPU-aaaa-bbbb";
        assert!(m.is_named(gpu, "MIG-5A1B2C3D-0000-5000-8000-000000000001"));
        assert!(m.is_named(gpu, "MIG-GPU-aaaa-bbbb/2/0"));
        for other in
            ["MIG-GPU-aaaa-bbbb/1/0", "MIG-GPU-aaaa-bbbb/2/0/9", "MIG-GPU-cccc/2/0", "GPU-aaaa-bbbb", "2"]
        {
            assert!(!m.is_named(gpu, other), "{other}");
        }
        let no_ids = MigInstance { gpu_instance_id: None, ..m.clone() };
        assert!(!no_ids.is_named(gpu, "MIG-GPU-aaaa-bbbb/2/0"));
    }
}
