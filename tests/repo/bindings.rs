//! The Slurm bindings' build refuses, naming what to install, when it cannot generate them
//! from a release's headers, and uses the committed ones only when they are asked for by name;
//! the programs build without Slurm's headers at all. Each case builds in a target directory
//! of its own (`<target>/bindings-check`), with `WATTSON_SLURM_INCLUDE` pointing at an empty
//! directory.

use std::process::{Command, Output};

/// `cargo build -p wattson-slurm-sys` with no headers in reach and `bindings` (if any) as
/// `WATTSON_SLURM_BINDINGS`.
fn build_without_headers(bindings: Option<&str>) -> Output {
    cargo_without_headers(&["build", "-p", "wattson-slurm-sys"], bindings)
}

/// `cargo ARGS` in `<target>/bindings-check` with no Slurm headers in reach.
fn cargo_without_headers(args: &[&str], bindings: Option<&str>) -> Output {
    let empty = tempfile::tempdir().unwrap();
    let target = wattson_harness::programs::profile_dir().parent().unwrap().join("bindings-check");
    let mut cargo = Command::new(std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into()));
    cargo
        .args(args)
        .arg("--target-dir")
        .arg(&target)
        .env("WATTSON_SLURM_INCLUDE", empty.path())
        .env_remove("WATTSON_SLURM_BINDINGS")
        .current_dir(wattson_harness::programs::workspace());
    if let Some(name) = bindings {
        cargo.env("WATTSON_SLURM_BINDINGS", name);
    }
    cargo.output().unwrap()
}

#[test]
fn without_headers_the_build_refuses_and_names_what_to_install() {
    let out = build_without_headers(None);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "built without Slurm's headers:\n{said}");
    for needed in [
        "no Slurm headers in",
        "apt-get install libslurm-dev libclang-dev",
        "WATTSON_SLURM_BINDINGS=committed-22.05.8",
    ] {
        assert!(said.contains(needed), "the refusal does not say {needed:?}:\n{said}");
    }
}

#[test]
fn the_committed_bindings_are_used_only_when_named() {
    let out = build_without_headers(Some("committed-22.05.8"));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the named committed bindings did not build:\n{said}");
    assert!(said.contains("using the committed bindings committed-22.05.8"), "{said}");

    let out = build_without_headers(Some("committed-24.11.5"));
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "bindings that are not committed were accepted:\n{said}");
    assert!(said.contains("names no committed bindings; known: committed-22.05.8"), "{said}");
}

#[test]
fn the_programs_build_without_slurms_headers() {
    let mut args = vec!["check", "--bins"];
    for package in super::layering::PROGRAMS {
        args.extend(["-p", package]);
    }
    let out = cargo_without_headers(&args, None);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the programs did not build without Slurm's headers:\n{said}");
    assert!(!said.contains("wattson-slurm-sys"), "a program's build reached the Slurm bindings:\n{said}");
}
