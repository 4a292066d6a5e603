//! `wattson job-summary <id>` through the binary, on a node with simulated GPUs: the figures
//! are the job's record's, the setting is what the node gave its GPU, and the tariff and carbon
//! tables price it.

use wattson_harness::node as common;

use common::{Node, assert_ok};

fn line<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .unwrap_or_else(|| panic!("no {name}:\n{out}"))
}

#[test]
fn a_finished_jobs_summary_on_its_node() {
    let node = Node::h100(2);
    let flat = |v: &str| format!("[{}]", vec![v; 24].join(", "));
    let text = std::fs::read_to_string(&node.config).unwrap();
    std::fs::write(&node.config, format!("{text}\n[prices]\nhourly_utc = {}\n", flat("0.25"))).unwrap();
    let mut node = node;
    node.start();
    node.sim.set_load(0, 0.6).unwrap();
    node.begin("5", 0, "0");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    node.end("5");
    let record = node.record("5");

    let out = node.wattson(&["job-summary", "5", "--local"]);
    assert_ok(&out);
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(line(&out, "Job ID"), "5");
    assert_eq!(line(&out, "GPUs"), "1");
    // The energy in joules, as the record has it.
    let energy = line(&out, "GPU energy");
    let joules: f64 = energy.split('(').nth(1).unwrap().trim_end_matches("J)").parse().unwrap();
    assert!((joules - record.energy_j()).abs() <= 1.0, "{energy} vs {} J", record.energy_j());
    // Balanced under fixed shares: 85% of the H100's 700 W.
    assert_eq!(line(&out, "Setting"), "power limit 595 W on 1 GPU");
    assert!(line(&out, "Why").starts_with("policy balanced: the site's fixed share"), "{out}");
    let mean: f64 = line(&out, "Mean power").split(' ').next().unwrap().parse().unwrap();
    let expected = record.energy_j() / record.elapsed_s(0);
    assert!((mean - expected).abs() <= 1.0, "{mean} W vs {expected} W");
    let cost: f64 = line(&out, "Cost").parse().unwrap();
    assert!((cost - 0.25 * record.energy_j() / 3.6e6).abs() < 0.01, "{cost}");
    assert_eq!(line(&out, "CO2"), "n/a (no [carbon] table)");

    let missing = node.wattson(&["job-summary", "6", "--local"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("job 6 has no wattson record"), "{missing:?}");
}
