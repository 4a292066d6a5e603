//! A lab's Slurm clients (`sbatch`, `scontrol`, `sinfo`...) run against it, each bounded in
//! time, and the jobs they submit followed to their end.

use std::fs;
use std::process::{Command, Output};
use std::sync::atomic::Ordering;
use std::thread;
use std::time::{Duration, Instant};

use super::daemons::set_mode;
use super::{CLIENT_TIMEOUT, JobInfo, SlurmLab, parse_record, release, run_with_timeout};

impl SlurmLab {
    /// A `Command` for a Slurm client (`sbatch`, `scontrol`, `srun`...) with `SLURM_CONF` set and inherited
    /// `SLURM_*`/`SBATCH_*`/`SRUN_*`/`SALLOC_*` variables removed. Bound its run time yourself.
    pub fn command(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        self.client(release().command(program))
    }

    /// [`SlurmLab::command`] run as user `uid` and group `gid`.
    pub fn command_as(&self, program: impl AsRef<std::ffi::OsStr>, uid: u32, gid: u32) -> Command {
        self.client(release().command_as(program, uid, gid))
    }

    fn client(&self, mut cmd: Command) -> Command {
        for (k, _) in std::env::vars_os() {
            let k = k.to_string_lossy().into_owned();
            if ["SLURM_", "SBATCH_", "SRUN_", "SALLOC_", "SQUEUE_", "SINFO_"].iter().any(|p| k.starts_with(p))
            {
                cmd.env_remove(k);
            }
        }
        cmd.env("SLURM_CONF", &self.conf);
        cmd.envs(self.slurm_env.iter().map(|(k, v)| (k, v)));
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
    /// `sbatch --parsable <args> <script>` from jobs/ (default output: `jobs/slurm-<id>.out`).
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

    /// Polls `job_info` every 100 ms until the job runs; panics with logs after `timeout`.
    pub fn wait_running(&self, job_id: u32, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while self.job_info(job_id).is_none_or(|j| j.state != "RUNNING") {
            assert!(Instant::now() < deadline, "slurm_lab: job {job_id} never ran\n{}", self.all_logs());
            thread::sleep(Duration::from_millis(100));
        }
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
}
