//! wattson's main job end to end on one machine, with no GPU: `wattsond` on four simulated
//! H100s (the fake NVML library built from this repository), a real SQLite store, a few jobs
//! with different loads begun and ended through `wattson job`, and the `wattson acct` report,
//! checked against the simulated GPUs' exact energy.
//!
//! Run with `./scripts/demo` (which builds everything first). Keeps its files in
//! `target/demo/` so the store can be inspected afterwards.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use fake_nvml::{Config, Sim};

fn main() {
    let bin = std::env::current_exe().unwrap().parent().unwrap().parent().unwrap().to_path_buf();
    let dir = bin.parent().unwrap().join("demo");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sim = Sim::create(&dir.join("gpus"), &Config::uniform("H100", 4)).expect("simulated GPUs");
    let library =
        fake_nvml::library_path_next_to(&bin.join("wattsond")).expect("libfake_nvml.so (run ./scripts/demo)");
    let user = nix::unistd::User::from_uid(nix::unistd::getuid())
        .ok()
        .flatten()
        .map(|u| u.name)
        .unwrap_or("root".into());
    let config = dir.join("wattson.toml");
    std::fs::write(
        &config,
        format!(
            "[daemon]\nsocket = {:?}\nstore = {:?}\nnode_name = \"demo01\"\nslurm_user = {user:?}\nsample_interval = \"250ms\"\n\n[gpu]\nnvml_library = {library:?}\n",
            dir.join("wattsond.sock"),
            dir.join("wattson.db"),
        ),
    )
    .unwrap();

    step("Start wattsond on 4 simulated H100 GPUs");
    let mut daemon = Daemon::start(&bin, &config, &sim, &dir);
    let wattson = |args: &[&str]| run(&bin.join("wattson"), &config, args);

    step("Three jobs with different loads, begun and ended as a Slurm Prolog/Epilog would");
    sim.set_load(0, 0.95).unwrap();
    sim.set_load(1, 0.95).unwrap();
    wattson(&[
        "job",
        "begin",
        "--job",
        "1001",
        "--uid",
        "1000",
        "--user",
        "alice",
        "--name",
        "bert-pretrain",
        "--gpus",
        "0,1",
        "--energy",
        "perf",
    ]);
    sim.set_load(2, 0.40).unwrap();
    wattson(&[
        "job",
        "begin",
        "--job",
        "1002",
        "--uid",
        "1001",
        "--user",
        "bob",
        "--name",
        "resnet50-infer",
        "--gpus",
        "2",
        "--energy",
        "min-energy",
        "--energy-slowdown",
        "10",
    ]);
    sim.set_load(3, 0.70).unwrap();
    wattson(&[
        "job",
        "begin",
        "--job",
        "1003",
        "--uid",
        "1000",
        "--user",
        "alice",
        "--name",
        "gpt2-finetune",
        "--gpus",
        "3",
        "--energy-tag",
        "gpt2-ft",
    ]);
    sleep(Duration::from_secs(2));
    wattson(&["status"]);

    step("Job 1003 changes phase; wattsond is killed with SIGKILL and restarted mid-job");
    sim.set_load(3, 0.20).unwrap();
    daemon.kill9();
    sleep(Duration::from_secs(1));
    daemon = Daemon::start(&bin, &config, &sim, &dir);
    sleep(Duration::from_secs(1));
    wattson(&["job", "end", "--job", "1002"]);
    sleep(Duration::from_secs(1));
    wattson(&["job", "end", "--job", "1001"]);
    wattson(&["job", "end", "--job", "1003"]);

    step("The report, as sacct prints it");
    wattson(&[
        "acct",
        "-S",
        "now-1hour",
        "-o",
        "JobID,JobName,User,NGPUs,Elapsed,GPUEnergy,GPUEnergyRaw,AvgGPUPower,PeakGPUPower,AvgSMClock,GPUUtil,Method,Policy",
    ]);

    step("Check against the simulated GPUs' exact energy");
    let out = Command::new(bin.join("wattson"))
        .arg("-c")
        .arg(&config)
        .args(["acct", "-S", "now-1hour", "--json"])
        .output()
        .unwrap();
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("acct --json");
    let mut worst: f64 = 0.0;
    for job in doc["jobs"].as_array().unwrap() {
        let measured = job["energy_j"].as_f64().unwrap();
        let truth: f64 = job["gpus"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| {
                let (index, from, to) =
                    (g["index"].as_u64(), g["first_reading_ns"].as_i64(), g["last_reading_ns"].as_i64());
                sim.truth_energy_mj(index.unwrap() as u32, from.unwrap(), to.unwrap()).unwrap() / 1000.0
            })
            .sum();
        let err = (measured - truth).abs() / truth;
        worst = worst.max(err);
        println!(
            "  job {:>5}: measured {measured:>10.1} J, truth {truth:>10.1} J, error {:.5}%",
            job["id"].as_str().unwrap(),
            err * 100.0
        );
    }
    daemon.stop();
    println!("\nStore: {}  (worst error {:.5}%)", dir.join("wattson.db").display(), worst * 100.0);
    if worst > 0.001 {
        eprintln!("demo: FAILED: an energy differs from the truth by more than 0.1%");
        std::process::exit(1);
    }
}

fn step(title: &str) {
    println!("\n== {title}");
}

fn run(exe: &Path, config: &Path, args: &[&str]) {
    println!("$ wattson {}", args.join(" "));
    let status = Command::new(exe).arg("-c").arg(config).args(args).status().expect("run wattson");
    assert!(status.success(), "wattson {args:?} failed");
}

struct Daemon(Child);

impl Daemon {
    fn start(bin: &Path, config: &Path, sim: &Sim, dir: &Path) -> Daemon {
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(dir.join("wattsond.log")).unwrap();
        let child = Command::new(bin.join("wattsond"))
            .arg("-c")
            .arg(config)
            .env("WATTSON_FAKE_NVML_DIR", sim.dir())
            .stderr(log)
            .stdout(Stdio::null())
            .spawn()
            .expect("start wattsond");
        let socket = dir.join("wattsond.sock");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            assert!(
                Instant::now() < deadline,
                "wattsond did not start; see {}",
                dir.join("wattsond.log").display()
            );
            sleep(Duration::from_millis(20));
        }
        println!("wattsond running (pid {}), log {}", child.id(), dir.join("wattsond.log").display());
        Daemon(child)
    }

    fn kill9(mut self) {
        println!("$ kill -9 {}", self.0.id());
        self.0.kill().unwrap();
        self.0.wait().unwrap();
    }

    fn stop(mut self) {
        let pid = nix::unistd::Pid::from_raw(self.0.id() as i32);
        nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
        self.0.wait().unwrap();
    }
}
