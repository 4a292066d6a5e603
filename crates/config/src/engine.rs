//! `[engine]`: how wattsond measures workloads it does not know (probing), which DVFS knob its
//! models turn on each GPU type, and whose jobs a learned model decides.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
use wattson_types::gpu::Knob;
use wattson_types::model_owner::ModelOwner;

use crate::{duration_in, number_in};

/// `[engine]` section: how wattsond measures workloads it does not know, and where it keeps
/// what it learned.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EngineConfig {
    /// How long each probed power limit is held and measured.
    #[serde(deserialize_with = "probe_duration")]
    #[schemars(with = "String", extend("x-allowed" = "100ms to 1h"))]
    pub probe_window: Duration,
    /// How long after a change the GPU is left to settle before measuring.
    #[serde(deserialize_with = "probe_duration")]
    #[schemars(with = "String", extend("x-allowed" = "100ms to 1h"))]
    pub probe_settle: Duration,
    /// Most probe windows per job (at least 3).
    #[serde(deserialize_with = "max_probes")]
    #[schemars(extend("x-allowed" = "3 to 50"))]
    pub max_probes: usize,
    /// Step between candidate power limits, W.
    #[serde(deserialize_with = "power_limit_step")]
    #[schemars(extend("x-allowed" = "1 to 100"))]
    pub power_limit_step_w: f64,
    /// The DVFS knob the models turn: the power limit (the default) or the locked SM clock.
    #[serde(default)]
    pub knob: Knob,
    /// The knob per GPU type (the name NVML reports, or a canonical name such as `H100`),
    /// where it differs from `knob`.
    #[serde(default)]
    pub knobs: BTreeMap<String, Knob>,
    /// Lowest SM clock offered to the models, as a fraction of the GPU's top clock.
    #[serde(deserialize_with = "sm_clock_floor")]
    #[schemars(extend("x-allowed" = "0.3 to 1"))]
    pub sm_clock_floor: f64,
    /// Step between candidate SM clocks, MHz (among the clocks the GPU supports).
    #[serde(deserialize_with = "sm_clock_step")]
    #[schemars(extend("x-allowed" = "1 to 200"))]
    pub sm_clock_step_mhz: f64,
    /// Directory of the per-job progress files (`WATTSON_PROGRESS_FILE`).
    pub progress_dir: PathBuf,
    /// The model table for `job_submit/wattson`, rewritten whenever a model changes.
    pub models_file: PathBuf,
    /// Whose jobs a learned model decides: the `user` whose runs measured it (the default), or
    /// every job of the same Slurm `account`.
    #[serde(default)]
    pub model_owner: ModelOwnership,
}

/// `[engine] model_owner`: models shared by nobody but their user, or within an account.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ModelOwnership {
    /// Each user's runs decide only that user's jobs.
    #[default]
    User,
    /// Runs decide the jobs of every user of the same Slurm account.
    Account,
}

impl ModelOwnership {
    /// The owner of the models a job of `uid` in `account` learns and uses; a job without an
    /// account (none given, outside Slurm) keeps to its user.
    pub fn owner(self, uid: u32, account: Option<&str>) -> ModelOwner {
        match (self, account.filter(|a| !a.is_empty())) {
            (ModelOwnership::Account, Some(account)) => ModelOwner::Account(account.to_string()),
            _ => ModelOwner::User(uid),
        }
    }
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            probe_window: Duration::from_secs(30),
            probe_settle: Duration::from_secs(3),
            max_probes: 6,
            power_limit_step_w: 5.0,
            knob: Knob::default(),
            knobs: BTreeMap::new(),
            sm_clock_floor: 0.5,
            sm_clock_step_mhz: 15.0,
            progress_dir: PathBuf::from("/run/wattson/progress"),
            models_file: PathBuf::from("/var/lib/wattson/models.json"),
            model_owner: ModelOwnership::default(),
        }
    }
}

fn probe_duration<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration_in(d, Duration::from_millis(100), Duration::from_secs(3600))
}

fn max_probes<'de, D: Deserializer<'de>>(d: D) -> Result<usize, D::Error> {
    let n = usize::deserialize(d)?;
    if (3..=50).contains(&n) {
        Ok(n)
    } else {
        Err(serde::de::Error::custom(format!("{n} probes: allowed 3 to 50")))
    }
}

fn power_limit_step<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    number_in(d, 1.0, 100.0, " W")
}

fn sm_clock_floor<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    number_in(d, 0.3, 1.0, " (a fraction of the top clock)")
}

fn sm_clock_step<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    number_in(d, 1.0, 200.0, " MHz")
}

impl EngineConfig {
    /// The knob the models turn on GPUs of `gpu_type` (an NVML name or a canonical one): the
    /// `knobs` entry of that name, else of the same GPU prior (`H100` covers `NVIDIA H100
    /// 80GB HBM3`, not `NVIDIA H100 PCIe`), else `knob`.
    pub fn knob_for(&self, gpu_type: &str) -> Knob {
        let canonical = |name: &str| wattson_engine::prior(name).map(|p| p.name);
        self.knobs
            .get(gpu_type)
            .or_else(|| {
                let want = canonical(gpu_type)?;
                self.knobs.iter().find(|(name, _)| canonical(name) == Some(want)).map(|(_, k)| k)
            })
            .copied()
            .unwrap_or(self.knob)
    }

    /// The settings the models may choose among on a GPU (ascending, W or MHz by the knob
    /// [`EngineConfig::knob_for`] its type): its power-limit range on the step, or its
    /// supported SM clocks from the floor up on the step. Empty when the GPU offers none.
    pub fn settings_for(&self, gpu: &wattson_types::gpu::GpuInfo) -> (Knob, Vec<f64>) {
        let knob = self.knob_for(&gpu.name);
        let settings = match knob {
            Knob::PowerLimit => match (gpu.power_limit_min_mw, gpu.power_limit_max_mw) {
                (Some(min), Some(max)) => wattson_engine::priors::power_limit_grid(
                    f64::from(min) / 1000.0,
                    f64::from(max) / 1000.0,
                    self.power_limit_step_w,
                ),
                _ => Vec::new(),
            },
            Knob::SmClock => wattson_engine::priors::sm_clock_grid(
                &gpu.sm_clocks_mhz,
                self.sm_clock_floor,
                self.sm_clock_step_mhz,
            ),
        };
        (knob, settings)
    }
}
