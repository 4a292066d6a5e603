//! What every wattson program starts with: the `--version` line (wattson's version, the commit
//! it was built from and the Slurm release its plugins are built for) and logging to journald
//! or stderr.

use std::sync::LazyLock;

use tracing_subscriber::EnvFilter;
use tracing_subscriber::prelude::*;

/// `--version`: wattson's own, the commit, and the Slurm release the plugins of the same build
/// are for (slurmctld loads a job_submit plugin of its own release series only).
pub fn version() -> &'static str {
    static VERSION: LazyLock<String> = LazyLock::new(|| {
        let slurm = match env!("WATTSON_SLURM_RELEASE") {
            "" => "built without Slurm's headers, so without Slurm plugins".to_string(),
            release => format!("Slurm plugins built for Slurm {release}"),
        };
        format!("{} (commit {}; {slurm})", env!("CARGO_PKG_VERSION"), env!("WATTSON_COMMIT"))
    });
    VERSION.as_str()
}

/// The name to sign messages with: the first word of the name this program was started under
/// (`wattson` when the `wattson` command runs it as `wattson sim`), else `default`.
pub fn invoked_as(default: &str) -> String {
    std::env::args_os()
        .next()
        .and_then(|arg0| {
            let name = std::path::Path::new(&arg0).file_name()?.to_string_lossy().into_owned();
            name.split_whitespace().next().map(str::to_string)
        })
        .unwrap_or_else(|| default.to_string())
}

/// Logs to journald when started by systemd, else to stderr (coloured only on a terminal);
/// `WATTSON_LOG` sets the level (default `info`).
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
