//! Slurm bindings for the plugins in `slurm-glue/`.
//!
//! bindgen generates the bindings from the headers of the Slurm the plugins are for: the
//! installed ones (`/usr/include/slurm`, Debian's `libslurm-dev`), or another release's
//! (`WATTSON_SLURM_INCLUDE=<root>/usr/include/slurm`). A plugin built for one release does not
//! load into another, so the build refuses, naming what to install, when it cannot generate
//! them. The committed bindings are used only when asked for by name
//! (`WATTSON_SLURM_BINDINGS=committed-22.05.8`).

use std::path::{Path, PathBuf};

/// The committed bindings, by the name that asks for them, and their file.
const COMMITTED: &[(&str, &str)] = &[("committed-22.05.8", "bindings/slurm-22.05.8.rs")];
const HEADERS: &str = "/usr/include/slurm";

fn main() {
    for (_, file) in COMMITTED {
        println!("cargo:rerun-if-changed={file}");
    }
    println!("cargo:rerun-if-env-changed=WATTSON_SLURM_INCLUDE");
    println!("cargo:rerun-if-env-changed=WATTSON_SLURM_BINDINGS");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("slurm_sys.rs");
    let include = std::env::var("WATTSON_SLURM_INCLUDE").unwrap_or_else(|_| HEADERS.to_string());
    println!("cargo:rerun-if-changed={include}/slurm_version.h");
    let source = match std::env::var("WATTSON_SLURM_BINDINGS").ok().filter(|v| !v.is_empty()) {
        Some(name) => {
            let Some((name, file)) = COMMITTED.iter().find(|(n, _)| *n == name) else {
                let known: Vec<&str> = COMMITTED.iter().map(|(n, _)| *n).collect();
                panic!(
                    "\n\nWATTSON_SLURM_BINDINGS={name} names no committed bindings; known: {}\n\
                     (unset it to generate the bindings from Slurm's headers)\n\n",
                    known.join(", ")
                );
            };
            std::fs::copy(file, &out).expect("copy committed bindings");
            println!("cargo:warning=using the committed bindings {name}, as WATTSON_SLURM_BINDINGS asks");
            name.to_string()
        }
        None => match generate(Path::new(&include)) {
            Ok(text) => {
                std::fs::write(&out, text).expect("write bindings");
                "generated".to_string()
            }
            Err(why) => panic!(
                "\n\nwattson's Slurm plugins are built for one Slurm release, from its headers, \
                 and these cannot be generated: {why}.\n\
                 Install Slurm's headers and libclang (Debian: apt-get install libslurm-dev \
                 libclang-dev; ./scripts/install-deps does),\n\
                 or point WATTSON_SLURM_INCLUDE at another release's include/slurm directory \
                 (./scripts/slurm-root builds one),\n\
                 or ask for the committed bindings of Slurm 22.05.8 by name: \
                 WATTSON_SLURM_BINDINGS=committed-22.05.8.\n\n"
            ),
        },
    };
    println!("cargo:rustc-env=WATTSON_SLURM_BINDINGS_SOURCE={source}");
    println!("cargo:rustc-env=WATTSON_SLURM_HEADERS={include}");
}

/// Runs bindgen over the headers in `include` (a `.../include/slurm` directory).
fn generate(include: &Path) -> Result<String, String> {
    if !include.join("spank.h").is_file() {
        return Err(format!("no Slurm headers in {} (Debian: libslurm-dev)", include.display()));
    }
    // Only `slurm/` on the include path: the C library's headers stay those of the target
    // (a build for an older glibc gives bindgen that glibc's headers; see scripts/build-portable).
    let staged = PathBuf::from(std::env::var_os("OUT_DIR").expect("OUT_DIR")).join("include");
    std::fs::create_dir_all(&staged).map_err(|e| format!("{}: {e}", staged.display()))?;
    let link = staged.join("slurm");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(include, &link).map_err(|e| format!("{}: {e}", link.display()))?;
    let builder = bindgen::Builder::default()
        .header_contents("wattson_slurm.h", "#include <slurm/spank.h>\n#include <slurm/slurm.h>\n")
        .clang_arg(format!("-I{}", staged.display()))
        .allowlist_function("spank_.*")
        .allowlist_function("slurm_(info|error|verbose|debug)")
        .allowlist_type("spank_option")
        .allowlist_type("spank_item")
        .allowlist_type("spank_context")
        .allowlist_type("job_desc_msg_t")
        .allowlist_type("acct_gather_energy_t")
        .allowlist_type("acct_energy_type")
        .allowlist_var("SLURM_VERSION_NUMBER")
        .allowlist_var("SLURM_SUCCESS")
        .allowlist_var("SLURM_ERROR")
        .allowlist_var("ESPANK_.*")
        .allowlist_var("NO_VAL.*")
        .allowlist_var("INFINITE.*")
        .prepend_enum_name(false)
        .layout_tests(false)
        .generate_comments(false)
        .formatter(bindgen::Formatter::Prettyplease);
    // bindgen panics when libclang cannot be loaded.
    let generated = std::panic::catch_unwind(std::panic::AssertUnwindSafe(move || builder.generate()))
        .map_err(|_| "libclang is not installed (Debian: libclang-dev)".to_string())?
        .map_err(|e| format!("bindgen failed: {e}"))?;
    Ok(format!("// Generated by bindgen from Slurm's headers; see build.rs.\n{generated}"))
}
