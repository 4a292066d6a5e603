//! `wattson.toml`: the one configuration file of the daemon and the CLI.
//!
//! Every key is optional and has a production default. An unknown key or a bad value is an
//! error that names the file and line, what was wrong, and what is allowed; the daemon refuses
//! to start on it rather than guess.

pub mod budget;
pub mod ctld;
pub mod energy;
mod engine;
pub mod link;
pub mod locate;
pub mod mail;
pub mod pairs;
mod paths;
pub mod policy;
pub mod reference;

pub use engine::{EngineConfig, ModelOwnership};

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// Where the CLI and the daemon look for the configuration when none is given.
pub const DEFAULT_PATH: &str = "/etc/wattson/wattson.toml";

/// The whole configuration.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[daemon]`: wattsond's socket, store and sampling.
    #[serde(default)]
    pub daemon: DaemonConfig,
    /// `[gpu]`: the GPU backend.
    #[serde(default)]
    pub gpu: GpuConfig,
    /// `[metrics]`: the Prometheus endpoint.
    #[serde(default)]
    pub metrics: MetricsConfig,
    /// `[policy]`: which energy policy jobs get and how it is enacted.
    #[serde(default)]
    pub policy: policy::SitePolicy,
    /// `[prices]`: the electricity tariff that `--energy-defer` follows.
    #[serde(default)]
    pub prices: wattson_types::prices::PriceSchedule,
    /// `[carbon]`: the grid's carbon intensity, for `wattson report`.
    #[serde(default)]
    pub carbon: wattson_types::prices::CarbonIntensity,
    /// `[engine]`: online probing and the learned models.
    #[serde(default)]
    pub engine: EngineConfig,
    /// `[ctld]`: the controller service (`wattson ctld`).
    #[serde(default)]
    pub ctld: ctld::CtldConfig,
    /// `[budget]`: the cluster power budget `wattson ctld` keeps.
    #[serde(default)]
    pub budget: budget::BudgetConfig,
    /// `[power]`: the node power actions of `wattson power`.
    #[serde(default)]
    pub power: ctld::PowerConfig,
    /// `[link]`: the controller's requests to each node's wattsond.
    #[serde(default)]
    pub link: link::LinkConfig,
    /// `[energy]`: what a job's energy in Slurm covers (GPU, GPU+CPU, the node).
    #[serde(default)]
    pub energy: energy::EnergyConfig,
    /// `[mail]`: the energy summary in the mail Slurm sends after a job.
    #[serde(default)]
    pub mail: mail::MailConfig,
}

/// `[daemon]` section.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct DaemonConfig {
    /// Unix socket the daemon listens on.
    pub socket: PathBuf,
    /// SQLite file with the node's job energy records.
    pub store: PathBuf,
    /// Node name recorded with each job (default: the host name).
    #[serde(default)]
    pub node_name: Option<String>,
    /// The user besides root that may begin and end jobs (Slurm's `SlurmUser`).
    pub slurm_user: String,
    /// Users who may read every user's jobs (root always may).
    #[serde(default)]
    pub admins: Vec<String>,
    /// How often every GPU is read.
    #[serde(deserialize_with = "sample_interval")]
    #[schemars(with = "String", extend("x-allowed" = "100ms to 1h"))]
    pub sample_interval: Duration,
    /// How often a point of the per-job time series is stored.
    #[serde(deserialize_with = "series_interval")]
    #[schemars(with = "String", extend("x-allowed" = "100ms to 1d"))]
    pub series_interval: Duration,
    /// How long a client waits for the daemon, and the daemon for a client's request.
    #[serde(deserialize_with = "request_timeout")]
    #[schemars(with = "String", extend("x-allowed" = "10ms to 5m"))]
    pub request_timeout: Duration,
}

impl Default for DaemonConfig {
    fn default() -> Self {
        DaemonConfig {
            socket: PathBuf::from("/run/wattson/wattsond.sock"),
            store: PathBuf::from("/var/lib/wattson/wattson.db"),
            node_name: None,
            slurm_user: "slurm".to_string(),
            admins: Vec::new(),
            sample_interval: Duration::from_secs(1),
            series_interval: Duration::from_secs(10),
            request_timeout: Duration::from_secs(5),
        }
    }
}

/// `[gpu]` section.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct GpuConfig {
    /// The GPU backend: `nvml` (NVIDIA), `amd` (AMD, through ROCm SMI) or `auto` (whichever
    /// of the two finds GPUs on the node, NVIDIA's first).
    #[serde(default)]
    pub backend: Backend,
    /// Path of the NVML library to load instead of the driver's `libnvidia-ml.so.1`
    /// (the simulated GPUs of tests and the demo are loaded this way).
    #[serde(default)]
    pub nvml_library: Option<PathBuf>,
    /// Path of the ROCm SMI library to load instead of `librocm_smi64.so.1` (found by the
    /// system's library path; ROCm's own packages put it in `/opt/rocm/lib`).
    #[serde(default)]
    pub amd_library: Option<PathBuf>,
    /// Read the GPUs and never change them: no power limit or clock is set or reset, every job
    /// runs at the settings the GPU has and is recorded (accounting only).
    #[serde(default)]
    pub read_only: bool,
}

/// The available GPU backends.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// NVIDIA Management Library.
    #[default]
    Nvml,
    /// AMD GPUs through ROCm SMI (`librocm_smi64.so.1`), as Slurm's `gpu/rsmi` reads them.
    Amd,
    /// NVML where it finds GPUs, else ROCm SMI.
    Auto,
}

/// `[metrics]` section.
#[derive(Debug, Clone, Default, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MetricsConfig {
    /// Address for Prometheus' `/metrics` (e.g. `127.0.0.1:9829`); absent = no endpoint.
    #[serde(default)]
    pub listen: Option<SocketAddr>,
    /// Also serve each running job's GPU energy, labelled with its job id. Off by default:
    /// anyone who can reach the port sees them (Slurm hides jobs from other users).
    #[serde(default)]
    pub jobs: bool,
    /// `listen` is meant to be beyond this host (any address but loopback): without it such
    /// an address is refused.
    #[serde(default)]
    pub public: bool,
}

/// Largest configuration file read.
const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Reads a regular file of at most [`MAX_CONFIG_BYTES`]: never blocks on a FIFO or a device,
/// never reads without bound.
fn read_bounded(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new().read(true).custom_flags(nix::libc::O_NONBLOCK).open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut text = String::new();
    file.take(MAX_CONFIG_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_CONFIG_BYTES {
        return Err(std::io::Error::other(format!("larger than {MAX_CONFIG_BYTES} bytes")));
    }
    Ok(text)
}

pub(crate) fn duration_in<'de, D: Deserializer<'de>>(
    d: D,
    min: Duration,
    max: Duration,
) -> Result<Duration, D::Error> {
    let text = String::deserialize(d)?;
    let value = humantime::parse_duration(&text).map_err(|e| {
        serde::de::Error::custom(format!("bad duration {text:?} ({e}): write e.g. \"500ms\", \"1s\", \"2m\""))
    })?;
    if value < min || value > max {
        return Err(serde::de::Error::custom(format!(
            "duration {text:?} is out of range: allowed {} to {}",
            humantime::format_duration(min),
            humantime::format_duration(max)
        )));
    }
    Ok(value)
}

/// A number within `[min, max]`; the error names the value with its `unit` and the range.
pub(crate) fn number_in<'de, D: Deserializer<'de>>(
    d: D,
    min: f64,
    max: f64,
    unit: &str,
) -> Result<f64, D::Error> {
    let x = f64::deserialize(d)?;
    if (min..=max).contains(&x) {
        Ok(x)
    } else {
        Err(serde::de::Error::custom(format!("{x}{unit}: allowed {min} to {max}")))
    }
}

fn sample_interval<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration_in(d, Duration::from_millis(100), Duration::from_secs(3600))
}
fn series_interval<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration_in(d, Duration::from_millis(100), Duration::from_secs(86400))
}
fn request_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration_in(d, Duration::from_millis(10), Duration::from_secs(300))
}

/// A configuration error a person can act on.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct ConfigError(pub String);

impl ConfigError {
    /// `message` about `key` (`section.name`), as `origin:line: message` at the line of `text`
    /// that sets the key, or `origin: message` where the file does not set it (a default).
    pub(crate) fn at(text: &str, origin: &str, key: &str, message: &str) -> ConfigError {
        match line_of(text, key) {
            Some(line) => ConfigError(format!("{origin}:{line}: {message}")),
            None => ConfigError(format!("{origin}: {message}")),
        }
    }
}

/// The line (from 1) of `text` that sets `key` (`section.name`): under its `[section]`
/// header, or as a dotted key before any header.
fn line_of(text: &str, key: &str) -> Option<usize> {
    let (section, name) = key.split_once('.')?;
    let mut current = "";
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if let Some(header) = line.strip_prefix('[').and_then(|h| h.split(']').next()) {
            current = header.trim();
            continue;
        }
        let Some((set, _)) = line.split_once('=') else { continue };
        let set = set.trim();
        if (current == section && set == name) || (current.is_empty() && set == key) {
            return Some(i + 1);
        }
    }
    None
}

impl Config {
    /// Parses `text`, naming `origin` (a path) in errors as `origin:line: message`.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| {
            if let Some((key, message)) = ctld::knob_error(text) {
                return ConfigError::at(
                    text,
                    origin,
                    &format!("ctld.{key}"),
                    &format!("ctld.{key}: {message}"),
                );
            }
            let line = e.span().map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
            let message = e.message().trim_end();
            match line {
                Some(line) => ConfigError(format!("{origin}:{line}: {message}")),
                None => ConfigError(format!("{origin}: {message}")),
            }
        })?;
        let at = |key: &str, message: &str| Err(ConfigError::at(text, origin, key, message));
        if let Some(key) = config.ctld.unknown.keys().next() {
            let renamed = match key.as_str() {
                "forecast_window" => "; it is now forecast_window_s, in seconds",
                "dvfs_horizon" => "; it is now dvfs_horizon_s, in seconds",
                "place_by_type" => "; it is now type_aware",
                _ => "",
            };
            let message = format!("ctld.{key} is not a key of [ctld]{renamed} (see wattson.toml(5))");
            return at(&format!("ctld.{key}"), &message);
        }
        if let Err((key, message)) = config.ctld.tuning.check() {
            return at(&format!("ctld.{key}"), &format!("ctld.{message}"));
        }
        if config.engine.probe_settle >= config.engine.probe_window {
            return at("engine.probe_settle", "engine.probe_settle must be shorter than engine.probe_window");
        }
        if config.daemon.slurm_user.is_empty() {
            return at("daemon.slurm_user", "daemon.slurm_user must not be empty");
        }
        if config.ctld.decides_sharing() {
            let key = if config.ctld.share_pairs.is_some() { "ctld.share_pairs" } else { "ctld.share_learn" };
            if config.budget.power_w.is_some() {
                return at(
                    key,
                    &format!(
                        "{key} and budget.power_w cannot be set together: each holds jobs at submission for the controller, and one job is released by one decision"
                    ),
                );
            }
            if config.policy.shards_per_job().is_none() {
                return at(
                    key,
                    &format!(
                        "{key} needs policy.shards_per_gpu (the shards job_submit gives an opted-in job)"
                    ),
                );
            }
        }
        paths::check(&config, text, origin)?;
        Ok(config)
    }

    /// Reads and parses the file at `path`.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = read_bounded(path)
            .map_err(|e| ConfigError(format!("{}: cannot read configuration: {e}", path.display())))?;
        Config::parse(&text, &path.display().to_string())
    }

    /// Loads `path` if given; else the file [`locate::find`] finds; else the defaults.
    pub fn load_or_default(path: Option<&Path>) -> Result<Config, ConfigError> {
        match path.map(Path::to_path_buf).or_else(locate::find) {
            Some(p) => Config::load(&p),
            None => Ok(Config::default()),
        }
    }

    /// The node name to record: the configured one, else the host name.
    pub fn node_name(&self) -> String {
        self.daemon.node_name.clone().unwrap_or_else(|| {
            nix::unistd::gethostname()
                .ok()
                .and_then(|h| h.into_string().ok())
                .unwrap_or_else(|| "localhost".to_string())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattson_types::gpu::Knob;

    #[test]
    fn a_pair_file_needs_shards_no_budget_and_jobs_of_one_gpu() {
        let pairs = "[ctld]\nshare_pairs = \"/etc/wattson/pairs.toml\"\n";
        let err = Config::parse(pairs, "w.toml").unwrap_err().0;
        assert!(err.contains("ctld.share_pairs needs policy.shards_per_gpu"), "{err}");
        let shards = format!("{pairs}[policy]\nshards_per_gpu = 4\n");
        assert!(Config::parse(&shards, "w.toml").is_ok());
        let err = Config::parse(&format!("{shards}[budget]\npower_w = 5000\n"), "w.toml").unwrap_err().0;
        assert!(err.contains("ctld.share_pairs and budget.power_w cannot be set together"), "{err}");
        // Jobs of several GPUs are paired by the controller too.
        let several = shards.replace("shards_per_gpu = 4", "shards_per_gpu = 4\nshare_gpus = 2");
        assert_eq!(Config::parse(&several, "w.toml").unwrap().policy.share_gpus, 2);
    }

    #[test]
    fn learning_pairs_needs_shards_and_no_budget_as_a_pair_file_does() {
        let learn = "[ctld]\nshare_learn = true\n";
        let err = Config::parse(learn, "w.toml").unwrap_err().0;
        assert!(err.contains("ctld.share_learn needs policy.shards_per_gpu"), "{err}");
        let shards = format!("{learn}[policy]\nshards_per_gpu = 4\n");
        assert!(Config::parse(&shards, "w.toml").unwrap().ctld.decides_sharing());
        let err = Config::parse(&format!("{shards}[budget]\npower_w = 5000\n"), "w.toml").unwrap_err().0;
        assert!(err.contains("ctld.share_learn and budget.power_w cannot be set together"), "{err}");
        assert!(!Config::parse("", "w.toml").unwrap().ctld.decides_sharing());
    }

    #[test]
    fn devices_fifos_and_directories_are_refused_without_blocking() {
        for path in ["/dev/zero", "/dev/null", "/"] {
            let err = Config::load(Path::new(path)).unwrap_err().to_string();
            assert!(err.contains("not a regular file"), "{path}: {err}");
        }
        let dir = std::env::temp_dir().join(format!("wattson-config-fifo-{}", std::process::id()));
        let _ = std::fs::remove_file(&dir);
        nix::unistd::mkfifo(&dir, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = Config::load(&dir).unwrap_err().to_string();
        std::fs::remove_file(&dir).unwrap();
        assert!(err.contains("not a regular file"), "{err}");
    }

    #[test]
    fn empty_file_gives_defaults() {
        let c = Config::parse("", "x.toml").unwrap();
        assert_eq!(c.daemon.sample_interval, Duration::from_secs(1));
        assert_eq!(c.daemon.socket, PathBuf::from("/run/wattson/wattsond.sock"));
        assert!(c.metrics.listen.is_none());
        assert_eq!(c.gpu.backend, Backend::Nvml);
    }

    #[test]
    fn the_example_file_parses() {
        let text = include_str!("../../../etc/wattson.toml");
        let c = Config::parse(text, "etc/wattson.toml").unwrap();
        assert_eq!(c.daemon.sample_interval, Duration::from_secs(1));
    }

    #[test]
    fn values_are_read() {
        let c = Config::parse(
            "[daemon]\nsample_interval = \"250ms\"\nadmins = [\"ops\"]\n[metrics]\nlisten = \"127.0.0.1:9829\"\n",
            "x.toml",
        )
        .unwrap();
        assert_eq!(c.daemon.sample_interval, Duration::from_millis(250));
        assert_eq!(c.daemon.admins, vec!["ops".to_string()]);
        assert_eq!(c.metrics.listen.unwrap().port(), 9829);
    }

    #[test]
    fn the_carbon_table_and_summary_settings_are_read_and_checked() {
        let hours = vec!["250"; 24].join(", ");
        let c = Config::parse(
            &format!("[carbon]\nhourly_utc = [{hours}]\n[ctld]\nsummary_wait = \"0s\"\nsummary_bins = 10\n"),
            "x.toml",
        )
        .unwrap();
        assert_eq!(c.carbon.at(7 * 3600), Some(250.0));
        assert_eq!((c.ctld.summary_wait, c.ctld.summary_bins), (Duration::ZERO, 10));
        let e = Config::parse("[carbon]\nhourly_utc = [1, 2]\n", "x.toml").unwrap_err().0;
        assert!(e.contains("needs 24 values"), "{e}");
        let e = Config::parse("[ctld]\nsummary_bins = 0\n", "x.toml").unwrap_err().0;
        assert!(e.contains("outside 1 to 2000"), "{e}");
        assert_eq!(
            Config::parse("[ctld]\nwarm_shortfall = 0.5\n", "x.toml").unwrap().ctld.tuning.warm_shortfall,
            0.5
        );
        let e = Config::parse("[ctld]\nwarm_shortfall = 1.0\n", "x.toml").unwrap_err().0;
        assert_eq!(e, "x.toml:2: ctld.warm_shortfall = 1: allowed 0.01 to 0.99");
        let ordered = Config::parse("[ctld]\nqueue_order = \"response-ratio\"\n", "x.toml").unwrap();
        assert_eq!(ordered.ctld.tuning.queue_order, wattson_engine::cluster::QueueOrder::ResponseRatio);
        assert_eq!(Config::default().ctld.tuning.queue_order, wattson_engine::cluster::QueueOrder::Fifo);
        let e = Config::parse("[ctld]\nqueue_order = \"lifo\"\n", "x.toml").unwrap_err().0;
        assert!(e.starts_with("x.toml:2") && e.contains("fifo") && e.contains("response-ratio"), "{e}");
    }

    #[test]
    fn the_knob_is_chosen_per_gpu_type_and_its_settings_come_from_the_gpu() {
        let c = Config::parse(
            "[engine]\nknob = \"sm-clock\"\nsm_clock_step_mhz = 30\n[engine.knobs]\n\"H100-PCIE\" = \"power-limit\"\n\"Tesla V100-SXM2-32GB\" = \"power-limit\"\n",
            "x.toml",
        )
        .unwrap();
        let e = &c.engine;
        assert_eq!(e.knob_for("NVIDIA H100 80GB HBM3"), Knob::SmClock);
        assert_eq!(e.knob_for("NVIDIA H100 PCIe"), Knob::PowerLimit, "by the canonical name");
        assert_eq!(e.knob_for("Tesla V100-SXM2-32GB"), Knob::PowerLimit, "by the exact name");
        assert_eq!(e.knob_for("Tesla V100-SXM2-16GB"), Knob::PowerLimit, "the same prior");
        assert_eq!(e.knob_for("Some Future GPU"), Knob::SmClock);
        let gpu = wattson_types::gpu::GpuInfo {
            index: 0,
            uuid: "GPU-0".into(),
            name: "NVIDIA H100 80GB HBM3".into(),
            pci_bus_id: "0000:17:00.0".into(),
            minor_number: None,
            energy_counter: true,
            power_limit_min_mw: Some(200_000),
            power_limit_max_mw: Some(700_000),
            power_limit_default_mw: Some(700_000),
            sm_clocks_mhz: (0..110).map(|k| 1980 - 15 * k).collect(),
            mem_clocks_mhz: vec![2619],
            mig: Vec::new(),
        };
        let (knob, clocks) = e.settings_for(&gpu);
        assert_eq!(
            (knob, clocks[0], *clocks.last().unwrap(), clocks.len()),
            (Knob::SmClock, 990.0, 1980.0, 34)
        );
        let pcie = wattson_types::gpu::GpuInfo { name: "NVIDIA H100 PCIe".into(), ..gpu };
        let (knob, limits) = e.settings_for(&pcie);
        assert_eq!(
            (knob, limits[0], *limits.last().unwrap(), limits.len()),
            (Knob::PowerLimit, 200.0, 700.0, 101)
        );
        assert_eq!(Config::default().engine.knob_for("NVIDIA H100 80GB HBM3"), Knob::PowerLimit);

        let e = Config::parse("[engine]\nknob = \"voltage\"\n", "w.toml").unwrap_err().0;
        assert!(e.starts_with("w.toml:2: ") && e.contains("power-limit") && e.contains("sm-clock"), "{e}");
        let e = Config::parse("[engine]\nsm_clock_floor = 0.1\n", "w.toml").unwrap_err().0;
        assert!(e.contains("allowed 0.3 to 1"), "{e}");
        let e = Config::parse("[engine.knobs]\nH100 = \"clock\"\n", "w.toml").unwrap_err().0;
        assert!(e.starts_with("w.toml:2: "), "{e}");
    }

    #[test]
    fn unknown_key_names_file_line_and_allowed_keys() {
        let e = Config::parse("[daemon]\n\nsampel_interval = \"1s\"\n", "/etc/w.toml").unwrap_err().0;
        assert!(e.starts_with("/etc/w.toml:3: "), "{e}");
        assert!(e.contains("sampel_interval") && e.contains("sample_interval"), "{e}");
    }

    #[test]
    fn bad_values_say_what_is_allowed() {
        let e = Config::parse("[daemon]\nsample_interval = \"fast\"\n", "w.toml").unwrap_err().0;
        assert!(e.starts_with("w.toml:2: ") && e.contains("\"1s\""), "{e}");
        let e = Config::parse("[daemon]\nsample_interval = \"1ms\"\n", "w.toml").unwrap_err().0;
        assert!(e.contains("allowed 100ms to 1h"), "{e}");
        let e = Config::parse("[gpu]\nbackend = \"rocm\"\n", "w.toml").unwrap_err().0;
        assert!(e.starts_with("w.toml:2: ") && e.contains("nvml") && e.contains("amd"), "{e}");
        let c = Config::parse("[gpu]\nbackend = \"amd\"\namd_library = \"/x.so\"\n", "w.toml").unwrap();
        assert_eq!((c.gpu.backend, c.gpu.amd_library), (Backend::Amd, Some(PathBuf::from("/x.so"))));
        assert_eq!(
            Config::parse("[gpu]\nbackend = \"auto\"\n", "w.toml").unwrap().gpu.backend,
            Backend::Auto
        );
        let e = Config::parse("[metrics]\nlisten = \"somewhere\"\n", "w.toml").unwrap_err().0;
        assert!(e.starts_with("w.toml:2: "), "{e}");
        let e = Config::parse("[daemon\n", "w.toml").unwrap_err().0;
        assert!(e.starts_with("w.toml:1: "), "{e}");
        let e = Config::parse("[policy]\ndefault = \"fastest\"\n", "w.toml").unwrap_err().0;
        assert!(e.starts_with("w.toml:2: ") && e.contains("not one of min-energy, balanced, perf"), "{e}");
    }
}
