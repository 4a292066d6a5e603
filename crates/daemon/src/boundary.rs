//! Readings at a job's begin and end, exact to a few milliseconds on a counter that steps.
//!
//! NVML's energy counter advances in steps (about every 100 ms): a read returns the value of
//! the last step, up to one step old. Between two readings inside a job the steps cancel, but
//! at the job's begin and end a plain read would be off by up to a step's energy each (70 J at
//! 700 W: 5% of a 2-second job). So at a boundary each GPU is read again every [`POLL`] until
//! its counter steps; the step's energy, spread over the step's period, gives the counter at the
//! boundary instant (`c1 − (c1 − c0) · (s1 − t) / period`: the power within one step taken as
//! constant). A step lies between the last read that had not seen it (from just before that
//! read) and the first that had (to just after it): a late poll (a busy machine) widens that
//! window, so the wait goes on until a step was seen within [`TIGHT_NS`] (at most
//! [`MAX_STEPS`] steps), and the steps' instants are fitted, each weighed by its window. Only
//! what the reads prove is learned: a GPU's period from changes that hold one step each (seen
//! within less than any period the reads allow) counted one period apart, and a counter is
//! taken as continuous (read once from then on) only when it changed at every poll, polls too
//! close for a stepping counter. A change a stall saw late may hold several steps, which share
//! its energy. A GPU's first boundary waits for three steps, to learn its period, and every
//! later one adds to what is known of it; until the reads prove something, the reading stands
//! as read.

use std::time::{Duration, Instant};

use wattson_gpu::{GpuBackend, GpuError};
use wattson_types::energy::GpuReading;
use wattson_types::gpu::now_ns;

/// How often a GPU is read while waiting for its counter's step.
pub const POLL: Duration = Duration::from_millis(2);
/// Steps a GPU's first boundary waits for, to learn the period.
const PERIOD_STEPS: usize = 3;
/// The longest wait for a GPU's first steps (its period unknown).
const FIRST_WAIT: Duration = Duration::from_millis(400);
/// A step seen within this (half the gap between the reads around it) times the boundary well.
const TIGHT_NS: i64 = 2_000_000;
/// Steps a boundary waits for at most, looking for one seen within [`TIGHT_NS`].
const MAX_STEPS: usize = 4;
/// A counter that changed at every poll, polls this close, moves continuously: one that steps
/// this often or more is taken as continuous (off by at most this at each boundary), and one
/// that steps less often, as NVML's do (100 ms), could not have shown it.
const CONTINUOUS_PERIOD_NS: i64 = 50_000_000;

/// What is known of a GPU's counter.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Counter {
    /// Not yet seen at a boundary.
    Unseen,
    /// Moves at every read: a boundary reading is exact as read.
    Continuous,
    /// Steps every `period_ns`, known to a variance of `variance` ns² (every boundary's
    /// steps add to what is known).
    Stepped { period_ns: f64, variance: f64 },
    /// Did not move within the first wait (a GPU that draws nothing, or a counter that does
    /// not work): read once, as read.
    Frozen,
}

/// The counters' steps as learned so far, per GPU index.
#[derive(Debug, Default)]
pub struct Boundaries {
    counters: Vec<Counter>,
}

/// A change seen while waiting: the instant of its step (the midpoint of the two reads around
/// it, within `within_ns`) and the counter before and after. A stalled poll may see several
/// steps as one change.
#[derive(Debug, Clone, Copy)]
struct Step {
    at_ns: i64,
    within_ns: i64,
    before: u64,
    after: u64,
}

impl Step {
    /// The instants the change lies between (just before the last read that had not seen it,
    /// just after the first that had).
    fn window(&self) -> (i64, i64) {
        (self.at_ns - self.within_ns, self.at_ns + self.within_ns)
    }
}

struct Wait {
    pos: usize,
    /// Polls that found the counter where it was.
    quiet: u32,
    /// The last read: the instant just before it and the counter it gave.
    last: (i64, u64),
    steps: Vec<Step>,
}

impl Boundaries {
    fn counter(&self, index: u32) -> Counter {
        self.counters.get(index as usize).copied().unwrap_or(Counter::Unseen)
    }

    fn learn(&mut self, index: u32, counter: Counter) {
        let i = index as usize;
        if self.counters.len() <= i {
            self.counters.resize(i + 1, Counter::Unseen);
        }
        self.counters[i] = counter;
        tracing::debug!(gpu = index, ?counter, "what a boundary has taught of the GPU's energy counter");
    }

    /// Reads `indices` at a boundary (now): each reading's counter is the counter's value at
    /// the reading's instant, its step interpolated. Results in the order given.
    pub fn read(&mut self, backend: &dyn GpuBackend, indices: &[u32]) -> Vec<Result<GpuReading, GpuError>> {
        let from_ns = now_ns();
        let mut out = backend.read_many(indices);
        let mut waits: Vec<Wait> = out
            .iter()
            .enumerate()
            .filter_map(|(pos, r)| {
                let r = r.as_ref().ok()?;
                let last = (from_ns, r.energy_mj?);
                matches!(self.counter(indices[pos]), Counter::Unseen | Counter::Stepped { .. })
                    .then_some(Wait { pos, quiet: 0, last, steps: Vec::new() })
            })
            .collect();
        let longest = waits
            .iter()
            .map(|w| match self.counter(indices[w.pos]) {
                Counter::Stepped { period_ns, .. } => {
                    Duration::from_nanos(period_ns as u64 * (2 * MAX_STEPS as u64 + 1) / 2) + 10 * POLL
                }
                _ => FIRST_WAIT,
            })
            .max()
            .unwrap_or_default();
        let start = Instant::now();
        while !waits.is_empty() && start.elapsed() < longest {
            std::thread::sleep(POLL);
            let polled: Vec<u32> = waits.iter().map(|w| indices[w.pos]).collect();
            let from_ns = now_ns();
            let readings = backend.read_counters(&polled);
            let mut done = Vec::new();
            for (k, (wait, reading)) in waits.iter_mut().zip(readings).enumerate() {
                let Some((t_ns, now)) = reading.ok().and_then(|(t, c)| Some((t, c?))) else {
                    done.push(k); // Gave no counter this time: the boundary reading stands.
                    continue;
                };
                // A step lies between the last read that had not seen it and this one: from
                // just before the one to just after the other (a read stamps its instant after
                // it, however long it took).
                let (last_ns, before) = wait.last;
                if now != before {
                    let within_ns = (t_ns - last_ns) / 2;
                    wait.steps.push(Step { at_ns: last_ns + within_ns, within_ns, before, after: now });
                } else {
                    wait.quiet += 1;
                }
                wait.last = (from_ns, now);
                let index = indices[wait.pos];
                let boundary = out[wait.pos].as_mut().expect("waits are on readings");
                if let Some(counter) = self.settle(index, boundary, &wait.steps, wait.quiet, false) {
                    self.learn(index, counter);
                    done.push(k);
                }
            }
            for k in done.into_iter().rev() {
                waits.swap_remove(k);
            }
        }
        // Out of time: what was seen stands.
        for wait in waits {
            let index = indices[wait.pos];
            let boundary = out[wait.pos].as_mut().expect("waits are on readings");
            match self.settle(index, boundary, &wait.steps, wait.quiet, true) {
                Some(counter) => self.learn(index, counter),
                None if wait.steps.is_empty() && self.counter(index) == Counter::Unseen => {
                    self.learn(index, Counter::Frozen)
                }
                None => {}
            }
        }
        out
    }

    /// With the steps seen so far on GPU `index`, sets `boundary`'s counter to its value at
    /// the boundary instant and returns what is now known of the counter; `None` while more
    /// steps are needed (unless `last_chance`: then whatever was seen is used).
    fn settle(
        &self,
        index: u32,
        boundary: &mut GpuReading,
        steps: &[Step],
        quiet: u32,
        last_chance: bool,
    ) -> Option<Counter> {
        let first = *steps.first()?;
        let known = match self.counter(index) {
            Counter::Stepped { period_ns, variance } => Some((period_ns, variance)),
            _ => None,
        };
        if known.is_none() {
            if quiet == 0 {
                // Changes at every poll: a counter that moves continuously, or polls slower
                // than its steps (a busy machine). Only polls fast enough to rule out a
                // stepping counter tell them apart; until then the reading stands as read.
                return continuous(steps).then_some(Counter::Continuous);
            }
            if steps.len() < PERIOD_STEPS && !(last_chance && steps.len() >= 2) {
                return None;
            }
        }
        let tight = steps.iter().any(|s| s.within_ns <= TIGHT_NS);
        if !tight && steps.len() < MAX_STEPS && !last_chance {
            return None;
        }
        let (step_ns, period_ns, variance) = fit(steps, boundary.t_ns, known)?;
        // A counter that went back (a driver reload) is left as read.
        if first.after > first.before {
            let schedule = Schedule { step_ns, period_ns: period_ns.round() as i64 };
            boundary.energy_mj = Some(at_boundary(first, schedule, boundary.t_ns));
        }
        Some(Counter::Stepped { period_ns, variance })
    }
}

/// A step's instant and the period, fitted to the steps seen (each weighed by how exactly it
/// was seen), with what was known of the period before: (a step's instant ns, period ns, the
/// period's variance ns²). Only changes that hold one step for sure (seen within less than the
/// shortest period the reads allow, [`period_bounds`]) are fitted, each counted in periods
/// from the others: without a known period, the longest run of them in a row (one period
/// apart); with one, every such change whose count it settles. What was known goes when this
/// boundary's reads rule it out.
fn fit(steps: &[Step], origin_ns: i64, known: Option<(f64, f64)>) -> Option<(i64, f64, f64)> {
    let (lo, hi) = period_bounds(steps, origin_ns);
    let known = known.filter(|&(p, v)| p + 3.0 * v.sqrt() >= lo && p - 3.0 * v.sqrt() <= hi);
    let shortest = known.map_or(lo, |(p, v)| lo.max(p - 3.0 * v.sqrt()));
    let single = |s: &Step| ((2 * s.within_ns) as f64) < shortest;
    // (periods, instant from the origin, weight) of each change fitted.
    let point =
        |n: f64, s: &Step| (n, (s.at_ns - origin_ns) as f64, 1.0 / (s.within_ns.max(250_000) as f64).powi(2));
    let points: Vec<(f64, f64, f64)> = match known {
        Some((p, v)) => {
            let best = steps.iter().filter(|s| single(s)).min_by_key(|s| s.within_ns)?;
            steps
                .iter()
                .filter(|s| single(s))
                .filter_map(|s| {
                    let apart = (s.at_ns - best.at_ns) as f64;
                    let n = (apart / p).round();
                    let slack = (s.within_ns + best.within_ns) as f64 + 3.0 * v.sqrt() * n.abs();
                    (std::ptr::eq(s, best) || (apart - n * p).abs() + slack < p / 2.0).then(|| point(n, s))
                })
                .collect()
        }
        None => {
            let runs = steps.chunk_by(|a, b| single(a) && single(b));
            let run = runs.filter(|r| single(&r[0])).max_by_key(|r| r.len())?;
            run.iter().enumerate().map(|(n, s)| point(n as f64, s)).collect()
        }
    };
    let sum = |f: &dyn Fn(&(f64, f64, f64)) -> f64| points.iter().map(f).sum::<f64>();
    let (sw, sx, sy) = (sum(&|p| p.2), sum(&|p| p.2 * p.0), sum(&|p| p.2 * p.1));
    let (sxx, sxy) = (sum(&|p| p.2 * p.0 * p.0), sum(&|p| p.2 * p.0 * p.1));
    let d = sw * sxx - sx * sx;
    let (period, variance) = match (known, points.len() >= 2 && d > 0.0) {
        (None, true) => (((sw * sxy - sx * sy) / d).clamp(lo, hi), sw / d),
        (Some((p0, v0)), true) => {
            // This boundary's own estimate, pooled with what was known, unless the two
            // disagree beyond their spreads.
            let (p1, v1) = ((sw * sxy - sx * sy) / d, sw / d);
            if (p1 - p0).abs() > 3.0 * (v0 + v1).sqrt() {
                (p0, v0)
            } else {
                ((p0 / v0 + p1 / v1) / (1.0 / v0 + 1.0 / v1), 1.0 / (1.0 / v0 + 1.0 / v1))
            }
        }
        (Some(known), false) if sw > 0.0 => known,
        _ => return None,
    };
    let at = (sy - period * sx) / sw;
    Some((origin_ns + at.round() as i64, period, variance))
}

/// What the reads of one boundary (its reading at `origin_ns`, then the changes) say of the
/// period, ns: longer than any run of reads that saw no step, shorter than the span of any two
/// changes in a row (they hold different steps).
fn period_bounds(steps: &[Step], origin_ns: i64) -> (f64, f64) {
    let first = steps.first().map_or(origin_ns, |s| s.window().0);
    let mut lo = (first - origin_ns) as f64;
    let mut hi = f64::INFINITY;
    for pair in steps.windows(2) {
        let ((from0, to0), (from1, to1)) = (pair[0].window(), pair[1].window());
        lo = lo.max((from1 - to0) as f64);
        hi = hi.min((to1 - from0) as f64);
    }
    (lo.max(0.0), hi)
}

/// A counter's steps as fitted: one step's instant and the period, ns.
#[derive(Debug, Clone, Copy)]
struct Schedule {
    step_ns: i64,
    period_ns: i64,
}

impl Schedule {
    /// The step instant nearest `t_ns`.
    fn nearest(self, t_ns: i64) -> i64 {
        let k = ((t_ns - self.step_ns) as f64 / self.period_ns as f64).round() as i64;
        self.step_ns + k * self.period_ns
    }
}

/// The counter at the boundary instant `t_ns`, from the first change seen after it (`change`,
/// whose `before` is the counter as of the boundary) and the counter's fitted `schedule`. A
/// change a stalled poll saw late may hold several steps: their energy is shared evenly, and
/// the boundary takes its part of the first. Never outside the change's two values.
fn at_boundary(change: Step, schedule: Schedule, t_ns: i64) -> u64 {
    let period = schedule.period_ns.max(1);
    let (seen_from, seen_to) = change.window();
    // The first step lies between the last read that had not seen it and the first that had,
    // and within one period of the former.
    let first = schedule.nearest((seen_from + seen_to.min(seen_from + period)) / 2);
    let steps = 1 + (seen_to - first).div_euclid(period).max(0);
    let energy = (change.after - change.before) as f64 / steps as f64;
    let drawn = 1.0 - (first - t_ns).clamp(0, period) as f64 / period as f64;
    (change.before as f64 + energy * drawn).round() as u64
}

/// Whether changes seen at every poll come from a counter that moves continuously: at least
/// [`PERIOD_STEPS`] + 1 of them, so close together that a counter stepping at most every
/// [`CONTINUOUS_PERIOD_NS`] could not have shown them all.
fn continuous(steps: &[Step]) -> bool {
    let (Some(first), Some(last)) = (steps.first(), steps.last()) else { return false };
    let span = last.window().1 - first.window().0;
    steps.len() > PERIOD_STEPS && span <= CONTINUOUS_PERIOD_NS * (steps.len() as i64 - 1)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// GPU 0's counter known to step every 100 ms, and a boundary reading at 0.950 s of 10 J.
    fn known_period_and_a_boundary_at_950_ms() -> (Boundaries, GpuReading) {
        let mut b = Boundaries::default();
        b.learn(0, Counter::Stepped { period_ns: 100e6, variance: 1e6 });
        (b, GpuReading { t_ns: 950_000_000, energy_mj: Some(10_000), ..GpuReading::default() })
    }

    /// A change seen between reads at `from_ms` and `to_ms`, the counter going `before` to `after`.
    fn seen(from_ms: f64, to_ms: f64, before: u64, after: u64) -> Step {
        let ns = |ms: f64| (ms * 1e6).round() as i64;
        Step { at_ns: (ns(from_ms) + ns(to_ms)) / 2, within_ns: (ns(to_ms) - ns(from_ms)) / 2, before, after }
    }

    #[test]
    fn the_boundary_takes_its_part_of_the_step() {
        let step = seen(999.0, 1001.0, 10_000, 80_000);
        let schedule = Schedule { step_ns: 300_000_000, period_ns: 100_000_000 };
        // 30 ms before a 100 ms step's end: 70 % of the step was drawn before the boundary.
        assert_eq!(at_boundary(step, schedule, 970_000_000), 59_000);
        assert_eq!(at_boundary(step, schedule, 1_000_000_000), 80_000);
        // Never outside the step.
        assert_eq!(at_boundary(step, schedule, 800_000_000), 10_000);
        assert_eq!(at_boundary(step, schedule, 1_100_000_000), 80_000);
    }

    #[test]
    fn a_loosely_seen_step_is_timed_by_the_steps_seen_exactly() {
        let (b, mut boundary) = known_period_and_a_boundary_at_950_ms();
        // The step at 1.000 s was seen late (a poll held 20 ms); the next, at 1.100 s, exactly.
        let loose = seen(1000.0, 1020.0, 10_000, 80_000);
        assert!(b.settle(0, &mut boundary.clone(), &[loose], 5, false).is_none(), "waits for a tight step");
        let tight = seen(1099.75, 1100.25, 80_000, 150_000);
        b.settle(0, &mut boundary, &[loose, tight], 30, false).unwrap();
        // Half of the step's 70 J was drawn before the boundary, 50 ms before its end (the
        // loose step pulls the fit by its small weight: 10 µs here).
        let c = boundary.energy_mj.unwrap();
        assert!((44_990..=45_010).contains(&c), "{c}");
    }

    #[test]
    fn a_first_boundary_learns_the_period_and_a_counter_without_steps_is_left_alone() {
        let b = Boundaries::default();
        let step = |at_ms: f64, c: u64| seen(at_ms - 1.0, at_ms + 1.0, c, c + 7);
        let mut r = GpuReading { t_ns: 0, energy_mj: Some(100), ..GpuReading::default() };
        assert!(
            b.settle(0, &mut r, &[step(40.0, 100), step(140.0, 107)], 40, false).is_none(),
            "a third step first"
        );
        // A stalled poll ran the third and fourth steps together (150 to 345 ms): a change
        // that may hold two steps is left out, and the period is fitted to the two seen one
        // period apart.
        let steps = [step(40.0, 100), step(140.0, 107), seen(150.0, 345.0, 114, 128), step(440.0, 128)];
        let counter = b.settle(0, &mut r, &steps, 90, false);
        let Some(Counter::Stepped { period_ns, .. }) = counter else { panic!("{counter:?}") };
        assert!((period_ns - 100e6).abs() < 1.0, "{period_ns}");
        assert_eq!(r.energy_mj, Some(100 + 7 * 60 / 100), "60% of the step before the boundary");
        // A counter that moved at every one of four polls 30 ms apart (no counter stepping
        // every 100 ms could) is read as read.
        let mut r = GpuReading { t_ns: 0, energy_mj: Some(100), ..GpuReading::default() };
        let polls =
            |n: u64| (0..n).map(|k| seen(30.0 * k as f64, 30.0 * (k + 1) as f64, 100 + 7 * k, 107 + 7 * k));
        let counter = b.settle(0, &mut r, &polls(3).collect::<Vec<_>>(), 0, false);
        assert_eq!(counter, None, "a fourth change first");
        let counter = b.settle(0, &mut r, &polls(4).collect::<Vec<_>>(), 0, false);
        assert_eq!((counter, r.energy_mj), (Some(Counter::Continuous), Some(100)));
    }

    #[test]
    fn changes_at_every_poll_of_a_busy_machine_do_not_make_a_stepping_counter_continuous() {
        // Polls 120 ms apart (a loaded machine) see a 100 ms counter change at every one.
        let b = Boundaries::default();
        let steps = [
            seen(0.0, 120.0, 100, 107),
            seen(120.0, 240.0, 107, 114),
            seen(240.0, 360.0, 114, 121),
            seen(360.0, 480.0, 121, 128),
        ];
        let mut r = GpuReading { t_ns: 0, energy_mj: Some(100), ..GpuReading::default() };
        assert_eq!(b.settle(0, &mut r, &steps, 0, false), None, "not continuous");
        assert_eq!(b.settle(0, &mut r, &steps, 0, true), None, "undecided at the wait's end");
        assert_eq!(r.energy_mj, Some(100), "the reading stands as read");
    }

    #[test]
    fn a_first_change_that_a_stall_saw_late_holds_two_steps() {
        let (b, mut boundary) = known_period_and_a_boundary_at_950_ms();
        // Steps at 1.000, 1.100 and 1.200 s, 70 J each; the boundary at 0.950 s. A stalled
        // poll saw the first two as one change (0.960 to 1.150 s); the third was seen exactly.
        let late = seen(960.0, 1150.0, 10_000, 150_000);
        let tight = seen(1199.5, 1200.5, 150_000, 220_000);
        b.settle(0, &mut boundary, &[late, tight], 30, false).unwrap();
        // Half of the first step was drawn before the boundary.
        let c = boundary.energy_mj.unwrap();
        assert!((44_900..=45_100).contains(&c), "{c}");
    }

    #[test]
    fn steps_seen_in_wide_windows_do_not_teach_a_wrong_period() {
        // A 100 ms counter stepping at 50, 150, 250 and 350 ms, read every 70 ms (0, 70, 140,
        // 210, 280, 350.5): the changes' midpoints are 70 ms apart at best, but the reads
        // allow any period from 70 to 140 ms and cannot count the steps between.
        let b = Boundaries::default();
        let steps = [
            seen(0.0, 70.0, 100, 107),
            seen(140.0, 210.0, 107, 114),
            seen(210.0, 280.0, 114, 121),
            seen(280.0, 350.5, 121, 128),
        ];
        let mut r = GpuReading { t_ns: 0, energy_mj: Some(100), ..GpuReading::default() };
        let counter = b.settle(0, &mut r, &steps, 1, true);
        assert!(
            !matches!(counter, Some(Counter::Stepped { period_ns, .. }) if (period_ns - 100e6).abs() > 10e6),
            "{counter:?}"
        );
    }

    #[test]
    fn a_known_period_times_the_boundary_from_the_one_loose_change_a_busy_machine_saw() {
        let (b, mut boundary) = known_period_and_a_boundary_at_950_ms();
        // One change, seen between reads 80 ms apart, at the wait's end.
        let loose = seen(960.0, 1040.0, 10_000, 80_000);
        assert!(b.settle(0, &mut boundary, &[loose], 3, true).is_some());
        assert_eq!(boundary.energy_mj, Some(45_000), "half of the step, not the reading as read");
    }
}
