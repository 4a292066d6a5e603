//! When power decisions are made and carried out. Slurm's power thread scans every
//! `power_save_interval` seconds: its idle timer fires, the suspend and resume programs run
//! and a `SuspendTimeout` ends only on a scan. `wattson ctld` decides once per loop of its
//! `interval`. Both default to 0 (at once, at every event): seconds against boots of minutes;
//! a lab that compresses time makes them count (the replay twin, docs/sim.md).

use wattson_engine::cluster::ClusterPolicy;

use super::super::cluster::ClusterConfig;
use super::super::events::{Event, Queue};

/// Slack for a time computed to fall on a tick.
const EPS: f64 = 1e-9;

/// The scans and loops of one simulated run.
#[derive(Debug, Clone)]
pub(super) struct Cadence {
    /// First tick (the run's start), s.
    t0: f64,
    /// Slurm's power scan interval (s; 0: none).
    scan_s: f64,
    /// The policy's power loop interval (s; 0: every event): the controller's for wattson,
    /// Slurm's power scan for its idle timer.
    loop_s: f64,
    /// The next loop allowed to decide.
    next_loop: f64,
}

impl Cadence {
    /// The cadence of `policy` on cluster `c` from `t0`.
    pub(super) fn new(c: &ClusterConfig, policy: ClusterPolicy, t0: f64) -> Cadence {
        let scan_s = c.slurm.power_save_interval_s;
        let loop_s = match policy {
            ClusterPolicy::Wattson => c.wattson.sim.loop_interval_s,
            p if p.uses_idle_timer() => scan_s,
            _ => 0.0,
        };
        Cadence { t0, scan_s, loop_s, next_loop: t0 }
    }

    /// The first tick of `every` seconds at or after `t`.
    fn tick_after(&self, t: f64, every: f64) -> f64 {
        if every <= 0.0 || t <= self.t0 {
            return t.max(self.t0);
        }
        self.t0 + ((t - self.t0) / every - EPS).ceil() * every
    }

    /// The first Slurm power scan at or after `t`: when a power request made at `t` is
    /// carried out.
    pub(super) fn scan_after(&self, t: f64) -> f64 {
        self.tick_after(t, self.scan_s)
    }

    /// Whether the policy's power decisions at `t` count: true at every event without a
    /// loop; else on the first decision at or after each loop tick, which books a wake-up for
    /// the next tick in `q`.
    pub(super) fn power_loop(&mut self, t: f64, q: &mut Queue) -> bool {
        if self.loop_s <= 0.0 {
            return true;
        }
        if t + EPS < self.next_loop {
            return false;
        }
        self.next_loop = self.t0 + (((t - self.t0) / self.loop_s + EPS).floor() + 1.0) * self.loop_s;
        q.push(self.next_loop, Event::Wake);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cadence(scan_s: f64, loop_s: f64) -> Cadence {
        Cadence { t0: 10.0, scan_s, loop_s, next_loop: 10.0 }
    }

    #[test]
    fn a_request_is_carried_out_on_the_next_scan() {
        let c = cadence(10.0, 0.0);
        assert_eq!(c.scan_after(10.0), 10.0);
        assert_eq!(c.scan_after(10.5), 20.0);
        assert_eq!(c.scan_after(20.0), 20.0);
        assert_eq!(c.scan_after(20.000_000_000_1), 20.0, "a time computed onto a tick stays on it");
        assert_eq!(cadence(0.0, 0.0).scan_after(12.3), 12.3, "no scan: at once");
    }

    #[test]
    fn the_policy_decides_once_per_loop_and_wakes_for_the_next() {
        let mut c = cadence(0.0, 5.0);
        let mut q = Queue::default();
        assert!(c.power_loop(10.0, &mut q));
        assert!(!c.power_loop(10.0, &mut q), "the loop at 10 s has decided");
        assert!(!c.power_loop(14.9, &mut q));
        assert_eq!(q.pop().map(|(t, _)| t), Some(15.0), "woken for the next loop");
        assert!(c.power_loop(16.0, &mut q), "the first event after the 15 s tick");
        assert_eq!(q.pop().map(|(t, _)| t), Some(20.0));
        assert!(cadence(0.0, 0.0).power_loop(10.1, &mut q), "no loop: every event decides");
    }
}
