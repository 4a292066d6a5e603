//! What the benchmarks share: a real wattsond on simulated GPUs.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fake_nvml::{Config, Sim};
use wattson::protocol::{self, Request};

/// wattsond (the bench build's binary) on `gpus` simulated H100s, in `dir`.
pub struct BenchDaemon {
    /// The simulated GPUs.
    pub sim: Sim,
    /// Its socket.
    pub socket: PathBuf,
    /// Its configuration file.
    pub config: PathBuf,
    /// The process.
    pub child: Child,
}

impl BenchDaemon {
    /// Writes a config in `dir` and starts wattsond; waits until it answers.
    pub fn start(dir: &Path, gpus: usize) -> BenchDaemon {
        let exe = Path::new(env!("CARGO_BIN_EXE_wattsond"));
        let library = fake_nvml::library_path_next_to(exe).expect("libfake_nvml.so next to wattsond");
        let sim = Sim::create(&dir.join("gpus"), &Config::uniform("H100", gpus)).unwrap();
        let socket = dir.join("w.sock");
        let config = dir.join("w.toml");
        std::fs::write(
            &config,
            format!(
                "[daemon]\nsocket = {socket:?}\nstore = {:?}\nslurm_user = \"root\"\n[gpu]\nnvml_library = {library:?}\n",
                dir.join("w.db")
            ),
        )
        .unwrap();
        let child = Command::new(exe)
            .arg("-c")
            .arg(&config)
            .env(fake_nvml::DIR_ENV, sim.dir())
            .env("WATTSON_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while protocol::call(&socket, &Request::Status, Duration::from_secs(1)).is_err() {
            assert!(Instant::now() < deadline, "wattsond did not start");
            std::thread::sleep(Duration::from_millis(20));
        }
        BenchDaemon { sim, socket, config, child }
    }

    /// The daemon's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for BenchDaemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
