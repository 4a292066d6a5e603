//! The `sbatch`/`srun`/`salloc` options wattson adds, and reading them wherever Slurm hands
//! them over: the SPANK option callback, the job's SPANK environment in `job_submit`, or the
//! job environment of submissions that bypass SPANK (REST API, `--export`).

use std::time::Duration;

use wattson_types::job::{EnergyPolicy, Hints, check_slowdown_pct, parse_share, share_word};

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
pub const OPTIONS: [OptionSpec; 5] = [
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
    OptionSpec {
        name: "energy-share",
        arginfo: "yes|no",
        usage: "yes: wattson may put the job on a GPU another opted-in job uses, accepting a slowdown \
                within --energy-slowdown to save energy; no: never (wattson)",
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
            "energy-slowdown" => {
                // Not a number is not a percentage either: the one check says what is allowed.
                let pct = check_slowdown_pct(value.parse().unwrap_or(f64::NAN))
                    .map_err(|e| format!("--energy-slowdown={value}: {e}, e.g. 10"))?;
                self.hints.slowdown_pct = Some(pct);
            }
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
            "energy-share" => {
                let share = parse_share(value).map_err(|e| format!("--energy-share={value}: {e}"))?;
                self.hints.share = Some(share);
            }
            other => return Err(format!("unknown wattson option --{other}")),
        }
        Ok(())
    }

    /// Reads the hints of a submission: the options SPANK forwarded
    /// (`_SLURM_SPANK_OPTION_wattson_<option>`), taken from the job's SPANK environment only
    /// (an exported look-alike in the job's environment is not an option the nodes see), else
    /// `WATTSON_ENERGY`, `WATTSON_ENERGY_SLOWDOWN`, `WATTSON_ENERGY_TAG`, `WATTSON_ENERGY_DEFER`,
    /// `WATTSON_ENERGY_SHARE` from the job's environment; the job's `--gpu-freq` from the SPANK environment
    /// ([`crate::gpu_freq`]). Also says whether the hints came from the environment.
    pub fn from_env<'a>(
        spank_env: impl IntoIterator<Item = &'a str>,
        job_env: impl IntoIterator<Item = &'a str>,
    ) -> Result<(SubmitHints, bool), String> {
        let mut spank = SubmitHints::default();
        let mut any_spank = false;
        let mut gpu_freq = None;
        for entry in spank_env {
            let Some((name, value)) = entry.split_once('=') else { continue };
            if name == crate::gpu_freq::GPU_FREQ_VAR {
                gpu_freq = crate::gpu_freq::from_prolog_env(Some(value));
            } else if let Some(option) = name.strip_prefix(SPANK_PREFIX) {
                spank.set(&option.replace('_', "-"), value)?;
                any_spank = true;
            }
        }
        let mut plain = SubmitHints::default();
        let mut any_plain = false;
        for entry in job_env {
            let Some((name, value)) = entry.split_once('=') else { continue };
            if let Some(rest) = name.strip_prefix("WATTSON_") {
                let option = rest.to_ascii_lowercase().replace('_', "-");
                if OPTIONS.iter().any(|o| o.name == option) {
                    plain.set(&option, value)?;
                    any_plain = true;
                }
            }
        }
        // Options given to sbatch win over the environment.
        let (mut chosen, from_env) = if any_spank || !any_plain { (spank, false) } else { (plain, true) };
        chosen.hints.gpu_freq = gpu_freq;
        Ok((chosen, from_env))
    }

    /// The hints as the SPANK options the nodes read (`_SLURM_SPANK_OPTION_wattson_<option>`,
    /// value), so hints given in the environment are enforced as they are recorded.
    pub fn spank_options(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let mut add = |option: &str, value: String| out.push((spank_option_name(option), value));
        if let Some(p) = self.hints.policy {
            add("energy", p.to_string());
        }
        if let Some(s) = self.hints.slowdown_pct {
            add("energy-slowdown", s.to_string());
        }
        if let Some(t) = &self.hints.tag {
            add("energy-tag", t.clone());
        }
        if let Some(d) = self.defer {
            add("energy-defer", humantime::format_duration(d).to_string());
        }
        if let Some(s) = self.hints.share {
            add("energy-share", share_word(s).to_string());
        }
        out
    }
}

/// How Slurm names a SPANK option of this plugin in a job's SPANK environment.
pub const SPANK_PREFIX: &str = "_SLURM_SPANK_OPTION_wattson_";

/// The SPANK environment's name of `option` (`energy-share`: `_SLURM_SPANK_OPTION_wattson_energy_share`).
pub fn spank_option_name(option: &str) -> String {
    format!("{SPANK_PREFIX}{}", option.replace('-', "_"))
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
        h.set("energy-share", "yes").unwrap();
        assert_eq!(h.hints.share, Some(true));
        h.set("energy-share", "no").unwrap();
        assert_eq!(h.hints.share, Some(false));
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
        assert_eq!(h.set("energy-share", "maybe").unwrap_err(), "--energy-share=maybe: not one of yes, no");
        assert!(h.set("energy-share", "").is_err());
        assert_eq!(h, SubmitHints::default(), "nothing is kept from refused values");
    }

    #[test]
    fn hints_are_read_from_spank_options_or_the_environment() {
        let spank = [
            "PATH=/bin",
            "_SLURM_SPANK_OPTION_wattson_energy=perf",
            "_SLURM_SPANK_OPTION_wattson_energy_defer=2h",
        ];
        let (h, from_env) = SubmitHints::from_env(spank, []).unwrap();
        assert_eq!((h.hints.policy, from_env), (Some(EnergyPolicy::Perf), false));
        assert_eq!(h.defer, Some(Duration::from_secs(7200)));
        let plain = ["WATTSON_ENERGY=min-energy", "WATTSON_ENERGY_SLOWDOWN=5", "WATTSON_CONFIG=/x"];
        let (h, from_env) = SubmitHints::from_env([], plain).unwrap();
        assert_eq!((h.hints.slowdown_pct, from_env), (Some(5.0), true));
        assert!(SubmitHints::from_env([], ["WATTSON_ENERGY=fast"]).unwrap_err().contains("--energy=fast"));
        assert_eq!(SubmitHints::from_env([], ["HOME=/root"]).unwrap(), (SubmitHints::default(), false));
        // A look-alike exported into the job's environment is not an option.
        let exported = ["_SLURM_SPANK_OPTION_wattson_energy=min-energy"];
        let (h, _) = SubmitHints::from_env(["_SLURM_SPANK_OPTION_wattson_energy=perf"], exported).unwrap();
        assert_eq!(h.hints.policy, Some(EnergyPolicy::Perf));
    }

    #[test]
    fn hints_become_the_spank_options_the_nodes_read() {
        let (h, _) = SubmitHints::from_env(
            [],
            [
                "WATTSON_ENERGY=min-energy",
                "WATTSON_ENERGY_SLOWDOWN=7.5",
                "WATTSON_ENERGY_TAG=bert",
                "WATTSON_ENERGY_DEFER=2h",
                "WATTSON_ENERGY_SHARE=yes",
            ],
        )
        .unwrap();
        let options = h.spank_options();
        let entries: Vec<String> = options.iter().map(|(k, v)| format!("{k}={v}")).collect();
        let (back, from_env) = SubmitHints::from_env(entries.iter().map(String::as_str), []).unwrap();
        assert_eq!((back, from_env), (h.clone(), false));
        assert_eq!(h.hints.share, Some(true));
        assert_eq!(options[0], ("_SLURM_SPANK_OPTION_wattson_energy".into(), "min-energy".into()));
    }
}
