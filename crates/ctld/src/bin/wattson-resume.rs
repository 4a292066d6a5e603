//! `wattson-resume HOSTLIST`: Slurm's ResumeProgram (see `wattson_ctld::power`).

fn main() -> std::process::ExitCode {
    wattson_ctld::power::main(wattson_ctld::power::Program::Resume, std::env::args().nth(1))
}
