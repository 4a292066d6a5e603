//! Captures what the controller reads of Slurm (nodes, pending and running jobs, ended jobs)
//! from a lab of the release `WATTSON_SLURM_RELEASE` names, in the JSON and the text forms,
//! into crates/ctld/fixtures/slurm/<release>/, for the parsers' unit tests there. Ignored:
//! `scripts/capture-slurm-outputs` runs it for each release (the fixtures are committed).
//!
//! The lab's cluster: n1 busy (a 2-GPU job), n2 half busy (a 1-GPU job, weight 7), n3
//! drained, n4 powered down; a job pending on resources (nice 100) and one on a dependency;
//! in accounting (each release's own slurmdbd), a job that ended on n2, one that ended with an
//! `AdminComment` and a `SystemComment` set after it, and one cancelled before it started.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use wattson_ctld::slurm::Form;
use wattson_ctld::summarize;
use wattson_harness::slurm_lab::{self, LabNode, LabOptions, SlurmLab};

/// The controller's `squeue` format (kept in step with `wattson_ctld::slurm::SQUEUE_FORMAT`).
const SQUEUE_FORMAT: &str = wattson_ctld::slurm::SQUEUE_FORMAT;

fn until(lab: &SlurmLab, what: &str, done: &dyn Fn() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(60), "{what}\n{}", lab.all_logs());
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
#[ignore = "writes fixtures for a release: scripts/capture-slurm-outputs"]
fn capture_what_the_controller_reads() {
    let release = slurm_lab::release().name.clone().unwrap_or_else(|| "22.05".to_string());
    let nodes = ["n1", "n2", "n3", "n4"].iter().map(|n| LabNode::new(n, 2, "h100")).collect();
    let mut lab = SlurmLab::start(LabOptions {
        nodes,
        accounting: true,
        extra_conf: "SuspendTime=INFINITE\nSuspendProgram=/bin/true\nResumeProgram=/bin/true\n\
                     SuspendTimeout=3\nResumeTimeout=60\nSlurmctldParameters=power_save_interval=1\n\
                     PartitionName=wattson Nodes=ALL Hidden=YES State=INACTIVE SuspendTime=31536000\n"
            .to_string(),
        ..Default::default()
    });
    let state = |lab: &SlurmLab, node: &str| {
        let line = lab.run_ok("scontrol", &["-o", "show", "node", node]);
        slurm_lab::parse_record(line.trim()).get("State").cloned().unwrap_or_default()
    };

    let ended = lab.sbatch(&["-w", "n2", "-t", "1"], "true\n").unwrap();
    lab.wait_job(ended, Duration::from_secs(60));
    let commented = lab.sbatch(&["-w", "n1", "-t", "1"], "true\n").unwrap();
    lab.wait_job(commented, Duration::from_secs(60));
    let comments = ["AdminComment=capture admin note", "SystemComment=capture system note"];
    let id = format!("jobid={commented}");
    // The job's record reaches slurmdbd a moment after it ends.
    until(&lab, "the commented job's comments", &|| {
        let set = |c: &str| {
            let mut sacctmgr = lab.command("sacctmgr");
            sacctmgr.args(["-i", "modify", "job", "where", &id, "set", c]);
            slurm_lab::run_with_timeout(&mut sacctmgr, Duration::from_secs(30))
                .is_ok_and(|o| o.status.success())
        };
        comments.iter().all(|c| set(c))
            && lab
                .run_ok("sacct", &["-X", "-n", "-P", "-j", &commented.to_string(), "-o", "SystemComment"])
                .contains("system")
    });
    let cancelled = lab.sbatch(&["-H", "-t", "1"], "true\n").unwrap();
    lab.run_ok("scancel", &[&cancelled.to_string()]);
    lab.run_ok("scontrol", &["update", "nodename=n4", "state=power_down_force"]);
    lab.power_off("n4");
    until(&lab, "n4 powered down", &|| state(&lab, "n4").contains("POWERED_DOWN"));
    lab.run_ok("scontrol", &["update", "nodename=n3", "state=drain", "reason=capture drain"]);
    lab.run_ok("scontrol", &["update", "nodename=n2", "weight=7"]);
    let busy = lab.sbatch(&["--gres=gpu:2", "-w", "n1", "-t", "10"], "sleep 600\n").unwrap();
    let half = lab.sbatch(&["--gres=gpu:1", "-w", "n2", "-t", "10"], "sleep 600\n").unwrap();
    lab.wait_running(busy, Duration::from_secs(60));
    lab.wait_running(half, Duration::from_secs(60));
    let queued = lab.sbatch(&["--gres=gpu:2", "-w", "n1", "-t", "5", "--nice=100"], "sleep 1\n").unwrap();
    let waiting = lab.sbatch(&["-d", &format!("afterok:{busy}"), "-t", "1"], "sleep 1\n").unwrap();
    let reason = |job: u32| lab.job_info(job).map(|j| j.get("Reason").to_string()).unwrap_or_default();
    until(&lab, "the queued job's reason", &|| reason(queued) == "Resources");
    until(&lab, "the dependent job's reason", &|| reason(waiting) == "Dependency");

    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("crates/ctld/fixtures/slurm").join(&release);
    std::fs::create_dir_all(&dir).unwrap();
    let save = |name: &str, program: &str, args: &[&str]| {
        let mut command = lab.command(program);
        command.args(args);
        if name == "sacct.txt" {
            command.env("SLURM_TIME_FORMAT", "%s");
        }
        let out = slurm_lab::run_with_timeout(&mut command, Duration::from_secs(30)).unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let err = String::from_utf8_lossy(&out.stderr);
        eprintln!("{name}: {program} {args:?}: {} ({} bytes) {err}", out.status, text.len());
        if out.status.success() && !text.trim().is_empty() {
            std::fs::write(dir.join(name), text).unwrap();
        } else {
            let _ = std::fs::remove_file(dir.join(name));
        }
    };
    save("version.txt", "scontrol", &["--version"]);
    save("nodes.json", "scontrol", &["show", "node", "--json"]);
    save("nodes.txt", "scontrol", &["-d", "-o", "show", "node"]);
    save("squeue.json", "squeue", &["--json"]);
    save("squeue.txt", "squeue", &["-h", "-t", "PD,CF,R", "-o", SQUEUE_FORMAT]);
    // The ended jobs as the controller's summary pass asks for them, in both forms.
    for (name, form) in [("sacct.json", Form::Json), ("sacct.txt", Form::Text)] {
        let args = summarize::sacct_args(form, Duration::from_secs(3600));
        save(name, "sacct", &args.iter().map(String::as_str).collect::<Vec<_>>());
    }
    std::fs::write(
        dir.join("jobs.txt"),
        format!(
            "busy={busy}\nhalf={half}\nqueued={queued}\nwaiting={waiting}\n\
             ended={ended}\ncommented={commented}\ncancelled={cancelled}\n"
        ),
    )
    .unwrap();
    lab.run_ok("scancel", &[&busy.to_string(), &half.to_string(), &queued.to_string(), &waiting.to_string()]);
    lab.stop();
}
