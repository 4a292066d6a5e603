//! AMD GPUs through real Slurm (Debian's slurmctld/slurmd 22.05 and slurmdbd, started by the
//! harness on loopback), with wattsond on simulated MI300Xs through the fake ROCm SMI: GPUs as
//! `Type=mi300x` GRES whose files are DRM render nodes (`renderD<128+N>`, as Slurm's
//! `gpu/rsmi` lists them), in another order than ROCm SMI's. A capped job's energy in
//! `wattson acct` and `sacct` against the simulated GPUs' truth, its cap restored after.

use wattson_harness::node as common;
use wattson_harness::slurm_lab;
use wattson_harness::vendor::Vendor;

use std::time::{Duration, Instant};

use common::Node;
use slurm_lab::LabNode;

use super::slurm::{ENERGY_CONF, energy_of, plugged_lab};

#[test]
fn a_job_on_amd_gpus_is_accounted_exactly_in_acct_and_sacct_and_its_cap_restored() {
    let vendor = Vendor::Amd;
    let (max, capped) = (vendor.max_power_mw(), vendor.max_power_mw() * 60 / 100);
    let mut gpus = vendor.gpus(4);
    // ROCm SMI's GPU i is renderD<128+3-i>: Slurm's GPU N is ROCm SMI's 3-N.
    for (i, gpu) in gpus.gpu.iter_mut().enumerate() {
        gpu.minor_number = Some(3 - i as u32);
    }
    let node = Node::of_vendor(vendor, gpus, "200ms", "enact = \"share\"\n", "");
    let lab_node = LabNode { render_nodes: true, cpus: 4, ..LabNode::new("n1", 4, vendor.gres_type()) };
    let (node, lab) = plugged_lab(node, lab_node, false, "", &[], true, ENERGY_CONF);
    // Every GPU busy, the job's and the others: only the job's may count.
    for gpu in 0..4 {
        node.sim.set_load(gpu, 0.5 + 0.1 * f64::from(gpu)).unwrap();
    }
    let done = node.dir.path().join("work-done");
    let script = format!(
        "#!/bin/sh\nenv | grep -E '^(SLURM_JOB_GPUS|ROCR_VISIBLE_DEVICES|GPU_DEVICE_ORDINAL)=' | sort\n\
         sleep 8\ntouch {}\nsleep 1\n",
        done.display()
    );
    let id = lab.sbatch(&["--gres=gpu:mi300x:2", "--energy=min-energy"], &script).unwrap();
    let limits = || (0..4).map(|g| node.sim.gpu_state(g).unwrap().power_limit_mw).collect::<Vec<_>>();
    // While it runs, two GPUs are capped at 60 % of 750 W and the others are not.
    let deadline = Instant::now() + Duration::from_secs(30);
    let capped_places: Vec<u32> = loop {
        let now = limits();
        let places: Vec<u32> = (0..4).filter(|&g| now[g as usize] == capped).collect();
        if places.len() == 2 {
            assert_eq!(now.iter().filter(|&&l| l == max).count(), 2, "{now:?}");
            break places;
        }
        assert!(Instant::now() < deadline, "GPUs never capped: {now:?}\n{}\n{}", lab.all_logs(), node.log());
        std::thread::sleep(Duration::from_millis(100));
    };
    // The job's work ends: its GPUs go idle, as real ones do when the processes exit.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done.exists() {
        assert!(Instant::now() < deadline, "the job never finished its work\n{}", lab.all_logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    for gpu in 0..4 {
        node.sim.set_load(gpu, 0.0).unwrap();
    }
    assert_eq!(lab.wait_job(id, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    // Its cap restored after.
    let deadline = Instant::now() + Duration::from_secs(10);
    while limits() != vec![max; 4] {
        assert!(Instant::now() < deadline, "GPUs not restored: {:?}\n{}", limits(), node.log());
        std::thread::sleep(Duration::from_millis(100));
    }

    // Slurm's numbers named the GPUs the job was metered and capped on.
    let output = lab.job_output(id);
    println!("the job's environment:\n{output}");
    let numbers: Vec<u32> = output
        .lines()
        .find_map(|l| l.strip_prefix("SLURM_JOB_GPUS="))
        .unwrap_or_else(|| panic!("no SLURM_JOB_GPUS: {output}"))
        .split(',')
        .map(|n| n.trim().parse().unwrap())
        .collect();
    let mut places: Vec<u32> = numbers.iter().map(|n| 3 - n).collect();
    places.sort_unstable();
    assert_eq!(places, capped_places, "Slurm gave {numbers:?}");
    let record = node.record(&id.to_string());
    let config = fake_nvml::Config::load(node.sim.dir()).unwrap();
    let mut metered: Vec<u32> = record.gpus.iter().map(|g| node.sim_gpu(g)).collect();
    metered.sort_unstable();
    assert_eq!(metered, capped_places, "metered the wrong GPUs: {record:?}");
    for g in &record.gpus {
        let spec = config.spec(node.sim_gpu(g) as usize).unwrap();
        assert_eq!(g.uuid, vendor.uuid(&spec.uuid));
    }

    // wattson acct: the GPUs' true energy within 0.1 %.
    let truth_j: f64 = node.truth_mj(&record).iter().sum::<f64>() / 1000.0;
    let acct = node.acct_json(&["-X", "-j", &id.to_string()]);
    let acct_j = acct[0]["energy_j"].as_f64().unwrap();
    assert!(common::rel_err(acct_j, truth_j) < 0.001, "wattson acct {acct_j} J vs truth {truth_j} J");
    let acct = node.wattson(&["acct", "-X", "-j", &id.to_string(), "-o", "JobID,NGPUs,Method,Policy", "-P"]);
    let line = format!("{id}|2|counter|min-energy");
    assert_eq!(String::from_utf8_lossy(&acct.stdout).lines().nth(1), Some(line.as_str()));

    // sacct (acct_gather_energy/wattson): the GPUs' true energy from the job's first reading
    // up to an instant between the batch step's end and the job's (Slurm's last poll comes
    // with the extern step's end, before the epilog; tests/slurm/slurm.rs), within 0.1 % and
    // its whole joules.
    let sacct =
        || lab.run_ok("sacct", &["-n", "-P", "-X", "-j", &id.to_string(), "-o", "JobID,ConsumedEnergyRaw"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let slurm_j = loop {
        let out = sacct();
        if let Some(j) = energy_of(&out, &id.to_string()).filter(|&j| j > 0) {
            break j as f64;
        }
        assert!(Instant::now() < deadline, "sacct shows no energy: {out}\n{}", lab.log("slurmdbd"));
        std::thread::sleep(Duration::from_millis(300));
    };
    let batch = node.record(&format!("{id}.batch"));
    let batch_ends = node.read_intervals(&batch);
    let to_batch_end_j: f64 = record
        .gpus
        .iter()
        .zip(node.read_intervals(&record))
        .map(|(g, (first, _))| {
            let at = batch
                .gpus
                .iter()
                .position(|b| b.uuid == g.uuid)
                .expect("the batch step ran on the job's GPUs");
            node.sim.truth_energy_mj(node.sim_gpu(g), first, batch_ends[at].1).unwrap() / 1000.0
        })
        .sum();
    println!(
        "sacct {slurm_j} J: truth {to_batch_end_j:.1} J to the batch step's end, {truth_j:.1} J to the job's (wattson {acct_j:.1} J)"
    );
    assert!(
        slurm_j >= to_batch_end_j * (1.0 - 0.001) - 1.0 && slurm_j <= truth_j * (1.0 + 0.001) + 1.0,
        "sacct {slurm_j} J outside the truth to the batch step's end {to_batch_end_j} J and to the job's {truth_j} J\n{}",
        lab.log("slurmd-n1")
    );
}
