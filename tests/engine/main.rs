//! The engine's DVFS models on measured and synthetic curves, and the cluster simulator.
//! One test binary (Cargo.toml: `autotests = false`); each module was a binary of its own.

mod agree;
mod clocks;
mod colocation;
mod sim;
mod zeus;
