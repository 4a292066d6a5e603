//! A CPU-only node: wattsond with `scope = "cpu"` opens no GPU library (the one configured does
//! not even exist), jobs that name no GPUs get records, and the node's RAPL energy (a fake
//! powercap tree this test advances) is divided among the jobs running at once by their CPU
//! time in Slurm's cgroups (a fake cgroup v1 tree this test writes); a job alone gets all of
//! it. With `scope = "node"` and neither GPUs nor RAPL, `--check-config` says what the node
//! can measure and the daemon runs on the BMC's readings.

use wattson_harness::cpu_node::{self, JobCgroupsV1};
use wattson_harness::node as common;

use std::time::Duration;

use common::{NOBODY, Node, assert_ok};

/// `wattson acct` of `job`: Scope, GPU, CPU, DRAM, node and scope energy (parsable cells).
fn parts(node: &Node, job: &str) -> Vec<String> {
    let fields = "Scope,GPUEnergyRaw,CPUEnergyRaw,DRAMEnergyRaw,NodeEnergyRaw,EnergyRaw";
    let out = node.wattson(&["acct", "-j", job, "-n", "-P", "-o", fields]);
    assert_ok(&out);
    String::from_utf8_lossy(&out.stdout).trim().split('|').map(str::to_string).collect()
}

/// A job's CPU and DRAM energy in its record, J, after checking what `wattson acct` shows of
/// it (whole joules there).
fn cpu_dram(node: &Node, job: &str) -> (f64, f64) {
    let share = node.record(job).node_share.unwrap_or_else(|| panic!("job {job} has no share"));
    let (cpu, dram) = (share.cpu_mj.unwrap() / 1000.0, share.dram_mj.unwrap() / 1000.0);
    let cells = parts(node, job);
    let number = |i: usize| cells[i].parse::<f64>().unwrap_or_else(|_| panic!("job {job}: {cells:?}"));
    assert_eq!((cells[0].as_str(), cells[4].as_str()), ("cpu", "n/a"), "job {job}: {cells:?}");
    assert!((number(2) - cpu).abs() <= 1.0 && (number(3) - dram).abs() <= 1.0, "{cells:?} vs {cpu}, {dram}");
    assert!((number(5) - cpu - dram).abs() <= 1.0, "the scope's energy is CPU + DRAM: {cells:?}");
    (cpu, dram)
}

const TICK: Duration = Duration::from_millis(20);

#[test]
fn cpu_only_jobs_share_the_rapl_energy_by_cgroup_cpu_time_and_a_lone_job_gets_all_of_it() {
    let dir = tempfile::tempdir().unwrap();
    let (powercap, cgroup) = (dir.path().join("powercap"), dir.path().join("cgroup"));
    let mut zones = cpu_node::rapl(&powercap);
    let cgroups = JobCgroupsV1::new(&cgroup);
    let mut node = Node::without_gpus(
        "100ms",
        "nvml_library = \"/nonexistent/libnvidia-ml.so.1\"\n",
        &format!("scope = \"cpu\"\npowercap = {powercap:?}\ncgroups = {cgroup:?}\n"),
    );
    node.start();
    // Per tick: the package draws 150 W, the DRAM 10 W.
    let tick = |zones: &mut [cpu_node::RaplZone; 2]| {
        zones[0].advance(3_000_000);
        zones[1].advance(200_000);
        std::thread::sleep(TICK);
    };
    let tick_ns = TICK.as_nanos() as u64;

    // Jobs 11 (root) and 12 (nobody) together for 2 s: 11 keeps one CPU busy, 12 half of one.
    node.begin("11", 0, "");
    node.begin("12", NOBODY, "");
    let (mut cpu11, mut cpu12) = (0, 0);
    for _ in 0..100 {
        cpu11 += tick_ns;
        cpu12 += tick_ns / 2;
        cgroups.set(0, 11, cpu11);
        cgroups.set(NOBODY, 12, cpu12);
        tick(&mut zones);
    }
    let together = (zones[0].truth_uj as f64 / 1e6, zones[1].truth_uj as f64 / 1e6);
    // Nothing drawn across a job's end: each interval's jobs are known exactly.
    std::thread::sleep(Duration::from_millis(300));
    cgroups.remove(NOBODY, 12);
    node.end("12");
    // Job 11 alone for 1 s.
    for _ in 0..50 {
        cpu11 += tick_ns;
        cgroups.set(0, 11, cpu11);
        tick(&mut zones);
    }
    std::thread::sleep(Duration::from_millis(300));
    node.end("11");
    let both = (zones[0].truth_uj as f64 / 1e6, zones[1].truth_uj as f64 / 1e6);
    let alone = (both.0 - together.0, both.1 - together.1);

    let (cpu_11, dram_11) = cpu_dram(&node, "11");
    let (cpu_12, dram_12) = cpu_dram(&node, "12");
    println!(
        "RAPL: {together:?} J together, {alone:?} J job 11 alone; job 11 {cpu_11} + {dram_11} J, \
         job 12 {cpu_12} + {dram_12} J"
    );
    let record = node.record("12");
    assert!(record.gpus.is_empty() && record.end_ns.is_some(), "{record:?}");
    // The parts add up to what RAPL counted, within 0.5%.
    let sum_err = common::rel_err(cpu_11 + cpu_12 + dram_11 + dram_12, both.0 + both.1);
    assert!(sum_err < 5e-3, "parts {} vs RAPL {} J", cpu_11 + cpu_12 + dram_11 + dram_12, both.0 + both.1);
    // Job 12 used a third of the CPU time while both ran: a third of that energy.
    assert!(common::rel_err(cpu_12, together.0 / 3.0) < 0.02, "job 12 CPU {cpu_12} vs {}", together.0 / 3.0);
    assert!(
        common::rel_err(dram_12, together.1 / 3.0) < 0.03,
        "job 12 DRAM {dram_12} vs {}",
        together.1 / 3.0
    );
    let expected_11 = 2.0 * together.0 / 3.0 + alone.0;
    assert!(common::rel_err(cpu_11, expected_11) < 0.02, "job 11 CPU {cpu_11} vs {expected_11}");

    // A job alone on the node from its begin to its end (a whole-node job): all of it, within
    // 0.1%.
    let before = zones[0].truth_uj + zones[1].truth_uj;
    node.begin("13", NOBODY, "");
    let mut cpu13 = 0;
    for _ in 0..50 {
        cpu13 += 2 * tick_ns;
        cgroups.set(NOBODY, 13, cpu13);
        tick(&mut zones);
    }
    std::thread::sleep(Duration::from_millis(300));
    node.end("13");
    let truth = (zones[0].truth_uj + zones[1].truth_uj - before) as f64 / 1e6;
    let (cpu_13, dram_13) = cpu_dram(&node, "13");
    println!("job 13 alone: {cpu_13} + {dram_13} J, RAPL {truth} J");
    assert!(common::rel_err(cpu_13 + dram_13, truth) < 1e-3, "{cpu_13} + {dram_13} vs {truth}");
    let log = node.log();
    assert!(!log.contains("libnvidia-ml") && !log.contains("GPUs found"), "no GPU library is opened:\n{log}");
}

#[test]
fn with_neither_gpus_nor_rapl_check_config_says_what_the_node_can_measure_and_the_node_scope_runs() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("no-powercap");
    std::fs::create_dir_all(&empty).unwrap();
    let reading = dir.path().join("dcmi.txt");
    std::fs::write(&reading, "    Instantaneous power reading:     300 Watts\n").unwrap();
    let energy = |scope: &str| {
        format!(
            "scope = \"{scope}\"\npowercap = {empty:?}\ncgroups = {:?}\nipmi_command = [\"/bin/cat\", {reading:?}]\n",
            dir.path().join("no-cgroups")
        )
    };
    // The CPU scope needs RAPL: refused, saying what the node can measure instead.
    let cpu = Node::without_gpus("100ms", "", &energy("cpu"));
    let out = common::check_config(&cpu.config);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{said}");
    assert!(said.contains("no RAPL package zone") && said.contains("can measure: scope \"node\""), "{said}");

    let mut node = Node::without_gpus("100ms", "", &energy("node"));
    let out = common::check_config(&node.config);
    assert_ok(&out);
    let said = String::from_utf8_lossy(&out.stdout);
    for line in [
        "GPUs: none (",
        "RAPL: none",
        "IPMI DCMI: the BMC's power reading is available",
        "can measure: scope \"node\"",
    ] {
        assert!(said.contains(line), "{line:?} missing:\n{said}");
    }
    node.start();
    node.begin("21", 0, "");
    std::thread::sleep(Duration::from_millis(1000));
    node.end("21");
    let cells = parts(&node, "21");
    assert_eq!((cells[0].as_str(), cells[2].as_str()), ("node", "n/a"), "{cells:?}");
    let record = node.record("21");
    let expected = 300.0 * (record.end_ns.unwrap() - record.begin_ns) as f64 / 1e9;
    let got: f64 = cells[5].parse().unwrap();
    // Alone on the node: the BMC's 300 W over its time, give or take a sample at each end.
    assert!((got - expected).abs() <= 2.0 * 30.0 + 1.0, "{got} J vs {expected} J ({cells:?})");
}
