//! Per-GPU-type priors: power-limit range, idle draw, maximum SM clock.
//!
//! `public_spec` marks values taken from vendor data sheets or public `nvidia-smi -q` dumps;
//! the rest (mostly idle draw of workstation-class boards) are estimates to be replaced by
//! the daemon's own measurements.

/// What the engine assumes about a GPU type before any workload has been measured on it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuPrior {
    /// Canonical name, as used in the model table (e.g. `"A100"`, `"H100-PCIE"`).
    pub name: &'static str,
    /// The words a name as NVML reports it must contain (any case, any order), e.g.
    /// `["H100", "PCIE"]` for `NVIDIA H100 PCIe`; the prior needing the most of them wins.
    pub words: &'static [&'static str],
    /// Lowest settable power limit (W).
    pub min_power_limit_w: f64,
    /// Highest (default) power limit (W).
    pub max_power_limit_w: f64,
    /// Idle draw (W).
    pub idle_w: f64,
    /// Maximum SM clock (MHz).
    pub max_sm_mhz: f64,
    /// Whether the power range and clock are public vendor specifications.
    pub public_spec: bool,
    /// Whether the idle draw is from public `nvidia-smi` dumps rather than an estimate.
    pub idle_public: bool,
}

/// Idle draw assumed for a GPU type without a prior (W).
pub const UNKNOWN_IDLE_W: f64 = 50.0;

/// Idle draw of GPU type `gpu_type` (W): its prior's, else [`UNKNOWN_IDLE_W`]. The simulator
/// and the controller both default to it.
pub fn idle_w_of(gpu_type: &str) -> f64 {
    prior(gpu_type).map_or(UNKNOWN_IDLE_W, |p| p.idle_w)
}

/// Step between candidate power limits (W), as in the Zeus measurements.
pub const POWER_LIMIT_STEP_W: f64 = 25.0;

const PRIORS: &[GpuPrior] = &[
    GpuPrior {
        name: "A100",
        words: &["A100"],
        min_power_limit_w: 100.0,
        max_power_limit_w: 400.0,
        idle_w: 55.0,
        max_sm_mhz: 1410.0,
        public_spec: true,
        idle_public: true,
    },
    GpuPrior {
        name: "H100",
        words: &["H100"],
        min_power_limit_w: 200.0,
        max_power_limit_w: 700.0,
        idle_w: 72.0,
        max_sm_mhz: 1980.0,
        public_spec: true,
        idle_public: true,
    },
    GpuPrior {
        name: "H200",
        words: &["H200"],
        min_power_limit_w: 200.0,
        max_power_limit_w: 700.0,
        idle_w: 75.0,
        max_sm_mhz: 1980.0,
        public_spec: true,
        idle_public: false,
    },
    GpuPrior {
        name: "V100",
        words: &["V100"],
        min_power_limit_w: 150.0,
        max_power_limit_w: 300.0,
        idle_w: 57.0,
        max_sm_mhz: 1530.0,
        public_spec: true,
        idle_public: true,
    },
    GpuPrior {
        name: "A40",
        words: &["A40"],
        min_power_limit_w: 100.0,
        max_power_limit_w: 300.0,
        idle_w: 30.0,
        max_sm_mhz: 1740.0,
        public_spec: true,
        idle_public: false,
    },
    GpuPrior {
        name: "L40S",
        words: &["L40S"],
        min_power_limit_w: 100.0,
        max_power_limit_w: 350.0,
        idle_w: 35.0,
        max_sm_mhz: 2520.0,
        public_spec: true,
        idle_public: false,
    },
    GpuPrior {
        name: "P100",
        words: &["P100"],
        min_power_limit_w: 125.0,
        max_power_limit_w: 250.0,
        idle_w: 30.0,
        max_sm_mhz: 1480.0,
        public_spec: true,
        idle_public: false,
    },
    GpuPrior {
        name: "RTX6000",
        words: &["RTX", "6000"],
        min_power_limit_w: 100.0,
        max_power_limit_w: 260.0,
        idle_w: 20.0,
        max_sm_mhz: 1770.0,
        public_spec: true,
        idle_public: false,
    },
    // PCIe and other board variants: their power range differs from the SXM board's.
    GpuPrior {
        name: "V100-PCIE",
        words: &["V100", "PCIE"],
        min_power_limit_w: 100.0,
        max_power_limit_w: 250.0,
        idle_w: 25.0,
        max_sm_mhz: 1380.0,
        public_spec: true,
        idle_public: false,
    },
    GpuPrior {
        name: "A100-PCIE",
        words: &["A100", "PCIE"],
        min_power_limit_w: 150.0,
        max_power_limit_w: 250.0,
        idle_w: 35.0,
        max_sm_mhz: 1410.0,
        public_spec: true,
        idle_public: false,
    },
    GpuPrior {
        name: "A100-PCIE-80GB",
        words: &["A100", "PCIE", "80GB"],
        min_power_limit_w: 150.0,
        max_power_limit_w: 300.0,
        idle_w: 40.0,
        max_sm_mhz: 1410.0,
        public_spec: true,
        idle_public: false,
    },
    GpuPrior {
        name: "H100-PCIE",
        words: &["H100", "PCIE"],
        min_power_limit_w: 200.0,
        max_power_limit_w: 350.0,
        idle_w: 50.0,
        max_sm_mhz: 1755.0,
        public_spec: true,
        idle_public: false,
    },
    GpuPrior {
        name: "H100-NVL",
        words: &["H100", "NVL"],
        min_power_limit_w: 200.0,
        max_power_limit_w: 400.0,
        idle_w: 60.0,
        max_sm_mhz: 1785.0,
        public_spec: true,
        idle_public: false,
    },
];

/// The largest power limit of any GPU type the priors know (W): a safe upper bound of what a
/// GPU of an unknown type draws.
pub fn largest_power_limit_w() -> f64 {
    PRIORS.iter().map(|p| p.max_power_limit_w).fold(0.0, f64::max)
}

/// The prior for a GPU type: its canonical name (`"h100-pcie"`, `"RTX 6000"`: any case, spaces,
/// `-` or `_`), or the name NVML reports (`Tesla V100-SXM2-32GB`, `NVIDIA A100-SXM4-80GB`,
/// `NVIDIA H100 PCIe`, `Quadro RTX 6000`): the prior whose words the name contains, the most
/// specific first, so PCIe and NVL boards get their own power range. No allocation.
pub fn prior(gpu_type: &str) -> Option<&'static GpuPrior> {
    let squeezed = |s: &'static str| s.bytes().filter(|b| !matches!(b, b' ' | b'-' | b'_'));
    let key =
        gpu_type.trim().bytes().filter(|b| !matches!(b, b' ' | b'-' | b'_')).map(|b| b.to_ascii_uppercase());
    if let Some(p) = PRIORS.iter().find(|p| key.clone().eq(squeezed(p.name))) {
        return Some(p);
    }
    let words = || gpu_type.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty());
    let has = |word: &str| words().any(|w| w.eq_ignore_ascii_case(word));
    PRIORS.iter().filter(|p| p.words.iter().all(|w| has(w))).max_by_key(|p| p.words.len())
}

/// Candidate power limits from `min_w` to `max_w` in `step_w` steps, always ending at
/// `max_w`; empty when the range or the step is empty or not finite.
pub fn power_limit_grid(min_w: f64, max_w: f64, step_w: f64) -> Vec<f64> {
    let mut v = Vec::new();
    let valid = [min_w, max_w, step_w].iter().all(|x| x.is_finite() && *x > 0.0) && min_w <= max_w;
    if !valid {
        return v;
    }
    let mut k = 0.0;
    while min_w + k * step_w < max_w - 1e-9 {
        v.push(min_w + k * step_w);
        k += 1.0;
    }
    v.push(max_w);
    v
}

/// Candidate SM clocks (MHz), ascending: the GPU's `supported` clocks from `floor` × the
/// highest up, at least `step_mhz` apart counting down from the highest (always kept). Below
/// about half its top clock a GPU's static draw outweighs what a lower clock saves, so the
/// knob's useful range ends there; empty when nothing valid is supported.
pub fn sm_clock_grid(supported: &[u32], floor: f64, step_mhz: f64) -> Vec<f64> {
    let Some(&top) = supported.iter().filter(|&&f| f > 0).max() else { return Vec::new() };
    let lowest = floor.clamp(0.0, 1.0) * f64::from(top);
    let mut clocks: Vec<f64> =
        supported.iter().map(|&f| f64::from(f)).filter(|&f| f > 0.0 && f >= lowest).collect();
    clocks.sort_by(|a, b| b.total_cmp(a));
    clocks.dedup();
    let mut out: Vec<f64> = Vec::with_capacity(clocks.len());
    for f in clocks {
        if out.last().is_none_or(|&last| last - f >= step_mhz - 1e-9) {
            out.push(f);
        }
    }
    out.reverse();
    out
}

/// All priors, for listing.
pub fn all() -> &'static [GpuPrior] {
    PRIORS
}

impl GpuPrior {
    /// Candidate power limits from the minimum to the maximum in [`POWER_LIMIT_STEP_W`] steps,
    /// always ending at the maximum.
    pub fn power_limits(&self) -> Vec<f64> {
        power_limit_grid(self.min_power_limit_w, self.max_power_limit_w, POWER_LIMIT_STEP_W)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lookup_normalises_names() {
        assert_eq!(prior("h100").unwrap().max_power_limit_w, 700.0);
        assert_eq!(prior("Tesla V100").unwrap().name, "V100");
        assert_eq!(prior("Quadro RTX 6000").unwrap().name, "RTX6000");
        assert_eq!(prior("NVIDIA A100").unwrap().max_sm_mhz, 1410.0);
        assert_eq!(prior("h100-pcie").unwrap().name, "H100-PCIE");
        assert!(prior("").is_none());
        assert!(prior("nvidi\u{e9}").is_none());
    }

    #[test]
    fn names_as_nvml_reports_them_find_their_board() {
        for (nvml, name) in [
            ("Tesla V100-SXM2-32GB", "V100"),
            ("Tesla V100-PCIE-16GB", "V100-PCIE"),
            ("NVIDIA A100-SXM4-80GB", "A100"),
            ("NVIDIA A100-PCIE-40GB", "A100-PCIE"),
            ("NVIDIA A100 80GB PCIe", "A100-PCIE-80GB"),
            ("NVIDIA H100 80GB HBM3", "H100"),
            ("NVIDIA H100 PCIe", "H100-PCIE"),
            ("NVIDIA H100 NVL", "H100-NVL"),
            ("NVIDIA H200", "H200"),
            ("Quadro RTX 6000", "RTX6000"),
            ("Tesla P100-PCIE-16GB", "P100"),
        ] {
            assert_eq!(prior(nvml).map(|p| p.name), Some(name), "{nvml}");
        }
        // PCIe boards have their own power range.
        assert_eq!(prior("NVIDIA H100 PCIe").unwrap().max_power_limit_w, 350.0);
        assert_eq!(prior("Tesla V100-PCIE-16GB").unwrap().max_power_limit_w, 250.0);
        for unknown in ["NVIDIA RTX A6000", "NVIDIA GeForce RTX 4090", "A1000"] {
            assert!(prior(unknown).is_none(), "{unknown}");
        }
        // Every canonical name finds its own prior.
        assert!(all().iter().all(|p| prior(p.name).map(|q| q.name) == Some(p.name)));
    }

    #[test]
    fn power_limits_span_the_range() {
        let p = prior("RTX6000").unwrap().power_limits();
        assert_eq!(p.first(), Some(&100.0));
        assert_eq!(p.last(), Some(&260.0));
        assert_eq!(p[p.len() - 2], 250.0);
        assert!(all().iter().all(|g| g.min_power_limit_w < g.max_power_limit_w));
        assert_eq!(power_limit_grid(200.0, 260.0, 25.0), vec![200.0, 225.0, 250.0, 260.0]);
        assert_eq!(power_limit_grid(300.0, 300.0, 5.0), vec![300.0]);
        assert!(
            power_limit_grid(300.0, 200.0, 5.0).is_empty() && power_limit_grid(f64::NAN, 1.0, 5.0).is_empty()
        );
        assert!(power_limit_grid(100.0, 200.0, 0.0).is_empty());
    }

    #[test]
    fn clock_candidates_stay_in_the_useful_range_on_the_step() {
        let h100: Vec<u32> = (0..110).map(|k| 1980 - 15 * k).collect(); // 1980 … 345, highest first
        let grid = sm_clock_grid(&h100, 0.5, 15.0);
        assert_eq!((grid[0], *grid.last().unwrap(), grid.len()), (990.0, 1980.0, 67));
        let coarse = sm_clock_grid(&h100, 0.5, 100.0);
        assert_eq!(coarse[coarse.len() - 2..], [1875.0, 1980.0]);
        assert!(coarse.windows(2).all(|w| w[1] - w[0] >= 100.0) && coarse[0] >= 990.0);
        assert_eq!(sm_clock_grid(&[1410, 0, 1410, 705], 0.5, 1.0), [705.0, 1410.0]);
        assert!(sm_clock_grid(&[], 0.5, 15.0).is_empty() && sm_clock_grid(&[0], 0.5, 15.0).is_empty());
    }
}
