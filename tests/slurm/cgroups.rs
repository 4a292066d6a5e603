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

/// The lab's other way, kept for sites that still run it: `proctrack/linuxproc` and
/// `task/none` (no cgroups). A capped job there is accounted exactly too.
#[test]
fn under_linuxproc_and_no_task_plugin_a_capped_job_is_accounted_exactly() {
    let (node, options) = crate::slurm::plugged_options(
        wattson_harness::node::Node::h100(4),
        LabNode::new("n1", 4, "h100"),
        false,
        "",
        &[],
        false,
        "",
    );
    let lab = SlurmLab::start(LabOptions { cgroups: false, ..options });
    let conf = std::fs::read_to_string(lab.dir().join("etc/slurm.conf")).unwrap();
    assert!(
        conf.contains("ProctrackType=proctrack/linuxproc") && conf.contains("TaskPlugin=task/none"),
        "{conf}"
    );
    node.sim.set_load(0, 0.7).unwrap();
    let submitted = wattson_types::now_ns();
    let id = lab.sbatch(&["--gres=gpu:1", "--energy=min-energy"], "#!/bin/sh\nsleep 3\n").unwrap();
    let info = lab.wait_job(id, Duration::from_secs(60));
    let finished = wattson_types::now_ns();
    assert_eq!(info.state, "COMPLETED", "{}", lab.all_logs());
    let record = node.record(&id.to_string());
    assert_eq!(record.state, wattson_types::job::JobState::Completed);
    let around = wattson_harness::node::Bracket(submitted, finished);
    wattson_harness::node::assert_exact(&node, &record, around, around, 0.001);
}
