//! wattson: exact per-job GPU energy accounting and energy-aware scheduling for Slurm.
//!
//! Modules by responsibility: [`energy`] meters GPU energy (pure), [`job`] names jobs and
//! their records, [`store`] keeps them durably in SQLite, [`report`] formats them like
//! `sacct`.

pub mod energy;
pub mod job;
pub mod report;
pub mod store;
