//! `wattson job-summary <id>` through the binary, on a node with simulated GPUs: the figures
//! are the job's record's, the setting is what the node gave its GPU, and the tariff and carbon
//! tables price it.

use wattson_harness::node as common;

use common::{Node, assert_ok};

fn line<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
        .unwrap_or_else(|| panic!("no {name}:\n{out}"))
}

#[test]
fn a_finished_jobs_summary_on_its_node() {
    let node = Node::h100(2);
    let flat = |v: &str| format!("[{}]", vec![v; 24].join(", "));
    let text = std::fs::read_to_string(&node.config).unwrap();
    std::fs::write(&node.config, format!("{text}\n[prices]\nhourly_utc = {}\n", flat("0.25"))).unwrap();
    let mut node = node;
    node.start();
    node.sim.set_load(0, 0.6).unwrap();
    node.begin("5", 0, "0");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    node.end("5");
    let record = node.record("5");

    let out = node.wattson(&["job-summary", "5", "--local"]);
    assert_ok(&out);
    let out = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(line(&out, "Job ID"), "5");
    assert_eq!(line(&out, "GPUs"), "1");
    // The energy in joules, as the record has it.
    let energy = line(&out, "GPU energy");
    let joules: f64 = energy.split('(').nth(1).unwrap().trim_end_matches("J)").parse().unwrap();
    assert!((joules - record.energy_j()).abs() <= 1.0, "{energy} vs {} J", record.energy_j());
    // Balanced under fixed shares: 85% of the H100's 700 W.
    assert_eq!(line(&out, "Setting"), "power limit 595 W on 1 GPU");
    assert!(line(&out, "Why").starts_with("policy balanced: the site's fixed share"), "{out}");
    let mean: f64 = line(&out, "Mean power").split(' ').next().unwrap().parse().unwrap();
    let expected = record.energy_j() / record.elapsed_s(0);
    assert!((mean - expected).abs() <= 1.0, "{mean} W vs {expected} W");
    let cost: f64 = line(&out, "Cost").parse().unwrap();
    assert!((cost - 0.25 * record.energy_j() / 3.6e6).abs() < 0.01, "{cost}");
    assert_eq!(line(&out, "CO2"), "n/a (no [carbon] table)");

    let missing = node.wattson(&["job-summary", "6", "--local"]);
    assert!(!missing.status.success());
    assert!(String::from_utf8_lossy(&missing.stderr).contains("job 6 has no wattson record"), "{missing:?}");
}

/// `wattson-mail` as Slurm runs it for an ended job, with no Slurm accounting to find the
/// summary in: it returns at once, holds none of the caller's pipes while it waits, and after
/// `[mail] wait` hands the mail on without the summary, saying why.
#[test]
fn an_end_of_job_mail_returns_at_once_and_goes_without_a_summary_that_never_comes() {
    use std::io::Read;
    use std::time::{Duration, Instant};
    let dir = tempfile::tempdir().unwrap();
    let mailbox = dir.path().join("mail.txt");
    let mailer = dir.path().join("mailer");
    std::fs::write(
        &mailer,
        format!("#!/bin/sh\n{{ echo \"args: $*\"; cat; }} > {0}.tmp && mv {0}.tmp {0}\n", mailbox.display()),
    )
    .unwrap();
    std::fs::set_permissions(&mailer, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let config = dir.path().join("wattson.toml");
    std::fs::write(
        &config,
        format!("[mail]\nprogram = [{:?}]\nwait = \"3s\"\n", mailer.display().to_string()),
    )
    .unwrap();
    let program = wattson_harness::programs::program("wattson-mail");
    let started = Instant::now();
    let mut child = std::process::Command::new(program)
        .args(["-s", "Slurm Job_id=77 Name=train Ended, Run time 00:00:03, COMPLETED, ExitCode 0", "alice"])
        .env("WATTSON_CONFIG", &config)
        .env("SLURM_CONF", dir.path().join("no-slurm.conf"))
        .env_remove("SLURM_JOB_ID")
        .env_remove("SLURM_JOB_MAIL_TYPE")
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Slurm reads the program's output to its end: that end comes at once, not after the wait.
    let mut out = String::new();
    child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
    let mut err = String::new();
    child.stderr.take().unwrap().read_to_string(&mut err).unwrap();
    assert!(child.wait().unwrap().success(), "{err}");
    assert!(started.elapsed() < Duration::from_secs(2), "held for {:?}", started.elapsed());
    assert!(!mailbox.exists(), "the mail went out before the wait");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !mailbox.exists() {
        assert!(Instant::now() < deadline, "no mail after the wait");
        std::thread::sleep(Duration::from_millis(100));
    }
    let mail = std::fs::read_to_string(&mailbox).unwrap();
    assert!(
        mail.starts_with("args: -s Slurm Job_id=77 Name=train Ended,") && mail.contains(" alice\n"),
        "{mail}"
    );
    assert!(
        mail.contains("was not in Slurm's accounting within 3s") && mail.contains("wattson job-summary 77"),
        "{mail}"
    );
}
