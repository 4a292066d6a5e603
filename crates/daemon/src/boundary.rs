//! Readings at a job's begin and end, exact to a few milliseconds on a counter that steps.
//!
//! NVML's energy counter advances in steps (about every 100 ms): a read returns the value of
//! the last step, up to one step old. Between two readings inside a job the steps cancel, but
//! at the job's begin and end a plain read would be off by up to a step's energy each (70 J at
//! 700 W: 5% of a 2-second job). So at a boundary each GPU is read again every [`POLL`] until
//! its counter steps; the step's energy, spread over the step's period, gives the counter at the
//! boundary instant (`c1 − (c1 − c0) · (s1 − t) / period`: the power within one step taken as
//! constant). A GPU's first boundary waits for two steps, to learn its period; a counter that
//! moves at every read (no steps) is read once from then on, as before.

use std::time::{Duration, Instant};

use wattson_gpu::{GpuBackend, GpuError};
use wattson_types::energy::GpuReading;

/// How often a GPU is read while waiting for its counter's step.
pub const POLL: Duration = Duration::from_millis(2);
/// Steps closer than this mean a counter that moves at every read.
const CONTINUOUS_NS: i64 = 20_000_000;
/// The longest wait for a GPU's first two steps (its period unknown).
const FIRST_WAIT: Duration = Duration::from_millis(250);

/// What is known of a GPU's counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Counter {
    /// Not yet seen at a boundary.
    Unseen,
    /// Moves at every read: a boundary reading is exact as read.
    Continuous,
    /// Steps every `period_ns`.
    Stepped { period_ns: i64 },
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
/// it) and the counter before and after.
#[derive(Debug, Clone, Copy)]
struct Step {
    at_ns: i64,
    before: u64,
    after: u64,
}

struct Wait {
    pos: usize,
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
                    .then_some(Wait { pos, last, steps: Vec::new() })
            })
            .collect();
        let longest = waits
            .iter()
            .map(|w| match self.counter(indices[w.pos]) {
                Counter::Stepped { period_ns } => Duration::from_nanos(period_ns as u64 * 3 / 2) + 10 * POLL,
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
                    wait.steps.push(Step { at_ns: last_ns + (t_ns - last_ns) / 2, before, after: now });
                }
                wait.last = (t_ns, now);
                let index = indices[wait.pos];
                let boundary = out[wait.pos].as_mut().expect("waits are on readings");
                if let Some(counter) = self.settle(index, boundary, &wait.steps) {
                    self.learn(index, counter);
                    done.push(k);
                }
            }
            for k in done.into_iter().rev() {
                waits.swap_remove(k);
            }
        }
        for wait in waits {
            let index = indices[wait.pos];
            if self.counter(index) == Counter::Unseen {
                self.learn(index, if wait.steps.is_empty() { Counter::Frozen } else { Counter::Unseen });
            }
        }
        out
    }

    /// With the steps seen so far on GPU `index`, sets `boundary`'s counter to its value at
    /// the boundary instant and returns what is now known of the counter; `None` while more
    /// steps are needed.
    fn settle(&self, index: u32, boundary: &mut GpuReading, steps: &[Step]) -> Option<Counter> {
        let period_ns = match (self.counter(index), steps) {
            (Counter::Stepped { period_ns }, [_, ..]) => period_ns,
            (Counter::Unseen, [first, second, ..]) => second.at_ns - first.at_ns,
            _ => return None,
        };
        if period_ns < CONTINUOUS_NS {
            return Some(Counter::Continuous);
        }
        let first = steps[0];
        // A counter that went back (a driver reload) is left as read.
        if first.after > first.before {
            boundary.energy_mj = Some(at_boundary(first, boundary.t_ns, period_ns));
        }
        Some(Counter::Stepped { period_ns })
    }
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
        let step = Step { at_ns: 1_000_000_000, before: 10_000, after: 80_000 };
        // 30 ms before a 100 ms step's end: 70 % of the step was drawn before the boundary.
        assert_eq!(at_boundary(step, 970_000_000, 100_000_000), 59_000);
        assert_eq!(at_boundary(step, 1_000_000_000, 100_000_000), 80_000);
        // Never outside the step.
        assert_eq!(at_boundary(step, 800_000_000, 100_000_000), 10_000);
        assert_eq!(at_boundary(step, 1_100_000_000, 100_000_000), 80_000);
    }
}
