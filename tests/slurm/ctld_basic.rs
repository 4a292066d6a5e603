//! ctld's queue order under Slurm's default `priority/basic`, which computes priorities
//! differently by release (measured): on 22.05 they fall by one per submission and a nice is
//! an offset on them; from 24.11 on every job has priority 1 and a negative nice sets it
//! (nice -10000 gives 10000). Either way the small job ctld ranks first starts first.

use std::time::{Duration, Instant};

use wattson_harness::slurm_lab::{self, LabNode, LabOptions, SlurmLab};

use super::ctld::{ctld_log, start_ctld};

#[test]
fn under_priority_basic_the_job_ctld_ranks_first_starts_first() {
    let nodes = ["n1", "n2"].iter().map(|n| LabNode::new(n, 2, "h100")).collect();
    let lab = SlurmLab::start(LabOptions { nodes, ..Default::default() });
    std::fs::write(
        lab.dir().join("etc/wattson.toml"),
        "[ctld]\ninterval = \"1s\"\nmanage_power = false\nweights = false\nqueue_order = \"response-ratio\"\n",
    )
    .unwrap();
    let info = |job: u32| lab.job_info(job).unwrap();
    let priority = |job: u32| -> u64 { info(job).get("Priority").parse().unwrap() };
    let until = |what: &str, done: &dyn Fn() -> bool| {
        let started = Instant::now();
        while !done() {
            assert!(started.elapsed() < Duration::from_secs(30), "{what}\n{}", ctld_log(&lab));
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let blocker = lab.sbatch(&["--gres=gpu:2", "-w", "n1", "-t", "10"], "sleep 300\n").unwrap();
    until("the blocker running", &|| info(blocker).state == "RUNNING");
    let large = lab.sbatch(&["--gres=gpu:2", "-w", "n1", "-t", "60"], "sleep 1\n").unwrap();
    let small = lab.sbatch(&["--gres=gpu:1", "-w", "n1", "-t", "1"], "sleep 5\n").unwrap();
    let before = (priority(large), priority(small));
    let mut ctld = start_ctld(&lab);
    until("the nice values set", &|| {
        info(small).get("Nice") == "-10000" && info(large).get("Nice") == "-5000"
    });
    let after = (priority(large), priority(small));
    if slurm_lab::release().name.is_some() {
        assert_eq!((before, after), ((1, 1), (5_000, 10_000)));
    } else {
        assert_eq!(before.0, before.1 + 1, "22.05: one apart per submission");
        assert_eq!((after.0 - before.0, after.1 - before.1), (5_000, 10_000));
    }
    lab.run_ok("scancel", &[&blocker.to_string()]);
    until("a pending job started", &|| info(small).state != "PENDING" || info(large).state != "PENDING");
    assert_eq!((info(small).state.as_str(), info(large).state.as_str()), ("RUNNING", "PENDING"));
    let _ = ctld.kill();
    let _ = ctld.wait();
    lab.run_ok("scancel", &[&large.to_string(), &small.to_string()]);
    lab.stop();
}
