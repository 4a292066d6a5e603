//! What a job's energy figure covers: its GPUs only, or also its share of the node's CPU
//! packages and memory (RAPL), its share of the CPU packages and memory alone (a node without
//! GPUs), or its share of the whole node (the BMC's power reading).

use serde::{Deserialize, Serialize};

/// `[energy] scope`: which energy wattson gives Slurm as a job's `ConsumedEnergy`.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
    strum::EnumString,
    strum::IntoStaticStr,
)]
pub enum EnergyScope {
    /// The job's GPUs, from their NVML energy counters.
    #[default]
    #[serde(rename = "gpu")]
    #[strum(serialize = "gpu")]
    Gpu,
    /// The job's GPUs, plus its share of the CPU packages' and DRAM's RAPL energy.
    #[serde(rename = "gpu+cpu")]
    #[strum(serialize = "gpu+cpu")]
    GpuCpu,
    /// The job's share of the whole node's energy, from the BMC's DCMI power readings.
    #[serde(rename = "node")]
    #[strum(serialize = "node")]
    Node,
    /// The job's share of the CPU packages' and DRAM's RAPL energy, and no GPU: a CPU-only
    /// node, where wattsond opens no GPU library.
    #[serde(rename = "cpu")]
    #[strum(serialize = "cpu")]
    Cpu,
}

impl EnergyScope {
    /// Every scope, in the order the documentation lists them.
    pub const ALL: [EnergyScope; 4] =
        [EnergyScope::Gpu, EnergyScope::GpuCpu, EnergyScope::Cpu, EnergyScope::Node];

    /// The name written in `wattson.toml` and shown by `wattson acct`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether the scope's figure needs the GPUs: `gpu` and `gpu+cpu` do; `cpu` never opens a
    /// GPU library, and `node` counts the GPUs in the node's figure whether or not any is seen.
    pub fn needs_gpus(self) -> bool {
        matches!(self, EnergyScope::Gpu | EnergyScope::GpuCpu)
    }

    /// Whether the scope's figure needs the node's RAPL package zones.
    pub fn needs_rapl(self) -> bool {
        matches!(self, EnergyScope::GpuCpu | EnergyScope::Cpu)
    }
}

/// `[energy] split`: how the node's energy besides its GPUs is divided among the jobs that run
/// on it at once.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Serialize,
    Deserialize,
    schemars::JsonSchema,
    strum::IntoStaticStr,
)]
pub enum NodeSplit {
    /// By each job's CPU time in its Slurm cgroup over the interval, where every running job's
    /// cgroup can be read; by `time` for an interval where one cannot.
    #[default]
    #[serde(rename = "cpu-time")]
    #[strum(serialize = "cpu-time")]
    CpuTime,
    /// Each job the same for the time it ran.
    #[serde(rename = "time")]
    #[strum(serialize = "time")]
    Time,
}

impl NodeSplit {
    /// The name written in `wattson.toml`.
    pub fn as_str(self) -> &'static str {
        self.into()
    }
}

/// A job's share of the node's energy besides its GPUs, with the scope that was configured
/// when it began. A part is `None` where the node has no such reading (not available), never
/// a zero standing in for one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeShare {
    /// The scope of the job's figure in Slurm.
    pub scope: EnergyScope,
    /// Share of the CPU packages' energy (RAPL `package-N`), mJ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_mj: Option<f64>,
    /// Share of the DRAM energy (RAPL `dram` zones), mJ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dram_mj: Option<f64>,
    /// Share of the whole node's energy (IPMI DCMI power readings, integrated), mJ.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_mj: Option<f64>,
}

/// Why a scope's figure cannot be given: a part it needs is not measured on this node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unavailable(pub &'static str);

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} energy is not available on this node", self.0)
    }
}

impl NodeShare {
    /// The energy of the share's scope, mJ, given the job's GPU energy: GPU; GPU + CPU + DRAM
    /// (DRAM where the CPUs have a RAPL `dram` zone: not all do); CPU + DRAM; or the node's
    /// (which includes the GPUs).
    pub fn scoped_mj(&self, gpu_mj: f64) -> Result<f64, Unavailable> {
        match self.scope {
            EnergyScope::Gpu => Ok(gpu_mj),
            EnergyScope::GpuCpu => {
                let cpu = self.cpu_mj.ok_or(Unavailable("CPU (RAPL)"))?;
                Ok(gpu_mj + cpu + self.dram_mj.unwrap_or(0.0))
            }
            EnergyScope::Cpu => {
                let cpu = self.cpu_mj.ok_or(Unavailable("CPU (RAPL)"))?;
                Ok(cpu + self.dram_mj.unwrap_or(0.0))
            }
            EnergyScope::Node => self.node_mj.ok_or(Unavailable("node (IPMI DCMI)")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_scope_sums_its_parts_and_a_missing_part_is_said() {
        let share =
            NodeShare { scope: EnergyScope::Gpu, cpu_mj: Some(30.0), dram_mj: Some(5.0), node_mj: None };
        assert_eq!(share.scoped_mj(100.0), Ok(100.0));
        assert_eq!(NodeShare { scope: EnergyScope::GpuCpu, ..share }.scoped_mj(100.0), Ok(135.0));
        let node = NodeShare { scope: EnergyScope::Node, ..share }.scoped_mj(100.0).unwrap_err();
        assert_eq!(node.to_string(), "node (IPMI DCMI) energy is not available on this node");
        let no_dram = NodeShare { scope: EnergyScope::GpuCpu, dram_mj: None, ..share };
        assert_eq!(no_dram.scoped_mj(1.0), Ok(31.0));
        let no_cpu = NodeShare { scope: EnergyScope::GpuCpu, cpu_mj: None, ..share };
        assert!(no_cpu.scoped_mj(1.0).unwrap_err().to_string().contains("CPU (RAPL)"));
        let cpu = NodeShare { scope: EnergyScope::Cpu, ..share };
        assert_eq!(cpu.scoped_mj(100.0), Ok(35.0), "a CPU-only figure leaves out any GPU");
        assert!(NodeShare { cpu_mj: None, ..cpu }.scoped_mj(0.0).is_err());
        for scope in EnergyScope::ALL {
            let text = serde_json::to_string(&scope).unwrap();
            assert_eq!(text, format!("\"{}\"", scope.as_str()));
            assert_eq!(scope.as_str().parse::<EnergyScope>(), Ok(scope));
        }
    }
}
