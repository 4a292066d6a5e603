//! `wattson ctld` and the power programs on a real Slurm: three slurmd nodes on loopback with
//! Slurm's power saving on and its idle timer off. A node's power action is a stand-in the
//! test observes (the action touches a file; the test stops or starts that node's slurmd, with
//! `-b` for a fresh boot as a real power-on gives).

use wattson_harness::node as common;
use wattson_harness::slurm_lab;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use slurm_lab::{LabNode, LabOptions, SlurmLab, parse_record};
pub(super) use wattson_harness::ctld::{Ctld, pump, run_ctld, state};
use wattson_harness::ctld::{power_conf, power_table, pump_some};

pub(super) static WATTSON: std::sync::LazyLock<std::path::PathBuf> =
    std::sync::LazyLock::new(|| wattson_harness::programs::program("wattson"));
/// A program Slurm runs for the controller, as its absolute path.
fn program(name: &str) -> String {
    wattson_harness::programs::program(name).display().to_string()
}

/// Where the programs Slurm runs for the controller are (the build's).
fn programs_dir() -> PathBuf {
    wattson_harness::programs::program("wattson-suspend").parent().expect("in a folder").to_path_buf()
}

pub(super) const NODES: [&str; 3] = ["n1", "n2", "n3"];

/// A lab, its power-request directory, each node's wattsond (on 2 simulated GPUs, taking the
/// controller's requests at the node's own loopback address), and the wattson.toml beside
/// its slurm.conf (with `ctld` added to its `[ctld]` table).
pub(super) fn lab(ctld: &str) -> (SlurmLab, PathBuf, Vec<common::Node>) {
    lab_with(ctld, "", false)
}

/// [`lab`] with `conf` added to slurm.conf, and Slurm's accounting when `accounting`.
pub(super) fn lab_with(ctld: &str, conf: &str, accounting: bool) -> (SlurmLab, PathBuf, Vec<common::Node>) {
    lab_from(ctld, LabOptions { extra_conf: conf.to_string(), accounting, ..Default::default() })
}

/// [`lab`] from `options` (its nodes and power lines are the lab's own).
pub(super) fn lab_from(ctld: &str, options: LabOptions) -> (SlurmLab, PathBuf, Vec<common::Node>) {
    lab_of_types(ctld, options, ["h100"; 3])
}

/// [`lab_from`] with the nodes' GPUs of `types` in Slurm's `Gres` (each wattsond's stay H100s).
pub(super) fn lab_of_types(
    ctld: &str,
    options: LabOptions,
    types: [&str; 3],
) -> (SlurmLab, PathBuf, Vec<common::Node>) {
    let nodes = NODES
        .iter()
        .zip(types)
        .enumerate()
        .map(|(i, (n, t))| LabNode { addr: format!("127.0.0.{}", i + 2), ..LabNode::new(n, 2, t) })
        .collect::<Vec<_>>();
    let lab = SlurmLab::start(LabOptions {
        nodes: nodes.clone(),
        extra_conf: power_conf(&programs_dir()) + &options.extra_conf,
        ..options
    });
    let munge = lab.dir().join("run/munge.sock");
    let port = slurm_lab::free_port();
    let daemons = nodes
        .iter()
        .map(|n| {
            let mut daemon = common::Node::h100(2);
            let text = std::fs::read_to_string(&daemon.config)
                .unwrap()
                .replace("node_name = \"n1\"", &format!("node_name = \"{}\"", n.name));
            std::fs::write(
                &daemon.config,
                format!("{text}\n[link]\nlisten = \"{}:{port}\"\nmunge_socket = {munge:?}\n", n.addr),
            )
            .unwrap();
            daemon.start();
            daemon
        })
        .collect();
    let power = lab.dir().join("power");
    std::fs::create_dir(&power).unwrap();
    let toml = format!(
        "[ctld]\ninterval = \"1s\"\nforecast_window_s = 60\nstate_file = \"{state}\"\n{ctld}\n\
         [ctld.node]\nboot_s = 2\nshutdown_s = 1\n\
         {power_table}[link]\nport = {port}\nmunge_socket = {munge:?}\n",
        power_table = power_table(&power, &lab.dir().join("log/power.log")),
        state = lab.dir().join("ctld.json").display(),
    );
    std::fs::write(lab.dir().join("etc/wattson.toml"), toml).unwrap();
    (lab, power, daemons)
}

pub(super) fn states(lab: &SlurmLab) -> Vec<String> {
    NODES.iter().map(|n| state(lab, n)).collect()
}

/// Pumps power requests until `done` holds; panics with the logs after `timeout`.
pub(super) fn wait_for(
    lab: &mut SlurmLab,
    power: &Path,
    what: &str,
    timeout: Duration,
    done: impl Fn(&SlurmLab) -> bool,
) {
    let started = Instant::now();
    while !done(lab) {
        pump(lab, power);
        if started.elapsed() > timeout {
            panic!(
                "{what}: not within {timeout:?}; nodes {:?}\n{}\n{}",
                states(lab),
                ctld_log(lab),
                lab.all_logs()
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub(super) fn ctld_log(lab: &SlurmLab) -> String {
    std::fs::read_to_string(lab.dir().join("log/ctld.log")).unwrap_or_default()
}

/// Waits until the controller has written its state file (job_submit holds jobs for it only
/// then); panics with its log after 20 s.
pub(super) fn wait_live(lab: &SlurmLab, state_file: &Path) {
    let started = Instant::now();
    while !state_file.exists() {
        assert!(started.elapsed() < Duration::from_secs(20), "ctld never wrote its state\n{}", ctld_log(lab));
        std::thread::sleep(Duration::from_millis(100));
    }
}

pub(super) fn start_ctld(lab: &SlurmLab) -> Ctld {
    // Beside the lab's Slurm (another release's root, when the lab runs one), so that it
    // reads that release's scontrol and squeue.
    let command = slurm_lab::release().command(&*WATTSON);
    run_ctld(lab, command, &lab.dir().join("etc/wattson.toml"), &lab.dir().join("log/ctld.log"))
}

pub(super) fn powered_down(state: &str) -> bool {
    state.contains("POWERED_DOWN")
}

#[test]
fn ctld_sleeps_idle_nodes_slurm_wakes_them_for_jobs_and_never_a_busy_one() {
    let (mut lab, power, _daemons) = lab("");

    // Slurm's own idle timer is off: without ctld, idle nodes stay up.
    std::thread::sleep(Duration::from_secs(4));
    assert!(states(&lab).iter().all(|s| s == "IDLE"), "{:?}", states(&lab));
    assert!(pump(&mut lab, &power).is_empty());

    // ctld sees no demand: every idle node goes down, by its decision.
    let mut ctld = start_ctld(&lab);
    wait_for(&mut lab, &power, "idle nodes powered down", Duration::from_secs(40), |lab| {
        states(lab).iter().all(|s| powered_down(s))
    });
    let log = ctld_log(&lab);
    assert!(log.contains("power_down_asap") && log.contains("warm set"), "{log}");
    // `wattson power status` shows each node off (as of ctld's next loop) and why, and the
    // wait-cost bound (no job ran: nothing observed).
    let started = Instant::now();
    loop {
        let out = Command::new(&*WATTSON)
            .args(["power", "status", "-c"])
            .arg(lab.dir().join("etc/wattson.toml"))
            .output()
            .unwrap();
        let status = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.status.success(), "{status}{}", String::from_utf8_lossy(&out.stderr));
        let lines: Vec<&str> =
            NODES.iter().filter_map(|n| status.lines().find(|l| l.starts_with(n))).collect();
        if lines.len() == NODES.len()
            && status
                .contains("wait cost: DVFS lengthened the queue's waits by 0.0% as observed (bound 5.0%)\n")
            && lines
                .iter()
                .all(|l| l.contains(" off ") && l.contains("power_down_asap: idle beyond the warm set"))
        {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10), "{status}");
        std::thread::sleep(Duration::from_millis(300));
    }

    // A job needs a node: Slurm wakes one, the job runs there, and that node is never powered
    // down while it runs.
    let job = lab.sbatch(&["--gres=gpu:1"], "sleep 6\n").unwrap();
    let mut booted = None;
    let started = Instant::now();
    while lab.job_info(job).is_none_or(|j| j.state != "RUNNING") {
        if pump(&mut lab, &power).iter().any(|a| a.starts_with("on-")) {
            booted.get_or_insert_with(Instant::now);
        }
        assert!(started.elapsed() < Duration::from_secs(60), "job not running\n{}", lab.all_logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    let boot_to_running = booted.expect("Slurm woke a node for the job").elapsed();
    // PrologSlurmctld (wattson-ctld-prolog) lets the job start as soon as its node is up,
    // not at slurmctld's next 30 s pass.
    assert!(boot_to_running < Duration::from_secs(5), "node up to job running: {boot_to_running:?}");
    let node = lab.job_info(job).unwrap().get("NodeList").to_string();
    while !lab.job_info(job).unwrap().is_terminal() {
        let state = state(&lab, &node);
        assert!(!state.contains("POWER"), "{node} with a running job: {state}\n{}", ctld_log(&lab));
        pump(&mut lab, &power);
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(lab.job_info(job).unwrap().state, "COMPLETED");
    eprintln!("node powered on to job running: {boot_to_running:?}");

    // With ctld stopped, nothing is powered down and sleeping nodes still wake on demand.
    let _ = ctld.kill();
    let _ = ctld.wait();
    let asleep: Vec<String> =
        NODES.iter().filter(|n| powered_down(&state(&lab, n))).map(|n| n.to_string()).collect();
    assert!(!asleep.is_empty(), "{:?}", states(&lab));
    let two = lab.sbatch(&["--gres=gpu:2", "-N", "3"], "sleep 1\n").unwrap();
    wait_for(&mut lab, &power, "a three-node job with ctld stopped", Duration::from_secs(90), |lab| {
        lab.job_info(two).is_some_and(|j| j.is_terminal())
    });
    assert_eq!(lab.job_info(two).unwrap().state, "COMPLETED");
    lab.stop();
}

#[test]
fn power_programs_refuse_hostile_hostlists_and_run_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let marks = dir.path().join("marks");
    std::fs::create_dir(&marks).unwrap();
    let log = dir.path().join("power.log");
    let config = dir.path().join("wattson.toml");
    std::fs::write(
        &config,
        format!(
            "[power]\nresume = [\"/usr/bin/touch\", \"{}/{{node}}\"]\nlog = \"{}\"\n",
            marks.display(),
            log.display()
        ),
    )
    .unwrap();
    for hostile in ["n[1-100000000]", "n1;touch /tmp/x", "n$(id)", "../etc", "n1`x`"] {
        let status = Command::new(program("wattson-resume"))
            .arg(hostile)
            .env_clear()
            .env("WATTSON_CONFIG", &config)
            .status()
            .unwrap();
        assert!(!status.success(), "{hostile} accepted");
    }
    assert_eq!(std::fs::read_dir(&marks).unwrap().count(), 0, "an action ran");
    let logged = std::fs::read_to_string(&log).unwrap();
    assert_eq!(logged.matches("refused hostlist").count(), 5, "{logged}");

    // A good list runs each node's action, never through a shell.
    let status = Command::new(program("wattson-resume"))
        .arg("gpu[01-03]")
        .env_clear()
        .env("WATTSON_CONFIG", &config)
        .status()
        .unwrap();
    assert!(status.success());
    let mut made: Vec<String> =
        std::fs::read_dir(&marks).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    made.sort();
    assert_eq!(made, ["gpu01", "gpu02", "gpu03"]);
}

#[test]
fn a_failed_resume_is_retried_into_service_or_left_down_with_a_wattson_reason() {
    let (mut lab, power, _daemons) = lab("resume_retries = 1\nresume_retry_pause = \"1s\"");
    let mut ctld = start_ctld(&lab);
    wait_for(&mut lab, &power, "idle nodes powered down", Duration::from_secs(40), |lab| {
        states(lab).iter().all(|s| powered_down(s))
    });

    // The node Slurm wakes for a job never comes up: Slurm marks it down at ResumeTimeout,
    // ctld powers it up once more (still nothing), then leaves it down with its own reason.
    let first = lab.sbatch(&["--gres=gpu:1"], "sleep 1\n").unwrap();
    let mut dead: Option<String> = None;
    let started = Instant::now();
    let gave_up = loop {
        pump_some(&mut lab, &power, &mut |action| {
            let node = action.strip_prefix("on-").map(str::to_string);
            match (&dead, node) {
                (None, Some(node)) => {
                    dead = Some(node);
                    false
                }
                (Some(d), Some(node)) => *d != node,
                (_, None) => true,
            }
        });
        if let Some(node) = &dead {
            let record = parse_record(lab.run_ok("scontrol", &["-o", "show", "node", node]).trim());
            if record.get("Reason").is_some_and(|r| r.starts_with("wattson: resume failed after retries")) {
                break node.clone();
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(150),
            "never gave up: {:?}\n{}",
            states(&lab),
            ctld_log(&lab)
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let log = ctld_log(&lab);
    let retries = format!("powering it up again node={gave_up} try_=");
    assert_eq!(log.matches(&retries).count(), 1, "{log}");
    assert!(log.contains("stays down for an administrator"), "{log}");
    assert!(state(&lab, &gave_up).starts_with("DOWN"), "{}", state(&lab, &gave_up));
    lab.run_ok("scancel", &[&first.to_string()]);

    // A node that fails its first resume only (powered up as an administrator would): ctld's
    // retry brings it into service.
    let node = NODES
        .iter()
        .find(|n| **n != gave_up && powered_down(&state(&lab, n)))
        .expect("a sleeping node")
        .to_string();
    lab.run_ok("scontrol", &["update", &format!("nodename={node}"), "state=power_up"]);
    let mut refused = false;
    let started = Instant::now();
    loop {
        let on = format!("on-{node}");
        pump_some(&mut lab, &power, &mut |action| {
            if action == on && !refused {
                refused = true;
                return false;
            }
            true
        });
        let now = state(&lab, &node);
        let retried = ctld_log(&lab)
            .lines()
            .any(|l| l.contains("powering it up again") && l.contains(&format!("node={node}")));
        if retried
            && !now.starts_with("DOWN")
            && !now.contains("POWERING_UP")
            && !now.contains("NOT_RESPONDING")
        {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(100),
            "{node} not back in service: {now}\n{}\n{}\n{}",
            lab.run_ok("scontrol", &["-o", "show", "node", &node]),
            ctld_log(&lab),
            lab.log("slurmctld")
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert!(refused);
    let _ = ctld.kill();
    let _ = ctld.wait();
    lab.stop();
}

#[test]
fn slurm_places_jobs_by_the_weights_ctld_sets_again_after_a_reconfigure() {
    // No power saving here: ctld only ranks nodes.
    let nodes = NODES.iter().map(|n| LabNode::new(n, 2, "h100")).collect();
    let lab = SlurmLab::start(LabOptions { nodes, ..Default::default() });
    std::fs::write(lab.dir().join("etc/wattson.toml"), "[ctld]\ninterval = \"1s\"\nmanage_power = false\n")
        .unwrap();
    let node_of = |lab: &SlurmLab, job: u32| {
        let started = Instant::now();
        loop {
            let info = lab.job_info(job).unwrap();
            if info.state == "RUNNING" || info.is_terminal() {
                return info.get("NodeList").to_string();
            }
            assert!(started.elapsed() < Duration::from_secs(30), "{info:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    let weight = |lab: &SlurmLab, node: &str| -> u32 {
        let line = lab.run_ok("scontrol", &["-o", "show", "node", node]);
        parse_record(line.trim())["Weight"].parse().unwrap()
    };
    // n1 holds a CPU-only job, n2 a 1-GPU job: both have one CPU free, n2 only one GPU.
    let cpu_only = lab.sbatch(&["-c", "1", "-w", "n1"], "sleep 120\n").unwrap();
    let one_gpu = lab.sbatch(&["-c", "1", "--gres=gpu:1", "-w", "n2"], "sleep 120\n").unwrap();
    assert_eq!((node_of(&lab, cpu_only), node_of(&lab, one_gpu)), ("n1".to_string(), "n2".to_string()));
    // Slurm's own order puts a 1-GPU job on n1, leaving two half-used GPU nodes.
    let plain = lab.sbatch(&["-c", "1", "--gres=gpu:1"], "sleep 1\n").unwrap();
    assert_eq!(node_of(&lab, plain), "n1");
    lab.wait_job(plain, Duration::from_secs(30));

    let mut ctld = start_ctld(&lab);
    let settled =
        |lab: &SlurmLab| weight(lab, "n2") < weight(lab, "n1") && weight(lab, "n2") < weight(lab, "n3");
    let started = Instant::now();
    while !settled(&lab) {
        assert!(started.elapsed() < Duration::from_secs(20), "weights not set\n{}", ctld_log(&lab));
        std::thread::sleep(Duration::from_millis(200));
    }
    // Best fit on GPUs: the next 1-GPU job fills n2.
    let packed = lab.sbatch(&["-c", "1", "--gres=gpu:1"], "sleep 1\n").unwrap();
    assert_eq!(node_of(&lab, packed), "n2", "{}", ctld_log(&lab));

    // A reconfigure drops the weights to slurm.conf's; the next loops set them again.
    lab.reconfigure();
    let started = Instant::now();
    while !settled(&lab) {
        assert!(started.elapsed() < Duration::from_secs(20), "weights not set again\n{}", ctld_log(&lab));
        std::thread::sleep(Duration::from_millis(200));
    }
    let _ = ctld.kill();
    let _ = ctld.wait();
    lab.run_ok("scancel", &[&cpu_only.to_string(), &one_gpu.to_string()]);
    lab.stop();
}

/// With `queue_order = "response-ratio"`, ctld gives the pending jobs nice values in the
/// engine's order, an offset on the priority Slurm computes (not a replacement), and Slurm
/// starts them so: a 1-GPU, 1-minute job queued behind a 2-GPU, 1-hour one gets the GPU that
/// frees first, where Slurm's own order would start the large job. Under
/// `priority/multifactor` (with the partition's factor only, so both jobs start equal), whose
/// priorities are computed alike on every release (ctld_basic.rs: Slurm's default).
#[test]
fn slurm_starts_pending_jobs_in_the_order_ctld_gives_them() {
    let nodes = NODES.iter().map(|n| LabNode::new(n, 2, "h100")).collect();
    let extra_conf = "PriorityType=priority/multifactor\nPriorityWeightPartition=1000\nPriorityWeightAge=0\n\
                      PriorityWeightFairshare=0\nPriorityWeightJobSize=0\nPriorityWeightQOS=0\n"
        .to_string();
    let lab = SlurmLab::start(LabOptions { nodes, extra_conf, ..Default::default() });
    std::fs::write(
        lab.dir().join("etc/wattson.toml"),
        "[ctld]\ninterval = \"1s\"\nmanage_power = false\nweights = false\nqueue_order = \"response-ratio\"\n",
    )
    .unwrap();
    let info = |job: u32| lab.job_info(job).unwrap();
    let priority = |job: u32| -> u64 { info(job).get("Priority").parse().unwrap() };
    let until = |what: &str, done: &dyn Fn() -> bool| {
        let started = Instant::now();
        while !done() {
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "{what}\n{}\n{}\n{}",
                lab.run_ok("squeue", &["-o", wattson_ctld::slurm::SQUEUE_FORMAT]),
                ctld_log(&lab),
                lab.all_logs()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    };
    let blocker = lab.sbatch(&["--gres=gpu:2", "-w", "n1", "-t", "10"], "sleep 300\n").unwrap();
    until("the blocker running", &|| info(blocker).state == "RUNNING");
    let large = lab.sbatch(&["--gres=gpu:2", "-w", "n1", "-t", "60"], "sleep 1\n").unwrap();
    let small = lab.sbatch(&["--gres=gpu:1", "-w", "n1", "-t", "1"], "sleep 5\n").unwrap();
    // Equal priorities: Slurm tries the older job, the large one, first.
    assert_eq!((priority(large), priority(small)), (1000, 1000));
    let (large_before, small_before) = (priority(large), priority(small));

    let mut ctld = start_ctld(&lab);
    until("the small job ranked first", &|| priority(small) > priority(large));
    // Nice -10000 (the default order_weight) for the first of two, -5000 for the second, each
    // taken off the priority Slurm had given the job.
    assert_eq!((info(small).get("Nice"), info(large).get("Nice")), ("-10000", "-5000"));
    assert_eq!((priority(small) - small_before, priority(large) - large_before), (10_000, 5_000));
    assert_eq!((info(large).state.as_str(), info(small).state.as_str()), ("PENDING", "PENDING"));
    lab.run_ok("scancel", &[&blocker.to_string()]);
    until("a pending job started", &|| info(small).state != "PENDING" || info(large).state != "PENDING");
    assert_eq!(info(small).state, "RUNNING", "{}", ctld_log(&lab));
    assert_eq!(info(large).state, "PENDING");
    assert!(
        ctld_log(&lab).contains("pending jobs' priorities carry the policy's order"),
        "{}",
        ctld_log(&lab)
    );
    // The form ctld reads follows the lab's release: JSON from 23.02 on, text on 22.05.
    let form =
        if slurm_lab::release().name.is_some() { "reading Slurm's JSON" } else { "reading Slurm's text" };
    assert!(ctld_log(&lab).contains(form), "{}", ctld_log(&lab));
    // The large job starts once the small one has freed its GPU.
    let done = lab.wait_job(large, Duration::from_secs(60));
    assert_eq!(done.state, "COMPLETED", "{done:?}");
    let _ = ctld.kill();
    let _ = ctld.wait();
    lab.stop();
}
