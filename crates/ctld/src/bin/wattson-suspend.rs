//! `wattson-suspend HOSTLIST`: Slurm's SuspendProgram (see `wattson_ctld::power`).

fn main() -> std::process::ExitCode {
    wattson_ctld::power::main(wattson_ctld::power::Program::Suspend, std::env::args().nth(1))
}
