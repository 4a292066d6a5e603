//! `wattson-sim`: the trace-driven cluster simulator. See `wattson-sim --help`.

use clap::Parser;

fn main() -> std::process::ExitCode {
    match wattson_sim::cli::run(wattson_sim::cli::SimArgs::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wattson-sim: error: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
