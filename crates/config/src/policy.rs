//! Site policy: from a job's energy hints and the site's configuration to the energy policy
//! the job gets and the GPU setting that enacts it. Pure and deterministic, so slurmctld (at
//! submit) and wattsond (at job start) reach the same decision from the same inputs.
//!
//! Two ways to enact a policy (`[policy] enact`): `model` (the default) lets the engine's
//! DVFS models choose each job's power limit (see `daemon::adapt`); `share` maps each policy
//! to a fixed share of each GPU's maximum power limit. `perf` leaves the GPU at its defaults.

use serde::Deserialize;

use wattson_engine::Objective;
pub use wattson_engine::decision::{Decision, Enact};
use wattson_types::job::{EnergyPolicy, Hints, check_slowdown_pct};

/// `[policy]` in `wattson.toml`.
#[derive(Debug, Clone, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct SitePolicy {
    /// Policy of jobs that give none.
    pub default: EnergyPolicy,
    /// Users who may ask for `perf`; empty means everyone may.
    #[serde(default)]
    pub perf_users: Vec<String>,
    /// Power limit of `min-energy` jobs, percent of the GPU's maximum (clamped to its minimum).
    #[serde(deserialize_with = "percent")]
    #[schemars(extend("x-allowed" = "1 to 100"))]
    pub min_energy_power_pct: u32,
    /// Power limit of `balanced` jobs, percent of the GPU's maximum.
    #[serde(deserialize_with = "percent")]
    #[schemars(extend("x-allowed" = "1 to 100"))]
    pub balanced_power_pct: u32,
    /// How policies become GPU settings.
    #[serde(default)]
    pub enact: Enact,
    /// Slowdown bound of `min-energy` jobs that give no `--energy-slowdown`, in percent.
    #[serde(deserialize_with = "slowdown")]
    #[schemars(extend("x-allowed" = "0 to 1000"))]
    pub slowdown_pct: f64,
    /// Weight of energy in the `balanced` cost `η·E + (1−η)·P_max·T`, in [0, 1].
    #[serde(deserialize_with = "eta")]
    #[schemars(extend("x-allowed" = "0 to 1"))]
    pub balanced_eta: f64,
    /// Partitions whose jobs may share a GPU unless they say `--energy-share=no`; a job
    /// submitted to several partitions only when every one of them is listed.
    #[serde(default)]
    pub share_partitions: Vec<String>,
    /// Shards (`gres/shard`) per GPU, as in the nodes' gres.conf: job_submit asks half of
    /// them instead of a whole GPU for an opted-in one-GPU job; 0: opt-ins are only recorded.
    #[serde(default, deserialize_with = "shards")]
    #[schemars(extend("x-allowed" = "0, or 2 to 1024"))]
    pub shards_per_gpu: u32,
    /// The most GPUs of an opted-in job that job_submit rewrites to shards (default 1). A job of
    /// N > 1 GPUs on one node with N tasks gets half of each GPU, one per task (Slurm 24.05 or
    /// later with `SelectTypeParameters=...,MULTIPLE_SHARING_GRES_PJ`; docs/slurm.md).
    #[serde(deserialize_with = "gpu_count")]
    #[schemars(extend("x-allowed" = "1 to 64"))]
    pub share_gpus: u32,
}

impl Default for SitePolicy {
    fn default() -> Self {
        SitePolicy {
            default: EnergyPolicy::Balanced,
            perf_users: Vec::new(),
            min_energy_power_pct: 60,
            balanced_power_pct: 85,
            enact: Enact::default(),
            slowdown_pct: 10.0,
            balanced_eta: 0.5,
            share_partitions: Vec::new(),
            shards_per_gpu: 0,
            share_gpus: 1,
        }
    }
}

fn slowdown<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let pct = f64::deserialize(d)?;
    check_slowdown_pct(pct).map_err(|e| serde::de::Error::custom(format!("slowdown {pct}: {e}")))
}

fn eta<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    let eta = f64::deserialize(d)?;
    if (0.0..=1.0).contains(&eta) {
        Ok(eta)
    } else {
        Err(serde::de::Error::custom(format!("{eta} is not between 0 and 1")))
    }
}

fn shards<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let n = u32::deserialize(d)?;
    if n == 0 || (2..=1024).contains(&n) {
        Ok(n)
    } else {
        Err(serde::de::Error::custom(format!("{n} shards per GPU: not 0 (off), nor from 2 to 1024")))
    }
}

fn gpu_count<'de, D: serde::Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let n = u32::deserialize(d)?;
    if (1..=64).contains(&n) {
        Ok(n)
    } else {
        Err(serde::de::Error::custom(format!("{n} GPUs: not from 1 to 64")))
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

impl SitePolicy {
    /// Whether a job opted in to sharing a GPU: what it asked (`--energy-share`), else the
    /// default of its partitions (`partitions`: the job's, else Slurm's default one; opted in
    /// only when every one is in `share_partitions`).
    pub fn shares(&self, asked: Option<bool>, partitions: &[&str]) -> bool {
        asked.unwrap_or_else(|| {
            !partitions.is_empty()
                && partitions.iter().all(|p| self.share_partitions.iter().any(|listed| listed == p))
        })
    }

    /// The shards an opted-in one-GPU job asks instead of its GPU (half a GPU's, so that two
    /// such jobs share one), or `None` when the site rewrites nothing (`shards_per_gpu = 0`).
    pub fn shards_per_job(&self) -> Option<u32> {
        (self.shards_per_gpu >= 2).then_some(self.shards_per_gpu / 2)
    }

    /// Decides the policy of a job of `user` with `hints` (already validated).
    pub fn decide(&self, hints: &Hints, user: &str) -> Decision {
        if let Some(freq) = &hints.gpu_freq {
            // The job set its own GPU clocks through Slurm: wattson leaves its GPUs alone.
            let note = format!(
                "the job asked for --gpu-freq={freq}: wattson stands aside (GPUs at the job's clocks)"
            );
            let engine = Objective::for_policy(EnergyPolicy::Perf, 0.0, self.balanced_eta);
            return Decision {
                policy: EnergyPolicy::Perf,
                enact: self.enact,
                power_pct: 100,
                engine,
                note: Some(note),
            };
        }
        let asked = hints.policy.unwrap_or(self.default);
        let reserved = !self.perf_users.is_empty() && !self.perf_users.iter().any(|u| u == user);
        let (policy, note) = if asked == EnergyPolicy::Perf && reserved {
            let fallback =
                if self.default == EnergyPolicy::Perf { EnergyPolicy::Balanced } else { self.default };
            let note = format!("user {user} may not ask for perf here; running {fallback} instead");
            (fallback, Some(note))
        } else {
            (asked, None)
        };
        let power_pct = match policy {
            EnergyPolicy::MinEnergy => self.min_energy_power_pct,
            EnergyPolicy::Balanced => self.balanced_power_pct,
            EnergyPolicy::Perf => 100,
        };
        let max_slowdown = hints.slowdown_pct.unwrap_or(self.slowdown_pct) / 100.0;
        let engine = Objective::for_policy(policy, max_slowdown, self.balanced_eta);
        Decision { policy, enact: self.enact, power_pct, engine, note }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattson_types::gpu::{GpuInfo, GpuSetting};

    fn h100() -> GpuInfo {
        GpuInfo {
            index: 0,
            uuid: "GPU-0".into(),
            name: "H100".into(),
            pci_bus_id: String::new(),
            minor_number: None,
            energy_counter: true,
            power_limit_min_mw: Some(200_000),
            power_limit_max_mw: Some(700_000),
            power_limit_default_mw: Some(700_000),
            sm_clocks_mhz: vec![],
            mem_clocks_mhz: vec![],
            mig: Vec::new(),
        }
    }

    fn hints(policy: &str) -> Hints {
        Hints { policy: Some(policy.parse().unwrap()), ..Hints::default() }
    }

    #[test]
    fn policies_map_to_power_limits() {
        let cfg = SitePolicy { enact: Enact::Share, ..SitePolicy::default() };
        let d = cfg.decide(&hints("min-energy"), "alice");
        assert_eq!(d.setting_for(&h100()), Some(GpuSetting::PowerLimit { mw: 420_000 }));
        let d = cfg.decide(&Hints::default(), "alice");
        assert_eq!(d.policy, EnergyPolicy::Balanced);
        assert_eq!(d.setting_for(&h100()), Some(GpuSetting::PowerLimit { mw: 595_000 }));
        assert_eq!(cfg.decide(&hints("perf"), "alice").setting_for(&h100()), None);
    }

    #[test]
    fn a_job_with_its_own_gpu_clocks_is_left_alone() {
        for enact in [Enact::Share, Enact::Model] {
            let cfg = SitePolicy { enact, ..SitePolicy::default() };
            let asked = Hints { gpu_freq: Some("high".into()), ..hints("min-energy") };
            let d = cfg.decide(&asked, "alice");
            assert_eq!((d.policy, d.setting_for(&h100()), d.by_model()), (EnergyPolicy::Perf, None, false));
            assert!(d.note.unwrap().contains("--gpu-freq=high"));
        }
    }

    #[test]
    fn limits_are_clamped_to_the_gpu_range() {
        let cfg = SitePolicy { min_energy_power_pct: 10, enact: Enact::Share, ..SitePolicy::default() };
        let d = cfg.decide(&hints("min-energy"), "bob");
        assert_eq!(d.setting_for(&h100()), Some(GpuSetting::PowerLimit { mw: 200_000 }));
    }

    #[test]
    fn the_models_get_the_bound_or_the_weight() {
        let cfg = SitePolicy::default();
        let d = cfg.decide(&hints("min-energy"), "alice");
        assert!(d.by_model() && d.setting_for(&h100()).is_none());
        assert_eq!(d.engine, Objective::MinEnergy { max_slowdown: 0.1 });
        let asked = Hints { slowdown_pct: Some(25.0), ..hints("min-energy") };
        assert_eq!(cfg.decide(&asked, "alice").engine, Objective::MinEnergy { max_slowdown: 0.25 });
        assert_eq!(cfg.decide(&Hints::default(), "alice").engine, Objective::Balanced { eta: 0.5 });
        assert!(!cfg.decide(&hints("perf"), "alice").by_model());
    }

    #[test]
    fn sharing_is_asked_or_the_partitions_default() {
        let cfg = SitePolicy {
            share_partitions: vec!["inference".into(), "debug".into()],
            ..SitePolicy::default()
        };
        assert!(cfg.shares(Some(true), &["gpu"]), "asked: anywhere");
        assert!(!cfg.shares(Some(false), &["inference"]), "refused: also in a default partition");
        assert!(cfg.shares(None, &["inference"]));
        assert!(cfg.shares(None, &["inference", "debug"]), "every partition listed");
        assert!(!cfg.shares(None, &["inference", "gpu"]), "one partition not listed");
        assert!(!cfg.shares(None, &[]), "no partition known");
        assert!(!SitePolicy::default().shares(None, &["inference"]), "no default by default");
    }

    #[test]
    fn half_a_gpus_shards_or_no_rewrite() {
        let with = |n| SitePolicy { shards_per_gpu: n, ..SitePolicy::default() };
        assert_eq!(
            (with(0).shards_per_job(), with(4).shards_per_job(), with(7).shards_per_job()),
            (None, Some(2), Some(3))
        );
        let parse = |text: &str| crate::Config::parse(text, "t.toml").map(|c| c.policy.shards_per_gpu);
        assert_eq!(parse("[policy]\nshards_per_gpu = 8\n").unwrap(), 8);
        assert_eq!(parse("").unwrap(), 0);
        let e = parse("[policy]\nshards_per_gpu = 1\n").unwrap_err().0;
        assert!(e.contains("nor from 2 to 1024"), "{e}");
        assert!(parse("[policy]\nshards_per_gpu = 1025\n").is_err());
        let gpus = |text: &str| crate::Config::parse(text, "t.toml").map(|c| c.policy.share_gpus);
        assert_eq!((gpus("").unwrap(), gpus("[policy]\nshare_gpus = 8\n").unwrap()), (1, 8));
        let e = gpus("[policy]\nshare_gpus = 0\n").unwrap_err().0;
        assert!(e.contains("not from 1 to 64"), "{e}");
    }

    #[test]
    fn perf_is_reserved_when_the_site_says_so() {
        let cfg = SitePolicy { perf_users: vec!["alice".into()], ..SitePolicy::default() };
        assert_eq!(cfg.decide(&hints("perf"), "alice").policy, EnergyPolicy::Perf);
        let d = cfg.decide(&hints("perf"), "bob");
        assert_eq!(d.policy, EnergyPolicy::Balanced);
        assert!(d.note.unwrap().contains("may not ask for perf"));
    }
}
