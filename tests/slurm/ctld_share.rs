//! `wattson ctld` deciding co-location on a real Slurm (`[ctld] share_pairs`): one node, one
//! simulated H100 with 4 shards, all three plugins and wattsond. job_submit holds each
//! opted-in job; the controller releases it beside a running job the pair file lets it join
//! within both bounds, or on a GPU of its own, and never beside one that would break a bound;
//! a job whose partner ends before it starts gets its own node list back.

use std::time::{Duration, Instant};

use fake_nvml::ProcessLoad;
use wattson_harness::node::Node;
use wattson_harness::slurm_lab::{self, LabNode, SlurmLab};
use wattson_types::apportion::Split;
use wattson_types::job::JobState;

use wattson_harness::ctld::{job_pid, submit_shared};

use super::ctld::{Ctld, WATTSON, ctld_log, wait_live};
use super::shared_gpus::{assert_parts_add_up, lab_on, wait_recorded};

/// Measured on the site (this test's truth): `small` beside `small` 5% slower, `big` beside
/// `big` 50%.
pub(crate) const PAIRS: &str = "[[pair]]\njob = \"small\"\nwith = \"small\"\nslowdown = 0.05\n\
                     [[pair]]\njob = \"big\"\nwith = \"big\"\nslowdown = 0.5\n";

pub(crate) fn field(lab: &SlurmLab, id: u32, name: &str) -> String {
    lab.job_info(id).and_then(|j| j.fields.get(name).cloned()).unwrap_or_default()
}

/// Submits an opted-in 1-GPU job of workload `tag` with a 10% bound, running `secs`; the job
/// writes its shell's pid to `<job id>.pid` in the lab's job directory.
pub(crate) fn submit(lab: &SlurmLab, tag: &str, secs: u32) -> u32 {
    submit_bounded(lab, tag, secs, 10)
}

/// [`submit`] with a bound of `bound_pct`%.
pub(crate) fn submit_bounded(lab: &SlurmLab, tag: &str, secs: u32, bound_pct: u32) -> u32 {
    submit_shared(lab, tag, secs, bound_pct).unwrap()
}

/// The pid of job `id`'s shell.
pub(crate) fn pid_of(lab: &SlurmLab, id: u32) -> u32 {
    job_pid(lab, id).unwrap_or_else(|| panic!("job {id} wrote no pid\n{}", lab.all_logs()))
}

pub(crate) fn wait_state(lab: &SlurmLab, id: u32, state: &str, what: &str) {
    wait_field(lab, id, "JobState", |v| v == state, what);
}

/// One node with one H100 in 4 shards, wattsond and the plugins reading a wattson.toml whose
/// `[ctld]` names the pair file `pairs` (written into `work`), and where the controller's
/// state file goes.
fn share_lab(work: &std::path::Path, pairs: &str) -> (Node, SlurmLab, std::path::PathBuf) {
    share_lab_of(work, pairs, 1, "", "", "")
}

/// [`share_lab`] with `gpus` H100s of 4 shards each, `policy` added to `[policy]`,
/// `extra_conf` to slurm.conf and `extra_ctld` to `[ctld]`; no pair file where `pairs` is
/// empty.
pub(crate) fn share_lab_of(
    work: &std::path::Path,
    pairs: &str,
    gpus: u32,
    policy: &str,
    extra_conf: &str,
    extra_ctld: &str,
) -> (Node, SlurmLab, std::path::PathBuf) {
    let (state, pairs_file) = (work.join("ctld.json"), work.join("pairs.toml"));
    std::fs::write(&pairs_file, pairs).unwrap();
    let share_pairs =
        if pairs.is_empty() { String::new() } else { format!("share_pairs = {pairs_file:?}\n") };
    // job_submit, wattsond and the controller read one wattson.toml.
    let ctld = format!(
        "[ctld]\ninterval = \"1s\"\nmanage_power = false\nstate_file = {state:?}\n{share_pairs}{extra_ctld}"
    );
    let policy = format!("shards_per_gpu = 4\n{policy}");
    let node =
        Node::with_sections(fake_nvml::Config::uniform("H100", gpus as usize), "200ms", &policy, &ctld);
    let lab_node = LabNode { shards: 4 * gpus, cpus: 4 * gpus, ..LabNode::new("n1", gpus, "h100") };
    let addr = lab_node.addr.clone();
    let conf = format!("SchedulerParameters=batch_sched_delay=0,bf_interval=1\n{extra_conf}");
    let (mut node, lab) = lab_on(node, lab_node, false, &conf);
    // The controller asks wattsond for the records of jobs that shared a GPU, over the link
    // sealed by the lab's munged: wattsond starts again taking its requests.
    node.stop();
    let text = std::fs::read_to_string(&node.config).unwrap();
    let link = format!(
        "[link]\nlisten = \"{addr}:{port}\"\nport = {port}\nmunge_socket = {munge:?}\n\
         pace = false\nsync_models = false\nsummaries = false\n",
        port = slurm_lab::free_port(),
        munge = lab.dir().join("run/munge.sock"),
    );
    std::fs::write(&node.config, format!("{text}\n{link}")).unwrap();
    node.start();
    (node, lab, state)
}

/// A controller for the lab of [`share_lab_of`] (the lab's Slurm release), logging to the
/// lab's `log/ctld.log`.
pub(crate) fn share_ctld(lab: &SlurmLab, node: &Node) -> Ctld {
    let command = slurm_lab::release().command(&*WATTSON);
    wattson_harness::ctld::run_ctld(lab, command, &node.config, &lab.dir().join("log/ctld.log"))
}

/// [`share_ctld`] started again after one stopped, once it has rewritten its state file
/// `state` (20 s at most): it has read back what the one before it kept.
pub(crate) fn restart_ctld(lab: &SlurmLab, node: &Node, state: &std::path::Path) -> Ctld {
    let written = std::fs::metadata(state).unwrap().modified().unwrap();
    let ctld = share_ctld(lab, node);
    let started = Instant::now();
    while std::fs::metadata(state).unwrap().modified().unwrap() <= written {
        assert!(started.elapsed() < Duration::from_secs(20), "{}", ctld_log(lab));
        std::thread::sleep(Duration::from_millis(100));
    }
    ctld
}

/// What `wattson power status` prints for the lab of [`share_lab_of`].
pub(crate) fn power_status(lab: &SlurmLab, node: &Node) -> String {
    let status =
        lab.command(&*WATTSON).arg("-c").arg(&node.config).args(["power", "status"]).output().unwrap();
    String::from_utf8_lossy(&status.stdout).to_string()
}

/// Submits a 1-second job of workload `tag` (a `bound_pct`% bound) while job `running` runs
/// alone on the GPU: it stays held, with the GPU's other half free, until `running` ends, and
/// begins after it. Returns its id.
pub(crate) fn waits_held_beside(node: &Node, lab: &SlurmLab, running: u32, tag: &str, bound_pct: u32) -> u32 {
    wait_recorded(node, lab, running);
    let held = submit_bounded(lab, tag, 1, bound_pct);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(lab.job_info(running).unwrap().state, "RUNNING");
    assert_eq!(lab.job_info(held).unwrap().state, "PENDING");
    assert!(field(lab, held, "Reason").starts_with("JobHeld"), "{}", ctld_log(lab));
    for id in [running, held] {
        assert_eq!(lab.wait_job(id, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    }
    let (first, second) = (node.record(&running.to_string()), node.record(&held.to_string()));
    assert!(second.begin_ns >= first.end_ns.unwrap(), "job {held} began beside job {running}");
    held
}

/// Submits a `small` job running `secs`, then, once it has run a second (a job Slurm shows
/// run for 0 s is no partner yet: its nodes may still boot), a second one; both must run.
fn two_running(node: &Node, lab: &SlurmLab, secs: u32) -> [u32; 2] {
    let a = submit(lab, "small", secs);
    wait_recorded(node, lab, a);
    std::thread::sleep(Duration::from_secs(2));
    let b = submit(lab, "small", secs);
    wait_recorded(node, lab, b);
    let states = [a, b].map(|id| lab.job_info(id).unwrap().state);
    assert_eq!(states, ["RUNNING", "RUNNING"], "{}", ctld_log(lab));
    [a, b]
}

#[test]
fn opted_in_jobs_share_a_gpu_only_where_the_pair_file_keeps_both_within_bounds() {
    let work = tempfile::tempdir().unwrap();
    let (node, lab, state) = share_lab(work.path(), PAIRS);
    node.sim.set_load(0, 0.6).unwrap();

    // Without a live controller nothing is held (fail open): the job runs at once.
    let before = submit(&lab, "small", 1);
    assert!(
        !field(&lab, before, "AdminComment").contains("held=share"),
        "{}",
        field(&lab, before, "AdminComment")
    );
    assert_eq!(lab.wait_job(before, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());

    let _ctld = share_ctld(&lab, &node);
    wait_live(&lab, &state);

    // Two `small` jobs: the first starts alone on the free GPU, the second beside it.
    let [a, b] = two_running(&node, &lab, 8);
    let comment = field(&lab, a, "AdminComment");
    assert!(comment.ends_with(",share=yes,shards=2,released=share"), "{comment}");
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
    let d = waits_held_beside(&node, &lab, c, "big", 10);

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
    assert_eq!((rc.split(), rd.split()), (None, None), "each had the GPU alone");
    let log = ctld_log(&lab);
    assert_eq!(
        log.matches("release: beside the job the co-location model pairs it with").count(),
        1,
        "{log}"
    );
    assert_eq!(log.matches("release: on a GPU of its own").count(), 3, "{log}");
}

#[test]
fn with_share_first_a_job_joins_a_fitting_partner_though_a_gpu_of_its_own_is_free() {
    let work = tempfile::tempdir().unwrap();
    let (node, lab, state) = share_lab_of(work.path(), PAIRS, 2, "", "", "share_first = true\n");
    let _ctld = share_ctld(&lab, &node);
    wait_live(&lab, &state);

    // Two `small` jobs on a node of two GPUs: the first starts alone, the second beside it,
    // though the other GPU is free.
    let [a, b] = two_running(&node, &lab, 6);
    assert_eq!(field(&lab, b, "ReqNodeList"), "n1", "{}", ctld_log(&lab));
    for id in [a, b] {
        assert_eq!(lab.wait_job(id, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    }
    let records: Vec<_> = [a, b].iter().map(|id| node.record(&id.to_string())).collect();
    for r in &records {
        assert_eq!((r.gpus.len(), r.split()), (1, Some(Split::Equal)), "{}", r.key);
    }
    assert_eq!(records[0].gpus[0].index, records[1].gpus[0].index, "one GPU for both");
    assert_parts_add_up(&node, &records);
    let log = ctld_log(&lab);
    assert_eq!(
        log.matches("release: beside the job the co-location model pairs it with").count(),
        1,
        "{log}"
    );
    assert_eq!(log.matches("release: on a GPU of its own").count(), 1, "{log}");
}

#[test]
fn a_class_its_node_measured_slowed_over_its_bound_is_not_paired_again() {
    // The pair file says `pushy` beside `pushy` costs 5%; on this GPU it costs far more.
    let work = tempfile::tempdir().unwrap();
    let pairs = "[[pair]]\njob = \"pushy\"\nwith = \"pushy\"\nslowdown = 0.05\n";
    let (node, lab, state) = share_lab(work.path(), pairs);
    node.sim.set_load(0, 0.8).unwrap();
    let ctld = share_ctld(&lab, &node);
    wait_live(&lab, &state);

    // Job a runs alone with 80% of the SMs; job b is released beside it, and from then on
    // each gets 20%: a runs 4 times as slowly as alone (the fake driver's truth).
    let a = submit(&lab, "pushy", 14);
    wait_state(&lab, a, "RUNNING", "job a starts alone");
    wait_recorded(&node, &lab, a);
    let pa = pid_of(&lab, a);
    node.sim.set_processes(0, &[ProcessLoad { pid: pa, sm_pct: 80 }]).unwrap();
    let b = submit(&lab, "pushy", 5);
    wait_recorded(&node, &lab, b);
    let pb = pid_of(&lab, b);
    node.sim
        .set_processes(0, &[ProcessLoad { pid: pa, sm_pct: 20 }, ProcessLoad { pid: pb, sm_pct: 20 }])
        .unwrap();
    assert!(
        field(&lab, b, "AdminComment").ends_with(",released=share"),
        "{}",
        field(&lab, b, "AdminComment")
    );
    assert_eq!(lab.wait_job(b, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    node.sim.set_processes(0, &[ProcessLoad { pid: pa, sm_pct: 80 }]).unwrap();
    assert_eq!(lab.wait_job(a, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());

    // wattsond measured it; the controller asked for it and stops pairing `pushy`.
    let slowdown = node.record(&a.to_string()).gpus[0].meter.sm.and_then(|sm| sm.slowdown());
    assert!(slowdown.is_some_and(|s| s > 1.0), "job a's measured slowdown: {slowdown:?}");
    let started = Instant::now();
    while !ctld_log(&lab).contains("its class is paired no more") {
        assert!(started.elapsed() < Duration::from_secs(30), "{}", ctld_log(&lab));
        std::thread::sleep(Duration::from_millis(200));
    }
    // A controller started again remembers it (the state file keeps the tag).
    std::thread::sleep(Duration::from_secs(2));
    drop(ctld);
    let first_log = ctld_log(&lab);
    let saved: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&state).unwrap()).unwrap();
    assert_eq!(saved["share_broken"], serde_json::json!(["pushy"]), "{saved}");
    let status = power_status(&lab, &node);
    assert!(
        status.contains("co-location: paired no more (measured over a bound while sharing): pushy"),
        "{status}"
    );
    let _ctld = restart_ctld(&lab, &node, &state);

    // Two more `pushy` jobs: the first starts alone, the second, which the pair file alone
    // would have paired with it, waits held while the GPU's other half is free.
    let c = submit(&lab, "pushy", 8);
    wait_state(&lab, c, "RUNNING", "job c starts alone on the free GPU");
    waits_held_beside(&node, &lab, c, "pushy", 10);
    let log = first_log + &ctld_log(&lab);
    assert_eq!(
        log.matches("release: beside the job the co-location model pairs it with").count(),
        1,
        "only job b shared: {log}"
    );
}

/// Submits a job of workload `tag` at a 10% bound that needs 3 CPUs, and waits until the
/// controller releases it beside its partner on n1, where another job holds 2 of the 4 CPUs
/// and the partner 1: it then pends there, short of CPUs.
pub(crate) fn released_short_of_cpus(lab: &SlurmLab, tag: &str) -> u32 {
    let tag = format!("--energy-tag={tag}");
    let args = [
        "--gres=gpu:1",
        "--energy-share=yes",
        "--energy=min-energy",
        "--energy-slowdown=10",
        &tag,
        "-c",
        "3",
    ];
    let job = lab.sbatch(&args, "#!/bin/sh\nsleep 1\n").unwrap();
    wait_field(lab, job, "ReqNodeList", |v| v == "n1", "released beside its partner");
    job
}

/// Waits (a minute at most) until job `id`'s field `name` satisfies `ok`.
fn wait_field(lab: &SlurmLab, id: u32, name: &str, ok: impl Fn(&str) -> bool, what: &str) {
    let started = Instant::now();
    loop {
        let value = field(lab, id, name);
        if ok(&value) {
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{what}: {name}={value}\n{}\n{}",
            ctld_log(lab),
            lab.all_logs()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_job_released_beside_a_partner_that_ends_first_gets_its_own_node_list_back() {
    let work = tempfile::tempdir().unwrap();
    let (node, lab, state) = share_lab(work.path(), PAIRS);
    let _ctld = share_ctld(&lab, &node);
    wait_live(&lab, &state);

    // Of the node's 4 CPUs, a job without GPUs holds 2 and the partner 1.
    let cpus = lab.sbatch(&["-c", "2"], "#!/bin/sh\nsleep 120\n").unwrap();
    wait_state(&lab, cpus, "RUNNING", "the CPU job starts");
    let partner = submit(&lab, "small", 120);
    wait_recorded(&node, &lab, partner);
    // A `small` job of 3 CPUs pairs with it: released beside it (`ReqNodeList=n1`), it waits
    // for CPUs.
    let job = released_short_of_cpus(&lab, "small");
    assert!(field(&lab, job, "AdminComment").ends_with(",released=share"), "{}", ctld_log(&lab));
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(lab.job_info(job).unwrap().state, "PENDING");

    // The partner ends first: the node list the controller gave the job is taken back.
    lab.run_ok("scancel", &[&partner.to_string()]);
    wait_field(&lab, job, "ReqNodeList", |v| matches!(v, "" | "(null)"), "its node list given back");
    assert_eq!(lab.job_info(job).unwrap().state, "PENDING", "still short of CPUs");
    assert_eq!(
        ctld_log(&lab).matches("reqnodelist: its place beside its partner is gone").count(),
        1,
        "{}",
        ctld_log(&lab)
    );
    lab.run_ok("scancel", &[&cpus.to_string()]);
    assert_eq!(lab.wait_job(job, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
}
