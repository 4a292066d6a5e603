//! The node's energy besides its GPUs: the CPU packages and DRAM from RAPL, the whole node
//! from the BMC's DCMI power readings; read with the GPUs at every sample and apportioned
//! among the running jobs ([`apportion`]).

pub mod apportion;
pub mod cgroup;
pub mod ipmi;
pub mod rapl;

use tracing::{info, warn};

use wattson_config::energy::{EnergyConfig, EnergyScope};
use wattson_types::scope::NodeShare;

/// What the node drew since its meters began, read at `t_ns`; a part is `None` where the node
/// has no such reading.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct NodeTotals {
    /// When it was read, ns since the Unix epoch.
    pub t_ns: i64,
    /// CPU packages, mJ.
    pub cpu_mj: Option<f64>,
    /// DRAM, mJ.
    pub dram_mj: Option<f64>,
    /// The whole node, mJ.
    pub node_mj: Option<f64>,
}

/// The node's meters besides the GPUs, owned by the sampler.
#[derive(Debug)]
pub struct NodeMeters {
    scope: EnergyScope,
    rapl: Option<rapl::Rapl>,
    ipmi: Option<ipmi::Bmc>,
}

impl NodeMeters {
    /// Finds the node's RAPL zones (always) and its DCMI power reading (with `scope =
    /// "node"`, its only user). Refuses, worded for a person, a scope whose part this node
    /// does not have: a figure that leaves it out would be passed off as the scope's.
    pub fn open(config: &EnergyConfig, t_ns: i64) -> Result<NodeMeters, String> {
        let rapl = match rapl::Rapl::discover(&config.powercap) {
            Ok(found) => found,
            Err(e) if config.scope.needs_rapl() => return Err(format!("RAPL: {e}")),
            Err(e) => {
                warn!(error = %e, "RAPL zones cannot be read: no CPU or DRAM energy is recorded");
                None
            }
        };
        match &rapl {
            Some(r) => info!(packages = r.zones().0, dram = r.zones().1, "RAPL zones found"),
            None if config.scope.needs_rapl() => {
                let instead = match config.scope {
                    EnergyScope::Cpu => "scope = \"node\" (the BMC's DCMI power readings)",
                    _ => "scope = \"gpu\"",
                };
                return Err(format!(
                    "[energy] scope = \"{}\", but {} has no RAPL package zone (intel-rapl:N): \
                     CPU energy is not available on this node; set {instead} here",
                    config.scope.as_str(),
                    config.powercap.display()
                ));
            }
            None => {
                info!(powercap = %config.powercap.display(), "no RAPL zones: CPU and DRAM energy not available")
            }
        }
        let ipmi = if config.scope == EnergyScope::Node {
            let meter = ipmi::Ipmi::open(config.ipmi_command.clone(), config.ipmi_timeout, t_ns).map_err(|e| {
                format!(
                    "[energy] scope = \"node\", but the node's DCMI power reading is not available ({e}); \
                     set scope to \"gpu\" or \"gpu+cpu\" here"
                )
            })?;
            Some(ipmi::Bmc::spawn(meter)?)
        } else {
            None
        };
        Ok(NodeMeters { scope: config.scope, rapl, ipmi })
    }

    /// A new job's share: zero of each part this node measures, `None` for the others.
    pub fn empty_share(&self) -> NodeShare {
        NodeShare {
            scope: self.scope,
            cpu_mj: self.rapl.as_ref().map(|_| 0.0),
            dram_mj: self.rapl.as_ref().and_then(|r| r.has_dram().then_some(0.0)),
            node_mj: self.ipmi.as_ref().map(|_| 0.0),
        }
    }

    /// Reads every meter at `t_ns`; the node's total is the BMC's latest reading's, taken on
    /// its own thread (at most a reading behind, never waited for).
    pub fn read(&mut self, t_ns: i64) -> NodeTotals {
        let (cpu_mj, dram_mj) = match self.rapl.as_mut().map(rapl::Rapl::read) {
            Some(totals) => (Some(totals.cpu_mj), totals.dram_mj),
            None => (None, None),
        };
        let node_mj = self.ipmi.as_mut().map(ipmi::Bmc::total);
        NodeTotals { t_ns, cpu_mj, dram_mj, node_mj }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn a_slow_bmc_never_holds_the_sampling() {
        let dir = tempfile::tempdir().unwrap();
        let (reading, done, powercap) =
            (dir.path().join("reading"), dir.path().join("done"), dir.path().join("pc"));
        std::fs::create_dir(&powercap).unwrap();
        std::fs::write(&reading, "Instantaneous power reading: 400 Watts\n").unwrap();
        // The first reading (at the start) is at once; every later one takes 5 s, then leaves
        // a mark.
        let script = format!(
            "if [ -e {d}.first ]; then sleep 5; touch {d}; else touch {d}.first; fi; cat {r}",
            d = done.display(),
            r = reading.display()
        );
        let config = EnergyConfig {
            scope: EnergyScope::Node,
            powercap,
            ipmi_command: vec!["/bin/sh".into(), "-c".into(), script],
            ipmi_timeout: Duration::from_secs(30),
            ..EnergyConfig::default()
        };
        let mut meters = NodeMeters::open(&config, 0).unwrap();
        for t in 1..=5 {
            assert_eq!(meters.read(t).node_mj, Some(0.0), "no later reading has finished");
        }
        assert!(!done.exists(), "the samples went on before the slow reading ended");
        let started = std::time::Instant::now();
        while meters.read(6).node_mj == Some(0.0) {
            assert!(started.elapsed() < Duration::from_secs(60), "the slow reading never arrived");
            std::thread::sleep(Duration::from_millis(50));
        }
        assert!(done.exists());
    }
}
