//! The GPU vendors a test node or lab can simulate: NVIDIA through the fake NVML, AMD through
//! the fake ROCm SMI. Both fake libraries read the same kind of driver directory
//! (`fake_nvml::Sim`), so a test drives loads and reads the truth the same way for either;
//! what differs is the library, its `[gpu]` lines, the variable naming the directory, the GPU
//! model, and how the daemon names a simulated GPU.

use std::path::PathBuf;

/// A GPU vendor with a fake library built from this repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Vendor {
    /// NVIDIA H100s through the fake NVML (`tests/fake-nvml`).
    Nvidia,
    /// AMD Instinct MI300Xs through the fake ROCm SMI (`tests/fake-amdsmi`).
    Amd,
}

impl Vendor {
    /// The fake driver's GPU model for this vendor's nodes.
    pub fn model(self) -> &'static str {
        match self {
            Vendor::Nvidia => "H100",
            Vendor::Amd => "MI300X",
        }
    }

    /// `n` simulated GPUs of [`Vendor::model`].
    pub fn gpus(self, n: usize) -> fake_nvml::Config {
        fake_nvml::Config::uniform(self.model(), n)
    }

    /// The model's highest (and default) power limit, mW, from its published board power.
    pub fn max_power_mw(self) -> u32 {
        match self {
            Vendor::Nvidia => 700_000,
            Vendor::Amd => 750_000,
        }
    }

    /// Slurm's GRES type for the model (`Gres=gpu:<type>:N`).
    pub fn gres_type(self) -> &'static str {
        match self {
            Vendor::Nvidia => "h100",
            Vendor::Amd => "mi300x",
        }
    }

    /// The fake library built next to the test binaries.
    pub fn library(self) -> PathBuf {
        let daemon = crate::programs::profile_dir().join("wattsond");
        match self {
            Vendor::Nvidia => fake_nvml::library_path_next_to(&daemon),
            Vendor::Amd => fake_amdsmi::library_path_next_to(&daemon),
        }
        .expect("the fake GPU libraries are built with the tests (dev-dependencies)")
    }

    /// The lines of `[gpu]` that load the fake library.
    pub fn gpu_lines(self) -> String {
        match self {
            Vendor::Nvidia => format!("nvml_library = {:?}\n", self.library()),
            Vendor::Amd => format!("backend = \"amd\"\namd_library = {:?}\n", self.library()),
        }
    }

    /// The environment variable that tells the fake library its driver directory.
    pub fn dir_env(self) -> &'static str {
        match self {
            Vendor::Nvidia => fake_nvml::DIR_ENV,
            Vendor::Amd => fake_amdsmi::DIR_ENV,
        }
    }

    /// The UUID wattsond gives the GPU the fake driver describes with `uuid`.
    pub fn uuid(self, uuid: &str) -> String {
        match self {
            Vendor::Nvidia => uuid.to_string(),
            Vendor::Amd => fake_amdsmi::wattson_uuid(uuid),
        }
    }
}
