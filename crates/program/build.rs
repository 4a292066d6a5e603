//! Stamps every program's `--version` with two facts known only at build time:
//! - the commit: `WATTSON_COMMIT` when the packager sets it, else `git rev-parse --short HEAD`
//!   in a checkout, else `unknown`;
//! - the Slurm release the plugins of the same build are for, read as text from
//!   `slurm_version.h` in `WATTSON_SLURM_INCLUDE` (default `/usr/include/slurm`), the headers
//!   the plugins' bindings are generated from. Without those headers the programs still build
//!   and say so; they need no Slurm bindings of their own.

use std::process::Command;

const HEADERS: &str = "/usr/include/slurm";

fn main() {
    println!("cargo:rerun-if-env-changed=WATTSON_COMMIT");
    println!("cargo:rerun-if-env-changed=WATTSON_SLURM_INCLUDE");
    println!("cargo:rustc-env=WATTSON_COMMIT={}", commit());
    let include = std::env::var("WATTSON_SLURM_INCLUDE").unwrap_or_else(|_| HEADERS.to_string());
    let header = format!("{include}/slurm_version.h");
    println!("cargo:rerun-if-changed={header}");
    let release =
        std::fs::read_to_string(&header).ok().and_then(|text| release_of(&text)).unwrap_or_default();
    println!("cargo:rustc-env=WATTSON_SLURM_RELEASE={release}");
}

fn commit() -> String {
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    // Rebuild when HEAD moves: the file naming the branch, and the branch's own ref.
    if let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{branch}");
        }
    }
    std::env::var("WATTSON_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string())
}

/// `SLURM_VERSION_NUMBER 0x160508` in the header's text, written as Slurm writes it: `22.05.8`.
fn release_of(header: &str) -> Option<String> {
    let number = header.lines().find_map(|line| {
        let mut words = line.split_whitespace();
        (words.next() == Some("#define") && words.next() == Some("SLURM_VERSION_NUMBER"))
            .then(|| words.next())
            .flatten()
    })?;
    let number = u32::from_str_radix(number.strip_prefix("0x")?, 16).ok()?;
    Some(format!("{}.{:02}.{}", number >> 16, (number >> 8) & 0xff, number & 0xff))
}
