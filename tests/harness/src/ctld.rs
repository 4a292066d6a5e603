//! `wattson ctld` run for a lab's Slurm, and stopped when its handle drops (a failed test
//! leaves no controller running); Slurm's power machinery switched on for it, with a power
//! action the lab carries out ([`pump`]) in place of a node's BMC.

use std::path::Path;
use std::process::{Child, Command, Stdio};

use std::time::{Duration, Instant};

use crate::slurm_lab::{SlurmLab, parse_record};

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

/// slurm.conf lines that switch Slurm's power machinery on with its own timer off (as
/// docs/ctld.md gives them), made fast for a lab; `programs` holds `wattson-suspend`,
/// `wattson-resume`, `wattson-resume-fail` and `wattson-ctld-prolog`.
pub fn power_conf(programs: &Path) -> String {
    let program = |name: &str| programs.join(name).display().to_string();
    format!(
        "SuspendTime=INFINITE\n\
         SuspendProgram={}\n\
         ResumeProgram={}\n\
         ResumeFailProgram={}\n\
         PrologSlurmctld={}\n\
         SuspendTimeout=3\n\
         ResumeTimeout=20\n\
         SlurmctldParameters=power_save_interval=1\n\
         PartitionName=wattson Nodes=ALL Hidden=YES State=INACTIVE SuspendTime=31536000\n",
        program("wattson-suspend"),
        program("wattson-resume"),
        program("wattson-resume-fail"),
        program("wattson-ctld-prolog"),
    )
}

/// The `[power]` table of a wattson.toml whose actions leave a request file in `requests`
/// (`off-<node>`, `on-<node>`) for [`pump`] to carry out, logging to `log`.
pub fn power_table(requests: &Path, log: &Path) -> String {
    format!(
        "[power]\nsuspend = [\"/usr/bin/touch\", \"{p}/off-{{node}}\"]\n\
         resume = [\"/usr/bin/touch\", \"{p}/on-{{node}}\"]\ntimeout = \"10s\"\nlog = \"{log}\"\n",
        p = requests.display(),
        log = log.display(),
    )
}

/// Carries out the power actions Slurm's programs asked for in `requests` (a node's slurmd
/// stopped for "off", started as from a boot for "on"); returns them ("off-n2", ...).
pub fn pump(lab: &mut SlurmLab, requests: &Path) -> Vec<String> {
    pump_some(lab, requests, &mut |_| true)
}

/// Like [`pump`], but a power-on that `honor` refuses never happens (a node that does not
/// come up); returns the actions carried out.
pub fn pump_some(lab: &mut SlurmLab, requests: &Path, honor: &mut dyn FnMut(&str) -> bool) -> Vec<String> {
    let mut done = Vec::new();
    for entry in std::fs::read_dir(requests).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        std::fs::remove_file(entry.path()).unwrap();
        if !honor(&name) {
            continue;
        }
        match name.split_once('-') {
            Some(("off", node)) => lab.power_off(node),
            Some(("on", node)) => lab.power_on(node),
            _ => panic!("unexpected power request {name}"),
        };
        done.push(name);
    }
    done
}

/// A node's State as `scontrol show node` gives it (`IDLE+POWERED_DOWN`...).
pub fn state(lab: &SlurmLab, node: &str) -> String {
    let line = lab.run_ok("scontrol", &["-o", "show", "node", node]);
    parse_record(line.trim()).get("State").cloned().unwrap_or_default()
}

/// Submits a 1-GPU job that lets its GPU be shared (`--energy-share=yes`), of workload `tag`
/// with a `bound_pct`% slowdown bound, running `secs` s; it writes its shell's pid for
/// [`job_pid`].
pub fn submit_shared(lab: &SlurmLab, tag: &str, secs: u32, bound_pct: u32) -> Result<u32, String> {
    let (tag, bound) = (format!("--energy-tag={tag}"), format!("--energy-slowdown={bound_pct}"));
    let args = ["--gres=gpu:1", "--energy-share=yes", "--energy=min-energy", &bound, &tag];
    lab.sbatch(&args, &format!("#!/bin/sh\necho $$ > $SLURM_JOB_ID.pid\nsleep {secs}\n"))
}

/// The pid of the shell of job `id` ([`submit_shared`]), waiting 30 s at most for it.
pub fn job_pid(lab: &SlurmLab, id: u32) -> Option<u32> {
    let file = lab.dir().join(format!("jobs/{id}.pid"));
    let started = Instant::now();
    loop {
        if let Some(pid) = std::fs::read_to_string(&file).ok().and_then(|t| t.trim().parse().ok()) {
            return Some(pid);
        }
        if started.elapsed() > Duration::from_secs(30) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}
