//! Per-GPU-type priors: power-limit range, idle draw, maximum SM clock.
//!
//! `public_spec` marks values taken from vendor data sheets or public `nvidia-smi -q` dumps;
//! the rest (mostly idle draw of workstation-class boards) are estimates to be replaced by
//! the daemon's own measurements.

/// What the engine assumes about a GPU type before any workload has been measured on it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GpuPrior {
    /// Canonical name, as used in the model table (e.g. `"A100"`).
    pub name: &'static str,
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

/// Step between candidate power limits (W), as in the Zeus measurements.
pub const POWER_LIMIT_STEP_W: f64 = 25.0;

/// Lowest SM clock, as a fraction of the maximum, where `t = t0 + D/f` holds.
pub const CLOCK_VALID_FRACTION: f64 = 0.45;

const PRIORS: &[GpuPrior] = &[
    GpuPrior {
        name: "A100",
        min_power_limit_w: 100.0,
        max_power_limit_w: 400.0,
        idle_w: 55.0,
        max_sm_mhz: 1410.0,
        public_spec: true,
        idle_public: true,
    },
    GpuPrior {
        name: "H100",
        min_power_limit_w: 200.0,
        max_power_limit_w: 700.0,
        idle_w: 72.0,
        max_sm_mhz: 1980.0,
        public_spec: true,
        idle_public: true,
    },
    GpuPrior {
        name: "H200",
        min_power_limit_w: 200.0,
        max_power_limit_w: 700.0,
        idle_w: 75.0,
        max_sm_mhz: 1980.0,
        public_spec: true,
        idle_public: false,
    },
    GpuPrior {
        name: "V100",
        min_power_limit_w: 150.0,
        max_power_limit_w: 300.0,
        idle_w: 57.0,
        max_sm_mhz: 1530.0,
        public_spec: true,
        idle_public: true,
    },
    GpuPrior {
        name: "A40",
        min_power_limit_w: 100.0,
        max_power_limit_w: 300.0,
        idle_w: 30.0,
        max_sm_mhz: 1740.0,
        public_spec: true,
        idle_public: false,
    },
    GpuPrior {
        name: "L40S",
        min_power_limit_w: 100.0,
        max_power_limit_w: 350.0,
        idle_w: 35.0,
        max_sm_mhz: 2520.0,
        public_spec: true,
        idle_public: false,
    },
    GpuPrior {
        name: "P100",
        min_power_limit_w: 125.0,
        max_power_limit_w: 250.0,
        idle_w: 30.0,
        max_sm_mhz: 1480.0,
        public_spec: true,
        idle_public: false,
    },
    GpuPrior {
        name: "RTX6000",
        min_power_limit_w: 100.0,
        max_power_limit_w: 260.0,
        idle_w: 20.0,
        max_sm_mhz: 1770.0,
        public_spec: true,
        idle_public: false,
    },
];

/// The prior for a GPU type, matched case-insensitively ignoring spaces, `-` and `_`
/// and a leading `NVIDIA`/`Tesla`/`Quadro` (so `"NVIDIA H100-SXM"`-style names miss, but
/// `"h100"`, `"RTX 6000"`, `"Tesla V100"` hit). No allocation.
pub fn prior(gpu_type: &str) -> Option<&'static GpuPrior> {
    let mut rest = gpu_type.trim();
    for prefix in ["nvidia", "tesla", "quadro"] {
        if rest.get(..prefix.len()).is_some_and(|head| head.eq_ignore_ascii_case(prefix)) {
            rest = rest[prefix.len()..].trim_start();
        }
    }
    let key = rest.bytes().filter(|b| !matches!(b, b' ' | b'-' | b'_')).map(|b| b.to_ascii_uppercase());
    PRIORS.iter().find(|p| key.clone().eq(p.name.bytes()))
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

    /// Lowest SM clock (MHz) where the clock model is valid.
    pub fn clock_valid_min(&self) -> f64 {
        CLOCK_VALID_FRACTION * self.max_sm_mhz
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
        assert!(prior("A100-SXM4-80GB").is_none());
        assert!(prior("").is_none());
        assert!(prior("nvidi\u{e9}").is_none());
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
}
