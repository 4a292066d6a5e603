//! The shipped systemd units, each daemon run under the sandbox its own unit declares
//! (`tests/units/unit_sandbox`, derived from the unit file): every file it writes lies in the unit's
//! writable paths, and a write anywhere else fails the test.

mod unit_sandbox;

use wattson_harness::slurm_lab;

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use unit_sandbox::{Sandbox, Unit};

/// A fresh directory for one test, outside /tmp (which the units make private) and readable
/// by the units' users.
fn work(name: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new().prefix(name).tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// The build tree holding the binaries and the fake NVML library (it stands for /usr).
fn build_tree() -> PathBuf {
    wattson_harness::programs::profile_dir()
}

fn sandbox<'a>(unit: &'a Unit, program: &str, dir: &Path) -> Sandbox<'a> {
    Sandbox {
        unit,
        program: PathBuf::from(program),
        command: None,
        replace_args: Vec::new(),
        // The test's configuration (stands for /etc/wattson/wattson.toml).
        env: vec![("WATTSON_CONFIG".into(), dir.join("wattson.toml").to_string_lossy().into_owned())],
        fixtures: vec![dir.to_path_buf(), build_tree()],
        devices: Vec::new(),
        work: dir.join("sandbox"),
    }
}

/// Each unit points only to documentation that ships with wattson: man pages that
/// `cargo run -p wattson-docs` writes.
#[test]
fn the_units_point_to_the_man_pages() {
    let dir = tempfile::tempdir().unwrap();
    let written = wattson_docs::write_all(dir.path()).unwrap();
    for name in ["wattsond.service", "wattson-ctld.service"] {
        let docs = Unit::shipped(name).unit_words("Documentation");
        assert!(!docs.is_empty(), "{name} names no documentation");
        for doc in docs {
            // man:page(section) is the file manSECTION/page.SECTION.
            let page = doc.strip_prefix("man:").unwrap_or_else(|| panic!("{name}: {doc} is not a man page"));
            let (page, section) =
                page.strip_suffix(')').and_then(|p| p.split_once('(')).expect("man:page(section)");
            let file = format!("man{section}/{page}.{section}");
            assert!(written.iter().any(|w| w.ends_with(&file)), "{name}: {doc} is not generated ({file})");
        }
    }
}

/// The sandbox itself: under each unit's settings, a write to one of the unit's writable
/// paths lands in the test's directory for it, /tmp is private, and a write anywhere else is
/// refused and reported.
#[test]
fn the_sandbox_refuses_and_reports_writes_outside_the_units_paths() {
    for name in ["wattsond.service", "wattson-ctld.service"] {
        let unit = Unit::shipped(name);
        let dir = work("unit-probe-");
        let marker = format!("wattson-sandbox-probe-{}", std::process::id());
        let script = format!(
            "touch /var/lib/wattson/ok && touch /tmp/{marker} && ! touch /etc/{marker} && ! touch {d}/{marker} \
             && echo wrote; exec sleep 30",
            d = dir.path().display()
        );
        let mut probe = sandbox(&unit, "/bin/sh", dir.path());
        probe.command = Some(vec!["/bin/sh".into(), "-c".into(), script]);
        let mut running = probe.start();
        // Until both refused writes are in the trace: the first refusal's message alone comes
        // before the second write is tried (a probe stopped then showed one of the two).
        running.wait_for(Duration::from_secs(10), "probe writes", false, |r| {
            r.log().matches("touch: cannot touch").count() >= 2 && r.refused_writes().len() >= 2
        });
        running.stop();
        assert!(
            running.host_dir("/var/lib/wattson").expect("writable").join("ok").exists(),
            "{name}: {}",
            running.log()
        );
        assert!(!Path::new("/tmp").join(&marker).exists(), "{name}: /tmp is not private");
        assert!(!Path::new("/etc").join(&marker).exists(), "{name}: /etc was writable");
        assert!(!dir.path().join(&marker).exists(), "{name}: the test's directory was writable");
        let refused = running.refused_writes();
        assert_eq!(refused.len(), 2, "{name}: {refused:?}\n{}", running.log());
        assert!(refused.iter().any(|l| l.contains(&format!("/etc/{marker}"))), "{name}: {refused:?}");
    }
}

/// wattsond under its unit: it starts with its built-in paths (store, socket, progress
/// files), takes a job whose power limit the models choose, hands the job's user its
/// progress file, records the job, and stops cleanly; it never writes outside the unit's paths.
#[test]
fn wattsond_runs_under_its_units_sandbox() {
    let unit = Unit::shipped("wattsond.service");
    let dir = work("unit-wattsond-");
    let sim =
        fake_nvml::Sim::create(&dir.path().join("gpus"), &fake_nvml::Config::uniform("H100", 1)).unwrap();
    let lib = fake_nvml::library_path_next_to(&wattson_harness::programs::program("wattsond")).unwrap();
    std::fs::write(
        dir.path().join("wattson.toml"),
        format!("[daemon]\nnode_name = \"n1\"\nsample_interval = \"200ms\"\n[gpu]\nnvml_library = {lib:?}\n"),
    )
    .unwrap();
    let mut daemon =
        sandbox(&unit, &wattson_harness::programs::program("wattsond").display().to_string(), dir.path());
    daemon.env.push((fake_nvml::DIR_ENV.into(), sim.dir().to_string_lossy().into_owned()));
    daemon.devices = vec![sim.dir().to_path_buf()];
    let mut running = daemon.start();

    let runtime = running.host_dir("/run/wattson").expect("RuntimeDirectory").to_path_buf();
    let socket = runtime.join("wattsond.sock");
    running.wait_for(Duration::from_secs(20), "answer on /run/wattson/wattsond.sock", true, |_| {
        wattson_protocol::call(&socket, &wattson_protocol::Request::Status {}, Duration::from_secs(1)).is_ok()
    });
    let client = dir.path().join("client.toml");
    std::fs::write(&client, format!("[daemon]\nsocket = {socket:?}\n")).unwrap();
    let wattson = |args: &[&str]| {
        let out = Command::new(wattson_harness::programs::program("wattson"))
            .arg("-c")
            .arg(&client)
            .args(args)
            .output()
            .unwrap();
        assert!(out.status.success(), "wattson {args:?}: {out:?}\n{}", running.log());
        out
    };
    wattson(&[
        "job",
        "begin",
        "--job",
        "9",
        "--uid",
        "1000",
        "--gpus",
        "0",
        "--energy",
        "min-energy",
        "--energy-tag",
        "t",
    ]);
    let progress = runtime.join("progress/9");
    let meta =
        std::fs::metadata(&progress).unwrap_or_else(|e| panic!("no progress file ({e}):\n{}", running.log()));
    assert_eq!(meta.uid(), 1000, "the progress file is not the job user's");
    std::thread::sleep(Duration::from_millis(600));
    wattson(&["job", "end", "--job", "9"]);
    let acct = wattson(&["acct", "--jobs", "9"]);
    assert!(String::from_utf8_lossy(&acct.stdout).contains('9'), "{acct:?}");
    let state = running.host_dir("/var/lib/wattson").expect("StateDirectory").to_path_buf();
    assert!(state.join("wattson.db").exists(), "the store is not in /var/lib/wattson");

    let status = running.stop().expect("wattsond stops on SIGTERM");
    assert!(status.success(), "wattsond exited with {status}:\n{}", running.log());
    let refused = running.refused_writes();
    assert!(
        refused.is_empty(),
        "writes outside wattsond.service's paths:\n{}\n{}",
        refused.join("\n"),
        running.log()
    );
}

/// `wattson ctld` under its unit, as Slurm's user, against a real Slurm: every loop it saves
/// the power status, and it merges the nodes' measurements into its own copy and the model
/// table, all with their built-in paths, never writing outside the unit's paths.
#[test]
fn ctld_runs_under_its_units_sandbox() {
    let unit = Unit::shipped("wattson-ctld.service");
    let lab = slurm_lab::SlurmLab::start(slurm_lab::LabOptions {
        nodes: vec![slurm_lab::LabNode::new("n1", 2, "h100")],
        ..Default::default()
    });
    let dir = work("unit-ctld-");
    let munge = lab.dir().join("run/munge.sock");
    std::fs::write(
        dir.path().join("wattson.toml"),
        format!("[ctld]\ninterval = \"1s\"\n[link]\nmunge_socket = {munge:?}\ntimeout = \"500ms\"\n"),
    )
    .unwrap();
    let mut ctld =
        sandbox(&unit, &wattson_harness::programs::program("wattson-ctld").display().to_string(), dir.path());
    ctld.env.extend([
        ("SLURM_CONF".into(), lab.conf().to_string_lossy().into_owned()),
        ("WATTSON_LOG".into(), "debug".into()),
    ]);
    // The lab's slurm.conf and munged stand for /etc/slurm and /run/munge.
    ctld.fixtures.push(lab.dir().to_path_buf());
    let mut running = ctld.start();

    let files = ["ctld.json", "measurements.json", "models.json"];
    running.wait_for(Duration::from_secs(30), "state files in /var/lib/wattson", true, |r| {
        r.host_dir("/var/lib/wattson").is_some_and(|state| files.iter().all(|f| state.join(f).exists()))
    });
    let state = running.host_dir("/var/lib/wattson").unwrap().to_path_buf();
    // A second loop rewrites the power status in place.
    let first = std::fs::metadata(state.join("ctld.json")).unwrap().modified().unwrap();
    running.wait_for(Duration::from_secs(10), "a second loop", true, |_| {
        std::fs::metadata(state.join("ctld.json")).and_then(|m| m.modified()).is_ok_and(|t| t > first)
    });
    let status = running.stop();
    let log = running.log();
    assert!(status.is_some(), "ctld did not stop on SIGTERM:\n{log}");
    for f in files {
        let owner = std::fs::metadata(state.join(f)).unwrap().uid();
        assert_ne!(owner, 0, "{f} was written as root, not as the unit's user");
    }
    assert!(!log.contains("cannot save"), "{log}");
    assert!(!log.contains("models sync failed"), "{log}");
    let refused = running.refused_writes();
    assert!(
        refused.is_empty(),
        "writes outside wattson-ctld.service's paths:\n{}\n{log}",
        refused.join("\n")
    );
    lab.stop();
}
