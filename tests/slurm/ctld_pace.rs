//! `wattson-ctld` pacing running jobs on a real Slurm (the lab of [`super::ctld`]): a job is
//! raised to full speed only for pending work that waits for its nodes' GPUs.

use std::time::{Duration, Instant};

use wattson_harness::node as common;
use wattson_harness::slurm_lab::SlurmLab;

use super::ctld::{ctld_log, lab, lab_with, powered_down, start_ctld, state, wait_for};

/// Before powering a node down ctld asks its wattsond, which refuses while a job holds its GPUs
/// (here one Slurm does not know of): that node stays up, with the reason logged, until the
/// job ends. Then a queue forming puts a running job's GPUs back to full speed within a loop,
/// and the queue clearing gives the job back its energy-saving setting. Under the wait-cost
/// bound, the job the queue waited for stays at full speed once the queue clears: its slowdown
/// lengthened the wait past the bound; a controller restarted with its state file remembers
/// that wait, one started afresh does not.
#[test]
fn nodes_power_down_only_when_wattsond_confirms_and_a_queue_paces_running_jobs() {
    // A queued job raises the jobs it waits for at once (not only after waiting its own run);
    // no wait-cost bound until the last part.
    let (mut lab, power, daemons) = lab("raise_after_runs = 0\nmax_wait_cost = 100");
    let metrics = lab.dir().join("ctld.prom");
    let toml = lab.dir().join("etc/wattson.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, text.replacen("[ctld]\n", &format!("[ctld]\nmetrics_file = {metrics:?}\n"), 1))
        .unwrap();
    daemons[1].begin("4242", 0, "0");
    let mut ctld = start_ctld(&lab);
    wait_for(&mut lab, &power, "n1 and n3 powered down", Duration::from_secs(40), |lab| {
        powered_down(&state(lab, "n1")) && powered_down(&state(lab, "n3"))
    });
    let kept = |lab: &SlurmLab| ctld_log(lab).contains("job 4242 runs here");
    wait_for(&mut lab, &power, "n2 kept up with the reason", Duration::from_secs(10), kept);
    assert!(!state(&lab, "n2").contains("POWER"), "{}", state(&lab, "n2"));
    daemons[1].end("4242");
    wait_for(&mut lab, &power, "n2 powered down once idle", Duration::from_secs(20), |lab| {
        powered_down(&state(lab, "n2"))
    });

    // A job on both GPUs of n1, running at its min-energy share (60% of 700 W).
    let limit = |g: u32| daemons[0].sim.gpu_state(g).unwrap().power_limit_mw;
    let job = lab.sbatch(&["--gres=gpu:2", "-w", "n1"], "sleep 300\n").unwrap();
    wait_for(&mut lab, &power, "the job running", Duration::from_secs(60), |lab| {
        lab.job_info(job).is_some_and(|j| j.state == "RUNNING")
    });
    let id = job.to_string();
    common::assert_ok(&daemons[0].wattson(&[
        "job",
        "begin",
        "--job",
        &id,
        "--uid",
        "0",
        "--gpus",
        "0,1",
        "--energy",
        "min-energy",
    ]));
    assert_eq!((limit(0), limit(1)), (420_000, 420_000));
    // A job waits for n1's GPUs: within a loop the running job goes to full speed.
    let waiting = lab.sbatch(&["--gres=gpu:1", "-w", "n1"], "true\n").unwrap();
    let queued_at = Instant::now();
    wait_for(&mut lab, &power, "full speed while a job waits", Duration::from_secs(10), |_| {
        limit(0) == 700_000 && limit(1) == 700_000
    });
    let took = queued_at.elapsed();
    assert!(took < Duration::from_secs(4), "paced after {took:?} (loop 1 s)\n{}", ctld_log(&lab));
    assert_eq!(lab.job_info(waiting).unwrap().state, "PENDING");
    // The queue clears: back to the saving share.
    lab.run_ok("scancel", &[&waiting.to_string()]);
    wait_for(&mut lab, &power, "saving again once the queue cleared", Duration::from_secs(10), |_| {
        limit(0) == 420_000 && limit(1) == 420_000
    });
    // The node applies a pace before it answers, ctld logs it once answered: wait for the line.
    let logged = |lab: &SlurmLab| {
        let log = ctld_log(lab);
        log.contains("pace set") && log.contains("Full") && log.contains("Saving")
    };
    wait_for(&mut lab, &power, "both paces logged", Duration::from_secs(10), logged);
    // Every decision is counted, in the file node_exporter's textfile collector serves (written
    // at the end of each loop).
    let counted = |_: &SlurmLab| {
        let text = std::fs::read_to_string(&metrics).unwrap_or_default();
        ["power_down", "kept_up", "pace_full", "pace_saving"]
            .iter()
            .all(|action| text.contains(&format!("wattson_ctld_decisions_total{{action=\"{action}\"}}")))
    };
    wait_for(&mut lab, &power, "every decision counted", Duration::from_secs(10), counted);

    // The shipped bound (5%). The job falls behind at its share (bound 10%) while a job waits
    // for its GPUs, so all of such a short wait is its lag's: past the bound. A controller
    // restarted with its state file goes on from the wait it observed above, and runs the job
    // at full speed with no job waiting.
    let toml = lab.dir().join("etc/wattson.toml");
    let text = std::fs::read_to_string(&toml).unwrap();
    std::fs::write(&toml, text.replace("max_wait_cost = 100", "max_wait_cost = 0.05")).unwrap();
    let _ = ctld.kill();
    let _ = ctld.wait();
    ctld = start_ctld(&lab);
    wait_for(&mut lab, &power, "full speed from the wait cost read back", Duration::from_secs(10), |_| {
        limit(0) == 700_000 && limit(1) == 700_000
    });
    // A controller started afresh (no state file) has observed nothing: the job saves again.
    let _ = ctld.kill();
    let _ = ctld.wait();
    std::fs::remove_file(lab.dir().join("ctld.json")).unwrap();
    ctld = start_ctld(&lab);
    wait_for(&mut lab, &power, "saving with no queue, afresh", Duration::from_secs(10), |_| {
        limit(0) == 420_000 && limit(1) == 420_000
    });
    // Long enough for the job to fall further behind than the next wait will last.
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!((limit(0), limit(1)), (420_000, 420_000), "saving with no queue");
    let waiting = lab.sbatch(&["--gres=gpu:1", "-w", "n1"], "true\n").unwrap();
    wait_for(&mut lab, &power, "full speed while a job waits", Duration::from_secs(10), |_| {
        limit(0) == 700_000 && limit(1) == 700_000
    });
    std::thread::sleep(Duration::from_secs(2));
    lab.run_ok("scancel", &[&waiting.to_string()]);
    let status = || {
        let out = std::process::Command::new(&*super::ctld::WATTSON)
            .args(["power", "status", "-c"])
            .arg(&toml)
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let guarding = |_: &SlurmLab| status().contains("(bound 5.0%): past it, no job is slowed");
    wait_for(&mut lab, &power, "the status past the bound", Duration::from_secs(10), guarding);
    // The queue is gone, and the job stays at full speed.
    for _ in 0..5 {
        std::thread::sleep(Duration::from_secs(1));
        assert_eq!((limit(0), limit(1)), (700_000, 700_000), "{}\n{}", status(), ctld_log(&lab));
    }
    daemons[0].end(&id);
    let _ = ctld.kill();
    let _ = ctld.wait();
    lab.run_ok("scancel", &[&id]);
    lab.stop();
}

/// Per-job pace: with a 2-GPU job at its saving share on each of n1 and n2, a job pending on a
/// dependency (and asking for n1) raises nothing; a job waiting for n2's GPUs puts n2's job
/// at full speed within a loop while n1's keeps saving, and its cancellation gives n2's job
/// back its share.
#[test]
fn a_queued_job_raises_only_the_running_job_it_waits_for_and_a_dependent_one_none() {
    // Pacing alone: no wait-cost bound.
    let (mut lab, power, daemons) = lab("raise_after_runs = 0\nmanage_power = false\nmax_wait_cost = 100");
    let mut ctld = start_ctld(&lab);
    let limits = |d: usize| {
        let l = |g: u32| daemons[d].sim.gpu_state(g).unwrap().power_limit_mw;
        (l(0), l(1))
    };
    let mut ids = Vec::new();
    for (d, node) in [(0, "n1"), (1, "n2")] {
        let job = lab.sbatch(&["--gres=gpu:2", "-w", node], "sleep 300\n").unwrap();
        wait_for(&mut lab, &power, "the job running", Duration::from_secs(60), |lab| {
            lab.job_info(job).is_some_and(|j| j.state == "RUNNING")
        });
        let id = job.to_string();
        let begin = ["job", "begin", "--job", &id, "--uid", "0", "--gpus", "0,1", "--energy", "min-energy"];
        common::assert_ok(&daemons[d].wattson(&begin));
        assert_eq!(limits(d), (420_000, 420_000));
        ids.push(id);
    }
    // Pending on a dependency: freeing n1's GPUs would not start it.
    let dependent = lab
        .sbatch(&["--gres=gpu:1", "-w", "n1", &format!("--dependency=afterok:{}", ids[0])], "true\n")
        .unwrap();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        assert_eq!((limits(0), limits(1)), ((420_000, 420_000), (420_000, 420_000)), "{}", ctld_log(&lab));
        std::thread::sleep(Duration::from_millis(200));
    }
    let reason = lab.job_info(dependent).unwrap().get("Reason").to_string();
    assert_eq!(reason, "Dependency");
    // Waiting for n2's GPUs: n2's job goes to full speed, n1's keeps saving.
    let waiting = lab.sbatch(&["--gres=gpu:1", "-w", "n2"], "true\n").unwrap();
    wait_for(&mut lab, &power, "n2's job at full speed", Duration::from_secs(10), |_| {
        limits(1) == (700_000, 700_000)
    });
    assert_eq!(limits(0), (420_000, 420_000), "{}", ctld_log(&lab));
    assert_eq!(lab.job_info(waiting).unwrap().state, "PENDING");
    let log = ctld_log(&lab);
    let full = |id: &str| {
        log.lines().any(|l| l.contains("pace set") && l.contains(&format!("job={id}")) && l.contains("Full"))
    };
    assert!(full(&ids[1]) && !full(&ids[0]), "{log}");
    lab.run_ok("scancel", &[&waiting.to_string()]);
    wait_for(&mut lab, &power, "n2's job saving again", Duration::from_secs(10), |_| {
        limits(1) == (420_000, 420_000)
    });
    for (d, id) in ids.iter().enumerate() {
        daemons[d].end(id);
    }
    let _ = ctld.kill();
    let _ = ctld.wait();
    lab.run_ok("scancel", &[&dependent.to_string(), &ids[0], &ids[1]]);
    lab.stop();
}

/// A job pending on a QOS limit (more GPUs per job than its QOS allows) would not start if
/// GPUs were freed: with it asking for n1, n1's running job keeps its saving share.
#[test]
fn a_job_pending_on_a_qos_limit_raises_nothing() {
    let (mut lab, power, daemons) = lab_with(
        "raise_after_runs = 0\nmanage_power = false",
        "AccountingStorageEnforce=limits,qos\nAccountingStorageTRES=gres/gpu\n",
        true,
    );
    lab.run_ok("sacctmgr", &["-i", "add", "qos", "onegpu", "MaxTRESPerJob=gres/gpu=1"]);
    lab.run_ok("sacctmgr", &["-i", "modify", "user", "root", "set", "qos+=onegpu"]);
    let mut ctld = start_ctld(&lab);
    let limits = || {
        let l = |g: u32| daemons[0].sim.gpu_state(g).unwrap().power_limit_mw;
        (l(0), l(1))
    };
    let job = lab.sbatch(&["--gres=gpu:2", "-w", "n1"], "sleep 300\n").unwrap();
    wait_for(&mut lab, &power, "the job running", Duration::from_secs(60), |lab| {
        lab.job_info(job).is_some_and(|j| j.state == "RUNNING")
    });
    let id = job.to_string();
    let begin = ["job", "begin", "--job", &id, "--uid", "0", "--gpus", "0,1", "--energy", "min-energy"];
    common::assert_ok(&daemons[0].wattson(&begin));
    assert_eq!(limits(), (420_000, 420_000));
    let limited = lab.sbatch(&["--gres=gpu:2", "-w", "n1", "--qos=onegpu"], "true\n").unwrap();
    let started = Instant::now();
    let mut reason = String::new();
    while started.elapsed() < Duration::from_secs(6) {
        reason = lab.job_info(limited).unwrap().get("Reason").to_string();
        let squeue = lab.run_ok("squeue", &["-h", "-o", wattson_ctld::slurm::SQUEUE_FORMAT]);
        assert_eq!(limits(), (420_000, 420_000), "{reason}\n{squeue}\n{}", ctld_log(&lab));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(reason.starts_with("QOSMax"), "{reason}");
    // The same job without the QOS waits for n1's GPUs: n1's job goes to full speed.
    lab.run_ok("scancel", &[&limited.to_string()]);
    let waiting = lab.sbatch(&["--gres=gpu:2", "-w", "n1"], "true\n").unwrap();
    wait_for(&mut lab, &power, "n1's job at full speed", Duration::from_secs(10), |_| {
        limits() == (700_000, 700_000)
    });
    daemons[0].end(&id);
    let _ = ctld.kill();
    let _ = ctld.wait();
    lab.run_ok("scancel", &[&waiting.to_string(), &id]);
    lab.stop();
}
