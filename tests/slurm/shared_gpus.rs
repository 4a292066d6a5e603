//! One GPU shared by several Slurm jobs through `gres/shard` (Debian's slurmd 22.05, started by
//! the harness on loopback), with wattsond on a simulated GPU: each job's record is its part of
//! the GPU's energy, and the parts add up to the GPU's counter.

use wattson_harness::node as common;
use wattson_harness::slurm_lab;

use std::time::Duration;

use common::Node;
use slurm_lab::{LabNode, SlurmLab};
use wattson_types::apportion::Split;
use wattson_types::job::{JobRecord, JobState};

/// wattsond on one simulated H100, and a one-node Slurm whose GPU has 4 shards.
fn shared_cluster() -> (Node, SlurmLab) {
    lab_on(Node::h100(1), LabNode { shards: 4, cpus: 4, ..LabNode::new("n1", 1, "h100") }, false, "")
}

/// Starts wattsond on `node` and a one-node Slurm (`lab_node`) whose plugins talk to it,
/// optionally with Slurm's accounting (slurmdbd) and `extra_conf` lines in slurm.conf.
pub(crate) fn lab_on(node: Node, lab_node: LabNode, accounting: bool, extra_conf: &str) -> (Node, SlurmLab) {
    super::slurm::plugged_lab(node, lab_node, false, "", &[], accounting, extra_conf)
}

#[test]
fn jobs_on_shards_of_one_gpu_each_get_their_part_and_the_parts_add_up_to_the_gpu() {
    let (node, lab) = shared_cluster();
    node.sim.set_load(0, 0.7).unwrap();
    let long = "#!/bin/sh\nenv | grep -E '^(CUDA_VISIBLE_DEVICES|SLURM_JOB_GPUS|SLURM_SHARDS_ON_NODE)' | sort\nsleep 6\n";
    let a = lab.sbatch(&["--gres=shard:1", "--job-name=a"], long).unwrap();
    let b = lab.sbatch(&["--gres=shard:1", "--job-name=b"], long).unwrap();
    wait_recorded(&node, &lab, a);
    wait_recorded(&node, &lab, b);
    std::thread::sleep(Duration::from_millis(1000));
    // A third job comes and goes on the same GPU while both run.
    let c = lab.sbatch(&["--gres=shard:1", "--job-name=c"], "#!/bin/sh\nsleep 1\n").unwrap();
    assert_eq!(lab.wait_job(c, Duration::from_secs(30)).state, "COMPLETED", "{}", lab.all_logs());
    let (ra, rb) = (node.record(&a.to_string()), node.record(&b.to_string()));
    assert_eq!(
        (ra.state, rb.state),
        (JobState::Running, JobState::Running),
        "a third job's end ends neither"
    );
    // Shard jobs say they share (job_submit -> SPANK environment -> prolog): none closes another.
    assert!(!node.log().contains("ending the job whose end was never reported"), "{}", node.log());
    for id in [a, b] {
        assert_eq!(lab.wait_job(id, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    }
    let output = lab.job_output(a);
    let records: Vec<_> = [a, b, c].iter().map(|id| node.record(&id.to_string())).collect();
    for r in &records {
        assert_eq!(r.state, JobState::Completed, "{output}");
        assert_eq!(r.gpus.len(), 1);
        assert_eq!(r.split(), Some(Split::Equal), "job {}: the fake driver reports no processes", r.key);
    }
    assert_parts_add_up(&node, &records);
}

/// Checks that each of `records` (on GPU 0, overlapping so that one of them always held it)
/// is its part of the GPU's energy: alone, halves, thirds, by the instants the GPU served
/// its counter; and that the parts add up to the GPU's truth and, exactly, to its counter.
pub(super) fn assert_parts_add_up(node: &Node, records: &[JobRecord]) {
    assert_parts_add_up_on(node, records, 0);
}

/// [`assert_parts_add_up`] on the `k`-th GPU of each of `records` (all on the same GPUs, in
/// the same order), that GPU being the fake driver's `place`-th.
pub(super) fn assert_parts_add_up_on(node: &Node, records: &[JobRecord], k: usize) {
    let place = node.sim_gpu(&records[0].gpus[k]);
    assert!(records.iter().all(|r| node.sim_gpu(&r.gpus[k]) == place), "the records' {k}-th GPUs differ");
    let interval = |r: &JobRecord| node.read_intervals(r)[k];
    let mut instants: Vec<i64> = records
        .iter()
        .flat_map(|r| {
            let (x, y) = interval(r);
            [x, y]
        })
        .collect();
    instants.sort_unstable();
    instants.dedup();
    let truth = |from, to| node.sim.truth_energy_mj(place, from, to).unwrap();
    let expected = |r: &JobRecord| -> f64 {
        let (from, to) = interval(r);
        instants
            .windows(2)
            .filter(|w| w[0] >= from && w[1] <= to)
            .map(|w| {
                let holders = records
                    .iter()
                    .filter(|o| {
                        let (f, t) = interval(o);
                        f <= w[0] && w[1] <= t
                    })
                    .count();
                truth(w[0], w[1]) / holders as f64
            })
            .sum()
    };
    for r in records {
        let (got, want) = (r.gpus[k].meter.energy_mj, expected(r));
        assert!(
            common::rel_err(got, want) < 0.001,
            "job {} on GPU {place}: {got} mJ, its part is {want} mJ",
            r.key
        );
    }
    let (first, last) = (instants[0], instants[instants.len() - 1]);
    let sum: f64 = records.iter().map(|r| r.gpus[k].meter.energy_mj).sum();
    let truth = truth(first, last);
    let parts: Vec<(String, f64)> =
        records.iter().map(|r| (r.key.to_string(), r.gpus[k].meter.energy_mj)).collect();
    println!("GPU {place}: parts (mJ): {parts:?}, sum {sum}, the GPU's truth {truth}");
    assert!(common::rel_err(sum, truth) < 0.001, "GPU {place}: parts {sum} mJ vs the GPU's {truth} mJ");
    let counter = records.iter().map(|r| r.gpus[k].meter.last.energy_mj.unwrap()).max().unwrap()
        - records.iter().map(|r| r.gpus[k].meter.begin_counter_mj.unwrap()).min().unwrap();
    assert_eq!(sum, counter as f64, "GPU {place}: the parts add up to its counter difference exactly");
}

/// Waits until wattsond records job `id` as running.
pub(super) fn wait_recorded(node: &Node, lab: &SlurmLab, id: u32) {
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while node.wattson(&["acct", "-j", &id.to_string(), "-X", "-P", "-n", "-o", "State"]).stdout
        != b"RUNNING\n"
    {
        assert!(
            std::time::Instant::now() < deadline,
            "job {id} never began\n{}\n{}",
            lab.all_logs(),
            node.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_whole_gpu_jobs_record_is_closed_when_its_gpu_is_given_away_and_a_shards_is_not() {
    let (node, lab) = shared_cluster();
    node.sim.set_load(0, 0.5).unwrap();
    // A whole-GPU job: as if its Epilog were lost, GPU 0 is given to another whole-GPU job
    // (a Prolog script without the plugin): the plugin said job `a` held its GPU whole.
    let a = lab.sbatch(&["--gres=gpu:1", "--job-name=whole"], "#!/bin/sh\nsleep 4\n").unwrap();
    wait_recorded(&node, &lab, a);
    node.begin("990001", 1000, "0");
    assert_eq!(node.record(&a.to_string()).state, JobState::Completed, "{}", node.log());
    assert!(node.log().contains("ending the job whose end was never reported"));
    node.end("990001");
    assert_eq!(lab.wait_job(a, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    // A shard job: the plugin said it shares, so the same handover leaves its record open.
    let s = lab.sbatch(&["--gres=shard:1", "--job-name=shard"], "#!/bin/sh\nsleep 4\n").unwrap();
    wait_recorded(&node, &lab, s);
    node.begin("990002", 1000, "0");
    assert_eq!(node.record(&s.to_string()).state, JobState::Running, "{}", node.log());
    node.end("990002");
    assert_eq!(lab.wait_job(s, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    assert_eq!(node.record(&s.to_string()).state, JobState::Completed);
}
