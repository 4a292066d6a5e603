//! Job steps in real Slurm (Debian's 22.05 with slurmdbd): the SPANK plugin registers each step
//! with wattsond, `wattson acct` shows a row per step as sacct does (`-X` hides them), Slurm's
//! per-step energy is the step's, and the steps add up to the job.

use wattson_harness::node as common;

use std::time::{Duration, Instant};

use super::shared_gpus::lab_on;
use common::{Node, rel_err};
use wattson_harness::slurm_lab::LabNode;
use wattson_types::job::JobRecord;

const ENERGY_CONF: &str = "AcctGatherEnergyType=acct_gather_energy/wattson\n\
    JobAcctGatherType=jobacct_gather/linux\nJobAcctGatherFrequency=task=1\n\
    PrologFlags=Alloc,Contain\nAcctGatherNodeFreq=1";

fn lines(out: &std::process::Output) -> Vec<String> {
    String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect()
}

#[test]
fn a_jobs_two_steps_have_their_own_rows_and_energy_in_wattson_and_sacct() {
    // A GPU that draws nothing when idle, busy only while a step works: Slurm's last poll of
    // a step comes a moment before wattsond's final reading, and that moment is idle.
    let gpus = fake_nvml::Config {
        gpu: vec![fake_nvml::GpuConfig { idle_w: Some(0.0), ..fake_nvml::GpuConfig::preset("H100") }],
        ..fake_nvml::Config::default()
    };
    let (node, lab) = lab_on(Node::new(gpus, "200ms"), LabNode::new("n1", 1, "h100"), true, ENERGY_CONF);
    let mark = |name: &str| node.dir.path().join(name);
    let step = |n: u32| {
        format!(
            "srun --gres=gpu:1 sh -c 'touch {w}; sleep 2; touch {d}; sleep 1'\n",
            w = mark(&format!("work{n}")).display(),
            d = mark(&format!("done{n}")).display()
        )
    };
    let script = format!("#!/bin/sh\nsleep 1\n{}sleep 1\n{}sleep 1\n", step(0), step(1));
    let id = lab.sbatch(&["--gres=gpu:1", "--job-name=two-steps", "--energy=perf"], &script).unwrap();
    let wait_for = |name: String| {
        let deadline = Instant::now() + Duration::from_secs(60);
        while !mark(&name).exists() {
            assert!(Instant::now() < deadline, "{name} never appeared\n{}", lab.all_logs());
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    for n in 0..2 {
        wait_for(format!("work{n}"));
        node.sim.set_load(0, 0.5 + 0.2 * f64::from(n)).unwrap();
        wait_for(format!("done{n}"));
        node.sim.set_load(0, 0.0).unwrap();
    }
    let info = lab.wait_job(id, Duration::from_secs(60));
    assert_eq!(info.state, "COMPLETED", "{}", lab.all_logs());
    let job = id.to_string();
    let rows = lines(&node.wattson(&["acct", "-j", &job, "-o", "JobID", "-P", "-n"]));
    let want: Vec<String> = ["", ".batch", ".0", ".1"].iter().map(|s| format!("{id}{s}")).collect();
    assert_eq!(rows, want, "{}\n{}", lab.log("slurmd-n1"), node.log());
    assert_eq!(
        lines(&node.wattson(&["acct", "-j", &job, "-o", "JobID", "-P", "-n", "-X"])),
        vec![job.clone()]
    );

    let record = |suffix: &str| node.record(&format!("{id}{suffix}"));
    let (whole, batch, s0, s1) = (record(""), record(".batch"), record(".0"), record(".1"));
    let truth = |r: &JobRecord| node.truth_mj(r)[0];
    for r in [&whole, &batch, &s0, &s1] {
        assert!(rel_err(r.energy_mj(), truth(r)) < 0.001, "{}: {} vs {}", r.key, r.energy_mj(), truth(r));
        // Steps run on their job's settings, and are recorded under its policy.
        assert_eq!(r.policy, Some(wattson_types::job::EnergyPolicy::Perf), "{}", r.key);
    }
    // The steps add up to the job: the two srun steps and the time outside them.
    let interval = |r: &JobRecord| node.read_intervals(r)[0];
    let ((j0, j1), (a0, a1), (b0, b1)) = (interval(&whole), interval(&s0), interval(&s1));
    assert!(j0 < a0 && a1 < b0 && b1 < j1, "steps within their job, one after the other");
    let outside: f64 =
        [(j0, a0), (a1, b0), (b1, j1)].iter().map(|&(f, t)| node.sim.truth_energy_mj(0, f, t).unwrap()).sum();
    let sum = s0.energy_mj() + s1.energy_mj() + outside;
    assert!(rel_err(sum, whole.energy_mj()) < 0.001, "steps {sum} mJ vs job {} mJ", whole.energy_mj());

    // Reports count the job once: its steps are parts of it.
    let out = node.wattson(&["report", "-S", "now-1hours", "--json"]);
    common::assert_ok(&out);
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let total = report.as_array().unwrap().iter().find(|t| t["group"] == "TOTAL").expect("a TOTAL row");
    assert_eq!(total["jobs"], 1, "{report}");
    let kwh = total["energy_kwh"].as_f64().unwrap();
    assert!(
        (kwh * 3.6e6 - whole.energy_j()).abs() < 1.0,
        "report {} J vs the job's {} J",
        kwh * 3.6e6,
        whole.energy_j()
    );

    // Slurm's per-step energy is the step's, and its job row the job's.
    let deadline = Instant::now() + Duration::from_secs(30);
    let sacct = loop {
        let out = lab.run_ok("sacct", &["-n", "-P", "-j", &job, "-o", "JobID,ConsumedEnergyRaw"]);
        let energy: Vec<(String, f64)> = out
            .lines()
            .filter_map(|l| l.split_once('|'))
            .filter_map(|(j, e)| Some((j.to_string(), e.trim().parse::<f64>().ok()?)))
            .collect();
        if [".0", ".1", ".batch", ""]
            .iter()
            .all(|s| energy.iter().any(|(j, e)| *j == format!("{id}{s}") && *e > 0.0))
        {
            break energy;
        }
        assert!(Instant::now() < deadline, "sacct shows no energy per step: {out}\n{}", lab.log("slurmdbd"));
        std::thread::sleep(Duration::from_millis(300));
    };
    let wattson: Vec<(String, f64)> =
        [&whole, &batch, &s0, &s1].iter().map(|r| (r.key.to_string(), r.energy_j())).collect();
    println!("sacct: {sacct:?}\nwattson: {wattson:?}");
    for (suffix, r) in [(".0", &s0), (".1", &s1), (".batch", &batch), ("", &whole)] {
        let slurm_j = sacct.iter().find(|(j, _)| *j == format!("{id}{suffix}")).unwrap().1;
        let wattson_j = r.energy_j();
        assert!(
            (slurm_j - wattson_j).abs() <= 1.0 + 0.005 * wattson_j,
            "sacct {id}{suffix}: {slurm_j} J vs wattson {wattson_j:.1} J\n{}",
            lab.log("slurmd-n1")
        );
    }
}
