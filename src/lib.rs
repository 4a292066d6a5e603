//! wattson: exact per-job GPU energy accounting and energy-aware scheduling for Slurm.
//!
//! Modules by responsibility: [`energy`] meters GPU energy (pure), [`job`] names jobs and
//! their records.

pub mod energy;
pub mod job;
