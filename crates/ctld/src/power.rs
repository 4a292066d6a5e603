//! The programs Slurm runs to power nodes: `wattson-suspend`, `wattson-resume` and
//! `wattson-resume-fail` (`SuspendProgram`, `ResumeProgram`, `ResumeFailProgram`).
//!
//! Slurm runs them as SlurmUser with the hostlist as the only argument, `SLURM_CONF` (and, for
//! resume, `SLURM_RESUME_FILE`) as the only environment, standard streams closed and most
//! signals blocked. Each program first makes itself an ordinary process again (streams on
//! /dev/null, signals unblocked, a fixed PATH), then runs the `[power]` action of each node
//! from its argv template with a deadline, never through a shell, and logs every action. It
//! needs nothing from `wattson ctld`: a resume works with the controller down. A resume action
//! that fails marks its node down with a wattson reason at once, so Slurm requeues the node's
//! jobs instead of waiting out `ResumeTimeout`.

use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::process::{Command, ExitCode};

use wattson_config::Config;
use wattson_config::ctld::PowerConfig;

use crate::slurm;
use crate::slurm_program::{self, PATH};
use wattson_deadline as deadline;
use wattson_sacct::hostlist;

/// Actions run at once, at most.
const PARALLEL: usize = 32;

/// Which program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Program {
    /// `SuspendProgram`: power the nodes off.
    Suspend,
    /// `ResumeProgram`: power the nodes on.
    Resume,
    /// `ResumeFailProgram`: Slurm gave up on the nodes' resume.
    ResumeFail,
}

impl Program {
    fn name(self) -> &'static str {
        match self {
            Program::Suspend => "suspend",
            Program::Resume => "resume",
            Program::ResumeFail => "resume-fail",
        }
    }
}

/// Appends `line` to the `[power] log` file (created 0640, never through a symbolic link) and
/// writes it to standard error.
fn log(config: &PowerConfig, program: Program, line: &str) {
    let stamp = chrono::Local::now().format("%Y-%m-%dT%H:%M:%S");
    let line = format!("{stamp} wattson-{} [{}]: {line}\n", program.name(), std::process::id());
    let _ = std::io::stderr().write_all(line.as_bytes());
    if let Some(path) = &config.log {
        let file = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .mode(0o640)
            .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
            .open(path);
        if let Ok(mut file) = file {
            let _ = file.write_all(line.as_bytes());
        }
    }
}

/// `template` with `{node}` replaced by `node`.
fn argv(template: &[String], node: &str) -> Vec<String> {
    template.iter().map(|a| a.replace("{node}", node)).collect()
}

/// Runs `program` for `hostlist`; the exit status Slurm ignores, so failures are logged (and a
/// failed resume marks its node down).
pub fn main(program: Program, hostlist: Option<String>) -> ExitCode {
    slurm_program::reset_process();
    let path = slurm_program::config_path();
    let (config, config_error) = match Config::load(&path) {
        Ok(c) => (c.power, None),
        Err(e) => (PowerConfig::default(), Some(e.to_string())),
    };
    if let Some(e) = config_error {
        log(&config, program, &format!("cannot read {}: {e}; nothing run", path.display()));
        return ExitCode::FAILURE;
    }
    let Some(list) = hostlist else {
        log(&config, program, "no hostlist given (Slurm passes it as the only argument); nothing run");
        return ExitCode::FAILURE;
    };
    let nodes = match hostlist::expand(&list) {
        Ok(nodes) => nodes,
        Err(e) => {
            log(&config, program, &format!("refused hostlist {list:?}: {e}; nothing run"));
            return ExitCode::FAILURE;
        }
    };
    if let Some(file) = std::env::var_os("SLURM_RESUME_FILE") {
        // Gone once this program exits: keep what it said.
        let jobs = std::fs::read_to_string(&file).unwrap_or_default();
        log(&config, program, &format!("resume file: {}", jobs.trim()));
    }
    if program == Program::ResumeFail {
        log(&config, program, &format!("Slurm gave up resuming {}", hostlist::join(&nodes)));
        return ExitCode::SUCCESS;
    }
    let groups = match groups(&config) {
        Ok(groups) => groups,
        Err(e) => {
            log(&config, program, &format!("{e}; nothing run"));
            return ExitCode::FAILURE;
        }
    };
    let (dry, nodes): (Vec<String>, Vec<String>) =
        nodes.into_iter().partition(|node| template(&config, &groups, program, node).is_empty());
    if !dry.is_empty() {
        log(
            &config,
            program,
            &format!("dry run (no {} action set): {}", program.name(), hostlist::join(&dry)),
        );
    }
    let mut failed = Vec::new();
    let config = &config;
    for chunk in nodes.chunks(PARALLEL) {
        let results: Vec<(String, Result<(), String>)> = std::thread::scope(|s| {
            let handles: Vec<_> = chunk
                .iter()
                .map(|node| {
                    let template = template(config, &groups, program, node);
                    s.spawn(move || (node.clone(), act(config, template, node)))
                })
                .collect();
            handles.into_iter().filter_map(|h| h.join().ok()).collect()
        });
        for (node, result) in results {
            match result {
                Ok(()) => log(config, program, &format!("{node}: done")),
                Err(e) => {
                    log(config, program, &format!("{node}: failed: {e}"));
                    failed.push(node);
                }
            }
        }
    }
    if program == Program::Resume && !failed.is_empty() {
        // Slurm would wait out ResumeTimeout; down now, its jobs are requeued at once.
        let mut scontrol = Command::new("scontrol");
        scontrol.args([
            "update",
            &format!("nodename={}", hostlist::join(&failed)),
            "state=down",
            &format!("reason={}", slurm::RESUME_FAILED),
        ]);
        if let Err(e) = deadline::run(&mut scontrol, config.timeout) {
            log(config, program, &format!("cannot mark {} down: {e}", hostlist::join(&failed)));
        }
    }
    if failed.is_empty() { ExitCode::SUCCESS } else { ExitCode::FAILURE }
}

/// The nodes of each `[[power.group]]`, in order.
fn groups(config: &PowerConfig) -> Result<Vec<Vec<String>>, String> {
    config
        .group
        .iter()
        .map(|g| hostlist::expand(&g.nodes).map_err(|e| format!("[[power.group]] nodes {:?}: {e}", g.nodes)))
        .collect()
}

/// The action of `program` for `node`: that of the first group naming the node and setting
/// one, else `[power]`'s own (empty: a dry run).
fn template<'a>(
    config: &'a PowerConfig,
    groups: &[Vec<String>],
    program: Program,
    node: &str,
) -> &'a [String] {
    let pick = |suspend: &'a [String], resume: &'a [String]| match program {
        Program::Suspend => suspend,
        Program::Resume => resume,
        Program::ResumeFail => &[],
    };
    config
        .group
        .iter()
        .zip(groups)
        .filter(|(_, nodes)| nodes.iter().any(|n| n == node))
        .map(|(g, _)| pick(&g.suspend, &g.resume))
        .find(|t| !t.is_empty())
        .unwrap_or_else(|| pick(&config.suspend, &config.resume))
}

/// Runs the action of `template` for `node` with a deadline, in a clean environment.
fn act(config: &PowerConfig, template: &[String], node: &str) -> Result<(), String> {
    let argv = argv(template, node);
    let mut cmd = Command::new(&argv[0]);
    cmd.args(&argv[1..]).env_clear().env("PATH", PATH);
    if let Some(conf) = std::env::var_os("SLURM_CONF") {
        cmd.env("SLURM_CONF", conf);
    }
    deadline::run(&mut cmd, config.timeout).map(|_| ()).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_node_gets_its_groups_action_else_the_default() {
        let config = wattson_config::Config::parse(
            "[power]\nsuspend = [\"/bin/off\", \"{node}\"]\n\
             [[power.group]]\nnodes = \"gpu[01-02]\"\nsuspend = [\"/usr/bin/ipmitool\", \"-H\", \"{node}-bmc\"]\n\
             [[power.group]]\nnodes = \"gpu[02-03]\"\nresume = [\"/bin/wol\", \"{node}\"]\n",
            "w.toml",
        )
        .unwrap()
        .power;
        let groups = groups(&config).unwrap();
        assert_eq!(template(&config, &groups, Program::Suspend, "gpu02")[0], "/usr/bin/ipmitool");
        assert_eq!(template(&config, &groups, Program::Suspend, "cpu01")[0], "/bin/off");
        // The first group naming a node and setting the action decides; else [power]'s.
        assert_eq!(template(&config, &groups, Program::Resume, "gpu02")[0], "/bin/wol");
        assert_eq!(template(&config, &groups, Program::Suspend, "gpu03")[0], "/bin/off");
        assert!(template(&config, &groups, Program::Resume, "gpu01").is_empty(), "a dry run");
    }

    #[test]
    fn a_hostile_group_hostlist_is_refused() {
        let config = wattson_config::Config::parse("[[power.group]]\nnodes = \"n[1-100000000]\"\n", "w.toml")
            .unwrap()
            .power;
        assert!(groups(&config).unwrap_err().contains("[[power.group]]"));
    }

    #[test]
    fn the_node_placeholder_is_replaced_in_place() {
        let t: Vec<String> =
            ["/usr/bin/ipmitool", "-H", "{node}-bmc", "power", "on"].map(String::from).to_vec();
        assert_eq!(argv(&t, "gpu01"), ["/usr/bin/ipmitool", "-H", "gpu01-bmc", "power", "on"]);
    }
}
