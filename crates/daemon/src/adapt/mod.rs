//! The DVFS models at work on a node (`[policy] enact = "model"`).
//!
//! For each job the models decide, the engine ([`wattson_engine::probe`]) says which setting of
//! the GPU type's knob (`[engine] knob`: power limit or locked SM clock) to measure next or
//! which to settle on; this module holds each setting, measures it
//! over a window (GPU energy from the job's meters; work from the job's progress file, else
//! SM clock × utilisation), and records what it did in the job's record. When the job ends,
//! the settled window is measured too, and every window joins the workload's stored
//! measurements, so the next run of the same tag starts from them (and usually settles at
//! once). The model table for `job_submit/wattson` is rewritten after each change.
//!
//! The prober holds no GPU and no store of its own: it is handed readings and the store, and
//! returns the setting changes it wants, which the daemon's state applies and journals.
//!
//! A daemon restart loses the probing state of a run (its windows so far): the prober takes the
//! job up again from full speed with its earlier runs' measurements, as at its begin, and
//! probes and settles again.

mod measure;

use std::collections::BTreeMap;
use std::sync::Arc;

use tracing::{info, warn};

use crate::safedir::{EngineDirs, TrustedDir};
use wattson_config::EngineConfig;
use wattson_config::policy::Decision;
use wattson_engine::{Knob, Measurements, ModelTable, Sample, Step};
use wattson_gpu::{GpuError, GpuInfo, GpuSetting};
use wattson_store::Store;
use wattson_types::energy::GpuReading;
use wattson_types::job::{JobDvfs, JobKey, JobRecord, Progress};
use wattson_types::model_owner::ModelOwner;

use measure::{Mark, mark};

/// Setting changes for a job's GPUs, by GPU index.
pub(crate) type Changes = Vec<(u32, GpuSetting)>;

/// One job whose setting the models choose.
pub(super) struct Adaptive {
    /// Whose models it uses and adds to.
    owner: ModelOwner,
    policy: wattson_engine::Objective,
    /// The knob the settings are on.
    knob: Knob,
    /// The settings the models may choose among, ascending (W or MHz).
    settings: Vec<f64>,
    /// Earlier runs' measurements, by unit of work.
    earlier: BTreeMap<&'static str, Vec<Sample>>,
    /// This run's measured windows.
    measured: Vec<Sample>,
    /// Windows closed in this run, with or without work seen.
    windows: usize,
    dvfs: JobDvfs,
    /// The setting held now.
    held: f64,
    changed_ns: i64,
    start: Option<Mark>,
    /// The window's marks since `start` (thinned when they grow many): its parts' spread is
    /// the measurement's own error.
    marks: Vec<Mark>,
    settled: bool,
    /// The job's progress file: its directory and name.
    progress_file: Option<(Arc<TrustedDir>, String)>,
    /// The last progress read that parsed (a read can meet the file mid-rewrite).
    last_work: Option<(i64, f64)>,
    activity: f64,
    last_tick_ns: i64,
    /// Whether the workload has a tag to learn under.
    learn: bool,
    /// Whether a settled setting broke the job's bound in this run: the job went back to full
    /// speed and probed again, and the workload's stored model is replaced at the end.
    reverted: bool,
    /// Whether it broke the bound a second time: full speed for the rest of the run.
    given_up: bool,
    /// Whether the controller holds the job at full speed (a queue waits): no windows then.
    paused: bool,
}

impl Adaptive {
    fn samples(&self) -> Vec<Sample> {
        let unit =
            self.dvfs.progress.or(if self.earlier["file"].is_empty() { None } else { Some(Progress::File) });
        let key = unit.unwrap_or(Progress::SmActivity).as_str();
        self.earlier[key].iter().chain(&self.measured).copied().collect()
    }

    /// The job's GPUs at `setting`.
    fn hold(&self, record: &JobRecord, setting: f64) -> Changes {
        record.gpus.iter().map(|g| (g.index, self.knob.setting(setting))).collect()
    }
}

/// A job's model as the prober holds it: what its level table is built from.
pub(crate) struct ModelView {
    /// The knob the settings are on.
    pub(crate) knob: Knob,
    /// The settings the models choose among, ascending (W or MHz).
    pub(crate) settings: Vec<f64>,
    /// The setting the models hold the job at (its energy-saving setting, or a probe's).
    pub(crate) held: f64,
    /// The fitted model of the job's measurements; `None` until enough are measured, or when
    /// they do not fit or are too noisy to trust.
    pub(crate) model: Option<wattson_engine::DvfsModel>,
    /// The chooser's tunables, as the models judge the job's bound.
    pub(crate) chooser: wattson_engine::ChooserConfig,
}

/// The workload's tag: `--energy-tag`, else `user:jobname`; `None` when neither is known.
fn tag_of(record: &JobRecord) -> Option<String> {
    record
        .hints
        .tag
        .clone()
        .or_else(|| Some(format!("{}:{}", record.user.as_deref()?, record.name.as_deref()?)))
}

/// The jobs whose setting the DVFS models choose, by job id.
pub(crate) struct Prober {
    engine: EngineConfig,
    dirs: EngineDirs,
    jobs: BTreeMap<u32, Adaptive>,
}

impl Prober {
    /// A prober with no jobs, keeping its files in `dirs`.
    pub(crate) fn new(engine: EngineConfig, dirs: EngineDirs) -> Prober {
        Prober { engine, dirs, jobs: BTreeMap::new() }
    }

    /// Whether no job is being probed.
    pub(crate) fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Starts the models on a job (of Slurm account `account`, if known) that just began on
    /// GPUs of type `info`; returns the settings wanted.
    pub(crate) fn begin(
        &mut self,
        record: &JobRecord,
        account: Option<&str>,
        decision: &Decision,
        info: &GpuInfo,
        store: &mut Store,
        now: i64,
    ) -> Changes {
        let owner = self.engine.model_owner.owner(record.uid, account);
        self.adopt(record, owner, decision, info, store, now, false)
    }

    /// Takes up again a job that was running when the daemon restarted, with the owner its
    /// record names, from full speed; returns the settings wanted. A job with no recorded
    /// owner (its first step was never stored) is left at its journaled setting.
    pub(crate) fn resume_after_restart(
        &mut self,
        record: &JobRecord,
        decision: &Decision,
        info: &GpuInfo,
        store: &mut Store,
        now: i64,
    ) -> Changes {
        let Some(owner) = record.dvfs.as_ref().and_then(|d| d.owner.clone()) else {
            warn!(job = %record.key, "no model owner recorded; the job keeps its setting");
            return Vec::new();
        };
        info!(job = %record.key, "taking up the models again after a restart, from full speed");
        self.adopt(record, owner, decision, info, store, now, true)
    }

    /// Starts the models on `record` for `owner`; `resumed`: the job ran before a restart and
    /// keeps its progress file.
    #[allow(clippy::too_many_arguments)]
    fn adopt(
        &mut self,
        record: &JobRecord,
        owner: ModelOwner,
        decision: &Decision,
        info: &GpuInfo,
        store: &mut Store,
        now: i64,
        resumed: bool,
    ) -> Changes {
        if record.gpus.is_empty() {
            return Vec::new();
        }
        let info = info.clone();
        let (knob, settings) = self.engine.settings_for(&info);
        let Some(&max) = settings.last() else {
            warn!(job = %record.key, knob = knob.as_str(), "GPU offers no setting on its knob; the models leave it as it is");
            return Vec::new();
        };
        let tag = tag_of(record);
        let mut earlier = BTreeMap::new();
        for unit in [Progress::File, Progress::SmActivity] {
            let stored = match &tag {
                Some(tag) => store.model(&owner, &info.name, tag, unit, knob).unwrap_or_else(|e| {
                    warn!(job = %record.key, error = %e, "cannot read the workload's model; probing afresh");
                    None
                }),
                None => None,
            };
            earlier.insert(unit.as_str(), stored.map(|m| m.samples).unwrap_or_default());
        }
        let open =
            if resumed { crate::files::reuse_progress_file } else { crate::files::create_progress_file };
        let progress_file = open(&self.dirs.progress, record.key.job_id, record.uid)
            .map_err(|e| warn!(job = %record.key, error = %e, "cannot create the progress file; SM activity stands in"))
            .ok()
            .map(|name| (self.dirs.progress.clone(), name));
        let mut job = Adaptive {
            owner: owner.clone(),
            policy: decision.engine,
            knob,
            settings,
            earlier,
            measured: Vec::new(),
            windows: 0,
            dvfs: JobDvfs {
                tag: tag.clone().unwrap_or_default(),
                gpu_type: info.name,
                owner: Some(owner),
                knob,
                ..JobDvfs::default()
            },
            held: max,
            changed_ns: now,
            start: None,
            marks: Vec::new(),
            settled: false,
            progress_file,
            last_work: None,
            activity: 0.0,
            last_tick_ns: now,
            learn: tag.is_some(),
            reverted: false,
            given_up: false,
            paused: false,
        };
        let step =
            wattson_engine::next_step(&job.samples(), &job.settings, job.policy, &self.probe_config(knob), 0);
        let wanted = take_step(store, record, &mut job, step, now);
        self.jobs.insert(record.key.job_id, job);
        wanted
    }

    fn probe_config(&self, knob: Knob) -> wattson_engine::ProbeConfig {
        wattson_engine::ProbeConfig {
            knob,
            max_probes: self.engine.max_probes,
            ..wattson_engine::ProbeConfig::default()
        }
    }

    /// One sampling tick for every job the models decide: integrate SM activity, open and
    /// close measurement windows, and take the engine's next step when a probe is done.
    pub(crate) fn tick(
        &mut self,
        running: &BTreeMap<JobKey, JobRecord>,
        readings: &[Result<GpuReading, GpuError>],
        store: &mut Store,
        now_wall: i64,
    ) -> Vec<(JobKey, Changes)> {
        let mut changes = Vec::new();
        let window_ns = self.engine.probe_window.as_nanos() as i64;
        let settle_ns = self.engine.probe_settle.as_nanos() as i64;
        let ids: Vec<u32> = self.jobs.keys().copied().collect();
        for id in ids {
            let Some(record) = running.get(&JobKey::job(id)) else { continue };
            let Some(mut job) = self.jobs.remove(&id) else { continue };
            if job.paused {
                job.last_tick_ns = now_wall;
                self.jobs.insert(id, job);
                continue;
            }
            let now = record
                .gpus
                .iter()
                .filter_map(|g| readings.get(g.index as usize)?.as_ref().ok())
                .map(|r| r.t_ns)
                .max();
            if let Some(now) = now {
                // Up to the instant the job's meters were last read, which a boundary read
                // (a step's begin or end) after these readings may have moved past them: the
                // mark pairs that instant with the activity, which must cover it too.
                let metered = record.gpus.iter().map(|g| g.meter.last.t_ns).max().unwrap_or(now);
                let read = record.gpus.iter().filter_map(|g| readings.get(g.index as usize)?.as_ref().ok());
                job.integrate_activity(now.max(metered), read);
                let mark = mark(record, &mut job);
                if job.start.is_some() {
                    job.track(mark);
                }
                match job.start {
                    None if now - job.changed_ns >= settle_ns => {
                        job.start = Some(mark);
                        job.marks = vec![mark];
                    }
                    // Settled: the bound must hold over the run, not only in the prediction.
                    Some(start) if job.settled && !job.given_up && mark.t_ns - start.t_ns >= window_ns => {
                        let cfg = self.probe_config(job.knob);
                        if let Some(wanted) =
                            guard_bound(store, record, &mut job, &start, &mark, &cfg, now_wall)
                        {
                            changes.push((record.key.clone(), wanted));
                        }
                    }
                    Some(start) if !job.settled && mark.t_ns - start.t_ns >= window_ns => {
                        job.windows += 1;
                        match job.window(&start, &mark, record.gpus.len() as u32) {
                            Some((sample, _)) => {
                                job.measured.push(sample);
                                job.dvfs.probed.push(job.held);
                            }
                            None => {
                                warn!(job = %record.key, setting = job.held, unit = job.knob.unit(), "probe window saw no work; not counted")
                            }
                        }
                        let step = wattson_engine::next_step(
                            &job.samples(),
                            &job.settings,
                            job.policy,
                            &self.probe_config(job.knob),
                            job.windows,
                        );
                        let wanted = take_step(store, record, &mut job, step, now_wall);
                        changes.push((record.key.clone(), wanted));
                    }
                    _ => {}
                }
            }
            self.jobs.insert(id, job);
        }
        changes
    }

    /// What the models know of job `id`, for the controller's power budget: `None` when they
    /// do not decide it.
    pub(crate) fn view(&self, id: u32) -> Option<ModelView> {
        let job = self.jobs.get(&id)?;
        let chooser = self.probe_config(job.knob).chooser;
        // A model the chooser would not trust (it keeps the job at full speed) is no model.
        let model =
            wattson_engine::fit(job.knob, &job.samples()).ok().filter(|m| m.noise <= chooser.max_model_error);
        Some(ModelView { knob: job.knob, settings: job.settings.clone(), held: job.held, model, chooser })
    }

    /// Holds job `id` at full speed for the controller: its measurement windows stop (they
    /// would measure the defaults, not the setting). Whether the models decide this job.
    pub(crate) fn pause(&mut self, id: u32) -> bool {
        self.jobs.get_mut(&id).map(|job| job.paused = true).is_some()
    }

    /// Ends a [`Prober::pause`]: the job goes back to the setting the models hold it at, and a
    /// fresh window opens after the settling time. The settings wanted, or `None` when the
    /// models do not decide this job.
    pub(crate) fn resume(&mut self, record: &JobRecord, now: i64) -> Option<Changes> {
        let job = self.jobs.get_mut(&record.key.job_id)?;
        job.paused = false;
        job.changed_ns = now;
        job.last_tick_ns = now;
        job.start = None;
        Some(job.hold(record, job.held))
    }

    /// Finishes the models' part of a job that is ending (its meters hold the final reading):
    /// measures the settled window, stores the measurements, returns the final record.
    pub(crate) fn end(&mut self, record: &JobRecord, store: &mut Store, now: i64) -> Option<JobDvfs> {
        let mut job = self.jobs.remove(&record.key.job_id)?;
        // The final readings close the activity count too, as they close the energy.
        if let Some(t_end) = record.gpus.iter().map(|g| g.meter.last.t_ns).max() {
            job.integrate_activity(t_end, record.gpus.iter().map(|g| &g.meter.last));
        }
        let end = mark(record, &mut job);
        if job.start.is_some() {
            job.track(end);
        }
        if job.settled
            && !job.given_up
            && let Some(start) = job.start
            && let Some((sample, work)) = job.window(&start, &end, record.gpus.len() as u32)
        {
            judge(&mut job, sample, work);
            job.measured.push(sample);
        }
        if let Some((dir, name)) = &job.progress_file {
            let _ = dir.remove(name);
        }
        if job.learn && job.reverted {
            // The model led the job past its bound: it is dropped (every unit), and what this
            // run measured since takes its place; with nothing measured since, the next run
            // probes afresh.
            match store.drop_models(&job.owner, &job.dvfs.gpu_type, &job.dvfs.tag, now) {
                Ok(()) => self.write_model_table(store),
                Err(e) => warn!(job = %record.key, error = %e, "cannot drop the workload's model"),
            }
        }
        if job.learn && !job.measured.is_empty() {
            let unit = job.dvfs.progress.unwrap_or(Progress::SmActivity);
            let model = Measurements {
                owner: job.owner.clone(),
                gpu_type: job.dvfs.gpu_type.clone(),
                tag: job.dvfs.tag.clone(),
                progress: unit,
                knob: job.knob,
                samples: job.earlier[unit.as_str()].iter().chain(&job.measured).copied().collect(),
                settings: job.settings.clone(),
                updated_ns: now,
            };
            match store.save_model(&model) {
                Ok(()) => self.write_model_table(store),
                Err(e) => warn!(job = %record.key, error = %e, "cannot store the workload's measurements"),
            }
        }
        if let Err(e) = store.set_dvfs(&record.key, &job.dvfs) {
            warn!(job = %record.key, error = %e, "cannot record the DVFS outcome");
        }
        Some(job.dvfs)
    }

    /// Rewrites the model table file from every stored workload (atomically: temp + rename).
    pub(crate) fn write_model_table(&self, store: &Store) {
        let table = match store.models() {
            Ok(models) => ModelTable::from_measurements(&models, |gpu| self.engine.knob_for(gpu)),
            Err(e) => return warn!(error = %e, "cannot read the stored models"),
        };
        let path = &self.engine.models_file;
        let result = table.to_json().map_err(std::io::Error::other).and_then(|json| {
            self.dirs.models.write_atomically(&self.dirs.models_name, json.as_bytes(), 0o644)
        });
        if let Err(e) = result {
            warn!(path = %path.display(), error = %e, "cannot write the model table");
        }
    }
}

/// Holds the step's setting on the job's GPUs and records it.
fn take_step(store: &mut Store, record: &JobRecord, job: &mut Adaptive, step: Step, now: i64) -> Changes {
    let setting = match step {
        Step::Probe(s) => {
            info!(job = %record.key, setting = s, unit = job.knob.unit(), "probing");
            Some(s)
        }
        Step::Settle(d) => {
            job.settled = true;
            job.dvfs.setting = d.setting;
            job.dvfs.predicted_slowdown = Some(d.predicted_slowdown);
            job.dvfs.predicted_energy_ratio = Some(d.predicted_energy_ratio);
            job.dvfs.uncertainty = Some(d.uncertainty);
            job.dvfs.reason = Some(if job.reverted {
                format!("probed again after the bound broke: {}", d.reason)
            } else {
                d.reason.to_string()
            });
            info!(job = %record.key, setting = ?d.setting, unit = job.knob.unit(), reason = d.reason, "settled");
            d.setting
        }
    };
    job.changed_ns = now;
    job.start = None;
    if let Some(s) = setting {
        job.held = s;
    }
    if let Err(e) = store.set_dvfs(&record.key, &job.dvfs) {
        warn!(job = %record.key, error = %e, "cannot record the DVFS state");
    }
    setting.map(|s| job.hold(record, s)).unwrap_or_default()
}

/// Measured slowdown beyond the bound that sends a job back to full speed: the measurement's
/// own noise (a percentage point), not slack.
const BOUND_NOISE: f64 = 0.01;

/// While settled: if the job's measured slowdown over its settled span so far breaks its bound
/// (a phase change, a wrong model), returns it to the highest setting at once (the settings
/// wanted) and drops the model: the first time the job probes again from full speed, with
/// this run's measurements only; a second time it stays at full speed to its end.
fn guard_bound(
    store: &mut Store,
    record: &JobRecord,
    job: &mut Adaptive,
    start: &Mark,
    now: &Mark,
    cfg: &wattson_engine::ProbeConfig,
    now_wall: i64,
) -> Option<Changes> {
    let wattson_engine::Objective::MinEnergy { max_slowdown } = job.policy else { return None };
    let (sample, _) = job.window(start, now, record.gpus.len() as u32)?;
    let (reference, _) = reference(job)?;
    let slowdown = sample.time / reference - 1.0;
    if slowdown <= max_slowdown + BOUND_NOISE {
        return None;
    }
    let max = *job.settings.last()?;
    let again = !job.reverted;
    warn!(job = %record.key, slowdown, bound = max_slowdown, setting = job.held, unit = job.knob.unit(), probing_again = again, "bound broken: back to full speed; the model is dropped");
    job.dvfs.measured_slowdown = Some(slowdown);
    job.dvfs.energy_saved_j = None;
    job.dvfs.reason = Some(format!(
        "measured slowdown {:.1}% broke the {:.1}% bound at {:.0} {}: back to full speed, model dropped, {}",
        100.0 * slowdown,
        100.0 * max_slowdown,
        job.held,
        job.knob.unit(),
        if again { "probing again" } else { "for the rest of the run" }
    ));
    job.reverted = true;
    if again {
        // Only what this run measures from now on: the workload is not what was measured.
        for samples in job.earlier.values_mut() {
            samples.clear();
        }
        job.measured.clear();
        job.windows = 0;
        job.settled = false;
        job.dvfs.setting = None;
        let step = wattson_engine::next_step(&[], &job.settings, job.policy, cfg, 0);
        return Some(take_step(store, record, job, step, now_wall));
    }
    job.given_up = true;
    job.dvfs.setting = Some(max);
    job.held = max;
    job.start = None;
    if let Err(e) = store.set_dvfs(&record.key, &job.dvfs) {
        warn!(job = %record.key, error = %e, "cannot record the DVFS state");
    }
    Some(job.hold(record, max))
}

/// Time and power per unit of work at the highest setting (this run's probe, else earlier
/// runs'), weighted.
fn reference(job: &Adaptive) -> Option<(f64, f64)> {
    let &max = job.settings.last()?;
    let reference: Vec<Sample> =
        job.samples().into_iter().filter(|s| (s.setting - max).abs() < 1e-9).collect();
    let weight: f64 = reference.iter().map(|s| s.weight).sum();
    if weight <= 0.0 {
        return None;
    }
    let time = reference.iter().map(|s| s.time * s.weight).sum::<f64>() / weight;
    let power = reference.iter().map(|s| s.power * s.weight).sum::<f64>() / weight;
    Some((time, power))
}

/// Measured slowdown and estimated saving of the settled window against the highest
/// setting's measurement.
fn judge(job: &mut Adaptive, settled: Sample, work: f64) {
    let Some((time, power)) = reference(job) else { return };
    job.dvfs.measured_slowdown = Some(settled.time / time - 1.0);
    // Per unit of work, energy is GPU-seconds × W per GPU.
    job.dvfs.energy_saved_j = Some(work * (time * power - settled.time * settled.power));
}
