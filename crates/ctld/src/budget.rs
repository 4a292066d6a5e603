//! The cluster power budget (`[budget]`) on a real Slurm: what the controller learns beyond
//! Slurm's listings for the engine's [`wattson_engine::cluster::budget`], and how it enacts
//! the engine's answer.
//!
//! - job_submit holds every new job while the controller is live (JobHeldAdmin, AdminComment
//!   `held=budget`); the engine releases each once its start fits under the budget, and the
//!   controller marks it `released=budget` and releases it. A job held by its owner or an
//!   administrator is never released here.
//! - Running jobs' level tables come from their nodes (`JobLevels`); a job whose power the
//!   engine's budget shed runs at the engine's level ([`crate::pace`]), never beyond its own
//!   slowdown bound; the others keep the pace they would have without a budget.

use std::collections::BTreeMap;

use wattson_config::Config;
use wattson_config::budget::{HELD_MARK, RELEASED_MARK};

use crate::nodes::JobLevels;
use crate::slurm::request::Request;
use crate::slurm::{Job, Node};

/// What a GPU of a job whose table the controller does not know may draw (W): `[budget]
/// gpu_max_w`, else the largest of the engine's priors for the GPU types Slurm's `Gres`
/// names and the top levels the nodes reported, else the largest prior of any type.
pub fn gpu_max_w(config: &Config, nodes: &[Node], levels: &BTreeMap<u32, JobLevels>) -> f64 {
    if let Some(w) = config.budget.gpu_max_w {
        return w;
    }
    let priors = nodes.iter().filter_map(|n| wattson_engine::priors::prior(n.gpu_type.as_deref()?));
    let reported = levels.values().filter_map(|l| l.levels.last().map(|top| top.cap_w));
    let known = priors.map(|p| p.max_power_limit_w).chain(reported).fold(f64::NAN, f64::max);
    if known.is_nan() { wattson_engine::priors::largest_power_limit_w() } else { known }
}

/// The jobs job_submit holds for the budget (pending, priority 0, `held=budget` in their
/// AdminComment), with the slowdown bound each records.
pub fn held(jobs: &[Job], requests: &[Request]) -> BTreeMap<u32, f64> {
    requests
        .iter()
        .filter(|r| r.marked(HELD_MARK))
        .filter(|r| jobs.iter().any(|j| j.id == r.id && j.is_held()))
        .map(|r| (r.id, r.bound()))
        .collect()
}

/// `comment` with [`HELD_MARK`] replaced by [`RELEASED_MARK`].
pub fn released_comment(comment: &str) -> String {
    crate::slurm::request::replace_mark(comment, HELD_MARK, RELEASED_MARK)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_jobs_held_for_the_budget_are_the_controllers_to_release() {
        let text = "JobId=5 UserId=alice(1000) Priority=0 JobState=PENDING Reason=JobHeldAdmin \
                    AdminComment=wattson:policy=balanced,slowdown=10%,held=budget TresPerNode=gres:gpu:1\n\
                    JobId=6 UserId=alice(1000) Priority=0 JobState=PENDING Reason=JobHeldUser \
                    AdminComment=wattson:policy=balanced TresPerNode=gres:gpu:1\n";
        let requests = crate::slurm::request::parse_requests(text);
        let job = |id: u32, priority: u32| Job {
            id,
            state: Some(wattson_sacct::SlurmState::Pending),
            reason: "JobHeldAdmin".into(),
            gpus: 1,
            submit: 0,
            elapsed_s: 0.0,
            limit_s: None,
            priority,
            nodes: Vec::new(),
            partitions: Vec::new(),
            requested: Vec::new(),
            nice: 0,
        };
        let held = held(&[job(5, 0), job(6, 0)], &requests);
        assert_eq!(held.keys().copied().collect::<Vec<_>>(), [5], "job 6 is its owner's hold");
        assert!((held[&5] - 0.1).abs() < 1e-12, "the bound its comment records");
        assert!(super::held(&[job(5, 1000)], &requests).is_empty(), "released meanwhile");
        assert_eq!(released_comment("wattson:policy=x,held=budget"), "wattson:policy=x,released=budget");
    }
}
