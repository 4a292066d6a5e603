//! The engine's GPU DVFS models: pure, deterministic, allocation-light code shared by
//! slurmctld's job_submit plugin, the daemon and the simulator.
//!
//! [`cluster`] is the cluster brain: one pure policy function from a cluster snapshot to
//! actions (node power, placement, DVFS levels, releases), shared by simulator and controller.
//! [`model`] holds the model family (for the SM clock or the power limit), [`mod@fit`] fits it
//! from a few (setting, time, power) samples, [`mod@choose`] picks a setting under a
//! [`choose::Objective`], [`priors`] holds per-GPU priors, [`probe`] decides what to measure
//! next for a job whose workload is not known yet, and [`table`] is the tag → model table read
//! by job_submit.
//! Nothing here does I/O, reads a clock, spawns threads or panics on bad input.

pub mod choose;
pub mod cluster;
pub mod colocation;
pub mod decision;
pub mod fit;
pub mod measurements;
pub mod model;
pub mod priors;
pub mod probe;
pub mod table;

pub use choose::{Choice, ChooserConfig, Objective, choose};
pub use fit::{FitError, Sample, fit};
pub use measurements::{Measurements, newest};
pub use model::{DvfsModel, Knob, Prediction};
pub use priors::{GpuPrior, idle_w_of, prior};
pub use probe::{ProbeConfig, Step, Window, first_probes, next_step};
pub use table::{ModelEntry, ModelTable};
