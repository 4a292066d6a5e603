//! `wattson ctld` deciding co-location on a real Slurm (`[ctld] share_pairs`): one node, one
//! simulated H100 with 4 shards, all three plugins and wattsond. job_submit holds each
//! opted-in job; the controller releases it beside a running job the pair file lets it join
//! within both bounds, or on a GPU of its own, and never beside one that would break a bound.

use std::time::{Duration, Instant};

use wattson_harness::node::Node;
use wattson_harness::slurm_lab::{LabNode, SlurmLab};
use wattson_types::job::JobState;
use wattson_types::share::Split;

use super::ctld::{WATTSON, ctld_log, wait_live};
use super::shared_gpus::{assert_parts_add_up, lab_on, wait_recorded};

/// Measured on the site (this test's truth): `small` beside `small` 5% slower, `big` beside
/// `big` 50%.
const PAIRS: &str = "[[pair]]\njob = \"small\"\nwith = \"small\"\nslowdown = 0.05\n\
                     [[pair]]\njob = \"big\"\nwith = \"big\"\nslowdown = 0.5\n";

fn field(lab: &SlurmLab, id: u32, name: &str) -> String {
    lab.job_info(id).and_then(|j| j.fields.get(name).cloned()).unwrap_or_default()
}

/// Submits an opted-in 1-GPU job of workload `tag` with a 10% bound, running `secs`.
fn submit(lab: &SlurmLab, tag: &str, secs: u32) -> u32 {
    let tag = format!("--energy-tag={tag}");
    let args = ["--gres=gpu:1", "--energy-share=yes", "--energy=min-energy", "--energy-slowdown=10", &tag];
    lab.sbatch(&args, &format!("#!/bin/sh\nsleep {secs}\n")).unwrap()
}

fn wait_state(lab: &SlurmLab, id: u32, state: &str, what: &str) {
    let started = Instant::now();
    while lab.job_info(id).map(|j| j.state).unwrap_or_default() != state {
        assert!(started.elapsed() < Duration::from_secs(60), "{what}\n{}\n{}", ctld_log(lab), lab.all_logs());
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn opted_in_jobs_share_a_gpu_only_where_the_pair_file_keeps_both_within_bounds() {
    let work = tempfile::tempdir().unwrap();
    let (state, pairs) = (work.path().join("ctld.json"), work.path().join("pairs.toml"));
    std::fs::write(&pairs, PAIRS).unwrap();
    // job_submit, wattsond and the controller read one wattson.toml.
    let ctld = format!(
        "[ctld]\ninterval = \"1s\"\nmanage_power = false\nstate_file = {state:?}\nshare_pairs = {pairs:?}\n\
         [link]\npace = false\nsync_models = false\nsummaries = false\n"
    );
    let node =
        Node::with_sections(fake_nvml::Config::uniform("H100", 1), "200ms", "shards_per_gpu = 4\n", &ctld);
    let lab_node = LabNode { shards: 4, cpus: 4, ..LabNode::new("n1", 1, "h100") };
    let (node, lab) =
        lab_on(node, lab_node, false, "SchedulerParameters=batch_sched_delay=0,bf_interval=1\n");
    node.sim.set_load(0, 0.6).unwrap();

    // Without a live controller nothing is held (fail open): the job runs at once.
    let before = submit(&lab, "small", 1);
    assert!(
        !field(&lab, before, "AdminComment").contains("held=share"),
        "{}",
        field(&lab, before, "AdminComment")
    );
    assert_eq!(lab.wait_job(before, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());

    let command = wattson_harness::slurm_lab::release().command(&*WATTSON);
    let _ctld = wattson_harness::ctld::run_ctld(&lab, command, &node.config, &lab.dir().join("log/ctld.log"));
    wait_live(&lab, &state);

    // Two `small` jobs: the first starts alone on the free GPU, the second beside it.
    let a = submit(&lab, "small", 8);
    let comment = field(&lab, a, "AdminComment");
    assert!(
        comment.ends_with(",share=yes,shards=2,held=share") || comment.ends_with("released=share"),
        "{comment}"
    );
    wait_recorded(&node, &lab, a);
    let b = submit(&lab, "small", 8);
    wait_recorded(&node, &lab, b);
    assert_eq!(
        [a, b].map(|id| lab.job_info(id).unwrap().state),
        ["RUNNING", "RUNNING"],
        "{}",
        ctld_log(&lab)
    );
    assert!(
        field(&lab, b, "AdminComment").ends_with(",released=share"),
        "{}",
        field(&lab, b, "AdminComment")
    );
    // A `big` job comes while they run: no room, it waits, held.
    let c = submit(&lab, "big", 8);
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(lab.job_info(c).unwrap().state, "PENDING");
    assert!(field(&lab, c, "Reason").starts_with("JobHeld"), "{}", ctld_log(&lab));
    for id in [a, b] {
        assert_eq!(lab.wait_job(id, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    }
    // Once the GPU is free `big` starts alone; a second `big` would be 50% slower beside it
    // (bound 10%): it stays held until the first ends, with the GPU's other half free.
    wait_state(&lab, c, "RUNNING", "the big job starts once the GPU is free");
    wait_recorded(&node, &lab, c);
    let d = submit(&lab, "big", 1);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(lab.job_info(c).unwrap().state, "RUNNING");
    assert_eq!(lab.job_info(d).unwrap().state, "PENDING");
    assert!(field(&lab, d, "Reason").starts_with("JobHeld"), "{}", ctld_log(&lab));
    for id in [c, d] {
        assert_eq!(lab.wait_job(id, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    }

    let records: Vec<_> = [a, b].iter().map(|id| node.record(&id.to_string())).collect();
    for r in &records {
        assert_eq!(
            (r.state, r.gpus[0].index, r.split()),
            (JobState::Completed, 0, Some(Split::Equal)),
            "{}",
            r.key
        );
    }
    assert_parts_add_up(&node, &records);
    let (rc, rd) = (node.record(&c.to_string()), node.record(&d.to_string()));
    assert!(rd.begin_ns >= rc.end_ns.unwrap(), "the second big job began while the first ran");
    assert_eq!((rc.split(), rd.split()), (None, None), "each had the GPU alone");
    let log = ctld_log(&lab);
    assert_eq!(
        log.matches("release: beside the job the co-location model pairs it with").count(),
        1,
        "{log}"
    );
    assert_eq!(log.matches("release: on a GPU of its own").count(), 3, "{log}");
}
