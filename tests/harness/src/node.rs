//! A private wattson node for integration tests: simulated GPUs (the fake NVML library built
//! from this repository), a configuration file, and the real `wattsond` binary as a child
//! process that the harness starts, kills and restarts.

use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use crate::vendor::Vendor;
use fake_nvml::Sim;
use wattson_protocol::{JobBegin, Reply, Request};
use wattson_types::job::{GpuRef, Hints, JobKey, JobRecord};

/// The uid of `nobody`, an unprivileged user that exists on Debian.
pub const NOBODY: u32 = 65534;

/// One node: GPUs, config, daemon.
pub struct Node {
    pub dir: tempfile::TempDir,
    pub sim: Sim,
    pub config: PathBuf,
    pub socket: PathBuf,
    pub store: PathBuf,
    /// Whose GPUs these are (which fake library the daemon loads).
    pub vendor: Vendor,
    daemon: Option<Child>,
}

impl Node {
    /// A node with `gpus` simulated GPUs, sampled every `sample_interval` (e.g. "200ms"),
    /// enacting policies as fixed power-limit shares.
    pub fn new(gpus: fake_nvml::Config, sample_interval: &str) -> Node {
        Node::with_sections(gpus, sample_interval, "enact = \"share\"\n", "")
    }

    /// A node whose `[policy]` and `[engine]` sections hold `policy` and `engine` (lines),
    /// besides the engine's files inside the node's directory.
    pub fn with_sections(gpus: fake_nvml::Config, sample_interval: &str, policy: &str, engine: &str) -> Node {
        Node::of_vendor(Vendor::Nvidia, gpus, sample_interval, policy, engine)
    }

    /// [`Node::with_sections`] with `vendor`'s GPUs (its fake library).
    pub fn of_vendor(
        vendor: Vendor,
        gpus: fake_nvml::Config,
        sample_interval: &str,
        policy: &str,
        engine: &str,
    ) -> Node {
        let dir = tempfile::tempdir().expect("tempdir");
        // Unprivileged test users must reach the socket and the store.
        set_mode(dir.path(), 0o755);
        let sim = Sim::create(&dir.path().join("gpus"), &gpus).expect("fake GPUs");
        let socket = dir.path().join("wattsond.sock");
        let store = dir.path().join("db").join("wattson.db");
        let config = dir.path().join("wattson.toml");
        let text = format!(
            "[daemon]\nsocket = {socket:?}\nstore = {store:?}\nnode_name = \"n1\"\nsample_interval = {sample_interval:?}\n[gpu]\n{gpu}[policy]\n{policy}[engine]\nprogress_dir = {progress:?}\nmodels_file = {models:?}\n{engine}",
            gpu = vendor.gpu_lines(),
            progress = dir.path().join("progress"),
            models = dir.path().join("models.json"),
        );
        std::fs::write(&config, text).expect("config");
        Node { dir, sim, config, socket, store, vendor, daemon: None }
    }

    /// A node of `n` simulated GPUs of `vendor`'s model sampled every 200 ms, enacting
    /// policies as fixed power-limit shares.
    pub fn gpus_of(vendor: Vendor, n: usize) -> Node {
        Node::of_vendor(vendor, vendor.gpus(n), "200ms", "enact = \"share\"\n", "")
    }

    /// A node without GPUs, sampled every `sample_interval`, whose configuration names no GPU
    /// library (the `[gpu]` section holds `gpu`'s lines instead) and ends with the `[energy]`
    /// section's `energy` lines.
    pub fn without_gpus(sample_interval: &str, gpu: &str, energy: &str) -> Node {
        let node = Node::new(fake_nvml::Config::uniform("H100", 0), sample_interval);
        let text = std::fs::read_to_string(&node.config).expect("read the node's configuration");
        let library = format!("nvml_library = {:?}\n", fake_library());
        assert!(text.contains(&library), "{text}");
        std::fs::write(&node.config, format!("{}\n[energy]\n{energy}", text.replace(&library, gpu)))
            .expect("write the node's configuration");
        node
    }

    /// A node of `n` simulated H100s sampled every 200 ms.
    pub fn h100(n: usize) -> Node {
        Node::new(fake_nvml::Config::uniform("H100", n), "200ms")
    }

    /// Starts wattsond and waits until it answers.
    pub fn start(&mut self) {
        self.start_with_env(&[]);
    }

    /// Starts wattsond taking the controller's requests on `addr:port`, sealed with the munged
    /// at `munge` (its `[link]`).
    pub fn start_with_link(&mut self, addr: &str, port: u16, munge: &std::path::Path) {
        let text = std::fs::read_to_string(&self.config).expect("read the node's configuration");
        std::fs::write(
            &self.config,
            format!("{text}\n[link]\nlisten = \"{addr}:{port}\"\nmunge_socket = {munge:?}\n"),
        )
        .expect("write the node's configuration");
        self.start();
    }

    /// Starts wattsond with extra environment variables and waits until it answers.
    pub fn start_with_env(&mut self, env: &[(&str, &Path)]) {
        self.start_under(&[], env);
    }

    /// Starts wattsond as the last argument of `wrapper` (e.g. `setpriv ... --`), with extra
    /// environment variables, and waits until it answers.
    pub fn start_under(&mut self, wrapper: &[String], env: &[(&str, &Path)]) {
        assert!(self.daemon.is_none(), "daemon already running");
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.path().join("wattsond.log"))
            .unwrap();
        let daemon = crate::programs::program("wattsond");
        let mut cmd = match wrapper.split_first() {
            Some((program, args)) => {
                let mut cmd = Command::new(program);
                cmd.args(args).arg(daemon);
                cmd
            }
            None => Command::new(daemon),
        };
        let child = cmd
            .arg("-c")
            .arg(&self.config)
            .env(self.vendor.dir_env(), self.sim.dir())
            .env("WATTSON_LOG", "debug")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .expect("spawn wattsond");
        self.daemon = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if wattson_protocol::call(&self.socket, &Request::Status {}, Duration::from_secs(1)).is_ok() {
                return;
            }
            if let Some(status) = self.daemon.as_mut().unwrap().try_wait().unwrap() {
                panic!("wattsond exited with {status} at start:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("wattsond did not become ready:\n{}", self.log());
    }

    /// Runs another wattsond with `config` on this node's GPUs and returns its output once it
    /// exits; panics if it is still running after 15 s (it should have refused to start).
    pub fn daemon_refusing(&self, config: &Path) -> Output {
        let mut daemon = Command::new(crate::programs::program("wattsond"))
            .arg("-c")
            .arg(config)
            .env(self.vendor.dir_env(), self.sim.dir())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn wattsond");
        let deadline = Instant::now() + Duration::from_secs(15);
        while daemon.try_wait().unwrap().is_none() {
            if Instant::now() > deadline {
                let _ = daemon.kill();
                let out = daemon.wait_with_output().unwrap();
                panic!("wattsond started instead of refusing: {}", String::from_utf8_lossy(&out.stderr));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        daemon.wait_with_output().unwrap()
    }

    /// A copy of this node's configuration with `from` replaced by `to`, written to `name`.
    pub fn config_with(&self, name: &str, from: &str, to: &str) -> PathBuf {
        let text = std::fs::read_to_string(&self.config).unwrap();
        assert!(text.contains(from), "{from} is not in the configuration");
        let path = self.dir.path().join(name);
        std::fs::write(&path, text.replace(from, to)).unwrap();
        path
    }

    /// Adds a `[metrics]` section serving on a free loopback port, with `extra` lines; returns
    /// the port.
    pub fn serve_metrics(&self, extra: &str) -> u16 {
        use std::io::Write;
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let mut config = std::fs::OpenOptions::new().append(true).open(&self.config).unwrap();
        writeln!(config, "[metrics]\nlisten = \"127.0.0.1:{port}\"\n{extra}").unwrap();
        port
    }

    /// The running daemon's pid.
    pub fn pid(&self) -> u32 {
        self.daemon.as_ref().expect("daemon running").id()
    }

    /// Kills wattsond with SIGKILL (no chance to persist anything).
    pub fn kill9(&mut self) {
        let mut child = self.daemon.take().expect("daemon running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// Stops wattsond with SIGTERM and checks it exits cleanly.
    pub fn stop(&mut self) {
        let mut child = self.daemon.take().expect("daemon running");
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(child.id() as i32),
            nix::sys::signal::Signal::SIGTERM,
        )
        .unwrap();
        let status = child.wait().unwrap();
        assert!(status.success(), "wattsond exited with {status}:\n{}", self.log());
    }

    /// The daemon's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("wattsond.log")).unwrap_or_default()
    }

    /// Runs the `wattson` CLI with this node's config, as root.
    pub fn wattson(&self, args: &[&str]) -> Output {
        self.wattson_cmd(args).output().expect("run wattson")
    }

    /// Runs the `wattson` CLI as another uid.
    pub fn wattson_as(&self, uid: u32, args: &[&str]) -> Output {
        self.wattson_cmd(args).uid(uid).gid(uid).output().expect("run wattson")
    }

    fn wattson_cmd(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(crate::programs::program("wattson"));
        cmd.arg("-c").arg(&self.config).args(args);
        for var in [
            "SLURM_JOB_ID",
            "SLURM_JOB_UID",
            "SLURM_JOB_USER",
            "SLURM_JOB_NAME",
            "SLURM_JOB_GPUS",
            "CUDA_VISIBLE_DEVICES",
        ] {
            cmd.env_remove(var);
        }
        cmd
    }

    /// `wattson job begin` for `job` owned by `uid` on `gpus`; panics unless it succeeds.
    /// Returns the wall-clock interval around the call.
    pub fn begin(&self, job: &str, uid: u32, gpus: &str) -> Bracket {
        let t0 = wattson_types::now_ns();
        assert_ok(&self.wattson(&["job", "begin", "--job", job, "--uid", &uid.to_string(), "--gpus", gpus]));
        Bracket(t0, wattson_types::now_ns())
    }

    /// `wattson job end` for `job`; panics unless it succeeds. Returns the interval around it.
    pub fn end(&self, job: &str) -> Bracket {
        let t0 = wattson_types::now_ns();
        assert_ok(&self.wattson(&["job", "end", "--job", job]));
        Bracket(t0, wattson_types::now_ns())
    }

    /// The jobs `wattson acct --json <args>` prints, as root.
    pub fn acct_json(&self, args: &[&str]) -> Vec<serde_json::Value> {
        parse_acct_json(&self.wattson(&[&["acct", "--json"], args].concat()))
    }

    /// The one record of `job`, read through the daemon's socket.
    pub fn record(&self, job: &str) -> JobRecord {
        let key = JobKey::parse(job).unwrap();
        let filter = wattson_protocol::AcctQuery { jobs: vec![key.clone()], ..Default::default() };
        match wattson_protocol::call(&self.socket, &Request::Acct(filter), Duration::from_secs(5)).unwrap() {
            Reply::Acct { records } => {
                let mut mine: Vec<JobRecord> = records.into_iter().filter(|r| r.key == key).collect();
                assert_eq!(mine.len(), 1, "expected exactly one record of {job}: {mine:?}");
                mine.pop().unwrap()
            }
            other => panic!("{other:?}"),
        }
    }

    /// The UUID of GPU `index`, as the daemon reports it.
    pub fn gpu_uuid(&self, index: u32) -> String {
        match wattson_protocol::call(&self.socket, &Request::Status {}, Duration::from_secs(5)).unwrap() {
            Reply::Status { gpus, .. } => gpus[index as usize].info.uuid.clone(),
            other => panic!("{other:?}"),
        }
    }

    /// The simulated GPU (its place in the fake driver's configuration) that `gpu` of a
    /// record is, found by its UUID: NVML may have numbered it otherwise since.
    pub fn sim_gpu(&self, gpu: &wattson_types::job::JobGpu) -> u32 {
        let config = fake_nvml::Config::load(self.sim.dir()).expect("the fake driver's configuration");
        (0..config.gpu.len())
            .find(|&place| config.spec(place).is_ok_and(|s| self.vendor.uuid(&s.uuid) == gpu.uuid))
            .map_or(gpu.index, |place| place as u32)
    }

    /// The exact interval (ns) between the first and last readings of each GPU of `record`:
    /// the instants at which the simulated GPU served the counter values the meter recorded
    /// (the daemon's own timestamps only where the GPU has no counter).
    pub fn read_intervals(&self, record: &JobRecord) -> Vec<(i64, i64)> {
        record
            .gpus
            .iter()
            .map(|g| {
                let m = &g.meter;
                let place = self.sim_gpu(g);
                let instant = |counter: Option<u64>, near: i64| match counter {
                    Some(c) => self
                        .sim
                        .counter_read_instants(place, c)
                        .unwrap()
                        .into_iter()
                        .min_by_key(|t| (t - near).abs())
                        .unwrap_or_else(|| panic!("GPU {place} never served counter value {c}")),
                    None => near,
                };
                (instant(m.begin_counter_mj, m.begin_ns), instant(m.last.energy_mj, m.last.t_ns))
            })
            .collect()
    }

    /// Exact energy each GPU of `record` drew between its first and last reading, in mJ.
    pub fn truth_mj(&self, record: &JobRecord) -> Vec<f64> {
        self.read_intervals(record)
            .into_iter()
            .zip(&record.gpus)
            .map(|((from, to), g)| self.sim.truth_energy_mj(self.sim_gpu(g), from, to).unwrap())
            .collect()
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        if let Some(mut child) = self.daemon.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A wall-clock interval (ns) around a call.
#[derive(Debug, Clone, Copy)]
pub struct Bracket(pub i64, pub i64);

impl Bracket {
    /// Panics unless `t_ns` lies within the interval.
    pub fn assert_contains(&self, t_ns: i64, what: &str) {
        assert!(self.0 <= t_ns && t_ns <= self.1, "{what} at {t_ns} is outside the call's interval {self:?}");
    }
}

/// Checks that every GPU of `record` was first read within the begin call and last read
/// within the end call, and that its energy equals the simulated GPU's exact energy between
/// those two readings within `tolerance` (relative).
pub fn assert_exact(node: &Node, record: &JobRecord, begin: Bracket, end: Bracket, tolerance: f64) {
    let intervals = node.read_intervals(record);
    let truth = node.truth_mj(record);
    for ((gpu, truth), (first, last)) in record.gpus.iter().zip(truth).zip(intervals) {
        begin.assert_contains(first, "first reading");
        end.assert_contains(last, "last reading");
        // The daemon's own timestamps are close to the true instants.
        assert!(
            (gpu.meter.begin_ns - first).abs() < 100_000_000
                && (gpu.meter.last.t_ns - last).abs() < 100_000_000
        );
        let err = rel_err(gpu.meter.energy_mj, truth);
        assert!(
            err < tolerance,
            "job {} GPU {}: {} mJ vs truth {truth} mJ (relative error {err:e})\n{}",
            record.key,
            gpu.index,
            gpu.meter.energy_mj,
            node.log()
        );
    }
    end.assert_contains(record.end_ns.expect("ended"), "end time");
}

/// The relative error of each GPU of `record` against the physical truth: the energy the
/// simulated GPU drew between the instants the daemon gives as the job's begin and end on it
/// (each checked to lie within its call). Where the fake behaves as real GPUs do, this is the
/// honest reference: its counter steps and lags, the power it draws does not.
pub fn physical_errors(node: &Node, record: &JobRecord, begin: Bracket, end: Bracket) -> Vec<f64> {
    record
        .gpus
        .iter()
        .map(|gpu| {
            let (from, to) = (gpu.meter.begin_ns, gpu.meter.last.t_ns);
            begin.assert_contains(from, "the job's begin on its GPU");
            end.assert_contains(to, "the job's end on its GPU");
            let truth = node.sim.truth_energy_mj(node.sim_gpu(gpu), from, to).unwrap();
            (gpu.meter.energy_mj - truth) / truth
        })
        .collect()
}

/// Parses `wattson acct --json` output into its jobs.
pub fn parse_acct_json(out: &Output) -> Vec<serde_json::Value> {
    assert_ok(out);
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).expect("acct --json is JSON");
    doc["jobs"].as_array().expect("jobs array").clone()
}

/// Panics with the command's output unless it exited 0.
pub fn assert_ok(out: &Output) {
    assert!(
        out.status.success(),
        "exit {}\nstdout: {}\nstderr: {}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `wattsond -c config --check-config`, run to its end.
pub fn check_config(config: &Path) -> Output {
    Command::new(crate::programs::program("wattsond"))
        .arg("-c")
        .arg(config)
        .arg("--check-config")
        .output()
        .expect("run wattsond --check-config")
}

/// The fake NVML library built next to the test binaries.
pub fn fake_library() -> PathBuf {
    fake_nvml::library_path_next_to(&crate::programs::profile_dir().join("wattsond"))
        .expect("libfake_nvml.so is built with the tests (dev-dependency)")
}

/// The Slurm plugins' files as Cargo builds them.
pub const PLUGIN_LIBS: [&str; 3] =
    ["libspank_wattson.so", "libjob_submit_wattson.so", "libacct_gather_energy_wattson.so"];

/// Builds the three Slurm plugins (dev profile) and returns the directory holding
/// [`PLUGIN_LIBS`]. With `test_hooks`, they carry the test-only hooks (feature `test-hooks`)
/// and are built in a target directory of their own (`<target>/test-hooks`), so that
/// `target/debug` only ever holds plugins as production builds them. For the lab's release
/// (`WATTSON_SLURM_RELEASE`) they are built against its headers, in `<target>/slurm-<release>`.
pub fn build_plugins(test_hooks: bool) -> PathBuf {
    let release = crate::slurm_lab::release();
    match (&release.name, release.include_dir()) {
        (Some(name), Some(include)) => build_plugins_in(test_hooks, Some((name, &include))),
        _ => build_plugins_in(test_hooks, None),
    }
}

/// [`build_plugins`] against the machine's own Slurm headers, whatever the lab's release.
pub fn build_plugins_for_installed_slurm() -> PathBuf {
    build_plugins_in(false, None)
}

fn build_plugins_in(test_hooks: bool, release: Option<(&str, &Path)>) -> PathBuf {
    let profile = crate::programs::profile_dir();
    let mut target = profile.parent().expect("a target folder").to_path_buf();
    let mut build = Command::new(env!("CARGO"));
    build.env_remove("WATTSON_SLURM_INCLUDE").env_remove("WATTSON_SLURM_BINDINGS");
    if let Some((name, include)) = release {
        target = target.join(format!("slurm-{name}"));
        build.env("WATTSON_SLURM_INCLUDE", include);
    }
    let target = if test_hooks { target.join("test-hooks") } else { target };
    build.args([
        "build",
        "-p",
        "spank-wattson",
        "-p",
        "job-submit-wattson",
        "-p",
        "acct-gather-energy-wattson",
    ]);
    build.arg("--target-dir").arg(&target);
    if test_hooks {
        build.args(["--features", "spank-wattson/test-hooks,job-submit-wattson/test-hooks"]);
    }
    assert_ok(&build.current_dir(crate::programs::workspace()).output().unwrap());
    target.join("debug")
}

/// Relative difference |a-b|/b.
pub fn rel_err(a: f64, b: f64) -> f64 {
    (a - b).abs() / b.abs()
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// A `job_begin` request for `job`, owned by uid 1000, on GPU `gpu`, with no hints.
pub fn job_begin(job: u32, gpu: u32) -> Request {
    Request::JobBegin(JobBegin {
        job: JobKey::job(job),
        uid: 1000,
        user: None,
        name: None,
        account: None,
        gpus: vec![GpuRef::Index(gpu)],
        hints: Hints::default(),
        shares_gpus: false,
    })
}

/// A tmpfs of a given size (mode 0755) mounted for the life of the value (lazily unmounted on
/// drop): a disk that fills up.
pub struct Tmpfs(PathBuf);

impl Tmpfs {
    pub fn mount(at: &Path, size: &str) -> Tmpfs {
        std::fs::create_dir_all(at).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size},mode=0755"), "tmpfs"])
            .arg(at)
            .status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "mounting a tmpfs needs root (the test harness runs as root)"
        );
        Tmpfs(at.to_path_buf())
    }

    /// Fills the file system with one file; deleting the returned path frees the space.
    pub fn fill(&self) -> PathBuf {
        use std::io::Write;
        let filler = self.0.join("filler");
        let mut f = std::fs::File::create(&filler).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        while f.write_all(&chunk).is_ok() {}
        filler
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

/// One HTTP GET on loopback; the whole response as text.
pub fn http_get(port: u16, path: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    out
}
