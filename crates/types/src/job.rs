//! Jobs as wattson records them: the key Slurm gives a job or step, who owns it, its GPUs,
//! its energy hints, and the finished record that reports read.

use serde::{Deserialize, Serialize};
use strum::{Display, EnumString, IntoStaticStr, VariantNames};

use crate::energy::{GpuMeter, Method};

/// A job or one of its steps, as `sacct` names them: `42` (the whole allocation), `42.0`,
/// `42.batch`, `42.extern`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobKey {
    /// Slurm job id.
    pub job_id: u32,
    /// Step name; empty for the whole job.
    #[serde(default)]
    pub step: String,
}

impl JobKey {
    /// The whole job `job_id`.
    pub fn job(job_id: u32) -> JobKey {
        JobKey { job_id, step: String::new() }
    }

    /// Parses `42`, `42.0`, `42.batch`, `42.extern`.
    pub fn parse(s: &str) -> Result<JobKey, String> {
        let (id, step) = match s.split_once('.') {
            Some((id, step)) => (id, step),
            None => (s, ""),
        };
        let job_id = id.parse::<u32>().map_err(|_| {
            format!("bad job id {s:?}: expected a number, optionally .step (42, 42.0, 42.batch)")
        })?;
        let step_ok = step.is_empty()
            || step.parse::<u32>().is_ok()
            || matches!(step, "batch" | "extern" | "interactive");
        if !step_ok {
            return Err(format!("bad step in {s:?}: expected a number, batch, extern or interactive"));
        }
        Ok(JobKey { job_id, step: step.to_string() })
    }
}

impl std::fmt::Display for JobKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.step.is_empty() {
            write!(f, "{}", self.job_id)
        } else {
            write!(f, "{}.{}", self.job_id, self.step)
        }
    }
}

/// The energy policy a job asks for or gets. Its names are the same everywhere: `--energy`,
/// `wattson.toml`, the protocol, the store and reports.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
    Display,
    EnumString,
    IntoStaticStr,
    VariantNames,
)]
#[serde(rename_all = "kebab-case", try_from = "String")]
#[strum(serialize_all = "kebab-case", parse_err_ty = String, parse_err_fn = EnergyPolicy::not_allowed)]
pub enum EnergyPolicy {
    /// `min-energy`: the least energy within a slowdown bound.
    MinEnergy,
    /// `balanced`: the least weighted cost of energy and time.
    Balanced,
    /// `perf`: full speed, GPUs at their defaults.
    Perf,
}

impl EnergyPolicy {
    /// The allowed names, as error messages list them: `min-energy, balanced, perf`.
    pub fn allowed() -> String {
        Self::VARIANTS.join(", ")
    }

    fn not_allowed(name: &str) -> String {
        format!("energy policy {name:?} is not one of {}", Self::allowed())
    }
}

impl TryFrom<String> for EnergyPolicy {
    type Error = String;

    fn try_from(name: String) -> Result<Self, String> {
        name.parse()
    }
}

/// The user's energy hints, as given to `sbatch` (`--energy`, `--energy-slowdown`, ...).
/// Recorded with the job; the engine interprets them.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Hints {
    /// The energy policy asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<EnergyPolicy>,
    /// Largest tolerated slowdown against full speed, in percent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slowdown_pct: Option<f64>,
    /// Workload signature that lets models learn across runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
    /// The GPU clocks the job asked Slurm for (`--gpu-freq`, e.g. `high` or `1500,memory=1000`):
    /// wattson then stands aside and leaves the job's GPUs to them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_freq: Option<String>,
    /// Whether the job lets wattson put it on a GPU another opted-in job also uses
    /// (`--energy-share`, or the site's default for its partitions), accepting a slowdown
    /// within its bound for less energy.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<bool>,
}

/// Reads `--energy-share`'s value: `yes` or `no`; the error says what is allowed.
pub fn parse_share(value: &str) -> Result<bool, String> {
    match value {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err("not one of yes, no".to_string()),
    }
}

/// `--energy-share`'s value for an opt-in: `yes` or `no`.
pub fn share_word(share: bool) -> &'static str {
    if share { "yes" } else { "no" }
}

/// Checks a slowdown bound given in percent (`--energy-slowdown`, `[policy] slowdown_pct`):
/// finite, from 0 to 1000. The one check of it; the error says what is allowed.
pub fn check_slowdown_pct(pct: f64) -> Result<f64, String> {
    if pct.is_finite() && (0.0..=1000.0).contains(&pct) {
        Ok(pct)
    } else {
        Err("not a percentage between 0 and 1000".to_string())
    }
}

impl Hints {
    /// Checks the hints (the policy was checked when it was read); the error says what is
    /// allowed.
    pub fn validate(&self) -> Result<(), String> {
        if let Some(s) = self.slowdown_pct {
            check_slowdown_pct(s).map_err(|e| format!("energy slowdown {s}: {e}"))?;
        }
        if let Some(t) = &self.tag
            && (t.is_empty() || t.len() > 128 || t.chars().any(|c| c.is_control() || c == ',' || c == '='))
        {
            // ',' and '=' separate the fields Slurm records (`AdminComment`).
            return Err("energy tag must be 1 to 128 bytes of printable characters other than ',' and '='"
                .to_string());
        }
        if let Some(f) = &self.gpu_freq
            && (f.is_empty() || f.len() > 128 || f.chars().any(char::is_control))
        {
            return Err("--gpu-freq must be 1 to 128 bytes of printable characters".to_string());
        }
        Ok(())
    }

    /// The slowdown as it is recorded and acted on: to 0.01 percent, never negative zero.
    pub fn normalize(&mut self) {
        if let Some(s) = &mut self.slowdown_pct {
            // Adding +0 turns -0 into +0.
            *s = (*s * 100.0).round() / 100.0 + 0.0;
        }
    }
}

/// A GPU as a caller names it: Slurm's number for it (as in `SLURM_JOB_GPUS`) or its UUID.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum GpuRef {
    /// Slurm's number: the minor number of `/dev/nvidiaN` (not NVML's index, which follows PCI
    /// order and may differ).
    Index(u32),
    /// `GPU-...` UUID or PCI bus id.
    Id(String),
}

impl GpuRef {
    /// Parses `0`, `GPU-8f3c...`, or `00000000:17:00.0`.
    pub fn parse(s: &str) -> GpuRef {
        match s.trim().parse::<u32>() {
            Ok(i) => GpuRef::Index(i),
            Err(_) => GpuRef::Id(s.trim().to_string()),
        }
    }
}

/// The GPUs a job's environment names on a node, as a comma-separated list: Slurm's numbers
/// (`slurm`: `SLURM_JOB_GPUS` or `SLURM_STEP_GPUS`), else `CUDA_VISIBLE_DEVICES` (`cuda`); but
/// `CUDA_VISIBLE_DEVICES` first where it names MIG instances by UUID (`MIG-...`, as Slurm's
/// `AutoDetect=nvml` gives them), which name them whatever order Slurm numbered them in.
pub fn gpus_from_env(slurm: Option<String>, cuda: Option<String>) -> Option<String> {
    let is_mig = |v: &str| {
        let mut names = v.split(',').map(str::trim).filter(|n| !n.is_empty()).peekable();
        names.peek().is_some() && names.all(|n| n.get(..4).is_some_and(|p| p.eq_ignore_ascii_case("MIG-")))
    };
    let (slurm, cuda) = (slurm.filter(|v| !v.trim().is_empty()), cuda.filter(|v| !v.trim().is_empty()));
    match cuda {
        Some(cuda) if is_mig(&cuda) => Some(cuda),
        cuda => slurm.or(cuda),
    }
}

/// The state of a recorded job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, EnumString, IntoStaticStr)]
#[serde(rename_all = "UPPERCASE")]
#[strum(serialize_all = "UPPERCASE")]
pub enum JobState {
    /// Begun and not yet ended.
    Running,
    /// Ended normally.
    Completed,
}

impl JobState {
    /// The name used in the store and in reports: `RUNNING` or `COMPLETED`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// One GPU of a job: its identity on the node and its meter.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobGpu {
    /// NVML index on the node.
    pub index: u32,
    /// GPU UUID.
    pub uuid: String,
    /// Model name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// The running account of this GPU.
    pub meter: GpuMeter,
}

/// Everything wattson knows about one job or step on one node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JobRecord {
    /// Which job or step.
    pub key: JobKey,
    /// Owner's uid.
    pub uid: u32,
    /// Owner's user name, when known.
    pub user: Option<String>,
    /// Job name, when known.
    pub name: Option<String>,
    /// Node the record was taken on.
    pub node: String,
    /// Begin time, ns since the Unix epoch.
    pub begin_ns: i64,
    /// End time, ns since the Unix epoch; `None` while running.
    pub end_ns: Option<i64>,
    /// Running or completed.
    pub state: JobState,
    /// Energy hints, as asked.
    pub hints: Hints,
    /// The policy the site's policy decided at the job's start: what ran. `None` in records
    /// written before it was recorded.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub policy: Option<EnergyPolicy>,
    /// The job's GPUs, by index.
    pub gpus: Vec<JobGpu>,
    /// What the DVFS models did for the job, when they chose its setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dvfs: Option<Box<JobDvfs>>,
    /// The job's share of the node's CPU, DRAM and whole-node energy, and the scope of its
    /// figure in Slurm; `None` in records written before they were measured.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_share: Option<crate::scope::NodeShare>,
}

/// How a job's throughput was measured while the models chose its setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, EnumString, IntoStaticStr)]
#[serde(rename_all = "kebab-case")]
#[strum(serialize_all = "kebab-case")]
pub enum Progress {
    /// The job wrote its work units to `WATTSON_PROGRESS_FILE`.
    File,
    /// No progress reported: SM clock × utilisation stood in for throughput.
    SmActivity,
}

impl Progress {
    /// `file` or `sm-activity`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// What the DVFS models did for one job: the workload, the knob, the probes, the chosen
/// setting, what the model predicted for it and what was measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobDvfs {
    /// Workload key the models learn under (`--energy-tag`, else `user:jobname`).
    pub tag: String,
    /// GPU model name the workload ran on.
    pub gpu_type: String,
    /// Whose models the job uses and adds to (kept so a restarted daemon carries on with them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<crate::model_owner::ModelOwner>,
    /// The knob the models turned (settings are W or MHz by it).
    #[serde(default)]
    pub knob: crate::gpu::Knob,
    /// Settings measured in this run, in order.
    #[serde(alias = "probed_w")]
    pub probed: Vec<f64>,
    /// How throughput was measured, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub progress: Option<Progress>,
    /// Setting the job settled on; `None` while probing.
    #[serde(default, alias = "setting_w", skip_serializing_if = "Option::is_none")]
    pub setting: Option<f64>,
    /// The model's slowdown at that setting against the highest (fraction).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_slowdown: Option<f64>,
    /// The model's energy at that setting over the energy at the highest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub predicted_energy_ratio: Option<f64>,
    /// Relative standard error of the prediction.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uncertainty: Option<f64>,
    /// Why this setting.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Measured after the job: time per unit of work at the setting over that at the highest,
    /// minus 1 (the reference is this run's probe or an earlier run's measurement).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub measured_slowdown: Option<f64>,
    /// Estimate: energy the same work would have taken at the highest setting, minus what the
    /// settled part of the job took (J).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_saved_j: Option<f64>,
}

impl JobRecord {
    /// Total GPU energy in millijoules: the one sum of a job's meters.
    pub fn energy_mj(&self) -> f64 {
        // An empty float sum is -0.0, which prints as "-0": a job without GPUs has 0.
        self.gpus.iter().map(|g| g.meter.energy_mj).sum::<f64>() + 0.0
    }

    /// Total GPU energy in joules.
    pub fn energy_j(&self) -> f64 {
        self.energy_mj() / 1000.0
    }

    /// The energy of the scope the job was metered under, mJ ([`crate::scope::NodeShare::scoped_mj`];
    /// the GPUs' for a record without a share).
    pub fn scoped_energy_mj(&self) -> Result<f64, crate::scope::Unavailable> {
        match &self.node_share {
            Some(share) => share.scoped_mj(self.energy_mj()),
            None => Ok(self.energy_mj()),
        }
    }

    /// The method that measured the job: `counter` only if every GPU was metered by its counter.
    pub fn method(&self) -> Option<Method> {
        self.gpus.iter().map(|g| g.meter.method).reduce(Method::combine)
    }

    /// How the job's shared GPUs were divided with other jobs; `None` if it shared none.
    pub fn split(&self) -> Option<crate::apportion::Split> {
        self.gpus.iter().filter_map(|g| g.meter.split).reduce(crate::apportion::Split::combine)
    }

    /// Elapsed seconds up to the end, or up to `now_ns` while running.
    pub fn elapsed_s(&self, now_ns: i64) -> f64 {
        (self.end_ns.unwrap_or(now_ns) - self.begin_ns).max(0) as f64 / 1e9
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_job_without_gpus_has_zero_gpu_energy_not_minus_zero() {
        let record = JobRecord {
            key: JobKey::job(1),
            uid: 0,
            user: None,
            name: None,
            node: "c1".into(),
            begin_ns: 0,
            end_ns: None,
            state: JobState::Running,
            hints: Hints::default(),
            policy: None,
            gpus: Vec::new(),
            dvfs: None,
            node_share: None,
        };
        assert_eq!(format!("{:.0} {}", record.energy_mj(), record.energy_j()), "0 0");
    }

    #[test]
    fn mig_uuids_in_cuda_visible_devices_win_over_slurms_numbers() {
        let s = |v: &str| Some(v.to_string());
        let mig = "MIG-0a1b2c3d-0000-5000-8000-000000000001,mig-0a1b2c3d-0000-5000-8000-000000000002";
        assert_eq!(gpus_from_env(s("3,4"), s(mig)), s(mig));
        assert_eq!(gpus_from_env(s("0,1"), s("0,1")), s("0,1"));
        assert_eq!(gpus_from_env(s("2"), s("GPU-8f3c")), s("2"), "whole GPUs: Slurm's numbers");
        assert_eq!(gpus_from_env(s("2"), s("MIG-a,3")), s("2"), "not all MIG instances");
        assert_eq!(gpus_from_env(None, s("GPU-8f3c")), s("GPU-8f3c"));
        assert_eq!(gpus_from_env(s(" "), s("")), None);
    }

    #[test]
    fn job_keys_parse_and_print_like_sacct() {
        for s in ["42", "42.0", "42.batch", "42.extern"] {
            assert_eq!(JobKey::parse(s).unwrap().to_string(), s);
        }
        assert_eq!(JobKey::parse("7.3").unwrap(), JobKey { job_id: 7, step: "3".into() });
        assert!(JobKey::parse("x").is_err());
        assert!(JobKey::parse("42.foo").is_err());
        assert!(JobKey::parse("-1").is_err());
    }

    #[test]
    fn a_tag_cannot_carry_field_separators() {
        for tag in ["x,policy=perf", "a=b", "a,b"] {
            let hints = Hints { tag: Some(tag.into()), ..Hints::default() };
            assert!(hints.validate().unwrap_err().contains("other than ','"), "{tag}");
        }
        assert!(Hints { tag: Some("bert-squad:v2.1".into()), ..Hints::default() }.validate().is_ok());
    }

    #[test]
    fn the_share_hint_is_yes_or_no_and_absent_from_old_records() {
        assert_eq!((parse_share("yes"), parse_share("no")), (Ok(true), Ok(false)));
        for bad in ["", "1", "true", "Yes", "maybe"] {
            assert_eq!(parse_share(bad).unwrap_err(), "not one of yes, no", "{bad:?}");
        }
        assert_eq!((share_word(true), share_word(false)), ("yes", "no"));
        let old: Hints = serde_json::from_str(r#"{"policy":"perf"}"#).unwrap();
        assert_eq!(old.share, None);
        assert_eq!(serde_json::to_string(&old).unwrap(), r#"{"policy":"perf"}"#, "no share: not written");
        let shared = Hints { share: Some(false), ..Hints::default() };
        assert_eq!(serde_json::to_string(&shared).unwrap(), r#"{"share":false}"#);
    }

    #[test]
    fn slowdowns_are_recorded_to_a_hundredth_of_a_percent_and_never_negative_zero() {
        for (given, recorded) in [(-0.0, 0.0), (1e-320, 0.0), (5.004, 5.0), (7.25, 7.25)] {
            let mut hints = Hints { slowdown_pct: Some(given), ..Hints::default() };
            hints.validate().unwrap();
            hints.normalize();
            let s = hints.slowdown_pct.unwrap();
            assert!(s == recorded && s.is_sign_positive(), "{given} recorded as {s}");
        }
    }

    #[test]
    fn hints_are_validated() {
        assert!(Hints::default().validate().is_ok());
        let ok = Hints {
            policy: Some(EnergyPolicy::MinEnergy),
            slowdown_pct: Some(10.0),
            tag: Some("bert".into()),
            gpu_freq: Some("1500,memory=1000".into()),
            share: Some(true),
        };
        assert!(ok.validate().is_ok());
        assert!(Hints { gpu_freq: Some("hi\ngh".into()), ..Hints::default() }.validate().is_err());
        // A policy outside the enum is refused where it is read, with what is allowed.
        let bad = serde_json::from_str::<Hints>(r#"{"policy":"fast"}"#).unwrap_err().to_string();
        assert!(bad.contains("min-energy, balanced, perf"), "{bad}");
        let bad = Hints { slowdown_pct: Some(-3.0), ..Hints::default() };
        assert!(bad.validate().is_err());
        let bad = Hints { tag: Some("a\nb".into()), ..Hints::default() };
        assert!(bad.validate().is_err());
    }

    #[test]
    fn policy_names_are_the_same_on_every_path() {
        let names = ["min-energy", "balanced", "perf"];
        let policies = [EnergyPolicy::MinEnergy, EnergyPolicy::Balanced, EnergyPolicy::Perf];
        for (name, policy) in names.into_iter().zip(policies) {
            assert_eq!(policy.to_string(), name);
            assert_eq!(<&str>::from(policy), name);
            assert_eq!(name.parse::<EnergyPolicy>(), Ok(policy));
            assert_eq!(serde_json::to_string(&policy).unwrap(), format!("{name:?}"));
            assert_eq!(serde_json::from_str::<EnergyPolicy>(&format!("{name:?}")).unwrap(), policy);
            let hints: Hints = toml::from_str(&format!("policy = {name:?}")).unwrap();
            assert_eq!(hints.policy, Some(policy));
        }
        assert_eq!(EnergyPolicy::allowed(), "min-energy, balanced, perf");
        assert_eq!(
            "fast".parse::<EnergyPolicy>().unwrap_err(),
            "energy policy \"fast\" is not one of min-energy, balanced, perf"
        );
        assert!("Perf".parse::<EnergyPolicy>().is_err(), "names are case-sensitive, as before");
    }

    #[test]
    fn state_and_progress_names_are_those_of_the_store() {
        for (state, name) in [(JobState::Running, "RUNNING"), (JobState::Completed, "COMPLETED")] {
            assert_eq!(state.as_str(), name);
            assert_eq!(name.parse::<JobState>(), Ok(state));
            assert_eq!(serde_json::to_string(&state).unwrap(), format!("{name:?}"));
        }
        for (progress, name) in [(Progress::File, "file"), (Progress::SmActivity, "sm-activity")] {
            assert_eq!(progress.as_str(), name);
            assert_eq!(name.parse::<Progress>(), Ok(progress));
            assert_eq!(serde_json::to_string(&progress).unwrap(), format!("{name:?}"));
        }
        assert!("running".parse::<JobState>().is_err());
        assert!("sm_activity".parse::<Progress>().is_err());
    }

    #[test]
    fn gpu_refs_parse() {
        assert_eq!(GpuRef::parse("3"), GpuRef::Index(3));
        assert_eq!(GpuRef::parse("GPU-abc"), GpuRef::Id("GPU-abc".into()));
    }
}
