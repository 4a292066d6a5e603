//! One node's daemon on simulated GPUs (NVIDIA's and AMD's): accounting, the GPU backend chosen, DVFS (on the built-in law and on measured curves), faults, hostile users, plots, robustness, the service's socket and metrics, GPU settings, the power budget's levels and paces, and bounded fuzzing of every parser.
//! One test binary (Cargo.toml: `autotests = false`); each module was a binary of its own.

/// Runs each named function of the module, which takes a [`Vendor`], as two tests,
/// `<name>::nvidia` (the fake NVML) and `<name>::amd` (the fake ROCm SMI): one body for both
/// vendors' GPUs.
///
/// [`Vendor`]: wattson_harness::vendor::Vendor
macro_rules! per_vendor {
    ($($name:ident),+ $(,)?) => {$(
        mod $name {
            #[test]
            fn nvidia() {
                super::$name(wattson_harness::vendor::Vendor::Nvidia)
            }
            #[test]
            fn amd() {
                super::$name(wattson_harness::vendor::Vendor::Amd)
            }
        }
    )+};
}

mod accounting;
mod backends;
mod config_lookup;
mod cpu_only;
mod dashboard;
mod dvfs;
mod energy_scope;
mod faults;
mod flood;
mod fuzz;
mod hostile;
mod job_summary;
mod levels;
mod measured_curves;
mod mig;
mod physical;
mod plot;
mod robustness;
mod service;
mod settings;
mod sharing;
