//! Jobs on MIG instances (the fake driver's GPUs in MIG mode, the real wattsond): each job's
//! record is its part of its GPU's energy, by the compute slices of the instances it holds,
//! the parts add up to the GPU's counter, and no job's setting ever reaches a GPU in MIG mode.

use wattson_harness::node as common;

use std::thread::sleep;
use std::time::Duration;

use common::{Node, assert_ok, rel_err};
use wattson_types::apportion::Split;
use wattson_types::job::{JobRecord, JobState};

const EXACT: f64 = 0.001; // 0.1 %
const H100_MAX_MW: u32 = 700_000;
/// The limit the `share` policy gives a min-energy job on an H100 (60 % of 700 W).
const MIN_ENERGY_MW: u32 = 420_000;

/// GPU 0 in MIG mode with instances of 4, 2 and 1 compute slices; GPU 1 whole.
fn mig_node() -> Node {
    let mut gpus = fake_nvml::Config::uniform("H100", 2);
    gpus.gpu[0].mig = Some(vec!["4g.40gb".into(), "2g.20gb".into(), "1g.10gb".into()]);
    let mut node = Node::new(gpus, "200ms");
    node.start();
    node
}

/// `wattson job begin` as `uid` on `gpus` asking for min-energy; returns what it printed.
fn begin(node: &Node, job: &str, uid: u32, gpus: &str) -> String {
    let uid = uid.to_string();
    let args = ["job", "begin", "--job", job, "--uid", &uid, "--gpus", gpus, "--energy", "min-energy"];
    let out = node.wattson(&args);
    assert_ok(&out);
    String::from_utf8_lossy(&out.stdout).to_string()
}

/// GPU `gpu`'s power limit and locked clocks as the fake driver holds them.
fn settings(node: &Node, gpu: u32) -> (u32, Option<(u32, u32)>) {
    let state = node.sim.gpu_state(gpu).unwrap();
    (state.power_limit_mw, state.locked_clocks_mhz)
}

fn secs(s: f64) {
    sleep(Duration::from_secs_f64(s));
}

fn assert_near(job: &str, got: f64, want: f64) {
    assert!(
        rel_err(got, want) < EXACT,
        "job {job}: {got} mJ, expected {want} mJ (rel. error {:e})",
        rel_err(got, want)
    );
}

/// The parts of GPU 0's records add up to its counter difference, to the millijoule.
fn assert_adds_up(records: &[&JobRecord]) {
    let first = records.iter().map(|r| r.gpus[0].meter.begin_counter_mj.unwrap()).min().unwrap();
    let last = records.iter().map(|r| r.gpus[0].meter.last.energy_mj.unwrap()).max().unwrap();
    let sum: f64 = records.iter().map(|r| r.gpus[0].meter.energy_mj).sum();
    assert_eq!(sum, (last - first) as f64, "the parts add up to the GPU's counter difference");
}

#[test]
fn jobs_on_mig_instances_get_their_gpus_energy_by_compute_slices_and_no_setting() {
    let mut node = mig_node();
    let mig = node.sim.mig_instances(0).unwrap();
    let gpu0 = node.gpu_uuid(0);
    node.sim.set_load(0, 0.7).unwrap();
    let defaults = (H100_MAX_MW, None);
    // Job 70 on the 4-slice instance, named by its MIG UUID (Slurm's CUDA_VISIBLE_DEVICES with
    // AutoDetect=nvml): alone on its GPU it still gets no setting, whatever it asked.
    let said = begin(&node, "70", 1000, &mig[0].uuid);
    assert_eq!(settings(&node, 0), defaults, "{said}");
    assert!(node.log().contains("job holds MIG instances"), "{}", node.log());
    secs(0.4);
    // Job 71 on the 2-slice instance by Slurm's number (GPU GRES 1: GPU 0's second instance).
    begin(&node, "71", 1001, "1");
    secs(0.6);
    node.sim.set_load(0, 0.9).unwrap();
    // Job 72 on the 1-slice instance, named as drivers before R470 name it.
    let old = format!("MIG-{gpu0}/{}/{}", mig[2].gpu_instance_id, mig[2].compute_instance_id);
    begin(&node, "72", 1002, &old);
    secs(0.4);
    // A whole-GPU job beside them (Slurm's number 3: GPU 1) does get its setting.
    begin(&node, "73", 1003, "3");
    assert_eq!(settings(&node, 1).0, MIN_ENERGY_MW, "the policy sets whole GPUs");
    assert_eq!(settings(&node, 0), defaults);
    node.end("72");
    secs(0.4);
    node.end("70");
    // A restart while job 71 runs alone on the GPU applies nothing to it either.
    node.stop();
    node.start();
    secs(0.3);
    assert_eq!(settings(&node, 0), defaults, "{}", node.log());
    node.end("71");
    node.end("73");
    assert_eq!(settings(&node, 0), defaults);
    assert!(!node.log().contains("never reported"), "{}", node.log());

    let (r70, r71, r72) = (node.record("70"), node.record("71"), node.record("72"));
    for (r, instance) in [(&r70, &mig[0]), (&r71, &mig[1]), (&r72, &mig[2])] {
        assert_eq!(r.state, JobState::Completed);
        assert_eq!(r.gpus.len(), 1);
        assert_eq!((r.gpus[0].index, r.gpus[0].uuid.as_str()), (0, gpu0.as_str()), "{}: its GPU's", r.key);
        let held: Vec<&str> = r.gpus[0].meter.mig.iter().map(|m| m.uuid.as_str()).collect();
        assert_eq!(held, vec![instance.uuid.as_str()], "{}", r.key);
        assert_eq!(r.split(), Some(Split::MigSlices), "{}", r.key);
    }
    // t0..t5: 70 begins, 71 begins, 72 begins, 72 ends, 70 ends, 71 ends.
    let at = |r: &JobRecord| node.read_intervals(r)[0];
    let ((t0, t4), (t1, t5), (t2, t3)) = (at(&r70), at(&r71), at(&r72));
    assert!(t0 < t1 && t1 < t2 && t2 < t3 && t3 < t4 && t4 < t5);
    let truth = |from, to| node.sim.truth_energy_mj(0, from, to).unwrap();
    let (a, b, c, d, e) = (truth(t0, t1), truth(t1, t2), truth(t2, t3), truth(t3, t4), truth(t4, t5));
    // Slices: 4 and 2 of 6 while two run, 4, 2 and 1 of 7 while three do.
    assert_near("70", r70.energy_mj(), a + b * 4.0 / 6.0 + c * 4.0 / 7.0 + d * 4.0 / 6.0);
    assert_near("71", r71.energy_mj(), b * 2.0 / 6.0 + c * 2.0 / 7.0 + d * 2.0 / 6.0 + e);
    assert_near("72", r72.energy_mj(), c / 7.0);
    assert_near("all", r70.energy_mj() + r71.energy_mj() + r72.energy_mj(), truth(t0, t5));
    assert_adds_up(&[&r70, &r71, &r72]);

    // `wattson acct` shows the split and the instances.
    let out = node.wattson(&["acct", "-j", "70,71,72", "-o", "JobID,Split,MIG", "-P", "-n"]);
    assert_ok(&out);
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let want: Vec<String> = [("70", &mig[0]), ("71", &mig[1]), ("72", &mig[2])]
        .iter()
        .map(|(job, m)| format!("{job}|mig-slices|{}", m.profile))
        .collect();
    assert_eq!(text.lines().collect::<Vec<_>>(), want, "{text}");
}

#[test]
fn a_job_on_two_instances_of_a_gpu_weighs_both_and_a_bad_name_is_refused() {
    let node = mig_node();
    let mig = node.sim.mig_instances(0).unwrap();
    node.sim.set_load(0, 0.8).unwrap();
    // Job 80 holds the 2- and 1-slice instances (Slurm's numbers 1 and 2), job 81 the 4-slice.
    begin(&node, "80", 1000, "1,2");
    secs(0.3);
    begin(&node, "81", 1001, &mig[0].uuid);
    secs(0.8);
    node.end("80");
    secs(0.3);
    node.end("81");
    let (r80, r81) = (node.record("80"), node.record("81"));
    assert_eq!(r80.gpus.len(), 1, "one record per GPU, however many of its instances");
    assert_eq!(r80.gpus[0].meter.mig.len(), 2);
    let at = |r: &JobRecord| node.read_intervals(r)[0];
    let ((t0, t2), (t1, t3)) = (at(&r80), at(&r81));
    assert!(t0 < t1 && t1 < t2 && t2 < t3);
    let truth = |from, to| node.sim.truth_energy_mj(0, from, to).unwrap();
    let (alone80, shared, alone81) = (truth(t0, t1), truth(t1, t2), truth(t2, t3));
    assert_near("80", r80.energy_mj(), alone80 + shared * 3.0 / 7.0);
    assert_near("81", r81.energy_mj(), shared * 4.0 / 7.0 + alone81);
    assert_adds_up(&[&r80, &r81]);
    assert_eq!(settings(&node, 0), (H100_MAX_MW, None));
    // A GPU in MIG mode named whole (by a hand-written Prolog; Slurm never does) gets no
    // setting either.
    begin(&node, "83", 1000, &node.gpu_uuid(0));
    assert_eq!(settings(&node, 0), (H100_MAX_MW, None), "{}", node.log());
    node.end("83");

    // The same instance twice, an instance and its whole GPU, or an instance of no GPU here.
    let gpu0 = node.gpu_uuid(0);
    for gpus in [
        format!("{0},{0}", mig[1].uuid),
        format!("{},{gpu0}", mig[1].uuid),
        "MIG-nonesuch".to_string(),
        "4".into(),
    ] {
        let out = node.wattson(&["job", "begin", "--job", "82", "--uid", "1000", "--gpus", &gpus]);
        assert!(!out.status.success(), "{gpus} was taken");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("named twice") || err.contains("no such GPU"), "{gpus}: {err}");
    }
}
