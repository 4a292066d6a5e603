//! Slurm as sites run it: `proctrack/cgroup`, `task/cgroup,task/affinity` and
//! `ConstrainDevices=yes` (the harness's `LabOptions::cgroups`, cgroup v1 on these machines).
//! A job may open only its own GPUs' device files, and its processes sit in the cgroup path
//! wattsond reads to tell the jobs on a shared GPU apart (`.../uid_<uid>/job_<id>/...`).

use std::time::Duration;

use wattson_harness::slurm_lab::{LabNode, LabOptions, SlurmLab};

#[test]
fn under_task_cgroup_a_job_opens_only_its_own_gpus_device_files() {
    let lab = SlurmLab::start(LabOptions {
        nodes: vec![LabNode::new("n1", 4, "h100")],
        cgroups: true,
        ..LabOptions::default()
    });
    let devices = lab.gpu_devices("n1");
    assert_eq!(devices.len(), 4);
    // Opening a fake GPU the job may use fails with ENXIO (no driver behind the number);
    // one the device cgroup denies fails with EPERM before any driver is asked.
    let mut script = String::from("#!/bin/sh\necho \"gpus=$SLURM_JOB_GPUS\"\n");
    for (i, dev) in devices.iter().enumerate() {
        script.push_str(&format!("echo {i}=$(head -c 0 {} 2>&1 || true)\n", dev.display()));
    }
    script.push_str("grep -E ':devices:' /proc/self/cgroup\n");
    let id = lab.sbatch(&["--gres=gpu:2"], &script).unwrap();
    let info = lab.wait_job(id, Duration::from_secs(60));
    assert_eq!(info.state, "COMPLETED", "{}", lab.all_logs());
    let out = lab.job_output(id);
    let gpus: Vec<usize> = out
        .lines()
        .find_map(|l| l.strip_prefix("gpus="))
        .unwrap_or_else(|| panic!("{out}"))
        .split(',')
        .map(|g| g.trim().parse().unwrap())
        .collect();
    assert_eq!(gpus.len(), 2, "{out}");
    for i in 0..4 {
        let said =
            out.lines().find_map(|l| l.strip_prefix(&format!("{i}="))).unwrap_or_else(|| panic!("{out}"));
        if gpus.contains(&i) {
            assert!(said.contains("No such device or address"), "GPU {i} is the job's: {said}\n{out}");
        } else {
            assert!(said.contains("Operation not permitted"), "GPU {i} is not the job's: {said}\n{out}");
        }
    }
    // The cgroup path wattsond attributes a process by: a job_<id> right under uid_<uid>.
    let line = out.lines().find(|l| l.contains(":devices:")).unwrap_or_else(|| panic!("{out}"));
    assert!(line.contains(&format!("/uid_0/job_{id}/")), "{line}");
}
