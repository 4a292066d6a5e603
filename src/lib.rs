//! `wattson`, the command line: `acct` (sacct-style reports), `status`, `job begin|end` for
//! Prolog/Epilog, and `sim`. The daemon, the store, the engine and the rest live in their own
//! crates under `crates/`; this crate is what a person types.

pub mod cli;
pub mod report;
