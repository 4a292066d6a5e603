//! The end-of-job mail on a real Slurm: with `MailProg` set to `wattson-mail`, the mail Slurm
//! sends when a job ends carries the job's energy summary once `wattson ctld` has written it to
//! Slurm's accounting, the mail it sends when a job begins goes out at once and untouched, and
//! slurmctld is not held up meanwhile; a job without GPUs gets its mail at once.

use wattson_harness::node as common;
use wattson_harness::slurm_lab;

use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use common::{Node, assert_ok};
use slurm_lab::{LabNode, LabOptions, SlurmLab};

#[test]
fn the_end_of_job_mail_carries_the_jobs_energy_summary() {
    let scratch = tempfile::tempdir().unwrap();
    let mailbox = scratch.path().join("mailbox");
    std::fs::create_dir(&mailbox).unwrap();
    let controller_config = scratch.path().join("controller.toml");
    // Slurm runs MailProg with an environment of its own: the site's wrapper (here) names the
    // configuration and the lab's slurm.conf.
    let mail_prog = scratch.path().join("mailprog");
    let mailer = scratch.path().join("mailer");
    std::fs::write(
        &mailer,
        format!(
            "#!/bin/sh\nf={}/mail.$$\n{{ echo \"args: $*\"; cat; }} > $f.tmp && mv $f.tmp $f\n",
            mailbox.display()
        ),
    )
    .unwrap();
    let lab_conf = scratch.path().join("slurm.conf.path");
    std::fs::write(
        &mail_prog,
        format!(
            "#!/bin/sh\nexport WATTSON_CONFIG={} SLURM_CONF=$(cat {}) PATH=/usr/bin:/bin\nexec {} \"$@\"\n",
            controller_config.display(),
            lab_conf.display(),
            wattson_harness::programs::program("wattson-mail").display()
        ),
    )
    .unwrap();
    for script in [&mail_prog, &mailer] {
        std::fs::set_permissions(script, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    let mut daemon = Node::h100(2);
    let node = LabNode { addr: "127.0.0.2".into(), ..LabNode::new("n1", 2, "h100") };
    let lab = SlurmLab::start(LabOptions {
        nodes: vec![node.clone()],
        accounting: true,
        extra_conf: format!("MailProg={}\n", mail_prog.display()),
        ..LabOptions::default()
    });
    std::fs::write(&lab_conf, lab.conf().display().to_string()).unwrap();
    let munge = lab.dir().join("run/munge.sock");
    let port = slurm_lab::free_port();
    daemon.start_with_link(&node.addr, port, &munge);
    let controller = lab.summaries_only_controller(port);
    let mut config = std::fs::read_to_string(&controller).unwrap();
    config.push_str(&format!("[mail]\nprogram = [{:?}]\nwait = \"2m\"\n", mailer.display().to_string()));
    std::fs::write(&controller_config, config).unwrap();

    let id = lab
        .sbatch(&["--gres=gpu:1", "--mail-type=BEGIN,END", "--mail-user=alice"], "#!/bin/sh\nsleep 3\n")
        .unwrap();
    lab.wait_running(id, Duration::from_secs(60));
    daemon.sim.set_load(0, 0.7).unwrap();
    daemon.begin(&id.to_string(), 0, "0");
    let mails = || -> Vec<String> {
        let mut found: Vec<String> = std::fs::read_dir(&mailbox)
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| !e.file_name().to_string_lossy().ends_with(".tmp"))
            .map(|e| std::fs::read_to_string(e.path()).unwrap())
            .collect();
        found.sort();
        found
    };
    // The mail that the job began goes out at once, as Slurm wrote it.
    let deadline = Instant::now() + Duration::from_secs(30);
    while mails().is_empty() {
        assert!(Instant::now() < deadline, "no Began mail\n{}", lab.all_logs());
        std::thread::sleep(Duration::from_millis(200));
    }
    let began = mails().remove(0);
    assert!(
        began.contains(&format!("Job_id={id} ")) && began.contains("Began") && began.contains("alice"),
        "{began}"
    );
    assert!(!began.contains("GPU energy"), "{began}");

    assert_eq!(lab.wait_job(id, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    daemon.end(&id.to_string());
    let record = daemon.record(&id.to_string());
    // The end-of-job mail waits for the summary: none has been written yet.
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(mails().len(), 1, "the Ended mail went out before the summary: {:?}", mails());
    // slurmctld was not held up by the waiting mail.
    lab.run_ok("scontrol", &["ping"]);

    // ctld writes the job's summary into Slurm's accounting; the mail then goes out with it.
    let wattson = wattson_harness::programs::program("wattson");
    let deadline = Instant::now() + Duration::from_secs(90);
    while mails().len() < 2 {
        assert!(Instant::now() < deadline, "no Ended mail: {:?}\n{}", mails(), lab.all_logs());
        assert_ok(
            &lab.command(&wattson).arg("-c").arg(&controller).args(["ctld", "--once"]).output().unwrap(),
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    let ended = mails().into_iter().find(|m| m.contains("Ended")).expect("an Ended mail");
    assert!(ended.contains(&format!("Job_id={id} ")) && ended.contains("alice"), "{ended}");
    assert!(ended.contains("GPU energy (wattson):"), "{ended}");
    // `GPU energy: 0.000 kWh (1.44KJ)`: the record's energy, to the three digits shown.
    let shown = ended
        .lines()
        .find_map(|l| l.strip_prefix("GPU energy: "))
        .and_then(|v| v.split('(').nth(1))
        .map(|v| v.trim_end_matches(')').trim_end_matches('J'))
        .unwrap_or_else(|| panic!("no GPU energy line: {ended}"));
    let (number, scale) = match shown.strip_suffix('K') {
        Some(n) => (n, 1e3),
        None => (shown.strip_suffix('M').unwrap_or(shown), if shown.ends_with('M') { 1e6 } else { 1.0 }),
    };
    let joules = number.trim().parse::<f64>().unwrap_or_else(|e| panic!("{shown}: {e}")) * scale;
    let truth = record.energy_j();
    assert!((joules - truth).abs() <= 0.005 * truth, "{shown} vs the record's {truth} J");

    // A job that asked for no GPU has no wattson record: its mail goes at once, untouched,
    // instead of waiting (here up to 2 minutes) for a summary that never comes.
    let cpu_only = lab.sbatch(&["--mail-type=END", "--mail-user=bob"], "#!/bin/sh\nsleep 1\n").unwrap();
    assert_eq!(lab.wait_job(cpu_only, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    let deadline = Instant::now() + Duration::from_secs(30);
    let mail = loop {
        if let Some(mail) = mails().into_iter().find(|m| m.contains(&format!("Job_id={cpu_only} "))) {
            break mail;
        }
        assert!(Instant::now() < deadline, "no mail for the CPU-only job: {:?}\n{}", mails(), lab.all_logs());
        std::thread::sleep(Duration::from_millis(200));
    };
    assert!(mail.contains("Ended") && mail.contains("bob") && !mail.contains("wattson"), "{mail}");
    lab.stop();
}
