//! The daemon's state and its operations: begin and end jobs, advance the meters with each
//! sample, hold GPU settings and the prober.
//!
//! One owner ([`crate::owner`]) holds it on its own thread and feeds it commands; nobody else
//! touches it. Blocking by design (SQLite is; GPU calls go through [`crate::gpu_pool::GpuPool`],
//! each with a deadline). Every job-boundary change is committed to the store before the caller
//! is answered; every sample persists the running meters, so a restart resumes them.

mod begin;
mod gpus;
mod node;
mod pace;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tracing::{error, info, warn};

use crate::adapt::{Changes, Prober};
use crate::apportion;
use crate::boundary::Boundaries;
use crate::clock::Clock;
use crate::enforce;
use crate::identity;
use crate::safedir::EngineDirs;
use wattson_config::Config;
use wattson_config::policy::{Decision, SitePolicy};
use wattson_engine::Measurements;
use wattson_gpu::{GpuBackend, GpuError, GpuSetting};
use wattson_protocol::{Error, ErrorCode, Pace, Reply};
use wattson_store::{AcctQuery, Store, Unreadable};
use wattson_types::energy::{GpuReading, SeriesPoint};
use wattson_types::job::{JobKey, JobRecord, JobState};

/// One sampling tick's outcome, for metrics and logs.
#[derive(Debug, Default)]
pub struct Tick {
    /// Each GPU's reading or error, by index.
    pub readings: Vec<Result<GpuReading, GpuError>>,
    /// Each running job's GPU energy so far: (job, GPU index, mJ).
    pub job_energy: Vec<(JobKey, u32, f64)>,
    /// Each shared GPU's energy that processes of no job on it used since the daemon started
    /// (GPU index, mJ).
    pub unattributed: BTreeMap<u32, f64>,
}

/// The daemon's state.
pub struct State {
    backend: Arc<dyn GpuBackend>,
    clock: Arc<dyn Clock>,
    store: Store,
    node: String,
    policy: SitePolicy,
    running: BTreeMap<JobKey, JobRecord>,
    series_interval: std::time::Duration,
    /// When the last power series point was stored (monotonic).
    last_series: Option<std::time::Duration>,
    /// GPUs whose restore failed and is retried at every sample.
    restores_pending: usize,
    /// Jobs that ended (final readings taken, GPUs restored) whose end the store refused;
    /// written at every sample until it accepts them.
    unrecorded_ends: BTreeMap<JobKey, JobRecord>,
    /// Jobs whose power limit the DVFS models choose.
    prober: Prober,
    /// Jobs the controller holds off their energy-saving setting (by job id): at full speed
    /// while a queue waits, or at a level of their table under the cluster power budget.
    paced: BTreeMap<u32, Pace>,
    /// The node's energy besides its GPUs: its meters and the jobs' shares ([`node`]).
    node_part: node::NodePart,
    /// Jobs that share a GPU with another job: held at their GPUs' defaults (by job id).
    sharing: BTreeSet<u32>,
    /// Jobs that hold whole GPUs, no one else's (by job id); kept in the store with their
    /// records, so that a restart does not make them look shared.
    exclusive: BTreeSet<u32>,
    /// Each shared GPU's energy used by processes of no job on it, given to no job (mJ).
    unattributed: BTreeMap<u32, f64>,
    /// What is known of each GPU's counter steps, for readings at jobs' begins and ends.
    boundaries: Boundaries,
    /// No GPU setting is changed (`[gpu] read_only`): every job runs at what its GPUs have.
    read_only: bool,
}

impl State {
    /// Builds the state, resumes the jobs the store says are running, and returns to their
    /// defaults the GPUs that were changed for jobs that are not. The models' files go in
    /// `dirs`.
    pub fn new(
        backend: Arc<dyn GpuBackend>,
        clock: Arc<dyn Clock>,
        store: Store,
        node: String,
        config: &Config,
        dirs: EngineDirs,
    ) -> Result<State, String> {
        let mut store = store;
        let (resumed, quarantined) = store
            .running_jobs_or_quarantine(clock.wall_ns())
            .map_err(|e| format!("cannot read running jobs from the store: {e}"))?;
        for (key, reason) in quarantined {
            error!(job = %key, reason = %reason, "a running job's record cannot be read: moved to the store's quarantine table; the job is no longer metered");
        }
        let whole =
            store.running_whole().map_err(|e| format!("cannot read running jobs from the store: {e}"))?;
        // By UUID: NVML may have numbered the GPUs otherwise since the last start.
        let running = identity::match_gpus(backend.as_ref(), &mut store, resumed, clock.wall_ns())?;
        let exclusive = running.keys().filter(|key| whole.contains(key)).map(|key| key.job_id).collect();
        for key in running.keys() {
            info!(job = %key, "resumed running job from the store");
        }
        let mut core = State {
            backend,
            clock,
            store,
            node,
            policy: config.policy.clone(),
            running,
            series_interval: config.daemon.series_interval,
            last_series: None,
            restores_pending: 0,
            unrecorded_ends: BTreeMap::new(),
            prober: Prober::new(config.engine.clone(), dirs),
            paced: BTreeMap::new(),
            node_part: node::NodePart::default(),
            sharing: BTreeSet::new(),
            exclusive,
            unattributed: BTreeMap::new(),
            boundaries: Boundaries::default(),
            read_only: config.gpu.read_only,
        };
        // Jobs that shared a GPU when the daemon stopped stay at their defaults.
        let indices: BTreeSet<u32> =
            core.running.values().flat_map(|r| r.gpus.iter().map(|g| g.index)).collect();
        for index in indices {
            let jobs = apportion::jobs_on(&core.running, index);
            if jobs.len() > 1 {
                core.sharing.extend(jobs.into_iter().map(|(job, _)| job));
            }
        }
        // So do jobs on MIG instances, alone on their GPU or not.
        let mig_jobs = gpus::mig_jobs(&core.running);
        core.sharing.extend(mig_jobs);
        core.restores_pending = core.restore_orphans();
        let running = &core.running;
        enforce::reapply_running(core.backend.as_ref(), &core.store, |job| running.contains_key(job));
        identity::restore_unowned(core.backend.as_ref(), &core.running);
        core.resume_models();
        Ok(core)
    }

    /// The jobs whose setting the models chose when the daemon stopped: the prober takes them
    /// up again (from full speed), so none is left at a probe's setting to its end.
    fn resume_models(&mut self) {
        let jobs: Vec<JobRecord> = self
            .running
            .values()
            .filter(|r| r.key.step.is_empty() && !r.gpus.is_empty() && self.decision_of(r).by_model())
            .filter(|r| !self.at_defaults(r.key.job_id))
            .cloned()
            .collect();
        for record in jobs {
            let Some(info) = self.backend.devices().get(record.gpus[0].index as usize).cloned() else {
                continue;
            };
            let decision = self.decision_of(&record);
            let now = self.now();
            let wanted = self.prober.resume_after_restart(&record, &decision, &info, &mut self.store, now);
            self.apply_settings(&record.key, &wanted);
        }
    }

    /// The running jobs with their meters as of the last sample or job boundary.
    pub fn running(&self) -> impl Iterator<Item = &JobRecord> {
        self.running.values()
    }

    /// Whether `key` is running.
    pub fn is_running(&self, key: &JobKey) -> bool {
        self.running.contains_key(key)
    }

    /// Whether job `job_id`'s GPUs stay at what they have: it shares a GPU, or the node is
    /// read only (`[gpu] read_only`).
    fn at_defaults(&self, job_id: u32) -> bool {
        self.read_only || self.sharing.contains(&job_id)
    }

    /// The wall time now, in ns.
    fn now(&self) -> i64 {
        self.clock.wall_ns()
    }

    /// Journals and applies settings of `job`'s GPUs; returns what was applied, and records
    /// it with the job if it is running.
    fn apply_settings(&mut self, job: &JobKey, wanted: &[(u32, GpuSetting)]) -> Changes {
        let now = self.now();
        let applied = enforce::apply(self.backend.as_ref(), &mut self.store, job, wanted, now);
        if let Some(record) = self.running.get_mut(job) {
            gpus::note_settings(record, applied.iter().map(|&(gpu, s)| (gpu, Some(s))), now);
        }
        applied
    }

    /// Returns to defaults every journaled GPU whose job is not running; returns how many
    /// are still waiting to be restored.
    pub fn restore_orphans(&mut self) -> usize {
        let running = &self.running;
        enforce::restore_orphans(self.backend.as_ref(), &mut self.store, |job| running.contains_key(job))
    }

    /// The site policy's decision for a job; deterministic, so it is recomputed, not stored.
    fn decision_of(&self, record: &JobRecord) -> Decision {
        let user = record.user.clone().unwrap_or_else(|| record.uid.to_string());
        self.policy.decide(&record.hints, &user)
    }

    /// The decision and the GPU settings of a running job.
    pub fn settings(&self, key: &JobKey) -> Result<Reply, Error> {
        let record = self.running.get(key).ok_or_else(|| not_running(key))?;
        let decision = self.decision_of(record);
        let settings = enforce::journaled(&self.store, &JobKey::job(key.job_id));
        Ok(Reply::Settings { job: key.clone(), uid: record.uid, decision, settings })
    }

    /// Every workload's measurements in the store, for the controller's merge.
    pub fn models(&self) -> Result<Reply, Error> {
        let models = self.store.models().map_err(|e| Error::new(ErrorCode::Store, e.to_string()))?;
        Ok(Reply::Models { node: self.node.clone(), models })
    }

    /// Takes the controller's merge where it is newer than the store's copies, and rewrites
    /// the model table if anything changed. Running jobs keep what they began with.
    pub fn merge_models(&mut self, models: &[Measurements]) -> Result<Reply, Error> {
        let taken =
            self.store.merge_models(models).map_err(|e| Error::new(ErrorCode::Store, e.to_string()))?;
        if taken > 0 {
            info!(taken, "workload measurements taken from the controller's merge");
            self.prober.write_model_table(&self.store);
        }
        Ok(Reply::ModelsMerged { node: self.node.clone(), taken })
    }

    /// Moves the records of `rows` that still cannot be read to the store's quarantine, each
    /// logged (a reader met them; [`wattson_store::Store::query_readable`]).
    pub fn quarantine(&mut self, rows: &[Unreadable]) {
        let now = self.now();
        for row in rows {
            match self.store.quarantine_unreadable(row, now) {
                Ok(Some(reason)) => {
                    error!(reason = %reason, "a record cannot be read: moved to the store's quarantine table; acct leaves it out")
                }
                Ok(None) => {}
                Err(e) => warn!(error = %e, "cannot move an unreadable record to the quarantine table"),
            }
        }
    }

    /// Advances every record on GPU `index` with one reading of it ([`apportion::advance_gpu`]).
    /// Energy that processes of no job used is counted apart, and said once per GPU.
    fn advance_gpu(&mut self, index: u32, reading: &Result<GpuReading, GpuError>, t: i64) {
        let advanced = apportion::advance_gpu(
            &mut self.running,
            &self.exclusive,
            self.backend.as_ref(),
            index,
            reading,
            t,
        );
        if advanced.unattributed_mj > 0.0 {
            let total = self.unattributed.entry(index).or_default();
            if *total == 0.0 {
                warn!(gpu = index, pids = ?advanced.unattributed_pids, "processes of no job on this shared GPU use it: their part of its energy is given to no job, counted as the GPU's unattributed energy (wattson_gpu_unattributed_energy_joules)");
            }
            *total += advanced.unattributed_mj;
        }
    }

    /// Holds a job that comes to share a GPU with another at its GPUs' defaults from now on:
    /// its models stop and its settings are released (defaults never slow a job down).
    fn hold_for_sharing(&mut self, job_id: u32) {
        if !self.sharing.insert(job_id) {
            return;
        }
        self.release_to_defaults(&JobKey::job(job_id), "sharing");
    }

    /// Returns job `key`'s GPUs to their defaults and stops its models' measurements, for
    /// `why` (`pace`, `sharing`: the log's prefix).
    fn release_to_defaults(&mut self, key: &JobKey, why: &str) {
        self.prober.pause(key.job_id);
        let stuck = enforce::release(self.backend.as_ref(), &mut self.store, key);
        if stuck > 0 {
            warn!(job = %key, gpus = stuck, "{why}: GPUs could not go back to their defaults");
        }
        let now = self.now();
        if let Some(running) = self.running.get_mut(key) {
            let gpus: Vec<u32> = running.gpus.iter().map(|g| g.index).collect();
            gpus::note_settings(running, gpus.into_iter().map(|gpu| (gpu, None)), now);
        }
    }

    /// Records a job's end: a final reading of its GPUs, then the committed final record.
    /// Ending a job that already ended returns its record again.
    pub fn end(&mut self, key: &JobKey) -> Result<Reply, Error> {
        if key.step.is_empty() {
            // A job's steps end with it, whether or not their own end was reported.
            let steps: Vec<JobKey> = self
                .running
                .keys()
                .filter(|k| k.job_id == key.job_id && !k.step.is_empty())
                .cloned()
                .collect();
            for step in steps {
                if let Err(e) = self.end(&step) {
                    warn!(job = %step, error = %e, "cannot end a step of an ending job");
                }
            }
        }
        if self.unrecorded_ends.contains_key(key) {
            return self.record_end(key);
        }
        let Some(mut record) = self.running.get(key).cloned() else {
            let query = AcctQuery { jobs: vec![key.clone()], ..AcctQuery::default() };
            let done = self.store.query(&query).map_err(|e| Error::new(ErrorCode::Store, e.to_string()))?;
            return match done.into_iter().rev().find(|r| r.key == *key && r.state == JobState::Completed) {
                Some(record) => Ok(Reply::Ended { record }),
                None => Err(not_running(key)),
            };
        };
        let mut end_ns = self.now();
        let indices: Vec<u32> = record.gpus.iter().map(|g| g.index).collect();
        // Every record on these GPUs is advanced with the final reading: the GPU's energy up
        // to now is divided among all the jobs on it, this one included.
        for (&index, reading) in indices.iter().zip(self.boundaries.read(self.backend.as_ref(), &indices)) {
            match &reading {
                Ok(reading) => end_ns = end_ns.max(reading.t_ns),
                Err(e) => warn!(job = %key, gpu = index, error = %e, "GPU did not answer at job end"),
            }
            self.advance_gpu(index, &reading, end_ns);
        }
        // The node's energy up to now is shared among the jobs running now, this one included.
        self.node_boundary();
        if let Some(advanced) = self.running.get(key) {
            record.gpus.clone_from(&advanced.gpus);
            record.node_share = advanced.node_share;
        }
        // A wall clock stepped back during the job gives no negative duration.
        end_ns = end_ns.max(record.begin_ns);
        if key.step.is_empty() {
            let now = self.now();
            record.dvfs = self.prober.end(&record, &mut self.store, now).map(Box::new);
        }
        // The job has ended whether or not the store takes the record now: the record is
        // kept until it is written, and its GPUs go back to their defaults either way. The
        // end is written first, so that a crash between the two leaves a GPU whose job is
        // recorded as ended: the restore journal returns it to its defaults at the restart.
        record.end_ns = Some(end_ns);
        self.running.remove(key);
        self.node_job_ended(key);
        self.unrecorded_ends.insert(key.clone(), record);
        let reply = self.record_end(key);
        if key.step.is_empty() {
            self.paced.remove(&key.job_id);
            self.sharing.remove(&key.job_id);
            self.exclusive.remove(&key.job_id);
            self.restores_pending = self.restore_orphans();
        }
        reply
    }

    /// Writes the end of `key` (an entry of `unrecorded_ends`) to the store. On failure the
    /// entry stays, to be written at the next sample.
    fn record_end(&mut self, key: &JobKey) -> Result<Reply, Error> {
        self.save_node_shares(std::slice::from_ref(key));
        let record = &self.unrecorded_ends[key];
        let end_ns = record.end_ns.unwrap_or_default();
        match self.store.end_job(key, end_ns, &record.gpus) {
            Ok(stored) => {
                self.unrecorded_ends.remove(key);
                info!(job = %key, energy_j = stored.energy_j(), "job ended");
                Ok(Reply::Ended { record: stored })
            }
            Err(e) => {
                warn!(job = %key, error = %e, "cannot record a job's end; kept, retried at every sample");
                Err(Error::new(
                    ErrorCode::Store,
                    format!(
                        "job {key}: ended and its GPUs restored, but the end cannot be recorded yet \
                         ({e}); it is kept and recorded as soon as the store accepts it"
                    ),
                ))
            }
        }
    }

    /// Advances every running job's meters with one reading of every GPU (by index) and
    /// persists them.
    pub fn sample(&mut self, readings: Vec<Result<GpuReading, GpuError>>) -> Tick {
        if self.restores_pending > 0 {
            self.restores_pending = self.restore_orphans();
        }
        let unrecorded: Vec<JobKey> = self.unrecorded_ends.keys().cloned().collect();
        for key in unrecorded {
            let _ = self.record_end(&key);
        }
        let now = self.now();
        let mono = self.clock.monotonic();
        let with_series =
            self.last_series.is_none_or(|last| mono.saturating_sub(last) >= self.series_interval);
        let mut updates = Vec::with_capacity(self.running.len());
        let mut series = Vec::new();
        let mut job_energy = Vec::new();
        let held: BTreeSet<u32> =
            self.running.values().flat_map(|r| r.gpus.iter().map(|g| g.index)).collect();
        for index in held {
            let reading = readings.get(index as usize).cloned().unwrap_or(Err(GpuError::Lost));
            self.advance_gpu(index, &reading, now);
        }
        for record in self.running.values_mut() {
            for gpu in &mut record.gpus {
                job_energy.push((record.key.clone(), gpu.index, gpu.meter.energy_mj));
                if with_series && !gpu.meter.lost {
                    let r = gpu.meter.last;
                    series.push((
                        record.key.clone(),
                        SeriesPoint {
                            t_ns: r.t_ns,
                            gpu_index: gpu.index,
                            power_mw: r.power_mw,
                            sm_clock_mhz: r.sm_clock_mhz,
                            util_pct: r.util_pct,
                            energy_mj: gpu.meter.energy_mj,
                        },
                    ));
                }
            }
            updates.push((record.key.clone(), record.gpus.clone()));
        }
        if !updates.is_empty() {
            match self.store.save_meters_many(&updates, &series) {
                Ok(skipped) => {
                    for key in skipped {
                        warn!(job = %key, "running job has no running record in the store");
                    }
                    if with_series {
                        self.last_series = Some(mono);
                    }
                }
                Err(e) => warn!(error = %e, "cannot persist running meters; will retry next sample"),
            }
        }
        if !self.prober.is_empty() {
            let changes: Vec<(JobKey, Changes)> =
                self.prober.tick(&self.running, &readings, &mut self.store, now);
            for (job, wanted) in changes {
                if !self.paced.contains_key(&job.job_id) && !self.at_defaults(job.job_id) {
                    self.apply_settings(&job, &wanted);
                }
            }
        }
        Tick { readings, job_energy, unattributed: self.unattributed.clone() }
    }
}

/// The answer about a job that does not run here (also to a user asking about another's).
pub(crate) fn not_running(key: &JobKey) -> Error {
    Error::new(ErrorCode::NotRunning, format!("job {key} is not running on this node"))
}
