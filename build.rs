//! Stamps `wattson --version` with the commit it was built from: `WATTSON_COMMIT` when the
//! packager sets it, else `git rev-parse --short HEAD` in a checkout, else `unknown`.

use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=WATTSON_COMMIT");
    let git = |args: &[&str]| {
        Command::new("git")
            .args(args)
            .output()
            .ok()
            .filter(|out| out.status.success())
            .map(|out| String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    // Rebuild when HEAD moves: the file naming the branch, and the branch's own ref.
    if let Some(dir) = git(&["rev-parse", "--git-dir"]) {
        println!("cargo:rerun-if-changed={dir}/HEAD");
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            println!("cargo:rerun-if-changed={dir}/{branch}");
        }
    }
    let commit = std::env::var("WATTSON_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "--short=12", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=WATTSON_COMMIT={commit}");
}
