//! The daemon's state and its operations: begin and end jobs, sample the GPUs, answer queries.
//!
//! Blocking by design (NVML and SQLite are): the async server runs each operation on a
//! blocking thread. Every job-boundary change is committed to the store before the caller is
//! answered; every sample persists the running meters, so a restart resumes them.

use std::collections::BTreeMap;
use std::time::Duration;

use tracing::{info, warn};

use crate::energy::{GpuMeter, GpuReading};
use crate::gpu::{GpuBackend, GpuError, now_ns};
use crate::job::{JobGpu, JobKey, JobRecord, JobState};
use crate::protocol::{AcctFilter, GpuStatus, JobBegin, Reply};
use crate::store::{AcctQuery, BeginOutcome, Sample, Store};

/// One sampling tick's outcome, for metrics and logs.
#[derive(Debug, Default)]
pub struct Tick {
    /// Each GPU's reading or error, by index.
    pub readings: Vec<Result<GpuReading, GpuError>>,
    /// Each running job's GPU energy so far: (job, GPU index, mJ).
    pub job_energy: Vec<(JobKey, u32, f64)>,
}

/// The daemon's state.
pub struct Core {
    backend: Box<dyn GpuBackend>,
    store: Store,
    node: String,
    running: BTreeMap<JobKey, JobRecord>,
    series_interval_ns: i64,
    last_series_ns: i64,
}

impl Core {
    /// Builds the state and resumes the jobs the store says are running.
    pub fn new(
        backend: Box<dyn GpuBackend>,
        store: Store,
        node: String,
        series_interval: Duration,
    ) -> Result<Core, String> {
        let resumed =
            store.running_jobs().map_err(|e| format!("cannot read running jobs from the store: {e}"))?;
        let running: BTreeMap<JobKey, JobRecord> = resumed.into_iter().map(|r| (r.key.clone(), r)).collect();
        for key in running.keys() {
            info!(job = %key, "resumed running job from the store");
        }
        Ok(Core {
            backend,
            store,
            node,
            running,
            series_interval_ns: series_interval.as_nanos() as i64,
            last_series_ns: 0,
        })
    }

    /// The GPU backend.
    pub fn backend(&self) -> &dyn GpuBackend {
        self.backend.as_ref()
    }

    /// The node name recorded with jobs.
    pub fn node(&self) -> &str {
        &self.node
    }

    /// Jobs currently running, by key.
    pub fn running(&self) -> impl Iterator<Item = &JobRecord> {
        self.running.values()
    }

    /// Records a job's start: reads its GPUs' counters and commits the record.
    pub fn begin(&mut self, req: JobBegin) -> Result<Reply, String> {
        req.hints.validate()?;
        if req.gpus.is_empty() {
            return Err(format!("job {} names no GPUs: nothing to account on this node", req.job));
        }
        let mut indices = Vec::with_capacity(req.gpus.len());
        for gpu in &req.gpus {
            let index = self.backend.resolve(gpu).map_err(|e| format!("job {}: {e}", req.job))?;
            if indices.contains(&index) {
                return Err(format!("job {}: GPU {index} is named twice", req.job));
            }
            indices.push(index);
        }
        indices.sort_unstable();
        if let Some(existing) = self.running.get(&req.job) {
            let same_gpus = existing.gpus.iter().map(|g| g.index).eq(indices.iter().copied());
            if existing.uid == req.uid && same_gpus {
                return Ok(Reply::Begun { job: req.job, already_running: true });
            }
            return Err(format!("job {} is already running with other GPUs or another owner", req.job));
        }
        for other in self.running.values().filter(|r| r.key.job_id != req.job.job_id) {
            if let Some(g) = other.gpus.iter().find(|g| indices.contains(&g.index)) {
                return Err(format!(
                    "GPU {} is in use by job {} (if that job is gone, end it first: wattson job end --job {})",
                    g.index, other.key, other.key
                ));
            }
        }
        let t = now_ns();
        let gpus: Vec<JobGpu> = indices.iter().map(|&index| self.begin_gpu(index, t)).collect();
        let record = JobRecord {
            key: req.job.clone(),
            uid: req.uid,
            user: req.user,
            name: req.name,
            node: self.node.clone(),
            begin_ns: gpus.iter().map(|g| g.meter.begin_ns).min().unwrap_or(t),
            end_ns: None,
            state: JobState::Running,
            hints: req.hints,
            gpus,
        };
        let outcome = self
            .store
            .begin_job(&record)
            .map_err(|e| format!("job {}: cannot record the start: {e}", req.job))?;
        info!(job = %record.key, uid = record.uid, gpus = ?indices, "job began");
        let already_running = matches!(outcome, BeginOutcome::AlreadyRunning);
        self.running.insert(record.key.clone(), record);
        Ok(Reply::Begun { job: req.job, already_running })
    }

    fn begin_gpu(&self, index: u32, t: i64) -> JobGpu {
        let info = &self.backend.devices()[index as usize];
        let meter = match self.backend.read(index) {
            Ok(reading) => GpuMeter::begin(reading),
            Err(e) => {
                warn!(gpu = index, error = %e, "GPU did not answer at job start");
                GpuMeter::begin_lost(t)
            }
        };
        JobGpu { index, uuid: info.uuid.clone(), name: info.name.clone(), meter }
    }

    /// Records a job's end: a final reading of its GPUs, then the committed final record.
    /// Ending a job that already ended returns its record again.
    pub fn end(&mut self, key: &JobKey) -> Result<Reply, String> {
        let Some(mut record) = self.running.get(key).cloned() else {
            let query = AcctQuery { jobs: vec![key.clone()], ..AcctQuery::default() };
            let done = self.store.query(&query).map_err(|e| e.to_string())?;
            return match done.into_iter().rev().find(|r| r.key == *key && r.state == JobState::Completed) {
                Some(record) => Ok(Reply::Ended { record }),
                None => Err(format!("job {key} is not running on this node")),
            };
        };
        let mut end_ns = now_ns();
        for gpu in &mut record.gpus {
            match self.backend.read(gpu.index) {
                Ok(reading) => {
                    gpu.meter.advance(reading);
                    end_ns = end_ns.max(reading.t_ns);
                }
                Err(e) => {
                    warn!(job = %key, gpu = gpu.index, error = %e, "GPU did not answer at job end");
                    gpu.meter.mark_lost(end_ns);
                }
            }
        }
        let stored = self
            .store
            .end_job(key, end_ns, &record.gpus)
            .map_err(|e| format!("job {key}: cannot record the end: {e}"))?;
        self.running.remove(key);
        info!(job = %key, energy_j = stored.energy_j(), "job ended");
        Ok(Reply::Ended { record: stored })
    }

    /// Reads every GPU once, advances every running job's meters and persists them.
    pub fn sample(&mut self) -> Tick {
        let count = self.backend.devices().len() as u32;
        let readings: Vec<Result<GpuReading, GpuError>> = (0..count).map(|i| self.backend.read(i)).collect();
        let now = now_ns();
        let with_series = now - self.last_series_ns >= self.series_interval_ns;
        let mut updates = Vec::with_capacity(self.running.len());
        let mut series = Vec::new();
        let mut job_energy = Vec::new();
        for record in self.running.values_mut() {
            for gpu in &mut record.gpus {
                match &readings[gpu.index as usize] {
                    Ok(reading) => gpu.meter.advance(*reading),
                    Err(_) => gpu.meter.mark_lost(now),
                }
                job_energy.push((record.key.clone(), gpu.index, gpu.meter.energy_mj));
                if with_series && !gpu.meter.lost {
                    let r = gpu.meter.last;
                    series.push((
                        record.key.clone(),
                        Sample {
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
                        self.last_series_ns = now;
                    }
                }
                Err(e) => warn!(error = %e, "cannot persist running meters; will retry next sample"),
            }
        }
        Tick { readings, job_energy }
    }

    /// Every GPU with a fresh reading, its settings and the jobs using it.
    pub fn status(&self) -> Reply {
        let gpus = self
            .backend
            .devices()
            .iter()
            .map(|info| {
                let reading = self.backend.read(info.index);
                let settings = self.backend.settings(info.index).ok();
                let jobs = self
                    .running
                    .values()
                    .filter(|r| r.gpus.iter().any(|g| g.index == info.index))
                    .map(|r| r.key.clone())
                    .collect();
                GpuStatus {
                    info: info.clone(),
                    error: reading.as_ref().err().map(|e| e.to_string()),
                    reading: reading.ok(),
                    settings,
                    processes: self.backend.compute_processes(info.index).unwrap_or_default(),
                    jobs,
                }
            })
            .collect();
        Reply::Status { node: self.node.clone(), gpus }
    }

    /// Recorded jobs matching `filter`; running jobs show their live meters.
    pub fn acct(&self, filter: &AcctFilter) -> Result<Reply, String> {
        let mut records = self.store.query(&filter.query()).map_err(|e| e.to_string())?;
        for record in records.iter_mut().filter(|r| r.state == JobState::Running) {
            if let Some(live) = self.running.get(&record.key) {
                record.gpus = live.gpus.clone();
            }
        }
        Ok(Reply::Acct { records })
    }
}
