//! `wattson-mail`: Slurm's `MailProg` that adds a job's energy summary to its end-of-job mail.

fn main() -> std::process::ExitCode {
    wattson::cli::mail::main()
}
