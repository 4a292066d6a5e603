//! Tests of the Slurm lab harness itself (tests/harness/src/slurm_lab): real slurmctld/slurmd with fake GPUs.

use wattson_harness::slurm_lab;

use std::collections::BTreeSet;
use std::net::TcpListener;
use std::path::Path;
use std::time::{Duration, Instant};

use slurm_lab::{LabNode, LabOptions, SlurmLab, parse_record};

const JOB_TIMEOUT: Duration = Duration::from_secs(30);

/// Parses "0,1" / "0-1" style GPU index lists.
fn indices(s: &str) -> Vec<u32> {
    let mut v = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => v.extend(a.parse::<u32>().unwrap()..=b.parse::<u32>().unwrap()),
            None => v.push(part.parse().unwrap_or_else(|_| panic!("bad GPU index list {s:?}"))),
        }
    }
    v
}

/// Submits a job that records its GPUs in `<lab>/jobs/<tag>.gpus` ("SLURM_JOB_GPUS|CUDA_VISIBLE_DEVICES|node").
fn gpu_job(lab: &SlurmLab, tag: &str, extra: &[&str], hold_s: u32) -> u32 {
    let out = lab.dir().join(format!("jobs/{tag}.gpus"));
    let script = format!(
        "echo \"$SLURM_JOB_GPUS|$CUDA_VISIBLE_DEVICES|$SLURMD_NODENAME\" > {}\nsleep {hold_s}\n",
        out.display()
    );
    lab.sbatch(extra, &script).unwrap_or_else(|e| panic!("sbatch refused {tag}: {e}"))
}

fn read_gpus(lab: &SlurmLab, tag: &str) -> (Vec<u32>, Vec<u32>, String) {
    let p = lab.dir().join(format!("jobs/{tag}.gpus"));
    let text = std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
    let parts: Vec<&str> = text.trim().split('|').collect();
    assert_eq!(parts.len(), 3, "unexpected {text:?}");
    (indices(parts[0]), indices(parts[1]), parts[2].to_string())
}

#[test]
fn parse_record_keeps_values_with_spaces() {
    let m = parse_record(
        "JobId=7 JobName=x y Comment=energy budget 5 kWh JobState=PENDING Reason=BeginTime TRES=cpu=1,gres/gpu=2 ReqB:S:C:T=0:0:*:*",
    );
    assert_eq!(m["JobName"], "x y");
    assert_eq!(m["Comment"], "energy budget 5 kWh");
    assert_eq!(m["TRES"], "cpu=1,gres/gpu=2");
    assert_eq!(m["ReqB:S:C:T"], "0:0:*:*");
    assert_eq!(m["JobState"], "PENDING");
}

#[test]
fn one_node_job_gets_two_distinct_gpus() {
    let t0 = Instant::now();
    let lab = SlurmLab::start(LabOptions::default());
    let started = t0.elapsed();
    let id = gpu_job(&lab, "two", &["--gres=gpu:2"], 0);
    let info = lab.wait_job(id, JOB_TIMEOUT);
    assert_eq!(info.state, "COMPLETED", "{info:#?}\n{}", lab.all_logs());
    assert_eq!(info.exit_code, "0:0");
    assert!(info.get("TresPerNode").contains("gpu:2"), "{info:#?}");
    let (job_gpus, cuda, node) = read_gpus(&lab, "two");
    assert_eq!(node, "n1");
    assert_eq!(job_gpus.len(), 2, "SLURM_JOB_GPUS {job_gpus:?}");
    assert_ne!(job_gpus[0], job_gpus[1]);
    assert!(job_gpus.iter().all(|&g| g < 4), "{job_gpus:?}");
    assert_eq!(cuda.len(), 2, "CUDA_VISIBLE_DEVICES {cuda:?}");
    assert_eq!(lab.node_state("n1"), "idle");
    assert!(lab.log("slurmctld").contains("JobId=") || !lab.log("slurmctld").is_empty());
    eprintln!("one_node: start {started:?}, start+job {:?}", t0.elapsed());
}

#[test]
fn concurrent_jobs_get_disjoint_gpus() {
    let t0 = Instant::now();
    let lab = SlurmLab::start(LabOptions::default());
    let a = gpu_job(&lab, "a", &["--gres=gpu:2"], 2);
    let b = gpu_job(&lab, "b", &["--gres=gpu:2"], 2);
    // Both must run at the same time (4 GPUs, 2 CPUs): wait until both are RUNNING together.
    let deadline = Instant::now() + JOB_TIMEOUT;
    loop {
        let sa = lab.job_info(a).unwrap().state;
        let sb = lab.job_info(b).unwrap().state;
        if sa == "RUNNING" && sb == "RUNNING" {
            break;
        }
        assert!(sa != "COMPLETED" || sb != "PENDING", "jobs ran one after the other\n{}", lab.all_logs());
        assert!(Instant::now() < deadline, "jobs not running together: {sa} {sb}\n{}", lab.all_logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(lab.wait_job(a, JOB_TIMEOUT).state, "COMPLETED");
    assert_eq!(lab.wait_job(b, JOB_TIMEOUT).state, "COMPLETED");
    let (ga, _, _) = read_gpus(&lab, "a");
    let (gb, _, _) = read_gpus(&lab, "b");
    let all: BTreeSet<u32> = ga.iter().chain(&gb).copied().collect();
    assert_eq!(ga.len(), 2);
    assert_eq!(gb.len(), 2);
    assert_eq!(all.len(), 4, "GPU sets overlap: {ga:?} {gb:?}");
    assert!(all.iter().all(|&g| g < 4));
    eprintln!("concurrent: {:?}", t0.elapsed());
}

#[test]
fn two_node_lab_runs_a_job_on_each_node() {
    let t0 = Instant::now();
    let lab = SlurmLab::start(LabOptions {
        nodes: vec![LabNode::new("n1", 2, "a100"), LabNode::new("n2", 1, "a100")],
        ..LabOptions::default()
    });
    let j1 = gpu_job(&lab, "on1", &["-w", "n1", "--gres=gpu:a100:1"], 0);
    let j2 = gpu_job(&lab, "on2", &["-w", "n2", "--gres=gpu:1"], 0);
    for j in [j1, j2] {
        let info = lab.wait_job(j, JOB_TIMEOUT);
        assert_eq!(info.state, "COMPLETED", "{info:#?}\n{}", lab.all_logs());
    }
    assert_eq!(read_gpus(&lab, "on1").2, "n1");
    let (g2, _, node2) = read_gpus(&lab, "on2");
    assert_eq!(node2, "n2");
    assert_eq!(g2, vec![0]);
    assert_eq!(lab.job_info(j2).unwrap().get("NodeList"), "n2");
    assert!(lab.log("slurmd-n2").contains("Launching batch job"), "{}", lab.log("slurmd-n2"));
    // Only 1 GPU on n2: asking for 2 there is refused at submit.
    assert!(lab.sbatch(&["-w", "n2", "--gres=gpu:2"], "true").is_err());
    eprintln!("two_nodes: {:?}", t0.elapsed());
}

#[test]
fn stop_kills_every_daemon_and_frees_ports() {
    let t0 = Instant::now();
    let lab = SlurmLab::start(LabOptions::default());
    let pids = lab.pids();
    let ports = lab.ports();
    let dir = lab.dir().to_path_buf();
    assert_eq!(pids.len(), 3, "munged, slurmctld, slurmd: {pids:?}");
    for p in &pids {
        assert!(Path::new(&format!("/proc/{p}")).exists(), "daemon {p} not running");
    }
    for port in &ports {
        assert!(TcpListener::bind(("127.0.0.1", *port)).is_err(), "port {port} not in use while running");
    }
    let id = lab.sbatch(&[], "true").expect("sbatch");
    assert_eq!(lab.wait_job(id, JOB_TIMEOUT).state, "COMPLETED");
    let t_stop = Instant::now();
    lab.stop();
    let stop_took = t_stop.elapsed();
    for p in &pids {
        assert!(!Path::new(&format!("/proc/{p}")).exists(), "daemon {p} still exists after stop");
    }
    for port in &ports {
        TcpListener::bind(("127.0.0.1", *port)).unwrap_or_else(|e| panic!("port {port} still busy: {e}"));
    }
    assert!(!dir.exists() || std::env::var_os("SLURM_LAB_KEEP").is_some(), "lab dir left behind");
    assert!(stop_took < Duration::from_secs(5), "stop took {stop_took:?}");
    eprintln!("stop: total {:?}, stop {stop_took:?}", t0.elapsed());
}

#[test]
fn too_many_gpus_is_refused_at_submit() {
    let lab = SlurmLab::start(LabOptions::default());
    let err = lab.sbatch(&["--gres=gpu:5"], "true").expect_err("a 5-GPU job on a 4-GPU node was accepted");
    assert!(err.contains("error"), "stderr: {err}");
    let err = lab.sbatch(&["--gres=gpu:v100:1"], "true").expect_err("wrong GPU type accepted");
    assert!(!err.is_empty());
    // The lab still works afterwards, and reconfigure keeps it usable.
    lab.reconfigure();
    let id = lab.sbatch(&["--gres=gpu:h100:4"], "true").expect("sbatch after reconfigure");
    assert_eq!(lab.wait_job(id, JOB_TIMEOUT).state, "COMPLETED");
}

#[test]
fn a_broken_config_fails_fast_with_logs() {
    let t0 = Instant::now();
    let res = std::panic::catch_unwind(|| {
        SlurmLab::start(LabOptions { extra_conf: "NoSuchSlurmKey=1\n".into(), ..LabOptions::default() })
    });
    let err = res.err().expect("a lab with an invalid slurm.conf started");
    let msg = err
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| err.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default();
    assert!(msg.contains("slurmctld") && msg.contains("exited"), "panic message: {msg}");
    assert!(msg.contains("NoSuchSlurmKey"), "the log should show why: {msg}");
    assert!(t0.elapsed() < Duration::from_secs(10), "took {:?}", t0.elapsed());
}

#[test]
fn jobs_run_as_another_user() {
    let lab = SlurmLab::start(LabOptions::default());
    let out = lab.dir().join("jobs/whoami.txt");
    let id = lab
        .sbatch(&["--uid=nobody", "--gres=gpu:1"], &format!("id -u > {}\n", out.display()))
        .expect("sbatch --uid=nobody");
    let info = lab.wait_job(id, JOB_TIMEOUT);
    assert_eq!(info.state, "COMPLETED", "{info:#?}\n{}", lab.all_logs());
    let uid = std::fs::read_to_string(&out).expect("job output");
    assert_ne!(uid.trim(), "0", "job ran as root");
}

/// A tiny C SPANK plugin: shows where plugin log lines land and that the job prolog sees the GPUs.
const PROBE_C: &str = r#"
#include <stdio.h>
#include <stdlib.h>
#include <slurm/spank.h>
SPANK_PLUGIN(labprobe, 1);
int slurm_spank_job_prolog(spank_t sp, int ac, char **av) {
    const char *g = getenv("SLURM_JOB_GPUS");
    slurm_info("labprobe: job_prolog gpus=%s", g ? g : "(none)");
    if (ac > 0) {
        FILE *f = fopen(av[0], "w");
        if (f) { fprintf(f, "%s\n", g ? g : ""); fclose(f); }
    }
    return 0;
}
int slurm_spank_task_init(spank_t sp, int ac, char **av) {
    slurm_info("labprobe: task_init");
    return 0;
}
"#;

#[test]
fn spank_plugin_from_plugstack_runs_in_prolog_and_task() {
    let build = tempfile::tempdir().unwrap();
    let src = build.path().join("probe.c");
    let so = build.path().join("labprobe.so");
    std::fs::write(&src, PROBE_C).unwrap();
    let cc = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&so)
        .arg(&src)
        .output()
        .expect("run cc (a C compiler is needed to build Rust anyway)");
    assert!(cc.status.success(), "cc failed: {}", String::from_utf8_lossy(&cc.stderr));
    std::fs::set_permissions(build.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let mark = build.path().join("prolog.gpus");
    let lab = SlurmLab::start(LabOptions {
        plugstack: Some(format!("required {} {}\n", so.display(), mark.display())),
        ..LabOptions::default()
    });
    let id = lab.sbatch(&["--gres=gpu:2"], "true").expect("sbatch with a SPANK plugin");
    let info = lab.wait_job(id, JOB_TIMEOUT);
    assert_eq!(info.state, "COMPLETED", "{info:#?}\n{}", lab.all_logs());
    let gpus = std::fs::read_to_string(&mark).expect("job prolog wrote its mark");
    assert_eq!(indices(&gpus).len(), 2, "SLURM_JOB_GPUS in prolog: {gpus:?}");
    let slurmd = lab.log("slurmd-n1");
    assert!(slurmd.contains("labprobe: job_prolog gpus="), "{slurmd}");
    assert!(slurmd.contains("labprobe: task_init"), "{slurmd}");
}

/// A tiny C job_submit plugin that refuses jobs named "reject-me".
const JOB_SUBMIT_C: &str = r#"
#include <string.h>
#include <slurm/slurm.h>
#include <slurm/slurm_errno.h>
const char plugin_name[] = "lab probe job_submit";
const char plugin_type[] = "job_submit/labprobe";
const uint32_t plugin_version = SLURM_VERSION_NUMBER;
int job_submit(job_desc_msg_t *job_desc, uint32_t submit_uid, char **err_msg) {
    if (job_desc->name && strcmp(job_desc->name, "reject-me") == 0)
        return ESLURM_ACCESS_DENIED;
    return SLURM_SUCCESS;
}
int job_modify(job_desc_msg_t *job_desc, void *job_ptr, uint32_t submit_uid, char **err_msg) {
    return SLURM_SUCCESS;
}
"#;

#[test]
fn job_submit_plugin_from_prepended_plugin_dir() {
    let build = tempfile::tempdir().unwrap();
    let src = build.path().join("js.c");
    std::fs::write(&src, JOB_SUBMIT_C).unwrap();
    let cc = std::process::Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(build.path().join("job_submit_labprobe.so"))
        .arg(&src)
        .output()
        .expect("run cc");
    assert!(cc.status.success(), "cc failed: {}", String::from_utf8_lossy(&cc.stderr));
    let lab = SlurmLab::start(LabOptions {
        plugin_dir: Some(build.path().to_path_buf()),
        job_submit_plugins: Some("labprobe".into()),
        ..LabOptions::default()
    });
    let err = lab.sbatch_verbose(&["-J", "reject-me"], "true").expect_err("job_submit plugin did not refuse");
    assert!(err.contains("Batch job submission failed"), "stderr: {err}");
    let id = lab.sbatch(&["-J", "fine"], "true").expect("a normal job is accepted");
    assert_eq!(lab.wait_job(id, JOB_TIMEOUT).state, "COMPLETED");
}

/// Processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for e in std::fs::read_dir("/proc").unwrap().flatten() {
        if let Ok(cmd) = std::fs::read(e.path().join("cmdline")) {
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(needle) {
                found.push(format!("{}: {cmd}", e.file_name().to_string_lossy()));
            }
        }
    }
    found
}

#[test]
fn stop_cancels_running_jobs() {
    let lab = SlurmLab::start(LabOptions::default());
    let dir = lab.dir().display().to_string();
    let id = lab.sbatch(&["--gres=gpu:1"], "sleep 300\n").expect("sbatch");
    let deadline = Instant::now() + JOB_TIMEOUT;
    while lab.job_info(id).unwrap().state != "RUNNING" {
        assert!(Instant::now() < deadline, "job never ran\n{}", lab.all_logs());
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!processes_mentioning(&dir).is_empty(), "the job script should be running");
    let t = Instant::now();
    lab.stop();
    let left = processes_mentioning(&dir);
    assert!(left.is_empty(), "left behind: {left:?}");
    eprintln!("stop with a running job: {:?}", t.elapsed());
}
