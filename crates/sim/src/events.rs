//! The event queue: a binary heap ordered by (time, insertion number), so events at the same
//! instant are handled in the order they were scheduled and every run is reproducible.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Something that happens at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// A job is submitted.
    Arrive(u32),
    /// A running job ends, if its epoch is unchanged (a level change moves its end).
    Finish(u32, u32),
    /// An allocated job's body starts (after Slurm's start latency).
    Launch(u32),
    /// A node finished booting.
    Booted(u32),
    /// A node finished shutting down (draws its off power; Slurm still waits).
    ShutDown(u32, u32),
    /// A powered-down node's `SuspendTimeout` passed: Slurm may resume it again.
    Available(u32, u32),
    /// The policy asked to be consulted now (an idle timer, a deferred release).
    Wake,
}

#[derive(Debug)]
struct Entry {
    t: f64,
    seq: u64,
    ev: Event,
}

impl PartialEq for Entry {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Entry {}
impl PartialOrd for Entry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Entry {
    /// Reversed: the earliest (then first scheduled) entry is the heap's maximum.
    fn cmp(&self, o: &Self) -> Ordering {
        o.t.total_cmp(&self.t).then(o.seq.cmp(&self.seq))
    }
}

/// Min-heap of events by (time, insertion order).
#[derive(Debug, Default)]
pub struct Queue {
    heap: BinaryHeap<Entry>,
    seq: u64,
}

impl Queue {
    /// Schedules `ev` at `t`.
    pub fn push(&mut self, t: f64, ev: Event) {
        self.seq += 1;
        self.heap.push(Entry { t, seq: self.seq, ev });
    }

    /// The earliest event.
    pub fn pop(&mut self) -> Option<(f64, Event)> {
        self.heap.pop().map(|e| (e.t, e.ev))
    }

    /// Time of the earliest event.
    pub fn peek_time(&self) -> Option<f64> {
        self.heap.peek().map(|e| e.t)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pops_by_time_then_insertion_order() {
        let mut q = Queue::default();
        q.push(5.0, Event::Finish(1, 0));
        q.push(1.0, Event::Arrive(2));
        q.push(5.0, Event::Arrive(3));
        q.push(1.0, Event::Arrive(4));
        let got: Vec<_> = std::iter::from_fn(|| q.pop()).collect();
        assert_eq!(
            got,
            vec![
                (1.0, Event::Arrive(2)),
                (1.0, Event::Arrive(4)),
                (5.0, Event::Finish(1, 0)),
                (5.0, Event::Arrive(3))
            ]
        );
        assert_eq!(q.peek_time(), None);
    }
}
