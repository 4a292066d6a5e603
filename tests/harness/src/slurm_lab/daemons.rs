//! Starting and stopping a lab's daemons (munged, slurmctld, one slurmd per node), its
//! configuration files and fake GPU devices, and the process plumbing they need.

use super::*;

impl LabNode {
    /// The device file name of GPU `i`: `nvidia<i>`, or `renderD<128+i>` for AMD GPUs.
    pub fn gpu_file(&self, i: u32) -> String {
        if self.render_nodes { format!("renderD{}", 128 + i) } else { format!("nvidia{i}") }
    }
}

impl SlurmLab {
    pub(super) fn fail(&self, what: &str) -> ! {
        panic!("slurm_lab: {what}\n{}", self.all_logs());
    }

    pub(super) fn make_gpus(&self) {
        for node in &self.nodes {
            let d = self.path.join("dev").join(&node.name);
            fs::create_dir_all(&d).expect("create dev dir");
            set_mode(&d, 0o755);
            let caps = d.join("nvidia-caps");
            // NVIDIA's devices are char 195:N; DRM render nodes char 226:128+N.
            let mut devices: Vec<(PathBuf, &str, u32)> = (0..node.gpus)
                .map(|i| match node.render_nodes {
                    true => (d.join(node.gpu_file(i)), "226", 128 + i),
                    false => (d.join(node.gpu_file(i)), "195", i),
                })
                .collect();
            if !node.mig.is_empty() {
                fs::create_dir_all(&caps).expect("create nvidia-caps dir");
                set_mode(&caps, 0o755);
            }
            for m in &node.mig {
                for minor in [m.gi_cap_minor, m.ci_cap_minor] {
                    // The driver's nvidia-caps major is dynamic; 511 is none of this machine's.
                    devices.push((caps.join(format!("nvidia-cap{minor}")), "511", minor));
                }
            }
            for (p, major, minor) in devices {
                let mut cmd = Command::new("mknod");
                cmd.args(["-m", "0666"]).arg(&p).args(["c", major, &minor.to_string()]);
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

    pub(super) fn write_config(&self, opts: &LabOptions) {
        let lab = self.path.display().to_string();
        let sys_dir = opts.micro_release.as_ref().map_or_else(system_plugin_dir, |m| m.plugin_dir.clone());
        let plugin_dir = match &opts.plugin_dir {
            Some(extra) => format!("{}:{}", extra.display(), sys_dir.display()),
            None => sys_dir.display().to_string(),
        };
        let mut c = String::new();
        let _ = write!(
            c,
            "# slurm.conf written by tests/harness (slurm_lab)\n\
             ClusterName={cluster}\n\
             {controllers}\
             SlurmctldPort={ctld_port}\n\
             SlurmUser=root\n\
             SlurmdUser=root\n\
             AuthType=auth/munge\n\
             CredType=cred/munge\n\
             AuthInfo=socket={lab}/run/munge.sock\n\
             StateSaveLocation={lab}/state\n\
             SlurmdSpoolDir={lab}/spool/slurmd-%n\n\
             SlurmdPidFile={lab}/run/slurmd-%n.pid\n\
             SlurmctldLogFile={lab}/log/slurmctld.log\n\
             SlurmdLogFile={lab}/log/slurmd-%n.log\n\
             SlurmctldDebug=info\n\
             SlurmdDebug=info\n\
             PluginDir={plugin_dir}\n\
             PlugStackConfig={lab}/etc/plugstack.conf\n\
             ProctrackType={proctrack}\n\
             TaskPlugin={task}\n\
             SelectType=select/cons_tres\n\
             SelectTypeParameters=CR_Core\n\
             SchedulerType=sched/backfill\n\
             SchedulerParameters=batch_sched_delay=0\n\
             {accounting}\n\
             JobCompType=jobcomp/filetxt\n\
             JobCompLoc={lab}/log/jobcomp.txt\n\
             ReturnToService=2\n\
             MinJobAge=600\n\
             KillWait=5\n\
             MailProg=/bin/true\n\
             SlurmdParameters=config_overrides\n\
             PrologFlags=Alloc\n",
            cluster = self.cluster,
            accounting = self.accounting_conf(),
            ctld_port = self.ctld_port,
            controllers = self.controller_conf(opts.backup_controller),
            proctrack = if opts.cgroups { "proctrack/cgroup" } else { "proctrack/linuxproc" },
            task = if opts.cgroups { "task/cgroup,task/affinity" } else { "task/none" },
        );
        if opts.configless {
            let _ = writeln!(c, "SlurmctldParameters=enable_configless");
        }
        let shards = self.nodes.iter().any(|n| n.shards > 0);
        let _ = writeln!(c, "GresTypes={}", if shards { "gpu,shard" } else { "gpu" });
        if opts.cgroups {
            // Slurm's cgroup v1 paths (`/slurm/uid_<uid>/job_<id>`) are the machine's, shared by
            // every lab: job ids of their own (the controller's port, unique among running
            // labs, times 1000) keep one lab's job end from killing another lab's job.
            let _ = writeln!(c, "FirstJobId={}", u32::from(self.ctld_port) * 1000);
        }
        if let Some(js) = &opts.job_submit_plugins {
            let _ = writeln!(c, "JobSubmitPlugins={js}");
        }
        let mut gres = String::from("AutoDetect=off\n");
        for (node, port) in self.nodes.iter().zip(&self.node_ports) {
            let gres_spec = match (node.gpus, node.shards) {
                (0, _) => String::new(),
                _ if !node.mig.is_empty() => format!(" Gres={}", mig_gres(node)),
                (gpus, 0) => format!(" Gres=gpu:{}:{gpus}", node.gpu_type),
                (gpus, shards) => format!(" Gres=gpu:{}:{gpus},shard:{shards}", node.gpu_type),
            };
            let _ = writeln!(
                c,
                "NodeName={} NodeHostname=localhost NodeAddr={} Port={port} CPUs={} RealMemory=2000{gres_spec} State=UNKNOWN",
                node.name, node.addr, node.cpus
            );
            if !node.mig.is_empty() {
                mig_gres_conf(&mut gres, node, &lab);
            } else if node.gpus > 0 {
                let (stem, first) = if node.render_nodes { ("renderD", 128) } else { ("nvidia", 0) };
                let _ = writeln!(
                    gres,
                    "NodeName={n} Name=gpu Type={t} File={lab}/dev/{n}/{stem}[{first}-{last}]",
                    n = node.name,
                    t = node.gpu_type,
                    last = first + node.gpus - 1
                );
                if node.shards > 0 {
                    let _ = writeln!(gres, "NodeName={} Name=shard Count={}", node.name, node.shards);
                }
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
        if opts.cgroups {
            // These machines mount cgroup v1 controllers (an empty v2 hierarchy beside them).
            fs::write(etc.join("cgroup.conf"), "CgroupPlugin=cgroup/v1\nConstrainDevices=yes\n")
                .expect("write cgroup.conf");
            set_mode(&etc.join("cgroup.conf"), 0o644);
        }
        for f in ["slurm.conf", "gres.conf", "plugstack.conf"] {
            set_mode(&etc.join(f), 0o644);
        }
    }

    /// Starts one of the lab release's daemons (in its root, if it has one).
    pub(super) fn spawn_daemon(&mut self, name: &str, program: PathBuf, args: &[String]) -> Child {
        self.spawn_daemon_with(name, program, args, &[])
    }

    /// [`SlurmLab::spawn_daemon`] with more environment.
    pub(super) fn spawn_daemon_with(
        &mut self,
        name: &str,
        program: PathBuf,
        args: &[String],
        env: &[(String, String)],
    ) -> Child {
        self.spawn(name, release().command(&program), &program, args, env)
    }

    /// Starts a daemon of this machine's own (MariaDB), whatever the lab's release.
    pub(super) fn spawn_machine_daemon(&mut self, name: &str, program: PathBuf, args: &[String]) -> Child {
        self.spawn(name, Command::new(&program), &program, args, &[])
    }

    fn spawn(
        &mut self,
        name: &str,
        mut command: Command,
        program: &Path,
        args: &[String],
        env: &[(String, String)],
    ) -> Child {
        let log = self.path.join("log");
        let out = fs::File::create(log.join(format!("{name}.stderr"))).expect("create daemon stderr log");
        let err = out.try_clone().expect("dup log fd");
        let child = command
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .envs(self.daemon_env.iter().map(|(k, v)| (k, v)))
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .unwrap_or_else(|e| self.fail(&format!("cannot start {}: {e}", program.display())));
        self.pids.push(child.id());
        child
    }

    pub(super) fn start_munged(&mut self) {
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

    /// Starts slurmctld: the primary in its namespaces when the lab has a backup ([`super::backup`]).
    pub(super) fn start_slurmctld(&mut self, backup: bool) {
        let child = if backup {
            self.spawn_controller(0)
        } else {
            let args =
                vec!["-D".to_string(), "-i".to_string(), "-f".to_string(), self.conf.display().to_string()];
            let env = self.slurm_env.clone();
            self.spawn_daemon_with("slurmctld", daemon_bin("slurmctld"), &args, &env)
        };
        self.slurmctld = Some(child);
        self.wait_ctld_up(START_TIMEOUT);
    }

    pub(super) fn start_slurmd(&mut self, i: usize) {
        self.start_slurmd_with(i, &[]);
    }

    /// Starts node `i`'s slurmd with `extra` arguments (`-b`: report a fresh boot).
    pub(super) fn start_slurmd_with(&mut self, i: usize, extra: &[&str]) {
        let name = self.nodes[i].name.clone();
        let spool = self.path.join(format!("spool/slurmd-{name}"));
        fs::create_dir_all(&spool).expect("create slurmd spool");
        if self.own_namespace(i) {
            let child = self.start_own_slurmd(i, extra);
            self.slurmds.push((name, child));
            return;
        }
        let args = vec![
            "-D".to_string(),
            "-f".to_string(),
            self.conf.display().to_string(),
            "-N".to_string(),
            name.clone(),
        ]
        .into_iter()
        .chain(extra.iter().map(|a| a.to_string()))
        .collect::<Vec<_>>();
        let env: Vec<(String, String)> = self.nodes[i].env.iter().chain(&self.slurm_env).cloned().collect();
        let child = self.spawn_daemon_with(&format!("slurmd-{name}"), daemon_bin("slurmd"), &args, &env);
        self.slurmds.push((name, child));
    }

    /// Panics with logs if a daemon this lab started has exited (absent or zombie in /proc).
    pub(super) fn check_alive(&self) {
        let mut names = vec![("munged".to_string(), self.munged.as_ref())];
        names.push(("slurmctld".to_string(), self.slurmctld.as_ref()));
        names.push(("backup slurmctld".to_string(), self.backup.as_ref()));
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

    pub(super) fn wait_ctld_up(&self, timeout: Duration) {
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
    pub(super) fn wait_nodes_ready(&self, timeout: Duration) {
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
    pub(super) fn cancel_all_jobs(&self) {
        let alive = [&self.slurmctld, &self.backup].into_iter().flatten().any(|c| {
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

    pub(super) fn shutdown(&mut self) {
        self.cancel_all_jobs();
        // slurmctld first (stopping slurmd first makes slurmctld hang ~5 s), then slurmd, then munged.
        let mut order: Vec<(String, Child)> = Vec::new();
        if let Some(c) = self.slurmctld.take() {
            order.push(("slurmctld".into(), c));
        }
        if let Some(c) = self.backup.take() {
            order.push(("backup slurmctld".into(), c));
        }
        for (n, c) in self.slurmds.drain(..) {
            order.push((format!("slurmd-{n}"), c));
        }
        for (_, mut c) in order {
            terminate(&mut c);
        }
        self.stop_accounting();
        if let Some(mut c) = self.munged.take() {
            terminate(&mut c);
        }
    }
}

/// SIGTERM, wait up to 5 s, then SIGKILL; always reaps the child.
pub(super) fn terminate(child: &mut Child) {
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

/// A MIG node's `Gres=` in slurm.conf: each whole GPU's type and each instance's, counted.
fn mig_gres(node: &LabNode) -> String {
    let mut counts: BTreeMap<String, u32> = BTreeMap::new();
    for gpu in 0..node.gpus {
        let instances: Vec<&LabMig> = node.mig.iter().filter(|m| m.gpu == gpu).collect();
        if instances.is_empty() {
            *counts.entry(node.gpu_type.clone()).or_default() += 1;
        }
        for m in instances {
            *counts.entry(format!("{}_{}", node.gpu_type, m.profile)).or_default() += 1;
        }
    }
    counts.iter().map(|(t, n)| format!("gpu:{t}:{n}")).collect::<Vec<_>>().join(",")
}

/// A MIG node's GPU GRES in gres.conf, in `AutoDetect=nvml`'s order: the GPUs by number, a GPU
/// with instances as one record per instance (its device file and its two capability devices).
fn mig_gres_conf(gres: &mut String, node: &LabNode, lab: &str) {
    let dev = format!("{lab}/dev/{}", node.name);
    for gpu in 0..node.gpus {
        let instances: Vec<&LabMig> = node.mig.iter().filter(|m| m.gpu == gpu).collect();
        if instances.is_empty() {
            let _ = writeln!(
                gres,
                "NodeName={} Name=gpu Type={} File={dev}/nvidia{gpu}",
                node.name, node.gpu_type
            );
        }
        for m in instances {
            let _ = writeln!(
                gres,
                "NodeName={} Name=gpu Type={}_{} MultipleFiles={dev}/nvidia{gpu},{dev}/nvidia-caps/nvidia-cap{},{dev}/nvidia-caps/nvidia-cap{}",
                node.name, node.gpu_type, m.profile, m.gi_cap_minor, m.ci_cap_minor
            );
        }
    }
}

/// Runs `scripts/install-slurm` once per process (or builds the release's root, see
/// [`release`]); panics with its output on failure.
pub fn ensure_slurm_installed() {
    if release().root.is_some() {
        return;
    }
    let res = INSTALL.get_or_init(|| {
        let script = crate::programs::workspace().join("scripts/install-slurm");
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

/// Slurm's own plugin directory (Debian multiarch path) as its daemons see it, or
/// `SLURM_LAB_PLUGIN_DIR`.
pub fn system_plugin_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("SLURM_LAB_PLUGIN_DIR") {
        return PathBuf::from(d);
    }
    let mut candidates: Vec<PathBuf> = Vec::new();
    if let Ok(rd) = fs::read_dir(release().host_path(Path::new("/usr/lib"))) {
        for e in rd.flatten() {
            candidates.push(Path::new("/usr/lib").join(e.file_name()).join("slurm-wlm"));
        }
    }
    candidates.extend(["/usr/lib/slurm-wlm", "/usr/lib64/slurm", "/usr/lib/slurm"].map(PathBuf::from));
    candidates
        .into_iter()
        .find(|d| release().host_path(d).join("select_cons_tres.so").exists())
        .unwrap_or_else(|| PathBuf::from("/usr/lib/x86_64-linux-gnu/slurm-wlm"))
}

pub(super) fn daemon_bin(name: &str) -> PathBuf {
    let sbin = Path::new("/usr/sbin").join(name);
    if release().host_path(&sbin).exists() { sbin } else { PathBuf::from(name) }
}

pub(super) fn tail(text: &str, lines: usize) -> String {
    let v: Vec<&str> = text.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

pub(super) fn set_mode(p: &Path, mode: u32) {
    fs::set_permissions(p, fs::Permissions::from_mode(mode))
        .unwrap_or_else(|e| panic!("chmod {mode:o} {}: {e}", p.display()));
}

/// Installs a plugin file into `dir` as `name` the safe way: write a new file, then rename it
/// over the old one (overwriting a `.so` a daemon has loaded can crash it).
pub fn install_plugin(from: &Path, dir: &Path, name: &str) {
    let tmp = dir.join(format!(".{name}.new"));
    fs::copy(from, &tmp).unwrap_or_else(|e| panic!("slurm_lab: cannot copy {}: {e}", from.display()));
    fs::rename(&tmp, dir.join(name)).expect("rename plugin into place");
}
