//! Faults of the node around the daemon (hardware changed across a restart, a second daemon,
//! a store that cannot be written): each ends in a defined state, tested. See
//! `docs/reliability.md` for the table of cases.

use wattson_harness::node as common;

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use common::{NOBODY, Node, Tmpfs, assert_ok};

fn begin_with(node: &Node, job: &str, gpus: &str, policy: &str) {
    let args = ["job", "begin", "--job", job, "--uid", "1000", "--gpus", gpus, "--energy", policy];
    assert_ok(&node.wattson(&args));
}

fn begin_capped(node: &Node, job: &str, gpus: &str) {
    begin_with(node, job, gpus, "min-energy");
}

fn limit_mw(node: &Node, gpu: u32) -> u32 {
    node.sim.gpu_state(gpu).unwrap().power_limit_mw
}

/// 8 GPUs become 4 across a restart while jobs ran on GPUs 5 and 7: the daemon starts (no
/// crash loop), the jobs on vanished GPUs are still closed with the energy they had and the GPU
/// marked lost, and the remaining GPUs work.
#[test]
fn jobs_on_gpus_gone_across_a_restart_close_and_the_daemon_serves() {
    let mut node = Node::h100(8);
    node.start();
    begin_capped(&node, "1", "7");
    begin_capped(&node, "2", "5");
    begin_capped(&node, "3", "1");
    std::thread::sleep(Duration::from_millis(500));
    node.kill9();

    fake_nvml::Sim::create(node.sim.dir(), &fake_nvml::Config::uniform("H100", 4)).unwrap();
    node.start();
    assert_ok(&node.wattson(&["status"]));
    for job in ["1", "2"] {
        node.end(job);
        let record = node.record(job);
        assert!(record.gpus[0].meter.lost, "job {job}'s GPU is gone and says so: {record:?}");
    }
    node.end("3");
    assert!(!node.record("3").gpus[0].meter.lost);
    node.begin("4", 1000, "3");
    node.end("4");
    assert!(node.record("4").energy_j() > 0.0);
}

/// Two daemons on one store would both meter and restore the same GPUs: the second refuses to
/// start, whatever socket it was given, and the first keeps its socket and its jobs' settings.
#[test]
fn a_second_daemon_on_the_same_store_refuses_to_start() {
    let mut node = Node::h100(2);
    node.start();
    begin_capped(&node, "1", "0");
    std::fs::remove_file(&node.socket).unwrap();

    // Same store, another socket (the first one's file is gone, so nothing answers there).
    let second_socket = node.dir.path().join("second.sock");
    let other =
        node.config_with("second.toml", node.socket.to_str().unwrap(), second_socket.to_str().unwrap());
    let out = node.daemon_refusing(&other);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a second daemon started on the same store: {err}");
    assert!(err.contains("another wattsond") && err.contains(&node.pid().to_string()), "{err}");
    assert!(!second_socket.exists(), "the refused daemon left a socket");
    assert_eq!(limit_mw(&node, 0), 420_000, "the refused daemon touched the running job's GPU");
}

/// Two daemons on other stores would both meter, set and restore the same GPUs: the second
/// refuses to start, naming the GPU and the first one's pid, and touches nothing.
#[test]
fn a_second_daemon_on_another_store_refuses_the_same_gpus() {
    let mut node = Node::h100(2);
    node.start();
    begin_capped(&node, "1", "0");
    let text = std::fs::read_to_string(&node.config).unwrap();
    let (store, socket) =
        (node.dir.path().join("other").join("wattson.db"), node.dir.path().join("other.sock"));
    let text = text
        .replace(node.store.to_str().unwrap(), store.to_str().unwrap())
        .replace(node.socket.to_str().unwrap(), socket.to_str().unwrap());
    let other = node.dir.path().join("other.toml");
    std::fs::write(&other, text).unwrap();
    let out = node.daemon_refusing(&other);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "a second daemon drove the same GPUs: {err}");
    let (pid, uuid) = (node.pid().to_string(), node.gpu_uuid(0));
    assert!(err.contains("drives GPU") && err.contains(&pid) && err.contains(&uuid), "{err}");
    assert!(!socket.exists(), "the refused daemon left a socket");
    assert_eq!(limit_mw(&node, 0), 420_000, "the refused daemon touched the running job's GPU");
}

/// Every user's jobs are in the store: only root (and SlurmUser's group) may read the file, its
/// WAL and its shared memory; a user asks the daemon, which shows them their own jobs.
#[test]
fn the_store_and_its_wal_are_private() {
    let mut node = Node::h100(1);
    node.start();
    node.begin("1", 1000, "0");
    node.end("1");
    let db = node.store.to_str().unwrap().to_string();
    for file in [db.clone(), format!("{db}-wal"), format!("{db}-shm")] {
        let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode & 0o007, 0, "{file} has mode {mode:o}: other users can read every job");
    }
    let out =
        Command::new("head").args(["-c", "16"]).arg(&node.store).uid(NOBODY).gid(NOBODY).output().unwrap();
    assert!(!out.status.success(), "nobody read the store: {:?}", String::from_utf8_lossy(&out.stdout));

    // A private configuration that makes the user an admin and points at no daemon does not
    // open the store either.
    let text = std::fs::read_to_string(&node.config).unwrap();
    let own = node.dir.path().join("mine.toml");
    let text = text.replace(node.socket.to_str().unwrap(), "/nonexistent/wattsond.sock");
    std::fs::write(&own, text.replacen("[daemon]\n", "[daemon]\nadmins = [\"nobody\"]\n", 1)).unwrap();
    let out = Command::new(wattson_harness::programs::program("wattson"))
        .arg("-c")
        .arg(&own)
        .args(["acct", "-j", "1", "-o", "JobID", "-P"])
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .unwrap();
    assert!(!out.status.success(), "{}", String::from_utf8_lossy(&out.stdout));
    assert!(!String::from_utf8_lossy(&out.stdout).contains('1'));
}

/// The disk fills while a capped job runs. Its end still returns the GPU to its defaults (the
/// next job runs at full power), the caller is told the end is not recorded yet, and once space
/// returns the record is written with the energy up to the real end, not the next job's.
#[test]
fn a_full_store_never_keeps_a_gpu_capped_and_the_end_is_recorded_later() {
    let mut node = Node::h100(1);
    let db_dir = node.store.parent().unwrap().to_path_buf();
    let disk = Tmpfs::mount(&db_dir, "8m");
    node.start();
    node.sim.set_load(0, 0.9).unwrap();
    let t0 = wattson_types::now_ns();
    begin_capped(&node, "1", "0");
    let begin = common::Bracket(t0, wattson_types::now_ns());
    assert_eq!(limit_mw(&node, 0), 420_000);
    let filler = disk.fill();
    std::thread::sleep(Duration::from_millis(300));

    let t0 = wattson_types::now_ns();
    let out = node.wattson(&["job", "end", "--job", "1"]);
    let end = common::Bracket(t0, wattson_types::now_ns());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && err.contains("cannot be recorded yet"), "{err}");
    assert_eq!(limit_mw(&node, 0), 700_000, "the GPU stayed capped because the store was full");

    // Space returns; the end is written at the next sample. Then a job runs on the same GPU.
    std::fs::remove_file(&filler).unwrap();
    std::thread::sleep(Duration::from_millis(600));
    let record = node.record("1");
    assert_eq!(record.state, wattson_types::job::JobState::Completed);
    common::assert_exact(&node, &record, begin, end, 0.001);
    node.sim.set_load(0, 1.0).unwrap();
    begin_with(&node, "2", "0", "perf");
    assert_eq!(limit_mw(&node, 0), 700_000, "a perf job after the full disk runs uncapped");
    std::thread::sleep(Duration::from_millis(500));
    node.end("2");
    assert_eq!(node.record("1").energy_j(), record.energy_j(), "job 1 absorbed job 2's energy");
    assert_ok(&node.wattson(&["job", "end", "--job", "1"]));
}

/// The store is corrupted while the daemon is down (here: its header overwritten) with a job
/// running capped. The daemon starts anyway, loudly: the corrupt file and its WAL are kept aside
/// untouched for inspection, a fresh store is created, and since the restore journal was in the
/// lost file, every GPU goes back to its defaults.
#[test]
fn a_corrupted_store_is_kept_aside_loudly_and_the_gpus_restored() {
    let mut node = Node::h100(2);
    node.start();
    begin_capped(&node, "1", "0");
    assert_eq!(limit_mw(&node, 0), 420_000);
    node.kill9();
    // The header of the file and of its WAL (which would otherwise stand in for page 1).
    let mut bytes = std::fs::read(&node.store).unwrap();
    bytes[..100].fill(0x5a);
    std::fs::write(&node.store, &bytes).unwrap();
    let wal = node.store.with_extension("db-wal");
    let mut log = std::fs::read(&wal).unwrap();
    log[..32].fill(0x5a);
    std::fs::write(&wal, &log).unwrap();

    node.start();
    assert_eq!(limit_mw(&node, 0), 700_000, "a GPU stayed capped after the journal was lost");
    let kept: Vec<_> = std::fs::read_dir(node.store.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("wattson.db.corrupt-"))
        .collect();
    assert!(kept.iter().any(|n| !n.ends_with("-wal") && !n.ends_with("-shm")), "{kept:?}");
    let aside = node
        .store
        .parent()
        .unwrap()
        .join(kept.iter().find(|n| !n.contains("-wal") && !n.contains("-shm")).unwrap());
    assert_eq!(std::fs::read(aside).unwrap(), bytes, "the corrupt file was changed");
    assert!(node.log().contains("corrupt"), "{}", node.log());
    node.begin("2", 1000, "1");
    node.end("2");
    assert!(node.record("2").energy_j() > 0.0);
}

/// A store truncated to nothing while the daemon was down (its WAL too): the start says so
/// at error level and returns every GPU to its defaults (the restore journal went with the
/// file), then serves. Before: a new store was written into it without a word, and a GPU
/// capped for a job stayed capped (issue 55, item 9).
#[test]
fn an_emptied_store_is_said_loudly_and_the_gpus_restored() {
    let mut node = Node::h100(2);
    node.start();
    begin_capped(&node, "1", "0");
    assert_eq!(limit_mw(&node, 0), 420_000);
    node.kill9();
    std::fs::write(&node.store, b"").unwrap();
    let _ = std::fs::remove_file(node.store.with_extension("db-wal"));
    let _ = std::fs::remove_file(node.store.with_extension("db-shm"));

    node.start();
    assert!(node.log().contains("the store was an empty file"), "{}", node.log());
    assert_eq!(limit_mw(&node, 0), 700_000, "a GPU stayed capped after the journal was lost");
    node.begin("2", 1000, "1");
    node.end("2");
    assert!(node.record("2").energy_j() > 0.0);
}

/// `kill -9` at each step of a setting change (the daemon kills itself there with SIGKILL, a
/// hook of debug builds): after the restart a running job's GPU carries its setting, a GPU
/// whose job ended is back at its defaults, the job's record is whole, and the daemon serves.
#[test]
fn kill_9_at_every_step_of_a_setting_change_ends_in_a_defined_state() {
    for step in ["journaled", "applied"] {
        let mut node = Node::h100(2);
        node.start_with_env(&[("WATTSON_KILL_AT", std::path::Path::new(step))]);
        let args = ["job", "begin", "--job", "1", "--uid", "1000", "--gpus", "0", "--energy", "min-energy"];
        assert!(!node.wattson(&args).status.success(), "{step}: the daemon died mid-change");
        node.kill9();
        node.start();
        assert_eq!(limit_mw(&node, 0), 420_000, "{step}: the job still runs, with its setting");
        assert_eq!(limit_mw(&node, 1), 700_000, "{step}");
        node.end("1");
        assert_eq!(limit_mw(&node, 0), 700_000, "{step}: back at its defaults once the job ended");
        begin_with(&node, "2", "0", "perf");
        node.end("2");
    }
    // Killed at the job's end, once the GPU is restored and before its journal entry goes.
    let mut node = Node::h100(1);
    node.start_with_env(&[("WATTSON_KILL_AT", std::path::Path::new("restored"))]);
    begin_capped(&node, "3", "0");
    assert_eq!(limit_mw(&node, 0), 420_000);
    assert!(!node.wattson(&["job", "end", "--job", "3"]).status.success(), "the daemon died mid-restore");
    node.kill9();
    node.start();
    assert_eq!(limit_mw(&node, 0), 700_000, "the job ended: its GPU stays at its defaults");
    let record = node.record("3");
    assert_eq!(record.state, wattson_types::job::JobState::Completed, "the end was recorded first");
    assert!(record.energy_j() > 0.0);
    begin_with(&node, "4", "0", "perf");
    node.end("4");
}

/// The store's file system is read-only when the daemon starts (a remount after an error, a
/// full-disk policy): the daemon refuses to start, naming the store and why, rather than run
/// jobs it cannot record. Once writable again, it starts and the earlier records are intact.
#[test]
fn a_read_only_store_stops_the_daemon_at_start_with_the_reason() {
    let mut node = Node::h100(1);
    let db_dir = node.store.parent().unwrap().to_path_buf();
    let _disk = Tmpfs::mount(&db_dir, "8m");
    node.start();
    begin_capped(&node, "1", "0");
    node.end("1");
    node.stop();
    let remount = |mode: &str| {
        let ok =
            Command::new("mount").args(["-o", &format!("remount,{mode}")]).arg(&db_dir).status().unwrap();
        assert!(ok.success(), "remount {mode}");
    };
    remount("ro");
    let out = node.daemon_refusing(&node.config);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "started on a read-only store: {err}");
    assert!(
        err.contains(&node.store.display().to_string()) && err.to_lowercase().contains("read-only"),
        "{err}"
    );
    assert_eq!(limit_mw(&node, 0), 700_000);
    remount("rw");
    node.start();
    assert_eq!(node.record("1").state, wattson_types::job::JobState::Completed);
}

/// `begin_with`, returning the wall-clock interval around the call.
fn begin_timed(node: &Node, job: &str, gpus: &str, policy: &str) -> common::Bracket {
    let t0 = wattson_types::now_ns();
    begin_with(node, job, gpus, policy);
    common::Bracket(t0, wattson_types::now_ns())
}

/// NVML numbers the GPUs otherwise after a restart (a reboot, a driver reload) while jobs run
/// on three of four GPUs, two of them capped, and the fourth was capped by hand with nothing
/// in the journal: each job keeps metering its own GPUs (found by UUID), exact to the GPUs'
/// truth within 0.1%; the hand-capped GPU returns to its defaults at the start, and no GPU is
/// left with a setting once the jobs end.
#[test]
fn gpus_renumbered_across_a_restart_keep_their_jobs_and_every_gpu_returns_to_defaults() {
    let mut node = Node::h100(4);
    for (gpu, load) in [(0, 0.9), (1, 0.2), (2, 0.6), (3, 0.4)] {
        node.sim.set_load(gpu, load).unwrap();
    }
    node.start();
    let began = [
        ("1", begin_timed(&node, "1", "0", "min-energy")),
        ("2", begin_timed(&node, "2", "1,2", "min-energy")),
        ("3", begin_timed(&node, "3", "3", "perf")),
    ];
    std::thread::sleep(Duration::from_millis(600));
    node.end("3");
    let capped: Vec<u32> = (0..3).map(|g| limit_mw(&node, g)).collect();
    assert!(capped.iter().all(|&mw| mw < 700_000), "jobs 1 and 2 run capped: {capped:?}");
    node.kill9();
    node.sim.set_power_limit(3, 500_000).unwrap();
    // Index 0 is now the GPU that was 3, 1 was 2, 2 was 0, 3 was 1.
    node.sim.set_order(&[3, 2, 0, 1]).unwrap();
    node.start();
    assert_eq!(limit_mw(&node, 3), 700_000, "a GPU no job owns is back at its defaults at start");
    assert_eq!(
        (0..3).map(|g| limit_mw(&node, g)).collect::<Vec<_>>(),
        capped,
        "the jobs keep their settings"
    );
    std::thread::sleep(Duration::from_millis(600));
    for (job, begin) in &began[..2] {
        let end = node.end(job);
        let record = node.record(job);
        assert!(record.gpus.iter().all(|g| !g.meter.lost), "{record:?}");
        common::assert_exact(&node, &record, *begin, end, 1e-3);
    }
    for gpu in 0..4 {
        let state = node.sim.gpu_state(gpu).unwrap();
        assert_eq!(
            (state.power_limit_mw, state.locked_clocks_mhz),
            (700_000, None),
            "GPU {gpu}\n{}",
            node.log()
        );
    }
}

/// An administrator's typo: `store` naming a file that is not a wattson store (a copy of
/// `/etc/passwd`, the configuration file itself, another program's database) or `models_file`
/// naming an unrelated file. The daemon refuses to start, naming the key and the file, and
/// leaves the file as it was (contents, mode, nothing renamed aside).
#[test]
fn a_store_or_models_file_naming_another_file_is_refused_and_left_as_it_is() {
    let node = Node::h100(1);
    let passwd = node.dir.path().join("passwd");
    std::fs::write(&passwd, "root:x:0:0:root:/root:/bin/bash\n").unwrap();
    std::fs::set_permissions(&passwd, std::fs::Permissions::from_mode(0o644)).unwrap();
    let other_db = node.dir.path().join("other.db");
    let mut bytes = b"SQLite format 3\0\x10\x00".to_vec();
    bytes.resize(3 * 4096, 7);
    std::fs::write(&other_db, &bytes).unwrap();
    std::fs::set_permissions(&other_db, std::fs::Permissions::from_mode(0o644)).unwrap();
    let store = node.store.to_str().unwrap();
    let models = node.dir.path().join("models.json");
    for (key, from, victim) in [
        ("daemon.store", store, &passwd),
        ("daemon.store", store, &node.config),
        ("daemon.store", store, &other_db),
        ("engine.models_file", models.to_str().unwrap(), &passwd),
    ] {
        let before = std::fs::read(victim).unwrap();
        let mode = std::fs::metadata(victim).unwrap().permissions().mode();
        let config = node.config_with("typo.toml", from, victim.to_str().unwrap());
        let out = node.daemon_refusing(&config);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{err}");
        assert!(
            err.contains(key) && err.contains(victim.to_str().unwrap()) && err.contains("not a wattson"),
            "{err}"
        );
        assert_eq!(std::fs::read(victim).unwrap(), before, "{victim:?} was changed");
        assert_eq!(
            std::fs::metadata(victim).unwrap().permissions().mode(),
            mode,
            "{victim:?}'s mode changed"
        );
        let aside = std::fs::read_dir(victim.parent().unwrap())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name().to_string_lossy().contains(".corrupt-"))
            .count();
        assert_eq!(aside, 0, "{victim:?} was put aside");
    }
}

/// `wattsond --check-config` refuses what the start would: an empty store path, `/`, and a
/// `/metrics` open beyond this host that the site did not say it meant.
#[test]
fn check_config_refuses_empty_and_root_paths_and_a_public_metrics_address() {
    let node = Node::h100(1);
    let store = format!("{:?}", node.store.to_str().unwrap());
    let progress = format!("{:?}", node.dir.path().join("progress").to_str().unwrap());
    for (from, to, key) in [
        (store.as_str(), "\"\"", "daemon.store"),
        (store.as_str(), "\"/\"", "daemon.store"),
        (progress.as_str(), "\"/\"", "engine.progress_dir"),
        ("[engine]\n", "[metrics]\nlisten = \"0.0.0.0:9400\"\n[engine]\n", "metrics.listen"),
    ] {
        let config = node.config_with("check.toml", from, to);
        let out = wattson_harness::node::check_config(&config);
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{to}: {err}");
        assert!(err.contains(key), "{err}");
    }
}

/// A running job's record damaged on disk (its JSON no longer parses) while the daemon was
/// down: the daemon starts (no crash loop), logs the job, moves the record aside, and the
/// other running job resumes, exact.
#[test]
fn a_running_record_that_cannot_be_read_is_quarantined_and_the_daemon_starts() {
    let mut node = Node::h100(2);
    node.start();
    let args = ["job", "begin", "--job", "1", "--uid", "1000", "--gpus", "0", "--energy-tag", "damaged"];
    assert_ok(&node.wattson(&args));
    let t0 = wattson_types::now_ns();
    begin_with(&node, "2", "1", "perf");
    let begin2 = common::Bracket(t0, wattson_types::now_ns());
    std::thread::sleep(Duration::from_millis(300));
    node.stop();
    damage_the_tag(&node);

    node.start();
    assert!(node.log().contains("cannot be read") && node.log().contains("job=1"), "{}", node.log());
    let end2 = node.end("2");
    common::assert_exact(&node, &node.record("2"), begin2, end2, 1e-3);
    assert!(node.acct_json(&["-j", "1"]).is_empty(), "the damaged record is out of the job tables");
    assert_eq!(node.acct_json(&["-j", "2"]).len(), 1, "acct works");
}

/// Damages the records tagged `damaged` in the stopped node's store file: the tag's JSON
/// string becomes an unparsable array.
fn damage_the_tag(node: &Node) {
    // The last connection closing writes the log into the file itself.
    drop(wattson_store::Store::open(&node.store).unwrap());
    let mut bytes = std::fs::read(&node.store).unwrap();
    let (from, to) = (b"\"damaged\"", b"[damaged]");
    let mut hits = 0;
    for i in 0..bytes.len() - from.len() {
        if &bytes[i..i + from.len()] == from {
            bytes[i..i + from.len()].copy_from_slice(to);
            hits += 1;
        }
    }
    assert!(hits > 0, "the tag is in the store file");
    std::fs::write(&node.store, &bytes).unwrap();
}

/// A completed record damaged on disk is left out of every query that covers it (the others
/// are answered) and moved to the store's quarantine, logged.
#[test]
fn a_completed_record_that_cannot_be_read_is_left_out_and_quarantined() {
    let mut node = Node::h100(1);
    node.start();
    let args = ["job", "begin", "--job", "1", "--uid", "1000", "--gpus", "0", "--energy-tag", "damaged"];
    assert_ok(&node.wattson(&args));
    node.end("1");
    node.begin("2", 1000, "0");
    node.end("2");
    node.stop();
    damage_the_tag(&node);

    node.start();
    let keys = |records: Vec<serde_json::Value>| -> Vec<String> {
        records.iter().map(|r| r["job_id"].to_string()).collect()
    };
    assert_eq!(keys(node.acct_json(&["-j", "1,2"])), ["2"], "the readable record is answered");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !node.log().contains("a record cannot be read: moved to the store's quarantine") {
        assert!(std::time::Instant::now() < deadline, "{}", node.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(node.log().contains("job 1"), "{}", node.log());
    assert_eq!(keys(node.acct_json(&[])), ["2"]);
}

/// A daemon whose socket file was removed while it ran (say by hand) makes it again: clients
/// reach it within seconds, and the log says so. When another file takes the path (another
/// daemon's socket), the daemon leaves it alone, says so, and does not remove it at its stop.
#[test]
fn a_removed_socket_is_made_again_and_another_daemons_is_left_alone() {
    let mut node = Node::h100(1);
    node.start();
    let socket = node.socket.clone();
    let status =
        || wattson_protocol::call(&socket, &wattson_protocol::Request::Status {}, Duration::from_secs(1));
    std::fs::remove_file(&node.socket).unwrap();
    let until = |what: &str, done: &dyn Fn() -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while !done() {
            assert!(std::time::Instant::now() < deadline, "{what}\n{}", node.log());
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    until("the daemon answering again", &|| status().is_ok());
    assert!(node.log().contains("the socket was removed: listening there again"), "{}", node.log());

    // Another daemon's socket, put in place in one step (the path is never missing).
    let other_path = node.dir.path().join("other.sock");
    let other = std::os::unix::net::UnixListener::bind(&other_path).unwrap();
    std::fs::rename(&other_path, &node.socket).unwrap();
    until("the daemon saying another file took its path", &|| {
        node.log().contains("another file took the socket's path")
    });
    node.stop();
    assert!(
        std::os::unix::net::UnixStream::connect(&node.socket).is_ok(),
        "the first daemon removed the other's socket"
    );
    drop(other);
}

/// `wattsond --check-config` makes every check the start makes, not only the configuration's
/// own: a store path naming a file that is not a store, or a progress directory a user's link
/// leads to, is reported (exit non-zero, naming the key and the file), and nothing is touched.
#[test]
fn check_config_makes_the_starts_file_checks() {
    let node = Node::h100(1);
    let passwd = node.dir.path().join("passwd");
    std::fs::write(&passwd, "root:x:0:0:root:/root:/bin/bash\n").unwrap();
    let config = node.config_with("typo.toml", node.store.to_str().unwrap(), passwd.to_str().unwrap());
    let out = wattson_harness::node::check_config(&config);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "--check-config accepted a store that is another file: {err}");
    assert!(err.contains("daemon.store") && err.contains(passwd.to_str().unwrap()), "{err}");
    assert_eq!(std::fs::read_to_string(&passwd).unwrap(), "root:x:0:0:root:/root:/bin/bash\n");
    // The file the test's node uses passes.
    let ok = wattson_harness::node::check_config(&node.config);
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
}
