//! Nodes whose resume failed: powered up again a few times, each pause twice the last, then
//! left down with a wattson reason for an administrator. Never silently `down~`.

use std::collections::BTreeMap;

/// What to do about a node whose resume failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Power it up again: this is try number `n`.
    Retry(u32),
    /// Its next try is not due yet.
    Wait,
    /// Give up after `n` tries: leave it down with a reason.
    GiveUp(u32),
}

/// Tries so far and when the next is due (s), per node.
#[derive(Debug)]
pub struct Retries {
    max: u32,
    first_pause_s: f64,
    nodes: BTreeMap<String, (u32, f64)>,
}

impl Retries {
    /// At most `max` tries per failure episode, the first after `first_pause_s`.
    pub fn new(max: u32, first_pause_s: f64) -> Retries {
        Retries { max, first_pause_s, nodes: BTreeMap::new() }
    }

    /// `node`'s resume has failed, seen at `now` (s), after `tried` retries by any controller
    /// (what the node's reason in Slurm says; a count this controller holds wins if larger).
    pub fn failed(&mut self, node: &str, now: f64, tried: u32) -> Verdict {
        let pause = |tries: u32| self.first_pause_s * f64::from(1u32 << tries.min(16));
        let (tries, due) = self.nodes.entry(node.to_string()).or_insert((tried, now + pause(tried)));
        if *tries >= self.max {
            return Verdict::GiveUp(*tries);
        }
        if now < *due {
            return Verdict::Wait;
        }
        *tries += 1;
        *due = now + pause(*tries);
        Verdict::Retry(*tries)
    }

    /// `node` is up and in service: its next failure starts a new count.
    pub fn recovered(&mut self, node: &str) {
        self.nodes.remove(node);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_then_give_up() {
        let mut r = Retries::new(2, 10.0);
        assert_eq!(r.failed("n1", 0.0, 0), Verdict::Wait, "a first pause before the first retry");
        assert_eq!(r.failed("n1", 10.0, 0), Verdict::Retry(1));
        // The retry failed too: the next pause is twice the first.
        assert_eq!(r.failed("n1", 25.0, 1), Verdict::Wait);
        assert_eq!(r.failed("n1", 30.0, 1), Verdict::Retry(2));
        assert_eq!(r.failed("n1", 1e6, 2), Verdict::GiveUp(2));
        // Another node has its own count; a recovered node starts again.
        assert_eq!(r.failed("n2", 1e6 + 10.0, 0), Verdict::Wait);
        r.recovered("n1");
        assert_eq!(r.failed("n1", 2e6, 0), Verdict::Wait);
        assert_eq!(Retries::new(0, 1.0).failed("n3", 0.0, 0), Verdict::GiveUp(0));
    }

    #[test]
    fn a_controller_that_takes_over_counts_on_from_the_nodes_reason() {
        let mut fresh = Retries::new(2, 10.0);
        // One retry made by the controller before: the next waits twice the first pause.
        assert_eq!(fresh.failed("n1", 0.0, 1), Verdict::Wait);
        assert_eq!(fresh.failed("n1", 19.0, 1), Verdict::Wait);
        assert_eq!(fresh.failed("n1", 20.0, 1), Verdict::Retry(2));
        assert_eq!(Retries::new(2, 10.0).failed("n2", 0.0, 2), Verdict::GiveUp(2));
    }
}
