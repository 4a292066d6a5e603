//! wattson's test harness, shared by the integration tests, the benchmarks and the demo: a
//! private node ([`node`]: fake GPUs and the real `wattsond`), a private real Slurm cluster
//! ([`slurm_lab`]), the programs under test built by Cargo ([`programs`]), `wattson ctld`
//! run for a lab ([`ctld`]), and the GPU vendors both can simulate ([`vendor`]).

pub mod cpu_node;
pub mod ctld;
pub mod fake_link;
pub mod node;
pub mod programs;
pub mod slurm_lab;
pub mod stats;
pub mod vendor;

/// The name libtest knows a test by inside a test binary that holds several modules:
/// `module_path` (the caller's `module_path!()`, `node::flood`) without the binary's own name,
/// then `test`: `flood::child_floods`. For tests that run a helper test of their own binary.
pub fn test_name(module_path: &str, test: &str) -> String {
    match module_path.split_once("::") {
        Some((_, module)) => format!("{module}::{test}"),
        None => test.to_string(),
    }
}
