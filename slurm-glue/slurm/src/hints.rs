//! The `sbatch`/`srun`/`salloc` options wattson adds, and reading them wherever Slurm hands
//! them over: the SPANK option callback, the job's SPANK environment in `job_submit`, or the
//! job environment of submissions that bypass SPANK (REST API, `--export`).

use std::time::Duration;

use wattson_types::job::{EnergyPolicy, Hints};

/// One option: its name (`--energy`), argument word and one-line help for `sbatch --help`.
pub struct OptionSpec {
    /// Long option name without dashes.
    pub name: &'static str,
    /// One word describing the argument.
    pub arginfo: &'static str,
    /// Help text.
    pub usage: &'static str,
}

/// The options, in the order `sbatch --help` lists them; `val` is the index here.
pub const OPTIONS: [OptionSpec; 4] = [
    OptionSpec {
        name: "energy",
        arginfo: "policy",
        usage: "GPU energy policy: min-energy, balanced or perf (wattson)",
    },
    OptionSpec {
        name: "energy-slowdown",
        arginfo: "percent",
        usage: "largest slowdown against full speed that min-energy may cost, in % (wattson)",
    },
    OptionSpec {
        name: "energy-tag",
        arginfo: "tag",
        usage: "workload signature so energy models learn across runs (wattson)",
    },
    OptionSpec {
        name: "energy-defer",
        arginfo: "duration",
        usage: "the job may start up to this much later when electricity is cheaper, e.g. 6h (wattson)",
    },
];

/// Longest accepted deferral.
pub const MAX_DEFER: Duration = Duration::from_secs(7 * 86_400);

/// Hints as given at submission, including the submit-only deferral window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SubmitHints {
    /// Hints the job carries to its nodes.
    pub hints: Hints,
    /// How much later the job may start.
    pub defer: Option<Duration>,
}

impl SubmitHints {
    /// Applies one option value; the error is the one line the user sees.
    pub fn set(&mut self, option: &str, value: &str) -> Result<(), String> {
        let value = value.trim();
        match option {
            "energy" => {
                let policy = value
                    .parse::<EnergyPolicy>()
                    .map_err(|_| format!("--energy={value}: not one of {}", EnergyPolicy::allowed()))?;
                self.hints.policy = Some(policy);
            }
            "energy-slowdown" => match value.parse::<f64>() {
                Ok(pct) if pct.is_finite() && (0.0..=1000.0).contains(&pct) => {
                    self.hints.slowdown_pct = Some(pct)
                }
                _ => {
                    return Err(format!(
                        "--energy-slowdown={value}: not a percentage between 0 and 1000, e.g. 10"
                    ));
                }
            },
            "energy-tag" => {
                let candidate = Hints { tag: Some(value.to_string()), ..Hints::default() };
                candidate.validate().map_err(|e| format!("--energy-tag: {e}"))?;
                self.hints.tag = candidate.tag;
            }
            "energy-defer" => match humantime::parse_duration(value) {
                Ok(d) if d <= MAX_DEFER => self.defer = Some(d),
                _ => {
                    return Err(format!(
                        "--energy-defer={value}: not a duration from 0 to 7d, e.g. 30m, 6h or 2d"
                    ));
                }
            },
            other => return Err(format!("unknown wattson option --{other}")),
        }
        Ok(())
    }

    /// Reads the hints of a submission from `NAME=value` environment entries: the options
    /// SPANK forwarded (`_SLURM_SPANK_OPTION_wattson_<option>`), else `WATTSON_ENERGY`,
    /// `WATTSON_ENERGY_SLOWDOWN`, `WATTSON_ENERGY_TAG`, `WATTSON_ENERGY_DEFER`.
    pub fn from_env<'a>(entries: impl IntoIterator<Item = &'a str>) -> Result<SubmitHints, String> {
        let mut spank = SubmitHints::default();
        let mut plain = SubmitHints::default();
        let (mut any_spank, mut any_plain) = (false, false);
        for entry in entries {
            let Some((name, value)) = entry.split_once('=') else { continue };
            if let Some(option) = name.strip_prefix("_SLURM_SPANK_OPTION_wattson_") {
                spank.set(&option.replace('_', "-"), value)?;
                any_spank = true;
            } else if let Some(rest) = name.strip_prefix("WATTSON_") {
                let option = rest.to_ascii_lowercase().replace('_', "-");
                if OPTIONS.iter().any(|o| o.name == option) {
                    plain.set(&option, value)?;
                    any_plain = true;
                }
            }
        }
        // Options given to sbatch win over the environment.
        Ok(if any_spank || !any_plain { spank } else { plain })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_values_are_read() {
        let mut h = SubmitHints::default();
        h.set("energy", "min-energy").unwrap();
        h.set("energy-slowdown", "10").unwrap();
        h.set("energy-tag", "bert-squad").unwrap();
        h.set("energy-defer", "6h").unwrap();
        assert_eq!(h.hints.policy, Some(EnergyPolicy::MinEnergy));
        assert_eq!(h.hints.slowdown_pct, Some(10.0));
        assert_eq!(h.defer, Some(Duration::from_secs(6 * 3600)));
    }

    #[test]
    fn bad_values_say_what_is_allowed() {
        let mut h = SubmitHints::default();
        assert_eq!(
            h.set("energy", "fast").unwrap_err(),
            "--energy=fast: not one of min-energy, balanced, perf"
        );
        assert!(h.set("energy-slowdown", "-3").unwrap_err().contains("between 0 and 1000"));
        assert!(h.set("energy-defer", "tomorrow").unwrap_err().contains("e.g. 30m, 6h or 2d"));
        assert!(h.set("energy-defer", "30d").is_err());
        assert!(h.set("energy-tag", "").is_err());
        assert_eq!(h, SubmitHints::default(), "nothing is kept from refused values");
    }

    #[test]
    fn hints_are_read_from_spank_options_or_the_environment() {
        let spank = [
            "PATH=/bin",
            "_SLURM_SPANK_OPTION_wattson_energy=perf",
            "_SLURM_SPANK_OPTION_wattson_energy_defer=2h",
        ];
        let h = SubmitHints::from_env(spank).unwrap();
        assert_eq!(h.hints.policy, Some(EnergyPolicy::Perf));
        assert_eq!(h.defer, Some(Duration::from_secs(7200)));
        let plain = ["WATTSON_ENERGY=min-energy", "WATTSON_ENERGY_SLOWDOWN=5", "WATTSON_CONFIG=/x"];
        assert_eq!(SubmitHints::from_env(plain).unwrap().hints.slowdown_pct, Some(5.0));
        assert!(SubmitHints::from_env(["WATTSON_ENERGY=fast"]).unwrap_err().contains("--energy=fast"));
        assert_eq!(SubmitHints::from_env(["HOME=/root"]).unwrap(), SubmitHints::default());
    }
}
