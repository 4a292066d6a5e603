//! `[budget]`: the cluster power budget `wattson ctld` keeps, by lowering running jobs' DVFS
//! levels within their bounds first and then holding new jobs at submission until they fit.

use serde::{Deserialize, Deserializer};

/// `[budget]` section.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetConfig {
    /// The most the nodes `wattson ctld` manages may draw together (W): every powered node at
    /// its `[ctld.node]` draw plus its GPUs at their power limits. Unset: no budget.
    #[serde(default, deserialize_with = "power_w")]
    #[schemars(extend("x-allowed" = "1 to 1000000000"))]
    pub power_w: Option<f64>,
    /// What one GPU of a pending job may draw once it starts (W); unset: the engine's prior
    /// for the GPU type slurm.conf's `Gres` names, else the largest limit a node reported.
    #[serde(default, deserialize_with = "gpu_max_w")]
    #[schemars(extend("x-allowed" = "1 to 100000"))]
    pub gpu_max_w: Option<f64>,
}

fn power_w<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    crate::number_in(d, 1.0, 1e9, " W").map(Some)
}

fn gpu_max_w<'de, D: Deserializer<'de>>(d: D) -> Result<Option<f64>, D::Error> {
    crate::number_in(d, 1.0, 100_000.0, " W").map(Some)
}

/// The entry job_submit adds to the AdminComment of a job it held for the budget; the
/// controller releases only jobs that carry it, and replaces it with [`RELEASED_MARK`].
pub const HELD_MARK: &str = "held=budget";

/// The entry that replaces [`HELD_MARK`] once the controller released the job.
pub const RELEASED_MARK: &str = "released=budget";

/// How many loops old the controller's state file may be for job_submit to hold new jobs.
pub const LIVE_LOOPS: u32 = 3;

/// Whether the controller is live: its state file, rewritten every `interval`, is at most
/// [`LIVE_LOOPS`] loops old (`state_age`; `None`: no such file). job_submit holds jobs for its
/// release only then (fail open).
pub fn controller_live(state_age: Option<std::time::Duration>, interval: std::time::Duration) -> bool {
    state_age.is_some_and(|age| age <= interval * LIVE_LOOPS)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn the_controller_is_live_while_its_state_file_is_at_most_three_loops_old() {
        let s = Duration::from_secs;
        assert!(controller_live(Some(s(25)), s(10)));
        assert!(controller_live(Some(s(30)), s(10)));
        assert!(!controller_live(Some(s(31)), s(10)), "a controller three loops late is down");
        assert!(!controller_live(None, s(10)), "no controller has run");
    }

    #[test]
    fn a_budget_out_of_range_names_the_line_and_the_range() {
        let e = crate::Config::parse("[budget]\npower_w = 0\n", "w.toml").unwrap_err().0;
        assert!(e.starts_with("w.toml:2:") && e.contains("allowed 1 to 1000000000"), "{e}");
        let c = crate::Config::parse("[budget]\npower_w = 5000\n", "w.toml").unwrap();
        assert_eq!(c.budget.power_w, Some(5000.0));
    }
}
