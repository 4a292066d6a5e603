//! The words every part of wattson shares: jobs and their keys, energy hints, GPU meters and
//! readings, GPU settings, the tariff and report queries. Plain data and pure functions; no I/O.

#![forbid(unsafe_code)]

pub mod apportion;
pub mod energy;
pub mod gpu;
pub mod job;
pub mod model_owner;
pub mod prices;
pub mod query;
pub mod scope;
pub mod summary;

pub use gpu::now_ns;
