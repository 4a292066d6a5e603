//! A job on four nodes of a configless Slurm, as sites run it: slurmctld serves the
//! configuration (`SlurmctldParameters=enable_configless`), each slurmd fetches it
//! (`--conf-server`, no slurm.conf of its own) in a namespace of its own, and finds wattson's
//! configuration where the node's package put it (`/etc/wattson/wattson.toml`, here each node's
//! own), with neither `SLURM_CONF` nor `WATTSON_CONFIG` set. The SPANK plugin, named in the
//! served plugstack.conf with no `config=`, registers the job with each node's own wattsond;
//! the energy plugin gives Slurm each node's energy, and `sacct` shows the job's sum.

use std::time::{Duration, Instant};

use wattson_harness::node::{self as common, Node};
use wattson_harness::slurm_lab::{self, LabNode, LabOptions, SlurmLab};

use super::slurm::{ENERGY_CONF, SACCT_MARGIN, energy_of};

/// Each node's GPU loads (2 GPUs each): only the job's GPU (the first Slurm gives) may count.
const LOADS: [[f64; 2]; 4] = [[0.9, 0.3], [0.6, 0.8], [0.5, 0.5], [0.7, 0.2]];

#[test]
fn a_four_node_job_on_a_configless_slurm_is_metered_by_each_nodes_own_wattsond() {
    let names = ["n1", "n2", "n3", "n4"];
    let mut daemons: Vec<Node> = names
        .iter()
        .map(|name| {
            let node = Node::new(fake_nvml::Config::uniform("H100", 2), "200ms");
            let text = std::fs::read_to_string(&node.config).unwrap();
            let named = text.replace("node_name = \"n1\"", &format!("node_name = \"{name}\""));
            std::fs::write(&node.config, named).unwrap();
            node
        })
        .collect();
    for d in &mut daemons {
        d.start();
    }
    let plugins = daemons[0].dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let built = common::build_plugins(false);
    let files = ["spank_wattson.so", "job_submit_wattson.so", "acct_gather_energy_wattson.so"];
    for (lib, plugin) in common::PLUGIN_LIBS.into_iter().zip(files) {
        slurm_lab::install_plugin(&built.join(lib), &plugins, plugin);
    }
    let nodes: Vec<LabNode> = names
        .iter()
        .zip(&daemons)
        .map(|(name, d)| LabNode { wattson_config: Some(d.config.clone()), ..LabNode::new(name, 2, "h100") })
        .collect();
    let lab = SlurmLab::start(LabOptions {
        nodes,
        // As a site's: the one plugstack.conf for every node, no path of a node in it.
        plugstack: Some(format!("required {}\n", plugins.join("spank_wattson.so").display())),
        job_submit_plugins: Some("wattson".into()),
        plugin_dir: Some(plugins),
        // slurmctld's job_submit (on the controller, which keeps its files).
        daemon_env: vec![("WATTSON_CONFIG".into(), daemons[0].config.display().to_string())],
        accounting: true,
        extra_conf: ENERGY_CONF.into(),
        configless: true,
        ..LabOptions::default()
    });
    // Every slurmd runs on what slurmctld served: no slurm.conf path on its command line, no
    // SLURM_CONF in its environment.
    for pid in lab.pids() {
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let args: Vec<&[u8]> = cmdline.split(|&b| b == 0).collect();
        if args.iter().any(|a| a.ends_with(b"slurmd")) {
            assert!(args.contains(&&b"--conf-server"[..]) && !args.contains(&&b"-f"[..]), "{args:?}");
        }
    }

    for (d, loads) in daemons.iter().zip(LOADS) {
        for (gpu, load) in loads.into_iter().enumerate() {
            d.sim.set_load(gpu as u32, load).unwrap();
        }
    }
    let done = lab.dir().join("jobs/work-done");
    let script = format!("#!/bin/sh\nsrun sleep 8\ntouch {}\nsleep 1\n", done.display());
    let id = lab.sbatch(&["-N", "4", "--gres=gpu:1", "--energy=min-energy"], &script).unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done.exists() {
        assert!(Instant::now() < deadline, "the job never did its work\n{}", lab.all_logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    for d in &daemons {
        for gpu in 0..2 {
            d.sim.set_load(gpu, 0.0).unwrap();
        }
    }
    let info = lab.wait_job(id, Duration::from_secs(60));
    assert_eq!(info.state, "COMPLETED", "{}", lab.all_logs());
    // job_submit decided on the controller; each node capped the job's GPU by that decision.
    assert!(info.get("AdminComment").contains("wattson:policy=min-energy"), "{:?}", info.fields);

    // Each node's wattsond has the job (ended by the plugin at the job's end) on its one GPU,
    // exact against that node's GPUs, and the step that ran there.
    let (mut jobs_j, mut steps_j) = (0.0, 0.0);
    for (name, d) in names.iter().zip(&daemons) {
        let deadline = Instant::now() + Duration::from_secs(30);
        let record = loop {
            let r = d.record(&id.to_string());
            if r.state == wattson_types::job::JobState::Completed {
                break r;
            }
            assert!(Instant::now() < deadline, "{name}: the job's record never ended: {r:?}\n{}", d.log());
            std::thread::sleep(Duration::from_millis(200));
        };
        assert_eq!(record.gpus.len(), 1, "{name}: {record:?}");
        let truth_j: f64 = d.truth_mj(&record).iter().sum::<f64>() / 1000.0;
        assert!(
            common::rel_err(record.energy_j(), truth_j) < 0.001,
            "{name}: {} J vs truth {truth_j} J",
            record.energy_j()
        );
        jobs_j += record.energy_j();
        steps_j += d.record(&format!("{id}.0")).energy_j();
    }

    // Slurm's figure sums the four nodes: between the nodes' steps and their whole jobs.
    let deadline = Instant::now() + Duration::from_secs(30);
    let slurm_j = loop {
        let out =
            lab.run_ok("sacct", &["-n", "-P", "-X", "-j", &id.to_string(), "-o", "JobID,ConsumedEnergyRaw"]);
        if let Some(j) = energy_of(&out, &id.to_string()).filter(|&j| j > 0) {
            break j as f64;
        }
        assert!(Instant::now() < deadline, "sacct shows no energy: {out}\n{}", lab.log("slurmdbd"));
        std::thread::sleep(Duration::from_millis(300));
    };
    println!("sacct {slurm_j} J; wattson: steps {steps_j:.1} J, jobs {jobs_j:.1} J on four nodes");
    assert!(
        slurm_j >= steps_j * (1.0 - SACCT_MARGIN) && slurm_j <= jobs_j * (1.0 + SACCT_MARGIN),
        "sacct {slurm_j} J outside the nodes' steps {steps_j} J and jobs {jobs_j} J\n{}",
        lab.all_logs()
    );
}
