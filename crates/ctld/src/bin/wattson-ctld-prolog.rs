//! `wattson-ctld-prolog`: Slurm's PrologSlurmctld (see `wattson_ctld::prolog`).

fn main() -> std::process::ExitCode {
    wattson_ctld::prolog::main()
}
