//! Site policy: from a job's energy hints and the site's configuration to the energy policy
//! the job gets and the GPU setting that enacts it. Pure and deterministic, so slurmctld (at
//! submit) and wattsond (at job start) reach the same decision from the same inputs.
//!
//! Until the DVFS models decide per workload, each policy maps to a power limit given as a
//! share of each GPU's maximum; `perf` leaves the GPU at its defaults.

use serde::{Deserialize, Serialize};

use crate::gpu::{GpuInfo, GpuSetting};
use crate::job::Hints;

/// `[policy]` in `wattson.toml`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PolicyConfig {
    /// Policy of jobs that give none: `min-energy`, `balanced` or `perf`.
    #[serde(default = "default_policy", deserialize_with = "policy_name")]
    pub default: String,
    /// Users who may ask for `perf`; empty means everyone may.
    #[serde(default)]
    pub perf_users: Vec<String>,
    /// Power limit of `min-energy` jobs, percent of the GPU's maximum (clamped to its minimum).
    #[serde(default = "default_min_energy_pct", deserialize_with = "percent")]
    pub min_energy_power_pct: u32,
    /// Power limit of `balanced` jobs, percent of the GPU's maximum.
    #[serde(default = "default_balanced_pct", deserialize_with = "percent")]
    pub balanced_power_pct: u32,
}

impl Default for PolicyConfig {
    fn default() -> Self {
        PolicyConfig {
            default: default_policy(),
            perf_users: Vec::new(),
            min_energy_power_pct: default_min_energy_pct(),
            balanced_power_pct: default_balanced_pct(),
        }
    }
}

fn default_policy() -> String {
    "balanced".into()
}
fn default_min_energy_pct() -> u32 {
    60
}
fn default_balanced_pct() -> u32 {
    85
}

fn policy_name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let name = String::deserialize(d)?;
    if Hints::POLICIES.contains(&name.as_str()) {
        Ok(name)
    } else {
        Err(serde::de::Error::custom(format!("policy {name:?} is not one of min-energy, balanced, perf")))
    }
}

fn percent<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let pct = u32::deserialize(d)?;
    if (1..=100).contains(&pct) {
        Ok(pct)
    } else {
        Err(serde::de::Error::custom(format!("{pct} is not a percentage between 1 and 100")))
    }
}

/// What a job gets: its policy, the share of the maximum power limit, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decision {
    /// `min-energy`, `balanced` or `perf`.
    pub policy: String,
    /// Power limit as a percentage of each GPU's maximum; 100 means the GPU's defaults.
    pub power_pct: u32,
    /// Why the policy differs from what the user asked, if it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
}

impl PolicyConfig {
    /// Decides the policy of a job of `user` with `hints` (already validated).
    pub fn decide(&self, hints: &Hints, user: &str) -> Decision {
        let asked = hints.policy.clone().unwrap_or_else(|| self.default.clone());
        let reserved = !self.perf_users.is_empty() && !self.perf_users.iter().any(|u| u == user);
        let (policy, note) = if asked == "perf" && reserved {
            let fallback = if self.default == "perf" { "balanced".to_string() } else { self.default.clone() };
            let note = format!("user {user} may not ask for perf here; running {fallback} instead");
            (fallback, Some(note))
        } else {
            (asked, None)
        };
        let power_pct = match policy.as_str() {
            "min-energy" => self.min_energy_power_pct,
            "balanced" => self.balanced_power_pct,
            _ => 100,
        };
        Decision { policy, power_pct, note }
    }
}

impl Decision {
    /// The setting that enacts the decision on `gpu`; `None` leaves the GPU at its defaults.
    pub fn setting_for(&self, gpu: &GpuInfo) -> Option<GpuSetting> {
        if self.power_pct >= 100 {
            return None;
        }
        let max = gpu.power_limit_max_mw?;
        let min = gpu.power_limit_min_mw.unwrap_or(0);
        let mw = (u64::from(max) * u64::from(self.power_pct) / 100) as u32;
        // Whole watts, as nvidia-smi and users think of limits.
        Some(GpuSetting::PowerLimit { mw: (mw / 1000 * 1000).clamp(min, max) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h100() -> GpuInfo {
        GpuInfo {
            index: 0,
            uuid: "GPU-0".into(),
            name: "H100".into(),
            pci_bus_id: String::new(),
            energy_counter: true,
            power_limit_min_mw: Some(200_000),
            power_limit_max_mw: Some(700_000),
            power_limit_default_mw: Some(700_000),
            sm_clocks_mhz: vec![],
            mem_clocks_mhz: vec![],
        }
    }

    fn hints(policy: &str) -> Hints {
        Hints { policy: Some(policy.into()), ..Hints::default() }
    }

    #[test]
    fn policies_map_to_power_limits() {
        let cfg = PolicyConfig::default();
        let d = cfg.decide(&hints("min-energy"), "alice");
        assert_eq!(d.setting_for(&h100()), Some(GpuSetting::PowerLimit { mw: 420_000 }));
        let d = cfg.decide(&Hints::default(), "alice");
        assert_eq!(d.policy, "balanced");
        assert_eq!(d.setting_for(&h100()), Some(GpuSetting::PowerLimit { mw: 595_000 }));
        assert_eq!(cfg.decide(&hints("perf"), "alice").setting_for(&h100()), None);
    }

    #[test]
    fn limits_are_clamped_to_the_gpu_range() {
        let cfg = PolicyConfig { min_energy_power_pct: 10, ..PolicyConfig::default() };
        let d = cfg.decide(&hints("min-energy"), "bob");
        assert_eq!(d.setting_for(&h100()), Some(GpuSetting::PowerLimit { mw: 200_000 }));
    }

    #[test]
    fn perf_is_reserved_when_the_site_says_so() {
        let cfg = PolicyConfig { perf_users: vec!["alice".into()], ..PolicyConfig::default() };
        assert_eq!(cfg.decide(&hints("perf"), "alice").policy, "perf");
        let d = cfg.decide(&hints("perf"), "bob");
        assert_eq!(d.policy, "balanced");
        assert!(d.note.unwrap().contains("may not ask for perf"));
    }
}
