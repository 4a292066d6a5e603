//! `wattsond`: the wattson node daemon. See `wattsond --help`.

use std::process::ExitCode;

use clap::Parser;
use wattson_config::Config;
use wattson_daemon::args::DaemonArgs;

fn main() -> ExitCode {
    let args = DaemonArgs::parse();
    wattson_program::init_logging();
    let config = match Config::load_or_default(args.config.as_deref()) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("wattsond: {e}");
            return ExitCode::from(2);
        }
    };
    if args.check_config {
        // Every check the start makes of what the file names, creating and changing nothing.
        match wattson_daemon::check_config(&config) {
            Ok(measurable) => measurable.iter().for_each(|line| println!("{line}")),
            Err(e) => {
                eprintln!("wattsond: {e}");
                return ExitCode::from(2);
            }
        }
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
