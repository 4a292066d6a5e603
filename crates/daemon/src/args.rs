//! `wattsond`'s command line.

use std::path::PathBuf;

use clap::Parser;

/// The wattson node daemon: exact per-job GPU energy accounting into a local SQLite store.
///
/// Logs go to journald when started by systemd, else to stderr; set WATTSON_LOG (e.g. debug)
/// to change the level. Stops cleanly on SIGTERM or SIGINT; running jobs resume at next start.
#[derive(Debug, Parser)]
#[command(name = "wattsond", version = wattson_program::version())]
pub struct DaemonArgs {
    /// Configuration file [default: wattson.toml beside $SLURM_CONF's slurm.conf, else
    /// /etc/wattson/wattson.toml, else /etc/slurm/wattson.toml, else built-in defaults]
    #[arg(short = 'c', long, env = "WATTSON_CONFIG")]
    pub config: Option<PathBuf>,
    /// Check the configuration file and exit
    #[arg(long)]
    pub check_config: bool,
}
