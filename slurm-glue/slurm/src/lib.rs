//! What the Slurm plugins in `slurm-glue/` share: Slurm's C bindings (`wattson-slurm-sys`) and the pure logic
//! behind each callback (reading hints, deciding at submit, talking to wattsond), so that the
//! glue itself stays a thin, panic-proof FFI layer.

pub mod energy;
pub mod gpu_freq;
pub mod hints;
pub mod node;
pub mod release;
pub mod shards;
pub mod sharing;
pub mod steps;
pub mod submit;

pub use wattson_slurm_sys::{
    BINDINGS_SOURCE, GRES_ONE_TASK_PER_SHARING, release_of, slurm_version, sys, version_string,
};
