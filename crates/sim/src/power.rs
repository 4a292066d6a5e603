//! Node power states and the energy meter.
//!
//! A node is `On` (base power + each GPU's idle or working power), `ShuttingDown`
//! (`shutdown_w` for `shutdown_s`), `OffWait` (off power, Slurm still waiting out
//! `SuspendTimeout`), `Off` (off power, resumable) or `Booting` (`boot_w` for `boot_s`).
//! The meter charges every node lazily by part (busy GPUs, idle GPUs, node base, off,
//! transitions) and, independently, integrates the whole cluster's power over UTC-hour bins
//! (for the power plot and the price schedule); the two totals must agree.

use serde::Serialize;

use super::cluster::ClusterConfig;

/// Power state of a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NodeState {
    /// Powered on.
    On,
    /// Shutting down.
    ShuttingDown,
    /// Off, but Slurm's `SuspendTimeout` has not passed yet.
    OffWait,
    /// Off and resumable.
    Off,
    /// Booting.
    Booting,
}

/// Energy by part (J).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
pub struct EnergyParts {
    /// GPUs running jobs.
    pub gpu_busy_j: f64,
    /// Idle GPUs of powered-on nodes.
    pub gpu_idle_j: f64,
    /// Powered-on nodes' base draw (CPUs, memory, fans, network, PSU losses).
    pub node_base_j: f64,
    /// Powered-off nodes (BMC).
    pub off_j: f64,
    /// Shutting down and booting.
    pub transition_j: f64,
}

impl EnergyParts {
    /// The sum of the parts (J).
    pub fn total_j(&self) -> f64 {
        self.gpu_busy_j + self.gpu_idle_j + self.node_base_j + self.off_j + self.transition_j
    }
}

/// One stretch of one node in one state.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct NodeInterval {
    /// Node index.
    pub node: u32,
    /// State during the stretch.
    pub state: NodeState,
    /// Start (s).
    pub from: f64,
    /// End (s).
    pub to: f64,
}

/// Length of a timeline bin (s): one tariff hour.
pub const BIN_S: f64 = 3600.0;

/// The energy meter of one simulated run.
#[derive(Debug, Clone)]
pub struct Meter {
    gpn: u32,
    base_w: f64,
    /// Idle draw of one GPU, per node (its group's GPU type).
    gpu_idle_w: Vec<f64>,
    off_w: f64,
    shutdown_w: f64,
    boot_w: f64,
    budget_w: Option<f64>,
    /// Node states.
    pub state: Vec<NodeState>,
    since: Vec<f64>,
    last: Vec<f64>,
    running: Vec<u32>,
    busy_w: Vec<f64>,
    /// Energy by part.
    pub parts: EnergyParts,
    cluster_w: f64,
    tl_last: f64,
    /// Start of bin 0 (s, trace time), aligned to a UTC hour.
    pub bin_origin: f64,
    /// Energy per bin (J).
    pub bins: Vec<f64>,
    /// Node state stretches, closed ones.
    pub intervals: Vec<NodeInterval>,
    /// Power-downs and boots started.
    pub state_changes: u64,
    /// Highest cluster power seen (W).
    pub peak_w: f64,
    /// Time above the power budget (s).
    pub over_budget_s: f64,
}

impl Meter {
    /// All nodes on and idle from `t0`.
    pub fn new(c: &ClusterConfig, t0: f64) -> Meter {
        let n = c.nodes() as usize;
        let offset = c.trace_start_utc_s as f64;
        let bin_origin = t0 - (t0 + offset).rem_euclid(BIN_S);
        let mut m = Meter {
            gpn: c.gpus_per_node,
            base_w: c.node.base_w,
            gpu_idle_w: c.node_groups().iter().map(|&g| c.groups[usize::from(g)].gpu_idle_w()).collect(),
            off_w: c.node.off_w,
            shutdown_w: c.node.shutdown_w,
            boot_w: c.node.boot_w,
            budget_w: c.budget.map(|b| b.power_w),
            state: vec![NodeState::On; n],
            since: vec![t0; n],
            last: vec![t0; n],
            running: vec![0; n],
            busy_w: vec![0.0; n],
            parts: EnergyParts::default(),
            cluster_w: 0.0,
            tl_last: t0,
            bin_origin,
            bins: Vec::new(),
            intervals: Vec::new(),
            state_changes: 0,
            peak_w: 0.0,
            over_budget_s: 0.0,
        };
        m.cluster_w = (0..n).map(|i| m.node_w(i)).sum();
        m.peak_w = m.cluster_w;
        m
    }

    fn node_w(&self, n: usize) -> f64 {
        match self.state[n] {
            NodeState::On => {
                self.base_w + f64::from(self.gpn - self.running[n]) * self.gpu_idle_w[n] + self.busy_w[n]
            }
            NodeState::ShuttingDown => self.shutdown_w,
            NodeState::OffWait | NodeState::Off => self.off_w,
            NodeState::Booting => self.boot_w,
        }
    }

    fn settle(&mut self, n: usize, t: f64) {
        let dt = t - self.last[n];
        if dt <= 0.0 {
            return;
        }
        let p = &mut self.parts;
        match self.state[n] {
            NodeState::On => {
                p.node_base_j += self.base_w * dt;
                p.gpu_idle_j += f64::from(self.gpn - self.running[n]) * self.gpu_idle_w[n] * dt;
                p.gpu_busy_j += self.busy_w[n] * dt;
            }
            NodeState::ShuttingDown => p.transition_j += self.shutdown_w * dt,
            NodeState::OffWait | NodeState::Off => p.off_j += self.off_w * dt,
            NodeState::Booting => p.transition_j += self.boot_w * dt,
        }
        self.last[n] = t;
    }

    /// Integrates the cluster's power up to `t` into the hour bins.
    fn advance(&mut self, t: f64) {
        let mut a = self.tl_last;
        if t <= a {
            return;
        }
        if let Some(b) = self.budget_w
            && self.cluster_w > b
        {
            self.over_budget_s += t - a;
        }
        while a < t {
            let k = ((a - self.bin_origin) / BIN_S).floor().max(0.0) as usize;
            let end = (self.bin_origin + (k + 1) as f64 * BIN_S).min(t);
            if self.bins.len() <= k {
                self.bins.resize(k + 1, 0.0);
            }
            self.bins[k] += self.cluster_w * (end - a);
            a = if end > a { end } else { t };
        }
        self.tl_last = t;
    }

    fn change(&mut self, n: usize, t: f64, f: impl FnOnce(&mut Meter)) {
        self.settle(n, t);
        self.advance(t);
        let old = self.node_w(n);
        f(self);
        let new = self.node_w(n);
        self.cluster_w += new - old;
        self.peak_w = self.peak_w.max(self.cluster_w);
    }

    /// A job's `gpus` GPUs on node `n` start (or, with negative values, stop) drawing `w` each.
    pub fn run(&mut self, n: usize, t: f64, gpus: i64, w: f64) {
        self.change(n, t, |m| {
            m.running[n] = (i64::from(m.running[n]) + gpus) as u32;
            m.busy_w[n] += gpus as f64 * w;
            if m.running[n] == 0 {
                m.busy_w[n] = 0.0; // no rounding residue on an idle node
            }
        });
    }

    /// Adds `dw` (W) to node `n`'s GPU draw from `t` on, its count of running GPUs unchanged:
    /// a job on a GPU another job holds.
    pub fn adjust(&mut self, n: usize, t: f64, dw: f64) {
        self.change(n, t, |m| m.busy_w[n] += dw);
    }

    /// Moves node `n` to `state` at `t`; counts power-downs and boots.
    pub fn set_state(&mut self, n: usize, t: f64, state: NodeState) {
        if self.state[n] == state {
            return;
        }
        if matches!(state, NodeState::ShuttingDown | NodeState::Booting) {
            self.state_changes += 1;
        }
        let old = self.state[n];
        self.intervals.push(NodeInterval { node: n as u32, state: old, from: self.since[n], to: t });
        self.since[n] = t;
        self.change(n, t, |m| m.state[n] = state);
    }

    /// Charges everything up to `t` and closes every node's last stretch.
    pub fn finish(&mut self, t: f64) {
        for n in 0..self.state.len() {
            self.settle(n, t);
            self.intervals.push(NodeInterval {
                node: n as u32,
                state: self.state[n],
                from: self.since[n],
                to: t,
            });
            self.since[n] = t;
        }
        self.advance(t);
    }

    /// Energy integrated over the timeline (J): must equal the sum of the parts.
    pub fn timeline_j(&self) -> f64 {
        self.bins.iter().sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::{ClusterConfig, tests::SMALL};

    #[test]
    fn parts_and_timeline_agree_and_match_hand_sums() {
        let c = ClusterConfig::from_toml(SMALL, "c").unwrap();
        let mut m = Meter::new(&c, 0.0);
        m.run(0, 100.0, 4, 200.0);
        m.set_state(1, 1000.0, NodeState::ShuttingDown);
        m.set_state(1, 1060.0, NodeState::OffWait);
        m.set_state(1, 1120.0, NodeState::Off);
        m.set_state(1, 2000.0, NodeState::Booting);
        m.set_state(1, 2300.0, NodeState::On);
        m.run(0, 5000.0, -4, 200.0);
        m.finish(7200.0);
        let idle_node = 300.0 + 8.0 * 57.0;
        let want_busy = 4.0 * 200.0 * 4900.0;
        let want_transition = 400.0 * 60.0 + 500.0 * 300.0;
        let want_off = 10.0 * (2000.0 - 1060.0);
        assert!((m.parts.gpu_busy_j - want_busy).abs() < 1e-6);
        assert!((m.parts.transition_j - want_transition).abs() < 1e-6);
        assert!((m.parts.off_j - want_off).abs() < 1e-6);
        let on_s = 4.0 * 7200.0 - (2300.0 - 1000.0);
        let want_total = on_s * idle_node - 4.0 * 57.0 * 4900.0 + want_busy + want_transition + want_off;
        assert!((m.parts.total_j() - want_total).abs() < 1e-6 * want_total);
        assert!(
            (m.timeline_j() - want_total).abs() < 1e-6 * want_total,
            "{} vs {want_total}: {:?}",
            m.timeline_j(),
            m.bins
        );
        assert_eq!(m.bins.len(), 2);
        assert_eq!(m.state_changes, 2);
        assert_eq!(m.intervals.iter().filter(|i| i.node == 1).count(), 6);
    }
}
