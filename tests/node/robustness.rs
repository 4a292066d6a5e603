//! Bad configuration, bad socket messages and unauthorised callers: each gets a clear error,
//! and nothing else is affected.

use wattson_harness::node as common;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{NOBODY, Node, Tmpfs, assert_ok};
use fake_nvml::Fault;

fn raw(node: &Node, bytes: &[u8]) -> String {
    let mut s = UnixStream::connect(&node.socket).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(bytes).unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}

#[test]
fn a_bad_config_stops_the_daemon_with_file_line_and_what_is_allowed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.toml");
    std::fs::write(&path, "[daemon]\nsocket = \"/tmp/x.sock\"\nsample_interval = \"often\"\n").unwrap();
    let out =
        Command::new(wattson_harness::programs::program("wattsond")).arg("-c").arg(&path).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&format!("{}:3: ", path.display())) && err.contains("\"1s\""), "{err}");

    std::fs::write(&path, "[daemon]\nsockett = \"/tmp/x.sock\"\n").unwrap();
    let out = Command::new(wattson_harness::programs::program("wattsond"))
        .arg("-c")
        .arg(&path)
        .arg("--check-config")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains(":2: ") && err.contains("unknown field `sockett`") && err.contains("`socket`"),
        "{err}"
    );

    let out = Command::new(wattson_harness::programs::program("wattsond"))
        .arg("-c")
        .arg(dir.path().join("missing.toml"))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing.toml: cannot read"));
}

#[test]
fn without_a_driver_the_daemon_says_so() {
    let mut node = Node::h100(1);
    let text = std::fs::read_to_string(&node.config).unwrap();
    std::fs::write(&node.config, text.replace("libfake_nvml.so", "libnot_there.so")).unwrap();
    let out = Command::new(wattson_harness::programs::program("wattsond"))
        .arg("-c")
        .arg(&node.config)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("gpu.nvml_library") && err.contains("libnot_there.so: no such file"), "{err}");
    // The same config with the library back starts.
    std::fs::write(&node.config, text).unwrap();
    node.start();
}

#[test]
fn bad_messages_get_an_error_and_the_daemon_keeps_serving() {
    let mut node = Node::h100(2);
    node.start();
    node.sim.set_load(0, 0.5).unwrap();
    node.begin("1", 1000, "0");

    assert!(raw(&node, b"hello\n").contains("bad request"));
    assert!(raw(&node, b"{\"op\":\"format_disk\"}\n").contains("unknown variant"));
    assert!(raw(&node, &[b'{'; 70_000]).contains("longer than"));
    let unknown_gpu = br#"{"op":"job_begin","job":{"job_id":2},"uid":1,"gpus":[7]}"#;
    assert!(
        raw(&node, &[&unknown_gpu[..], b"\n"].concat())
            .contains("no such GPU: index 7 (this node has 2 GPUs)")
    );
    let twice = br#"{"op":"job_begin","job":{"job_id":3},"uid":1,"gpus":[1,1]}"#;
    assert!(raw(&node, &[&twice[..], b"\n"].concat()).contains("GPU 1 is named twice"));
    let bad_hint = br#"{"op":"job_begin","job":{"job_id":4},"uid":1,"gpus":[1],"hints":{"policy":"fast"}}"#;
    assert!(raw(&node, &[&bad_hint[..], b"\n"].concat()).contains("not one of min-energy, balanced, perf"));

    // A client that connects and says nothing holds no one up.
    let _silent = UnixStream::connect(&node.socket).unwrap();
    let t = Instant::now();
    assert_ok(&node.wattson(&["status"]));
    assert!(t.elapsed() < Duration::from_secs(2));

    node.end("1");
    let record = node.record("1");
    assert!(record.energy_j() > 0.0);
    assert!(node.acct_json(&["-j", "2,3,4"]).is_empty(), "refused jobs must leave no record");
}

#[test]
fn only_root_or_slurm_user_may_begin_and_end_jobs() {
    let mut node = Node::h100(1);
    node.start();
    let out = node.wattson_as(NOBODY, &["job", "begin", "--job", "5", "--uid", "65534", "--gpus", "0"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("permission denied: only root and SlurmUser (slurm)"), "{err}");
    assert!(node.acct_json(&["-j", "5"]).is_empty());
    node.begin("5", NOBODY, "0");
    let out = node.wattson_as(NOBODY, &["job", "end", "--job", "5"]);
    assert!(!out.status.success());
    node.end("5");
}

#[test]
fn users_see_only_their_own_jobs_and_read_nothing_without_the_daemon() {
    let mut node = Node::h100(2);
    node.start();
    node.begin("10", NOBODY, "0");
    node.begin("11", 1000, "1");
    node.end("10");
    node.end("11");

    let ids = |out: std::process::Output| {
        assert_ok(&out);
        let mut ids: Vec<String> =
            String::from_utf8_lossy(&out.stdout).lines().skip(1).map(|l| l.to_string()).collect();
        ids.sort();
        ids
    };
    let as_nobody =
        |node: &Node| ids(node.wattson_as(NOBODY, &["acct", "-S", "now-1hour", "-o", "JobID", "-P"]));
    assert_eq!(as_nobody(&node), vec!["10"]);
    assert_eq!(ids(node.wattson(&["acct", "-S", "now-1hour", "-o", "JobID", "-P"])), vec!["10", "11"]);
    // Asking for someone else's job by id shows nothing; asking for their user is refused.
    assert!(ids(node.wattson_as(NOBODY, &["acct", "-j", "11", "-o", "JobID", "-P"])).is_empty());
    let out = node.wattson_as(NOBODY, &["acct", "-u", "1000", "-S", "now-1hour"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("permission denied"));

    // Without the daemon only root reads the store (it is private, mode 0600); a user is told
    // why instead of reading every user's jobs from the file.
    node.stop();
    let out = node.wattson_as(NOBODY, &["acct", "-S", "now-1hour", "-o", "JobID", "-P"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("wattsond is not running"), "{err}");
    assert_eq!(ids(node.wattson(&["acct", "-S", "now-1hour", "-o", "JobID", "-P"])), vec!["10", "11"]);
}

#[test]
fn a_full_disk_refuses_new_jobs_loudly_and_loses_nothing_of_running_ones() {
    let mut node = Node::h100(2);
    let db_dir = node.store.parent().unwrap().to_path_buf();
    let disk = Tmpfs::mount(&db_dir, "8m");
    node.start();
    node.sim.set_load(0, 0.7).unwrap();
    let begin = node.begin("1", 1000, "0");

    let filler = disk.fill();
    std::thread::sleep(Duration::from_millis(600)); // samples fail to persist meanwhile

    let out = node.wattson(&["job", "begin", "--job", "2", "--uid", "1000", "--gpus", "1"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("job 2: cannot record the start") && err.contains("full"), "{err}");
    assert_ok(&node.wattson(&["status"]));

    // Space comes back: the running job ends with all its energy.
    std::fs::remove_file(&filler).unwrap();
    let end = node.end("1");
    common::assert_exact(&node, &node.record("1"), begin, end, 0.001);
    assert!(node.acct_json(&["-j", "2"]).is_empty());
    assert!(node.log().contains("cannot persist running meters"), "the failed samples were logged");
}

/// One GPU stops answering (its NVML calls block): jobs on the other GPUs still begin and end
/// within 100 ms (p99), and the stuck GPU's job is recorded with the GPU lost.
#[test]
fn a_hung_gpu_stalls_only_its_own_jobs() {
    use common::job_begin;
    use wattson_protocol::{Reply, Request};
    use wattson_types::job::JobKey;

    let mut node = Node::h100(4);
    node.start();
    let call = |request: &Request| wattson_protocol::call(&node.socket, request, Duration::from_secs(10));
    call(&job_begin(1, 0)).unwrap();
    node.sim.set_fault(0, Fault::Hang).unwrap();
    // Wait until the sampler has met the stuck GPU (status says so).
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let Reply::Status { gpus, .. } = call(&Request::Status {}).unwrap() else { panic!() };
        if gpus[0].error.as_deref().is_some_and(|e| e.contains("did not answer")) {
            break;
        }
        assert!(Instant::now() < deadline, "the hung GPU never showed in status: {gpus:?}");
        std::thread::sleep(Duration::from_millis(200));
    }
    let mut took = Vec::new();
    // 200 samples, so that the p99 is not simply the largest.
    for job in 100..300 {
        let gpu = 1 + job % 3;
        let t = Instant::now();
        call(&job_begin(job, gpu)).unwrap();
        call(&Request::JobEnd { job: JobKey::job(job) }).unwrap();
        took.push(t.elapsed() / 2);
    }
    took.sort();
    let p99 = wattson_harness::stats::percentile(&took, 0.99);
    assert!(p99 < Duration::from_millis(100), "begin/end p99 {p99:?} with a hung GPU: {took:?}");

    let Reply::Ended { record } = call(&Request::JobEnd { job: JobKey::job(1) }).unwrap() else { panic!() };
    assert!(record.gpus[0].meter.lost, "the stuck GPU's job says what happened: {record:?}");
    node.sim.clear_fault(0, Fault::Hang).unwrap();
}
