//! `[energy] scope` on one node: a scope the node cannot measure is refused at start, a part
//! it lacks shows as not available (never zero), and with `scope = "node"` the BMC's DCMI
//! readings (a fake `ipmitool`) are integrated and shared between the jobs that ran.

use wattson_harness::node as common;

use std::path::Path;
use std::time::Duration;

use common::{Node, assert_ok};

/// Appends an `[energy]` section to `node`'s configuration.
fn with_energy(node: &Node, lines: &str) {
    let text = std::fs::read_to_string(&node.config).unwrap();
    std::fs::write(&node.config, format!("{text}\n[energy]\n{lines}")).unwrap();
}

/// `wattson acct` of `job`: its scope and each part (parsable cells).
fn parts(node: &Node, job: &str) -> Vec<String> {
    let out = node.wattson(&[
        "acct",
        "-j",
        job,
        "-n",
        "-P",
        "-o",
        "Scope,GPUEnergyRaw,CPUEnergyRaw,DRAMEnergyRaw,NodeEnergyRaw,EnergyRaw",
    ]);
    assert_ok(&out);
    String::from_utf8_lossy(&out.stdout).trim().split('|').map(str::to_string).collect()
}

#[test]
fn a_scope_the_node_cannot_measure_is_refused_and_a_part_it_lacks_is_not_available() {
    let mut node = Node::h100(1);
    let empty = node.dir.path().join("no-powercap");
    std::fs::create_dir_all(&empty).unwrap();
    let cpu = node.config_with(
        "cpu.toml",
        "[policy]",
        &format!("[energy]\nscope = \"gpu+cpu\"\npowercap = {empty:?}\n[policy]"),
    );
    let checked = common::check_config(&cpu);
    let said = String::from_utf8_lossy(&checked.stderr);
    assert!(!checked.status.success() && said.contains("no RAPL package zone"), "--check-config: {said}");
    let out = node.daemon_refusing(&cpu);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("no RAPL package zone") && said.contains("not available"),
        "{said}"
    );
    let bmc = node.config_with(
        "node.toml",
        "[policy]",
        "[energy]\nscope = \"node\"\nipmi_command = [\"/bin/false\"]\n[policy]",
    );
    let out = node.daemon_refusing(&bmc);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && said.contains("DCMI power reading is not available"), "{said}");

    // The default scope on a node without RAPL: the GPUs' energy, the other parts n/a.
    with_energy(&node, &format!("powercap = {empty:?}\n"));
    node.start();
    node.sim.set_load(0, 0.5).unwrap();
    node.begin("5", 0, "0");
    std::thread::sleep(Duration::from_millis(1500));
    node.end("5");
    let cells = parts(&node, "5");
    let gpu: f64 = cells[1].parse().unwrap();
    assert!(gpu > 100.0, "{cells:?}");
    assert_eq!(cells, ["gpu", &cells[1], "n/a", "n/a", "n/a", &cells[1]]);
}

/// A fake `ipmitool dcmi power reading` printing `watts` (rewritten by the test).
fn fake_ipmitool(dir: &Path, watts: u32) -> std::path::PathBuf {
    let reading = dir.join("dcmi.txt");
    std::fs::write(
        &reading,
        format!(
            "    Instantaneous power reading:                   {watts} Watts\n    \
             Minimum during sampling period:                 90 Watts\n    \
             Power reading state is:                  activated\n"
        ),
    )
    .unwrap();
    let script = dir.join("ipmitool");
    std::fs::write(&script, format!("#!/bin/sh\ncat {}\n", reading.display())).unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    script
}

#[test]
fn the_node_scope_integrates_the_bmcs_readings_and_shares_them_between_the_jobs_that_ran() {
    let mut node = Node::new(fake_nvml::Config::uniform("H100", 2), "100ms");
    let ipmitool = fake_ipmitool(node.dir.path(), 600);
    let empty = node.dir.path().join("no-powercap");
    std::fs::create_dir_all(&empty).unwrap();
    with_energy(&node, &format!("scope = \"node\"\nipmi_command = [{ipmitool:?}]\npowercap = {empty:?}\n"));
    node.start();
    // Job 1 alone for a second, then with job 2 for two, then alone again for one.
    node.begin("1", 0, "0");
    std::thread::sleep(Duration::from_millis(1000));
    node.begin("2", 0, "1");
    std::thread::sleep(Duration::from_millis(2000));
    node.end("2");
    std::thread::sleep(Duration::from_millis(1000));
    node.end("1");
    let (one, two) = (node.record("1"), node.record("2"));
    let s = |ns: i64| ns as f64 / 1e9;
    let (solo, together) = (
        s(two.begin_ns - one.begin_ns) + s(one.end_ns.unwrap() - two.end_ns.unwrap()),
        s(two.end_ns.unwrap() - two.begin_ns),
    );
    let expected = [600.0 * (solo + together / 2.0), 600.0 * together / 2.0];
    for (job, expected) in ["1", "2"].iter().zip(expected) {
        let cells = parts(&node, job);
        assert_eq!(
            (cells[0].as_str(), cells[2].as_str(), cells[3].as_str()),
            ("node", "n/a", "n/a"),
            "{cells:?}"
        );
        assert_eq!(cells[4], cells[5], "the scope's energy is the node's share (GPUs in it): {cells:?}");
        let got: f64 = cells[4].parse().unwrap();
        println!("job {job}: node share {got} J, expected {expected:.0} J");
        // Each boundary of a job's time may fall anywhere within one 100 ms sample: 60 J.
        assert!((got - expected).abs() <= 3.0 * 60.0, "job {job}: {got} J vs {expected:.0} J ({cells:?})");
    }
}
