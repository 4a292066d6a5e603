//! What the controller decided, for Prometheus: counters by decision, loops and their cost,
//! nodes by power state. ctld has no HTTP server (it stays a plain blocking program): after
//! every loop it rewrites `[ctld] metrics_file` whole, in the text format that
//! node_exporter's textfile collector serves from its own `/metrics`.

use std::path::Path;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use crate::plan::Plan;
use crate::slurm::{Node, Power};

type Labels = Vec<(&'static str, &'static str)>;

/// A kind of decision the controller carries out (the `action` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::IntoStaticStr)]
#[strum(serialize_all = "snake_case")]
pub enum Action {
    /// `power_down_asap` asked of Slurm.
    PowerDown,
    /// `power_up` ahead of known demand.
    PowerUp,
    /// `power_up` again after a failed resume.
    Retry,
    /// A node left down after every retry.
    GiveUp,
    /// A node kept up: its wattsond did not confirm it idle.
    KeptUp,
    /// A node weight set.
    Weight,
    /// A pending job's nice set (the queue order).
    Nice,
    /// A running job set to full speed (jobs wait).
    PaceFull,
    /// A running job given back its saving setting (the queue cleared).
    PaceSaving,
    /// A running job set to the level the power budget allows.
    PaceLevel,
    /// A job held for the power budget released.
    Release,
}

/// The controller's counters and gauges.
pub struct Metrics {
    registry: Registry,
    decisions: Family<Labels, Counter>,
    loops: Counter,
    failed: Counter,
    loop_seconds: Gauge<f64, AtomicU64>,
    nodes: Family<Labels, Gauge>,
}

impl Default for Metrics {
    fn default() -> Metrics {
        let mut registry = Registry::default();
        let decisions = Family::<Labels, Counter>::default();
        registry.register(
            "wattson_ctld_decisions",
            "Decisions carried out, by action (power_down, power_up, retry, give_up, kept_up, weight, nice, pace_full, pace_saving, pace_level, release)",
            decisions.clone(),
        );
        let loops = Counter::default();
        registry.register("wattson_ctld_loops", "Loops run", loops.clone());
        let failed = Counter::default();
        registry.register(
            "wattson_ctld_failed_loops",
            "Loops that could not read or update Slurm",
            failed.clone(),
        );
        let loop_seconds = Gauge::<f64, AtomicU64>::default();
        registry.register(
            "wattson_ctld_loop_seconds",
            "Duration of the last loop, Slurm's commands and the nodes' answers included",
            loop_seconds.clone(),
        );
        let nodes = Family::<Labels, Gauge>::default();
        registry.register("wattson_ctld_nodes", "Nodes by power state at the last loop", nodes.clone());
        Metrics { registry, decisions, loops, failed, loop_seconds, nodes }
    }
}

impl Metrics {
    /// Counts `n` decisions of kind `action`.
    pub fn decided(&self, action: Action, n: usize) {
        if n > 0 {
            self.decisions.get_or_create(&vec![("action", action.into())]).inc_by(n as u64);
        }
    }

    /// Counts a loop that saw `nodes` and carried out `plan` (none: it failed) in `seconds`.
    pub fn looped(&self, plan: Option<&Plan>, nodes: &[Node], seconds: f64) {
        self.loops.inc();
        self.loop_seconds.set(seconds);
        for power in [Power::On, Power::PoweringUp, Power::PoweringDown, Power::Off] {
            let n = nodes.iter().filter(|n| n.power == power).count();
            self.nodes.get_or_create(&vec![("power", power_name(power))]).set(n as i64);
        }
        let Some(plan) = plan else {
            self.failed.inc();
            return;
        };
        self.decided(Action::PowerDown, plan.power_down.len());
        self.decided(Action::PowerUp, plan.power_up.len());
        self.decided(Action::Retry, plan.retry.len());
        self.decided(Action::GiveUp, plan.give_up.len());
        self.decided(Action::Weight, plan.weights.iter().map(|(_, n)| n.len()).sum());
        self.decided(Action::Nice, plan.nice.len());
        self.decided(Action::Release, plan.release.len());
    }

    /// The metrics in Prometheus' text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }

    /// Rewrites `path` whole with the metrics (mode 0644).
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        crate::power_status::write_whole(path, self.encode().as_bytes())
    }
}

fn power_name(power: Power) -> &'static str {
    match power {
        Power::On => "on",
        Power::PoweringUp => "powering_up",
        Power::PoweringDown => "powering_down",
        Power::Off => "off",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_are_counted_by_action_and_nodes_by_power() {
        let m = Metrics::default();
        m.decided(Action::KeptUp, 2);
        m.decided(Action::PaceFull, 0);
        let text = m.encode();
        assert!(text.contains("wattson_ctld_decisions_total{action=\"kept_up\"} 2"), "{text}");
        assert!(!text.contains("action=\"pace_full\""), "none counted, no series: {text}");
        assert!(text.contains("# TYPE wattson_ctld_decisions counter"), "{text}");
        let nodes = crate::slurm::parse_nodes(
            "NodeName=a State=IDLE+POWERED_DOWN Gres=gpu:2\nNodeName=b State=IDLE Gres=gpu:2\n\
             NodeName=c State=MIXED Gres=gpu:2\n",
        )
        .unwrap();
        m.looped(None, &nodes, 0.5);
        let text = m.encode();
        assert!(text.contains("wattson_ctld_failed_loops_total 1"), "{text}");
        assert!(text.contains("wattson_ctld_loop_seconds 0.5"), "{text}");
        assert!(text.contains("wattson_ctld_nodes{power=\"off\"} 1"), "{text}");
        assert!(text.contains("wattson_ctld_nodes{power=\"on\"} 2"), "{text}");
    }
}
