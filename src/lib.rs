//! `wattson`, the command line: `acct` (sacct-style reports), `status`, `job begin|end` for
//! Prolog/Epilog, `sim`, and `ctld` (the controller service). The daemon, the store, the engine and the rest live in their own
//! crates under `crates/`; this crate is what a person types.

pub mod cli;
pub mod report;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::prelude::*;

/// Logs to journald when started by systemd, else to stderr (coloured only on a terminal); `WATTSON_LOG` sets the level
/// (default `info`).
pub fn init_logging() {
    let filter = EnvFilter::try_from_env("WATTSON_LOG").unwrap_or_else(|_| EnvFilter::new("info"));
    let journald = std::env::var_os("JOURNAL_STREAM").and_then(|_| tracing_journald::layer().ok());
    let registry = tracing_subscriber::registry().with(filter);
    match journald {
        Some(layer) => registry.with(layer).init(),
        None => {
            // Colours only for a person at a terminal, never in a log file.
            let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
            registry
                .with(tracing_subscriber::fmt::layer().with_ansi(ansi).with_writer(std::io::stderr))
                .init()
        }
    }
}
