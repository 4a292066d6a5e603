//! wattson's test harness, shared by the integration tests, the benchmarks and the demo: a
//! private node ([`node`]: fake GPUs and the real `wattsond`), a private real Slurm cluster
//! ([`slurm_lab`]), and the programs under test built by Cargo ([`programs`]).

pub mod node;
pub mod programs;
pub mod slurm_lab;
pub mod stats;
