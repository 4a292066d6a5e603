//! wattson without plugins (README, "Then have Slurm tell wattsond about each job"): the shipped
//! Prolog and Epilog scripts (`etc/slurm/prolog-wattson.sh`, `epilog-wattson.sh`) run by a real
//! slurmd with the lines of `etc/slurm/slurm.conf.snippet`, each script as shipped but for the
//! path of the `wattson` program. A job with GPUs gets its record, its energy exact against the
//! fake GPUs' truth; a job without GPUs gets none and runs; with wattsond down a job still runs.

use std::path::Path;
use std::time::Duration;

use wattson_harness::node::{self as common, Node};
use wattson_harness::slurm_lab::{LabNode, LabOptions, SlurmLab};

/// The shipped script `name` (from etc/slurm/), written to `dir` with `wattson` as its program.
fn shipped_script(name: &str, dir: &Path, wattson: &Path) -> String {
    let text =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("etc/slurm").join(name)).unwrap();
    assert!(text.contains("/usr/bin/wattson job "), "{name} runs /usr/bin/wattson");
    let path = dir.join(name);
    std::fs::write(&path, text.replace("/usr/bin/wattson", &wattson.display().to_string())).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path.display().to_string()
}

#[test]
fn the_shipped_prolog_and_epilog_record_each_gpu_jobs_energy_exactly() {
    let mut node = Node::h100(4);
    node.start();
    let wattson = wattson_harness::programs::program("wattson");
    let scripts = tempfile::tempdir().unwrap();
    let prolog = shipped_script("prolog-wattson.sh", scripts.path(), &wattson);
    let epilog = shipped_script("epilog-wattson.sh", scripts.path(), &wattson);
    // The snippet's lines, with these scripts in place of its directories.
    let snippet =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("etc/slurm/slurm.conf.snippet"))
            .unwrap();
    assert!(snippet.contains("PrologFlags=Alloc,Contain"), "{snippet}");
    let lab = SlurmLab::start(LabOptions {
        nodes: vec![LabNode::new("n1", 4, "h100")],
        extra_conf: format!("PrologFlags=Alloc,Contain\nProlog={prolog}\nEpilog={epilog}\n"),
        ..LabOptions::default()
    });
    // Every wattson program finds wattson.toml beside Slurm's slurm.conf (docs/slurm.md).
    std::fs::copy(&node.config, lab.dir().join("etc/wattson.toml")).unwrap();

    for gpu in 0..4 {
        node.sim.set_load(gpu, 0.3 + 0.1 * f64::from(gpu)).unwrap();
    }
    let submitted = wattson_types::now_ns();
    let id = lab.sbatch(&["--gres=gpu:2"], "#!/bin/sh\nsleep 2\n").unwrap();
    let info = lab.wait_job(id, Duration::from_secs(60));
    assert_eq!(info.state, "COMPLETED", "{}", lab.all_logs());
    let finished = wattson_types::now_ns();
    // The Epilog has run by the time Slurm shows the job completed; wattsond closed the record.
    let record = node.record(&id.to_string());
    assert_eq!(record.state, wattson_types::job::JobState::Completed, "{record:?}");
    assert_eq!(record.gpus.len(), 2, "{record:?}");
    let around = common::Bracket(submitted, finished);
    common::assert_exact(&node, &record, around, around, 0.001);

    // No GPUs, no record, and the job runs.
    let cpu = lab.sbatch(&[], "#!/bin/sh\ntrue\n").unwrap();
    assert_eq!(lab.wait_job(cpu, Duration::from_secs(60)).state, "COMPLETED");
    let listed =
        node.wattson(&["acct", "--local", "-a", "-n", "-X", "-P", "-o", "JobID", "-j", &cpu.to_string()]);
    assert!(String::from_utf8_lossy(&listed.stdout).trim().is_empty(), "{listed:?}");

    // wattsond down: the scripts fail open, the job runs.
    node.stop();
    let unmetered = lab.sbatch(&["--gres=gpu:1"], "#!/bin/sh\ntrue\n").unwrap();
    assert_eq!(lab.wait_job(unmetered, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
}
