//! Nodes without GPUs: which GPU backend the daemon runs on for its energy scope (none at all
//! with `scope = "cpu"`; none where no GPU library loads with `scope = "node"`), and what a
//! node can measure, for `wattsond --check-config`.

use std::sync::Arc;

use tracing::warn;

use crate::node_energy::{NodeMeters, cgroup::JobCgroups, ipmi, rapl};
use wattson_config::Config;
use wattson_config::energy::{EnergyScope, NodeSplit};
use wattson_gpu::{GpuBackend, GpuError, GpuInfo, GpuSettings};
use wattson_types::energy::GpuReading;

/// The GPU backend of a node that has no GPUs: no devices, every call on one refused.
#[derive(Debug, Default)]
pub struct NoGpus;

impl NoGpus {
    fn none(index: u32) -> GpuError {
        GpuError::NotFound(format!("index {index} (this node runs without GPUs)"))
    }
}

impl GpuBackend for NoGpus {
    fn devices(&self) -> &[GpuInfo] {
        &[]
    }
    fn read(&self, index: u32) -> Result<GpuReading, GpuError> {
        Err(NoGpus::none(index))
    }
    fn settings(&self, index: u32) -> Result<GpuSettings, GpuError> {
        Err(NoGpus::none(index))
    }
    fn compute_processes(&self, index: u32) -> Result<Vec<u32>, GpuError> {
        Err(NoGpus::none(index))
    }
    fn set_power_limit(&self, index: u32, _mw: u32) -> Result<(), GpuError> {
        Err(NoGpus::none(index))
    }
    fn set_locked_clocks(&self, index: u32, _min_mhz: u32, _max_mhz: u32) -> Result<(), GpuError> {
        Err(NoGpus::none(index))
    }
    fn reset_locked_clocks(&self, index: u32) -> Result<(), GpuError> {
        Err(NoGpus::none(index))
    }
}

/// The GPUs the daemon runs on for `config`'s scope: `open` (the configured GPU library) for
/// `gpu` and `gpu+cpu`, whose figures need it; none for `cpu`, which never opens a GPU
/// library; for `node`, `open`'s GPUs where it succeeds and none (said) where it does not.
pub fn gpus(
    config: &Config,
    open: impl FnOnce() -> Result<Arc<dyn GpuBackend>, String>,
) -> Result<Arc<dyn GpuBackend>, String> {
    match config.energy.scope {
        EnergyScope::Cpu => Ok(Arc::new(NoGpus)),
        EnergyScope::Node => open().or_else(|e| {
            warn!(error = %e, "no GPU library: running without GPUs (scope = \"node\": each job's share of the node's energy, GPUs included)");
            Ok(Arc::new(NoGpus))
        }),
        EnergyScope::Gpu | EnergyScope::GpuCpu => open(),
    }
}

/// What this node can measure, one line each, for `wattsond --check-config`: its GPUs (or why
/// none), its RAPL zones, the BMC's reading, how jobs' shares are divided. An error where the
/// configured scope needs a meter besides the GPUs that the node lacks (as the start refuses
/// it), saying what it can measure; GPUs the scope needs but cannot find are a warning line
/// (the check passes on a node with neither GPUs nor RAPL, saying so).
pub fn measurable(
    config: &Config,
    open: impl FnOnce() -> Result<Arc<dyn GpuBackend>, String>,
) -> Result<Vec<String>, String> {
    let scope = config.energy.scope;
    let mut lines = Vec::new();
    let gpus = match scope {
        EnergyScope::Cpu => {
            lines.push("GPUs: not looked for (scope = \"cpu\" opens no GPU library)".to_string());
            0
        }
        _ => match open() {
            Ok(backend) => {
                let names: Vec<&str> = backend.devices().iter().map(|d| d.name.as_str()).collect();
                lines.push(format!("GPUs: {} ({})", names.len(), names.join(", ")));
                names.len()
            }
            Err(e) => {
                lines.push(format!("GPUs: none ({e})"));
                0
            }
        },
    };
    // Each meter on its own, whatever the scope reads; the scope's verdict after.
    let rapl = match rapl::Rapl::discover(&config.energy.powercap) {
        Ok(Some(r)) => {
            lines.push(format!(
                "RAPL: {} package zone(s), {} DRAM zone(s) in {}",
                r.zones().0,
                r.zones().1,
                config.energy.powercap.display()
            ));
            true
        }
        Ok(None) => {
            lines.push(format!("RAPL: none in {} (no CPU or DRAM energy)", config.energy.powercap.display()));
            false
        }
        Err(e) => {
            lines.push(format!("RAPL: cannot be read ({e})"));
            false
        }
    };
    let energy = &config.energy;
    let node =
        match ipmi::Ipmi::open(energy.ipmi_command.clone(), energy.ipmi_timeout, wattson_types::now_ns()) {
            Ok(_) => {
                lines.push(format!(
                    "IPMI DCMI: the BMC's power reading is available ({})",
                    energy.ipmi_command[0]
                ));
                true
            }
            Err(e) => {
                lines.push(format!("IPMI DCMI: not available ({}: {e})", energy.ipmi_command[0]));
                false
            }
        };
    let meters = NodeMeters::open(&config.energy, wattson_types::now_ns());
    let cgroups = JobCgroups::new(&config.energy.cgroups, &config.node_name());
    lines.push(match (config.energy.split, cgroups.found()) {
        (NodeSplit::Time, _) => "jobs' shares: by time (split = \"time\")".to_string(),
        (NodeSplit::CpuTime, Some((layout, at))) => {
            format!("jobs' shares: by CPU time, from Slurm's job cgroups ({layout:?}) in {}", at.display())
        }
        (NodeSplit::CpuTime, None) => format!(
            "jobs' shares: by CPU time once Slurm makes its job cgroups under {} (none yet: \
             TaskPlugin=task/cgroup or ProctrackType=proctrack/cgroup); by time until then",
            config.energy.cgroups.display()
        ),
    });
    let can: Vec<&str> = [(gpus > 0, "gpu"), (gpus > 0 && rapl, "gpu+cpu"), (rapl, "cpu"), (node, "node")]
        .into_iter()
        .filter_map(|(ok, name)| ok.then_some(name))
        .collect();
    let can_text = match can.is_empty() {
        true => "nothing (no GPUs, no RAPL zones, no DCMI power reading)".to_string(),
        false => format!("scope {}", can.iter().map(|s| format!("\"{s}\"")).collect::<Vec<_>>().join(", ")),
    };
    lines.push(format!("this node can measure: {can_text}"));
    if scope.needs_gpus() && gpus == 0 {
        lines.push(format!(
            "warning: scope = \"{}\" needs GPUs, and none is seen: wattsond will not start with it \
             here (a node without GPUs: scope = \"cpu\" or \"node\")",
            scope.as_str()
        ));
    }
    match meters {
        Err(e) => Err(format!("{e}\n{}", lines.join("\n"))),
        Ok(_) => Ok(lines),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(text: &str) -> Config {
        Config::parse(text, "w.toml").unwrap()
    }

    fn no_library() -> Result<Arc<dyn GpuBackend>, String> {
        Err("cannot load libnvidia-ml.so.1".to_string())
    }

    #[test]
    fn the_cpu_scope_opens_no_gpu_library_and_the_node_scope_runs_without_one() {
        let cpu = config("[energy]\nscope = \"cpu\"\n");
        let got = gpus(&cpu, || panic!("scope = \"cpu\" must not open a GPU library")).unwrap();
        assert!(got.devices().is_empty());
        assert!(matches!(got.read(0), Err(GpuError::NotFound(_))));
        let node = config("[energy]\nscope = \"node\"\n");
        assert!(gpus(&node, no_library).unwrap().devices().is_empty());
        for scope in ["gpu", "gpu+cpu"] {
            let c = config(&format!("[energy]\nscope = \"{scope}\"\n"));
            assert_eq!(gpus(&c, no_library).err().as_deref(), Some("cannot load libnvidia-ml.so.1"));
        }
    }

    #[test]
    fn check_config_says_what_a_node_without_gpus_or_rapl_can_measure() {
        let dir = tempfile::tempdir().unwrap();
        let (pc, cg) = (dir.path().join("powercap"), dir.path().join("cgroup"));
        std::fs::create_dir_all(&pc).unwrap();
        let reading = dir.path().join("dcmi");
        std::fs::write(&reading, "Instantaneous power reading: 250 Watts\n").unwrap();
        let energy = |scope: &str| {
            format!(
                "[energy]\nscope = \"{scope}\"\npowercap = {pc:?}\ncgroups = {cg:?}\n\
                 ipmi_command = [\"/bin/cat\", {reading:?}]\n"
            )
        };
        // Neither GPUs nor RAPL: the node scope passes, and says so.
        let lines = measurable(&config(&energy("node")), no_library).unwrap();
        let text = lines.join("\n");
        assert!(text.contains("GPUs: none (cannot load"), "{text}");
        assert!(text.contains("RAPL: none"), "{text}");
        assert!(text.contains("this node can measure: scope \"node\""), "{text}");
        assert!(text.contains("by time until then"), "{text}");
        // The CPU scope there is refused, saying what the node can measure instead.
        let e = measurable(&config(&energy("cpu")), no_library).unwrap_err();
        assert!(e.contains("no RAPL package zone") && e.contains("can measure: scope \"node\""), "{e}");
        let text = measurable(&config(&energy("gpu")), no_library).unwrap().join("\n");
        assert!(text.contains("can measure: scope \"node\"") && text.contains("will not start"), "{text}");
        // Without the BMC either: nothing, and said.
        let none = energy("gpu").replace(&format!("{reading:?}"), "\"/nonexistent\"");
        let text = measurable(&config(&none), no_library).unwrap().join("\n");
        assert!(text.contains("can measure: nothing (no GPUs, no RAPL zones, no DCMI"), "{text}");
        // With RAPL zones and Slurm's v1 cgroups.
        let zone = pc.join("intel-rapl:0");
        std::fs::create_dir_all(&zone).unwrap();
        for (file, text) in [("name", "package-0"), ("max_energy_range_uj", "1000"), ("energy_uj", "5")] {
            std::fs::write(zone.join(file), text).unwrap();
        }
        std::fs::create_dir_all(cg.join("cpuacct/slurm")).unwrap();
        let text = measurable(&config(&energy("cpu")), || panic!("no GPU library")).unwrap().join("\n");
        assert!(text.contains("RAPL: 1 package zone(s), 0 DRAM zone(s) in"), "{text}");
        assert!(text.contains("by CPU time, from Slurm's job cgroups (V1)"), "{text}");
        assert!(text.contains("can measure: scope \"cpu\""), "{text}");
    }
}
