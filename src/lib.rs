//! `wattson`, the command line a user types: `acct` (sacct-style reports), `report`, `status`,
//! `job begin|end` for Prolog/Epilog, `summary show`. The daemon, the controller and the
//! simulator are programs of their own crates under `crates/`; `wattson ctld|power|models|sim`
//! run them.

pub mod cli;
pub mod report;
