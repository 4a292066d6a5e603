//! What the site's policy decided for a job: its energy policy, how it is enacted, and why.
//! Made by the site policy (`wattson-config`) at submit and at job start, carried on the
//! daemon's wire and in the job's record.

use serde::{Deserialize, Serialize};

use wattson_types::gpu::{GpuInfo, GpuSetting};
use wattson_types::job::EnergyPolicy;

use crate::Objective;

/// How a policy becomes a GPU setting.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Enact {
    /// The DVFS models choose per workload, probing workloads they do not know.
    #[default]
    Model,
    /// A fixed share of each GPU's maximum power limit per policy.
    Share,
}

/// What a job gets: its policy, how it is enacted, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Decision {
    /// The policy the job gets.
    pub policy: EnergyPolicy,
    /// How the policy is enacted.
    pub enact: Enact,
    /// With `share`: power limit as a percentage of each GPU's maximum; 100 means defaults.
    pub power_pct: u32,
    /// For the models: the objective that enacts the policy (slowdown bound or balanced weight).
    pub engine: Objective,
    /// Why the policy differs from what the user asked, if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl Decision {
    /// Whether the DVFS models choose this job's setting (it is not `perf` nor a fixed share).
    pub fn by_model(&self) -> bool {
        self.enact == Enact::Model && self.engine != Objective::Perf
    }

    /// The fixed-share setting on `gpu` (`enact = "share"`); `None` leaves the GPU at its
    /// defaults (perf, or the models decide).
    pub fn setting_for(&self, gpu: &GpuInfo) -> Option<GpuSetting> {
        if self.enact != Enact::Share || self.power_pct >= 100 {
            return None;
        }
        let max = gpu.power_limit_max_mw?;
        let min = gpu.power_limit_min_mw.unwrap_or(0);
        let mw = (u64::from(max) * u64::from(self.power_pct) / 100) as u32;
        // Whole watts, as nvidia-smi and users think of limits.
        Some(GpuSetting::PowerLimit { mw: (mw / 1000 * 1000).clamp(min, max) })
    }
}
