//! A site's own history through the simulator, on real Slurm's accounting: jobs with GPUs and
//! wattson's hints run on a lab (slurmdbd on MariaDB, job_submit/wattson and the SPANK plugin,
//! wattsond on simulated GPUs), `wattson trace export` turns the lab's `sacct` into a trace, and
//! `wattson sim` replays it on a one-node cluster file and prints its comparison.

use std::time::{Duration, Instant};

use wattson_harness::node::{Node, assert_ok};
use wattson_harness::slurm_lab::LabNode;

static WATTSON: std::sync::LazyLock<std::path::PathBuf> =
    std::sync::LazyLock::new(|| wattson_harness::programs::program("wattson"));

/// The sacct fields `wattson trace export --from-file` reads (its `--help` names them).
const FIELDS: &str =
    "JobID,Submit,Start,End,Timelimit,ReqTRES,AllocTRES,Partition,User,State,AdminComment,SystemComment";

/// Five jobs on one node of 4 GPUs (typed `v100` in gres.conf, so a V100 cluster file takes
/// them): one of 2 GPUs with a 10% slowdown bound, one that asks for a v100 and a 2 h deferral
/// window, one of all 4 GPUs that must wait for both, one without GPUs, one cancelled while
/// it waited. The export holds the three GPU jobs, in submission order, with their GPUs,
/// limits, types asked, hints and hashed user; the simulator reads it and prints every job.
#[test]
fn the_labs_own_accounting_exports_to_a_trace_the_simulator_replays() {
    let node = Node::with_sections(fake_nvml::Config::uniform("H100", 4), "200ms", "enact = \"model\"\n", "");
    let (_node, lab) = super::slurm::plugged_lab(
        node,
        LabNode::new("n1", 4, "v100"),
        false,
        "",
        &[],
        true,
        "AccountingStorageTRES=gres/gpu,gres/gpu:v100\n",
    );
    let body = |s: u32| format!("#!/bin/sh\nsleep {s}\n");
    let bounded =
        lab.sbatch(&["--gres=gpu:2", "--energy=min-energy", "--energy-slowdown=10", "-t", "5"], &body(3));
    let deferrable = lab.sbatch(&["--gres=gpu:v100:1", "--energy-defer=2h", "-t", "10"], &body(1));
    let whole = lab.sbatch(&["--gres=gpu:4", "-t", "3"], &body(1));
    let no_gpu = lab.sbatch(&["-t", "1"], &body(0));
    // Eligible, but queued behind the whole-node job: cancelled before it can start. (sacct
    // lists only jobs that became eligible: a held job cancelled is not in its output.)
    let never = lab.sbatch(&["--gres=gpu:4", "-t", "1"], &body(0));
    let [bounded, deferrable, whole, no_gpu, never] =
        [bounded, deferrable, whole, no_gpu, never].map(|j| j.expect("sbatch"));
    lab.run_ok("scancel", &[&never.to_string()]);
    for job in [bounded, deferrable, whole, no_gpu] {
        let info = lab.wait_job(job, Duration::from_secs(90));
        assert_eq!(info.state, "COMPLETED", "job {job}: {:?}\n{}", info.fields, lab.all_logs());
    }

    // slurmdbd stores records a moment after each job ends: wait for every end.
    let dir = tempfile::tempdir().unwrap();
    let sacct_args = ["-a", "-P", "-n", "-S", "2020-01-01", "-E", "now", "--format", FIELDS];
    let started = Instant::now();
    let sacct = loop {
        let mut cmd = lab.command("sacct");
        cmd.env("TZ", "UTC").env("SLURM_TIME_FORMAT", "standard").args(sacct_args);
        let out = cmd.output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let ended = |job: u32| {
            text.lines().any(|l| {
                l.starts_with(&format!("{job}|"))
                    && !l.split('|').nth(3).unwrap_or("Unknown").contains("Unknown")
            })
        };
        if [bounded, deferrable, whole, no_gpu].into_iter().all(ended) && text.contains(&format!("{never}|"))
        {
            break text;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "sacct shows:\n{text}\n{}", lab.log("slurmdbd"));
        std::thread::sleep(Duration::from_millis(300));
    };
    let salt = dir.path().join("salt");
    std::fs::write(&salt, "the lab's secret salt, 32 bytes!\n").unwrap();
    let trace = dir.path().join("trace.csv");
    let out = lab
        .command(&*WATTSON)
        .args(["trace", "export", "-S", "2020-01-01", "--salt-file"])
        .arg(&salt)
        .arg("-o")
        .arg(&trace)
        .output()
        .unwrap();
    assert_ok(&out);
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(said.contains("3 jobs written"), "{said}");
    assert!(said.contains("1 never started, 0 still running, 1 without GPUs"), "{said}");
    assert!(!said.contains(" 0 steps"), "the batch and extern steps are counted: {said}");
    let csv = std::fs::read_to_string(&trace).unwrap();
    println!("sacct:\n{sacct}\ntrace:\n{csv}");
    // The same export from a file of sacct's output (as a site would keep it).
    let kept = dir.path().join("sacct.txt");
    std::fs::write(&kept, &sacct).unwrap();
    let from_file = dir.path().join("from-file.csv");
    let out = lab
        .command(&*WATTSON)
        .args(["trace", "export", "--from-file"])
        .arg(&kept)
        .arg("--salt-file")
        .arg(&salt)
        .arg("-o")
        .arg(&from_file)
        .output()
        .unwrap();
    assert_ok(&out);
    assert_eq!(std::fs::read_to_string(&from_file).unwrap(), csv);

    // What the simulator reads of it.
    let jobs = wattson_sim::trace::parse(&csv, "trace.csv", wattson_sim::TraceFormat::Auto).unwrap();
    let ids: Vec<String> = jobs.iter().map(|j| j.id.clone()).collect();
    assert_eq!(ids, [bounded, deferrable, whole].map(|j| j.to_string()), "submission order");
    assert_eq!(jobs.iter().map(|j| j.gpus).collect::<Vec<_>>(), [2, 1, 4]);
    assert_eq!(
        jobs.iter().map(|j| j.time_limit).collect::<Vec<_>>(),
        [Some(300.0), Some(600.0), Some(180.0)]
    );
    assert_eq!(jobs[0].submit, 0.0);
    assert!(jobs[1].submit >= 0.0 && jobs[2].submit >= jobs[1].submit && jobs[2].submit < 30.0, "{csv}");
    // Each ran its body (1 s or 3 s, plus Slurm's launch), never past its limit.
    for (j, least) in jobs.iter().zip([3.0, 1.0, 1.0]) {
        assert!(j.duration >= least && j.duration < 60.0, "job {}: {} s\n{csv}", j.id, j.duration);
    }
    assert_eq!(
        jobs.iter().map(|j| j.gpu_types.clone()).collect::<Vec<_>>(),
        [vec![], vec!["v100".to_string()], vec![]]
    );
    // Hints as job_submit recorded them: the bound, the deferral window, none for the third.
    assert_eq!(jobs.iter().map(|j| j.bound).collect::<Vec<_>>(), [Some(0.1), Some(0.0), Some(0.0)]);
    assert_eq!(jobs.iter().map(|j| j.defer_window).collect::<Vec<_>>(), [Some(0.0), Some(7200.0), Some(0.0)]);
    // The whole-node job started after both others ended, so its wait shows in the history:
    // its start (sacct's) is at least the 2-GPU job's end.
    let start_of = |job: u32, field: usize| {
        sacct
            .lines()
            .find(|l| l.starts_with(&format!("{job}|")))
            .and_then(|l| l.split('|').nth(field))
            .unwrap()
            .to_string()
    };
    assert!(start_of(whole, 2) >= start_of(bounded, 3), "{sacct}");
    // Users: one hash for the one user, never the name.
    let header: Vec<&str> = csv.lines().next().unwrap().split(',').collect();
    let user = header.iter().position(|c| *c == "user").unwrap();
    let users: Vec<String> =
        csv.lines().skip(1).map(|l| l.split(',').nth(user).unwrap().to_string()).collect();
    assert!(
        users.iter().all(|u| u == &users[0] && u.len() == 24 && u.chars().all(|c| c.is_ascii_hexdigit())),
        "{users:?}"
    );
    assert!(!csv.contains("root"), "{csv}");

    // The simulator on it: one node of 4 V100s, every policy, the knob sweep and its plots.
    let cluster = dir.path().join("cluster.toml");
    std::fs::write(&cluster, wattson_harness::programs::one_node_cluster()).unwrap();
    let out_dir = dir.path().join("sim");
    let out = lab
        .command(&*WATTSON)
        .args(["sim", "--trace"])
        .arg(&trace)
        .arg("--cluster")
        .arg(&cluster)
        .args(["--policies", "all", "--sweep", "--out"])
        .arg(&out_dir)
        .output()
        .unwrap();
    assert_ok(&out);
    let table = String::from_utf8_lossy(&out.stdout).into_owned();
    println!("{table}");
    assert!(table.contains("wait mean") && table.contains("imposed"), "{table}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("summary.json")).unwrap()).unwrap();
    for s in summary["summaries"].as_array().unwrap() {
        let name = s["policy"].as_str().unwrap();
        assert!(table.contains(name), "{name} missing from\n{table}");
        assert_eq!(s["jobs"], 3, "{name}");
        assert_eq!(s["deferrable_jobs"], 1, "{name}");
    }
    for plot in ["energy_vs_wait.svg", "energy_vs_imposed_wait.svg"] {
        assert!(std::fs::read_to_string(out_dir.join(plot)).unwrap().contains("wattson"), "{plot}");
    }
}
