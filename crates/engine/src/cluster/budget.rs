//! The cluster power budget (`[budget] power_w`), for wattson: DVFS levels and start gating
//! keep the cluster's committed power under the budget.
//!
//! Committed power counts every powered-on or booting node at its idle draw (the most a node
//! without running GPUs draws), a node shutting down at its shutdown draw, an off node at its
//! off draw, every running job's GPUs at their level's power bound (`Level::cap_w`) above idle, and every
//! queued job as if it started now at the least power its bound admits (waking nodes if the
//! powered ones lack room). When that plus the held jobs' starts exceeds the budget, running
//! jobs move to the least-power level their remaining slowdown allowance admits, largest
//! saving first; held jobs are released in submission order, each whose start fits. A job that fits nowhere is released when
//! nothing runs or waits, so the cluster never stalls.

use super::levels::allowance;
use super::{Actions, ClusterPolicy, Level, NodePower, Running, Snapshot, TunedPolicy};

/// Share of the budget kept in reserve for prediction error.
pub const MARGIN: f64 = 0.04;

fn level_w(levels: &[Level], l: u16) -> f64 {
    levels.get(usize::from(l)).map_or(0.0, |x| x.cap_w)
}

/// The least-power level of `levels` whose pessimistic slowdown is within `allowed`.
pub fn least_power_within(levels: &[Level], allowed: f64) -> u16 {
    let top = levels.len().saturating_sub(1);
    let mut best = top;
    for (i, l) in levels.iter().enumerate() {
        if l.slowdown_hi <= allowed && l.cap_w < levels[best].cap_w {
            best = i;
        }
    }
    best as u16
}

/// Applies the budget to `a` (already holding the release, power and level decisions).
pub fn enforce(p: &TunedPolicy, s: &Snapshot, a: &mut Actions) {
    let Some(budget) = s.budget_w else { return };
    if p.kind != ClusterPolicy::Wattson {
        return;
    }
    let cap = budget * (1.0 - MARGIN);
    let idle_of = |t: u16| s.gpu_types.get(usize::from(t)).map_or(0.0, |g| g.idle_w);
    let mut committed = 0.0;
    let mut free_on = 0u64;
    for (i, n) in s.nodes.iter().enumerate() {
        let i = i as u32;
        let node_idle = s.node.base_w + f64::from(n.gpus) * idle_of(n.gpu_type);
        committed += if a.power_down.contains(&i) {
            s.node.shutdown_w.max(s.node.off_w)
        } else if a.power_up.contains(&i) {
            free_on += u64::from(n.free_gpus);
            node_idle.max(s.node.boot_w)
        } else {
            match n.power {
                NodePower::On | NodePower::Booting => {
                    free_on += u64::from(n.free_gpus);
                    node_idle.max(if n.power == NodePower::Booting { s.node.boot_w } else { 0.0 })
                }
                NodePower::Busy => s.node.shutdown_w.max(s.node.off_w),
                NodePower::Off => s.node.off_w,
            }
        };
    }
    let idle_w = idle_of(0);
    let gpn = s.nodes.first().map_or(1, |n| n.gpus.max(1));
    let wake_w = (s.node.base_w + f64::from(gpn) * idle_w).max(s.node.boot_w) - s.node.off_w;
    // Running jobs at their chosen levels.
    let level_of = |r: &Running, a: &Actions| -> u16 {
        a.levels.iter().rev().find(|x| x.0 == r.job.id).map_or(r.level, |x| x.1)
    };
    for r in s.running {
        let levels = &s.models[r.job.model as usize];
        committed += f64::from(r.job.gpus) * (level_w(levels, level_of(r, a)) - idle_w).max(0.0);
    }
    // Queued jobs as if they started now at the least power their bound admits (the level
    // they are held at while the budget binds).
    let start_w = |job: &super::JobView, free_on: &mut u64| -> f64 {
        let levels = &s.models[job.model as usize];
        let low = least_power_within(levels, job.bound);
        let mut w = f64::from(job.gpus) * (level_w(levels, low) - idle_w).max(0.0);
        if *free_on >= u64::from(job.gpus) {
            *free_on -= u64::from(job.gpus);
        } else {
            let short = u64::from(job.gpus) - *free_on;
            *free_on = 0;
            w += short.div_ceil(u64::from(gpn)) as f64 * wake_w;
        }
        w
    };
    for q in s.queued {
        committed += start_w(&q.job, &mut free_on);
    }
    // What the held jobs would add, in order, so that running jobs can make room for them.
    let mut f = free_on;
    let wanted: f64 = a
        .release
        .iter()
        .filter_map(|id| s.held.iter().find(|h| h.job.id == *id))
        .map(|h| start_w(&h.job, &mut f))
        .sum();
    // Boots ahead of demand are the first thing a tight budget gives up.
    if committed + wanted > cap && !a.power_up.is_empty() {
        for &i in &a.power_up {
            let n = &s.nodes[i as usize];
            let node_idle = s.node.base_w + f64::from(n.gpus) * idle_of(n.gpu_type);
            committed -= node_idle.max(s.node.boot_w) - s.node.off_w;
            free_on = free_on.saturating_sub(u64::from(n.free_gpus));
        }
        a.power_up.clear();
    }
    // Over the budget, or starts waiting: running jobs shed power within their allowance,
    // largest saving first.
    if committed + wanted > cap {
        let mut cuts: Vec<(f64, u32, u16)> = s
            .running
            .iter()
            .map(|r| {
                let levels = &s.models[r.job.model as usize];
                let now = level_of(r, a);
                let low = least_power_within(levels, allowance(r));
                let saving = f64::from(r.job.gpus) * (level_w(levels, now) - level_w(levels, low));
                (saving, r.job.id, low)
            })
            .filter(|c| c.0 > 0.0)
            .collect();
        cuts.sort_by(|x, y| y.0.total_cmp(&x.0).then(x.1.cmp(&y.1)));
        for (saving, id, low) in cuts {
            if committed + wanted <= cap {
                break;
            }
            a.levels.retain(|x| x.0 != id);
            a.levels.push((id, low));
            a.shed.push(id);
            committed -= saving;
        }
    }
    a.shed.sort_unstable();
    // Start gating: release held jobs in submission order, each one that fits (a job too large
    // for the headroom does not block smaller ones behind it, as in backfill).
    let mut kept = Vec::with_capacity(a.release.len());
    for &id in &a.release {
        let Some(h) = s.held.iter().find(|h| h.job.id == id) else { continue };
        let mut f = free_on;
        let w = start_w(&h.job, &mut f);
        let idle_cluster = s.running.is_empty() && s.queued.is_empty() && kept.is_empty();
        if committed + w <= cap || idle_cluster {
            committed += w;
            free_on = f;
            kept.push(id);
        }
    }
    if kept.len() < a.release.len() {
        let t = s.now + 60.0;
        a.wake_by(t);
    }
    a.release = kept;
}
