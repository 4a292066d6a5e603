//! GPU energy in Slurm's own accounting across nodes: a real Slurm (slurmdbd on a private
//! MariaDB) with two GPU nodes, each slurmd with `acct_gather_energy/wattson` talking to its own
//! wattsond on simulated GPUs. Slurm sums a job's nodes: the job's `sacct` energy is the sum of
//! what each node's wattsond metered for it.

mod common;
mod slurm_lab;

use std::time::{Duration, Instant};

use common::Node;
use slurm_lab::{LabNode, LabOptions, SlurmLab};

/// slurm.conf for Slurm's energy accounting fed by wattson (docs/slurm.md).
const ENERGY_CONF: &str = "AcctGatherEnergyType=acct_gather_energy/wattson\nJobAcctGatherType=jobacct_gather/linux\n\
                           JobAcctGatherFrequency=task=1\nPrologFlags=Alloc,Contain";

/// A wattsond on 2 simulated H100s that calls itself `name`.
fn node(name: &str) -> Node {
    let mut node = Node::h100(2);
    let text = std::fs::read_to_string(&node.config).unwrap();
    std::fs::write(&node.config, text.replace("node_name = \"n1\"", &format!("node_name = \"{name}\"")))
        .unwrap();
    node.start();
    node
}

#[test]
fn a_two_node_jobs_sacct_energy_is_the_sum_of_both_nodes() {
    let daemons = [node("n1"), node("n2")];
    let plugins = daemons[0].dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let built = common::build_plugins(false);
    slurm_lab::install_plugin(&built.join(common::PLUGIN_LIBS[2]), &plugins, "acct_gather_energy_wattson.so");
    let nodes: Vec<LabNode> = ["n1", "n2"]
        .iter()
        .zip(&daemons)
        .map(|(name, d)| LabNode {
            env: vec![("WATTSON_CONFIG".into(), d.config.display().to_string())],
            ..LabNode::new(name, 2, "h100")
        })
        .collect();
    let lab = SlurmLab::start(LabOptions {
        nodes,
        plugin_dir: Some(plugins),
        accounting: true,
        extra_conf: ENERGY_CONF.into(),
        ..LabOptions::default()
    });
    // Every GPU busy, at different loads: only the job's GPU on each node may count.
    for (d, loads) in daemons.iter().zip([[0.9, 0.3], [0.6, 0.8]]) {
        for (gpu, load) in loads.into_iter().enumerate() {
            d.sim.set_load(gpu as u32, load).unwrap();
        }
    }
    let done = daemons[0].dir.path().join("work-done");
    let script = format!("#!/bin/sh\nsleep 10\ntouch {}\nsleep 1\n", done.display());
    let id = lab.sbatch(&["-N", "2", "--gres=gpu:1"], &script).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while lab.job_info(id).is_none_or(|j| j.state != "RUNNING") {
        assert!(Instant::now() < deadline, "job {id} never ran\n{}", lab.all_logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    // What the SPANK prolog does on each node (here by hand: one plugstack for both nodes of
    // this lab would name one wattsond): the job's GPU 0 begins on each node's wattsond.
    for d in &daemons {
        d.begin(&id.to_string(), 0, "0");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done.exists() {
        assert!(Instant::now() < deadline, "the job never finished its work");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The work is done: the GPUs go idle, as real ones do when the job's processes exit.
    for d in &daemons {
        for gpu in 0..2 {
            d.sim.set_load(gpu, 0.0).unwrap();
        }
    }
    assert_eq!(lab.wait_job(id, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    let per_node: Vec<f64> = daemons
        .iter()
        .map(|d| {
            d.end(&id.to_string());
            d.record(&id.to_string()).energy_j()
        })
        .collect();
    let wattson_j: f64 = per_node.iter().sum();
    let sacct = || {
        lab.run_ok(
            "sacct",
            &["-n", "-P", "-X", "-j", &id.to_string(), "-o", "JobID,NNodes,ConsumedEnergyRaw"],
        )
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let slurm_j: f64 = loop {
        let out = sacct();
        let energy = out
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{id}|2|")))
            .and_then(|e| e.trim().parse::<f64>().ok())
            .filter(|&e| e > 0.0);
        if let Some(e) = energy {
            break e;
        }
        assert!(Instant::now() < deadline, "sacct shows no energy: {out}\n{}", lab.log("slurmdbd"));
        std::thread::sleep(Duration::from_millis(300));
    };
    println!(
        "sacct {slurm_j} J; wattson n1 {:.1} J + n2 {:.1} J = {wattson_j:.1} J",
        per_node[0], per_node[1]
    );
    // Both nodes weigh (0.9 and 0.6 of 700 W): a node left out would miss by 40% or more.
    assert!(per_node.iter().all(|&e| e > 0.3 * wattson_j), "{per_node:?}");
    assert!(common::rel_err(slurm_j, wattson_j) < 0.005, "sacct {slurm_j} J vs wattson {wattson_j} J");
    lab.stop();
}
