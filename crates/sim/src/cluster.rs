//! The simulated cluster, read from a TOML file (`etc/sim/cluster.toml` documents every key).
//!
//! Pure: [`ClusterConfig::from_toml`] takes the file's text and its name (for messages); the
//! CLI reads the file. Errors read `file: what is wrong`.

use serde::{Deserialize, Serialize};

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
    /// `[wattson]`: the policy's knobs and the simulator's own settings (read apart from the
    /// rest, by [`WattsonConfig::from_table`]).
    #[serde(skip)]
    pub wattson: WattsonConfig,
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

/// `[wattson]`: the engine's knobs ([`Tuning`]; the controller's `[ctld]` takes the same) and
/// what only a simulation sets.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct WattsonConfig {
    /// The policy's knobs.
    pub tuning: Tuning,
    /// What the simulator alone sets.
    pub sim: SimOnly,
}

/// The keys of `[wattson]` that are not the engine's knobs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SimOnly {
    /// `[ctld] interval`: the controller's power decisions come once per loop, this far
    /// apart (s; 0: at every event).
    pub loop_interval_s: f64,
    /// Measured bound, not a policy: the forecast sees the coming submissions instead of the
    /// past ones (a perfect arrival forecast).
    pub clairvoyant: bool,
    /// Refit each workload's model on every limit its jobs have run at (the daemons' records),
    /// not only on the three probes.
    pub learn: bool,
    /// Co-location: the policy's interference model starts fitted on every pair of
    /// `colocation_json` (as from a site's pair file); `false`, on none, learning each pair of
    /// classes from its first shared run as `share_learn` does (try unknown pairs with
    /// `share_try_bound`).
    pub pair_prior: bool,
}

impl Default for SimOnly {
    fn default() -> Self {
        SimOnly { loop_interval_s: 0.0, clairvoyant: false, learn: true, pair_prior: true }
    }
}

impl WattsonConfig {
    /// Reads the `[wattson]` table: the knobs as the engine declares and checks them, the rest
    /// as [`SimOnly`]. Errors name the key.
    pub fn from_table(table: toml::Table) -> Result<WattsonConfig, String> {
        let (knobs, rest): (toml::Table, toml::Table) =
            table.into_iter().partition(|(key, _)| Tuning::KEYS.contains(&key.as_str()));
        let refused = |e: toml::de::Error| format!("[wattson]: {}", e.message().trim());
        let tuning: Tuning = knobs.try_into().map_err(refused)?;
        tuning.check().map_err(|(_, why)| format!("wattson.{why}"))?;
        let sim: SimOnly = rest.try_into().map_err(refused)?;
        if !(sim.loop_interval_s.is_finite() && sim.loop_interval_s >= 0.0) {
            return Err(format!(
                "wattson.loop_interval_s = {}: must be a finite number >= 0",
                sim.loop_interval_s
            ));
        }
        Ok(WattsonConfig { tuning, sim })
    }

    /// Sets one key from a `key=value` override, as the file would (`pack=false`,
    /// `queue_order=fifo`; a boolean may be written 0 or 1).
    pub fn set_pair(&mut self, pair: &str) -> Result<(), SimError> {
        let bad = |why: &str| SimError::Input(format!("override `{pair}`: {why}"));
        let (key, text) = pair.split_once('=').ok_or_else(|| bad("expected key=value"))?;
        let mut table = toml::Table::try_from(self.tuning).map_err(|e| bad(&e.to_string()))?;
        table.extend(toml::Table::try_from(self.sim).map_err(|e| bad(&e.to_string()))?);
        if !table.contains_key(key) {
            return Err(bad(&format!("unknown [wattson] knob `{key}`")));
        }
        let value = match (&table[key], text) {
            (toml::Value::Boolean(_), "0" | "1") => toml::Value::Boolean(text == "1"),
            _ => format!("v = {text}")
                .parse::<toml::Table>()
                .ok()
                .and_then(|mut t| t.remove("v"))
                .unwrap_or_else(|| toml::Value::String(text.to_string())),
        };
        table.insert(key.to_string(), value);
        *self = WattsonConfig::from_table(table).map_err(|why| bad(&why))?;
        Ok(())
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
        let wattson = match v.remove("wattson") {
            Some(toml::Value::Table(t)) => t,
            Some(_) => return Err(err("wattson must be a table ([wattson])".to_string())),
            None => toml::Table::new(),
        };
        let wattson = WattsonConfig::from_table(wattson).map_err(err)?;
        let c: ClusterConfig =
            v.try_into().map_err(|e: toml::de::Error| err(e.to_string().trim().to_string()))?;
        let c = ClusterConfig { wattson, ..c };
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
        Tuning { suspend_time_s, slurm_order: self.slurm.order, ..self.wattson.tuning }
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
            ("slurm.suspend_timeout_s", self.slurm.suspend_timeout_s),
            ("slurm.resume_timeout_s", self.slurm.resume_timeout_s),
            ("slurm.start_latency_s", self.slurm.start_latency_s),
            ("slurm.queued_start_latency_s", self.slurm.queued_start_latency_s.unwrap_or(0.0)),
            ("slurm.power_save_interval_s", self.slurm.power_save_interval_s),
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
