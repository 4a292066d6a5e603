//! GPUs that several jobs hold at once (shards, MPS, oversubscription): each job keeps its own
//! record, the GPU's energy is divided among them by the documented rule and adds up to the
//! GPU's counter, and no job's setting is applied to a GPU another job holds.

use wattson_harness::node as common;

use std::process::{Child, Command};
use std::thread::sleep;
use std::time::Duration;

use common::{Node, assert_ok, rel_err};
use fake_nvml::ProcessLoad;
use wattson_harness::vendor::Vendor;
use wattson_types::apportion::Split;
use wattson_types::job::{JobRecord, JobState};

per_vendor!(
    jobs_sharing_a_gpu_each_keep_their_record_divided_equally_without_process_figures,
    a_gpu_shared_by_two_jobs_runs_at_its_defaults_whatever_each_asked,
);

const EXACT: f64 = 0.001; // 0.1 %

/// `wattson job begin` for a job that Slurm lets share its GPUs (a shard, MPS).
fn begin_shared(node: &Node, job: &str, uid: u32, gpus: &str) {
    let uid = uid.to_string();
    assert_ok(&node.wattson(&["job", "begin", "--job", job, "--uid", &uid, "--gpus", gpus, "--shares-gpus"]));
}

fn secs(s: f64) {
    sleep(Duration::from_secs_f64(s));
}

/// The instants (ns) at which the simulated GPU 0 served the first and last counter values of
/// `record`'s meter.
fn instants(node: &Node, record: &JobRecord) -> (i64, i64) {
    node.read_intervals(record)[0]
}

fn truth(node: &Node, from: i64, to: i64) -> f64 {
    node.sim.truth_energy_mj(0, from, to).unwrap()
}

fn assert_near(job: &str, got: f64, want: f64) {
    assert!(
        rel_err(got, want) < EXACT,
        "job {job}: {got} mJ, expected {want} mJ (rel. error {:e})",
        rel_err(got, want)
    );
}

/// The sum of the records' energy on GPU 0 equals the GPU's counter difference from the first
/// reading to the last, to the millijoule.
fn assert_adds_up(records: &[&JobRecord]) {
    let first = records.iter().map(|r| r.gpus[0].meter.begin_counter_mj.unwrap()).min().unwrap();
    let last = records.iter().map(|r| r.gpus[0].meter.last.energy_mj.unwrap()).max().unwrap();
    let sum: f64 = records.iter().map(|r| r.gpus[0].meter.energy_mj).sum();
    assert_eq!(sum, (last - first) as f64, "the parts add up to the GPU's counter difference");
}

fn jobs_sharing_a_gpu_each_keep_their_record_divided_equally_without_process_figures(vendor: Vendor) {
    let mut node = Node::gpus_of(vendor, 1);
    node.start();
    node.sim.set_load(0, 0.6).unwrap();
    begin_shared(&node, "20", 1000, "0");
    secs(0.5);
    // Slurm gives GPU 0 to job 21 too (a shard of it).
    begin_shared(&node, "21", 1001, "0");
    assert_eq!(node.record("20").state, JobState::Running, "job 20 keeps running on its shared GPU");
    secs(0.5);
    node.sim.set_load(0, 0.9).unwrap();
    begin_shared(&node, "22", 1002, "0");
    secs(0.4);
    node.end("22");
    // A third job ending on the GPU ends neither of the others.
    assert_eq!(node.record("20").state, JobState::Running);
    assert_eq!(node.record("21").state, JobState::Running);
    secs(0.4);
    node.end("20");
    secs(0.3);
    node.end("21");
    assert!(!node.log().contains("never reported"));

    let (r20, r21, r22) = (node.record("20"), node.record("21"), node.record("22"));
    for r in [&r20, &r21, &r22] {
        assert_eq!(r.state, JobState::Completed);
        assert_eq!(r.gpus[0].meter.split, Some(Split::Equal), "{}", r.key);
    }
    let (t0, t4) = instants(&node, &r20);
    let (t1, t5) = instants(&node, &r21);
    let (t2, t3) = instants(&node, &r22);
    assert!(t0 < t1 && t1 < t2 && t2 < t3 && t3 < t4 && t4 < t5);
    let (a, b, c, d, e) = (
        truth(&node, t0, t1),
        truth(&node, t1, t2),
        truth(&node, t2, t3),
        truth(&node, t3, t4),
        truth(&node, t4, t5),
    );
    assert_near("20", r20.gpus[0].meter.energy_mj, a + b / 2.0 + c / 3.0 + d / 2.0);
    assert_near("21", r21.gpus[0].meter.energy_mj, b / 2.0 + c / 3.0 + d / 2.0 + e);
    assert_near("22", r22.gpus[0].meter.energy_mj, c / 3.0);
    assert_near("all", r20.energy_mj() + r21.energy_mj() + r22.energy_mj(), truth(&node, t0, t5));
    assert_adds_up(&[&r20, &r21, &r22]);
    // The split is in the record and in `wattson acct`.
    let out = node.wattson(&["acct", "-j", "20,21", "-o", "JobID,Split", "-P"]);
    assert_ok(&out);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert_eq!(text.lines().collect::<Vec<_>>(), vec!["JobID|Split", "20|equal", "21|equal"], "{text}");
}

/// A process that claims to belong to Slurm job `job` through its environment.
fn process_of(job: u32) -> Child {
    Command::new("sleep").arg("30").env("SLURM_JOB_ID", job.to_string()).spawn().unwrap()
}

#[test]
fn jobs_sharing_a_gpu_are_divided_by_their_processes_sm_share() {
    let mut node = Node::h100(1);
    node.start();
    node.sim.set_load(0, 0.8).unwrap();
    let (mut p40, mut p41, mut p40b) = (process_of(40), process_of(41), process_of(40));
    // Root (uid 0) owns the test's processes: jobs 40 and 41 are root's.
    let processes = [
        ProcessLoad { pid: p40.id(), sm_pct: 60 },
        ProcessLoad { pid: p40b.id(), sm_pct: 10 },
        ProcessLoad { pid: p41.id(), sm_pct: 20 },
    ];
    node.sim.set_processes(0, &processes).unwrap();
    begin_shared(&node, "40", 0, "0");
    secs(0.4);
    begin_shared(&node, "41", 0, "0");
    secs(1.0);
    node.end("40");
    secs(0.4);
    node.end("41");
    for p in [&mut p40, &mut p41, &mut p40b] {
        let _ = p.kill();
        let _ = p.wait();
    }
    let (r40, r41) = (node.record("40"), node.record("41"));
    // Every shared interval by SM share: job 40 has 60 + 10 of 90, job 41 20 of 90.
    assert_eq!((r40.split(), r41.split()), (Some(Split::SmShare), Some(Split::SmShare)));
    let (t0, t2) = instants(&node, &r40);
    let (t1, t3) = instants(&node, &r41);
    assert!(t0 < t1 && t1 < t2 && t2 < t3);
    let (alone40, shared, alone41) = (truth(&node, t0, t1), truth(&node, t1, t2), truth(&node, t2, t3));
    assert_near("40", r40.energy_mj(), alone40 + shared * 7.0 / 9.0);
    assert_near("41", r41.energy_mj(), shared * 2.0 / 9.0 + alone41);
    assert_adds_up(&[&r40, &r41]);
}

/// A process of user `uid` with environment `env` (nothing else).
fn process_as(uid: u32, env: &[(&str, &str)]) -> Child {
    use std::os::unix::process::CommandExt;
    let mut command = Command::new("sleep");
    command.arg("30").current_dir("/").env_clear().envs(env.iter().copied()).uid(uid).gid(uid);
    command.spawn().unwrap()
}

#[test]
fn a_co_tenant_that_names_another_job_or_none_is_charged_its_own_use() {
    let mut node = Node::h100(1);
    node.start();
    node.sim.set_load(0, 0.8).unwrap();
    // Job 50 is user 1000's, job 51 user 1001's. User 1001's processes name job 50 or no job;
    // one of user 1002, who has no job on the GPU, uses it too.
    let mut processes = [
        process_as(1000, &[("SLURM_JOB_ID", "50")]),
        process_as(1001, &[("SLURM_JOB_ID", "50")]),
        process_as(1001, &[]),
        process_as(1002, &[("SLURM_JOB_ID", "51")]),
    ];
    let loads: Vec<ProcessLoad> = processes
        .iter()
        .zip([30, 40, 20, 10])
        .map(|(p, sm_pct)| ProcessLoad { pid: p.id(), sm_pct })
        .collect();
    node.sim.set_processes(0, &loads).unwrap();
    begin_shared(&node, "50", 1000, "0");
    secs(0.4);
    begin_shared(&node, "51", 1001, "0");
    secs(1.0);
    node.end("50");
    secs(0.4);
    node.end("51");
    for p in &mut processes {
        let _ = p.kill();
        let _ = p.wait();
    }
    let (r50, r51) = (node.record("50"), node.record("51"));
    let (t0, t2) = instants(&node, &r50);
    let (t1, t3) = instants(&node, &r51);
    assert!(t0 < t1 && t1 < t2 && t2 < t3);
    let (alone50, shared, alone51) = (truth(&node, t0, t1), truth(&node, t1, t2), truth(&node, t2, t3));
    // Shared: job 50 has 30 of 100, job 51 40 + 20, and 10 is no job's.
    assert_near("50", r50.energy_mj(), alone50 + shared * 0.3);
    assert_near("51", r51.energy_mj(), shared * 0.6 + alone51);
    let log = node.log();
    assert!(log.contains("processes of no job on this shared GPU use it"), "{log}");
}

#[test]
fn a_shared_jobs_slowdown_is_its_sm_rate_alone_over_its_rate_beside_another() {
    let mut node = Node::h100(1);
    node.start();
    node.sim.set_load(0, 0.8).unwrap();
    let (mut p40, mut p41) = (process_of(40), process_of(41));
    let alone = [ProcessLoad { pid: p40.id(), sm_pct: 80 }];
    node.sim.set_processes(0, &alone).unwrap();
    begin_shared(&node, "40", 0, "0");
    secs(1.6);
    begin_shared(&node, "41", 0, "0");
    // Beside job 41, job 40's processes get a quarter of the SMs they had alone.
    let beside = [ProcessLoad { pid: p40.id(), sm_pct: 20 }, ProcessLoad { pid: p41.id(), sm_pct: 20 }];
    node.sim.set_processes(0, &beside).unwrap();
    secs(1.6);
    node.end("41");
    node.end("40");
    for p in [&mut p40, &mut p41] {
        let _ = p.kill();
        let _ = p.wait();
    }
    let (r40, r41) = (node.record("40"), node.record("41"));
    let sm = r40.gpus[0].meter.sm.expect("job 40's SM activity");
    assert!(sm.alone_s > 1.0 && sm.shared_s > 1.0, "{sm:?}");
    // At one clock, 80% alone over 20% shared: 4 times as long, a slowdown of 3.
    let slowdown = sm.slowdown().unwrap();
    assert!((slowdown - 3.0).abs() < 0.3, "{slowdown} ({sm:?})");
    // Job 41 never ran alone: no slowdown is measured for it.
    assert_eq!(r41.gpus[0].meter.sm.and_then(|sm| sm.slowdown()), None, "{:?}", r41.gpus[0].meter.sm);

    // A job that holds its GPU whole is not measured.
    let mut p42 = process_of(42);
    node.sim.set_processes(0, &[ProcessLoad { pid: p42.id(), sm_pct: 50 }]).unwrap();
    assert_ok(&node.wattson(&["job", "begin", "--job", "42", "--uid", "0", "--gpus", "0"]));
    secs(0.6);
    node.end("42");
    let _ = p42.kill();
    let _ = p42.wait();
    assert_eq!(node.record("42").gpus[0].meter.sm, None);
}

fn begin_with(node: &Node, job: &str, gpus: &str, policy: &str) -> String {
    let args = ["job", "begin", "--job", job, "--uid", "1000", "--user", "alice", "--gpus", gpus];
    let out = node.wattson(&[&args[..], &["--energy", policy, "--shares-gpus"]].concat());
    assert_ok(&out);
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn limit(node: &Node, gpu: u32) -> u32 {
    node.sim.gpu_state(gpu).unwrap().power_limit_mw
}

fn a_gpu_shared_by_two_jobs_runs_at_its_defaults_whatever_each_asked(vendor: Vendor) {
    let (max, low) = (vendor.max_power_mw(), vendor.max_power_mw() / 100 * 60);
    let mut node = Node::gpus_of(vendor, 2);
    node.start();
    begin_with(&node, "50", "0,1", "min-energy");
    assert_eq!((limit(&node, 0), limit(&node, 1)), (low, low));
    // Job 51 comes to share GPU 1: neither job's setting stays on a GPU the other holds,
    // and job 50 stays at its defaults on all its GPUs from then on.
    let said = begin_with(&node, "51", "1", "min-energy");
    assert!(!said.contains(&format!("power limit {} W", low / 1000)), "{said}");
    assert_eq!((limit(&node, 0), limit(&node, 1)), (max, max));
    // Ending job 50 leaves job 51 at the defaults, and nothing journaled for it.
    node.end("50");
    assert_eq!(limit(&node, 1), max);
    node.stop();
    node.start();
    assert_eq!(limit(&node, 1), max, "a restart applies no setting to the shared GPU");
    node.end("51");
    assert_eq!((limit(&node, 0), limit(&node, 1)), (max, max));
}

#[test]
fn only_whole_gpu_jobs_are_closed_when_a_whole_gpu_job_begins_on_their_gpu() {
    let mut node = Node::h100(1);
    node.start();
    node.sim.set_load(0, 0.5).unwrap();
    node.begin("60", 1000, "0");
    secs(0.3);
    // A job that shares the GPU ends no one's record, and no one ends its record.
    begin_shared(&node, "61", 1001, "0");
    assert_eq!(node.record("60").state, JobState::Running, "a shard's start closes nothing");
    secs(0.3);
    // A whole-GPU job: job 60's end was lost (it held the whole GPU); job 61 shares and stays.
    node.begin("62", 1002, "0");
    let (r60, r61, r62) = (node.record("60"), node.record("61"), node.record("62"));
    assert_eq!(
        (r60.state, r61.state, r62.state),
        (JobState::Completed, JobState::Running, JobState::Running)
    );
    assert!(node.log().contains("ending the job whose end was never reported"));
    secs(0.3);
    node.end("62");
    node.end("61");
    let (r61, r62) = (node.record("61"), node.record("62"));
    assert_eq!((r61.split(), r62.split()), (Some(Split::Equal), Some(Split::Equal)));
    assert_adds_up(&[&r60, &r61, &r62]);
}
