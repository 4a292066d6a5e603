//! `wattson`: the command line. See `wattson --help`.

fn main() -> std::process::ExitCode {
    wattson::cli::main()
}
