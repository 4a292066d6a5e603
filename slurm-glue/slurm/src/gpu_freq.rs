//! Slurm's own `--gpu-freq`: a job that sets its GPU clocks through Slurm runs at them, and
//! wattson stands aside. The nodes' prolog does not see the option (neither `SLURM_GPU_FREQ`
//! nor `TresFreq` is in its environment), so job_submit copies the GPU part of the job's
//! `tres_freq` into the job's SPANK environment, which the prolog does see.

/// The SPANK environment variable carrying the job's `--gpu-freq` to its nodes (empty: none).
pub const GPU_FREQ_VAR: &str = "SPANK_WATTSON_GPU_FREQ";

/// The GPU part of a job's `tres_freq` as Slurm keeps it (`gpu:high`,
/// `gpu:1500,memory=1000`, several TRES separated by `;`); `None` when it sets no GPU clock.
pub fn from_tres_freq(tres_freq: &str) -> Option<String> {
    tres_freq
        .split(';')
        .find_map(|part| part.trim().strip_prefix("gpu:"))
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

/// The job's `--gpu-freq` from the prolog's environment value of [`GPU_FREQ_VAR`].
pub fn from_prolog_env(value: Option<&str>) -> Option<String> {
    value.map(str::trim).filter(|v| !v.is_empty()).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_gpu_part_of_tres_freq() {
        assert_eq!(from_tres_freq("gpu:high").as_deref(), Some("high"));
        assert_eq!(from_tres_freq("gpu:1500,memory=1000").as_deref(), Some("1500,memory=1000"));
        assert_eq!(from_tres_freq("cpu:low;gpu:medium").as_deref(), Some("medium"));
        assert_eq!(from_tres_freq(""), None);
        assert_eq!(from_tres_freq("gpu:"), None);
        assert_eq!(from_prolog_env(Some("")), None);
        assert_eq!(from_prolog_env(Some("low")).as_deref(), Some("low"));
    }
}
