//! Readings at a job's begin and end, exact to a few milliseconds on a counter that steps.
//!
//! NVML's energy counter advances in steps (about every 100 ms): a read returns the value of
//! the last step, up to one step old. Between two readings inside a job the steps cancel, but
//! at the job's begin and end a plain read would be off by up to a step's energy each (70 J at
//! 700 W: 5% of a 2-second job). So at a boundary each GPU is read again every [`POLL`] until
//! its counter steps; the step's energy, spread over the step's period, gives the counter at the
//! boundary instant (`c1 − (c1 − c0) · (s1 − t) / period`: the power within one step taken as
//! constant). The step's instant `s1` is what a late poll (a busy machine) blurs, so the wait
//! goes on until a step was seen within [`TIGHT_NS`] (at most [`MAX_STEPS`] steps), and `s1` is
//! fitted to all the steps seen, each weighed by how exactly it was seen. A GPU's first boundary
//! waits for three steps, to learn its period, and every later one adds to what is known of it.
//! A counter that moves at every read (no steps) is read once from then on, as before.

use std::time::{Duration, Instant};

use wattson_gpu::{GpuBackend, GpuError};
use wattson_types::energy::GpuReading;

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

/// A step seen while waiting: the instant it happened (the midpoint of the two reads around
/// it, within `within_ns`) and the counter before and after.
#[derive(Debug, Clone, Copy)]
struct Step {
    at_ns: i64,
    within_ns: i64,
    before: u64,
    after: u64,
}

struct Wait {
    pos: usize,
    /// Polls that found the counter where it was.
    quiet: u32,
    /// The last poll: its instant and counter.
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
    }

    /// Reads `indices` at a boundary (now): each reading's counter is the counter's value at
    /// the reading's instant, its step interpolated. Results in the order given.
    pub fn read(&mut self, backend: &dyn GpuBackend, indices: &[u32]) -> Vec<Result<GpuReading, GpuError>> {
        let mut out = backend.read_many(indices);
        let mut waits: Vec<Wait> = out
            .iter()
            .enumerate()
            .filter_map(|(pos, r)| {
                let r = r.as_ref().ok()?;
                let last = (r.t_ns, r.energy_mj?);
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
            let readings = backend.read_counters(&polled);
            let mut done = Vec::new();
            for (k, (wait, reading)) in waits.iter_mut().zip(readings).enumerate() {
                let Some((t_ns, now)) = reading.ok().and_then(|(t, c)| Some((t, c?))) else {
                    done.push(k); // Gave no counter this time: the boundary reading stands.
                    continue;
                };
                let (last_ns, before) = wait.last;
                if now != before {
                    let within_ns = (t_ns - last_ns) / 2;
                    wait.steps.push(Step { at_ns: last_ns + within_ns, within_ns, before, after: now });
                } else {
                    wait.quiet += 1;
                }
                wait.last = (t_ns, now);
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
            // A counter that moved at every poll has no steps to wait for (a stepping one,
            // polled far faster than it steps, stays put between its steps).
            if steps.len() >= 2 && quiet == 0 {
                return Some(Counter::Continuous);
            }
            if steps.len() < PERIOD_STEPS && !(last_chance && steps.len() >= 2) {
                return None;
            }
        }
        let tight = steps.iter().any(|s| s.within_ns <= TIGHT_NS);
        if !tight && steps.len() < MAX_STEPS && !last_chance {
            return None;
        }
        let (end_ns, period_ns, variance) = fit(steps, boundary.t_ns, known)?;
        // A counter that went back (a driver reload) is left as read.
        if first.after > first.before {
            let timed = Step { at_ns: end_ns, ..first };
            boundary.energy_mj = Some(at_boundary(timed, boundary.t_ns, period_ns.round() as i64));
        }
        Some(Counter::Stepped { period_ns, variance })
    }
}

/// The instant of the first step and the period, fitted to the steps seen (each weighed by how
/// exactly it was seen), with what was known of the period before: (first step ns, period ns,
/// the period's variance ns²). A step seen far less exactly than the best (a stalled poll) is
/// left out, and steps a stall ran together count as the periods between.
fn fit(steps: &[Step], origin_ns: i64, known: Option<(f64, f64)>) -> Option<(i64, f64, f64)> {
    let best = steps.iter().map(|s| s.within_ns).min()?.max(250_000);
    let kept: Vec<(usize, &Step)> =
        steps.iter().enumerate().filter(|(_, s)| s.within_ns <= 4 * best).collect();
    let y: Vec<f64> = kept.iter().map(|(_, s)| (s.at_ns - origin_ns) as f64).collect();
    let w: Vec<f64> = kept.iter().map(|(_, s)| 1.0 / (s.within_ns.max(250_000) as f64).powi(2)).collect();
    // A stall only lengthens a gap: the shortest is one period.
    let guess = known.map(|(p, _)| p).or_else(|| y.windows(2).map(|g| g[1] - g[0]).min_by(f64::total_cmp))?;
    // Periods from the first step, each kept step at least one past the kept one before it.
    let mut x = vec![kept[0].0 as f64];
    for (g, k) in y.windows(2).zip(kept.windows(2)) {
        let last = *x.last().expect("starts with one");
        let between = ((g[1] - g[0]) / guess).round().max((k[1].0 - k[0].0) as f64);
        x.push(last + between);
    }
    let sum = |f: &dyn Fn(usize) -> f64| (0..y.len()).map(f).sum::<f64>();
    let (sw, sx, sy) = (sum(&|i| w[i]), sum(&|i| w[i] * x[i]), sum(&|i| w[i] * y[i]));
    let (sxx, sxy) = (sum(&|i| w[i] * x[i] * x[i]), sum(&|i| w[i] * x[i] * y[i]));
    let d = sw * sxx - sx * sx;
    let (period, variance) = match (known, d > 0.0) {
        (None, true) => ((sw * sxy - sx * sy) / d, sw / d),
        (Some((p0, v0)), true) => {
            // This boundary's own estimate, pooled with what was known, unless the two
            // disagree beyond their spreads (a step miscounted).
            let (p1, v1) = ((sw * sxy - sx * sy) / d, sw / d);
            if (p1 - p0).abs() > 3.0 * (v0 + v1).sqrt() {
                (p0, v0)
            } else {
                ((p0 / v0 + p1 / v1) / (1.0 / v0 + 1.0 / v1), 1.0 / (1.0 / v0 + 1.0 / v1))
            }
        }
        (Some(known), false) => known,
        (None, false) => return None,
    };
    let first = (sy - period * sx) / sw;
    Some((origin_ns + first.round() as i64, period, variance))
}

/// The counter at instant `t_ns` within the step that ended at `step.at_ns`, its energy spread
/// evenly over `period_ns`; never outside the step's two values.
fn at_boundary(step: Step, t_ns: i64, period_ns: i64) -> u64 {
    let energy = (step.after - step.before) as f64;
    let left = (step.at_ns - t_ns).clamp(0, period_ns) as f64 / period_ns as f64;
    (step.after as f64 - energy * left).round() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_boundary_takes_its_part_of_the_step() {
        let step = Step { at_ns: 1_000_000_000, within_ns: 1_000_000, before: 10_000, after: 80_000 };
        // 30 ms before a 100 ms step's end: 70 % of the step was drawn before the boundary.
        assert_eq!(at_boundary(step, 970_000_000, 100_000_000), 59_000);
        assert_eq!(at_boundary(step, 1_000_000_000, 100_000_000), 80_000);
        // Never outside the step.
        assert_eq!(at_boundary(step, 800_000_000, 100_000_000), 10_000);
        assert_eq!(at_boundary(step, 1_100_000_000, 100_000_000), 80_000);
    }

    #[test]
    fn a_loosely_seen_step_is_timed_by_the_steps_seen_exactly() {
        let mut b = Boundaries::default();
        b.learn(0, Counter::Stepped { period_ns: 100e6, variance: 1e6 });
        let mut boundary = GpuReading { t_ns: 950_000_000, energy_mj: Some(10_000), ..GpuReading::default() };
        // The step at 1.000 s was seen late (a poll held 20 ms); the next, at 1.100 s, exactly.
        let loose = Step { at_ns: 1_010_000_000, within_ns: 10_000_000, before: 10_000, after: 80_000 };
        assert!(b.settle(0, &mut boundary.clone(), &[loose], 5, false).is_none(), "waits for a tight step");
        let tight = Step { at_ns: 1_100_000_000, within_ns: 250_000, before: 80_000, after: 150_000 };
        b.settle(0, &mut boundary, &[loose, tight], 30, false).unwrap();
        // Half of the step's 70 J was drawn before the boundary, 50 ms before its end (the
        // loose step pulls the fit by its small weight: 10 µs here).
        let c = boundary.energy_mj.unwrap();
        assert!((44_990..=45_010).contains(&c), "{c}");
    }

    #[test]
    fn a_first_boundary_learns_the_period_and_a_counter_without_steps_is_left_alone() {
        let b = Boundaries::default();
        let step = |at_ms: i64, c: u64| Step {
            at_ns: at_ms * 1_000_000,
            within_ns: 1_000_000,
            before: c,
            after: c + 7,
        };
        let mut r = GpuReading { t_ns: 0, energy_mj: Some(100), ..GpuReading::default() };
        assert!(
            b.settle(0, &mut r, &[step(40, 100), step(140, 107)], 40, false).is_none(),
            "a third step first"
        );
        // A stalled poll ran the third and fourth steps together: they count as two periods.
        let counter = b.settle(0, &mut r, &[step(40, 100), step(140, 107), step(340, 114)], 90, false);
        let Some(Counter::Stepped { period_ns, .. }) = counter else { panic!("{counter:?}") };
        assert!((period_ns - 100e6).abs() < 1.0, "{period_ns}");
        assert_eq!(r.energy_mj, Some(100 + 7 * 60 / 100), "60% of the step before the boundary");
        // A counter that moved at every poll, however slow the polls (30 ms apart on a busy
        // machine), is read as read.
        let mut r = GpuReading { t_ns: 0, energy_mj: Some(100), ..GpuReading::default() };
        let counter = b.settle(0, &mut r, &[step(30, 100), step(60, 107)], 0, false);
        assert_eq!((counter, r.energy_mj), (Some(Counter::Continuous), Some(100)));
    }
}
