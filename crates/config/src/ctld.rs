//! `[ctld]` and `[power]`: the controller service that right-sizes the cluster, and the power
//! programs Slurm runs to suspend and resume nodes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use wattson_engine::cluster::{NodeCosts, Tuning};

use crate::duration_in;

/// `[ctld]` section: `wattson ctld`'s loop and the node power model it decides with.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(default)]
pub struct CtldConfig {
    /// Power nodes down and up (`false`: leave node power to Slurm and the administrator).
    pub manage_power: bool,
    /// Set node weights so that Slurm places jobs as the policy ranks nodes (best fit on
    /// powered nodes); they replace `Weight=` from slurm.conf while ctld runs.
    pub weights: bool,
    /// Where the controller keeps what `wattson power status` shows (rewritten every loop).
    pub state_file: PathBuf,
    /// How often Slurm's state is read and the policy asked (1s to 1h).
    #[serde(deserialize_with = "interval")]
    #[schemars(with = "String", extend("x-allowed" = "1s to 1h"))]
    pub interval: Duration,
    /// Longest a Slurm command may take before it is killed (1s to 5m).
    #[serde(deserialize_with = "command_timeout")]
    #[schemars(with = "String", extend("x-allowed" = "1s to 5m"))]
    pub command_timeout: Duration,
    /// With `response-ratio`, the most priority the engine's order adds to a pending job, as
    /// a negative nice (1 to 1,000,000,000): weigh it against priority/multifactor's
    /// `PriorityWeight*`.
    #[serde(deserialize_with = "order_weight")]
    #[schemars(extend("x-allowed" = "1 to 1000000000"))]
    pub order_weight: u32,
    /// The node power model (`[ctld.node]`, the simulator's `[node]`: one type, one set of
    /// defaults).
    #[serde(default, deserialize_with = "node_costs")]
    pub node: NodeCosts,
    /// Idle draw of one GPU, W; unset: the engine's prior for the GPU type Slurm's `Gres`
    /// names (as the simulator's default).
    #[serde(default, deserialize_with = "gpu_idle_w")]
    #[schemars(extend("x-allowed" = "0 to 100000"))]
    pub gpu_idle_w: Option<f64>,
    /// How many times a node whose resume failed is powered up again before it is left down
    /// for an administrator (0 to 20).
    #[serde(deserialize_with = "resume_retries")]
    #[schemars(extend("x-allowed" = "0 to 20"))]
    pub resume_retries: u32,
    /// Where the controller's counters are written after every loop, in Prometheus' text
    /// format (for node_exporter's textfile collector); unset: nowhere.
    #[serde(default)]
    pub metrics_file: Option<PathBuf>,
    /// Pause before the first retry; each further one waits twice as long (1s to 1h).
    #[serde(deserialize_with = "transition")]
    #[schemars(with = "String", extend("x-allowed" = "1s to 1h"))]
    pub resume_retry_pause: Duration,
    /// How often the nodes' DVFS measurements are merged (with `[link] sync_models`; 1s to
    /// 1d). The model table is written to `[engine] models_file`, where job_submit reads it.
    #[serde(deserialize_with = "models_sync")]
    #[schemars(with = "String", extend("x-allowed" = "1s to 1d"))]
    pub models_sync: Duration,
    /// Where the controller keeps its merge of every node's measurements (so the models of
    /// nodes that are powered down are not lost).
    pub measurements_file: PathBuf,
    /// How long after a job ends its summary waits for a node that does not answer (or has not
    /// closed its record) before it is written without that node (0s to 1d).
    #[serde(deserialize_with = "summary_wait")]
    #[schemars(with = "String", extend("x-allowed" = "0s to 1d"))]
    pub summary_wait: Duration,
    /// Bins of each GPU's power trace in a job's summary (1 to 2000).
    #[serde(deserialize_with = "summary_bins")]
    #[schemars(extend("x-allowed" = "1 to 2000"))]
    pub summary_bins: u32,
    /// The co-location pair file: measured slowdowns of jobs sharing a GPU, by workload tag
    /// (`--energy-tag`). With it (or `share_learn`, where it is the prior) the controller
    /// decides which opted-in jobs share a GPU, and job_submit holds each opted-in job for
    /// that decision; unset and not learning: Slurm pairs shard jobs as it finds room.
    #[serde(default)]
    pub share_pairs: Option<PathBuf>,
    /// The cluster policy's knobs, declared with their defaults and ranges by the engine (the
    /// simulator's `[wattson]` table takes the same).
    #[serde(flatten)]
    pub tuning: Tuning,
    /// Keys that are neither the controller's nor a knob: refused by [`crate::Config::parse`]
    /// (serde cannot deny unknown keys beside a flattened table).
    #[serde(flatten)]
    #[schemars(skip)]
    pub unknown: BTreeMap<String, toml::Value>,
}

impl CtldConfig {
    /// Whether the controller decides which opted-in jobs share a GPU: with a pair file
    /// (`share_pairs`), or learning pairs from the nodes (`share_learn`).
    pub fn decides_sharing(&self) -> bool {
        self.share_pairs.is_some() || self.tuning.share_learn
    }
}

/// The first knob of `[ctld]` in `text` whose value the engine's [`Tuning`] refuses, with
/// why: the parser's own error for a flattened table points at the table, not the key.
pub(crate) fn knob_error(text: &str) -> Option<(String, String)> {
    let file: toml::Table = text.parse().ok()?;
    let ctld = file.get("ctld")?.as_table()?;
    ctld.iter().filter(|(key, _)| Tuning::KEYS.contains(&key.as_str())).find_map(|(key, value)| {
        let one = toml::Table::from_iter([(key.clone(), value.clone())]);
        let refused = one.try_into::<Tuning>().err()?;
        Some((key.clone(), refused.message().trim_end().to_string()))
    })
}

/// The entry job_submit adds to the AdminComment of an opted-in job it held for the
/// controller's co-location decision ([`CtldConfig::decides_sharing`]).
pub const SHARE_HELD_MARK: &str = "held=share";

/// The entry that replaces [`SHARE_HELD_MARK`] once the controller released the job.
pub const SHARE_RELEASED_MARK: &str = "released=share";

impl Default for CtldConfig {
    fn default() -> Self {
        CtldConfig {
            manage_power: true,
            weights: true,
            state_file: PathBuf::from("/var/lib/wattson/ctld.json"),
            interval: Duration::from_secs(10),
            command_timeout: Duration::from_secs(10),
            order_weight: 10_000,
            node: NodeCosts::default(),
            gpu_idle_w: None,
            resume_retries: 3,
            metrics_file: None,
            resume_retry_pause: Duration::from_secs(60),
            models_sync: Duration::from_secs(300),
            measurements_file: PathBuf::from("/var/lib/wattson/measurements.json"),
            summary_wait: Duration::from_secs(600),
            summary_bins: 120,
            share_pairs: None,
            tuning: Tuning::default(),
            unknown: BTreeMap::new(),
        }
    }
}

/// `[power]` section: what `wattson power suspend|resume` run for each node.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct PowerConfig {
    /// Program and arguments that power a node off; `{node}` is replaced by the node's name.
    /// Empty: nothing is run, the request is only logged (a dry run).
    #[serde(default, deserialize_with = "argv")]
    pub suspend: Vec<String>,
    /// Program and arguments that power a node on; `{node}` as above. Empty: a dry run.
    #[serde(default, deserialize_with = "argv")]
    pub resume: Vec<String>,
    /// Longest one action may run before it is killed and counted as failed (1s to 1h).
    #[serde(deserialize_with = "transition")]
    #[schemars(with = "String", extend("x-allowed" = "1s to 1h"))]
    pub timeout: Duration,
    /// File the power programs append a line to for every action (besides the journal).
    #[serde(default)]
    pub log: Option<PathBuf>,
    /// `[[power.group]]`: other actions for some nodes (other BMCs, Wake-on-LAN...); a node
    /// takes the action of the first group that names it and sets one.
    #[serde(default)]
    pub group: Vec<PowerGroup>,
}

impl Default for PowerConfig {
    fn default() -> Self {
        PowerConfig {
            suspend: Vec::new(),
            resume: Vec::new(),
            timeout: Duration::from_secs(60),
            log: None,
            group: Vec::new(),
        }
    }
}

/// `[[power.group]]`: the power actions of a group of nodes.
#[derive(Debug, Clone, Default, serde::Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PowerGroup {
    /// The group's nodes, a Slurm hostlist (`gpu[01-16]`).
    pub nodes: String,
    /// As `[power] suspend`, for these nodes; empty: `[power]`'s.
    #[serde(default, deserialize_with = "argv")]
    pub suspend: Vec<String>,
    /// As `[power] resume`, for these nodes; empty: `[power]`'s.
    #[serde(default, deserialize_with = "argv")]
    pub resume: Vec<String>,
}

fn models_sync<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration_in(d, Duration::from_secs(1), Duration::from_secs(86_400))
}
fn summary_wait<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration_in(d, Duration::ZERO, Duration::from_secs(86_400))
}
fn summary_bins<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let bins = u32::deserialize(d)?;
    if !(1..=2000).contains(&bins) {
        return Err(serde::de::Error::custom(format!("{bins} is outside 1 to 2000")));
    }
    Ok(bins)
}
fn order_weight<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let n = u32::deserialize(d)?;
    if (1..=1_000_000_000).contains(&n) {
        Ok(n)
    } else {
        Err(serde::de::Error::custom(format!("{n}: allowed 1 to 1000000000")))
    }
}

fn interval<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration_in(d, Duration::from_secs(1), Duration::from_secs(3600))
}
fn command_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration_in(d, Duration::from_secs(1), Duration::from_secs(300))
}
fn transition<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration_in(d, Duration::from_secs(1), Duration::from_secs(3600))
}
fn node_costs<'de, D: Deserializer<'de>>(d: D) -> Result<NodeCosts, D::Error> {
    let node = NodeCosts::deserialize(d)?;
    node.check().map_err(serde::de::Error::custom)?;
    Ok(node)
}
fn gpu_idle_w<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    watts(d).map(Some)
}

fn resume_retries<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let n = u32::deserialize(d)?;
    if n <= 20 { Ok(n) } else { Err(serde::de::Error::custom(format!("{n} retries: allowed 0 to 20"))) }
}

fn watts<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    crate::number_in(d, 0.0, 100_000.0, " W")
}

/// An argv template: an absolute program path, then arguments; `{node}` is the only
/// placeholder. Never a shell string.
fn argv<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let argv = Vec::<String>::deserialize(d)?;
    check_argv(&argv).map_err(serde::de::Error::custom)?;
    Ok(argv)
}

/// Why `argv` is not a usable power action template, if it is not.
pub fn check_argv(argv: &[String]) -> Result<(), String> {
    let Some(program) = argv.first() else { return Ok(()) };
    if !program.starts_with('/') {
        return Err(format!("{program:?}: the program must be an absolute path (no PATH lookup, no shell)"));
    }
    if program.contains("{node}") {
        return Err("the program path cannot contain {node}".into());
    }
    for arg in argv {
        if arg.contains('\0') {
            return Err("arguments cannot contain NUL".into());
        }
        let rest = arg.replace("{node}", "");
        if rest.contains('{') || rest.contains('}') {
            return Err(format!("{arg:?}: the only placeholder is {{node}}"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::Config;
    use std::time::Duration;

    #[test]
    fn templates_are_argv_with_an_absolute_program_and_only_the_node_placeholder() {
        let c = Config::parse(
            "[power]\nsuspend = [\"/usr/bin/ipmitool\", \"-H\", \"{node}-bmc\", \"power\", \"off\"]\n",
            "w.toml",
        )
        .unwrap();
        assert_eq!(c.power.suspend[2], "{node}-bmc");
        assert!(c.power.resume.is_empty(), "a dry run unless configured");
        for bad in ["[\"ipmitool\", \"{node}\"]", "[\"/bin/x\", \"{host}\"]", "\"/bin/sh -c reboot\""] {
            let e = Config::parse(&format!("[power]\nresume = {bad}\n"), "w.toml").unwrap_err().0;
            assert!(e.starts_with("w.toml:2: "), "{bad}: {e}");
        }
    }

    #[test]
    fn the_loop_and_the_node_model_have_bounded_values() {
        let c = Config::parse("[ctld]\ninterval = \"2s\"\n[ctld.node]\nboot_s = 90\n", "w.toml").unwrap();
        assert_eq!((c.ctld.interval, c.ctld.node.boot_s), (Duration::from_secs(2), 90.0));
        assert_eq!(
            c.ctld.node.base_w,
            wattson_engine::cluster::NodeCosts::default().base_w,
            "the rest from the one set of defaults"
        );
        let e = Config::parse("[ctld]\ninterval = \"10ms\"\n", "w.toml").unwrap_err().0;
        assert!(e.contains("allowed 1s to 1h"), "{e}");
        let e = Config::parse("[ctld.node]\nbase_w = -5.0\n", "w.toml").unwrap_err().0;
        assert!(e.contains("allowed 0 to 100000"), "{e}");
    }

    #[test]
    fn the_policy_knobs_are_the_engines_with_their_ranges_and_lines() {
        let c = Config::parse(
            "[ctld]\ndvfs_min_free = 0.15\ndvfs_horizon_s = 600\ncongestion_raise = 0.925\n",
            "w.toml",
        )
        .unwrap();
        let t = c.ctld.tuning;
        assert_eq!((t.dvfs_min_free, t.dvfs_horizon_s, t.congestion_raise), (0.15, 600.0, 0.925));
        assert_eq!(Config::default().ctld.tuning, wattson_engine::cluster::Tuning::default());
        let e = Config::parse("[ctld]\ninterval = \"5s\"\n\ndvfs_min_free = 15\n", "w.toml").unwrap_err().0;
        assert_eq!(e, "w.toml:4: ctld.dvfs_min_free = 15: allowed 0 to 1");
        let e = Config::parse("[ctld]\nqueue_order = \"lifo\"\n", "w.toml").unwrap_err().0;
        assert!(e.starts_with("w.toml:2:") && e.contains("fifo") && e.contains("response-ratio"), "{e}");
        let e = Config::parse("[ctld]\nwarm = 1\n", "w.toml").unwrap_err().0;
        assert_eq!(e, "w.toml:2: ctld.warm is not a key of [ctld] (see wattson.toml(5))");
        // Keys of earlier releases say what they became.
        let e = Config::parse("[ctld]\ninterval = \"5s\"\nplace_by_type = false\n", "w.toml").unwrap_err().0;
        assert!(
            e.starts_with("w.toml:3: ctld.place_by_type")
                && e.ends_with("it is now type_aware (see wattson.toml(5))"),
            "{e}"
        );
        let e = Config::parse("[ctld]\nforecast_window = \"1h\"\n", "w.toml").unwrap_err().0;
        assert!(e.contains("it is now forecast_window_s, in seconds"), "{e}");
        // What only the simulator sets is no key of the controller's.
        assert!(Config::parse("[ctld]\nsuspend_time_s = 60\n", "w.toml").is_err());
    }
}
