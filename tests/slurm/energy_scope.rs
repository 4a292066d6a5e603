//! `[energy] scope = "gpu+cpu"` on real Slurm: the job's `ConsumedEnergy` in `sacct` and its
//! energy in `wattson acct` are its GPUs' energy (simulated GPUs) plus the CPU packages' and
//! DRAM's RAPL energy (a fake powercap tree this test advances, its counters wrapping past
//! their range), each within 0.1% of what the fakes drew.

use wattson_harness::node as common;
use wattson_harness::slurm_lab;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::{Node, assert_ok};
use slurm_lab::{LabNode, LabOptions, SlurmLab};

/// slurm.conf for Slurm's energy accounting fed by wattson (docs/slurm.md).
const ENERGY_CONF: &str = "AcctGatherEnergyType=acct_gather_energy/wattson\nJobAcctGatherType=jobacct_gather/linux\n\
                           JobAcctGatherFrequency=task=1\nPrologFlags=Alloc,Contain";

/// One RAPL zone of the fake tree: its counter, its range, and the energy the test has made
/// it count (µJ, the truth).
struct Zone {
    dir: PathBuf,
    range_uj: u64,
    counter_uj: u64,
    truth_uj: u64,
}

impl Zone {
    fn new(dir: PathBuf, name: &str, range_uj: u64, counter_uj: u64) -> Zone {
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("name"), format!("{name}\n")).unwrap();
        std::fs::write(dir.join("max_energy_range_uj"), format!("{range_uj}\n")).unwrap();
        let zone = Zone { dir, range_uj, counter_uj, truth_uj: 0 };
        zone.publish();
        zone
    }

    /// Counts `uj` more, wrapping to zero at the range as the kernel's counter does.
    fn advance(&mut self, uj: u64) {
        self.counter_uj = (self.counter_uj + uj) % self.range_uj;
        self.truth_uj += uj;
        self.publish();
    }

    /// Writes the counter whole (a rename: a reader never sees half a number).
    fn publish(&self) {
        let tmp = self.dir.join("energy_uj.new");
        std::fs::write(&tmp, format!("{}\n", self.counter_uj)).unwrap();
        std::fs::rename(&tmp, self.dir.join("energy_uj")).unwrap();
    }
}

/// A wattsond (not started) on 2 simulated H100s that draw nothing idle, metering `gpu+cpu`
/// from the powercap tree at `powercap`.
fn node(powercap: &Path) -> Node {
    let mut gpus = fake_nvml::Config::uniform("H100", 2);
    for gpu in &mut gpus.gpu {
        gpu.idle_w = Some(0.0);
    }
    let node = Node::new(gpus, "200ms");
    let text = std::fs::read_to_string(&node.config).unwrap();
    std::fs::write(&node.config, format!("{text}\n[energy]\nscope = \"gpu+cpu\"\npowercap = {powercap:?}\n"))
        .unwrap();
    node
}

#[test]
fn sacct_and_wattson_acct_give_gpu_plus_cpu_energy_within_a_thousandth_of_the_fakes() {
    let rapl = tempfile::tempdir().unwrap();
    let root = rapl.path().join("powercap");
    // Package 0 starts 100 J below its range and DRAM 5 J below its own: both wrap in the job.
    let mut zones = [
        Zone::new(root.join("intel-rapl:0"), "package-0", 3_000_000_000, 2_900_000_000),
        Zone::new(root.join("intel-rapl:0/intel-rapl:0:0"), "dram", 1_000_000_000, 995_000_000),
        Zone::new(root.join("intel-rapl:1"), "package-1", 262_143_328_850, 12_345_678),
    ];
    // Per 100 ms: 180 W and 120 W for the packages, 40 W for the DRAM.
    let step_uj = [18_000_000, 4_000_000, 12_000_000];
    let mut d = node(&root);
    let plugins = d.dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let built = common::build_plugins(false);
    slurm_lab::install_plugin(&built.join(common::PLUGIN_LIBS[2]), &plugins, "acct_gather_energy_wattson.so");
    let lab = SlurmLab::start(LabOptions {
        nodes: vec![LabNode {
            env: vec![("WATTSON_CONFIG".into(), d.config.display().to_string())],
            ..LabNode::new("n1", 2, "h100")
        }],
        plugin_dir: Some(plugins),
        accounting: true,
        extra_conf: ENERGY_CONF.into(),
        ..LabOptions::default()
    });
    d.start();

    // Both GPUs busy: only the job's may count.
    d.sim.set_load(0, 0.9).unwrap();
    d.sim.set_load(1, 0.4).unwrap();
    let dir = d.dir.path().display().to_string();
    let id = lab
        .sbatch(&["--gres=gpu:1"], &format!("#!/bin/sh\nsleep 10\ntouch {dir}/done-$SLURM_JOB_ID\nsleep 2\n"))
        .unwrap();
    let done = d.dir.path().join(format!("done-{id}"));
    lab.wait_running(id, Duration::from_secs(60));
    // What the SPANK prolog does, by hand: the job's GPU 0 begins on wattsond.
    d.begin(&id.to_string(), 0, "0");
    // The CPUs draw from a sample after the begin until the work is done: all of it the job's.
    std::thread::sleep(Duration::from_millis(500));
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done.exists() {
        assert!(Instant::now() < deadline, "the job never finished its work");
        for (zone, uj) in zones.iter_mut().zip(step_uj) {
            zone.advance(uj);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    for gpu in 0..2 {
        d.sim.set_load(gpu, 0.0).unwrap();
    }
    assert!(zones[0].truth_uj > 100_000_000 && zones[1].truth_uj > 5_000_000, "both counters wrapped");
    assert_eq!(lab.wait_job(id, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    d.end(&id.to_string());
    let record = d.record(&id.to_string());
    let gpu_j: f64 = d.truth_mj(&record).iter().sum::<f64>() / 1000.0;
    let cpu_j = (zones[0].truth_uj + zones[2].truth_uj) as f64 / 1e6;
    let dram_j = zones[1].truth_uj as f64 / 1e6;
    let truth_j = gpu_j + cpu_j + dram_j;

    let sacct =
        || lab.run_ok("sacct", &["-n", "-P", "-X", "-j", &id.to_string(), "-o", "JobID,ConsumedEnergyRaw"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let slurm_j: f64 = loop {
        let out = sacct();
        let energy = out
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{id}|")))
            .and_then(|e| e.trim().parse::<f64>().ok())
            .filter(|&e| e > 0.0);
        if let Some(e) = energy {
            break e;
        }
        assert!(Instant::now() < deadline, "sacct shows no energy: {out}\n{}", lab.log("slurmdbd"));
        std::thread::sleep(Duration::from_millis(300));
    };
    let out = d.wattson(&[
        "acct",
        "-j",
        &id.to_string(),
        "-n",
        "-P",
        "-o",
        "JobID,Scope,GPUEnergyRaw,CPUEnergyRaw,DRAMEnergyRaw,NodeEnergyRaw,EnergyRaw",
    ]);
    assert_ok(&out);
    let row = String::from_utf8_lossy(&out.stdout).trim().to_string();
    println!(
        "truth: GPU {gpu_j:.1} J + CPU {cpu_j:.1} J + DRAM {dram_j:.1} J = {truth_j:.1} J; sacct {slurm_j} J; \
         wattson acct {row}"
    );
    let cells: Vec<&str> = row.split('|').collect();
    assert_eq!(cells[..2], [id.to_string().as_str(), "gpu+cpu"], "{row}");
    assert_eq!(cells[5], "n/a", "no IPMI here: the node's part is not available, not zero: {row}");
    let number = |i: usize| cells[i].parse::<f64>().unwrap_or_else(|_| panic!("{row}"));
    // Whole joules: within a joule of each part, and the scope within 0.1% of the truth.
    assert!((number(2) - gpu_j).abs() <= 1.0 + 1e-3 * gpu_j, "GPU {row} vs {gpu_j}");
    assert!((number(3) - cpu_j).abs() <= 1.0, "CPU {row} vs {cpu_j}");
    assert!((number(4) - dram_j).abs() <= 1.0, "DRAM {row} vs {dram_j}");
    assert!(common::rel_err(number(6), truth_j) < 1e-3, "wattson acct {row} vs truth {truth_j} J");
    assert!(common::rel_err(slurm_j, truth_j) < 1e-3, "sacct {slurm_j} J vs truth {truth_j} J");
    // The CPU's part weighs: a GPU-only figure would miss by far more than the tolerance.
    assert!(cpu_j + dram_j > 0.1 * truth_j, "{cpu_j} + {dram_j} of {truth_j}");
    lab.stop();
}
