//! A job's or step's begin: its GPUs read at the boundary, its settings applied, its record
//! committed before the caller is answered.

use std::collections::BTreeSet;

use tracing::{info, warn};

use super::{State, gpus, not_running};
use crate::adapt::Changes;
use crate::{apportion, enforce};
use wattson_protocol::{Error, ErrorCode, JobBegin, Reply};
use wattson_store::{BeginOutcome, Hold};
use wattson_types::job::{JobGpu, JobKey, JobRecord, JobState};

impl State {
    /// Records a job's start: reads its GPUs' counters and commits the record.
    pub fn begin(&mut self, mut req: JobBegin) -> Result<Reply, Error> {
        req.hints.validate().map_err(|e| Error::new(ErrorCode::BadRequest, e))?;
        req.hints.normalize();
        let job_here = self.running.get(&JobKey::job(req.job.job_id)).filter(|_| !req.job.step.is_empty());
        let mut indices = Vec::with_capacity(req.gpus.len());
        if let Some(job) = job_here {
            if job.uid != req.uid {
                return Err(Error::new(
                    ErrorCode::Conflict,
                    format!("step {}: another owner than its job", req.job),
                ));
            }
            // A step naming no GPUs (the SPANK plugin's) runs on its job's GPUs here.
            if req.gpus.is_empty() {
                indices.extend(job.gpus.iter().map(|g| g.index));
            }
            // A step runs on its job's settings: it is recorded with its job's owner names
            // and hints, whatever it asked.
            req.user = req.user.or_else(|| job.user.clone());
            req.name = req.name.or_else(|| job.name.clone());
            req.hints = job.hints.clone();
        } else if req.gpus.is_empty() {
            if !req.job.step.is_empty() {
                return Err(not_running(&JobKey::job(req.job.job_id)));
            }
            // A CPU-only job gets its share of the node's energy where the scope counts it.
            if !self.accounts_cpu_only_jobs() {
                return Err(Error::new(
                    ErrorCode::BadRequest,
                    format!("job {} names no GPUs: nothing to account on this node (scope \"gpu\")", req.job),
                ));
            }
        }
        // The MIG instances the job holds, by their GPU's index (a step naming none: its job's).
        let mut instances = gpus::instances_of(job_here.filter(|_| req.gpus.is_empty()));
        gpus::resolve(self.backend.as_ref(), &req.gpus, &mut indices, &mut instances)
            .map_err(|e| Error::new(ErrorCode::BadRequest, format!("job {}: {e}", req.job)))?;
        indices.sort_unstable();
        // MIG instances share their GPU with whatever jobs hold its other instances; a GPU in
        // MIG mode named whole (never by Slurm) is held the same way.
        let devices = self.backend.devices();
        let mig = !instances.is_empty()
            || indices.iter().any(|&i| devices.get(i as usize).is_some_and(|d| !d.mig.is_empty()));
        if let Some(existing) = self.running.get(&req.job) {
            let same_gpus = existing.gpus.iter().map(|g| g.index).eq(indices.iter().copied());
            if existing.uid == req.uid && same_gpus {
                let (decision, settings) = (
                    self.decision_of(existing),
                    enforce::journaled(&self.store, &JobKey::job(req.job.job_id)),
                );
                return Ok(Reply::Begun { job: req.job, already_running: true, decision, settings });
            }
            return Err(Error::new(
                ErrorCode::Conflict,
                format!("job {} is already running with other GPUs or another owner", req.job),
            ));
        }
        let whole = req.job.step.is_empty() && !req.shares_gpus && !mig && !indices.is_empty();
        if whole {
            for key in apportion::lost_ends(&self.running, &self.exclusive, req.job.job_id, &indices) {
                warn!(job = %key, new_job = %req.job, "GPUs given to another job: ending the job whose end was never reported");
                if let Err(e) = self.end(&key) {
                    warn!(job = %key, error = %e, "cannot end the job whose end was never reported");
                }
            }
        }
        // Slurm may give a GPU to several jobs (shards, MPS, oversubscription): each keeps
        // its own record. The records already on these GPUs are advanced to the new job's
        // first reading, so that from then on the GPU's energy is divided among them all.
        let partners: BTreeSet<u32> = indices
            .iter()
            .flat_map(|&i| apportion::jobs_on(&self.running, i))
            .map(|(job, _)| job)
            .filter(|&job| job != req.job.job_id)
            .collect();
        // What the node drew until now is the jobs' that ran until now.
        self.node_boundary();
        let t = self.now();
        let account = req.account.clone();
        let readings = self.boundaries.read(self.backend.as_ref(), &indices);
        for (&index, reading) in indices.iter().zip(&readings) {
            self.advance_gpu(index, reading, t);
        }
        for &job in &partners {
            self.hold_for_sharing(job);
        }
        let mut gpus: Vec<JobGpu> = indices
            .iter()
            .zip(readings)
            .map(|(&index, reading)| gpus::begin_gpu(self.backend.as_ref(), index, reading, t))
            .collect();
        for gpu in &mut gpus {
            gpu.meter.mig = instances.remove(&gpu.index).unwrap_or_default();
        }
        let mut record = JobRecord {
            key: req.job.clone(),
            uid: req.uid,
            user: req.user,
            name: req.name,
            node: self.node.clone(),
            begin_ns: gpus.iter().map(|g| g.meter.begin_ns).min().unwrap_or(t),
            end_ns: None,
            state: JobState::Running,
            hints: req.hints,
            policy: None,
            gpus,
            dvfs: None,
            node_share: self.node_part.empty,
        };
        // Recorded with the start: the policy that runs, which may differ from the one asked.
        let decision = self.decision_of(&record);
        record.policy = Some(decision.policy);
        let hold = if whole { Hold::Whole } else { Hold::Shared };
        let outcome = self.store.begin_job(&record, hold).map_err(|e| {
            Error::new(ErrorCode::Store, format!("job {}: cannot record the start: {e}", req.job))
        })?;
        info!(job = %record.key, uid = record.uid, account = account.as_deref().unwrap_or(""), gpus = ?indices, "job began");
        let already_running = matches!(outcome, BeginOutcome::AlreadyRunning);
        if whole {
            self.exclusive.insert(record.key.job_id);
        }
        if !already_running && let Some(share) = record.node_share {
            // Until the first sample writes it again; a failure here is retried there.
            let _ = self.store.save_node_shares(&[(record.key.clone(), share)]);
        }
        if !partners.is_empty() {
            info!(job = %record.key, with = ?partners, "job shares its GPUs: their energy is divided, and they run at their defaults");
            self.sharing.insert(record.key.job_id);
        }
        if mig && self.sharing.insert(record.key.job_id) {
            // A GPU's power limit and clocks are all its instances': never set for one job.
            info!(job = %record.key, "job holds MIG instances: its GPUs' energy is divided by their compute slices, and they stay at their defaults");
        }
        // Settings belong to the whole job; its steps run on them. A job that shares a GPU
        // gets none: one job's setting never applies to a GPU another job holds. A read-only
        // node changes no GPU, so probes none.
        let settings = if self.at_defaults(record.key.job_id) || record.gpus.is_empty() {
            Changes::default()
        } else if !record.key.step.is_empty() || (decision.by_model() && already_running) {
            enforce::journaled(&self.store, &JobKey::job(record.key.job_id))
        } else if decision.by_model() {
            let info = &self.backend.devices()[record.gpus[0].index as usize];
            let now = self.now();
            let wanted =
                self.prober.begin(&record, account.as_deref(), &decision, info, &mut self.store, now);
            self.apply_settings(&record.key, &wanted)
        } else {
            let wanted = enforce::fixed(self.backend.as_ref(), &record, &decision);
            self.apply_settings(&record.key, &wanted)
        };
        if record.key.step.is_empty() && !already_running {
            gpus::note_settings(&mut record, settings.iter().map(|&(gpu, s)| (gpu, Some(s))), self.now());
        }
        self.node_job_began(&record.key, record.uid);
        self.running.insert(record.key.clone(), record);
        Ok(Reply::Begun { job: req.job, already_running, decision, settings })
    }
}
