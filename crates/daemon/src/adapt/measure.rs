//! Measuring a job's run: marks of its energy and work, and the windows between them, each
//! with its own spread.

use std::io::Read;
use std::sync::Arc;

use wattson_engine::{Sample, Window};
use wattson_types::energy::GpuReading;
use wattson_types::job::{JobRecord, Progress};

use super::Adaptive;
use crate::safedir::TrustedDir;

/// A point in a job's run: energy so far, and work so far by either count.
#[derive(Debug, Clone, Copy)]
pub(super) struct Mark {
    /// Time of the meters' latest reading (ns).
    pub(super) t_ns: i64,
    /// Energy of all the job's GPUs so far (mJ).
    energy_mj: f64,
    /// The job's own count and the instant it was written (file mtime, ns).
    work: Option<(i64, f64)>,
    /// SM clock × utilisation integrated over the job's GPUs (MHz·s).
    activity: f64,
}

impl Adaptive {
    /// Adds SM clock × utilisation since the last tick up to `now`, from the job's GPUs'
    /// readings taken then.
    pub(super) fn integrate_activity<'a>(
        &mut self,
        now: i64,
        readings: impl Iterator<Item = &'a GpuReading>,
    ) {
        let dt = (now - self.last_tick_ns).max(0) as f64 / 1e9;
        for r in readings {
            self.activity +=
                f64::from(r.sm_clock_mhz.unwrap_or(0)) * f64::from(r.util_pct.unwrap_or(0)) / 100.0 * dt;
        }
        self.last_tick_ns = now;
    }

    /// Keeps `mark` among the window's marks, halving them when there are too many.
    pub(super) fn track(&mut self, mark: Mark) {
        self.marks.push(mark);
        if self.marks.len() > MAX_MARKS {
            let last = mark;
            self.marks = self.marks.iter().step_by(2).copied().collect();
            if self.marks.last().map(|m| m.t_ns) != Some(last.t_ns) {
                self.marks.push(last);
            }
        }
    }

    /// Times per unit of the window's [`PARTS`] consecutive parts of (nearly) equal length,
    /// in `progress` units; empty when the marks do not cut it so.
    fn part_times(&self, progress: Progress) -> Vec<f64> {
        let (Some(first), Some(last)) = (self.marks.first(), self.marks.last()) else { return Vec::new() };
        let span = (last.t_ns - first.t_ns) as f64;
        let mut cuts = Vec::with_capacity(PARTS + 1);
        for j in 0..=PARTS {
            let at = first.t_ns as f64 + span * j as f64 / PARTS as f64;
            let i = self.marks.partition_point(|m| (m.t_ns as f64) < at).min(self.marks.len() - 1);
            if cuts.last() == Some(&i) {
                return Vec::new();
            }
            cuts.push(i);
        }
        cuts.windows(2)
            .map(|c| per_unit(progress, &self.marks[c[0]], &self.marks[c[1]]).unwrap_or(f64::NAN))
            .collect()
    }

    /// The window from `start` to `end` and the work done in it, or `None` if it saw no work
    /// in the job's unit.
    pub(super) fn window(&mut self, start: &Mark, end: &Mark, gpus: u32) -> Option<(Sample, f64)> {
        let energy_s = (end.t_ns - start.t_ns) as f64 / 1e9;
        let from_file = match (start.work, end.work) {
            (Some((t0, w0)), Some((t1, w1))) if t1 > t0 && w1 > w0 => Some(((t1 - t0) as f64 / 1e9, w1 - w0)),
            _ => None,
        };
        let progress = *self.dvfs.progress.get_or_insert(if from_file.is_some() {
            Progress::File
        } else {
            Progress::SmActivity
        });
        let (work_s, work) = match progress {
            Progress::File => from_file?,
            Progress::SmActivity => (energy_s, end.activity - start.activity),
        };
        let energy_j = (end.energy_mj - start.energy_mj) / 1000.0;
        let rel_se = wattson_engine::probe::spread(&self.part_times(progress));
        Some((Window { setting: self.held, energy_j, energy_s, work, work_s, gpus, rel_se }.sample()?, work))
    }
}

/// Parts a window is cut into to measure its own spread.
const PARTS: usize = 4;
/// Marks kept per window (halved beyond).
const MAX_MARKS: usize = 256;

/// Seconds per unit of work from mark `a` to mark `b`, in `progress` units.
fn per_unit(progress: Progress, a: &Mark, b: &Mark) -> Option<f64> {
    let (s, work) = match progress {
        Progress::File => match (a.work, b.work) {
            (Some((t0, w0)), Some((t1, w1))) => ((t1 - t0) as f64 / 1e9, w1 - w0),
            _ => return None,
        },
        Progress::SmActivity => ((b.t_ns - a.t_ns) as f64 / 1e9, b.activity - a.activity),
    };
    (s > 0.0 && work > 0.0).then(|| s / work)
}

/// Reads a progress file: its first number and its modification time (ns). Never follows a
/// link; reads at most 64 bytes.
fn read_progress((dir, name): &(Arc<TrustedDir>, String)) -> Option<(i64, f64)> {
    let file = dir.open_file(name).ok()?;
    let mtime = file.metadata().ok()?.modified().ok()?;
    let t_ns = mtime.duration_since(std::time::UNIX_EPOCH).ok()?.as_nanos() as i64;
    let mut text = String::new();
    file.take(64).read_to_string(&mut text).ok()?;
    let value: f64 = text.split_whitespace().next()?.parse().ok()?;
    (value.is_finite() && value >= 0.0).then_some((t_ns, value))
}

/// Where a job's run stands now.
pub(super) fn mark(record: &JobRecord, job: &mut Adaptive) -> Mark {
    if let Some(read) = job.progress_file.as_ref().and_then(read_progress) {
        job.last_work = Some(read);
    }
    Mark {
        t_ns: record.gpus.iter().map(|g| g.meter.last.t_ns).max().unwrap_or(0),
        energy_mj: record.energy_mj(),
        // Each count carries the instant it was written, so an older one is still exact.
        work: job.last_work,
        activity: job.activity,
    }
}
