//! wattson's main job end to end on one machine, with no GPU: real Slurm daemons (Debian's
//! slurmctld, slurmd, munged) on loopback with wattson's plugins, `wattsond` on four simulated
//! H100s (the fake NVML library built from this repository) with a real SQLite store, a few
//! `sbatch` jobs with different energy hints (one refused), a `kill -9` of wattsond mid-job,
//! a `min-energy` job whose GPUs' power limit is probed and settled within its slowdown bound,
//! the `wattson acct` report checked against the energy the simulated GPUs drew (physical
//! truth: their counters step every 100 ms and lag, as NVML's do), and the same
//! energy in Slurm's own accounting (`sacct`, through `acct_gather_energy/wattson`, slurmdbd on
//! a private MariaDB), and those jobs exported as a trace (`replay`). Then a cluster of two
//! nodes under `wattson ctld` (`cluster`), and the trace replayed by the simulator.
//!
//! Run with `./scripts/demo` (which installs Slurm and builds everything first). Files stay in
//! `target/demo/`.

use wattson_harness::slurm_lab;

mod cluster;
mod replay;

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use fake_nvml::{Config, Sim, Workload};
use slurm_lab::{LabNode, LabOptions, SlurmLab};

/// Where the demo takes wattson's programs and plugins from: the build (`target/release/`), or,
/// with `WATTSON_DEMO_INSTALLED=1` (the package test), the installed Debian packages.
struct Installed {
    wattsond: PathBuf,
    wattson: PathBuf,
    /// Plugins copied into a private PluginDir; `None`: Slurm's own PluginDir has them.
    plugins_from: Option<PathBuf>,
    /// Where the programs Slurm runs for the controller are (`wattson-suspend`...).
    programs: PathBuf,
}

fn main() {
    let bin = std::env::current_exe().unwrap().parent().unwrap().parent().unwrap().to_path_buf();
    let dir = bin.parent().unwrap().join("demo");
    let from = if std::env::var_os("WATTSON_DEMO_INSTALLED").is_some_and(|v| v == "1") {
        println!(
            "Using the installed packages: /usr/sbin/wattsond, /usr/bin/wattson, plugins in Slurm's PluginDir"
        );
        Installed {
            wattsond: "/usr/sbin/wattsond".into(),
            wattson: "/usr/bin/wattson".into(),
            plugins_from: None,
            programs: "/usr/sbin".into(),
        }
    } else {
        Installed {
            wattsond: bin.join("wattsond"),
            wattson: bin.join("wattson"),
            plugins_from: Some(bin.clone()),
            programs: bin.clone(),
        }
    };
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(dir.join("plugins")).unwrap();
    let sim = Sim::create(&dir.join("gpus"), &Config::realistic("H100", 4)).expect("simulated GPUs");
    let library =
        fake_nvml::library_path_next_to(&bin.join("wattsond")).expect("libfake_nvml.so (run ./scripts/demo)");
    let config = dir.join("wattson.toml");
    std::fs::write(
        &config,
        format!(
            "[daemon]\nsocket = {:?}\nstore = {:?}\nnode_name = \"n1\"\nslurm_user = \"root\"\nsample_interval = \"250ms\"\n\n[gpu]\nnvml_library = {library:?}\n\n# Short probe windows (a 100 ms step of the energy counter is a thirtieth of one), so that a demo-length job probes and settles (default: minutes).\n[engine]\nprobe_window = \"3s\"\nprobe_settle = \"500ms\"\n",
            dir.join("wattsond.sock"),
            dir.join("wattson.db"),
        ),
    )
    .unwrap();

    step("Start wattsond on 4 simulated H100 GPUs");
    let mut daemon = Daemon::start(&from.wattsond, &config, &sim, &dir);
    let wattson = |args: &[&str]| run(&from.wattson, &config, args);

    step("Start Slurm (slurmctld, slurmd n1 with 4 GPUs as GRES, munged, slurmdbd) with wattson's plugins");
    if let Some(built) = &from.plugins_from {
        for (lib, plugin) in [
            ("libspank_wattson.so", "spank_wattson.so"),
            ("libjob_submit_wattson.so", "job_submit_wattson.so"),
            ("libacct_gather_energy_wattson.so", "acct_gather_energy_wattson.so"),
        ] {
            slurm_lab::install_plugin(&built.join(lib), &dir.join("plugins"), plugin);
        }
    }
    let lab = SlurmLab::start(LabOptions {
        nodes: vec![LabNode { cpus: 4, ..LabNode::new("n1", 4, "h100") }],
        // A plugin name without a path: Slurm looks it up in its PluginDir.
        plugstack: Some(format!("required spank_wattson.so config={}\n", config.display())),
        job_submit_plugins: Some("wattson".into()),
        plugin_dir: from.plugins_from.as_ref().map(|_| dir.join("plugins")),
        daemon_env: vec![("WATTSON_CONFIG".into(), config.display().to_string())],
        accounting: true,
        extra_conf: ENERGY_CONF.into(),
        ..Default::default()
    });
    println!(
        "Slurm cluster {} up; plugstack: spank_wattson.so, JobSubmitPlugins=wattson, \
         AcctGatherEnergyType=acct_gather_energy/wattson",
        lab.cluster()
    );

    step("Submit jobs with different energy hints (the GPUs' load is simulated per GPU)");
    for (gpu, load) in [(0, 0.95), (1, 0.95), (2, 0.40), (3, 0.70)] {
        sim.set_load(gpu, load).unwrap();
        // How fast work goes at each clock (hidden from wattson, which measures it).
        sim.set_workload(gpu, Some(WORKLOAD)).unwrap();
        // As on a busy node: each GPU at the heat of its draw, not just out of idle (a GPU
        // that heats for minutes under a power limit runs ever slower at it, and a limit
        // probed in a job's first seconds would break the bound later).
        sim.warm(gpu).unwrap();
    }
    // Long enough for the min-energy job to probe (again after the restart below) and settle.
    let script = "#!/bin/sh\nsleep 40\necho \"policy=$WATTSON_POLICY gpu_power_limit_w=${WATTSON_GPU_POWER_LIMIT_W:-default} gpus=$SLURM_JOB_GPUS\"\n";
    let mut jobs = Vec::new();
    for args in [
        &[
            "--job-name=bert-pretrain",
            "--gres=gpu:2",
            "--energy=min-energy",
            "--energy-slowdown=10",
            "--energy-tag=bert",
        ][..],
        &["--job-name=resnet50-infer", "--gres=gpu:1", "--energy=perf"][..],
        &["--job-name=gpt2-finetune", "--gres=gpu:1"][..],
    ] {
        println!("$ sbatch {}", args.join(" "));
        let id = lab.sbatch(args, script).expect("accepted");
        println!("Submitted batch job {id}");
        jobs.push(id);
    }
    println!("$ sbatch --energy=fast ...");
    match lab.sbatch(&["--energy=fast"], script) {
        Ok(id) => panic!("job {id} with a bad hint was accepted"),
        Err(e) => println!("{}", e.trim()),
    }

    wait_until("all jobs running", || {
        jobs.iter().all(|&id| lab.job_info(id).is_some_and(|j| j.state == "RUNNING"))
    });
    // The kill comes once every job's batch step is recorded too (the SPANK plugin begins it
    // in slurmstepd), so that it falls mid-job for every record.
    wait_until("every batch step recorded", || {
        let out = Command::new(&from.wattson)
            .arg("-c")
            .arg(&config)
            .args(["acct", "-S", "now-1hour", "--json"])
            .output()
            .expect("run wattson acct");
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        let ids: Vec<&str> =
            doc["jobs"].as_array().into_iter().flatten().filter_map(|j| j["id"].as_str()).collect();
        jobs.iter().all(|id| ids.contains(&format!("{id}.batch").as_str()))
    });
    sleep(Duration::from_secs(2));
    wattson(&["status"]);

    step("wattsond is killed with SIGKILL mid-job and restarted: no energy is lost");
    daemon.kill9();
    sleep(Duration::from_secs(1));
    daemon = Daemon::start(&from.wattsond, &config, &sim, &dir);
    for &id in &jobs {
        let info = lab.wait_job(id, Duration::from_secs(120));
        println!("job {id} {}: {}", info.state, lab.job_output(id).trim());
        println!("  AdminComment={}", info.get("AdminComment"));
    }
    wait_until("GPUs back at their defaults", || {
        (0..4).all(|g| sim.gpu_state(g).unwrap().power_limit_mw == 700_000)
    });
    println!("all GPUs back at their default 700 W limit");

    step("The report, as sacct prints it");
    wattson(&[
        "acct",
        "-S",
        "now-1hour",
        "-o",
        "JobID,JobName,NGPUs,Elapsed,GPUEnergy,GPUEnergyRaw,AvgGPUPower,PeakGPUPower,GPUUtil,Method,Policy",
    ]);

    step("The min-energy job's power limit: probed, then settled within its 10% slowdown bound");
    wattson(&[
        "acct",
        "-S",
        "now-1hour",
        "-o",
        "JobID,JobName,Policy,Probes,Setting,PredSlowdown,Slowdown,EnergySaved",
    ]);

    step("Check against the energy the simulated GPUs drew (physical truth, not their stepping counters)");
    let out = Command::new(&from.wattson)
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
            "  job {:>3}: measured {measured:>9.1} J, truth {truth:>9.1} J, error {:.4}%",
            job["id"].as_str().unwrap(),
            err * 100.0
        );
    }
    // The min-energy job (the first) settled below the default limit, saved energy, and ran
    // within its 10% bound at that setting.
    let min_energy = jobs[0].to_string();
    let settled = doc["jobs"].as_array().unwrap().iter().any(|j| {
        j["id"].as_str() == Some(min_energy.as_str())
            && j["dvfs"]["setting"].as_f64().is_some_and(|w| w < 700.0)
            && j["dvfs"]["energy_saved_j"].as_f64() > Some(0.0)
            && j["dvfs"]["measured_slowdown"].as_f64().is_some_and(|s| s <= 0.10)
    });

    step("Slurm's own accounting: the same GPU energy in sacct (acct_gather_energy/wattson)");
    let ids: Vec<String> = jobs.iter().map(|id| id.to_string()).collect();
    let sacct_args =
        ["-X", "-j", &ids.join(","), "-o", "JobID,JobName,State,Elapsed,ConsumedEnergy,ConsumedEnergyRaw"];
    let mut sacct = String::new();
    wait_until("slurmdbd to store every job's energy", || {
        sacct = lab.run_ok("sacct", &[&["-n", "-P"][..], &sacct_args[..]].concat());
        sacct
            .lines()
            .filter(|l| l.rsplit('|').next().is_some_and(|e| e.parse::<u64>().is_ok_and(|e| e > 0)))
            .count()
            == jobs.len()
    });
    println!("$ sacct {}\n{}", sacct_args.join(" "), lab.run_ok("sacct", &sacct_args).trim_end());
    // A job's figure in Slurm covers its steps, up to its last step's end; wattson's job record
    // runs on to the epilog a moment later, and its batch step's record ends with the step.
    // The GPUs here stay loaded in between (real ones idle once the job's processes are gone),
    // so Slurm's figure lies between wattson's two, whatever the moment the epilog ran.
    let energy_of = |id: &str| {
        doc["jobs"].as_array().unwrap().iter().find(|j| j["id"] == id).and_then(|j| j["energy_j"].as_f64())
    };
    let mut sacct_outside = Vec::new();
    for id in &ids {
        let slurm: f64 = sacct
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{id}|")))
            .and_then(|l| l.rsplit('|').next()?.parse().ok())
            .unwrap_or(0.0);
        let (job, batch) = (energy_of(id).unwrap_or(0.0), energy_of(&format!("{id}.batch")).unwrap_or(0.0));
        println!("  job {id:>3}: sacct {slurm:>9.0} J; wattson: batch step {batch:>9.1} J, job {job:>9.1} J");
        if slurm < batch * (1.0 - SACCT_MARGIN) || slurm > job * (1.0 + SACCT_MARGIN) {
            sacct_outside.push(format!("job {id}: sacct {slurm} J outside [{batch:.1}, {job:.1}] J"));
        }
    }
    let trace = replay::export(&from, &lab, &dir);
    lab.stop();
    daemon.stop();
    println!("\nStore: {}  (worst error {:.4}%)", dir.join("wattson.db").display(), worst * 100.0);
    let mut failed = Vec::new();
    let job_rows =
        doc["jobs"].as_array().unwrap().iter().filter(|j| !j["id"].as_str().unwrap().contains('.')).count();
    if worst > 0.001 || job_rows != jobs.len() {
        failed.push("a job is missing or differs from the truth by more than 0.1%".to_string());
    }
    if !sacct_outside.is_empty() {
        failed.push(format!(
            "Slurm's figure is not between wattson's step and job: {}",
            sacct_outside.join("; ")
        ));
    }
    if !settled {
        failed.push(
            "the min-energy job did not settle below 700 W with an energy saving within its bound"
                .to_string(),
        );
    }
    failed.extend(cluster::act(&from, &dir.join("cluster"), &dir.join("plugins"), &library).err());
    failed.extend(trace.and_then(|trace| replay::simulate(&from, &dir, &trace, jobs.len())).err());
    for failure in &failed {
        eprintln!("demo: FAILED: {failure}");
    }
    if !failed.is_empty() {
        std::process::exit(1);
    }
}

/// The simulated GPUs' hidden speed law: 0.1 s per unit of work at 1980 MHz, a fifth of it
/// clock-independent.
const WORKLOAD: Workload = Workload { t0_s: 0.02, d_s_mhz: 158.4 };

/// slurm.conf lines for GPU energy in Slurm's accounting (docs/slurm.md), and the GPUs each
/// job held (for `wattson trace export`).
const ENERGY_CONF: &str = "AcctGatherEnergyType=acct_gather_energy/wattson\nJobAcctGatherType=jobacct_gather/linux\n\
                           JobAcctGatherFrequency=task=5\nPrologFlags=Alloc,Contain\nAccountingStorageTRES=gres/gpu";

/// How far Slurm's figure may lie outside wattson's batch step and job (its last poll of a
/// step may come just before the step's end; whole joules).
const SACCT_MARGIN: f64 = 0.005;

fn step(title: &str) {
    println!("\n== {title}");
}

fn wait_until(what: &str, mut ok: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ok() {
        assert!(Instant::now() < deadline, "demo: timed out waiting for {what}");
        sleep(Duration::from_millis(100));
    }
}

fn run(exe: &Path, config: &Path, args: &[&str]) {
    println!("$ wattson {}", args.join(" "));
    let status = Command::new(exe).arg("-c").arg(config).args(args).status().expect("run wattson");
    assert!(status.success(), "wattson {args:?} failed");
}

struct Daemon(Child);

impl Daemon {
    fn start(wattsond: &Path, config: &Path, sim: &Sim, dir: &Path) -> Daemon {
        let log =
            std::fs::OpenOptions::new().create(true).append(true).open(dir.join("wattsond.log")).unwrap();
        let child = Command::new(wattsond)
            .arg("-c")
            .arg(config)
            .env(fake_nvml::DIR_ENV, sim.dir())
            .stderr(log)
            .stdout(Stdio::null())
            .spawn()
            .expect("start wattsond");
        let socket = dir.join("wattsond.sock");
        wait_until("wattsond", || std::os::unix::net::UnixStream::connect(&socket).is_ok());
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

impl Drop for Daemon {
    /// A demo that fails half-way leaves no daemon behind (after `stop`/`kill9` this is a no-op).
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}
