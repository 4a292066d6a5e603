//! `wattson ctld` run for a lab's Slurm, and stopped when its handle drops (a failed test
//! leaves no controller running).

use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::slurm_lab::SlurmLab;

/// A running `wattson ctld`, stopped when dropped.
pub struct Ctld(Child);

impl std::ops::Deref for Ctld {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Ctld {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

impl Drop for Ctld {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `wattson ctld -c <config>` as `command` (the program `wattson`, however started), for
/// the lab's Slurm, logging to `log`.
pub fn run_ctld(lab: &SlurmLab, mut command: Command, config: &Path, log: &Path) -> Ctld {
    let log = std::fs::File::create(log).unwrap();
    let child = command
        .args(["ctld", "-c"])
        .arg(config)
        .env("SLURM_CONF", lab.conf())
        .env("WATTSON_LOG", "info")
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .unwrap();
    Ctld(child)
}
