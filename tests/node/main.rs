//! One node's daemon on simulated GPUs: accounting, DVFS (on the built-in law and on measured curves), faults, hostile users, plots, robustness, the service's socket and metrics, GPU settings, the power budget's levels and paces, and bounded fuzzing of every parser.
//! One test binary (Cargo.toml: `autotests = false`); each module was a binary of its own.

mod accounting;
mod config_lookup;
mod cpu_only;
mod dashboard;
mod dvfs;
mod energy_scope;
mod faults;
mod flood;
mod fuzz;
mod hostile;
mod job_summary;
mod levels;
mod measured_curves;
mod mig;
mod physical;
mod plot;
mod robustness;
mod service;
mod settings;
mod sharing;
