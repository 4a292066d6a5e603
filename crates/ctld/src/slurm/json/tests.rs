//! The JSON readers on the real output of each release's daemons (crates/ctld/fixtures/slurm,
//! captured by scripts/capture-slurm-outputs): n1 busy (a 2-GPU job), n2 half busy (a 1-GPU
//! job, weight 7), n3 drained, n4 powered down; a job pending on resources (nice 100), one on
//! a dependency. The expected values are read off the captures.

use super::*;
use crate::slurm::{Form, Power, form_of};

const NODES_24_11: &str = include_str!("../../../fixtures/slurm/24.11/nodes.json");
const JOBS_24_11: &str = include_str!("../../../fixtures/slurm/24.11/squeue.json");
const NODES_26_05: &str = include_str!("../../../fixtures/slurm/26.05/nodes.json");
const JOBS_26_05: &str = include_str!("../../../fixtures/slurm/26.05/squeue.json");

/// The four nodes, the same on every release.
fn check_nodes(nodes: &[Node]) {
    let [n1, n2, n3, n4] = nodes else { panic!("{nodes:?}") };
    let names: Vec<&str> = nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["n1", "n2", "n3", "n4"]);
    assert_eq!(
        (n1.base.as_str(), n1.gpus, n1.alloc_gpus, n1.free_gpus(), n1.alloc_cpus),
        ("MIXED", 2, Some(2), 0, 1)
    );
    assert_eq!(n1.gpu_type.as_deref(), Some("h100"));
    assert_eq!(
        (n1.addr.as_str(), n1.partitions.clone()),
        ("127.0.0.1", vec!["lab".to_string(), "wattson".to_string()])
    );
    assert_eq!((n2.weight, n2.alloc_gpus, n2.free_gpus(), n2.power), (7, Some(1), 1, Power::On));
    assert_eq!(
        (n3.base.as_str(), n3.flags.clone(), n3.reason.as_str()),
        ("IDLE", vec!["DRAIN".to_string()], "capture drain")
    );
    assert!(n3.is_held_by_admin() && !n1.is_held_by_admin() && !n4.is_held_by_admin());
    assert_eq!(
        (n4.power, n4.flags.clone(), n4.is_idle()),
        (Power::Off, vec!["POWERED_DOWN".to_string()], true)
    );
    assert_eq!(n1.weight, 1);
}

/// The four jobs: ids and submission times (Unix s) as the capture gives them, read 30 s
/// after the running jobs started.
fn check_jobs(jobs: &[Job], ids: [u32; 4], submitted: [i64; 2]) {
    let by_id = |id: u32| jobs.iter().find(|j| j.id == id).unwrap_or_else(|| panic!("no job {id}: {jobs:?}"));
    assert_eq!(jobs.len(), 4, "{jobs:?}");
    let [busy, half, queued, waiting] = ids.map(by_id);
    assert_eq!(
        (busy.state, busy.gpus, busy.nodes.clone()),
        (Some(SlurmState::Running), 2, vec!["n1".to_string()])
    );
    assert_eq!((busy.submit, busy.limit_s, busy.priority, busy.nice), (submitted[0], Some(600.0), 1, 0));
    assert_eq!(busy.elapsed_s, 30.0);
    assert_eq!((half.gpus, half.nodes.clone()), (1, vec!["n2".to_string()]));
    assert!(busy.is_running() && half.is_running() && !queued.is_running());
    assert_eq!(
        (queued.state, queued.reason.as_str(), queued.gpus),
        (Some(SlurmState::Pending), "Resources", 2)
    );
    assert_eq!((queued.nice, queued.limit_s, queued.submit), (100, Some(300.0), submitted[1]));
    assert_eq!((queued.requested.clone(), queued.nodes.clone()), (vec!["n1".to_string()], vec![]));
    assert_eq!((queued.partitions.clone(), queued.elapsed_s), (vec!["lab".to_string()], 0.0));
    assert!(queued.is_queued());
    assert_eq!((waiting.reason.as_str(), waiting.gpus, waiting.limit_s), ("Dependency", 0, Some(60.0)));
    assert!(!waiting.is_queued() && waiting.requested.is_empty());
}

#[test]
fn nodes_of_24_11_and_26_05() {
    check_nodes(&parse_nodes(NODES_24_11).unwrap());
    check_nodes(&parse_nodes(NODES_26_05).unwrap());
}

#[test]
fn jobs_of_24_11_and_26_05() {
    // 30 s after the busy job started (1795692514 and 1795692543); jobs 1 to 3 had ended.
    check_jobs(&parse_jobs(JOBS_24_11, 1795692514 + 30).unwrap(), [4, 5, 6, 7], [1795692514, 1795692515]);
    check_jobs(&parse_jobs(JOBS_26_05, 1795692543 + 30).unwrap(), [4, 5, 6, 7], [1795692543, 1795692544]);
}

#[test]
fn the_json_and_text_of_one_release_read_the_same() {
    for (json, text) in [
        (NODES_24_11, include_str!("../../../fixtures/slurm/24.11/nodes.txt")),
        (NODES_26_05, include_str!("../../../fixtures/slurm/26.05/nodes.txt")),
    ] {
        assert_eq!(parse_nodes(json).unwrap(), crate::slurm::parse_nodes(text).unwrap());
    }
}

#[test]
fn errors_name_the_command() {
    let garbage = parse_nodes("not json").unwrap_err().to_string();
    assert!(garbage.starts_with("scontrol show node --json: unreadable JSON"), "{garbage}");
    let said = r#"{"jobs": [], "errors": [{"description": "Invalid user", "error_number": 1}]}"#;
    assert_eq!(parse_jobs(said, 0).unwrap_err().to_string(), "squeue --json: Slurm says: Invalid user");
    let bad = r#"{"jobs": [{"job_id": 7, "job_state": ["RUNNING"], "nodes": "n[1-", "priority": 1}]}"#;
    let error = parse_jobs(bad, 0).unwrap_err().to_string();
    assert!(error.starts_with("squeue --json: job 7: nodes \"n[1-\""), "{error}");
    let none = r#"{"jobs": [{"job_id": 8, "job_state": "PENDING"}]}"#;
    assert_eq!(parse_jobs(none, 0).unwrap_err().to_string(), "squeue --json: job 8: no priority");
}

#[test]
fn fields_slurm_adds_are_ignored_and_ended_jobs_left_out() {
    let text = r#"{"jobs": [
        {"job_id": 5, "job_state": ["COMPLETED"], "priority": 1},
        {"job_id": 6, "job_state": ["RUNNING", "CONFIGURING"], "priority": {"set": true, "infinite": false, "number": 3},
         "time_limit": {"set": true, "infinite": true, "number": 0}, "new_field": {"x": [1, 2]}, "nodes": "n[1-2]",
         "node_count": 2, "tres_per_node": "gres/gpu:4"}
    ], "future": true}"#;
    let jobs = parse_jobs(text, 0).unwrap();
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let job = &jobs[0];
    assert_eq!((job.id, job.state, job.priority, job.limit_s), (6, Some(SlurmState::Configuring), 3, None));
    assert_eq!((job.gpus, job.nodes.len()), (8, 2));
}

#[test]
fn the_form_follows_the_release_scontrol_names() {
    assert_eq!(form_of(include_str!("../../../fixtures/slurm/22.05/version.txt")), Form::Text);
    assert_eq!(form_of(include_str!("../../../fixtures/slurm/24.11/version.txt")), Form::Json);
    assert_eq!(form_of(include_str!("../../../fixtures/slurm/26.05/version.txt")), Form::Json);
    assert_eq!(form_of("slurm 23.02.7"), Form::Json);
    assert_eq!(form_of("slurm 22.05.11"), Form::Text);
    assert_eq!(form_of("something else"), Form::Text);
}

/// 22.05's `squeue --json` (OpenAPI v0.0.38: one-word states, plain numbers, a null nice for
/// 0), which the controller does not use (it reads 22.05's text), read as a check that the
/// reader takes the older shapes: the same jobs as 22.05's text gives.
#[test]
fn the_older_shapes_of_22_05s_squeue() {
    let jobs =
        parse_jobs(include_str!("../../../fixtures/slurm/22.05/squeue.json"), 1795692481 + 30).unwrap();
    let ids: Vec<u32> = jobs.iter().map(|j| j.id).collect();
    assert_eq!(ids, [4, 5, 6, 7], "jobs 1 to 3 had ended");
    let [busy, _, queued, waiting] = &jobs[..] else { panic!("{jobs:?}") };
    assert_eq!(
        (busy.state, busy.gpus, busy.elapsed_s, busy.limit_s),
        (Some(SlurmState::Running), 2, 30.0, Some(600.0))
    );
    assert_eq!(
        (busy.priority, busy.submit, busy.nodes.clone()),
        (4294901757, 1795692480, vec!["n1".to_string()])
    );
    assert_eq!(
        (queued.reason.as_str(), queued.gpus, queued.nice, queued.priority),
        ("Resources", 2, 100, 4294901655)
    );
    assert_eq!((waiting.reason.as_str(), waiting.nice, waiting.limit_s), ("Dependency", 0, Some(60.0)));
}
