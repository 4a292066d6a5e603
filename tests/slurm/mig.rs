//! MIG through real Slurm (Debian's slurmctld/slurmd 22.05 and slurmdbd, started by the
//! harness on loopback), with wattsond on a simulated H100 in MIG mode: Slurm gives each job
//! one instance of the GPU (a GPU GRES per instance, as `AutoDetect=nvml` lists them); each
//! job's record is its part of the GPU's energy by the instances' compute slices, the parts
//! add up to the GPU's counter, the GPU's power limit and clocks stay untouched whatever the
//! jobs asked, and each job's energy is in `sacct`.

use wattson_harness::node as common;
use wattson_harness::slurm_lab;

use std::time::{Duration, Instant};

use common::Node;
use slurm_lab::{LabMig, LabNode};
use wattson_types::apportion::Split;
use wattson_types::job::JobState;

use super::shared_gpus::{assert_parts_add_up, wait_recorded};
use super::slurm::{ENERGY_CONF, SACCT_MARGIN, energy_of, plugged_lab};

const H100_MAX_MW: u32 = 700_000;

#[test]
fn two_jobs_on_two_mig_instances_of_one_gpu_share_its_energy_and_show_in_sacct() {
    let mut gpus = fake_nvml::Config::uniform("H100", 1);
    gpus.gpu[0].mig = Some(vec!["3g.40gb".into(), "3g.40gb".into()]);
    let node = Node::new(gpus, "200ms");
    let instances = node.sim.mig_instances(0).unwrap();
    let mig = instances
        .iter()
        .map(|m| LabMig {
            gpu: 0,
            profile: m.profile.clone(),
            gi_cap_minor: m.gi_cap_minor,
            ci_cap_minor: m.ci_cap_minor,
        })
        .collect();
    let lab_node = LabNode { mig, cpus: 4, ..LabNode::new("n1", 1, "h100") };
    let (node, lab) = plugged_lab(node, lab_node, false, "", &[], true, ENERGY_CONF);
    node.sim.set_load(0, 0.7).unwrap();
    let script = "#!/bin/sh\nenv | grep -E '^(CUDA_VISIBLE_DEVICES|SLURM_JOB_GPUS)=' | sort\nsleep 6\n";
    // Both ask for min-energy: on a whole GPU each would get a lower power limit.
    let args = |name| ["--gres=gpu:h100_3g.40gb:1", "--energy=min-energy", name];
    let a = lab.sbatch(&args("--job-name=a"), script).unwrap();
    wait_recorded(&node, &lab, a);
    let b = lab.sbatch(&args("--job-name=b"), script).unwrap();
    wait_recorded(&node, &lab, b);
    // While they run, nothing is set on the GPU their instances share.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut looked = 0;
    while [a, b].iter().any(|&id| !lab.job_info(id).is_some_and(|j| j.is_terminal())) {
        let state = node.sim.gpu_state(0).unwrap();
        assert_eq!((state.power_limit_mw, state.locked_clocks_mhz), (H100_MAX_MW, None), "{}", node.log());
        looked += 1;
        assert!(Instant::now() < deadline, "the jobs never ended\n{}", lab.all_logs());
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(looked > 4, "the jobs ran beside each other for a while");
    for id in [a, b] {
        assert_eq!(lab.wait_job(id, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    }
    let state = node.sim.gpu_state(0).unwrap();
    assert_eq!((state.power_limit_mw, state.locked_clocks_mhz), (H100_MAX_MW, None));

    // Slurm numbered the instances 0 and 1 (its GRES list); each job's record holds its own.
    let mut numbers: Vec<String> = [a, b]
        .iter()
        .flat_map(|&id| {
            lab.job_output(id)
                .lines()
                .filter_map(|l| l.strip_prefix("SLURM_JOB_GPUS=").map(String::from))
                .collect::<Vec<_>>()
        })
        .collect();
    numbers.sort();
    assert_eq!(numbers, ["0", "1"], "{}\n{}", lab.job_output(a), lab.job_output(b));
    let records: Vec<_> = [a, b].iter().map(|id| node.record(&id.to_string())).collect();
    let mut held: Vec<String> = Vec::new();
    for (r, id) in records.iter().zip([a, b]) {
        let output = lab.job_output(id);
        assert_eq!(r.state, JobState::Completed, "{output}");
        assert_eq!(r.gpus.len(), 1, "{output}");
        assert_eq!(r.split(), Some(Split::MigSlices), "job {}: {output}", r.key);
        let uuids: Vec<String> = r.gpus[0].meter.mig.iter().map(|m| m.uuid.clone()).collect();
        assert_eq!(uuids.len(), 1, "job {}: {:?}", r.key, r.gpus[0].meter.mig);
        held.extend(uuids);
    }
    held.sort();
    let mut all: Vec<String> = instances.iter().map(|m| m.uuid.clone()).collect();
    all.sort();
    assert_eq!(held, all, "each job on an instance of its own");
    // Equal slices: halves while both ran, all of it while one did; the parts add up to the
    // GPU's counter exactly, and to its truth within 0.1 %.
    assert_parts_add_up(&node, &records);

    // Each job's energy in Slurm's accounting, between wattson's batch step and job figures.
    let ids = format!("{a},{b}");
    let deadline = Instant::now() + Duration::from_secs(30);
    let out = loop {
        let out = lab.run_ok("sacct", &["-n", "-P", "-X", "-j", &ids, "-o", "JobID,ConsumedEnergyRaw"]);
        if [a, b].iter().all(|id| energy_of(&out, &id.to_string()).is_some_and(|j| j > 0)) {
            break out;
        }
        assert!(Instant::now() < deadline, "sacct shows no energy: {out}\n{}", lab.log("slurmdbd"));
        std::thread::sleep(Duration::from_millis(300));
    };
    for (r, id) in records.iter().zip([a, b]) {
        let slurm_j = energy_of(&out, &id.to_string()).unwrap() as f64;
        let batch_j = node.record(&format!("{id}.batch")).energy_j();
        let job_j = r.energy_j();
        println!("job {id}: sacct {slurm_j} J, wattson batch step {batch_j:.1} J, job {job_j:.1} J");
        assert!(
            slurm_j >= batch_j * (1.0 - SACCT_MARGIN) && slurm_j <= job_j * (1.0 + SACCT_MARGIN),
            "job {id}: sacct {slurm_j} J outside wattson's batch step {batch_j} J and job {job_j} J\n{}",
            lab.log("slurmd-n1")
        );
    }
}
