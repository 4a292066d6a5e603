//! The controller's hold on a running job's GPUs: its pace (the energy-saving setting, full
//! speed, or one level of its table under the cluster power budget) and its level table.
//!
//! The table is the engine's ([`levels::table`]) from the job's workload model over its GPU
//! type's settings, as the models judge the job's bound; its top level is the GPUs' defaults.
//! A job the models do not decide (a fixed share, `perf`, `--gpu-freq`, a job sharing a GPU)
//! or not yet (still probing) gets what the node can honestly say: its setting and the
//! defaults, or the defaults alone.

use tracing::info;

use super::{State, not_running};
use crate::enforce;
use wattson_engine::Objective;
use wattson_engine::cluster::{Level, levels};
use wattson_gpu::GpuSetting;
use wattson_protocol::{Error, ErrorCode, Pace, Reply};
use wattson_types::job::{JobKey, JobRecord};

/// A running job's levels on this node, each with the setting that holds its GPUs there.
struct Table {
    /// The levels, the top (the defaults) last.
    levels: Vec<Level>,
    /// The setting of each level; `None` for the top (the GPUs' defaults).
    settings: Vec<Option<GpuSetting>>,
    /// The job's slowdown bound (fraction).
    bound: f64,
}

impl Table {
    /// The defaults alone: one level drawing up to the GPU's maximum power limit.
    fn defaults(setting: f64, max_w: f64) -> Table {
        Table { levels: vec![top(setting, max_w)], settings: vec![None], bound: 0.0 }
    }

    /// A setting below the defaults that no model describes, then the defaults: judged slower
    /// by `slowdown_hi`, saving nothing claimed, drawing up to the limit it sets (or the
    /// maximum under a locked clock).
    fn pair(setting: GpuSetting, top_setting: f64, slowdown_hi: f64, max_w: f64, bound: f64) -> Table {
        let (value, cap_w) = match setting {
            GpuSetting::PowerLimit { mw } => (f64::from(mw) / 1000.0, (f64::from(mw) / 1000.0).min(max_w)),
            GpuSetting::LockedClock { mhz } => (f64::from(mhz), max_w),
        };
        let low = Level { setting: value, slowdown_hi, energy_ratio: 1.0, power_w: cap_w, cap_w };
        Table { levels: vec![low, top(top_setting, max_w)], settings: vec![Some(setting), None], bound }
    }

    /// The index of the level whose setting is `now` (`None`: the defaults, the top), or the
    /// nearest one on the same knob.
    fn level_of(&self, now: Option<GpuSetting>) -> u16 {
        let top = self.levels.len().saturating_sub(1);
        let Some(now) = now else { return top as u16 };
        let nearest = self
            .settings
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((i, distance(s.as_ref()?, &now)?)))
            .min_by(|a, b| a.1.total_cmp(&b.1));
        nearest.map_or(top, |(i, _)| i) as u16
    }
}

/// The top level: the GPUs' defaults, no slowdown, drawing up to the maximum power limit.
fn top(setting: f64, max_w: f64) -> Level {
    Level { setting, slowdown_hi: 0.0, energy_ratio: 1.0, power_w: max_w, cap_w: max_w }
}

/// Where a pace puts a job's GPUs.
enum Target {
    /// Its energy-saving setting.
    Saving,
    /// Its GPUs' defaults.
    Full,
    /// A level of its table below the top, and the setting that holds it.
    Level(u16, GpuSetting),
}

/// How far apart two settings on the same knob are (`None` across knobs).
fn distance(a: &GpuSetting, b: &GpuSetting) -> Option<f64> {
    match (a, b) {
        (GpuSetting::PowerLimit { mw: x }, GpuSetting::PowerLimit { mw: y }) => {
            Some(f64::from(x.abs_diff(*y)))
        }
        (GpuSetting::LockedClock { mhz: x }, GpuSetting::LockedClock { mhz: y }) => {
            Some(f64::from(x.abs_diff(*y)))
        }
        _ => None,
    }
}

/// Makes every figure of `levels` finite, so that it survives JSON (which has no infinity):
/// a slowdown no bound admits, or an energy ratio the model cannot predict, becomes the
/// largest finite number; an unknown draw, the most the GPU may draw.
fn finite(levels: &mut [Level], max_w: f64) {
    for l in levels {
        for x in [&mut l.slowdown_hi, &mut l.energy_ratio] {
            if !x.is_finite() {
                *x = f64::MAX;
            }
        }
        if !l.cap_w.is_finite() {
            l.cap_w = max_w;
        }
        if !l.power_w.is_finite() {
            l.power_w = l.cap_w;
        }
    }
}

impl State {
    /// A running job's level table on this node, the level its GPUs run at now and its
    /// slowdown bound, for the controller's power budget.
    pub fn levels(&self, job_id: u32) -> Result<Reply, Error> {
        let key = JobKey::job(job_id);
        let record = self.running.get(&key).ok_or_else(|| not_running(&key))?;
        let table = self.table(record)?;
        let now = enforce::journaled(&self.store, &key).first().map(|&(_, s)| s);
        let level = table.level_of(now);
        Ok(Reply::JobLevels { job: job_id, levels: table.levels, level, bound: table.bound })
    }

    /// Sets a running job's pace, as the controller asks: `Full` returns its GPUs to their
    /// defaults (and stops the models' measurements), `Level` holds them at one level of the
    /// job's table (the top and beyond: the defaults, as `Full`), until `Saving` gives back the
    /// setting chosen for it. A job that shares a GPU stays at its defaults whatever the pace,
    /// and every job of a read-only node at what its GPUs have.
    pub fn pace(&mut self, job_id: u32, pace: Pace) -> Result<Reply, Error> {
        let key = JobKey::job(job_id);
        let record = self.running.get(&key).ok_or_else(|| not_running(&key))?.clone();
        let now = self.paced.get(&job_id).copied().unwrap_or(Pace::Saving);
        // A level names a setting, or the defaults (the top, or beyond the table; a job that
        // shares a GPU, or runs on a read-only node, has the defaults alone).
        let target = match pace {
            Pace::Saving => Target::Saving,
            Pace::Full => Target::Full,
            Pace::Level(l) => match self.table(&record)?.settings.get(usize::from(l)) {
                Some(Some(setting)) => Target::Level(l, *setting),
                _ => Target::Full,
            },
        };
        match target {
            Target::Saving if now == Pace::Saving => {}
            Target::Saving if self.at_defaults(job_id) => {
                self.paced.remove(&job_id);
                info!(job = %key, "pace: the job's GPUs stay as they are (it shares one, or [gpu] read_only)");
            }
            Target::Saving => {
                self.paced.remove(&job_id);
                let now = self.now();
                let wanted = match self.prober.resume(&record, now) {
                    Some(wanted) => wanted,
                    None => enforce::fixed(self.backend.as_ref(), &record, &self.decision_of(&record)),
                };
                self.apply_settings(&key, &wanted);
                info!(job = %key, "pace: back to its energy-saving setting");
            }
            Target::Full if now == Pace::Full => {}
            Target::Full => {
                self.paced.insert(job_id, Pace::Full);
                self.release_to_defaults(&key, "pace");
                info!(job = %key, "pace: full speed");
            }
            Target::Level(l, _) if now == Pace::Level(l) => {}
            Target::Level(l, setting) => {
                self.paced.insert(job_id, Pace::Level(l));
                // The models measure nothing while the job is held off their setting.
                self.prober.pause(job_id);
                let wanted: Vec<(u32, GpuSetting)> = record.gpus.iter().map(|g| (g.index, setting)).collect();
                self.apply_settings(&key, &wanted);
                info!(job = %key, level = l, setting = ?setting, "pace: held at a level of its table");
            }
        }
        let settings = enforce::journaled(&self.store, &key);
        Ok(Reply::Paced { job: job_id, pace, settings })
    }

    /// The level table of `record` (a running job) on this node.
    fn table(&self, record: &JobRecord) -> Result<Table, Error> {
        let info = record.gpus.first().and_then(|g| self.backend.devices().get(g.index as usize));
        let max_mw = info.and_then(|i| i.power_limit_max_mw.or(i.power_limit_default_mw));
        let Some(max_w) = max_mw.map(|mw| f64::from(mw) / 1000.0) else {
            return Err(Error::new(
                ErrorCode::Internal,
                format!("job {}: its GPU reports no power limit, so no level table", record.key),
            ));
        };
        if self.at_defaults(record.key.job_id) {
            return Ok(Table::defaults(max_w, max_w));
        }
        let decision = self.decision_of(record);
        let bound = match decision.engine {
            Objective::MinEnergy { max_slowdown } => max_slowdown,
            Objective::Balanced { .. } | Objective::Perf => 0.0,
        };
        if !decision.by_model() {
            let fixed = enforce::fixed(self.backend.as_ref(), record, &decision);
            return Ok(match fixed.first() {
                Some(&(_, setting)) => Table::pair(setting, max_w, bound, max_w, bound),
                None => Table::defaults(max_w, max_w),
            });
        }
        let Some(view) = self.prober.view(record.key.job_id) else {
            return Ok(Table { bound, ..Table::defaults(max_w, max_w) });
        };
        let Some(&top_setting) = view.settings.last() else {
            return Ok(Table { bound, ..Table::defaults(max_w, max_w) });
        };
        let Some(model) = view.model else {
            // Still probing: the setting held now, of unknown slowdown, and the defaults.
            return Ok(if view.held < top_setting {
                Table::pair(view.knob.setting(view.held), top_setting, f64::MAX, max_w, bound)
            } else {
                Table { bound, ..Table::defaults(top_setting, max_w) }
            });
        };
        let mut levels = levels::table(&model, &view.settings, &view.chooser);
        let last = levels.len().saturating_sub(1);
        let settings = levels
            .iter()
            .enumerate()
            .map(|(i, l)| (i < last).then(|| view.knob.setting(l.setting)))
            .collect();
        // A balanced job has no bound of its own: it may run as slow as its chosen setting.
        let bound = match decision.engine {
            Objective::Balanced { .. } => view
                .settings
                .iter()
                .position(|&s| s == view.held)
                .map(|i| levels[i].slowdown_hi)
                .filter(|s| s.is_finite())
                .unwrap_or(0.0),
            _ => bound,
        };
        if let Some(top) = levels.last_mut() {
            top.cap_w = max_w;
        }
        finite(&mut levels, max_w);
        Ok(Table { levels, settings, bound })
    }
}
