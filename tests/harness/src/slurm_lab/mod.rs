//! `SlurmLab`: a private, real Slurm cluster (Debian's slurmctld/slurmd 22.05) per test, on loopback.
//! `WATTSON_SLURM_RELEASE=24.11` (or `26.05`) runs another release's daemons and clients from a
//! Debian root instead (see `release`); such labs have no accounting (slurmdbd).
//!
//! Each lab has its own directory, a private `munged`, free TCP ports, one `slurmctld` and one `slurmd`
//! per node (all children of the test process), and fake GPUs (character devices, major 195) as GRES.
//! Include it from an integration test with `mod slurm_lab;`. Needs root (CI runs as root).
//!
//! Set `SLURM_LAB_KEEP=1` to keep lab directories (their path is printed) for post-mortems, and
//! Labs run Slurm on cgroups as sites do (`LabOptions::cgroups`); `WATTSON_LAB_CGROUPS=0` runs
//! every lab of a run on `proctrack/linuxproc` and `task/none` instead.
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

mod accounting;
pub mod backup;
mod clients;
pub mod configless;
mod daemons;
pub mod micro;
mod ports;
mod release;

pub use daemons::{ensure_slurm_installed, install_plugin, run_with_timeout, system_plugin_dir};
use daemons::{set_mode, tail};
pub use ports::free_port;
pub use release::{Release, release};

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};
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
    /// AMD GPUs: their device files are DRM render nodes `renderD<128+i>` (char devices
    /// 226:128+i), the files Slurm's `gpu/rsmi` lists, instead of `nvidia<i>`.
    pub render_nodes: bool,
    /// Shards of the node's GPUs (`gres/shard`, spread evenly over them); 0: none.
    pub shards: u32,
    /// CPUs= in slurm.conf (SlurmdParameters=config_overrides lets it exceed the real count).
    pub cpus: u32,
    /// NodeAddr= (any of 127.0.0.0/8 reaches this host; distinct ones let each node's
    /// wattsond listen on the same port).
    pub addr: String,
    /// More environment for this node's slurmd (and so its slurmstepds), after
    /// `LabOptions::daemon_env`: e.g. each node's own `WATTSON_CONFIG`.
    pub env: Vec<(String, String)>,
    /// The node's own `wattson.toml`: its slurmd runs in a namespace of its own, where this
    /// file is `/etc/wattson/wattson.toml` ([`configless`]).
    pub wattson_config: Option<PathBuf>,
    /// MIG instances of the node's GPUs, each a GPU GRES of its own as `AutoDetect=nvml`
    /// lists them; a GPU with instances is no GRES itself (empty: no MIG).
    pub mig: Vec<LabMig>,
}

/// One MIG instance as Slurm's `AutoDetect=nvml` writes it into the node's GPU GRES: `Type`
/// `<gpu_type>_<profile>`, `MultipleFiles` its GPU's `/dev/nvidia<gpu>` and the two capability
/// devices `nvidia-caps/nvidia-cap<N>` (char devices, here under `$LAB/dev/<node>/`). Slurm
/// 22.05's gres.conf has no `UniqueId`, so jobs get Slurm's numbers of them, not `MIG-` UUIDs.
#[derive(Clone, Debug)]
pub struct LabMig {
    /// The GPU (its device file's number).
    pub gpu: u32,
    /// Profile, e.g. `3g.40gb`.
    pub profile: String,
    /// Minor of the GPU instance's capability device.
    pub gi_cap_minor: u32,
    /// Minor of the compute instance's capability device.
    pub ci_cap_minor: u32,
}

impl LabNode {
    /// A node with `gpus` GPUs of type `gpu_type` and 2 CPUs, at 127.0.0.1.
    pub fn new(name: &str, gpus: u32, gpu_type: &str) -> LabNode {
        LabNode {
            name: name.to_string(),
            gpus,
            gpu_type: gpu_type.to_string(),
            render_nodes: false,
            shards: 0,
            cpus: 2,
            addr: "127.0.0.1".into(),
            env: Vec::new(),
            wattson_config: None,
            mig: Vec::new(),
        }
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
    /// Run slurmdbd on a private MariaDB, so `sacct` works (adds ~2 s to the start).
    pub accounting: bool,
    /// A backup slurmctld beside the primary ([`backup`]; this machine's Slurm only).
    pub backup_controller: bool,
    /// Run slurmctld, slurmd and the clients as this renumbered micro release of the lab's
    /// Slurm ([`micro`]); slurmdbd and munged stay as installed.
    pub micro_release: Option<micro::MicroRelease>,
    /// Run Slurm as sites do, on cgroups: `proctrack/cgroup`, `task/cgroup,task/affinity`, and
    /// `cgroup.conf` with `ConstrainDevices=yes` (cgroup v1: this kind of machine's layout).
    /// The default; `false` (or `WATTSON_LAB_CGROUPS=0` for a whole run) runs
    /// `proctrack/linuxproc` and `task/none`.
    pub cgroups: bool,
    /// Configless Slurm (`SlurmctldParameters=enable_configless`): every slurmd gets its
    /// configuration from slurmctld, each in a namespace of its own ([`configless`]).
    pub configless: bool,
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
            accounting: false,
            backup_controller: false,
            micro_release: None,
            cgroups: std::env::var("WATTSON_LAB_CGROUPS").map_or(true, |v| v != "0"),
            configless: false,
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
    /// Private MariaDB and slurmdbd, when the lab runs accounting.
    accounting: Option<accounting::Accounting>,
    slurmctld: Option<Child>,
    /// The backup slurmctld, when the lab has one.
    backup: Option<Child>,
    slurmds: Vec<(String, Child)>,
    pids: Vec<u32>,
    script_seq: AtomicU32,
    daemon_env: Vec<(String, String)>,
    /// `LD_LIBRARY_PATH` of slurmctld, slurmd and the clients (a renumbered micro release).
    slurm_env: Vec<(String, String)>,
    /// Whether slurmd fetches its configuration from slurmctld ([`LabOptions::configless`]).
    configless: bool,
}

static INSTALL: OnceLock<Result<(), String>> = OnceLock::new();
static LAB_SEQ: AtomicU32 = AtomicU32::new(0);

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
            accounting: None,
            slurmctld: None,
            backup: None,
            slurmds: Vec::new(),
            pids: Vec::new(),
            script_seq: AtomicU32::new(0),
            daemon_env: opts.daemon_env.clone(),
            slurm_env: (opts.micro_release.iter())
                .map(|m| ("LD_LIBRARY_PATH".to_string(), m.lib_dir.display().to_string()))
                .collect(),
            configless: opts.configless,
        };
        if std::env::var_os("SLURM_LAB_KEEP").is_some_and(|v| v != "0" && !v.is_empty())
            && let Some(d) = lab.dir.take()
        {
            eprintln!("slurm_lab: keeping lab directory {}", d.keep().display());
        }
        if opts.accounting {
            lab.accounting = Some(accounting::Accounting::new(&opts.extra_conf));
        }
        lab.make_gpus();
        lab.write_config(&opts);
        lab.start_munged();
        if opts.accounting {
            lab.start_accounting();
        }
        lab.start_slurmctld(opts.backup_controller);
        if opts.backup_controller {
            lab.start_backup();
        }
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

    /// Fake GPU device paths of `node` (`$LAB/dev/<node>/nvidia<i>`, or `renderD<128+i>`).
    pub fn gpu_devices(&self, node: &str) -> Vec<PathBuf> {
        let n = self.nodes.iter().find(|n| n.name == node).expect("unknown node");
        (0..n.gpus).map(|i| self.path.join(format!("dev/{node}/{}", n.gpu_file(i)))).collect()
    }

    /// Writes a controller configuration for this lab that only writes jobs' summaries (power,
    /// weights, pacing and the models' sync off), reaching the nodes' wattsond on `port` through
    /// the lab's munged; returns its path.
    pub fn summaries_only_controller(&self, port: u16) -> PathBuf {
        let controller = self.path.join("etc/wattson.toml");
        fs::write(
            &controller,
            format!(
                "[ctld]\nmanage_power = false\nweights = false\nstate_file = {:?}\n[link]\nport = {port}\n\
                 munge_socket = {:?}\nconfirm_idle = false\npace = false\nsync_models = false\n",
                self.path.join("ctld.json"),
                self.path.join("run/munge.sock"),
            ),
        )
        .expect("write the controller's configuration");
        controller
    }

    /// A daemon's log: `"slurmctld"`, `"slurmd-<node>"`, `"munged"` (log file plus captured
    /// stderr), or `"jobcomp"` (jobcomp/filetxt records).
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

    /// What a daemon wrote to stdout/stderr (`"slurmctld"`, `"slurmd-<node>"`, `"munged"`).
    pub fn stderr(&self, daemon: &str) -> String {
        fs::read_to_string(self.path.join(format!("log/{daemon}.stderr"))).unwrap_or_default()
    }

    /// The last lines of every daemon's log, for panic messages.
    pub fn all_logs(&self) -> String {
        let mut names = vec!["munged".to_string(), "slurmctld".to_string()];
        names.extend(self.nodes.iter().map(|n| format!("slurmd-{}", n.name)));
        if self.accounting.is_some() {
            names.extend(["slurmdbd".to_string(), "mariadbd".to_string()]);
        }
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

    /// A node's "power off": its slurmd stops. False if it was not running.
    pub fn power_off(&mut self, node: &str) -> bool {
        let Some(at) = self.slurmds.iter().position(|(n, _)| n == node) else { return false };
        let (_, mut child) = self.slurmds.remove(at);
        daemons::terminate(&mut child);
        true
    }

    /// Restarts `node`'s slurmd (SIGTERM, then a plain start: not a reboot, so its job steps,
    /// held by their own slurmstepd, go on).
    pub fn restart_slurmd(&mut self, node: &str) {
        assert!(self.power_off(node), "{node} is not running");
        let i = self.nodes.iter().position(|n| n.name == node).expect("a node of this lab");
        self.start_slurmd(i);
    }

    /// Restarts slurmctld (SIGTERM, then a start that reads its saved state).
    pub fn restart_slurmctld(&mut self) {
        let mut child = self.slurmctld.take().expect("slurmctld running");
        daemons::terminate(&mut child);
        self.start_slurmctld(self.backup.is_some());
    }

    /// A node's "power on": its slurmd starts with `-b`, reporting a fresh boot as a resumed
    /// node must. False if it was already running.
    pub fn power_on(&mut self, node: &str) -> bool {
        if self.slurmds.iter().any(|(n, _)| n == node) {
            return false;
        }
        let i = self.nodes.iter().position(|n| n.name == node).expect("a node of this lab");
        self.start_slurmd_with(i, &["-b"]);
        true
    }

    /// Stops every daemon (slurmctld, then each slurmd, then munged) and removes the lab directory.
    pub fn stop(mut self) {
        self.shutdown();
    }
}

impl Drop for SlurmLab {
    fn drop(&mut self) {
        self.shutdown();
    }
}
