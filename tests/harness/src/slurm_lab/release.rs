//! Which Slurm a lab runs: the machine's own (Debian 12's 22.05), or another release's from a
//! Debian root that `scripts/slurm-root` builds, chosen by `WATTSON_SLURM_RELEASE` (`24.11`,
//! `26.05`; unset, empty or `22.05`: the machine's). In a root every daemon and client runs
//! under chroot (through `scripts/slurm-root <release> run`, which mounts /proc, /dev, /sys,
//! /tmp and the repository at their own paths in a mount namespace of its own), so the lab's
//! paths are the same inside and out; the plugins are built against the root's headers.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use super::run_with_timeout;

/// The Slurm the lab runs.
#[derive(Debug)]
pub struct Release {
    /// The release series as `WATTSON_SLURM_RELEASE` names it (`24.11`), or None for the
    /// machine's own Slurm.
    pub name: Option<String>,
    /// The root holding that release (None: the machine's own Slurm).
    pub root: Option<PathBuf>,
}

/// The release of this test process (built on first use: a root takes ~15-40 s the first
/// time, then is reused from `target/slurm-roots/`); panics when it cannot be built.
pub fn release() -> &'static Release {
    static RELEASE: OnceLock<Release> = OnceLock::new();
    RELEASE.get_or_init(|| {
        let name = std::env::var("WATTSON_SLURM_RELEASE").ok().filter(|r| !r.is_empty() && r != "22.05");
        let Some(name) = name else { return Release { name: None, root: None } };
        let mut build = Command::new(script());
        build.arg(&name);
        let out = run_with_timeout(&mut build, Duration::from_secs(600))
            .unwrap_or_else(|e| panic!("slurm_lab: scripts/slurm-root {name}: {e}"));
        assert!(
            out.status.success(),
            "slurm_lab: scripts/slurm-root {name} failed:\n{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let root = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
        Release { name: Some(name), root: Some(root) }
    })
}

fn script() -> PathBuf {
    crate::programs::workspace().join("scripts/slurm-root")
}

impl Release {
    /// A `Command` running `program` (a name on PATH or an absolute path, as inside the root)
    /// of this release.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        match &self.name {
            None => Command::new(program),
            Some(name) => {
                let mut cmd = Command::new(script());
                cmd.arg(name).arg("run").arg(program);
                cmd
            }
        }
    }

    /// [`Release::command`] run as user `uid` and group `gid` (in a root, the chroot is entered
    /// as root and the user taken on inside it, with `setpriv`).
    pub fn command_as(&self, program: impl AsRef<std::ffi::OsStr>, uid: u32, gid: u32) -> Command {
        match &self.name {
            None => {
                let mut cmd = Command::new(program);
                std::os::unix::process::CommandExt::uid(&mut cmd, uid);
                std::os::unix::process::CommandExt::gid(&mut cmd, gid);
                cmd
            }
            Some(name) => {
                let mut cmd = Command::new(script());
                cmd.arg(name).args(["run", "setpriv"]);
                cmd.args([format!("--reuid={uid}"), format!("--regid={gid}"), "--clear-groups".into()]);
                cmd.arg(program);
                cmd
            }
        }
    }

    /// Where `inside` (an absolute path as the release's programs see it) is on this machine.
    pub fn host_path(&self, inside: &Path) -> PathBuf {
        match &self.root {
            None => inside.to_path_buf(),
            Some(root) => root.join(inside.strip_prefix("/").unwrap_or(inside)),
        }
    }

    /// The release's `slurm/*.h` directory, when it is not the machine's own
    /// (`WATTSON_SLURM_INCLUDE` for building plugins against it).
    pub fn include_dir(&self) -> Option<PathBuf> {
        self.root.as_ref().map(|r| r.join("usr/include/slurm"))
    }
}
