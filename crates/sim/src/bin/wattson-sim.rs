//! `wattson-sim`: the trace-driven cluster simulator. See `wattson-sim --help`.

use clap::Parser;

fn main() -> std::process::ExitCode {
    match wattson_sim::cli::run(wattson_sim::cli::SimArgs::parse()) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}: error: {e}", wattson_program::invoked_as("wattson-sim"));
            std::process::ExitCode::FAILURE
        }
    }
}
