//! `SlurmLab`: a private, real Slurm cluster (Debian's slurmctld/slurmd 22.05) per test, on loopback.
//!
//! Each lab has its own directory, a private `munged`, free TCP ports, one `slurmctld` and one `slurmd`
//! per node (all children of the test process), and fake GPUs (character devices, major 195) as GRES.
//! Include it from an integration test with `mod slurm_lab;`. Needs root (CI runs as root).
//!
//! Set `SLURM_LAB_KEEP=1` to keep lab directories (their path is printed) for post-mortems.
//!
//! Notes for plugin tests:
//! - The first batch job after a lab starts waits ~3 s (slurmctld's scheduler only starts running ~3 s
//!   after launch); later jobs go from sbatch to COMPLETED in ~1 s.
//! - SPANK `slurm_info` from slurmd (job_prolog/job_epilog) and slurmstepd (init, task_init, exit; lines
//!   prefixed `[<job>.batch]` / `[<job>.<step>]`) land in `log("slurmd-<node>")`; from sbatch itself
//!   (local/allocator context) in sbatch's stderr (`sbatch_verbose`, or the `Err` of `sbatch`).
//!   job_submit plugins log to `log("slurmctld")`. The job's own stdout is `job_output(id)`.
//! - plugstack.conf and plugin `.so` files are read per step: rewrite `plugstack()` freely, but install a
//!   new `.so` by write-then-rename, never overwrite a loaded one. `reconfigure()` reloads job_submit.
//! - Jobs run as root unless `--uid=<user>`; jobs/ is world-writable for their output.
//! - slurmstepd is not a child of the harness: it double-forks and is reparented to PID 1 (short-lived
//!   zombies may show up there). `stop()` cancels unfinished jobs through Slurm before killing daemons.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::io::Read;
use std::net::TcpListener;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread;
use std::time::{Duration, Instant};

/// Deadline of every poll loop in the harness (daemon start, node registration, reconfigure).
pub const START_TIMEOUT: Duration = Duration::from_secs(30);
/// Deadline of every client command (`sbatch`, `scontrol`, `sinfo`, ...) run by the harness.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(30);
/// Job states after which a job never runs again.
pub const TERMINAL_STATES: &[&str] = &[
    "COMPLETED",
    "FAILED",
    "CANCELLED",
    "TIMEOUT",
    "NODE_FAIL",
    "PREEMPTED",
    "BOOT_FAIL",
    "DEADLINE",
    "OUT_OF_MEMORY",
];

/// One compute node of a lab: its `slurmd` runs with `-N <name>` on its own port.
#[derive(Clone, Debug)]
pub struct LabNode {
    /// NodeName (also `SLURMD_NODENAME` inside jobs).
    pub name: String,
    /// Number of fake GPUs (`$LAB/dev/<name>/nvidia<i>`, char devices 195:i).
    pub gpus: u32,
    /// GRES type, e.g. "h100" (`Gres=gpu:<type>:<gpus>`).
    pub gpu_type: String,
    /// CPUs= in slurm.conf (SlurmdParameters=config_overrides lets it exceed the real count).
    pub cpus: u32,
}

impl LabNode {
    /// A node with `gpus` GPUs of type `gpu_type` and 2 CPUs.
    pub fn new(name: &str, gpus: u32, gpu_type: &str) -> LabNode {
        LabNode { name: name.to_string(), gpus, gpu_type: gpu_type.to_string(), cpus: 2 }
    }
}

/// What to put in a lab; `LabOptions::default()` is one node "n1" with 4 GPUs of type "h100".
#[derive(Clone, Debug)]
pub struct LabOptions {
    /// The compute nodes, all in partition `lab` (Default=YES).
    pub nodes: Vec<LabNode>,
    /// Contents of plugstack.conf (None: empty file); PlugStackConfig always points at it.
    pub plugstack: Option<String>,
    /// JobSubmitPlugins= value, e.g. Some("wattson").
    pub job_submit_plugins: Option<String>,
    /// Directory prepended to Slurm's own PluginDir (for job_submit_*.so, acct_gather_energy_*.so ...).
    pub plugin_dir: Option<PathBuf>,
    /// Extra slurm.conf lines, appended at the end.
    pub extra_conf: String,
    /// Extra environment variables for slurmctld and every slurmd.
    pub daemon_env: Vec<(String, String)>,
}

impl Default for LabOptions {
    fn default() -> LabOptions {
        LabOptions {
            nodes: vec![LabNode::new("n1", 4, "h100")],
            plugstack: None,
            job_submit_plugins: None,
            plugin_dir: None,
            extra_conf: String::new(),
            daemon_env: Vec::new(),
        }
    }
}

/// One job as `scontrol show job -o <id>` shows it.
#[derive(Clone, Debug)]
pub struct JobInfo {
    /// JobId.
    pub id: u32,
    /// First word of JobState, e.g. "COMPLETED", "PENDING".
    pub state: String,
    /// ExitCode, e.g. "0:0" (exit status:signal).
    pub exit_code: String,
    /// Every key=value of the record (Comment, AdminComment, TresPerNode, BeginTime, StdOut, Reason, ...).
    pub fields: BTreeMap<String, String>,
}

impl JobInfo {
    /// A field's value, or "" when absent.
    pub fn get(&self, key: &str) -> &str {
        self.fields.get(key).map(String::as_str).unwrap_or("")
    }

    /// Whether the job reached a state in `TERMINAL_STATES`.
    pub fn is_terminal(&self) -> bool {
        TERMINAL_STATES.contains(&self.state.as_str())
    }
}

/// A running private Slurm cluster; daemons stop on `stop()` or drop.
pub struct SlurmLab {
    dir: Option<tempfile::TempDir>,
    path: PathBuf,
    conf: PathBuf,
    cluster: String,
    nodes: Vec<LabNode>,
    ctld_port: u16,
    node_ports: Vec<u16>,
    munged: Option<Child>,
    slurmctld: Option<Child>,
    slurmds: Vec<(String, Child)>,
    pids: Vec<u32>,
    script_seq: AtomicU32,
    daemon_env: Vec<(String, String)>,
}

static INSTALL: OnceLock<Result<(), String>> = OnceLock::new();
static LAB_SEQ: AtomicU32 = AtomicU32::new(0);
static PORTS_GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// Runs `scripts/install-slurm` once per process; panics with its output on failure.
pub fn ensure_slurm_installed() {
    let res = INSTALL.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/install-slurm");
        let mut cmd = Command::new(&script);
        match run_with_timeout(&mut cmd, Duration::from_secs(600)) {
            Ok(out) if out.status.success() => Ok(()),
            Ok(out) => Err(format!(
                "{} failed ({}):\n{}{}",
                script.display(),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            )),
            Err(e) => Err(format!("{}: {e}", script.display())),
        }
    });
    if let Err(e) = res {
        panic!("slurm_lab: cannot install Slurm: {e}");
    }
}

/// Spawns `cmd` with piped stdout/stderr and waits at most `timeout`; kills it on expiry (Err).
pub fn run_with_timeout(cmd: &mut Command, timeout: Duration) -> Result<Output, String> {
    let what = format!("{cmd:?}");
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {what}: {e}"))?;
    let mut so = child.stdout.take().expect("stdout piped");
    let mut se = child.stderr.take().expect("stderr piped");
    let t_out = thread::spawn(move || {
        let mut v = Vec::new();
        let _ = so.read_to_end(&mut v);
        v
    });
    let t_err = thread::spawn(move || {
        let mut v = Vec::new();
        let _ = se.read_to_end(&mut v);
        v
    });
    let deadline = Instant::now() + timeout;
    let status: ExitStatus = loop {
        match child.try_wait() {
            Ok(Some(st)) => break st,
            Ok(None) if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{what} timed out after {timeout:?}"));
            }
            Ok(None) => thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(format!("waiting for {what}: {e}")),
        }
    };
    let stdout = t_out.join().unwrap_or_default();
    let stderr = t_err.join().unwrap_or_default();
    Ok(Output { status, stdout, stderr })
}

/// A free TCP port on 127.0.0.1, never handed out twice in this process.
fn free_port() -> u16 {
    for _ in 0..100 {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = l.local_addr().expect("local_addr").port();
        drop(l);
        if PORTS_GIVEN.lock().unwrap_or_else(|e| e.into_inner()).insert(port) {
            return port;
        }
    }
    panic!("slurm_lab: no free port found");
}

/// Slurm's own plugin directory (Debian multiarch path), or `SLURM_LAB_PLUGIN_DIR`.
pub fn system_plugin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SLURM_LAB_PLUGIN_DIR") {
        return PathBuf::from(d);
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Ok(rd) = fs::read_dir("/usr/lib") {
        for e in rd.flatten() {
            candidates.push(e.path().join("slurm-wlm"));
        }
    }
    candidates.extend(["/usr/lib/slurm-wlm", "/usr/lib64/slurm", "/usr/lib/slurm"].map(PathBuf::from));
    candidates
        .into_iter()
        .find(|d| d.join("select_cons_tres.so").exists())
        .unwrap_or_else(|| PathBuf::from("/usr/lib/x86_64-linux-gnu/slurm-wlm"))
}

fn daemon_bin(name: &str) -> PathBuf {
    let sbin = Path::new("/usr/sbin").join(name);
    if sbin.exists() { sbin } else { PathBuf::from(name) }
}

fn tail(text: &str, lines: usize) -> String {
    let v: Vec<&str> = text.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// Parses one `scontrol show job -o` record (space-separated key=value; a word without a
/// `Key=` prefix continues the previous value, so values with spaces survive).
pub fn parse_record(line: &str) -> BTreeMap<String, String> {
    let mut map = BTreeMap::new();
    let mut last: Option<String> = None;
    for word in line.split(' ').filter(|w| !w.is_empty()) {
        let key_end = word.find('=').filter(|&i| {
            i > 0
                && word[..i].starts_with(|c: char| c.is_ascii_alphabetic())
                && word[..i].chars().all(|c| c.is_ascii_alphanumeric() || "_/:".contains(c))
        });
        match key_end {
            Some(i) => {
                let k = word[..i].to_string();
                map.insert(k.clone(), word[i + 1..].to_string());
                last = Some(k);
            }
            None => {
                if let Some(k) = &last {
                    let v: &mut String = map.get_mut(k).expect("key inserted");
                    v.push(' ');
                    v.push_str(word);
                }
            }
        }
    }
    map
}

fn set_mode(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", p.display()));
}

impl SlurmLab {
    /// Installs Slurm if needed, writes the configuration, starts munged, slurmctld and one slurmd per node,
    /// and waits until every node is idle; panics with the daemon logs on failure.
    pub fn start(opts: LabOptions) -> SlurmLab {
        ensure_slurm_installed();
        assert!(!opts.nodes.is_empty(), "slurm_lab: a lab needs at least one node");
        let dir = tempfile::Builder::new().prefix("slurm-lab-").tempdir().expect("create lab tempdir");
        let path = dir.path().to_path_buf();
        set_mode(&path, 0o755);
        for sub in ["state", "spool", "log", "run", "dev", "etc", "jobs"] {
            fs::create_dir(path.join(sub)).expect("create lab subdir");
            set_mode(&path.join(sub), 0o755);
        }
        // Jobs may run as other users and write their output there.
        set_mode(&path.join("jobs"), 0o1777);

        let seq = LAB_SEQ.fetch_add(1, Ordering::SeqCst);
        let cluster = format!("lab{}x{}", std::process::id(), seq);
        let ctld_port = free_port();
        let node_ports: Vec<u16> = opts.nodes.iter().map(|_| free_port()).collect();
        let conf = path.join("etc/slurm.conf");

        let mut lab = SlurmLab {
            dir: Some(dir),
            path,
            conf,
            cluster,
            nodes: opts.nodes.clone(),
            ctld_port,
            node_ports,
            munged: None,
            slurmctld: None,
            slurmds: Vec::new(),
            pids: Vec::new(),
            script_seq: AtomicU32::new(0),
            daemon_env: opts.daemon_env.clone(),
        };
        if std::env::var_os("SLURM_LAB_KEEP").is_some_and(|v| v != "0" && !v.is_empty())
            && let Some(d) = lab.dir.take()
        {
            eprintln!("slurm_lab: keeping lab directory {}", d.keep().display());
        }
        lab.make_gpus();
        lab.write_config(&opts);
        lab.start_munged();
        lab.start_slurmctld();
        for i in 0..lab.nodes.len() {
            lab.start_slurmd(i);
        }
        lab.wait_nodes_ready(START_TIMEOUT);
        lab
    }

    /// The lab directory (etc/, log/, state/, spool/, run/, dev/, jobs/).
    pub fn dir(&self) -> &Path {
        &self.path
    }

    /// The slurm.conf path (what `SLURM_CONF` is set to).
    pub fn conf(&self) -> &Path {
        &self.conf
    }

    /// The plugstack.conf path (rewrite it to change SPANK plugins; new steps pick it up).
    pub fn plugstack(&self) -> PathBuf {
        self.path.join("etc/plugstack.conf")
    }

    /// ClusterName of this lab (unique per lab).
    pub fn cluster(&self) -> &str {
        &self.cluster
    }

    /// The node names, in configuration order.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.name.clone()).collect()
    }

    /// PIDs of every daemon this lab started (munged, slurmctld, slurmd...).
    pub fn pids(&self) -> Vec<u32> {
        self.pids.clone()
    }

    /// TCP ports this lab uses: SlurmctldPort first, then each node's Port.
    pub fn ports(&self) -> Vec<u16> {
        let mut v = vec![self.ctld_port];
        v.extend(&self.node_ports);
        v
    }

    /// Fake GPU device paths of `node` (`$LAB/dev/<node>/nvidia<i>`).
    pub fn gpu_devices(&self, node: &str) -> Vec<PathBuf> {
        let n = self.nodes.iter().find(|n| n.name == node).expect("unknown node");
        (0..n.gpus).map(|i| self.path.join(format!("dev/{node}/nvidia{i}"))).collect()
    }

    /// A `Command` for a Slurm client (`sbatch`, `scontrol`, `srun`...) with `SLURM_CONF` set and inherited
    /// `SLURM_*`/`SBATCH_*`/`SRUN_*`/`SALLOC_*` variables removed. Bound its run time yourself.
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new(program);
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy().into_owned();
            if ["SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SQUEUE_", "SINFO_"].iter().any(|p| k.starts_with(p))
            {
                cmd.env_remove(k);
            }
        }
        cmd.env("SLURM_CONF", &self.conf);
        cmd
    }

    /// Runs a client with `args` under `CLIENT_TIMEOUT` (panics on spawn failure or timeout).
    pub fn run(&self, program: &str, args: &[&str]) -> Output {
        let mut cmd = self.command(program);
        cmd.args(args);
        run_with_timeout(&mut cmd, CLIENT_TIMEOUT)
            .unwrap_or_else(|e| panic!("slurm_lab: {e}\n{}", self.all_logs()))
    }

    /// Like `run` but panics unless it exits 0; returns its stdout.
    pub fn run_ok(&self, program: &str, args: &[&str]) -> String {
        let out = self.run(program, args);
        if !out.status.success() {
            panic!(
                "slurm_lab: {program} {args:?} failed ({}):\n{}{}\n{}",
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr),
                self.all_logs()
            );
        }
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Writes `script` (a `#!/bin/bash` line is added if missing) under jobs/ and runs
    /// `sbatch --parsable <args> <script>` from jobs/ (default output: jobs/slurm-<id>.out).
    /// Returns the job id, or Err(stderr) when sbatch refuses the job.
    pub fn sbatch(&self, args: &[&str], script: &str) -> Result<u32, String> {
        self.sbatch_verbose(args, script).map(|(id, _)| id)
    }

    /// Like `sbatch` but also returns sbatch's stderr on success (job_submit `err_msg` info lines,
    /// SPANK `slurm_info` from the local/allocator context).
    pub fn sbatch_verbose(&self, args: &[&str], script: &str) -> Result<(u32, String), String> {
        let n = self.script_seq.fetch_add(1, Ordering::SeqCst);
        let file = self.path.join(format!("jobs/script-{n}.sh"));
        let body =
            if script.starts_with("#!") { script.to_string() } else { format!("#!/bin/bash\n{script}") };
        fs::write(&file, body).expect("write job script");
        set_mode(&file, 0o755);
        let mut cmd = self.command("sbatch");
        cmd.current_dir(self.path.join("jobs")).arg("--parsable").args(args).arg(&file);
        let out = run_with_timeout(&mut cmd, CLIENT_TIMEOUT)?;
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if !out.status.success() {
            return Err(stderr);
        }
        let first = stdout.trim().split([';', '\n']).next().unwrap_or("");
        match first.trim().parse() {
            Ok(id) => Ok((id, stderr)),
            Err(_) => Err(format!("unexpected sbatch output {stdout:?}; stderr: {stderr}")),
        }
    }

    /// Parsed `scontrol show job -o <id>`, or None when Slurm does not know the job.
    pub fn job_info(&self, job_id: u32) -> Option<JobInfo> {
        let out = self.run("scontrol", &["show", "job", "-o", &job_id.to_string()]);
        if !out.status.success() {
            return None;
        }
        let text = String::from_utf8_lossy(&out.stdout);
        let want = job_id.to_string();
        let fields = text
            .lines()
            .map(parse_record)
            .find(|m| m.get("JobId").map(String::as_str) == Some(want.as_str()))?;
        let state = fields.get("JobState").and_then(|s| s.split(' ').next()).unwrap_or("").to_string();
        let exit_code = fields.get("ExitCode").cloned().unwrap_or_default();
        Some(JobInfo { id: job_id, state, exit_code, fields })
    }

    /// Polls `job_info` every 50 ms until the job is in a terminal state; panics with logs after `timeout`.
    pub fn wait_job(&self, job_id: u32, timeout: Duration) -> JobInfo {
        let deadline = Instant::now() + timeout;
        let mut last = None;
        loop {
            if let Some(info) = self.job_info(job_id) {
                if info.is_terminal() {
                    return info;
                }
                last = Some(info);
            }
            if Instant::now() >= deadline {
                panic!(
                    "slurm_lab: job {job_id} not finished after {timeout:?}; last seen: {last:#?}\n{}",
                    self.all_logs()
                );
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Contents of the job's StdOut file ("" if unreadable).
    pub fn job_output(&self, job_id: u32) -> String {
        self.job_info(job_id).and_then(|i| fs::read_to_string(i.get("StdOut")).ok()).unwrap_or_default()
    }

    /// Short state of a node from `sinfo %t` ("idle", "alloc", "mix", "down*", "idle~" ...); "" if unknown.
    pub fn node_state(&self, node: &str) -> String {
        let out = self.run("sinfo", &["-h", "-N", "-n", node, "-o", "%t"]);
        String::from_utf8_lossy(&out.stdout).lines().next().unwrap_or("").trim().to_string()
    }

    /// A daemon's log: "slurmctld", "slurmd-<node>", "munged" (log file plus captured stderr),
    /// or "jobcomp" (jobcomp/filetxt records).
    pub fn log(&self, daemon: &str) -> String {
        let log = self.path.join("log");
        if daemon == "jobcomp" {
            return fs::read_to_string(log.join("jobcomp.txt")).unwrap_or_default();
        }
        // With -D the daemons write each line to both their log file and stderr: show the file,
        // or stderr when the file was never written (fatal errors before it was opened).
        let file = fs::read_to_string(log.join(format!("{daemon}.log"))).unwrap_or_default();
        if !file.trim().is_empty() {
            return file;
        }
        self.stderr(daemon)
    }

    /// What a daemon wrote to stdout/stderr ("slurmctld", "slurmd-<node>", "munged").
    pub fn stderr(&self, daemon: &str) -> String {
        fs::read_to_string(self.path.join(format!("log/{daemon}.stderr"))).unwrap_or_default()
    }

    /// The last lines of every daemon's log, for panic messages.
    pub fn all_logs(&self) -> String {
        let mut names = vec!["munged".to_string(), "slurmctld".to_string()];
        names.extend(self.nodes.iter().map(|n| format!("slurmd-{}", n.name)));
        let mut s = format!("---- lab {} ({}) ----\n", self.cluster, self.path.display());
        for n in names {
            let _ = writeln!(s, "---- {n} (last 40 lines) ----\n{}", tail(&self.log(&n), 40));
        }
        s
    }

    /// `scontrol reconfigure`, then waits until slurmctld answers and every node is back to a usable state.
    pub fn reconfigure(&self) {
        self.run_ok("scontrol", &["reconfigure"]);
        self.wait_ctld_up(START_TIMEOUT);
        self.wait_nodes_ready(START_TIMEOUT);
    }

    /// Stops every daemon (slurmctld, then each slurmd, then munged) and removes the lab directory.
    pub fn stop(mut self) {
        self.shutdown();
    }

    // ---- internals ----

    fn fail(&self, what: &str) -> ! {
        panic!("slurm_lab: {what}\n{}", self.all_logs());
    }

    fn make_gpus(&self) {
        for node in &self.nodes {
            let d = self.path.join("dev").join(&node.name);
            fs::create_dir_all(&d).expect("create dev dir");
            set_mode(&d, 0o755);
            for i in 0..node.gpus {
                let p = d.join(format!("nvidia{i}"));
                let mut cmd = Command::new("mknod");
                cmd.args(["-m", "0666"]).arg(&p).args(["c", "195", &i.to_string()]);
                match run_with_timeout(&mut cmd, CLIENT_TIMEOUT) {
                    Ok(o) if o.status.success() => {}
                    Ok(o) => {
                        panic!(
                            "slurm_lab: mknod {} failed: {}",
                            p.display(),
                            String::from_utf8_lossy(&o.stderr)
                        )
                    }
                    Err(e) => panic!("slurm_lab: {e}"),
                }
            }
        }
    }

    fn write_config(&self, opts: &LabOptions) {
        let lab = self.path.display().to_string();
        let sys_dir = system_plugin_dir();
        let plugin_dir = match &opts.plugin_dir {
            Some(extra) => format!("{}:{}", extra.display(), sys_dir.display()),
            None => sys_dir.display().to_string(),
        };
        let mut c = String::new();
        let _ = write!(
            c,
            "# slurm.conf written by tests/slurm_lab\n\
             ClusterName={cluster}\n\
             SlurmctldHost=localhost\n\
             SlurmctldPort={ctld_port}\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             AuthType=auth/munge\n\
             CredType=cred/munge\n\
             AuthInfo=socket={lab}/run/munge.sock\n\
             StateSaveLocation={lab}/state\n\
             SlurmdSpoolDir={lab}/spool/slurmd-%n\n\
             SlurmctldPidFile={lab}/run/slurmctld.pid\n\
             SlurmdPidFile={lab}/run/slurmd-%n.pid\n\
             SlurmctldLogFile={lab}/log/slurmctld.log\n\
             SlurmdLogFile={lab}/log/slurmd-%n.log\n\
             SlurmctldDebug=info\n\
             SlurmdDebug=info\n\
             PluginDir={plugin_dir}\n\
             PlugStackConfig={lab}/etc/plugstack.conf\n\
             ProctrackType=proctrack/linuxproc\n\
             TaskPlugin=task/none\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             SchedulerType=sched/backfill\n\
             SchedulerParameters=batch_sched_delay=0\n\
             AccountingStorageType=accounting_storage/none\n\
             JobCompType=jobcomp/filetxt\n\
             JobCompLoc={lab}/log/jobcomp.txt\n\
             ReturnToService=2\n\
             MinJobAge=600\n\
             KillWait=5\n\
             MailProg=/bin/true\n\
             SlurmdParameters=config_overrides\n\
             PrologFlags=Alloc\n\
             GresTypes=gpu\n",
            cluster = self.cluster,
            ctld_port = self.ctld_port,
        );
        if let Some(js) = &opts.job_submit_plugins {
            let _ = writeln!(c, "JobSubmitPlugins={js}");
        }
        let mut gres = String::from("AutoDetect=off\n");
        for (node, port) in self.nodes.iter().zip(&self.node_ports) {
            let gres_spec = if node.gpus > 0 {
                format!(" Gres=gpu:{}:{}", node.gpu_type, node.gpus)
            } else {
                String::new()
            };
            let _ = writeln!(
                c,
                "NodeName={} NodeHostname=localhost NodeAddr=127.0.0.1 Port={port} CPUs={} RealMemory=2000{gres_spec} State=UNKNOWN",
                node.name, node.cpus
            );
            if node.gpus > 0 {
                let _ = writeln!(
                    gres,
                    "NodeName={n} Name=gpu Type={t} File={lab}/dev/{n}/nvidia[0-{last}]",
                    n = node.name,
                    t = node.gpu_type,
                    last = node.gpus - 1
                );
            }
        }
        let names: Vec<&str> = self.nodes.iter().map(|n| n.name.as_str()).collect();
        let _ =
            writeln!(c, "PartitionName=lab Nodes={} Default=YES MaxTime=INFINITE State=UP", names.join(","));
        if !opts.extra_conf.is_empty() {
            let _ = writeln!(c, "# extra_conf\n{}", opts.extra_conf);
        }
        let etc = self.path.join("etc");
        fs::write(&self.conf, c).expect("write slurm.conf");
        fs::write(etc.join("gres.conf"), gres).expect("write gres.conf");
        fs::write(etc.join("plugstack.conf"), opts.plugstack.clone().unwrap_or_default())
            .expect("write plugstack.conf");
        for f in ["slurm.conf", "gres.conf", "plugstack.conf"] {
            set_mode(&etc.join(f), 0o644);
        }
    }

    fn spawn_daemon(&mut self, name: &str, program: PathBuf, args: &[String]) -> Child {
        let log = self.path.join("log");
        let out = fs::File::create(log.join(format!("{name}.stderr"))).expect("create daemon stderr log");
        let err = out.try_clone().expect("dup log fd");
        let child = Command::new(&program)
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .envs(self.daemon_env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| self.fail(&format!("cannot start {}: {e}", program.display())));
        self.pids.push(child.id());
        child
    }

    fn start_munged(&mut self) {
        let lab = self.path.clone();
        let key = lab.join("etc/munge.key");
        let mut k = vec![0u8; 1024];
        fs::File::open("/dev/urandom").and_then(|mut f| f.read_exact(&mut k)).expect("read /dev/urandom");
        fs::write(&key, &k).expect("write munge key");
        set_mode(&key, 0o400);
        let sock = lab.join("run/munge.sock");
        assert!(
            sock.as_os_str().len() < 100,
            "slurm_lab: munge socket path {} too long for a Unix socket: use a shorter TMPDIR",
            sock.display()
        );
        let args = vec![
            "-F".to_string(),
            format!("--socket={}", sock.display()),
            format!("--key-file={}", key.display()),
            format!("--pid-file={}", lab.join("run/munged.pid").display()),
            format!("--log-file={}", lab.join("log/munged.log").display()),
            format!("--seed-file={}", lab.join("run/munged.seed").display()),
            "--num-threads=2".to_string(),
        ];
        let child = self.spawn_daemon("munged", daemon_bin("munged"), &args);
        self.munged = Some(child);
        let deadline = Instant::now() + START_TIMEOUT;
        while !sock.exists() {
            self.check_alive();
            if Instant::now() >= deadline {
                self.fail("munged did not create its socket");
            }
            thread::sleep(Duration::from_millis(10));
        }
    }

    fn start_slurmctld(&mut self) {
        let args =
            vec!["-D".to_string(), "-i".to_string(), "-f".to_string(), self.conf.display().to_string()];
        let child = self.spawn_daemon("slurmctld", daemon_bin("slurmctld"), &args);
        self.slurmctld = Some(child);
        self.wait_ctld_up(START_TIMEOUT);
    }

    fn start_slurmd(&mut self, i: usize) {
        let name = self.nodes[i].name.clone();
        let spool = self.path.join(format!("spool/slurmd-{name}"));
        fs::create_dir_all(&spool).expect("create slurmd spool");
        let args = vec![
            "-D".to_string(),
            "-f".to_string(),
            self.conf.display().to_string(),
            "-N".to_string(),
            name.clone(),
        ];
        let child = self.spawn_daemon(&format!("slurmd-{name}"), daemon_bin("slurmd"), &args);
        self.slurmds.push((name, child));
    }

    /// Panics with logs if a daemon this lab started has exited (absent or zombie in /proc).
    fn check_alive(&self) {
        let mut names = vec![("munged".to_string(), self.munged.as_ref())];
        names.push(("slurmctld".to_string(), self.slurmctld.as_ref()));
        names.extend(self.slurmds.iter().map(|(n, c)| (format!("slurmd -N {n}"), Some(c))));
        let dead: Vec<String> = names
            .into_iter()
            .filter_map(|(n, c)| c.map(|c| (n, c.id())))
            .filter(|(_, pid)| {
                let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
                // Field 3 (after the parenthesised command) is the state; Z = exited, not yet reaped.
                stat.rsplit_once(')').is_none_or(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']))
            })
            .map(|(n, pid)| format!("{n} (pid {pid}) exited"))
            .collect();
        if !dead.is_empty() {
            self.fail(&dead.join("; "));
        }
    }

    fn wait_ctld_up(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            let mut cmd = self.command("scontrol");
            cmd.arg("ping");
            if let Ok(out) = run_with_timeout(&mut cmd, CLIENT_TIMEOUT)
                && String::from_utf8_lossy(&out.stdout).contains("is UP")
            {
                return;
            }
            self.check_alive();
            if Instant::now() >= deadline {
                self.fail(&format!("slurmctld not UP after {timeout:?}"));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits until `sinfo` lists every node as idle, mixed or allocated (no `*`, no down/drain/inval).
    fn wait_nodes_ready(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        let mut last = String::new();
        loop {
            let mut cmd = self.command("sinfo");
            cmd.args(["-h", "-N", "-p", "lab", "-o", "%N %t"]);
            if let Ok(out) = run_with_timeout(&mut cmd, CLIENT_TIMEOUT) {
                last = String::from_utf8_lossy(&out.stdout).into_owned();
                let states: BTreeMap<&str, &str> =
                    last.lines().filter_map(|l| l.trim().split_once(' ')).collect();
                let ready = self.nodes.iter().all(|n| {
                    states.get(n.name.as_str()).is_some_and(|s| ["idle", "mix", "alloc"].contains(s))
                });
                if out.status.success() && ready {
                    return;
                }
            }
            self.check_alive();
            if Instant::now() >= deadline {
                self.fail(&format!("nodes not ready after {timeout:?}; sinfo says:\n{last}"));
            }
            thread::sleep(Duration::from_millis(50));
        }
    }

    /// Asks slurmctld to cancel every unfinished job and waits (at most 10 s) until none is running or
    /// completing, so no job process outlives the lab. Never panics (runs from Drop).
    fn cancel_all_jobs(&self) {
        let alive = self.slurmctld.as_ref().is_some_and(|c| {
            fs::read_to_string(format!("/proc/{}/stat", c.id()))
                .ok()
                .and_then(|st| st.rsplit_once(')').map(|(_, r)| !r.trim_start().starts_with(['Z', 'X'])))
                .unwrap_or(false)
        });
        if !alive {
            return;
        }
        let unfinished = || -> Vec<String> {
            let mut cmd = self.command("squeue");
            cmd.args(["-h", "-t", "PD,R,CG,CF,S,RQ,RS,RH,SO,ST", "-o", "%i"]);
            match run_with_timeout(&mut cmd, Duration::from_secs(5)) {
                Ok(o) if o.status.success() => {
                    String::from_utf8_lossy(&o.stdout).split_whitespace().map(str::to_string).collect()
                }
                _ => Vec::new(),
            }
        };
        let ids = unfinished();
        if ids.is_empty() {
            return;
        }
        let mut cmd = self.command("scancel");
        cmd.args(&ids);
        let _ = run_with_timeout(&mut cmd, Duration::from_secs(5));
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline && !unfinished().is_empty() {
            thread::sleep(Duration::from_millis(50));
        }
    }

    fn shutdown(&mut self) {
        self.cancel_all_jobs();
        // slurmctld first (stopping slurmd first makes slurmctld hang ~5 s), then slurmd, then munged.
        let mut order: Vec<(String, Child)> = Vec::new();
        if let Some(c) = self.slurmctld.take() {
            order.push(("slurmctld".into(), c));
        }
        for (n, c) in self.slurmds.drain(..) {
            order.push((format!("slurmd-{n}"), c));
        }
        for (_, mut c) in order {
            terminate(&mut c);
        }
        if let Some(mut c) = self.munged.take() {
            terminate(&mut c);
        }
    }
}

/// SIGTERM, wait up to 5 s, then SIGKILL; always reaps the child.
fn terminate(child: &mut Child) {
    if let Ok(Some(_)) = child.try_wait() {
        return;
    }
    // SAFETY: kill(2) on the PID of our own un-reaped child: it cannot have been recycled.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
}

impl Drop for SlurmLab {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Installs a plugin file into `dir` as `name` the safe way: write a new file, then rename it
/// over the old one (overwriting a `.so` a daemon has loaded can crash it).
pub fn install_plugin(from: &Path, dir: &Path, name: &str) {
    let tmp = dir.join(format!(".{name}.new"));
    fs::copy(from, &tmp).unwrap_or_else(|e| panic!("slurm_lab: cannot copy {}: {e}", from.display()));
    fs::rename(&tmp, dir.join(name)).expect("rename plugin into place");
}
