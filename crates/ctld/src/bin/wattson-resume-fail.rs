//! `wattson-resume-fail HOSTLIST`: Slurm's ResumeFailProgram (see `wattson_ctld::power`).

fn main() -> std::process::ExitCode {
    wattson_ctld::power::main(wattson_ctld::power::Program::ResumeFail, std::env::args().nth(1))
}
