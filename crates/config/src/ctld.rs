//! `[ctld]` and `[power]`: the controller service that right-sizes the cluster, and the power
//! programs Slurm runs to suspend and resume nodes.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use wattson_engine::cluster::{NodeCosts, QueueOrder};

use crate::duration_in;

/// `[ctld]` section: `wattson ctld`'s loop and the node power model it decides with.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CtldConfig {
    /// Power nodes down and up (`false`: leave node power to Slurm and the administrator).
    #[serde(default = "default_true")]
    pub manage_power: bool,
    /// Set node weights so that Slurm places jobs as the policy ranks nodes (best fit on
    /// powered nodes); they replace `Weight=` from slurm.conf while ctld runs.
    #[serde(default = "default_true")]
    pub weights: bool,
    /// On a cluster of several GPU types, keep each pending job that asked for untyped GPUs
    /// off the nodes of every type but the one the policy ranks for its workload (by the
    /// model table's energy under its bound), through its excluded nodes.
    #[serde(default = "default_true")]
    pub place_by_type: bool,
    /// Where the controller keeps what `wattson power status` shows (rewritten every loop).
    #[serde(default = "default_state_file")]
    pub state_file: PathBuf,
    /// How often Slurm's state is read and the policy asked (1s to 1h).
    #[serde(default = "default_interval", deserialize_with = "interval")]
    #[schemars(with = "String", extend("x-allowed" = "1s to 1h"))]
    pub interval: Duration,
    /// Longest a Slurm command may take before it is killed (1s to 5m).
    #[serde(default = "default_command_timeout", deserialize_with = "command_timeout")]
    #[schemars(with = "String", extend("x-allowed" = "1s to 5m"))]
    pub command_timeout: Duration,
    /// Window of the arrival forecast that sizes the warm set (1m to 1d).
    #[serde(default = "default_forecast_window", deserialize_with = "forecast_window")]
    #[schemars(with = "String", extend("x-allowed" = "1m to 1d"))]
    pub forecast_window: Duration,
    /// The warm set is the fewest idle nodes that the forecast demand within its horizon
    /// outgrows with at most this probability (0.01 to 0.99; lower keeps more nodes on).
    #[serde(default = "default_warm_shortfall", deserialize_with = "warm_shortfall")]
    #[schemars(extend("x-allowed" = "0.01 to 0.99"))]
    pub warm_shortfall: f64,
    /// The order pending jobs start in: `fifo` leaves Slurm's priorities alone;
    /// `response-ratio` gives each pending job a nice by its rank in the engine's order (wait
    /// per unit of size), so that the order is one term of the priority Slurm computes.
    #[serde(default = "default_queue_order")]
    pub queue_order: QueueOrder,
    /// With `response-ratio`, the most priority the engine's order adds to a pending job, as
    /// a negative nice (1 to 1,000,000,000): weigh it against priority/multifactor's
    /// `PriorityWeight*`.
    #[serde(default = "default_order_weight", deserialize_with = "order_weight")]
    #[schemars(extend("x-allowed" = "1 to 1000000000"))]
    pub order_weight: u32,
    /// A pending job makes the running jobs it waits for run at full speed only once it has
    /// waited this many times its own time limit (0 to 100; 0: at once), as the simulator's
    /// `[wattson] raise_after_runs`.
    #[serde(default = "default_raise_after_runs", deserialize_with = "raise_after_runs")]
    #[schemars(extend("x-allowed" = "0 to 100"))]
    pub raise_after_runs: f64,
    /// The most wattson's DVFS may lengthen the queue's waits, as a share of the waits without
    /// it, as the controller observes them (0.05: 5%); past it no job is slowed until the
    /// share is back under a tenth of it, as the simulator's `[wattson] max_wait_cost`.
    #[serde(default = "default_max_wait_cost", deserialize_with = "max_wait_cost")]
    #[schemars(extend("x-allowed" = "0 to 100"))]
    pub max_wait_cost: f64,
    /// No job is slowed while fewer than this share of the cluster's GPUs are unallocated (0
    /// to 1; 0: no such gate), as the simulator's `[wattson] dvfs_min_free`.
    #[serde(default, deserialize_with = "dvfs_min_free")]
    #[schemars(extend("x-allowed" = "0 to 1"))]
    pub dvfs_min_free: f64,
    /// No job is slowed while the GPUs expected free this far ahead (free now, plus what
    /// running jobs release by then at full speed, less the arrivals forecast from the last
    /// `forecast_window`) fall below zero (0s to 1d; 0s: no such gate), as the simulator's
    /// `[wattson] dvfs_horizon_s`.
    #[serde(default, deserialize_with = "dvfs_horizon")]
    #[schemars(with = "String", extend("x-allowed" = "0s to 1d"))]
    pub dvfs_horizon: Duration,
    /// How far the running jobs a late pending job waits for (all of them while a gate above
    /// is closed) are raised toward full speed (0 to 1): 1, the GPUs' defaults; below, the
    /// level of each job's table that gives up this share of its slowdown bound, as the
    /// simulator's `[wattson] congestion_raise`.
    #[serde(default = "default_congestion_raise", deserialize_with = "congestion_raise")]
    #[schemars(extend("x-allowed" = "0 to 1"))]
    pub congestion_raise: f64,
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
    #[serde(default = "default_resume_retries", deserialize_with = "resume_retries")]
    #[schemars(extend("x-allowed" = "0 to 20"))]
    pub resume_retries: u32,
    /// Where the controller's counters are written after every loop, in Prometheus' text
    /// format (for node_exporter's textfile collector); unset: nowhere.
    #[serde(default)]
    pub metrics_file: Option<PathBuf>,
    /// Pause before the first retry; each further one waits twice as long (1s to 1h).
    #[serde(default = "default_resume_retry_pause", deserialize_with = "transition")]
    #[schemars(with = "String", extend("x-allowed" = "1s to 1h"))]
    pub resume_retry_pause: Duration,
    /// How often the nodes' DVFS measurements are merged (with `[link] sync_models`; 1s to
    /// 1d). The model table is written to `[engine] models_file`, where job_submit reads it.
    #[serde(default = "default_models_sync", deserialize_with = "models_sync")]
    #[schemars(with = "String", extend("x-allowed" = "1s to 1d"))]
    pub models_sync: Duration,
    /// Where the controller keeps its merge of every node's measurements (so the models of
    /// nodes that are powered down are not lost).
    #[serde(default = "default_measurements_file")]
    pub measurements_file: PathBuf,
    /// How long after a job ends its summary waits for a node that does not answer (or has not
    /// closed its record) before it is written without that node (0s to 1d).
    #[serde(default = "default_summary_wait", deserialize_with = "summary_wait")]
    #[schemars(with = "String", extend("x-allowed" = "0s to 1d"))]
    pub summary_wait: Duration,
    /// Bins of each GPU's power trace in a job's summary (1 to 2000).
    #[serde(default = "default_summary_bins", deserialize_with = "summary_bins")]
    #[schemars(extend("x-allowed" = "1 to 2000"))]
    pub summary_bins: u32,
    /// The co-location pair file: measured slowdowns of jobs sharing a GPU, by workload tag
    /// (`--energy-tag`). With it the controller decides which opted-in jobs share a GPU, and
    /// job_submit holds each opted-in job for that decision; unset: Slurm pairs shard jobs
    /// as it finds room.
    #[serde(default)]
    pub share_pairs: Option<PathBuf>,
    /// With `share_pairs`: an opted-in job is released beside a running job the model pairs it
    /// with even where a GPU of its own is free (that GPU's node may then power down); `false`:
    /// only a job that would otherwise wait shares. As the simulator's `[wattson] share_first`.
    #[serde(default)]
    pub share_first: bool,
}

/// The entry job_submit adds to the AdminComment of an opted-in job it held for the
/// controller's co-location decision ([`CtldConfig::share_pairs`]).
pub const SHARE_HELD_MARK: &str = "held=share";

/// The entry that replaces [`SHARE_HELD_MARK`] once the controller released the job.
pub const SHARE_RELEASED_MARK: &str = "released=share";

impl Default for CtldConfig {
    fn default() -> Self {
        CtldConfig {
            manage_power: true,
            weights: true,
            place_by_type: true,
            state_file: default_state_file(),
            interval: default_interval(),
            command_timeout: default_command_timeout(),
            forecast_window: default_forecast_window(),
            warm_shortfall: default_warm_shortfall(),
            queue_order: default_queue_order(),
            raise_after_runs: default_raise_after_runs(),
            max_wait_cost: default_max_wait_cost(),
            dvfs_min_free: 0.0,
            dvfs_horizon: Duration::ZERO,
            congestion_raise: default_congestion_raise(),
            order_weight: default_order_weight(),
            node: NodeCosts::default(),
            gpu_idle_w: None,
            resume_retries: default_resume_retries(),
            metrics_file: None,
            resume_retry_pause: default_resume_retry_pause(),
            models_sync: default_models_sync(),
            measurements_file: default_measurements_file(),
            summary_wait: default_summary_wait(),
            summary_bins: default_summary_bins(),
            share_pairs: None,
            share_first: false,
        }
    }
}

/// `[power]` section: what `wattson power suspend|resume` run for each node.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PowerConfig {
    /// Program and arguments that power a node off; `{node}` is replaced by the node's name.
    /// Empty: nothing is run, the request is only logged (a dry run).
    #[serde(default, deserialize_with = "argv")]
    pub suspend: Vec<String>,
    /// Program and arguments that power a node on; `{node}` as above. Empty: a dry run.
    #[serde(default, deserialize_with = "argv")]
    pub resume: Vec<String>,
    /// Longest one action may run before it is killed and counted as failed (1s to 1h).
    #[serde(default = "default_action_timeout", deserialize_with = "transition")]
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
            timeout: default_action_timeout(),
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

fn default_models_sync() -> Duration {
    Duration::from_secs(300)
}
fn models_sync<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration_in(d, Duration::from_secs(1), Duration::from_secs(86_400))
}
fn default_summary_wait() -> Duration {
    Duration::from_secs(600)
}
fn summary_wait<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration_in(d, Duration::ZERO, Duration::from_secs(86_400))
}
fn default_summary_bins() -> u32 {
    120
}
fn summary_bins<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let bins = u32::deserialize(d)?;
    if !(1..=2000).contains(&bins) {
        return Err(serde::de::Error::custom(format!("{bins} is outside 1 to 2000")));
    }
    Ok(bins)
}
fn default_measurements_file() -> PathBuf {
    PathBuf::from("/var/lib/wattson/measurements.json")
}
fn default_state_file() -> PathBuf {
    PathBuf::from("/var/lib/wattson/ctld.json")
}
fn default_true() -> bool {
    true
}
fn default_interval() -> Duration {
    Duration::from_secs(10)
}
fn default_command_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_forecast_window() -> Duration {
    Duration::from_secs(3600)
}
fn default_queue_order() -> QueueOrder {
    QueueOrder::Fifo
}

fn default_order_weight() -> u32 {
    10_000
}
fn order_weight<'de, D: Deserializer<'de>>(d: D) -> Result<u32, D::Error> {
    let n = u32::deserialize(d)?;
    if (1..=1_000_000_000).contains(&n) {
        Ok(n)
    } else {
        Err(serde::de::Error::custom(format!("{n}: allowed 1 to 1000000000")))
    }
}
fn default_max_wait_cost() -> f64 {
    wattson_engine::cluster::Tuning::default().max_wait_cost
}

fn max_wait_cost<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    crate::number_in(d, 0.0, 100.0, "")
}

fn dvfs_min_free<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    crate::number_in(d, 0.0, 1.0, "")
}

fn dvfs_horizon<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration_in(d, Duration::ZERO, Duration::from_secs(86400))
}

/// Full speed: the controller's raise before `congestion_raise` existed.
fn default_congestion_raise() -> f64 {
    1.0
}
fn congestion_raise<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    crate::number_in(d, 0.0, 1.0, "")
}

fn default_raise_after_runs() -> f64 {
    wattson_engine::cluster::Tuning::default().raise_after_runs
}
fn raise_after_runs<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    crate::number_in(d, 0.0, 100.0, "")
}
fn default_warm_shortfall() -> f64 {
    wattson_engine::cluster::Tuning::default().warm_shortfall
}
fn default_resume_retries() -> u32 {
    3
}
fn default_resume_retry_pause() -> Duration {
    Duration::from_secs(60)
}
fn default_action_timeout() -> Duration {
    Duration::from_secs(60)
}

fn interval<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration_in(d, Duration::from_secs(1), Duration::from_secs(3600))
}
fn command_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration_in(d, Duration::from_secs(1), Duration::from_secs(300))
}
fn forecast_window<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration_in(d, Duration::from_secs(60), Duration::from_secs(86400))
}
fn warm_shortfall<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    crate::number_in(d, 0.01, 0.99, "")
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
    fn the_dvfs_gate_is_a_share_of_the_gpus() {
        let c = Config::parse("[ctld]\ndvfs_min_free = 0.15\n", "w.toml").unwrap();
        assert_eq!((c.ctld.dvfs_min_free, Config::default().ctld.dvfs_min_free), (0.15, 0.0));
        let e = Config::parse("[ctld]\ndvfs_min_free = 15\n", "w.toml").unwrap_err().0;
        assert!(e.contains("15: allowed 0 to 1"), "{e}");
    }

    #[test]
    fn the_horizon_gate_and_the_partial_raise_are_bounded_and_off_by_default() {
        let c =
            Config::parse("[ctld]\ndvfs_horizon = \"10m\"\ncongestion_raise = 0.925\n", "w.toml").unwrap();
        assert_eq!((c.ctld.dvfs_horizon, c.ctld.congestion_raise), (Duration::from_secs(600), 0.925));
        let d = Config::default().ctld;
        assert_eq!((d.dvfs_horizon, d.congestion_raise, d.share_first), (Duration::ZERO, 1.0, false));
        let e = Config::parse("[ctld]\ncongestion_raise = 1.5\n", "w.toml").unwrap_err().0;
        assert!(e.contains("1.5: allowed 0 to 1"), "{e}");
        let e = Config::parse("[ctld]\ndvfs_horizon = \"2d\"\n", "w.toml").unwrap_err().0;
        assert!(e.contains("allowed 0s to 1day"), "{e}");
    }
}
