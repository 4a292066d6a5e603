//! Living beside Princeton's jobstats on a real Slurm (slurmdbd on a private MariaDB): jobstats
//! keeps its summary in a job's `AdminComment` as `JS1:` and base64 of gzipped JSON, where case
//! matters. After the job, `wattson ctld` writes its own summary without touching that text
//! (`sacctmgr` would lower-case it), and each tool reads its own part back.

use wattson_harness::node as common;
use wattson_harness::slurm_lab;

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use common::{Node, assert_ok};
use slurm_lab::{LabNode, LabOptions, SlurmLab};
use wattson_sacct::summary::JobSummary;

static WATTSON: std::sync::LazyLock<std::path::PathBuf> =
    std::sync::LazyLock::new(|| wattson_harness::programs::program("wattson"));

/// A summary in jobstats' format: `JS1:` then base64 of the gzipped JSON.
fn jobstats_comment(json: &serde_json::Value) -> String {
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(json.to_string().as_bytes()).unwrap();
    format!("JS1:{}", data_encoding::BASE64.encode(&gz.finish().unwrap()))
}

/// What jobstats' reader does with an `AdminComment`: the text after `JS1:`, base64-decoded,
/// gunzipped, parsed as JSON (strict base64 here: jobstats' own decoder accepts more).
fn jobstats_read(comment: &str) -> Result<serde_json::Value, String> {
    let b64 = comment.strip_prefix("JS1:").ok_or("no JS1: prefix")?;
    let packed = data_encoding::BASE64.decode(b64.as_bytes()).map_err(|e| e.to_string())?;
    let mut json = String::new();
    flate2::read::GzDecoder::new(&packed[..]).read_to_string(&mut json).map_err(|e| e.to_string())?;
    serde_json::from_str(&json).map_err(|e| e.to_string())
}

#[test]
fn a_jobstats_summary_survives_wattsons_and_both_read_their_own_part_back() {
    let mut daemon = Node::h100(2);
    let node = LabNode { addr: "127.0.0.2".into(), ..LabNode::new("n1", 2, "h100") };
    let lab =
        SlurmLab::start(LabOptions { nodes: vec![node.clone()], accounting: true, ..LabOptions::default() });
    let munge = lab.dir().join("run/munge.sock");
    let port = slurm_lab::free_port();
    daemon.start_with_link(&node.addr, port, &munge);

    let id = lab.sbatch(&["--gres=gpu:1"], "#!/bin/sh\nsleep 3\n").unwrap();
    lab.wait_running(id, Duration::from_secs(60));
    // jobstats' summary, set while the job runs (scontrol keeps its case).
    let stats = serde_json::json!({"gpus": 1, "nodes": {"n1": {"cpus": 1, "gpu_utilization": {"0": 97.5}}}, "total_time": 3});
    let js1 = jobstats_comment(&stats);
    assert!(js1.chars().any(char::is_uppercase), "{js1}");
    lab.run_ok("scontrol", &["update", &format!("job={id}"), &format!("AdminComment={js1}")]);
    daemon.sim.set_load(0, 0.7).unwrap();
    daemon.begin(&id.to_string(), 0, "0");
    assert_eq!(lab.wait_job(id, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    daemon.end(&id.to_string());
    let fields = || {
        lab.run_ok("sacct", &["-n", "-P", "-X", "-j", &id.to_string(), "-o", "AdminComment,SystemComment"])
    };
    // The job's record reaches slurmdbd with jobstats' text.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !fields().contains("JS1:") {
        assert!(Instant::now() < deadline, "no AdminComment in sacct: {}", fields());
        std::thread::sleep(Duration::from_millis(300));
    }

    let controller = lab.summaries_only_controller(port);
    assert_ok(&lab.command(&*WATTSON).arg("-c").arg(&controller).args(["ctld", "--once"]).output().unwrap());

    let line = fields();
    let (admin, system) = line.trim().rsplit_once('|').unwrap();
    // jobstats' part is untouched, case and all, and its reader reads it back.
    assert_eq!(admin, js1, "AdminComment changed");
    assert_eq!(jobstats_read(admin), Ok(stats));
    // wattson's summary is beside it, and its reader reads it back: the job's record on n1.
    assert!(system.starts_with("ws1:"), "SystemComment: {system}");
    let shown = lab.command(&*WATTSON).args(["summary", "show", "-j", &id.to_string()]).output().unwrap();
    assert_ok(&shown);
    let summary: JobSummary = serde_json::from_slice(&shown.stdout).unwrap();
    let records: Vec<_> = summary.nodes.iter().flat_map(|n| &n.records).collect();
    assert_eq!(records.len(), 1, "{summary:?}");
    assert_eq!(records[0].key.to_string(), id.to_string());
    assert!(records[0].energy_j() > 0.0, "{:?}", records[0]);

    // A second pass finds the job summarized and changes nothing.
    assert_ok(&lab.command(&*WATTSON).arg("-c").arg(&controller).args(["ctld", "--once"]).output().unwrap());
    assert_eq!(fields(), line);
    lab.stop();
}
