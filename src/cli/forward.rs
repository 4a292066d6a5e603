//! The commands of other roles' programs, run from `wattson` so that one command reaches them
//! all: `wattson ctld|power|models|summary write` run `wattson-ctld` (package
//! wattson-controller), `wattson sim` runs `wattson-sim`. The program is looked for next to
//! this one, then on `PATH`; the `wattson` command itself links neither.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;

use clap::Args;

/// Everything after the subcommand, handed on as it is (`--help` included).
#[derive(Debug, Args)]
#[command(disable_help_flag = true, disable_version_flag = true)]
pub struct Passed {
    /// Arguments for the program that runs this command
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    args: Vec<OsString>,
}

/// A program of another role, and where it ships.
#[derive(Debug, Clone, Copy)]
pub struct Program {
    /// Its file name.
    pub name: &'static str,
    /// The Debian package that installs it.
    pub package: &'static str,
}

/// The controller's program.
pub const CTLD: Program = Program { name: "wattson-ctld", package: "wattson-controller" };
/// The simulator's program.
pub const SIM: Program = Program { name: "wattson-sim", package: "wattson-client" };

/// Replaces this process with `program`, given `config` (if any), then `lead` (the
/// subcommand words it takes for `wattson`'s `subcommand`), then `passed`. The program runs
/// under the name the user typed (`wattson sim` when `lead` is empty, else `wattson`, which
/// its own subcommand words follow), so its usage lines and errors read as this command's.
/// Returns only when it cannot be run.
pub fn exec(
    program: Program,
    config: Option<&Path>,
    lead: &[&str],
    passed: Passed,
    subcommand: &str,
) -> String {
    let Some(path) = locate(program.name) else {
        return format!("{} is not installed (package {})", program.name, program.package);
    };
    let mut command = Command::new(&path);
    command.arg0(if lead.is_empty() { format!("wattson {subcommand}") } else { "wattson".to_string() });
    if let Some(config) = config {
        command.arg("--config").arg(config);
    }
    let error = command.args(lead).args(passed.args).exec();
    format!("cannot run {}: {error}", path.display())
}

/// `name` next to the running program, else the first on `PATH`.
fn locate(name: &str) -> Option<PathBuf> {
    let beside = std::env::current_exe().ok().and_then(|exe| exe.parent().map(|dir| dir.join(name)));
    let on_path = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).map(|dir| dir.join(name)).collect::<Vec<_>>())
        .unwrap_or_default();
    beside.into_iter().chain(on_path).find(|p| p.is_file())
}
