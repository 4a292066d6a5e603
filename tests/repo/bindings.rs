//! The Slurm bindings' build refuses, naming what to install, when it cannot generate them
//! from a release's headers, and uses the committed ones only when they are asked for by name;
//! the programs build without Slurm's headers (and ROCm SMI's) at all. ROCm SMI's committed
//! bindings are what bindgen makes of the installed headers. Each case builds in a target directory
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
        .env("WATTSON_ROCM_SMI_INCLUDE", empty.path())
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

/// Without `rocm_smi.h` the AMD bindings come from the committed file (the daemon must build
/// on any machine), and that file is what bindgen makes of the installed headers
/// (`librocm-smi-dev`, installed by scripts/install-deps), so the two cannot drift apart.
#[test]
fn the_committed_rocm_smi_bindings_are_what_the_installed_headers_give() {
    let out = cargo_without_headers(&["check", "-p", "wattson-rocm-smi-sys"], None);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the ROCm SMI bindings did not build without headers:\n{said}");
    assert!(said.contains("using the committed ones (5.2.3)"), "{said}");

    assert_eq!(wattson_rocm_smi_sys::BINDINGS_SOURCE, "generated", "rocm_smi.h or libclang is missing here");
    let build = wattson_harness::programs::profile_dir().join("build");
    let generated = std::fs::read_dir(&build)
        .unwrap()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().starts_with("wattson-rocm-smi-sys-"))
        .map(|e| e.path().join("out/rocm_smi.rs"))
        .filter_map(|p| Some((std::fs::metadata(&p).ok()?.modified().ok()?, p)))
        .max()
        .map(|(_, p)| p)
        .expect("the generated bindings in the build directory");
    let committed =
        wattson_harness::programs::workspace().join("crates/rocm-smi-sys/bindings/rocm_smi-5.2.3.rs");
    assert!(
        std::fs::read_to_string(&generated).unwrap() == std::fs::read_to_string(&committed).unwrap(),
        "{} differs from {}: copy it over",
        generated.display(),
        committed.display()
    );
}
