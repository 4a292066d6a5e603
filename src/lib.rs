//! wattson: exact per-job GPU energy accounting and energy-aware scheduling for Slurm.
//!
//! Modules by responsibility: [`energy`] meters GPU energy (pure), [`engine`] holds the DVFS
//! models and the setting chooser (pure), [`job`] names jobs and their records, [`gpu`] is
//! the only code that talks to GPUs, [`store`] is the SQLite file,
//! [`report`] formats `sacct`-style reports, [`protocol`] is the daemon's socket protocol,
//! [`daemon`] is `wattsond`, [`cli`] is `wattson`, [`config`] is `wattson.toml`.

pub mod cli;
pub mod config;
pub mod daemon;
pub mod energy;
pub mod engine;
pub mod gpu;
pub mod job;
pub mod policy;
pub mod prices;
pub mod protocol;
pub mod report;
pub mod sim;
pub mod slurm;
pub mod store;
