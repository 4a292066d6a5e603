//! What `job_submit/wattson` decides inside slurmctld: validate the hints again (API
//! submissions bypass `sbatch`), apply the site policy, and turn `--energy-defer` into a later
//! eligible start when the tariff has a cheaper hour within the window; with `enact = "model"`,
//! record what the learned model table predicts for a known `--energy-tag`. No network I/O:
//! the only I/O is a `stat` of the configuration file and of the model table, each reloaded
//! when it changes.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::hints::{self, SubmitHints};
use super::shards::{self, GpuRequest, Kept, ShardRewrite, ShareRule};
use wattson_config::policy::Decision;
use wattson_config::{Config, EngineConfig};
use wattson_engine::{ModelTable, Objective};
use wattson_types::job::share_word;
use wattson_types::model_owner::ModelOwner;

/// The variable job_submit adds to a job's SPANK environment with its name, for the nodes'
/// prolog (where `SLURM_JOB_NAME` is not set).
pub const JOB_NAME_VAR: &str = "SPANK_WATTSON_JOB_NAME";

/// The outcome for an accepted job.
#[derive(Debug, Clone, PartialEq)]
pub struct SubmitDecision {
    /// Policy and its enactment.
    pub decision: Decision,
    /// New eligible start (seconds since the epoch) when deferral found a cheaper hour.
    pub begin_time_s: Option<i64>,
    /// Recorded on the job (`AdminComment`, shown by `scontrol show job` and `sacct`).
    pub admin_comment: String,
    /// A line for the user, when something differs from what they asked.
    pub message: Option<String>,
    /// SPANK options to write into the job's SPANK environment: the hints read from the job's
    /// environment, which the nodes would not see otherwise, and the share opt-in a partition's
    /// default gave. Empty when sbatch's options carry them already.
    pub spank_options: Vec<(String, String)>,
    /// The job's GPU-sharing opt-in and how it is enacted.
    pub share: Share,
}

/// What job_submit reads of a job besides its environments, for GPU sharing.
#[derive(Debug, Clone, Default)]
pub struct JobShape<'a> {
    /// The partitions the job may run in: its own (`-p a,b`), else Slurm's default one; empty
    /// when neither is known.
    pub partitions: Vec<&'a str>,
    /// What it asks of GPUs.
    pub gpus: GpuRequest<'a>,
    /// Whether this Slurm gives each task its shards on a GPU of its own (24.05 and later).
    pub one_task_per_sharing: bool,
}

/// A job's GPU-sharing opt-in (`--energy-share`, else its partitions' default) and what
/// enacts it.
#[derive(Debug, Clone, PartialEq)]
pub enum Share {
    /// Not opted in: the job keeps its GPUs to itself.
    No,
    /// Opted in and given half a GPU's shards instead of each of its whole GPUs.
    Shards(ShardRewrite),
    /// Opted in; its request is kept as it is, for this reason.
    Kept(Kept),
}

/// Decides for a submission by `uid` (named `user` in the site policy; its Slurm `account`
/// when given at submission; its partitions and GPU request in `job`) from its SPANK
/// environment and its job environment (see [`SubmitHints::from_env`]); the error is the
/// one-line reason the job is refused.
#[allow(clippy::too_many_arguments)]
pub fn decide<'a>(
    spank_env: impl IntoIterator<Item = &'a str>,
    job_env: impl IntoIterator<Item = &'a str>,
    uid: u32,
    user: &str,
    account: Option<&str>,
    job: &JobShape,
    now_s: i64,
    config: &Config,
    models: &ModelTable,
) -> Result<SubmitDecision, String> {
    let (hints, from_job_env) = SubmitHints::from_env(spank_env, job_env)?;
    let decision = config.policy.decide(&hints.hints, user);
    let mut admin_comment = format!("wattson:policy={}", decision.policy);
    if hints.hints.gpu_freq.is_some() {
        admin_comment.push_str(",stands-aside=gpu-freq");
    }
    match decision.engine {
        _ if !decision.by_model() => admin_comment.push_str(&format!(",power={}%", decision.power_pct)),
        Objective::MinEnergy { max_slowdown } => {
            admin_comment.push_str(&format!(",slowdown={}%", 100.0 * max_slowdown))
        }
        _ => {}
    }
    if decision.by_model() {
        let owner = config.engine.model_owner.owner(uid, account);
        let tag = hints.hints.tag.as_deref();
        admin_comment.push_str(&model_note(models, &owner, tag, decision.engine, &config.engine));
    }
    let begin_time_s = hints.defer.and_then(|window| {
        let min_drop = config.ctld.tuning.min_price_drop;
        let start = config.prices.deferred_start(now_s, window.as_secs() as i64, min_drop);
        (start > now_s).then_some(start)
    });
    if let Some(window) = hints.defer {
        // The window itself, so that history (`wattson trace export`) tells the wait the user
        // chose from the wait the cluster imposed.
        admin_comment.push_str(&format!(",defer={}", window.as_secs()));
    }
    if let Some(t) = begin_time_s {
        admin_comment.push_str(&format!(",deferred={}", format_utc(t)));
    }
    let opted_in = config.policy.shares(hints.hints.share, &job.partitions);
    let rule = ShareRule {
        shards: config.policy.shards_per_job(),
        most_gpus: config.policy.share_gpus,
        one_task_per_sharing: job.one_task_per_sharing,
    };
    let share = match (opted_in, shards::rewrite(&job.gpus, rule)) {
        (false, _) => Share::No,
        (true, Ok(rewrite)) => Share::Shards(rewrite),
        (true, Err(kept)) => Share::Kept(kept),
    };
    if opted_in || hints.hints.share.is_some() {
        admin_comment.push_str(&format!(",share={}", share_word(opted_in)));
    }
    if let Share::Shards(r) = &share {
        admin_comment.push_str(&format!(",shards={}", r.shards));
        if r.gpus > 1 {
            admin_comment.push_str(&format!(",shared_gpus={}", r.gpus));
        }
    }
    let mut message = match (&decision.note, begin_time_s) {
        (Some(note), _) => Some(format!("wattson: {note}")),
        (None, Some(t)) => Some(format!("wattson: deferred to {} (cheaper electricity)", format_utc(t))),
        (None, None) => None,
    };
    if let Share::Shards(r) = &share {
        let line = if r.gpus == 1 {
            format!(
                "the job may share its GPU: it asks {} shards (half a GPU) instead of a whole GPU",
                r.shards
            )
        } else {
            format!(
                "the job may share its GPUs: each of its {} tasks asks {} shards (half a GPU) of a GPU of its own instead of {} whole GPUs",
                r.gpus, r.shards, r.gpus
            )
        };
        message = Some(match message {
            Some(m) => format!("{m}; {line}"),
            None => format!("wattson: {line}"),
        });
    }
    let mut spank_options = if from_job_env { hints.spank_options() } else { Vec::new() };
    if opted_in && hints.hints.share.is_none() {
        // The partition's default, for the nodes to record as the job's hint.
        spank_options.push((hints::spank_option_name("energy-share"), share_word(true).to_string()));
    }
    Ok(SubmitDecision { decision, begin_time_s, admin_comment, message, spank_options, share })
}

/// `,tag=T,model=GPU:530W(slowdown 8.5%)` (or `1755MHz`, on the SM-clock knob) per GPU type
/// where `owner` has a model of the tag on that type's knob, or `,model=none` (the node
/// probes); nothing without a tag.
fn model_note(
    models: &ModelTable,
    owner: &ModelOwner,
    tag: Option<&str>,
    objective: Objective,
    engine: &EngineConfig,
) -> String {
    let Some(tag) = tag else { return String::new() };
    let mut note = format!(",tag={tag}");
    let mut known = false;
    for gpu_type in models.gpu_types_with(owner, tag) {
        let knob = engine.knob_for(gpu_type);
        let on_knob = models.get(owner, tag, gpu_type).is_some_and(|e| e.model.knob == knob);
        let d = models.decide(owner, tag, gpu_type, knob, objective);
        if let (true, Some(setting)) = (on_knob, d.setting) {
            known = true;
            note.push_str(&format!(
                ",model={gpu_type}:{setting:.0}{}(slowdown {:.1}%)",
                knob.unit(),
                100.0 * d.predicted_slowdown
            ));
        }
    }
    if !known {
        note.push_str(",model=none");
    }
    note
}

fn format_utc(t_s: i64) -> String {
    chrono::DateTime::from_timestamp(t_s, 0)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// The configuration and the model table as last read, each reloaded when its file's
/// modification time changes. A file that fails to parse keeps the last good one in force.
pub struct CachedConfig {
    path: PathBuf,
    stamp: Option<SystemTime>,
    config: Config,
    models_stamp: Option<SystemTime>,
    models: ModelTable,
}

impl CachedConfig {
    /// Reads `path` (defaults when it does not exist); the error is for the log.
    pub fn load(path: &Path) -> (CachedConfig, Option<String>) {
        let mut cached = CachedConfig {
            path: path.to_path_buf(),
            stamp: None,
            config: Config::default(),
            models_stamp: None,
            models: ModelTable::new(),
        };
        let error = cached.refresh();
        (cached, error)
    }

    /// The configuration and the model table, re-read first if their files changed; also
    /// returns a reload error.
    pub fn get(&mut self) -> (&Config, &ModelTable, Option<String>) {
        let error = self.refresh().or_else(|| self.refresh_models());
        (&self.config, &self.models, error)
    }

    fn refresh_models(&mut self) -> Option<String> {
        let path = &self.config.engine.models_file;
        let stamp = std::fs::metadata(path).and_then(|m| m.modified()).ok();
        if stamp == self.models_stamp {
            return None;
        }
        self.models_stamp = stamp;
        if stamp.is_none() {
            self.models = ModelTable::new();
            return None;
        }
        match std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|t| ModelTable::from_json(&t).map_err(|e| e.to_string()))
        {
            Ok(models) => {
                self.models = models;
                None
            }
            Err(e) => Some(format!("{}: {e}; keeping the previous model table", path.display())),
        }
    }

    fn refresh(&mut self) -> Option<String> {
        let stamp = std::fs::metadata(&self.path).and_then(|m| m.modified()).ok();
        if stamp == self.stamp {
            return None;
        }
        self.stamp = stamp;
        if stamp.is_none() {
            self.config = Config::default();
            return None;
        }
        match Config::load(&self.path) {
            Ok(config) => {
                self.config = config;
                None
            }
            Err(e) => Some(format!("{e}; keeping the previous configuration")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattson_types::job::EnergyPolicy;

    fn config(text: &str) -> Config {
        Config::parse(text, "t.toml").unwrap()
    }

    #[test]
    fn the_policy_is_recorded_on_the_job() {
        let share = config("[policy]\nenact = \"share\"\n");
        let none = ModelTable::new();
        let d = decide(
            ["_SLURM_SPANK_OPTION_wattson_energy=min-energy"],
            [],
            1000,
            "alice",
            None,
            &JobShape::default(),
            0,
            &share,
            &none,
        )
        .unwrap();
        assert_eq!(d.admin_comment, "wattson:policy=min-energy,power=60%");
        assert_eq!((d.begin_time_s, d.message), (None, None));
        let d =
            decide([], [], 1000, "alice", None, &JobShape::default(), 0, &Config::default(), &none).unwrap();
        assert_eq!(d.decision.policy, EnergyPolicy::Balanced);
        assert_eq!(d.admin_comment, "wattson:policy=balanced");
    }

    #[test]
    fn a_known_tag_gets_the_models_prediction_and_an_unknown_one_says_none() {
        use wattson_engine::{Knob, ModelEntry, Sample, fit};
        let samples: Vec<Sample> =
            [(200.0, 0.187, 200.0), (450.0, 0.116, 450.0), (530.0, 0.109, 530.0), (700.0, 0.1, 650.0)]
                .iter()
                .map(|&(setting, time, power)| Sample::new(setting, time, power, 1.0))
                .collect();
        let entry = ModelEntry {
            model: fit(Knob::PowerLimit, &samples).unwrap(),
            settings: vec![200.0, 450.0, 530.0, 700.0],
        };
        let mut table = ModelTable::new();
        table.insert(&ModelOwner::User(1000), "bert", "H100", entry.clone());
        let env =
            ["_SLURM_SPANK_OPTION_wattson_energy=min-energy", "_SLURM_SPANK_OPTION_wattson_energy_tag=bert"];
        let d = decide(env, [], 1000, "alice", None, &JobShape::default(), 0, &Config::default(), &table)
            .unwrap();
        // 530 W is the least energy measured within 10% (measured 9.0% slower).
        let prefix = "wattson:policy=min-energy,slowdown=10%,tag=bert,model=H100:530W(slowdown ";
        assert!(d.admin_comment.starts_with(prefix), "{}", d.admin_comment);
        let pct: f64 = d.admin_comment[prefix.len()..].trim_end_matches("%)").parse().unwrap();
        assert!((5.0..=10.0).contains(&pct), "{pct}");
        let env = ["_SLURM_SPANK_OPTION_wattson_energy_tag=gpt"];
        let d = decide(env, [], 1000, "alice", None, &JobShape::default(), 0, &Config::default(), &table)
            .unwrap();
        assert_eq!(d.admin_comment, "wattson:policy=balanced,tag=gpt,model=none");
        // Models shared within accounts: another user of the account gets its prediction,
        // a user of another account (or none given at submission) does not.
        table.insert(&ModelOwner::Account("physics".into()), "gpt", "H100", entry);
        let by_account = config("[engine]\nmodel_owner = \"account\"\n");
        let d = decide(env, [], 1001, "bob", Some("physics"), &JobShape::default(), 0, &by_account, &table)
            .unwrap();
        assert!(d.admin_comment.contains("tag=gpt,model=H100:"), "{}", d.admin_comment);
        for account in [Some("chem"), None] {
            let d =
                decide(env, [], 1001, "bob", account, &JobShape::default(), 0, &by_account, &table).unwrap();
            assert!(d.admin_comment.ends_with("model=none"), "{account:?}: {}", d.admin_comment);
        }
        let d = decide(
            env,
            [],
            1001,
            "bob",
            Some("physics"),
            &JobShape::default(),
            0,
            &Config::default(),
            &table,
        )
        .unwrap();
        assert!(d.admin_comment.ends_with("model=none"), "owned by users by default: {}", d.admin_comment);
    }

    /// A one-node job asking `tres_per_node` in `partitions`.
    fn shape<'a>(partitions: &[&'a str], tres_per_node: &'a str) -> JobShape<'a> {
        let gpus = GpuRequest {
            tres_per_node: Some(tres_per_node),
            min_nodes: 1,
            max_nodes: 1,
            num_tasks: 1,
            ..GpuRequest::default()
        };
        JobShape { partitions: partitions.to_vec(), gpus, one_task_per_sharing: false }
    }

    #[test]
    fn an_opted_in_one_gpu_job_asks_half_a_gpus_shards_and_says_so() {
        let cfg = config("[policy]\nshards_per_gpu = 4\nshare_partitions = [\"inference\"]\n");
        let none = ModelTable::new();
        let asked = ["_SLURM_SPANK_OPTION_wattson_energy_share=yes"];
        let d =
            decide(asked, [], 1000, "alice", None, &shape(&["gpu"], "gres/gpu:1"), 0, &cfg, &none).unwrap();
        let rewrite = ShardRewrite {
            tres_per_node: "gres/shard:2".into(),
            clear_tres_per_job: false,
            shards: 2,
            gpus: 1,
            tres_per_task: None,
        };
        assert_eq!(d.share, Share::Shards(rewrite));
        assert_eq!(d.admin_comment, "wattson:policy=balanced,share=yes,shards=2");
        assert!(d.message.unwrap().contains("asks 2 shards (half a GPU)"));
        assert!(d.spank_options.is_empty(), "sbatch's own option reaches the nodes");
        // The partition's default: opted in without asking, and the nodes are told.
        let d = decide([], [], 1000, "alice", None, &shape(&["inference"], "gres:gpu:1"), 0, &cfg, &none)
            .unwrap();
        assert!(
            matches!(d.share, Share::Shards(ref r) if r.tres_per_node == "gres:shard:2"),
            "{:?}",
            d.share
        );
        assert_eq!(d.spank_options, [("_SLURM_SPANK_OPTION_wattson_energy_share".into(), "yes".into())]);
        // Opted out in a default partition: whole GPU, recorded.
        let no = ["_SLURM_SPANK_OPTION_wattson_energy_share=no"];
        let d = decide(no, [], 1000, "alice", None, &shape(&["inference"], "gres:gpu:1"), 0, &cfg, &none)
            .unwrap();
        assert_eq!((d.share, d.admin_comment.as_str()), (Share::No, "wattson:policy=balanced,share=no"));
        // Neither asked nor a default partition (or one of two partitions not listed): nothing.
        for partitions in [&["gpu"][..], &["inference", "gpu"], &[]] {
            let d = decide([], [], 1000, "alice", None, &shape(partitions, "gres:gpu:1"), 0, &cfg, &none)
                .unwrap();
            assert_eq!(
                (d.share, d.admin_comment.as_str()),
                (Share::No, "wattson:policy=balanced"),
                "{partitions:?}"
            );
        }
        // Opted in, but two GPUs: kept whole, the opt-in recorded.
        let d =
            decide(asked, [], 1000, "alice", None, &shape(&["gpu"], "gres:gpu:2"), 0, &cfg, &none).unwrap();
        assert_eq!(
            (d.share, d.admin_comment.as_str()),
            (Share::Kept(Kept::NotOneGpu), "wattson:policy=balanced,share=yes")
        );
        // A site without shards per GPU records the opt-in only.
        let d = decide(
            asked,
            [],
            1000,
            "alice",
            None,
            &shape(&["gpu"], "gres:gpu:1"),
            0,
            &Config::default(),
            &none,
        )
        .unwrap();
        assert_eq!(d.share, Share::Kept(Kept::SiteRewritesNothing));
        // Through the environment (REST API): the nodes get the option as for the others.
        let from_env = |var: &'static str| {
            decide([], [var], 1000, "alice", None, &shape(&["gpu"], "gres:gpu:1"), 0, &cfg, &none)
        };
        let d = from_env("WATTSON_ENERGY_SHARE=yes").unwrap();
        assert!(matches!(d.share, Share::Shards(_)));
        assert_eq!(d.spank_options, [("_SLURM_SPANK_OPTION_wattson_energy_share".into(), "yes".into())]);
        let e = from_env("WATTSON_ENERGY_SHARE=maybe").unwrap_err();
        assert_eq!(e, "--energy-share=maybe: not one of yes, no");
    }

    #[test]
    fn a_site_that_shares_jobs_of_several_gpus_gives_each_task_half_a_gpu_on_a_later_slurm() {
        let cfg = config("[policy]\nshards_per_gpu = 4\nshare_gpus = 2\n");
        let none = ModelTable::new();
        let asked = ["_SLURM_SPANK_OPTION_wattson_energy_share=yes"];
        let two = |later| {
            let mut job = shape(&["gpu"], "gres/gpu:2");
            (job.gpus.num_tasks, job.one_task_per_sharing) = (2, later);
            decide(asked, [], 1000, "alice", None, &job, 0, &cfg, &none).unwrap()
        };
        let d = two(true);
        assert!(
            matches!(d.share, Share::Shards(ref r) if r.gpus == 2 && r.tres_per_task.as_deref() == Some("gres/shard:2")),
            "{:?}",
            d.share
        );
        assert_eq!(d.admin_comment, "wattson:policy=balanced,share=yes,shards=2,shared_gpus=2");
        let said = d.message.unwrap();
        assert!(
            said.contains("each of its 2 tasks asks 2 shards (half a GPU) of a GPU of its own"),
            "{said}"
        );
        assert_eq!(two(false).share, Share::Kept(Kept::ReleaseCannotShareSeveral));
    }

    #[test]
    fn bad_hints_refuse_the_job() {
        let e = decide(
            [],
            ["WATTSON_ENERGY_SLOWDOWN=-3"],
            1000,
            "alice",
            None,
            &JobShape::default(),
            0,
            &Config::default(),
            &ModelTable::new(),
        )
        .unwrap_err();
        assert!(e.contains("--energy-slowdown=-3"), "{e}");
    }

    #[test]
    fn deferral_moves_the_start_to_the_cheap_hour() {
        let night: Vec<String> =
            (0..24).map(|h| if h < 6 { "0.1".into() } else { "0.3".to_string() }).collect();
        let cfg = config(&format!("[prices]\nhourly_utc = [{}]\n", night.join(", ")));
        let now = 20_000 * 86_400 + 22 * 3600; // 22:00 UTC
        let d = decide(
            ["_SLURM_SPANK_OPTION_wattson_energy_defer=6h"],
            [],
            1000,
            "bob",
            None,
            &JobShape::default(),
            now,
            &cfg,
            &ModelTable::new(),
        )
        .unwrap();
        assert_eq!(d.begin_time_s, Some(20_001 * 86_400));
        assert!(
            d.admin_comment.ends_with(",defer=21600,deferred=2024-10-05T00:00:00Z"),
            "{}",
            d.admin_comment
        );
        assert!(d.message.unwrap().contains("deferred to 2024-10-05T00:00:00Z"));
    }

    #[test]
    fn deferral_needs_an_hour_min_price_drop_cheaper_as_the_simulator_scores_it() {
        // Night 10% cheaper than day: under the shipped 20% the job is not deferred (the
        // window is still recorded); under a 5% drop it is.
        let night: Vec<String> =
            (0..24).map(|h| if h < 6 { "0.27".into() } else { "0.3".to_string() }).collect();
        let prices = format!("[prices]\nhourly_utc = [{}]\n", night.join(", "));
        let now = 20_000 * 86_400 + 22 * 3600; // 22:00 UTC
        let at = |cfg: &Config| {
            let asked = ["_SLURM_SPANK_OPTION_wattson_energy_defer=6h"];
            decide(asked, [], 1000, "bob", None, &JobShape::default(), now, cfg, &ModelTable::new()).unwrap()
        };
        let d = at(&config(&prices));
        assert_eq!(d.begin_time_s, None);
        assert!(d.admin_comment.ends_with(",defer=21600"), "{}", d.admin_comment);
        let d = at(&config(&format!("{prices}[ctld]\nmin_price_drop = 0.05\n")));
        assert_eq!(d.begin_time_s, Some(20_001 * 86_400));
    }

    #[test]
    fn the_cached_config_reloads_on_change_and_survives_a_broken_edit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.toml");
        // The model table in the test's directory, not the host's default path.
        let engine = format!("[engine]\nmodels_file = {:?}\n", dir.path().join("models.json"));
        std::fs::write(&path, &engine).unwrap();
        let (mut cached, error) = CachedConfig::load(&path);
        assert!(error.is_none());
        assert_eq!(cached.get().0.policy.default, EnergyPolicy::Balanced);
        assert!(cached.get().1.is_empty());
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&path, format!("{engine}[policy]\ndefault = \"perf\"\n")).unwrap();
        assert_eq!(cached.get().0.policy.default, EnergyPolicy::Perf);
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&path, format!("{engine}[policy]\ndefault = \"fastest\"\n")).unwrap();
        let (config, _, error) = cached.get();
        assert_eq!(config.policy.default, EnergyPolicy::Perf);
        assert!(error.unwrap().contains("w.toml:4"));
    }
}
