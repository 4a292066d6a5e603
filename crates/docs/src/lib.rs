//! Man pages and shell completions, generated from each program's command-line definitions so
//! that they say what `--help` says: `cargo run -p wattson-docs -- <dir>` writes `man1/`,
//! `man8/` and `completions/` there. `wattson ctld|power|models|sim|summary write` run other
//! programs, so their pages are those programs' own definitions under `wattson`'s names. The
//! page for the Slurm plugins (`wattson-slurm(8)`) is written by hand in `docs/man/`, since
//! Slurm, not clap, parses those options; `wattson.toml(5)` is written from the configuration's
//! definitions.

use std::io;
use std::path::{Path, PathBuf};

use clap::{Command, CommandFactory};
use clap_complete::Shell;

use wattson::cli::Cli;
use wattson_ctld::cli::Cli as CtldCli;
use wattson_daemon::args::DaemonArgs;
use wattson_sim::cli::SimArgs;

mod toml_page;

/// The hand-written page for the SPANK options and the job_submit plugin.
const SLURM_PAGE: &str = include_str!("../../../docs/man/wattson-slurm.8");

/// Writes every man page and completion script under `dir`; returns the files written.
pub fn write_all(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    let mut write = |sub: &str, name: String, bytes: &[u8]| -> io::Result<()> {
        let path = dir.join(sub).join(name);
        std::fs::create_dir_all(path.parent().expect("a file under dir"))?;
        std::fs::write(&path, bytes)?;
        written.push(path);
        Ok(())
    };
    let wattson = user_command();
    let wattsond = DaemonArgs::command();
    for (page, section) in
        pages(&wattson, "wattson", "1").into_iter().chain(pages(&wattsond, "wattsond", "8"))
    {
        let mut text = Vec::new();
        clap_mangen::Man::new(page.clone()).section(section).render(&mut text)?;
        write(&format!("man{section}"), format!("{}.{section}", page.get_name()), &text)?;
    }
    write("man8", "wattson-slurm.8".into(), SLURM_PAGE.as_bytes())?;
    write("man5", "wattson.toml.5".into(), toml_page::render().as_bytes())?;
    for (mut command, name) in [(wattson, "wattson"), (wattsond, "wattsond")] {
        for (shell, file) in [
            (Shell::Bash, format!("{name}.bash")),
            (Shell::Zsh, format!("_{name}")),
            (Shell::Fish, format!("{name}.fish")),
        ] {
            let mut text = Vec::new();
            clap_complete::generate(shell, &mut command, name, &mut text);
            write("completions", file, &text)?;
        }
    }
    Ok(written)
}

/// `wattson`'s command tree with the subcommands it hands to other programs replaced by those
/// programs' own definitions.
pub fn user_command() -> Command {
    let ctld = CtldCli::command();
    let sub = |name: &str| ctld.find_subcommand(name).expect("wattson-ctld has the subcommand").clone();
    let write = sub("summary").find_subcommand("write").expect("summary write").clone();
    Cli::command()
        .mut_subcommand("ctld", |_| ctld.clone().name("ctld").version(None::<&str>))
        .mut_subcommand("power", |_| sub("power"))
        .mut_subcommand("models", |_| sub("models"))
        .mut_subcommand("summary", |summary| summary.mut_subcommand("write", |_| write))
        .mut_subcommand("sim", |_| SimArgs::command().name("sim").version(None::<&str>))
}

/// `command` and each of its subcommands, named as man pages are (`wattson-acct`), in `section`.
fn pages(command: &Command, name: &str, section: &'static str) -> Vec<(Command, &'static str)> {
    let mut out = vec![(command.clone().name(name.to_string()), section)];
    for sub in command.get_subcommands().filter(|s| !s.is_hide_set()) {
        let sub_name = format!("{name}-{}", sub.get_name());
        out.extend(pages(sub, &sub_name, section));
    }
    out
}
