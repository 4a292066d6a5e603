//! `wattson ctld` keeping a cluster power budget on a real Slurm (the lab of [`super::ctld`],
//! with job_submit/wattson loaded and the nodes' Prolog/Epilog registering each job with its
//! wattsond): new jobs are held at submission and released only while their start fits.

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use wattson_harness::node as common;
use wattson_harness::slurm_lab::{self, LabOptions, SlurmLab};

use super::ctld::{NODES, ctld_log, lab_from, start_ctld, wait_live};

/// `[ctld.node] base_w` and an H100's idle draw (the engine's prior), as the controller counts.
const BASE_W: f64 = 400.0;
const IDLE_W: f64 = 72.0;
/// The budget: three powered nodes (1632 W) and two 1-GPU jobs at the H100's 700 W limit
/// (2888 W) fit under 96% of it; a third job (3516 W) does not.
const BUDGET_W: f64 = 3200.0;

/// Four 1-GPU jobs submitted at once on three idle 2-GPU nodes (room for all four): each is
/// held by job_submit, the controller releases two, and the others only as those end. At every
/// look the nodes' draw, counting each running job's GPU at its power limit (the fake GPUs'
/// truth) and each other GPU at idle, stays under the budget; no job is killed.
#[test]
fn new_jobs_wait_for_room_under_the_power_budget_and_all_complete() {
    let work = tempfile::tempdir().unwrap();
    let plugins = work.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let built = common::build_plugins(false);
    slurm_lab::install_plugin(&built.join(common::PLUGIN_LIBS[1]), &plugins, "job_submit_wattson.so");
    // The nodes' Prolog and Epilog as docs/slurm.md's plugin-free set-up gives them; each
    // node's wattsond config is found by node name (written once the daemons exist).
    let wattson = wattson_harness::programs::program("wattson");
    let (prolog, epilog) = (work.path().join("prolog.sh"), work.path().join("epilog.sh"));
    for (path, verb) in [(&prolog, "begin"), (&epilog, "end")] {
        let script = format!(
            "#!/bin/sh\nexport WATTSON_CONFIG=$(cat {w}/config-$SLURMD_NODENAME)\n{} job {verb} >>{w}/prolog.log 2>&1\nexit 0\n",
            wattson.display(),
            w = work.path().display()
        );
        std::fs::write(path, script).unwrap();
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // slurmctld's job_submit reads this copy of the lab's wattson.toml (written below).
    let shared = work.path().join("wattson.toml");
    let (mut lab, power, daemons) = lab_from(
        &format!("manage_power = false\n[budget]\npower_w = {BUDGET_W}"),
        LabOptions {
            job_submit_plugins: Some("wattson".into()),
            plugin_dir: Some(plugins),
            daemon_env: vec![("WATTSON_CONFIG".into(), shared.display().to_string())],
            extra_conf: format!(
                "Prolog={}\nEpilog={}\nSchedulerParameters=batch_sched_delay=0,bf_interval=1\n",
                prolog.display(),
                epilog.display()
            ),
            ..Default::default()
        },
    );
    for (name, daemon) in NODES.iter().zip(&daemons) {
        std::fs::write(work.path().join(format!("config-{name}")), daemon.config.display().to_string())
            .unwrap();
    }
    std::fs::copy(lab.dir().join("etc/wattson.toml"), &shared).unwrap();
    let _ctld = start_ctld(&lab);
    // job_submit holds jobs only while the controller is live (its state file is fresh).
    wait_live(&lab, &lab.dir().join("ctld.json"));

    let jobs: Vec<u32> =
        (0..4).map(|_| lab.sbatch(&["--gres=gpu:1", "-t", "5"], "#!/bin/sh\nsleep 6\n").unwrap()).collect();
    let comment = |lab: &SlurmLab, job: u32| {
        lab.job_info(job).and_then(|j| j.fields.get("AdminComment").cloned()).unwrap_or_default()
    };
    for &job in &jobs {
        let c = comment(&lab, job);
        assert!(c.contains("held=budget") || c.contains("released=budget"), "job {job}: {c}");
    }
    let (mut most, mut held_beside_two, mut reasons) =
        (0, false, std::collections::BTreeSet::<String>::new());
    let started = Instant::now();
    loop {
        super::ctld::pump(&mut lab, &power);
        let infos: Vec<_> = jobs.iter().map(|&j| lab.job_info(j).unwrap()).collect();
        let running = infos.iter().filter(|j| j.state == "RUNNING").count();
        // Each running job's GPU at the largest limit any node's GPU has (its own or more).
        let busy_w = daemons
            .iter()
            .flat_map(|d| (0..2).map(|g| f64::from(d.sim.gpu_state(g).unwrap().power_limit_mw) / 1000.0))
            .fold(0.0, f64::max);
        let draw = NODES.len() as f64 * BASE_W + running as f64 * busy_w + (6 - running) as f64 * IDLE_W;
        assert!(draw <= BUDGET_W, "{running} jobs running: {draw} W over {BUDGET_W} W\n{}", ctld_log(&lab));
        most = most.max(running);
        reasons.extend(infos.iter().filter_map(|j| j.fields.get("Reason").cloned()));
        held_beside_two |= running == 2
            && infos.iter().any(|j| {
                j.state == "PENDING" && j.fields.get("Reason").is_some_and(|r| r.starts_with("JobHeld"))
            });
        if infos
            .iter()
            .all(|j| !matches!(j.state.as_str(), "PENDING" | "RUNNING" | "CONFIGURING" | "COMPLETING"))
        {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(120), "jobs not done: {infos:?}\n{}", ctld_log(&lab));
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(most, 2, "two jobs fit under the budget at once\n{}", ctld_log(&lab));
    assert!(held_beside_two, "a job waited, held, beside the two running: reasons seen {reasons:?}");
    for &job in &jobs {
        let info = lab.wait_job(job, Duration::from_secs(5));
        assert_eq!((info.state.as_str(), info.exit_code.as_str()), ("COMPLETED", "0:0"), "job {job}");
        assert!(comment(&lab, job).ends_with("released=budget"), "job {job}: {}", comment(&lab, job));
    }
    let log = ctld_log(&lab);
    assert_eq!(log.matches("release: the job's start fits under the power budget").count(), 4, "{log}");
    // The nodes gave each running job's level table (none refused or unreachable).
    assert!(!log.contains("job's levels"), "{log}");
}
