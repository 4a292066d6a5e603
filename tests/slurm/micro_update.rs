//! A micro update of Slurm under wattson (docs/install.md, "Slurm updates"): slurmctld, slurmd
//! and the clients of the next micro release (the lab's own Slurm renumbered, see the harness's
//! `slurm_lab::micro`), with wattson's three plugins built for the installed release. Slurm
//! refuses its own plugins at the old number, so the number it checks really changed; both
//! daemons still come up with wattson's plugins, each of the two version-checked plugins says
//! so in one line, and a job is decided, capped and accounted in `sacct` as before.

use std::time::Duration;

use wattson_harness::node::Node;
use wattson_harness::slurm_lab::{LabNode, LabOptions, SlurmLab, micro::MicroRelease};

use super::slurm::{ENERGY_CONF, SACCT_MARGIN, energy_of, plugged_options};

#[test]
fn after_a_micro_update_both_daemons_start_with_wattsons_plugins_which_say_so_and_work() {
    let copy = tempfile::Builder::new().prefix("slurm-micro-").tempdir().unwrap();
    let update = MicroRelease::make(copy.path());
    let built_for = wattson_slurm::slurm_version();
    // GPUs that draw nothing idle, loaded while the job works: Slurm's last poll and wattsond's
    // end of the record are a moment apart, and idle draw then would count in one figure only.
    let mut gpus = fake_nvml::Config::uniform("H100", 4);
    for gpu in &mut gpus.gpu {
        gpu.idle_w = Some(0.0);
    }
    let (node, options) = plugged_options(
        Node::new(gpus, "200ms"),
        LabNode::new("n1", 4, "h100"),
        false,
        "",
        &[],
        true,
        ENERGY_CONF,
    );
    // SlurmLab::start panics, with the daemons' logs, unless slurmctld and slurmd come up.
    let lab = SlurmLab::start(LabOptions { micro_release: Some(update.clone()), ..options });
    let said = lab.run_ok("scontrol", &["-V"]);
    assert_eq!(said.split_whitespace().last(), Some(update.version.as_str()), "{said}");
    if wattson_harness::slurm_lab::release().name.is_none() {
        assert_eq!(update.from, built_for, "the plugins are built for the installed release");
    }

    // The renumbered Slurm refuses a plugin at the installed number: a client of it, given the
    // installed plugin directory, cannot load its authentication plugin.
    let installed = wattson_harness::slurm_lab::system_plugin_dir();
    let conf = std::fs::read_to_string(lab.conf()).unwrap();
    let old_plugins: String = conf
        .lines()
        .map(|l| {
            if l.starts_with("PluginDir=") {
                format!("PluginDir={}\n", installed.display())
            } else {
                format!("{l}\n")
            }
        })
        .collect();
    let old_conf = lab.dir().join("etc/slurm-installed-plugins.conf");
    std::fs::write(&old_conf, old_plugins).unwrap();
    let mut ping = lab.command("scontrol");
    ping.env("SLURM_CONF", &old_conf).arg("ping");
    let refused = wattson_harness::slurm_lab::run_with_timeout(&mut ping, Duration::from_secs(30)).unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&refused.stdout), String::from_utf8_lossy(&refused.stderr));
    assert!(
        text.contains("Incompatible"),
        "the renumbered client loaded a plugin of {}: {text}",
        update.from
    );

    // A job: decided by job_submit, capped on its GPUs by the SPANK plugin and wattsond, its
    // energy in sacct from the energy plugin.
    for gpu in 0..4 {
        node.sim.set_load(gpu, 0.8).unwrap();
    }
    let done = node.dir.path().join("work-done");
    let script = format!("#!/bin/sh\nsleep 3\ntouch {}\nsleep 1\n", done.display());
    let id = lab.sbatch(&["--gres=gpu:2", "--energy=min-energy"], &script).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while !done.exists() {
        assert!(std::time::Instant::now() < deadline, "the job never did its work\n{}", lab.all_logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    for gpu in 0..4 {
        node.sim.set_load(gpu, 0.0).unwrap();
    }
    let info = lab.wait_job(id, Duration::from_secs(60));
    assert_eq!(info.state, "COMPLETED", "{}", lab.all_logs());
    let comment = info.get("AdminComment");
    assert!(comment.starts_with("wattson:policy=min-energy"), "job_submit decided nothing: {comment}");
    let record = node.record(&id.to_string());
    assert!(record.gpus.len() == 2 && record.energy_j() > 0.0, "{record:?}");
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let slurm_j = loop {
        let out =
            lab.run_ok("sacct", &["-n", "-P", "-X", "-j", &id.to_string(), "-o", "JobID,ConsumedEnergyRaw"]);
        if let Some(j) = energy_of(&out, &id.to_string()).filter(|&j| j > 0) {
            break j as f64;
        }
        assert!(std::time::Instant::now() < deadline, "sacct shows no energy: {out}\n{}", lab.all_logs());
        std::thread::sleep(Duration::from_millis(300));
    };
    // Between wattson's batch step and its job, as in the sacct test (tests/slurm/slurm.rs).
    let batch_j = node.record(&format!("{id}.batch")).energy_j();
    assert!(
        slurm_j >= batch_j * (1.0 - SACCT_MARGIN) && slurm_j <= record.energy_j() * (1.0 + SACCT_MARGIN),
        "sacct {slurm_j} J outside wattson's batch step {batch_j} J and job {} J",
        record.energy_j()
    );

    // One line each from the two plugins whose version Slurm checks to the micro, in the
    // daemon that loads them; Slurm itself refused nothing.
    let line = |plugin: &str| {
        format!("{plugin} was built for Slurm {} and runs in Slurm {}", update.from, update.version)
    };
    let ctld = lab.log("slurmctld");
    assert_eq!(ctld.matches(&line("job_submit_wattson.so")).count(), 1, "{ctld}");
    let slurmd = lab.log("slurmd-n1");
    assert_eq!(slurmd.matches(&line("acct_gather_energy_wattson.so")).count(), 1, "{slurmd}");
    for log in [&ctld, &slurmd] {
        assert!(!log.contains("Incompatible"), "{log}");
    }
}
