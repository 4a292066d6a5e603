//! What `wattson power status` shows: each node's power and since when, the controller's last
//! decision about it and why, and the energy right-sizing saved (an estimate from the `[ctld]`
//! node power model, labelled as such). Kept by the planner, written by the controller after
//! every loop to `[ctld] state_file`.

use std::collections::BTreeMap;
use std::path::Path;

use serde::{Deserialize, Serialize};
use wattson_engine::cluster::{Decider, NodeCosts};

use crate::slurm::{Node, Power};

/// One node's power history as the controller saw it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeLedger {
    /// on, off, powering-up, powering-down, or held (by an administrator, or down).
    pub power: String,
    /// Since when (Unix s) the node has been in that state, as first seen.
    pub since: f64,
    /// The controller's last decision about the node and its reason.
    pub last_decision: String,
    /// When it was made (Unix s).
    pub decided_at: f64,
    /// Seconds seen powered off.
    pub off_s: f64,
    /// Power-downs seen complete.
    pub cycles: u32,
}

/// Every node's ledger, and when it was last updated.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Ledger {
    /// When the controller last looked (Unix s).
    pub updated: f64,
    /// Idle draw of a node, W, and the extra energy of one power cycle, J (for the estimate).
    pub idle_w: f64,
    /// Extra energy of one shutdown and boot over staying idle, J.
    pub cycle_j: f64,
    /// Draw of a powered-off node, W.
    pub off_w: f64,
    /// By node name.
    pub nodes: BTreeMap<String, NodeLedger>,
    /// Whether the controller that wrote this acts or stands by for another
    /// ([`crate::failover`]); a file written before roles were known reads as acting.
    #[serde(default)]
    pub role: crate::failover::Role,
    /// The wait-cost bound as the controller last observed it (absent from an older file).
    #[serde(default)]
    pub wait_cost: WaitCostStatus,
    /// The policy's memory between loops: the waits observed and each running job's lag
    /// (`max_lag_s`). Read back when the controller starts; where it is absent (an older file)
    /// or unreadable (another release's), the policy starts afresh and the rest still reads.
    #[serde(default, deserialize_with = "or_afresh")]
    pub decider: Decider,
    /// Workload tags paired no more: a job of theirs was measured slowed over its bound while
    /// sharing a GPU ([`crate::share::judge`]). Read back when the controller starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub share_broken: Vec<String>,
    /// Learning pairs (`share_learn`): the pairs measured on the cluster, by tags. Read back
    /// when the controller starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub share_learned: Vec<wattson_config::pairs::PairMeasurement>,
    /// Learning pairs: the pairs of tags (job measured, job beside it) measured over a bound,
    /// which never share again. Read back when the controller starts.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub share_unfit: Vec<[String; 2]>,
    /// What the controller changed of the opted-in jobs it released that have not started,
    /// to give back ([`crate::share::gate`]). Read back when the controller starts.
    #[serde(default, skip_serializing_if = "crate::share::Released::is_empty")]
    pub share_released: crate::share::Released,
}

/// What DVFS did to the queue's waits, as the controller observed it (`[ctld] max_wait_cost`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct WaitCostStatus {
    /// The observed share by which DVFS lengthened the waits.
    pub observed: f64,
    /// The bound (`[ctld] max_wait_cost`).
    pub bound: f64,
    /// Whether it passed the bound: no job is slowed.
    pub guarding: bool,
    /// Below the bound, the share of the GPUs that must be unallocated for a job to be slowed
    /// (`WaitCost::gate`).
    #[serde(default)]
    pub gate: f64,
}

fn power_word(node: &Node) -> &'static str {
    if node.is_held_by_admin() {
        return "held";
    }
    match node.power {
        Power::On => "on",
        Power::PoweringUp => "powering-up",
        Power::PoweringDown => "powering-down",
        Power::Off => "off",
    }
}

impl Ledger {
    /// Accounts for `nodes` seen at `now`; `costs` and `gpu_idle_w` give the estimate's model.
    pub fn observe(&mut self, nodes: &[Node], now: f64, costs: &NodeCosts, gpu_idle_w: f64) {
        let gpus = nodes.iter().map(|n| n.gpus).max().unwrap_or(0);
        self.idle_w = costs.base_w + f64::from(gpus) * gpu_idle_w;
        self.off_w = costs.off_w;
        self.cycle_j =
            (costs.shutdown_w - self.idle_w) * costs.shutdown_s + (costs.boot_w - self.idle_w) * costs.boot_s;
        let elapsed = if self.updated > 0.0 { (now - self.updated).max(0.0) } else { 0.0 };
        for node in nodes {
            let word = power_word(node);
            let entry = self.nodes.entry(node.name.clone()).or_insert_with(|| NodeLedger {
                power: word.into(),
                since: now,
                ..NodeLedger::default()
            });
            if entry.power == "off" {
                entry.off_s += elapsed;
            }
            if entry.power != word {
                if word == "off" {
                    entry.cycles += 1;
                }
                entry.power = word.into();
                entry.since = now;
            }
        }
        self.updated = now;
    }

    /// Records a decision about `node` at `now`.
    pub fn decided(&mut self, node: &str, what: String, now: f64) {
        let entry = self.nodes.entry(node.to_string()).or_default();
        entry.last_decision = what;
        entry.decided_at = now;
    }

    /// Estimated energy right-sizing saved on `node` (J): its time off at idle draw minus off
    /// draw, less the extra energy of its power cycles. An estimate from the node model.
    pub fn saved_j(&self, node: &NodeLedger) -> f64 {
        node.off_s * (self.idle_w - self.off_w) - f64::from(node.cycles) * self.cycle_j
    }
}

/// Writes `ledger` to `path` whole: a new file renamed over the old, so a reader never sees
/// half of one.
pub fn save(ledger: &Ledger, path: &Path) -> std::io::Result<()> {
    write_whole(path, &serde_json::to_vec_pretty(ledger).map_err(std::io::Error::other)?)
}

/// Writes `bytes` to `path` (mode 0644) through a new file renamed over the old, as durably
/// as the daemon writes its own files: the new file synced before the rename, the directory
/// after it, so a crash leaves the old file or the new one, never an empty one.
pub fn write_whole(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut file = tempfile::NamedTempFile::new_in(dir)?;
    std::io::Write::write_all(&mut file, bytes)?;
    file.as_file().set_permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))?;
    file.as_file().sync_all()?;
    file.persist(path).map_err(|e| e.error)?;
    std::fs::File::open(dir)?.sync_all()
}

/// The saved policy memory, or a fresh one where it does not read as this release's.
fn or_afresh<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Decider, D::Error> {
    let value = serde_json::Value::deserialize(d)?;
    Ok(serde_json::from_value(value).unwrap_or_default())
}

/// What a controller before this one saved at `path`: `None` where there is none, or (with a
/// warning) where it does not read, and the controller starts afresh.
pub fn saved(path: &Path) -> Option<Ledger> {
    if !path.exists() {
        return None;
    }
    load(path)
        .map_err(|e| tracing::warn!(error = %e, "cannot read the state file: the policy and co-location start afresh"))
        .ok()
}

/// Reads the ledger the controller saved at `path`.
pub fn load(path: &Path) -> Result<Ledger, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("{}: {e} (is wattson ctld running?)", path.display()))?;
    serde_json::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::slurm::parse_nodes;

    #[test]
    fn off_time_cycles_and_the_saving_estimate() {
        let costs = NodeCosts {
            base_w: 300.0,
            off_w: 10.0,
            shutdown_s: 60.0,
            shutdown_w: 300.0,
            boot_s: 300.0,
            boot_w: 400.0,
        };
        let on = parse_nodes("NodeName=n1 Gres=gpu:4 State=IDLE").unwrap();
        let off = parse_nodes("NodeName=n1 Gres=gpu:4 State=IDLE+POWERED_DOWN").unwrap();
        let mut l = Ledger::default();
        l.observe(&on, 0.0, &costs, 50.0);
        l.decided("n1", "power_down_asap: idle beyond the warm set".into(), 0.0);
        l.observe(&off, 100.0, &costs, 50.0);
        l.observe(&off, 3700.0, &costs, 50.0);
        let n = &l.nodes["n1"];
        assert_eq!((n.power.as_str(), n.since, n.off_s, n.cycles), ("off", 100.0, 3600.0, 1));
        // Idle 500 W, off 10 W: 3600 s off saves 1,764,000 J; a cycle costs
        // (300-500)*60 + (400-500)*300 = -42,000 J extra (less than idling), so it adds back.
        assert_eq!(l.saved_j(n), 3600.0 * 490.0 + 42_000.0);
        assert!(n.last_decision.starts_with("power_down_asap"));
    }

    #[test]
    fn the_role_is_saved_and_an_older_file_reads_as_acting() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("ctld.json");
        let ledger =
            Ledger { role: crate::failover::Role::Standby(Some("ctl1".into())), ..Ledger::default() };
        save(&ledger, &path).unwrap();
        assert_eq!(load(&path).unwrap().role, ledger.role);
        std::fs::write(&path, r#"{"updated":1.0,"idle_w":0.0,"cycle_j":0.0,"off_w":0.0,"nodes":{}}"#)
            .unwrap();
        assert_eq!(load(&path).unwrap().role, crate::failover::Role::Acting);
        // A policy memory this release cannot read is started afresh; the rest still reads.
        std::fs::write(
            &path,
            r#"{"updated":1.0,"idle_w":0.0,"cycle_j":0.0,"off_w":0.0,"nodes":{},"role":{"standby":"ctl1"},
                "decider":{"wait_cost":{"waited_s":null}}}"#,
        )
        .unwrap();
        let read = load(&path).unwrap();
        assert_eq!((read.role, read.decider), (ledger.role, Decider::default()));
    }
}
