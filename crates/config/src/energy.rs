//! `[energy]`: what a job's energy figure in Slurm covers, and where the node's CPU, DRAM and
//! whole-node energy are read.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};
pub use wattson_types::scope::{EnergyScope, NodeSplit};

use crate::duration_in;

/// `[energy]` section, read by wattsond.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct EnergyConfig {
    /// The energy Slurm gets as a job's `ConsumedEnergy`: `gpu`, `gpu+cpu`, `cpu` (a CPU-only
    /// node: no GPU library is opened) or `node`.
    #[serde(default, deserialize_with = "scope")]
    pub scope: EnergyScope,
    /// Linux powercap's directory, where the RAPL zones (`intel-rapl:N`) are read.
    pub powercap: PathBuf,
    /// How the node's CPU, DRAM and whole-node energy is divided among the jobs running at
    /// once: `cpu-time` (by each job's CPU time in its Slurm cgroup, where every running job's
    /// cgroup can be read; else by `time` for that interval) or `time` (each job the same for
    /// the time it ran).
    pub split: NodeSplit,
    /// The cgroup filesystem's root, under which Slurm's job cgroups are read for `split =
    /// "cpu-time"` (v1: `cpuacct/slurm/uid_<uid>/job_<id>`; v2:
    /// `system.slice/slurmstepd.scope/job_<id>`).
    pub cgroups: PathBuf,
    /// The command that prints the BMC's DCMI power reading (an argv, the program an absolute
    /// path; never a shell), run at every sample with `scope = "node"`.
    #[serde(deserialize_with = "ipmi_command")]
    pub ipmi_command: Vec<String>,
    /// Longest one run of `ipmi_command` may take before it is killed (100ms to 30s).
    #[serde(deserialize_with = "ipmi_timeout")]
    #[schemars(with = "String", extend("x-allowed" = "100ms to 30s"))]
    pub ipmi_timeout: Duration,
}

impl Default for EnergyConfig {
    fn default() -> EnergyConfig {
        EnergyConfig {
            scope: EnergyScope::default(),
            powercap: PathBuf::from("/sys/class/powercap"),
            split: NodeSplit::default(),
            cgroups: PathBuf::from("/sys/fs/cgroup"),
            ipmi_command: ["/usr/bin/ipmitool", "dcmi", "power", "reading"].map(String::from).to_vec(),
            ipmi_timeout: Duration::from_secs(2),
        }
    }
}

fn scope<'de, D: Deserializer<'de>>(d: D) -> Result<EnergyScope, D::Error> {
    let text = String::deserialize(d)?;
    text.parse().map_err(|_| {
        serde::de::Error::custom(format!(
            "energy scope {text:?} is not one of \"gpu\", \"gpu+cpu\", \"cpu\", \"node\""
        ))
    })
}

fn ipmi_command<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    let argv = Vec::<String>::deserialize(d)?;
    match argv.first() {
        Some(program) if program.starts_with('/') => Ok(argv),
        Some(program) => Err(serde::de::Error::custom(format!(
            "ipmi_command: the program {program:?} must be an absolute path"
        ))),
        None => Err(serde::de::Error::custom("ipmi_command must name a program")),
    }
}

fn ipmi_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration_in(d, Duration::from_millis(100), Duration::from_secs(30))
}

#[cfg(test)]
mod tests {
    use crate::Config;

    use super::*;

    #[test]
    fn the_scope_is_gpu_unless_set_and_a_bad_one_says_what_is_allowed() {
        let c = Config::parse("", "w.toml").unwrap();
        assert_eq!(c.energy.scope, EnergyScope::Gpu);
        assert_eq!(c.energy.powercap, PathBuf::from("/sys/class/powercap"));
        assert_eq!(c.energy.ipmi_command[0], "/usr/bin/ipmitool");
        assert_eq!((c.energy.split, c.energy.cgroups.to_str()), (NodeSplit::CpuTime, Some("/sys/fs/cgroup")));
        for (text, scope) in [
            ("gpu", EnergyScope::Gpu),
            ("gpu+cpu", EnergyScope::GpuCpu),
            ("cpu", EnergyScope::Cpu),
            ("node", EnergyScope::Node),
        ] {
            let c = Config::parse(&format!("[energy]\nscope = \"{text}\"\n"), "w.toml").unwrap();
            assert_eq!(c.energy.scope, scope);
        }
        let e = Config::parse("[energy]\nscope = \"dram\"\n", "w.toml").unwrap_err().0;
        assert!(e.starts_with("w.toml:2: ") && e.contains("\"gpu\", \"gpu+cpu\", \"cpu\", \"node\""), "{e}");
        let c = Config::parse("[energy]\nsplit = \"time\"\ncgroups = \"/cg\"\n", "w.toml").unwrap();
        assert_eq!((c.energy.split, c.energy.cgroups.to_str()), (NodeSplit::Time, Some("/cg")));
        let e = Config::parse("[energy]\nsplit = \"cores\"\n", "w.toml").unwrap_err().0;
        assert!(e.starts_with("w.toml:2: ") && e.contains("cpu-time") && e.contains("time"), "{e}");
        let e = Config::parse("[energy]\nipmi_command = [\"ipmitool\"]\n", "w.toml").unwrap_err().0;
        assert!(e.starts_with("w.toml:2: ") && e.contains("absolute path"), "{e}");
        let e = Config::parse("[energy]\nipmi_timeout = \"1m\"\n", "w.toml").unwrap_err().0;
        assert!(e.contains("allowed 100ms to 30s"), "{e}");
        let e = Config::parse("[energy]\nscop = \"gpu\"\n", "w.toml").unwrap_err().0;
        assert!(e.contains("scope"), "{e}");
    }
}
