//! The state's part in the node's energy besides its GPUs: each new job starts a share, each
//! reading of the node's meters (at every sample, and at every job's begin and end, so that
//! each interval has the same jobs throughout) is shared among the running jobs
//! ([`crate::node_energy::apportion`], by their CPU time where their cgroups tell it) and the
//! shares are persisted.

use std::collections::{BTreeMap, BTreeSet};

use tracing::{info, warn};

use super::State;
use crate::node_energy::cgroup::JobCgroups;
use crate::node_energy::{NodeMeters, NodeTotals, apportion};
use wattson_types::job::JobKey;
use wattson_types::scope::NodeShare;

/// What the state keeps of the node's energy besides its GPUs.
#[derive(Default)]
pub(super) struct NodePart {
    /// A new job's share (`None`: the node's energy is not measured).
    pub(super) empty: Option<NodeShare>,
    /// The node's meters, read at every sample and job boundary (none where the caller feeds
    /// the readings: [`State::charge_node`]).
    meters: Option<NodeMeters>,
    /// Slurm's job cgroups (`split = "cpu-time"`); `None`: divided by time.
    cgroups: Option<JobCgroups>,
    /// The node's meters at the last reading.
    last: Option<NodeTotals>,
    /// Each running job's CPU time at the last reading, ns (by job id).
    cpu_seen: BTreeMap<u32, u64>,
    /// The running jobs whose cgroup has been read: one gone since has ended its processes.
    cgroup_read: BTreeSet<u32>,
    /// Whether an interval was last divided by time for want of a job's CPU time (said once
    /// per change).
    by_time: bool,
}

impl State {
    /// From now on, each job begins with `empty` as its share of the node's energy (the
    /// scope, and zero of each part this node measures).
    pub fn measure_node(&mut self, empty: NodeShare) {
        self.node_part.empty = Some(empty);
    }

    /// From now on, the state reads `meters` itself, at every [`State::sample_node`] and at
    /// every job's begin and end; with `cgroups`, the energy is divided by the jobs' CPU time.
    pub fn attach_node_meters(&mut self, meters: NodeMeters, cgroups: Option<JobCgroups>) {
        self.measure_node(meters.empty_share());
        self.node_part.meters = Some(meters);
        self.node_part.cgroups = cgroups;
    }

    /// Reads the node's meters (where the state holds them) and shares what the node drew
    /// since the last reading among the running jobs.
    pub fn sample_node(&mut self) {
        let now = self.now();
        if let Some(meters) = self.node_part.meters.as_mut() {
            let totals = meters.read(now);
            self.charge_node(totals);
        }
    }

    /// [`State::sample_node`], only where the last reading is older than `age` (always with
    /// `None`).
    pub fn sample_node_older_than(&mut self, age: Option<std::time::Duration>) {
        let now = self.now();
        let fresh = |last: &NodeTotals, age: std::time::Duration| {
            now.saturating_sub(last.t_ns) < i64::try_from(age.as_nanos()).unwrap_or(i64::MAX)
        };
        if let (Some(age), Some(last)) = (age, self.node_part.last.as_ref())
            && fresh(last, age)
        {
            return;
        }
        self.sample_node();
    }

    /// Shares what the node drew since the last call among the running jobs, and persists
    /// their shares.
    pub fn charge_node(&mut self, now: NodeTotals) {
        let cpu = self.jobs_cpu_ns();
        if let Some(prev) = self.node_part.last.replace(now) {
            apportion::charge(&prev, &now, &mut self.running, cpu.as_ref());
        }
        let keys: Vec<JobKey> = self.running.keys().cloned().collect();
        self.save_node_shares(&keys);
    }

    /// Each running job's CPU time since the last reading (by job id), where every job's is
    /// known: its cgroup read now and at its last reading (a job begins at what its cgroup
    /// holds then, or zero before Slurm makes it; a job resumed after a restart, at its first
    /// reading).
    fn jobs_cpu_ns(&mut self) -> Option<BTreeMap<u32, u64>> {
        let cgroups = self.node_part.cgroups.as_ref()?;
        let mut used = BTreeMap::new();
        let mut known = true;
        for record in self.running.values().filter(|r| r.key.step.is_empty()) {
            let id = record.key.job_id;
            let now = cgroups.cpu_ns(record.uid, id);
            match (now, self.node_part.cpu_seen.get(&id)) {
                // A cgroup made again starts from zero.
                (Some(now), Some(&seen)) => {
                    used.insert(id, if now >= seen { now - seen } else { now });
                }
                // Read before and gone now: Slurm removes a job's cgroup once its processes
                // have ended, so it used no CPU since its last reading (at most a sample ago).
                (None, Some(_)) if self.node_part.cgroup_read.contains(&id) => {
                    used.insert(id, 0);
                }
                _ => known = false,
            }
            // A cgroup not there yet keeps the last known time.
            if let Some(now) = now {
                self.node_part.cpu_seen.insert(id, now);
                self.node_part.cgroup_read.insert(id);
            }
        }
        if known == self.node_part.by_time && !self.running.is_empty() {
            self.node_part.by_time = !known;
            match known {
                true => info!("every running job's cgroup is read: the node's energy is divided by CPU time"),
                false => info!(
                    "a running job's CPU time is not known (no Slurm cgroup of it, yet or any more): \
                     the node's energy is divided by time until it is"
                ),
            }
        }
        known.then_some(used)
    }

    /// At a job's begin or end: reads the node's meters, so that what the node drew until
    /// now is shared among the jobs that ran until now.
    pub(super) fn node_boundary(&mut self) {
        self.sample_node();
    }

    /// Where the energy is divided by CPU time: a new job's CPU time counts from what its
    /// cgroup holds now (zero before Slurm makes it).
    pub(super) fn node_job_began(&mut self, key: &JobKey, uid: u32) {
        if let Some(cgroups) = self.node_part.cgroups.as_ref().filter(|_| key.step.is_empty()) {
            let now = cgroups.cpu_ns(uid, key.job_id);
            self.node_part.cpu_seen.insert(key.job_id, now.unwrap_or(0));
            if now.is_some() {
                self.node_part.cgroup_read.insert(key.job_id);
            }
        }
    }

    /// Forgets an ended job's CPU time.
    pub(super) fn node_job_ended(&mut self, key: &JobKey) {
        if key.step.is_empty() {
            self.node_part.cpu_seen.remove(&key.job_id);
            self.node_part.cgroup_read.remove(&key.job_id);
        }
    }

    /// Whether a job that names no GPUs has anything to be accounted on this node: a share
    /// of the node's energy that is its figure's scope (not `gpu`).
    pub(super) fn accounts_cpu_only_jobs(&self) -> bool {
        self.node_part.empty.is_some_and(|s| s.scope != wattson_types::scope::EnergyScope::Gpu)
    }

    /// Writes the shares of `keys` (running records, or ended ones not yet recorded).
    pub(super) fn save_node_shares(&mut self, keys: &[JobKey]) {
        let shares: Vec<(JobKey, NodeShare)> = keys
            .iter()
            .filter_map(|k| {
                let record = self.running.get(k).or_else(|| self.unrecorded_ends.get(k))?;
                // A share with no part measured holds nothing to keep but its scope, written
                // at the begin.
                let share = record.node_share.filter(|s| s.cpu_mj.or(s.dram_mj).or(s.node_mj).is_some())?;
                Some((k.clone(), share))
            })
            .collect();
        if shares.is_empty() {
            return;
        }
        if let Err(e) = self.store.save_node_shares(&shares) {
            warn!(error = %e, "cannot persist the jobs' node energy shares; will retry next sample");
        }
    }
}
