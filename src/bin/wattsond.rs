//! `wattsond`: the wattson node daemon. See `wattsond --help`.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::Parser;
use wattson_config::Config;

/// The wattson node daemon: exact per-job GPU energy accounting into a local SQLite store.
///
/// Logs go to journald when started by systemd, else to stderr; set WATTSON_LOG (e.g. debug)
/// to change the level. Stops cleanly on SIGTERM or SIGINT; running jobs resume at next start.
#[derive(Debug, Parser)]
#[command(name = "wattsond", version)]
struct Args {
    /// Configuration file [default: /etc/wattson/wattson.toml if it exists, else built-in defaults]
    #[arg(short = 'c', long, env = "WATTSON_CONFIG")]
    config: Option<PathBuf>,
    /// Check the configuration file and exit
    #[arg(long)]
    check_config: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    wattson::init_logging();
    let config = match Config::load_or_default(args.config.as_deref()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("wattsond: {e}");
            return ExitCode::from(2);
        }
    };
    if args.check_config {
        println!("configuration OK");
        return ExitCode::SUCCESS;
    }
    match wattson_daemon::run_blocking(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{e}");
            eprintln!("wattsond: {e}");
            ExitCode::FAILURE
        }
    }
}
