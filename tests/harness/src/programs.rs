//! The programs under test, as Cargo builds them. Each role's programs come from its own crate
//! (`wattson` from the root, `wattsond` from crates/daemon, `wattson-ctld` and Slurm's power
//! programs from crates/ctld, `wattson-sim` from crates/sim, `fake-gpu-job` from
//! tests/fake-nvml), so a test of one package cannot
//! name another's with `CARGO_BIN_EXE_*`: the first call builds them all, in the profile and
//! target directory of the running test, and later calls reuse them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The packages whose programs the tests run.
const PACKAGES: [&str; 5] = ["wattson", "wattson-daemon", "wattson-ctld", "wattson-sim", "fake-nvml"];

/// The workspace's root (where its Cargo.toml is).
pub fn workspace() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .and_then(Path::parent)
        .expect("tests/harness is two levels down")
}

/// The target directory's profile folder of the running test or bench (`target/debug`).
pub fn profile_dir() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    // target/<profile>/deps/<test>-<hash>, or target/<profile>/examples/<name>.
    let dir = exe.parent().expect("in a folder");
    let dir = if matches!(dir.file_name().and_then(|n| n.to_str()), Some("deps" | "examples")) {
        dir.parent().expect("a profile folder")
    } else {
        dir
    };
    dir.to_path_buf()
}

/// The path of program `name` (`wattsond`, `wattson-ctld`...), built if it is not yet.
pub fn program(name: &str) -> PathBuf {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    let dir = BUILT.get_or_init(|| {
        let profile = profile_dir();
        let target = profile.parent().expect("a target folder");
        let mut build = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
        build.arg("build").arg("--bins").arg("--target-dir").arg(target);
        for package in PACKAGES {
            build.args(["-p", package]);
        }
        match profile.file_name().and_then(|n| n.to_str()) {
            Some("debug") => {}
            Some("release") => {
                build.arg("--release");
            }
            Some(other) => {
                build.args(["--profile", other]);
            }
            None => panic!("no profile in {}", profile.display()),
        }
        let out = build.current_dir(workspace()).output().expect("run cargo");
        assert!(
            out.status.success(),
            "building the programs failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        profile
    });
    let path = dir.join(name);
    assert!(path.is_file(), "{} was not built", path.display());
    path
}

/// The shipped `etc/sim/cluster.toml` cut to one node of 4 GPUs, its data files found in this
/// checkout (the simulator's model of a lab's node).
pub fn one_node_cluster() -> String {
    let shipped =
        std::fs::read_to_string(workspace().join("etc/sim/cluster.toml")).expect("etc/sim/cluster.toml");
    let data = workspace().join("data").display().to_string();
    let text = shipped
        .replace("nodes = 80", "nodes = 1")
        .replace("gpus_per_node = 8", "gpus_per_node = 4")
        .replace("../../data", &data);
    assert!(text.contains("nodes = 1\n") && text.contains("gpus_per_node = 4 "), "the shipped file changed");
    text
}
