//! What `job_submit/wattson` decides inside slurmctld: validate the hints again (API
//! submissions bypass `sbatch`), apply the site policy, and turn `--energy-defer` into a later
//! eligible start when the tariff has a cheaper hour within the window. No network I/O: the
//! only I/O is a `stat` of the configuration file, reloaded when it changes.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::hints::SubmitHints;
use crate::config::Config;
use crate::policy::Decision;

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
}

/// Decides for a submission whose environment entries are `env`; the error is the one-line
/// reason the job is refused.
pub fn decide<'a>(
    env: impl IntoIterator<Item = &'a str>,
    user: &str,
    now_s: i64,
    config: &Config,
) -> Result<SubmitDecision, String> {
    let hints = SubmitHints::from_env(env)?;
    let decision = config.policy.decide(&hints.hints, user);
    let mut admin_comment = format!("wattson:policy={},power={}%", decision.policy, decision.power_pct);
    let begin_time_s = hints.defer.and_then(|window| {
        let start = config.prices.cheapest_start(now_s, window.as_secs() as i64);
        (start > now_s).then_some(start)
    });
    if let Some(t) = begin_time_s {
        admin_comment.push_str(&format!(",deferred={}", format_utc(t)));
    }
    let message = match (&decision.note, begin_time_s) {
        (Some(note), _) => Some(format!("wattson: {note}")),
        (None, Some(t)) => Some(format!("wattson: deferred to {} (cheaper electricity)", format_utc(t))),
        (None, None) => None,
    };
    Ok(SubmitDecision { decision, begin_time_s, admin_comment, message })
}

fn format_utc(t_s: i64) -> String {
    chrono::DateTime::from_timestamp(t_s, 0)
        .map(|t| t.format("%Y-%m-%dT%H:%M:%SZ").to_string())
        .unwrap_or_default()
}

/// The configuration as last read, reloaded when the file's modification time changes.
/// A file that fails to parse keeps the last good configuration in force.
pub struct CachedConfig {
    path: PathBuf,
    stamp: Option<SystemTime>,
    config: Config,
}

impl CachedConfig {
    /// Reads `path` (defaults when it does not exist); the error is for the log.
    pub fn load(path: &Path) -> (CachedConfig, Option<String>) {
        let mut cached = CachedConfig { path: path.to_path_buf(), stamp: None, config: Config::default() };
        let error = cached.refresh();
        (cached, error)
    }

    /// The configuration, re-read first if the file changed; also returns a reload error.
    pub fn get(&mut self) -> (&Config, Option<String>) {
        let error = self.refresh();
        (&self.config, error)
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

    fn config(text: &str) -> Config {
        Config::parse(text, "t.toml").unwrap()
    }

    #[test]
    fn the_policy_is_recorded_on_the_job() {
        let d = decide(["_SLURM_SPANK_OPTION_wattson_energy=min-energy"], "alice", 0, &Config::default())
            .unwrap();
        assert_eq!(d.admin_comment, "wattson:policy=min-energy,power=60%");
        assert_eq!((d.begin_time_s, d.message), (None, None));
        let d = decide([], "alice", 0, &Config::default()).unwrap();
        assert_eq!(d.decision.policy, "balanced");
    }

    #[test]
    fn bad_hints_refuse_the_job() {
        let e = decide(["WATTSON_ENERGY_SLOWDOWN=-3"], "alice", 0, &Config::default()).unwrap_err();
        assert!(e.contains("--energy-slowdown=-3"), "{e}");
    }

    #[test]
    fn deferral_moves_the_start_to_the_cheap_hour() {
        let night: Vec<String> =
            (0..24).map(|h| if h < 6 { "0.1".into() } else { "0.3".to_string() }).collect();
        let cfg = config(&format!("[prices]\nhourly_utc = [{}]\n", night.join(", ")));
        let now = 20_000 * 86_400 + 22 * 3600; // 22:00 UTC
        let d = decide(["_SLURM_SPANK_OPTION_wattson_energy_defer=6h"], "bob", now, &cfg).unwrap();
        assert_eq!(d.begin_time_s, Some(20_001 * 86_400));
        assert!(d.admin_comment.ends_with(",deferred=2024-10-05T00:00:00Z"), "{}", d.admin_comment);
        assert!(d.message.unwrap().contains("deferred to 2024-10-05T00:00:00Z"));
    }

    #[test]
    fn the_cached_config_reloads_on_change_and_survives_a_broken_edit() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.toml");
        let (mut cached, error) = CachedConfig::load(&path);
        assert!(error.is_none());
        assert_eq!(cached.get().0.policy.default, "balanced");
        std::fs::write(&path, "[policy]\ndefault = \"perf\"\n").unwrap();
        assert_eq!(cached.get().0.policy.default, "perf");
        std::thread::sleep(std::time::Duration::from_millis(20));
        std::fs::write(&path, "[policy]\ndefault = \"fastest\"\n").unwrap();
        let (config, error) = cached.get();
        assert_eq!(config.policy.default, "perf");
        assert!(error.unwrap().contains("w.toml:2"));
    }
}
