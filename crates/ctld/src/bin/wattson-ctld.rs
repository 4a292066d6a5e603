//! `wattson-ctld`: the controller service and its admin commands. See `wattson-ctld --help`.

fn main() -> std::process::ExitCode {
    wattson_ctld::cli::main()
}
