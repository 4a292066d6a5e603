//! The simulated cluster, read from a TOML file (`etc/sim/cluster.toml` documents every key).
//!
//! Pure: [`ClusterConfig::from_toml`] takes the file's text and its name (for messages); the
//! CLI reads the file. Errors read `file: what is wrong`.

use serde::Deserialize;
use strum::VariantNames;

use wattson_engine::cluster::{NodeCosts, QueueOrder, Tuning};
use wattson_types::prices::PriceSchedule;

use super::SimError;

/// The whole cluster file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClusterConfig {
    /// A name for reports.
    #[serde(default = "default_name")]
    pub name: String,
    /// GPUs per node (1..=64), the same on every node.
    pub gpus_per_node: u32,
    /// The node groups, one GPU type each, in node order (`[[group]]`; a file without them
    /// gives one group from the top-level `nodes`, `gpu`, `zeus_csv` and `gpu_idle_w`).
    #[serde(rename = "group")]
    pub groups: Vec<Group>,
    /// Node power states and transitions.
    pub node: NodeCosts,
    /// Slurm's power-saving settings, used by `slurm-powersave`.
    pub slurm: SlurmSettings,
    /// Time-of-use electricity tariff (per kWh, by UTC hour), the same type as `wattson.toml`.
    pub prices: PriceSchedule,
    /// UTC time of day (s) at trace time 0, to look up the tariff.
    #[serde(default)]
    pub trace_start_utc_s: i64,
    /// Optional cluster power budget, enforced by `wattson` and reported for every policy.
    #[serde(default)]
    pub budget: Option<Budget>,
    /// Per-job hints drawn from a seeded distribution (the traces carry none).
    pub hints: HintDistribution,
    /// Tunables of the `wattson` policy.
    #[serde(default)]
    pub wattson: WattsonTuning,
    /// How jobs' time limits are drawn where the trace gives none (`[limits]`).
    #[serde(default)]
    pub limits: super::limits::LimitModel,
    /// Path of Gavel's `simulation_throughputs.json`, relative to the cluster file: how jobs
    /// slow each other on a shared GPU ([`crate::colocation`]); needed when jobs opt in to
    /// sharing (`[hints] share_fraction` above 0).
    #[serde(default)]
    pub colocation_json: Option<String>,
}

/// Nodes of one GPU type.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Group {
    /// Number of nodes.
    pub nodes: u32,
    /// GPU type, an engine prior name with Zeus measurements: V100, A40, P100 or RTX6000.
    pub gpu: String,
    /// Path of Zeus's `summary_power_<gpu>.csv`, relative to the cluster file.
    pub zeus_csv: String,
    /// Idle draw of one GPU (W); default: the engine's prior for the GPU type.
    #[serde(default)]
    pub gpu_idle_w: Option<f64>,
}

impl Group {
    /// Idle draw of one of its GPUs (W).
    pub fn gpu_idle_w(&self) -> f64 {
        self.gpu_idle_w.unwrap_or_else(|| wattson_engine::idle_w_of(&self.gpu))
    }
}

/// The keys of one group that a file without `[[group]]` gives at its top level.
const GROUP_KEYS: [&str; 4] = ["nodes", "gpu", "zeus_csv", "gpu_idle_w"];

fn default_name() -> String {
    "cluster".to_string()
}

/// Slurm's power-saving and scheduling parameters (`slurm.conf`).
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmSettings {
    /// `SuspendTime` values (s) the idle-timer references are run at; each reports its best
    /// (least energy) value.
    pub suspend_times_s: Vec<f64>,
    /// `SuspendTimeout`: time a node stays unavailable after power-down starts (s).
    pub suspend_timeout_s: f64,
    /// `ResumeTimeout`: longest boot Slurm waits for (s); `node.boot_s` must not exceed it.
    pub resume_timeout_s: f64,
    /// `bf_max_job_test`: how many queued jobs one backfill pass considers.
    #[serde(default = "default_bf")]
    pub bf_max_job_test: usize,
    /// Time from a job's allocation (its nodes up) to its body running (s): the scheduling
    /// pass it waits for, the prologs and the launch. Its GPUs are held, idle, meanwhile.
    #[serde(default)]
    pub start_latency_s: f64,
    /// The same for a job that waited, started when GPUs came free or its nodes came up
    /// rather than on its submission (s; default: `start_latency_s`).
    #[serde(default)]
    pub queued_start_latency_s: Option<f64>,
    /// `SlurmctldParameters=power_save_interval`: Slurm's power thread runs its idle timer,
    /// the suspend and resume programs and each `SuspendTimeout`'s end on scans this far
    /// apart (s; 0: at once). Slurm's default is 10.
    #[serde(default)]
    pub power_save_interval_s: f64,
    /// The queue order the reference policies' Slurm keeps: `fifo` (`priority/basic`, the
    /// default); `response-ratio` only as a what-if (the order wattson gives Slurm).
    #[serde(default = "default_slurm_order")]
    pub order: QueueOrder,
}

impl SlurmSettings {
    /// A job's start latency: `queued_start_latency_s` if it `waited`, else `start_latency_s`.
    pub fn start_latency(&self, waited: bool) -> f64 {
        match self.queued_start_latency_s {
            Some(queued) if waited => queued,
            _ => self.start_latency_s,
        }
    }
}

fn default_slurm_order() -> QueueOrder {
    Tuning::default().slurm_order
}

fn default_bf() -> usize {
    100
}

fn one_gpu() -> u32 {
    1
}

/// An optional cluster power budget.
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Budget {
    /// Cluster power budget (W).
    pub power_w: f64,
}

/// The distribution per-job hints are drawn from.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HintDistribution {
    /// `[bound, probability]` pairs: slowdown bounds (fractions) a user asks for.
    pub slowdown: Vec<[f64; 2]>,
    /// Fraction of jobs that may be deferred.
    pub defer_fraction: f64,
    /// `[min, max]` deferral window (s) of a deferrable job, drawn uniformly.
    pub defer_window_s: [f64; 2],
    /// Fraction of the jobs of at most `share_gpus` GPUs whose users let them share their GPUs
    /// (`--energy-share=yes`); a job asking a fraction of a GPU (`gpu_fraction` below 1)
    /// always does.
    #[serde(default)]
    pub share_fraction: f64,
    /// The most GPUs a job that may share has (default 1: 1-GPU jobs only). A job of several
    /// shares all of them with one partner of as many; at most a node's GPUs, since Slurm's
    /// shards enact it on one node (docs/slurm.md).
    #[serde(default = "one_gpu")]
    pub share_gpus: u32,
    /// The least slowdown bound (fraction) of a job that lets its GPU be shared: users who
    /// opt in give a bound at least this large (0: their bounds are drawn as everyone's).
    #[serde(default)]
    pub share_bound: f64,
}

/// Tunables of the `wattson` policy (defaults: the engine's [`Tuning`]).
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WattsonTuning {
    /// Window of the arrival-rate forecast (s).
    #[serde(default = "default_forecast")]
    pub forecast_window_s: f64,
    /// Warm-set horizon beyond the boot time, in break-even times.
    #[serde(default = "default_warm")]
    pub warm_break_evens: f64,
    /// An idle node outside the warm set sleeps after this many break-even times idle.
    #[serde(default = "default_keep")]
    pub keep_break_evens: f64,
    /// The warm set is the fewest idle nodes that the forecast demand within its horizon
    /// outgrows with at most this probability (0.01 to 0.99).
    #[serde(default = "default_shortfall")]
    pub warm_shortfall: f64,
    /// Pack jobs onto powered nodes (best fit); `false`: Slurm's first fit.
    #[serde(default = "yes")]
    pub pack: bool,
    /// Defer a job only for at least this relative price drop.
    #[serde(default = "default_min_price_drop")]
    pub min_price_drop: f64,
    /// Slow jobs only while at least this fraction of GPUs is unallocated and no job waits.
    #[serde(default = "default_dvfs_min_free")]
    pub dvfs_min_free: f64,
    /// Slow jobs only while the GPUs expected free this far ahead are not negative (s; 0: off).
    #[serde(default)]
    pub dvfs_horizon_s: f64,
    /// How far running jobs that a late queued job waits for are raised toward full speed (1: the
    /// top level, 0: their own bound).
    #[serde(default = "default_raise")]
    pub congestion_raise: f64,
    /// A queued job gets the running jobs it waits for raised only once it has waited this
    /// many times its own run at full speed (0: at once).
    #[serde(default = "default_raise_after")]
    pub raise_after_runs: f64,
    /// Count each GPU's share of its node's base draw in wattson's level choice.
    #[serde(default = "yes")]
    pub count_node_base: bool,
    /// On several GPU types, place each job where its predicted energy under its bound is
    /// least; `false`: the type-oblivious reference (configuration order, as Slurm).
    #[serde(default = "yes")]
    pub type_aware: bool,
    /// With `type_aware`, a GPU type where a job is predicted to use more than this multiple
    /// of its best type's energy is not offered to it (it waits for a better type).
    #[serde(default = "default_type_max_cost")]
    pub type_max_cost: f64,
    /// The order wattson keeps Slurm's queue in: `response-ratio` (wait per unit of size) or
    /// `fifo`.
    #[serde(default = "default_queue_order")]
    pub queue_order: QueueOrder,
    /// With `response-ratio`, the power of a job's GPU-seconds its wait is divided by.
    #[serde(default = "default_size_exponent")]
    pub size_exponent: f64,
    /// The most wattson's DVFS may lengthen the queue's waits, as a share of the waits
    /// without it, as the policy observes them; past it wattson slows no job
    /// (`wattson_engine::cluster::wait_cost`; a large value: off).
    #[serde(default = "default_max_wait_cost")]
    pub max_wait_cost: f64,
    /// `[ctld] interval`: the controller's power decisions come once per loop, this far
    /// apart (s; 0: at every event).
    #[serde(default)]
    pub loop_interval_s: f64,
    /// Measured bound, not a policy: the forecast sees the coming submissions instead of the
    /// past ones (a perfect arrival forecast).
    #[serde(default)]
    pub clairvoyant: bool,
    /// Pair an opted-in job with a running job the co-location model lets it join even where
    /// a free GPU would hold it; `false`: only a job that would otherwise wait shares.
    #[serde(default)]
    pub share_first: bool,
    /// Refit each workload's model on every limit its jobs have run at (the daemons' records),
    /// not only on the three probes.
    #[serde(default = "yes")]
    pub learn: bool,
}

fn yes() -> bool {
    true
}

fn default_max_wait_cost() -> f64 {
    Tuning::default().max_wait_cost
}

fn default_dvfs_min_free() -> f64 {
    Tuning::default().dvfs_min_free
}

fn default_forecast() -> f64 {
    Tuning::default().forecast_window_s
}
fn default_warm() -> f64 {
    Tuning::default().warm_break_evens
}
fn default_shortfall() -> f64 {
    Tuning::default().warm_shortfall
}
fn default_raise() -> f64 {
    Tuning::default().congestion_raise
}
fn default_raise_after() -> f64 {
    Tuning::default().raise_after_runs
}
fn default_keep() -> f64 {
    Tuning::default().keep_break_evens
}
fn default_type_max_cost() -> f64 {
    Tuning::default().type_max_cost
}
fn default_queue_order() -> QueueOrder {
    Tuning::default().queue_order
}
fn default_size_exponent() -> f64 {
    Tuning::default().size_exponent
}
fn default_min_price_drop() -> f64 {
    Tuning::default().min_price_drop
}

impl WattsonTuning {
    /// Sets the knob named `key` (as in the cluster file's `[wattson]` table) to `value`;
    /// booleans take 0 or 1. For experiments: `brain -- TRACE NODES SEEDS key=value`.
    pub fn set(&mut self, key: &str, value: f64) -> Result<(), SimError> {
        let flag = |v: f64| v != 0.0;
        match key {
            "forecast_window_s" => self.forecast_window_s = value,
            "warm_break_evens" => self.warm_break_evens = value,
            "keep_break_evens" => self.keep_break_evens = value,
            "warm_shortfall" => self.warm_shortfall = value,
            "pack" => self.pack = flag(value),
            "min_price_drop" => self.min_price_drop = value,
            "dvfs_min_free" => self.dvfs_min_free = value,
            "dvfs_horizon_s" => self.dvfs_horizon_s = value,
            "congestion_raise" => self.congestion_raise = value,
            "raise_after_runs" => self.raise_after_runs = value,
            "count_node_base" => self.count_node_base = flag(value),
            "type_aware" => self.type_aware = flag(value),
            "type_max_cost" => self.type_max_cost = value,
            "size_exponent" => self.size_exponent = value,
            "max_wait_cost" => self.max_wait_cost = value,
            "clairvoyant" => self.clairvoyant = flag(value),
            "learn" => self.learn = flag(value),
            "share_first" => self.share_first = flag(value),
            _ => return Err(SimError::Input(format!("unknown [wattson] knob `{key}`"))),
        }
        Ok(())
    }

    /// Sets a knob from a `key=value` command-line override (see [`WattsonTuning::set`]).
    pub fn set_pair(&mut self, pair: &str) -> Result<(), SimError> {
        let bad = |why: &str| SimError::Input(format!("override `{pair}`: {why}"));
        let (key, value) = pair.split_once('=').ok_or_else(|| bad("expected key=value"))?;
        if key == "queue_order" {
            let names = QueueOrder::VARIANTS.join(", ");
            self.queue_order = value.parse().map_err(|_| bad(&format!("the order is one of {names}")))?;
            return Ok(());
        }
        self.set(key, value.parse().map_err(|_| bad("the value is not a number"))?)
    }
}

impl Default for WattsonTuning {
    fn default() -> Self {
        WattsonTuning {
            forecast_window_s: default_forecast(),
            warm_break_evens: default_warm(),
            keep_break_evens: default_keep(),
            warm_shortfall: default_shortfall(),
            pack: true,
            min_price_drop: default_min_price_drop(),
            dvfs_min_free: default_dvfs_min_free(),
            dvfs_horizon_s: 0.0,
            congestion_raise: default_raise(),
            raise_after_runs: default_raise_after(),
            count_node_base: true,
            type_aware: true,
            type_max_cost: default_type_max_cost(),
            queue_order: default_queue_order(),
            size_exponent: default_size_exponent(),
            max_wait_cost: default_max_wait_cost(),
            loop_interval_s: 0.0,
            clairvoyant: false,
            share_first: false,
            learn: true,
        }
    }
}

impl ClusterConfig {
    /// Parses and validates a cluster file; `name` prefixes every message.
    pub fn from_toml(text: &str, name: &str) -> Result<ClusterConfig, SimError> {
        let err = |what: String| SimError::Input(format!("{name}: {what}"));
        let mut v: toml::Table = toml::from_str(text).map_err(|e| err(e.to_string().trim().to_string()))?;
        let top: Vec<&str> = GROUP_KEYS.iter().copied().filter(|k| v.contains_key(*k)).collect();
        if v.contains_key("group") {
            if let Some(k) = top.first() {
                return Err(err(format!(
                    "{k} is given at the top level and in [[group]]: give each group's in [[group]] only"
                )));
            }
        } else {
            let mut g = toml::Table::new();
            for k in GROUP_KEYS {
                if let Some(x) = v.remove(k) {
                    g.insert(k.to_string(), x);
                }
            }
            v.insert("group".to_string(), toml::Value::Array(vec![toml::Value::Table(g)]));
        }
        let c: ClusterConfig =
            v.try_into().map_err(|e: toml::de::Error| err(e.to_string().trim().to_string()))?;
        c.validate().map_err(err)?;
        Ok(c)
    }

    /// Total nodes.
    pub fn nodes(&self) -> u32 {
        self.groups.iter().map(|g| g.nodes).sum()
    }

    /// The group (index into `groups`) of each node, in node order.
    pub fn node_groups(&self) -> Vec<u16> {
        self.groups
            .iter()
            .enumerate()
            .flat_map(|(i, g)| std::iter::repeat_n(i as u16, g.nodes as usize))
            .collect()
    }

    /// Draw of an idle powered-on node of group `g`, GPUs included (W).
    pub fn node_idle_w(&self, g: usize) -> f64 {
        self.node.base_w + f64::from(self.gpus_per_node) * self.groups[g].gpu_idle_w()
    }

    /// The engine's tunables for a run with Slurm's `SuspendTime` at `suspend_time_s`.
    pub fn tuning(&self, suspend_time_s: f64) -> Tuning {
        Tuning {
            suspend_time_s,
            forecast_window_s: self.wattson.forecast_window_s,
            warm_break_evens: self.wattson.warm_break_evens,
            keep_break_evens: self.wattson.keep_break_evens,
            warm_shortfall: self.wattson.warm_shortfall,
            pack: self.wattson.pack,
            min_price_drop: self.wattson.min_price_drop,
            dvfs_min_free: self.wattson.dvfs_min_free,
            dvfs_horizon_s: self.wattson.dvfs_horizon_s,
            congestion_raise: self.wattson.congestion_raise,
            raise_after_runs: self.wattson.raise_after_runs,
            count_node_base: self.wattson.count_node_base,
            type_aware: self.wattson.type_aware,
            type_max_cost: self.wattson.type_max_cost,
            queue_order: self.wattson.queue_order,
            size_exponent: self.wattson.size_exponent,
            slurm_order: self.slurm.order,
            max_wait_cost: self.wattson.max_wait_cost,
            share_first: self.wattson.share_first,
        }
    }

    /// The uniform per-GPU power limit that keeps every node, all powered on and every GPU at
    /// the limit, within the budget: `(budget / nodes − base_w) / gpus_per_node` (W).
    pub fn uniform_cap_w(&self) -> Option<f64> {
        self.budget
            .map(|b| (b.power_w / f64::from(self.nodes()) - self.node.base_w) / f64::from(self.gpus_per_node))
    }

    /// Total GPUs.
    pub fn total_gpus(&self) -> u64 {
        u64::from(self.nodes()) * u64::from(self.gpus_per_node)
    }

    fn validate(&self) -> Result<(), String> {
        self.limits.check()?;
        if self.hints.share_fraction > 0.0 && self.colocation_json.is_none() {
            return Err(format!(
                "hints.share_fraction = {}: jobs that share GPUs need colocation_json (Gavel's pair throughputs)",
                self.hints.share_fraction
            ));
        }
        if self.groups.is_empty() || self.groups.len() > 16 {
            return Err(format!("{} [[group]] tables: allowed 1..=16", self.groups.len()));
        }
        for (i, g) in self.groups.iter().enumerate() {
            let at = if self.groups.len() > 1 { format!("group {}: ", i + 1) } else { String::new() };
            if g.nodes == 0 || g.nodes > 100_000 {
                return Err(format!("{at}nodes = {}: allowed 1..=100000", g.nodes));
            }
            if wattson_engine::prior(&g.gpu).is_none() {
                return Err(format!(
                    "{at}gpu = {:?}: not a known GPU type (V100, A40, P100, RTX6000 have Zeus data)",
                    g.gpu
                ));
            }
            if let Some(w) = g.gpu_idle_w
                && !(w.is_finite() && w >= 0.0)
            {
                return Err(format!("{at}gpu_idle_w = {w}: must be a finite number >= 0"));
            }
        }
        if self.nodes() > 100_000 {
            return Err(format!("{} nodes in all: allowed 1..=100000", self.nodes()));
        }
        if !(1..=64).contains(&self.gpus_per_node) {
            return Err(format!("gpus_per_node = {}: allowed 1..=64", self.gpus_per_node));
        }
        let n = &self.node;
        let nonneg = [
            ("node.base_w", n.base_w),
            ("node.off_w", n.off_w),
            ("node.shutdown_s", n.shutdown_s),
            ("node.shutdown_w", n.shutdown_w),
            ("node.boot_s", n.boot_s),
            ("node.boot_w", n.boot_w),
            ("wattson.warm_break_evens", self.wattson.warm_break_evens),
            ("wattson.keep_break_evens", self.wattson.keep_break_evens),
            ("slurm.suspend_timeout_s", self.slurm.suspend_timeout_s),
            ("slurm.resume_timeout_s", self.slurm.resume_timeout_s),
            ("slurm.start_latency_s", self.slurm.start_latency_s),
            ("slurm.queued_start_latency_s", self.slurm.queued_start_latency_s.unwrap_or(0.0)),
            ("slurm.power_save_interval_s", self.slurm.power_save_interval_s),
            ("wattson.loop_interval_s", self.wattson.loop_interval_s),
            ("wattson.forecast_window_s", self.wattson.forecast_window_s),
            ("wattson.min_price_drop", self.wattson.min_price_drop),
            ("wattson.dvfs_min_free", self.wattson.dvfs_min_free),
            ("wattson.dvfs_horizon_s", self.wattson.dvfs_horizon_s),
            ("wattson.congestion_raise", self.wattson.congestion_raise),
            ("wattson.raise_after_runs", self.wattson.raise_after_runs),
            ("wattson.size_exponent", self.wattson.size_exponent),
            ("wattson.max_wait_cost", self.wattson.max_wait_cost),
        ];
        for (key, v) in nonneg {
            if !(v.is_finite() && v >= 0.0) {
                return Err(format!("{key} = {v}: must be a finite number >= 0"));
            }
        }
        if n.shutdown_s > self.slurm.suspend_timeout_s {
            return Err(format!(
                "node.shutdown_s = {} exceeds slurm.suspend_timeout_s = {}: Slurm would mark the node down",
                n.shutdown_s, self.slurm.suspend_timeout_s
            ));
        }
        if n.boot_s > self.slurm.resume_timeout_s {
            return Err(format!(
                "node.boot_s = {} exceeds slurm.resume_timeout_s = {}: Slurm would mark the node down",
                n.boot_s, self.slurm.resume_timeout_s
            ));
        }
        if self.slurm.suspend_times_s.is_empty()
            || self.slurm.suspend_times_s.iter().any(|v| !(v.is_finite() && *v >= 0.0))
        {
            return Err(format!(
                "slurm.suspend_times_s = {:?}: give one or more finite values >= 0",
                self.slurm.suspend_times_s
            ));
        }
        let q = self.wattson.warm_shortfall;
        if !(0.01..=0.99).contains(&q) {
            return Err(format!("wattson.warm_shortfall = {q}: allowed 0.01 to 0.99"));
        }
        if !(self.wattson.type_max_cost >= 1.0 && self.wattson.type_max_cost.is_finite()) {
            return Err(format!(
                "wattson.type_max_cost = {}: must be a finite number >= 1",
                self.wattson.type_max_cost
            ));
        }
        if self.wattson.forecast_window_s <= 0.0 {
            return Err("wattson.forecast_window_s must be > 0".to_string());
        }
        if let Some(b) = self.budget
            && !(b.power_w.is_finite() && b.power_w > 0.0)
        {
            return Err(format!("budget.power_w = {}: must be > 0", b.power_w));
        }
        let h = &self.hints;
        if h.slowdown.is_empty() {
            return Err("hints.slowdown is empty: give [bound, probability] pairs".to_string());
        }
        let mut sum = 0.0;
        for [b, p] in &h.slowdown {
            if !(b.is_finite() && (0.0..=1.0).contains(b) && p.is_finite() && *p >= 0.0) {
                return Err(format!("hints.slowdown pair [{b}, {p}]: bound in [0, 1], probability >= 0"));
            }
            sum += p;
        }
        if (sum - 1.0).abs() > 1e-6 {
            return Err(format!("hints.slowdown probabilities add up to {sum}, not 1"));
        }
        if !(0.0..=10.0).contains(&h.share_bound) {
            return Err(format!("hints.share_bound = {}: allowed 0..=10", h.share_bound));
        }
        if !(0.0..=1.0).contains(&h.share_fraction) {
            return Err(format!("hints.share_fraction = {}: allowed 0..=1", h.share_fraction));
        }
        if !(1..=self.gpus_per_node).contains(&h.share_gpus) {
            return Err(format!(
                "hints.share_gpus = {}: allowed 1..={} (a job shares its GPUs on one node)",
                h.share_gpus, self.gpus_per_node
            ));
        }
        if !(0.0..=1.0).contains(&h.defer_fraction) {
            return Err(format!("hints.defer_fraction = {}: allowed 0..=1", h.defer_fraction));
        }
        let [lo, hi] = h.defer_window_s;
        if !(lo.is_finite() && hi.is_finite() && 0.0 <= lo && lo <= hi) {
            return Err(format!("hints.defer_window_s = [{lo}, {hi}]: need 0 <= min <= max"));
        }
        Ok(())
    }
}

#[cfg(test)]
pub(crate) mod tests;
