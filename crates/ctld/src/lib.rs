//! `wattson ctld`: the engine's cluster policy acting on a real Slurm, through Slurm's own
//! machinery. Each loop reads Slurm's state with its public commands, asks the engine
//! ([`wattson_engine::cluster::decide`]) what to do, and asks Slurm to do it: idle nodes beyond
//! the warm set `power_down_asap` (a node that gets a job meanwhile is drained, never killed),
//! nodes known demand needs before a boot could serve it `power_up`, nodes whose resume failed
//! `power_up` again a few times.
//! Slurm's idle timer stays off; Slurm still wakes sleeping nodes for the jobs it places on
//! them, with or without this service.
//!
//! [`Planner`] is the decision, pure given Slurm's output and the time; [`Ctld`] adds the
//! commands. Also the programs Slurm runs: [`power`], [`prolog`].

pub mod budget;
pub mod by_type;
pub mod cli;
pub mod failover;
pub mod metrics;
pub mod models;
pub mod nodes;
pub mod pace;
pub mod plan;
pub mod power;
pub mod power_status;
pub mod prolog;
pub mod retry;
pub mod share;
pub mod slurm;
pub mod slurm_program;
pub mod snapshot;
pub mod summarize;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tracing::{error, info, warn};

use wattson_config::Config;
use wattson_engine::cluster;

use crate::metrics::Action;
pub use crate::plan::Plan;
use crate::power_status::Ledger;
use crate::retry::{Retries, Verdict};
use crate::slurm::{Job, Node, Power, Slurm};
use crate::snapshot::Memory;
use wattson_sacct::AccountingError;

/// The controller's decisions: the configuration, and what it remembers between loops.
pub struct Planner {
    config: Config,
    memory: Memory,
    retries: Retries,
    ledger: Ledger,
    by_type: by_type::ByType,
    /// The co-location model (`[ctld] share_pairs`, `share_learn`); `None`: no job shares by
    /// decision.
    pairs: Option<share::Pairs>,
}

impl Planner {
    /// A planner for `config`, deciding no co-location.
    pub fn new(config: Config) -> Planner {
        let retries = Retries::new(config.ctld.resume_retries, config.ctld.resume_retry_pause.as_secs_f64());
        let (memory, ledger, by_type) = Default::default();
        Planner { config, memory, retries, ledger, by_type, pairs: None }
    }

    /// This planner, deciding which opted-in jobs share a GPU by `pairs`.
    pub fn sharing(self, pairs: share::Pairs) -> Planner {
        Planner { pairs: Some(pairs), ..self }
    }

    /// This planner, going on from what a controller before it `saved` in its state file:
    /// the policy's memory (the waits observed, each running job's lag) and, deciding
    /// co-location, the classes paired no more, the pairs learned and the opted-in jobs it
    /// released that have not started.
    pub fn going_on(mut self, saved: Ledger) -> Planner {
        self.memory.decider = saved.decider;
        if let Some(pairs) = &mut self.pairs {
            pairs.break_tags(&saved.share_broken);
            pairs.relearn(&saved.share_learned, &saved.share_unfit);
            self.ledger.share_released = saved.share_released;
        }
        self
    }

    /// Whether it decides co-location.
    pub fn shares(&self) -> bool {
        self.pairs.is_some()
    }

    /// The engine's view of Slurm's `nodes` and `jobs` at `now` (Unix s), with what the
    /// controller `learned` for the power budget, and the cluster policy's actions on it: the
    /// decision path the simulator runs on its own view.
    pub fn decide(
        &mut self,
        nodes: &[Node],
        jobs: &[Job],
        learned: &snapshot::Learned,
        now: f64,
    ) -> (snapshot::View, cluster::Actions) {
        let c = &self.config.ctld;
        let policy = snapshot::policy(c);
        let view = self.memory.view(now, &policy, c.gpu_idle_w, nodes, jobs, learned);
        let snapshot = engine_snapshot(&view, now, &self.config, self.pairs.as_ref());
        let actions = self.memory.decider.step(&policy, &snapshot);
        (view, actions)
    }

    /// What to ask of Slurm, given its nodes and jobs at `now` (Unix s).
    pub fn plan(&mut self, nodes: &[Node], jobs: &[Job], now: f64) -> Plan {
        self.plan_with(nodes, jobs, &[], &snapshot::Learned::default(), now)
    }

    /// Whether a power budget is set (`[budget] power_w`).
    pub fn has_budget(&self) -> bool {
        self.config.budget.power_w.is_some()
    }

    /// Whether this loop places by GPU type, and so needs the pending jobs' [`Request`]s:
    /// `[ctld] type_aware`, several GPU types, a job waiting for resources.
    ///
    /// [`Request`]: slurm::request::Request
    pub fn places_by_type(&self, nodes: &[Node], jobs: &[Job]) -> bool {
        self.config.ctld.tuning.type_aware && by_type::several_types(nodes) && jobs.iter().any(Job::is_queued)
    }

    /// [`Planner::plan`], placing by GPU type the queued jobs of `requests`, and keeping the
    /// power budget with what the controller `learned`.
    pub fn plan_with(
        &mut self,
        nodes: &[Node],
        jobs: &[Job],
        requests: &[slurm::request::Request],
        learned: &snapshot::Learned,
        now: f64,
    ) -> Plan {
        let (view, actions) = self.decide(nodes, jobs, learned, now);
        let c = &self.config.ctld;
        let policy = snapshot::policy(c);
        let snapshot = engine_snapshot(&view, now, &self.config, self.pairs.as_ref());
        // The engine picks only idle powered nodes to power down and sleeping ones to boot;
        // nodes an administrator holds were shown to it as busy.
        let names = |indices: &[u32]| -> Vec<String> {
            indices
                .iter()
                .filter(|&&i| view.managed[i as usize])
                .map(|&i| nodes[i as usize].name.clone())
                .collect()
        };
        let power = c.manage_power;
        let by_name: std::collections::BTreeMap<&str, &Node> =
            nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let addr = |name: &String| by_name.get(name.as_str()).map(|n| n.addr.clone());
        let power_down = if power { names(&actions.power_down) } else { Vec::new() };
        let mut plan = Plan {
            addrs: power_down.iter().filter_map(|n| Some((n.clone(), addr(n)?))).collect(),
            power_down,
            power_up: if power { names(&actions.power_up) } else { Vec::new() },
            warm_target: cluster::power::warm_target(&policy, &snapshot),
            idle: view.nodes.iter().filter(|n| n.idle_since.is_finite()).count(),
            queued: view.queued.len(),
            running: jobs
                .iter()
                .filter(|j| j.is_running())
                .map(|j| {
                    let pace = pace::of(learned, &actions, j.id, c.tuning.congestion_raise);
                    (j.id, pace, j.nodes.iter().filter_map(addr).collect())
                })
                .collect(),
            release: actions
                .release
                .iter()
                .filter_map(|id| requests.iter().find(|r| r.id == *id))
                .map(|r| (r.id, budget::released_comment(&r.admin_comment)))
                .collect(),
            ..Plan::default()
        };
        if let Some(pairs) = &self.pairs {
            plan.share =
                share::gate(pairs, &mut self.ledger.share_released, &snapshot, &actions, &learned.shares);
        }
        plan.nice = nice_offsets(&actions.queue_order, jobs, c.order_weight);
        plan.restrict =
            self.by_type.plan(&policy, &self.config, nodes, &view.gpu_type_names, &snapshot, requests);
        if let Some(weights) = cluster::placement::node_weights(&policy, &snapshot).filter(|_| c.weights) {
            let mut changed: std::collections::BTreeMap<u32, Vec<String>> = Default::default();
            for (i, node) in nodes.iter().enumerate() {
                if view.managed[i] && node.weight != weights[i] {
                    changed.entry(weights[i]).or_default().push(node.name.clone());
                }
            }
            plan.weights = changed.into_iter().collect();
        }
        for node in nodes.iter().filter(|_| power) {
            if !node.resume_failed() {
                if node.power == Power::On && node.base != "DOWN" {
                    self.retries.recovered(&node.name);
                }
                continue;
            }
            match self.retries.failed(&node.name, now, node.retries()) {
                Verdict::Wait => {}
                Verdict::Retry(n) => plan.retry.push((node.name.clone(), n)),
                Verdict::GiveUp(n) => plan.give_up.push((node.name.clone(), n)),
            }
        }
        self.ledger.observe(nodes, now, &snapshot::node_costs(c), snapshot::gpu_idle_w(c, nodes));
        self.ledger.decider.clone_from(&self.memory.decider);
        let (w, bound) = (&self.memory.decider.wait_cost, c.tuning.max_wait_cost);
        self.ledger.wait_cost = power_status::WaitCostStatus {
            observed: w.ratio(),
            bound,
            guarding: w.guarding(bound),
            gate: w.gate(bound),
        };
        let why = |what: &str| {
            format!("{what} (warm target {}, idle {}, queued {})", plan.warm_target, plan.idle, plan.queued)
        };
        for node in &plan.power_down {
            self.ledger.decided(node, why("power_down_asap: idle beyond the warm set"), now);
        }
        for node in &plan.power_up {
            self.ledger.decided(node, why("power_up: queued or held jobs need more warm nodes"), now);
        }
        for (node, n) in &plan.retry {
            self.ledger.decided(node, format!("power_up: resume failed, try {n}"), now);
        }
        for (node, n) in &plan.give_up {
            self.ledger.decided(node, format!("left down: resume failed after {n} tries"), now);
        }
        plan
    }

    /// Each node's power history and the controller's last decisions.
    pub fn ledger(&self) -> &Ledger {
        &self.ledger
    }
}

/// The engine's snapshot of `view` at `now` under `config`, with the co-location model.
fn engine_snapshot<'a>(
    view: &'a snapshot::View,
    now: f64,
    config: &'a Config,
    pairs: Option<&'a share::Pairs>,
) -> cluster::Snapshot<'a> {
    cluster::Snapshot { sharing: pairs.map(share::Pairs::sharing), ..view.snapshot(now, config) }
}

/// The nice values that carry the engine's queue `order` (ids, first first) to Slurm as one
/// term of each pending job's priority: the first gets `-weight`, each next one `weight / n`
/// less (n jobs ranked), the last `-weight / n`. Slurm subtracts a job's nice from the priority
/// it computes (priority/multifactor's fair share, QOS, age... or priority/basic's submission
/// order), so the order weighs in without replacing them. Only the jobs whose nice changes.
fn nice_offsets(order: &[u32], jobs: &[Job], weight: u32) -> Vec<(u32, i64)> {
    let current: std::collections::HashMap<u32, i64> = jobs.iter().map(|j| (j.id, j.nice)).collect();
    let n = order.len() as i64;
    order
        .iter()
        .enumerate()
        .map(|(i, &id)| (id, -(i64::from(weight) * (n - i as i64) / n)))
        .filter(|&(id, nice)| current.get(&id).is_some_and(|&now| now != nice))
        .collect()
}

/// The controller: its planner and Slurm.
pub struct Ctld {
    planner: Planner,
    slurm: Slurm,
    nodes: nodes::Nodes,
    metrics: metrics::Metrics,
    metrics_file: Option<std::path::PathBuf>,
    interval: Duration,
    state_file: std::path::PathBuf,
    models: ModelsSync,
    summaries: summarize::Settings,
    /// What the summary passes remember from loop to loop.
    passes: summarize::passes::Passes,
    /// This host's name, to tell whether the slurmctld beside it is in control.
    host: String,
    /// The role of the last loop ([`failover`]); `None` before the first.
    role: Option<failover::Role>,
    /// The opted-in jobs seen sharing a GPU, until their nodes' measurements are judged.
    judge: share::judge::Judge,
}

/// When and where the nodes' measurements are merged.
struct ModelsSync {
    every: Duration,
    last: Option<std::time::Instant>,
    measurements_file: std::path::PathBuf,
    engine: wattson_config::EngineConfig,
}

impl Ctld {
    /// A controller for `config`; fails when its pair file (`[ctld] share_pairs`) cannot be
    /// read. With `share_learn` it learns pairs, from the file if there is one.
    pub fn new(config: Config) -> Result<Ctld, String> {
        let pairs = match (&config.ctld.share_pairs, config.ctld.tuning.share_learn) {
            (Some(path), _) => Some(share::Pairs::load(path).map_err(|e| e.0)?),
            (None, true) => Some(share::Pairs::new(&[])),
            (None, false) => None,
        }
        .map(|p| p.with_tuning(&config.ctld.tuning));
        let slurm = Slurm::new(config.ctld.command_timeout);
        let (interval, state_file) = (config.ctld.interval, config.ctld.state_file.clone());
        let nodes = nodes::Nodes::new(config.link.clone()).within(interval);
        let metrics_file = config.ctld.metrics_file.clone();
        let models = ModelsSync {
            every: config.ctld.models_sync,
            last: None,
            measurements_file: config.ctld.measurements_file.clone(),
            engine: config.engine.clone(),
        };
        let summaries = summarize::Settings {
            wait: config.ctld.summary_wait,
            bins: config.ctld.summary_bins,
            timeout: config.ctld.command_timeout,
        };
        let mut planner = Planner::new(config);
        if let Some(pairs) = pairs {
            planner = planner.sharing(pairs);
        }
        if let Some(saved) = power_status::saved(&state_file) {
            planner = planner.going_on(saved);
        }
        Ok(Ctld {
            summaries,
            passes: summarize::passes::Passes::default(),
            host: failover::this_host(),
            role: None,
            judge: Default::default(),
            planner,
            slurm,
            nodes,
            metrics: metrics::Metrics::default(),
            metrics_file,
            interval,
            state_file,
            models,
        })
    }

    /// One loop: read Slurm, plan, act. Returns the plan it carried out.
    pub fn step(&mut self) -> Result<Plan, String> {
        let started = std::time::Instant::now();
        let mut seen = Vec::new();
        let result = self.step_inner(&mut seen);
        self.metrics.looped(result.as_ref().ok(), &seen, started.elapsed().as_secs_f64());
        if let Some(path) = &self.metrics_file
            && let Err(e) = self.metrics.save(path)
        {
            warn!(file = %path.display(), error = %e, "cannot write the metrics file");
        }
        result
    }

    fn step_inner(&mut self, seen: &mut Vec<Node>) -> Result<Plan, String> {
        if !self.takes_part()? {
            self.save_status();
            return Ok(Plan::default());
        }
        *seen = self.slurm.nodes()?;
        let nodes = &seen[..];
        let jobs = self.slurm.jobs()?;
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        let budget = self.planner.has_budget();
        let shares = self.planner.shares();
        let requests = if self.planner.places_by_type(nodes, &jobs)
            || budget && jobs.iter().any(Job::is_held)
            || shares && !jobs.is_empty()
        {
            self.slurm.requests()?
        } else {
            Vec::new()
        };
        // The running jobs' levels: what the budget counts and the wait-cost bound observes.
        let mut learned = if budget || self.nodes.paces() {
            self.learn(nodes, &jobs, &requests)
        } else {
            snapshot::Learned::default()
        };
        if let Some(pairs) = &mut self.planner.pairs {
            learned.shares = share::share_jobs(&requests, &jobs, pairs);
            self.judge.watch(&learned.shares);
            self.judge.run(&self.nodes, nodes, &learned.shares, pairs);
            share::on_trial(pairs, &self.planner.ledger.share_released, &learned.shares, &self.judge);
            self.planner.ledger.share_broken = pairs.broken_tags();
            self.planner.ledger.share_learned = pairs.learned();
            self.planner.ledger.share_unfit = pairs.unfit_tags();
        }
        let mut plan = self.planner.plan_with(nodes, &jobs, &requests, &learned, now);
        self.confirm_idle(&mut plan, now);
        if self.nodes.paces() {
            let paced = self.nodes.pace(&plan.running);
            self.metrics.decided(Action::PaceFull, paced.full);
            self.metrics.decided(Action::PaceSaving, paced.saving);
            self.metrics.decided(Action::PaceLevel, paced.level);
        }
        let acted = self.act(&plan);
        self.sync_models_if_due(nodes);
        self.write_summaries(nodes, now);
        self.save_status();
        acted.map(|()| plan)
    }

    /// What the controller learns beyond Slurm's listings: the jobs job_submit held for the
    /// power budget ([`budget`]) and the running jobs' level tables from their nodes.
    fn learn(&self, nodes: &[Node], jobs: &[Job], requests: &[slurm::request::Request]) -> snapshot::Learned {
        let by_name: std::collections::BTreeMap<&str, &Node> =
            nodes.iter().map(|n| (n.name.as_str(), n)).collect();
        let running: Vec<(u32, String)> = jobs
            .iter()
            .filter(|j| j.is_running())
            .filter_map(|j| Some((j.id, by_name.get(j.nodes.first()?.as_str())?.addr.clone())))
            .collect();
        let levels = self.nodes.levels(&running);
        let gpu_max_w = budget::gpu_max_w(&self.planner.config, nodes, &levels);
        snapshot::Learned {
            held: budget::held(jobs, requests),
            levels,
            gpu_max_w,
            shares: Default::default(),
        }
    }

    /// Saves what `wattson power status` shows.
    fn save_status(&self) {
        if let Err(e) = power_status::save(self.planner.ledger(), &self.state_file) {
            warn!(file = %self.state_file.display(), error = %e, "cannot save the power status");
        }
    }

    /// Whether this loop acts: the slurmctld beside this controller is in control
    /// ([`failover`]). Logs each change of role; on taking over, every running job's pace is
    /// sent again, since the controller that had it may have left jobs at full speed.
    fn takes_part(&mut self) -> Result<bool, String> {
        let role = failover::role(&self.slurm.controllers()?, &self.host);
        if self.role.as_ref() != Some(&role) {
            match &role {
                failover::Role::Acting => {
                    info!(host = %self.host, "acting: the slurmctld beside this controller is in control");
                    if self.role.is_some() {
                        self.nodes.forget_paces();
                    }
                }
                failover::Role::Standby(Some(other)) => {
                    info!(host = %self.host, in_control = %other, "standby: another slurmctld is in control");
                }
                failover::Role::Standby(None) => warn!(host = %self.host, "standby: no slurmctld answers"),
            }
        }
        let acting = role == failover::Role::Acting;
        self.planner.ledger.role = role.clone();
        self.role = Some(role);
        Ok(acting)
    }

    /// Merges the nodes' DVFS measurements every `[ctld] models_sync` ([`models::sync`]).
    fn sync_models_if_due(&mut self, seen: &[Node]) {
        let due = self.models.last.is_none_or(|t| t.elapsed() >= self.models.every);
        if !self.nodes.syncs_models() || !due {
            return;
        }
        self.models.last = Some(std::time::Instant::now());
        let m = &self.models;
        match models::sync(&self.nodes, seen, &m.measurements_file, &m.engine) {
            Ok(synced) => {
                for (node, why) in synced.failed {
                    warn!(node = %node, reason = %why, "models not gathered from this node; next sync");
                }
            }
            Err(e) => warn!(error = %e, "models sync failed"),
        }
    }

    /// Writes the summary of every job that ended lately and has none ([`summarize`]).
    fn write_summaries(&mut self, seen: &[Node], now: f64) {
        if !self.nodes.summarizes() {
            return;
        }
        let form = match self.slurm.form() {
            Ok(form) => form,
            Err(e) => {
                warn!(error = %e, "cannot tell Slurm's release; summaries next loop");
                return;
            }
        };
        let (settings, link, now) = (&self.summaries, &self.nodes, now as i64);
        let listed = self.passes.pass(
            now,
            |lookback| summarize::ended_without_summary(settings, lookback, form),
            |jobs| summarize::write(link, seen, jobs, settings, now),
        );
        match listed {
            Ok(_) | Err(summarize::EndedError::Accounting(AccountingError::Absent)) => {}
            Err(e) => warn!(error = %e, "cannot list the jobs that ended; next loop"),
        }
    }

    /// Keeps in `plan.power_down` only the nodes whose wattsond confirms them idle; the others
    /// stay up, and the log and the power status say why.
    fn confirm_idle(&mut self, plan: &mut Plan, now: f64) {
        let candidates: Vec<(String, String)> = plan
            .power_down
            .iter()
            .map(|n| (n.clone(), plan.addrs.get(n).cloned().unwrap_or_else(|| n.clone())))
            .collect();
        let (confirmed, kept) = self.nodes.confirm_idle(&candidates);
        self.metrics.decided(Action::KeptUp, kept.len());
        for (node, why) in kept {
            warn!(node = %node, reason = %why, "stays up: its wattsond did not confirm it idle");
            self.planner.ledger.decided(&node, format!("kept up: not confirmed idle ({why})"), now);
        }
        plan.power_down = confirmed;
    }

    /// Asks Slurm for what `plan` says, logging each decision with its reason.
    fn act(&self, plan: &Plan) -> Result<(), String> {
        let (warm_target, idle, queued) = (plan.warm_target, plan.idle, plan.queued);
        for (node, n) in &plan.retry {
            warn!(node = %node, try_ = n, "resume failed: powering it up again");
            // The count goes into Slurm first, where another controller finds it.
            let reason = format!("reason={} {n}", slurm::RETRIED);
            if let Err(e) = self.slurm.update_nodes(std::slice::from_ref(node), &[&reason]) {
                warn!(node = %node, error = %e, "cannot record the retry in the node's reason");
            }
            if let Err(e) = self.slurm.update_nodes(std::slice::from_ref(node), &["state=power_up"]) {
                warn!(node = %node, error = %e, "cannot power the node up again");
            }
        }
        for (node, n) in &plan.give_up {
            error!(node = %node, tries = n, "resume failed after every retry: the node stays down for an administrator");
            let reason = format!("reason={}", slurm::GAVE_UP);
            if let Err(e) = self.slurm.update_nodes(std::slice::from_ref(node), &["state=down", &reason]) {
                warn!(node = %node, error = %e, "cannot set the node's reason");
            }
        }
        for (weight, nodes) in &plan.weights {
            // Slurm drops these on reconfigure and restart: set again by the next loop.
            info!(nodes = ?nodes, weight, "weight: placement follows the policy's ranking (best fit on powered nodes)");
            self.slurm.update_nodes(nodes, &[&format!("weight={weight}")])?;
        }
        if !plan.nice.is_empty() {
            info!(
                jobs = plan.nice.len(),
                queued, "nice: pending jobs' priorities carry the policy's order (wait per unit of size)"
            );
        }
        for &(job, nice) in &plan.nice {
            // A job that started or ended meanwhile refuses the update: the next loop sees it.
            if let Err(e) = self.slurm.set_nice(job, nice) {
                warn!(job, nice, error = %e, "cannot set the job's nice");
            }
        }
        for r in &plan.restrict {
            info!(job = r.job, gpu_type = %r.gpu_type, excluded = ?r.excluded,
                "excnodelist: the job starts on the GPU type the policy ranks for it");
            // A job that started or ended meanwhile refuses the update: the next loop sees it.
            if let Err(e) = self.slurm.exclude_nodes(r.job, &r.excluded) {
                warn!(job = r.job, error = %e, "cannot set the job's excluded nodes");
            }
        }
        for (job, comment) in &plan.release {
            info!(job, "release: the job's start fits under the power budget");
            // Marked first, so that a job released by hand meanwhile is never held again.
            if let Err(e) = self.slurm.release_held(*job, comment) {
                warn!(job, error = %e, "cannot release the job; next loop");
            }
        }
        share::enact(&self.slurm, &plan.share);
        if !plan.power_down.is_empty() {
            info!(nodes = ?plan.power_down, warm_target, idle, queued,
                "power_down_asap: idle beyond the warm set the arrival forecast needs");
            self.slurm.update_nodes(&plan.power_down, &["state=power_down_asap"])?;
        }
        if !plan.power_up.is_empty() {
            info!(nodes = ?plan.power_up, warm_target, idle, queued,
                "power_up: queued or held jobs need more warm nodes");
            self.slurm.update_nodes(&plan.power_up, &["state=power_up"])?;
        }
        Ok(())
    }

    /// Loops until the process is stopped; a failed loop is logged and the next one tried.
    pub fn run(mut self) {
        info!(interval = ?self.interval, "wattson ctld running");
        loop {
            if let Err(e) = self.step() {
                warn!(error = %e, "loop failed; retrying next loop");
            }
            std::thread::sleep(self.interval);
        }
    }
}

#[cfg(test)]
mod tests;
