//! Node power: Slurm's idle timer for the references, right-sizing for wattson.
//!
//! Right-sizing keeps warm only the idle nodes the arrival forecast expects to need before a
//! booted node could serve them plus one break-even time (`boot_s + k·t_be`); every other idle
//! node's expected idle gap exceeds the break-even time, so it is powered down at once (no idle
//! floor, no timer). Free GPUs on partly used nodes and GPUs that running jobs release within
//! the horizon serve demand first; held jobs due within the horizon add to it.

use super::{Actions, NodePower, Policy, PolicyKind, Snapshot, release_time};

/// Power actions of `p` for `s`.
pub fn decide(p: &Policy, s: &Snapshot, a: &mut Actions) {
    match p.kind {
        PolicyKind::SlurmPowersave | PolicyKind::PowersaveDvfs => idle_timer(p.tuning.suspend_time_s, s, a),
        PolicyKind::Wattson => right_size(p, s, a),
        PolicyKind::SlurmDefault | PolicyKind::ZeusPerJob | PolicyKind::Floor => {}
    }
}

fn is_idle(n: &super::NodeView) -> bool {
    n.free_gpus == n.gpus && n.idle_since.is_finite()
}

/// Slurm's `SuspendTime`: a powered-on node idle for `suspend_s` powers down.
fn idle_timer(suspend_s: f64, s: &Snapshot, a: &mut Actions) {
    for (i, n) in s.nodes.iter().enumerate() {
        if n.power != NodePower::On || !is_idle(n) {
            continue;
        }
        let due = n.idle_since + suspend_s;
        if s.now >= due {
            a.power_down.push(i as u32);
        } else {
            a.wake_at = Some(a.wake_at.map_or(due, |w| w.min(due)));
        }
    }
}

/// GPUs per second submitted over the forecast window ending now.
pub fn arrival_rate(s: &Snapshot, window_s: f64) -> f64 {
    let from = s.now - window_s;
    let gpus: u64 = s.arrivals.iter().rev().take_while(|x| x.0 >= from).map(|x| u64::from(x.1)).sum();
    gpus as f64 / window_s
}

/// How many idle nodes to keep warm (powered on or booting) now.
pub fn warm_target(p: &Policy, s: &Snapshot) -> usize {
    let gpn = s.nodes.first().map_or(1, |n| n.gpus.max(1));
    let idle_w = s.node.base_w + f64::from(gpn) * s.gpu_types.first().map_or(0.0, |g| g.idle_w);
    let horizon = s.node.boot_s + p.tuning.warm_break_evens * s.node.break_even_s(idle_w);
    let until = s.now + horizon;
    let mut demand = arrival_rate(s, p.tuning.forecast_window_s) * horizon;
    for h in s.held {
        if release_time(p, s, h) <= until {
            demand += f64::from(h.job.gpus);
        }
    }
    demand += s.queued.iter().map(|q| f64::from(q.job.gpus)).sum::<f64>();
    let mut supply = 0.0;
    for n in s.nodes {
        if matches!(n.power, NodePower::On | NodePower::Booting) && !is_idle(n) {
            supply += f64::from(n.free_gpus);
        }
    }
    for r in s.running {
        let left = (1.0 - r.progress) * r.job.work_s;
        if left <= horizon {
            supply += f64::from(r.job.gpus);
        }
    }
    let need = ((demand - supply) / f64::from(gpn)).ceil();
    if need > 0.0 { need as usize } else { 0 }
}

/// Powers down idle nodes beyond the warm target and boots ahead when below it.
fn right_size(p: &Policy, s: &Snapshot, a: &mut Actions) {
    let target = warm_target(p, s);
    let idle_on: Vec<usize> =
        (0..s.nodes.len()).filter(|&i| s.nodes[i].power == NodePower::On && is_idle(&s.nodes[i])).collect();
    let idle_booting =
        s.nodes.iter().filter(|n| n.power == NodePower::Booting && n.free_gpus == n.gpus).count();
    let warm = idle_on.len() + idle_booting;
    if warm > target {
        // Keep the lowest-numbered ones (packing fills them first); the rest sleep.
        let keep = target.saturating_sub(idle_booting);
        a.power_down.extend(idle_on.iter().skip(keep).map(|&i| i as u32));
    } else if warm < target {
        let off = (0..s.nodes.len()).filter(|&i| s.nodes[i].power == NodePower::Off);
        a.power_up.extend(off.take(target - warm).map(|i| i as u32));
    }
}
