//! `wattson ctld` learning co-location on a real Slurm (`[ctld] share_learn`, no pair file):
//! one node, one simulated H100 with 4 shards, the plugins and wattsond. The fake GPU runs
//! each pair at the SM shares the test sets (its truth); wattsond measures each job's rate
//! alone and shared, the controller asks for the records over the link and learns the pair:
//! a pair measured within the bounds is paired again where the controller would not try an
//! unknown pair, and one measured over a bound is never tried again, also after a restart. A
//! job released to try a pair keeps its place beside its partner while it waits to start.

use std::time::{Duration, Instant};

use fake_nvml::ProcessLoad;
use wattson_harness::node::Node;
use wattson_harness::slurm_lab::SlurmLab;

use super::ctld::{ctld_log, wait_live};
use super::ctld_share::{
    PAIRS, field, pid_of, power_status, released_short_of_cpus, restart_ctld, share_ctld, share_lab_of,
    submit_bounded, wait_state, waits_held_beside,
};
use super::shared_gpus::wait_recorded;

/// Runs a pair on the GPU: job `a` of workload `tag` alone at 80% of the SMs, job `b` released
/// beside it (`bound_pct` each), then each at `shared_pct`% until `b` ends, `a` alone at 80%
/// again until it ends. Returns `[a, b]`.
fn run_pair(node: &Node, lab: &SlurmLab, tag: &str, bound_pct: u32, shared_pct: u32) -> [u32; 2] {
    let a = submit_bounded(lab, tag, 14, bound_pct);
    wait_state(lab, a, "RUNNING", "job a starts alone");
    wait_recorded(node, lab, a);
    let pa = pid_of(lab, a);
    node.sim.set_processes(0, &[ProcessLoad { pid: pa, sm_pct: 80 }]).unwrap();
    std::thread::sleep(Duration::from_secs(2));
    let b = submit_bounded(lab, tag, 5, bound_pct);
    wait_recorded(node, lab, b);
    let pb = pid_of(lab, b);
    let shared = [ProcessLoad { pid: pa, sm_pct: shared_pct }, ProcessLoad { pid: pb, sm_pct: shared_pct }];
    node.sim.set_processes(0, &shared).unwrap();
    assert!(field(lab, b, "AdminComment").ends_with(",released=share"), "{}", ctld_log(lab));
    assert_eq!(lab.wait_job(b, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    node.sim.set_processes(0, &[ProcessLoad { pid: pa, sm_pct: 80 }]).unwrap();
    assert_eq!(lab.wait_job(a, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    [a, b]
}

/// Waits (30 s at most) until the controller's log says `what` `times` times.
fn wait_logged(lab: &SlurmLab, what: &str, times: usize) {
    let started = Instant::now();
    while ctld_log(lab).matches(what).count() < times {
        assert!(started.elapsed() < Duration::from_secs(30), "no {what:?}:\n{}", ctld_log(lab));
        std::thread::sleep(Duration::from_millis(200));
    }
}

const BESIDE: &str = "release: beside the job the co-location model pairs it with";

#[test]
fn pairs_learned_from_the_nodes_measurements_steer_the_next_pairing() {
    // No pair data; an unknown pair is tried only where both bounds reach 20%.
    let work = tempfile::tempdir().unwrap();
    let ctld_conf = "share_learn = true\nshare_try_bound = 0.2\n";
    let (node, lab, state) = share_lab_of(work.path(), "", 1, "", "", ctld_conf);
    node.sim.set_load(0, 0.8).unwrap();
    let ctld = share_ctld(&lab, &node);
    wait_live(&lab, &state);

    // Two `calm` jobs of 30% bounds: a trial. Beside each other each runs at 76% of the SMs
    // against 80% alone, 5.3% slower: within the bounds, learned.
    run_pair(&node, &lab, "calm", 30, 76);
    wait_logged(&lab, "measured pair slowdown within the job's bound; learned", 1);
    let learned = |tag: &str| {
        let saved: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
        let pairs = saved["share_learned"].as_array().cloned().unwrap_or_default();
        pairs.iter().find(|p| p["job"] == tag && p["with"] == tag).and_then(|p| p["slowdown"].as_f64())
    };
    let started = Instant::now();
    while learned("calm").is_none() {
        assert!(started.elapsed() < Duration::from_secs(10), "{}", ctld_log(&lab));
        std::thread::sleep(Duration::from_millis(200));
    }
    let calm = learned("calm").unwrap();
    assert!((0.02..0.06).contains(&calm), "80% alone, 76% shared: about 5.3% slower, measured {calm}");

    // Two `calm` jobs of 10% bounds: no unknown pair is tried at 10%, yet the measured pair
    // keeps both within 10%: paired again.
    run_pair(&node, &lab, "calm", 10, 76);
    assert_eq!(ctld_log(&lab).matches(BESIDE).count(), 2);

    // Two `pushy` jobs of 30% bounds: a trial; beside each other each gets 10% of the SMs,
    // eight times as slow: the first one's run is over its bound, the pair shares no more.
    run_pair(&node, &lab, "pushy", 30, 10);
    wait_logged(&lab, "measured pair slowdown over the job's bound; the pair shares no more", 1);

    // A controller started again remembers both (the state file keeps them).
    std::thread::sleep(Duration::from_secs(2));
    drop(ctld);
    let first_log = ctld_log(&lab);
    let _ctld = restart_ctld(&lab, &node, &state);
    let status = power_status(&lab, &node);
    assert!(
        status.contains("co-location: pairs that share no more (measured over a bound): pushy beside pushy"),
        "{status}"
    );
    assert!(status.contains("calm beside calm +"), "{status}");

    // Two more `pushy` jobs of 30% bounds: the second, which a trial would have paired, waits
    // held while the GPU's other half is free.
    let c = submit_bounded(&lab, "pushy", 8, 30);
    wait_state(&lab, c, "RUNNING", "job c starts alone on the free GPU");
    waits_held_beside(&node, &lab, c, "pushy", 30);
    let log = first_log + &ctld_log(&lab);
    assert_eq!(log.matches(BESIDE).count(), 3, "only the three pairs above shared: {log}");
}

#[test]
fn a_job_released_to_try_a_pair_keeps_its_place_while_it_waits_for_cpus() {
    // No pair data; an unknown pair is tried where both bounds reach 10%.
    let work = tempfile::tempdir().unwrap();
    let ctld_conf = "share_learn = true\nshare_try_bound = 0.1\n";
    let (node, lab, state) = share_lab_of(work.path(), "", 1, "", "", ctld_conf);
    let _ctld = share_ctld(&lab, &node);
    wait_live(&lab, &state);
    // Of the node's 4 CPUs, a job without GPUs holds 2 and the partner 1.
    let cpus = lab.sbatch(&["-c", "2"], "#!/bin/sh\nsleep 120\n").unwrap();
    wait_state(&lab, cpus, "RUNNING", "the CPU job starts");
    let partner = submit_bounded(&lab, "calm", 60, 10);
    wait_recorded(&node, &lab, partner);
    // A `calm` job of 3 CPUs is released beside it to try the pair, and waits for CPUs.
    let job = released_short_of_cpus(&lab, "calm");
    // Five of the controller's loops later it still has its place: its own trial, which keeps
    // other `calm` jobs off the partner, does not keep it off.
    std::thread::sleep(Duration::from_secs(5));
    assert_eq!(lab.job_info(job).unwrap().state, "PENDING", "short of CPUs");
    assert_eq!(field(&lab, job, "ReqNodeList"), "n1", "{}", ctld_log(&lab));
    assert!(!field(&lab, job, "ExcNodeList").contains("n1"), "{}", ctld_log(&lab));
    assert!(!ctld_log(&lab).contains("its place beside its partner is gone"), "{}", ctld_log(&lab));
    // CPUs free: it starts beside its partner.
    lab.run_ok("scancel", &[&cpus.to_string()]);
    assert_eq!(lab.wait_job(job, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    assert!(field(&lab, job, "AdminComment").ends_with(",released=share"));
    assert_eq!(ctld_log(&lab).matches(BESIDE).count(), 1, "{}", ctld_log(&lab));
}

#[test]
fn a_job_that_tried_a_new_tag_shares_again_only_with_that_tag_until_its_record_is_read() {
    // `small` beside `small` is in the pair file (5%); a new tag is tried where both bounds
    // reach 10%.
    let work = tempfile::tempdir().unwrap();
    let ctld_conf = "share_learn = true\nshare_try_bound = 0.1\n";
    let (node, lab, state) = share_lab_of(work.path(), PAIRS, 1, "", "", ctld_conf);
    let _ctld = share_ctld(&lab, &node);
    wait_live(&lab, &state);
    // Job a (small) runs 20 s; job b, of a tag never seen, is released beside it to try the
    // pair, and ends first.
    let a = submit_bounded(&lab, "small", 20, 10);
    wait_recorded(&node, &lab, a);
    std::thread::sleep(Duration::from_secs(2));
    let b = submit_bounded(&lab, "fresh", 3, 10);
    wait_recorded(&node, &lab, b);
    assert!(field(&lab, b, "AdminComment").ends_with(",released=share"), "{}", ctld_log(&lab));
    assert_eq!(lab.wait_job(b, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    // A `small` job would join job a by the pair file, and job a's record, read at its end,
    // would then teach nothing of `small` beside `fresh`: it waits held until job a ends.
    waits_held_beside(&node, &lab, a, "small", 10);
    assert_eq!(ctld_log(&lab).matches(BESIDE).count(), 1, "{}", ctld_log(&lab));
}
