//! `wattson ctld` beside each of two slurmctld (a primary and its backup, the lab's
//! `slurm_lab::backup`): only the one beside the slurmctld in control acts; when the primary
//! dies, the backup's controller carries on from the state Slurm holds.

use std::path::Path;
use std::time::{Duration, Instant};

use wattson_harness::slurm_lab::backup::{CONTROLLERS, beside};
use wattson_harness::slurm_lab::{LabOptions, SlurmLab};

use super::ctld::{Ctld, NODES, lab_from, powered_down, pump, run_ctld, state, states};

/// Starts `wattson ctld` on `host`, with the lab's wattson.toml, and a state file and a
/// metrics file of its own.
fn start_beside(lab: &SlurmLab, host: &str) -> Ctld {
    let shared = std::fs::read_to_string(lab.dir().join("etc/wattson.toml")).unwrap();
    let metrics = format!("[ctld]\nmetrics_file = {:?}\n", metrics_path(lab, host));
    let own = shared.replace("ctld.json", &format!("ctld-{host}.json")).replacen("[ctld]\n", &metrics, 1);
    let config = lab.dir().join(format!("etc/wattson-{host}.toml"));
    std::fs::write(&config, own).unwrap();
    let wattson = wattson_harness::programs::program("wattson");
    run_ctld(lab, beside(host, &wattson), &config, &log_path(lab, host))
}

/// What `wattson power status` prints for the controller on `host`.
fn power_status(lab: &SlurmLab, host: &str) -> String {
    let out = std::process::Command::new(wattson_harness::programs::program("wattson"))
        .args(["power", "status", "-c"])
        .arg(lab.dir().join(format!("etc/wattson-{host}.toml")))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn metrics_path(lab: &SlurmLab, host: &str) -> std::path::PathBuf {
    lab.dir().join(format!("log/ctld-{host}.prom"))
}

/// How many loops the controller on `host` has finished, and how many power-downs it had
/// decided by the end of the last of them: one snapshot of its metrics file, written at the
/// end of each loop.
fn loops(lab: &SlurmLab, host: &str) -> (u64, u64) {
    let text = std::fs::read_to_string(metrics_path(lab, host)).unwrap_or_default();
    let value =
        |prefix: &str| text.lines().find_map(|l| l.strip_prefix(prefix)?.trim().parse().ok()).unwrap_or(0);
    (value("wattson_ctld_loops_total "), value("wattson_ctld_decisions_total{action=\"power_down\"} "))
}

fn log_path(lab: &SlurmLab, host: &str) -> std::path::PathBuf {
    lab.dir().join(format!("log/ctld-{host}.log"))
}

fn log_of(lab: &SlurmLab, host: &str) -> String {
    std::fs::read_to_string(log_path(lab, host)).unwrap_or_default()
}

/// How many power-downs the controller on `host` has asked of Slurm.
fn power_downs(lab: &SlurmLab, host: &str) -> usize {
    log_of(lab, host).lines().filter(|l| l.contains("power_down_asap: idle beyond")).count()
}

/// Pumps power actions into `done` until `until` holds; panics with the logs after `timeout`.
fn pump_until(
    lab: &mut SlurmLab,
    power: &Path,
    done: &mut Vec<String>,
    what: &str,
    timeout: Duration,
    until: &mut dyn FnMut(&SlurmLab) -> bool,
) {
    let started = Instant::now();
    while !until(lab) {
        done.extend(pump(lab, power));
        assert!(
            started.elapsed() < timeout,
            "{what}: not within {timeout:?}; nodes {:?}\nctl1:\n{}\nctl2:\n{}\n{}",
            states(lab),
            log_of(lab, "ctl1"),
            log_of(lab, "ctl2"),
            lab.all_logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn the_backups_controller_takes_over_when_the_primary_slurmctld_dies() {
    let (mut lab, power, _daemons) =
        lab_from("", LabOptions { backup_controller: true, ..Default::default() });
    let ctlds: Vec<Ctld> = CONTROLLERS.iter().map(|(host, _)| start_beside(&lab, host)).collect();
    let mut actions = Vec::new();

    // Both run; only the primary's acts: every idle node goes down once, by its decision.
    pump_until(
        &mut lab,
        &power,
        &mut actions,
        "idle nodes powered down",
        Duration::from_secs(40),
        &mut |lab| states(lab).iter().all(|s| powered_down(s)),
    );
    assert!(power_downs(&lab, "ctl1") > 0, "{}", log_of(&lab, "ctl1"));
    assert_eq!(power_downs(&lab, "ctl2"), 0, "{}", log_of(&lab, "ctl2"));
    assert!(log_of(&lab, "ctl2").contains("standby"), "{}", log_of(&lab, "ctl2"));
    let standing_by = power_status(&lab, "ctl2");
    assert!(standing_by.contains("stands by: the slurmctld on ctl1 is in control"), "{standing_by}");
    assert!(power_status(&lab, "ctl1").starts_with("as of"), "{}", power_status(&lab, "ctl1"));

    // A job wakes a node; the primary slurmctld dies while it runs.
    let job = lab.sbatch(&["--gres=gpu:1", "-t", "2"], "sleep 12\n").unwrap();
    pump_until(&mut lab, &power, &mut actions, "the job running", Duration::from_secs(60), &mut |lab| {
        lab.job_info(job).is_some_and(|j| j.state == "RUNNING")
    });
    let node = lab.job_info(job).unwrap().get("NodeList").to_string();
    // Slurm's own condition for a failover without loss: the primary has saved the running
    // job (a backup starts from the saved state; a job newer than it is lost with the primary).
    let running = std::time::SystemTime::now();
    let saved = lab.dir().join("state/job_state");
    pump_until(&mut lab, &power, &mut actions, "the running job saved", Duration::from_secs(30), &mut |_| {
        std::fs::metadata(&saved).and_then(|m| m.modified()).is_ok_and(|t| t > running)
    });
    let before = power_downs(&lab, "ctl1");
    lab.kill_primary();

    // The backup takes control (SlurmctldTimeout=5); the job ends and its node is idle.
    let mut in_control = false;
    let mut idle = false;
    pump_until(
        &mut lab,
        &power,
        &mut actions,
        "the job's node idle under the backup",
        Duration::from_secs(90),
        &mut |lab| {
            if !in_control
                && lab
                    .command("scontrol")
                    .args(["show", "node", "n1"])
                    .output()
                    .is_ok_and(|o| o.status.success())
            {
                in_control = true;
            }
            // Idle: the job has ended in Slurm (not still COMPLETING: the controller sees the
            // node as the job's until then) and the node is idle with no flag, or already past
            // it (being powered down).
            let s = state(lab, &node);
            idle = in_control
                && lab.job_info(job).is_some_and(|j| j.is_terminal())
                && (s == "IDLE" || s.starts_with("IDLE+POWER"));
            idle
        },
    );
    // The backup's controller powers it down within two of its loops of it being idle (the
    // loop under way, which may have read Slurm just before, and the next).
    let (idle_at, _) = loops(&lab, "ctl2");
    // The loops finished before the one that decided: read from the snapshot of the loop
    // that counted the power-down (the test may notice it a loop or more later).
    let mut decided_at = None;
    pump_until(
        &mut lab,
        &power,
        &mut actions,
        "the node powered down by the backup's controller",
        Duration::from_secs(30),
        &mut |lab| {
            if let (finished, 1..) = loops(lab, "ctl2") {
                decided_at.get_or_insert(finished - 1);
            }
            powered_down(&state(lab, &node))
        },
    );
    // Slurm may show the node down before the deciding loop has written its count (at the
    // loop's end): read it once written.
    let waited = Instant::now();
    while decided_at.is_none() && waited.elapsed() < Duration::from_secs(10) {
        if let (finished, 1..) = loops(&lab, "ctl2") {
            decided_at = Some(finished - 1);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let finished = decided_at.expect("the backup's controller counted its power-down") - idle_at;
    assert!(
        finished <= 2,
        "decided after {finished} loops had finished since the node was idle\n{}",
        log_of(&lab, "ctl2")
    );
    assert_eq!(
        power_downs(&lab, "ctl1"),
        before,
        "the primary's controller acted without its slurmctld:\n{}",
        log_of(&lab, "ctl1")
    );
    assert!(log_of(&lab, "ctl2").contains("acting"), "{}", log_of(&lab, "ctl2"));
    let primary = power_status(&lab, "ctl1");
    assert!(primary.contains("stands by: the slurmctld on ctl2 is in control"), "{primary}");
    assert!(power_status(&lab, "ctl2").starts_with("as of"), "{}", power_status(&lab, "ctl2"));

    // No node was powered down twice without a power-on between, and none is left down.
    for n in NODES {
        let mine: Vec<&str> = actions.iter().filter_map(|a| a.strip_suffix(&format!("-{n}"))).collect();
        assert!(mine.windows(2).all(|w| w[0] != w[1]), "{n}: {mine:?}");
    }
    for s in states(&lab) {
        assert!(powered_down(&s) && !s.starts_with("DOWN"), "{:?}", states(&lab));
    }
    drop(ctlds);
    lab.stop();
}
