//! GPU allocation and Slurm's scheduling: FIFO order with EASY backfill.
//!
//! [`Pool`] holds each node's free GPUs (as a bit mask, so every allocation names its GPUs),
//! whether the node can take work now (`tier`: 0 powered on, 1 booting, 2 powered off and
//! resumable, [`UNAVAILABLE`] while powering down) and its group (GPU type). A job runs on
//! nodes of one group, trying the groups in its own order. A histogram of free counts over
//! each group's available nodes makes "does this job fit?" O(GPUs per node), which keeps
//! backfill cheap.
//!
//! EASY backfill: jobs start in queue order while they fit; the first that does not gets a
//! reservation at the *shadow time* (the earliest instant enough GPUs are free, from the
//! running jobs' end times); later jobs (at most `bf_max_job_test`) may start now if they end
//! by the shadow time or leave the reservation intact. Run times are known exactly (the trace
//! gives them), so estimates are perfect for every policy alike.

use std::collections::BTreeSet;

/// Tier of a node that cannot take work now (shutting down, or waiting out `SuspendTimeout`).
pub const UNAVAILABLE: u8 = u8::MAX;

pub use wattson_engine::cluster::Placement;

/// Per-node GPU allocation state.
#[derive(Debug, Clone)]
pub struct Pool {
    /// GPUs per node.
    pub gpn: u32,
    /// Free GPUs per node.
    pub free: Vec<u32>,
    /// Free-GPU bit mask per node.
    pub mask: Vec<u64>,
    /// Availability tier per node.
    pub tier: Vec<u8>,
    /// Group (GPU type) per node.
    pub group: Vec<u16>,
    /// `hist[g·(gpn+1) + k]`: available nodes of group `g` with exactly `k` free GPUs.
    hist: Vec<u32>,
}

/// One node's share of a job: (node, GPU bit mask).
pub type Share = (u32, u64);

impl Pool {
    /// One node of `gpn` GPUs per entry of `groups` (its group), all free and powered on.
    pub fn new(groups: &[u16], gpn: u32) -> Pool {
        let full = if gpn >= 64 { u64::MAX } else { (1u64 << gpn) - 1 };
        let n = groups.len();
        let width = gpn as usize + 1;
        let mut hist = vec![0; width * (groups.iter().copied().max().map_or(0, usize::from) + 1)];
        for &g in groups {
            hist[usize::from(g) * width + gpn as usize] += 1;
        }
        Pool { gpn, free: vec![gpn; n], mask: vec![full; n], tier: vec![0; n], group: groups.to_vec(), hist }
    }

    /// Index in `hist` of node `n`'s group with `k` free GPUs.
    fn slot(&self, n: usize, k: u32) -> usize {
        usize::from(self.group[n]) * (self.gpn as usize + 1) + k as usize
    }

    /// Sets a node's tier, keeping the histogram right.
    pub fn set_tier(&mut self, n: usize, tier: u8) {
        let at = self.slot(n, self.free[n]);
        if self.tier[n] != UNAVAILABLE {
            self.hist[at] -= 1;
        }
        self.tier[n] = tier;
        if tier != UNAVAILABLE {
            self.hist[at] += 1;
        }
    }

    fn set_free(&mut self, n: usize, free: u32) {
        if self.tier[n] != UNAVAILABLE {
            let (from, to) = (self.slot(n, self.free[n]), self.slot(n, free));
            self.hist[from] -= 1;
            self.hist[to] += 1;
        }
        self.free[n] = free;
    }

    /// Whether a job of `g` GPUs fits now on the available nodes of a group in `order`.
    pub fn fits(&self, g: u32, order: &[u16]) -> bool {
        fits_groups(&self.hist, self.gpn, g, order)
    }

    /// Takes `count` GPUs on node `n` (lowest free indices); returns the mask taken.
    pub fn take(&mut self, n: usize, count: u32) -> u64 {
        let mut m = self.mask[n];
        let mut taken = 0u64;
        for _ in 0..count {
            let bit = m & m.wrapping_neg();
            taken |= bit;
            m &= !bit;
        }
        self.mask[n] = m;
        self.set_free(n, self.free[n] - count);
        taken
    }

    /// Gives GPUs back.
    pub fn give(&mut self, n: usize, taken: u64) {
        self.mask[n] |= taken;
        self.set_free(n, self.free[n] + taken.count_ones());
    }

    /// Where a job of `g` GPUs would go now: (node, count) pairs, or `None`. On several
    /// groups, the first group of `order` where it fits on powered-on (or booting) nodes, else
    /// the first where it fits at all: a boot is not worth a better GPU type.
    pub fn place(&self, g: u32, how: Placement, order: &[u16]) -> Option<Vec<(u32, u32)>> {
        let nodes = Nodes { free: &self.free, tier: &self.tier, group: &self.group, gpn: self.gpn };
        if order.len() > 1
            && let Some(at) = order.iter().find_map(|&grp| place_on(&nodes, g, how, grp, 1))
        {
            return Some(at);
        }
        order.iter().find_map(|&grp| place_on(&nodes, g, how, grp, 2))
    }
}

/// Whether a job of `g` GPUs fits on one of the groups in `order` by the histogram `hist`.
fn fits_groups(hist: &[u32], gpn: u32, g: u32, order: &[u16]) -> bool {
    let width = gpn as usize + 1;
    order.iter().any(|&grp| {
        let at = usize::from(grp) * width;
        hist.get(at..at + width).is_some_and(|h| fits_hist(h, gpn, g))
    })
}

/// Free counts, tiers and groups of the nodes (the pool's, or the shadow-time copy).
struct Nodes<'a> {
    free: &'a [u32],
    tier: &'a [u8],
    group: &'a [u16],
    gpn: u32,
}

fn fits_hist(hist: &[u32], gpn: u32, g: u32) -> bool {
    let full = hist[gpn as usize];
    if g <= gpn {
        return hist[g as usize..].iter().any(|&c| c > 0);
    }
    let (k, rem) = (g / gpn, g % gpn);
    if rem == 0 {
        full >= k
    } else {
        full > k || (full == k && hist[rem as usize..gpn as usize].iter().any(|&c| c > 0))
    }
}

/// Placement of `g` GPUs on the nodes of group `grp` of tier `max_tier` or lower.
fn place_on(nodes: &Nodes, g: u32, how: Placement, grp: u16, max_tier: u8) -> Option<Vec<(u32, u32)>> {
    let Nodes { free, tier, group, gpn } = *nodes;
    // Preference key of a node for a share of `need` GPUs; lower is better.
    let key = |n: usize, need: u32| -> Option<(u8, u32, usize)> {
        if group[n] != grp || tier[n] > max_tier || free[n] < need {
            return None;
        }
        let fit = match how {
            Placement::FirstFit => 0,
            Placement::Pack => free[n] - need,
        };
        Some((tier[n], fit, n))
    };
    let best = |need: u32, skip: &[(u32, u32)]| -> Option<usize> {
        (0..free.len())
            .filter(|&n| !skip.iter().any(|&(s, _)| s as usize == n))
            .filter_map(|n| key(n, need))
            .min()
            .map(|(_, _, n)| n)
    };
    let mut out: Vec<(u32, u32)> = Vec::new();
    if g <= gpn {
        return best(g, &out).map(|n| vec![(n as u32, g)]);
    }
    let (k, rem) = (g / gpn, g % gpn);
    let mut whole: Vec<(u8, usize)> = (0..free.len())
        .filter(|&n| group[n] == grp && tier[n] <= max_tier && free[n] == gpn)
        .map(|n| (tier[n], n))
        .collect();
    if whole.len() < k as usize {
        return None;
    }
    whole.sort_unstable();
    out.extend(whole[..k as usize].iter().map(|&(_, n)| (n as u32, gpn)));
    if rem > 0 {
        let n = best(rem, &out)?;
        out.push((n as u32, rem));
    }
    Some(out)
}

/// What a scheduling pass needs to know about jobs.
pub trait JobView {
    /// GPUs of a job.
    fn gpus(&self, job: u32) -> u32;
    /// Expected run time of a queued job on a node of group `group` (s).
    fn runtime(&self, job: u32, group: u16) -> f64;
    /// The groups a job may run on, in the order it tries them.
    fn order(&self, job: u32) -> &[u16];
    /// Shares of a running (or booting) job.
    fn shares(&self, job: u32) -> &[Share];
}

/// Running jobs by expected end: `(end time bits, job)`; end times are ≥ 0 so their bit
/// patterns sort like the numbers.
pub type Ends = BTreeSet<(u64, u32)>;

/// What one scheduling pass reads besides the pool and the queue.
pub struct PassInput<'a> {
    /// The instant of the pass (s).
    pub now: f64,
    /// Running (and booting) jobs by expected end.
    pub ends: &'a Ends,
    /// (time, node): unavailable nodes that become resumable at `time`.
    pub later: &'a [(f64, u32)],
    /// The jobs.
    pub jobs: &'a dyn JobView,
    /// Placement rule.
    pub how: Placement,
    /// `bf_max_job_test`.
    pub depth: usize,
}

/// One FIFO + EASY backfill pass. Starts jobs by taking their GPUs from `pool` and returns
/// them with their shares, in start order; removes them from `queue`.
pub fn easy_pass(pool: &mut Pool, queue: &mut Vec<u32>, input: &PassInput) -> Vec<(u32, Vec<Share>)> {
    let PassInput { now, ends, later, jobs, how, depth } = *input;
    let mut started = Vec::new();
    let start = |pool: &mut Pool, at: Vec<(u32, u32)>| -> Vec<Share> {
        at.into_iter().map(|(n, c)| (n, pool.take(n as usize, c))).collect()
    };
    // FIFO: start from the head while jobs fit.
    let mut head = 0;
    while head < queue.len() {
        let j = queue[head];
        if !pool.fits(jobs.gpus(j), jobs.order(j)) {
            break;
        }
        let Some(at) = pool.place(jobs.gpus(j), how, jobs.order(j)) else { break };
        started.push((j, start(pool, at)));
        head += 1;
    }
    queue.drain(..head);
    if queue.len() < 2 {
        return started;
    }
    // The head is blocked: find its shadow time on a copy of the pool.
    let blocked = queue[0];
    let (g, head_order) = (jobs.gpus(blocked), jobs.order(blocked));
    let width = pool.gpn as usize + 1;
    let groups = pool.group.clone();
    let slot = |n: usize, k: u32| usize::from(groups[n]) * width + k as usize;
    let mut free = pool.free.clone();
    let mut tier = pool.tier.clone();
    let mut hist = pool.hist.clone();
    let mut shadow = f64::INFINITY;
    let mut releases: Vec<(f64, Result<u32, u32>)> =
        ends.iter().map(|&(b, j)| (f64::from_bits(b), Ok(j))).collect();
    releases.extend(later.iter().map(|&(t, n)| (t, Err(n))));
    releases.sort_by(|a, b| a.0.total_cmp(&b.0));
    for (t, what) in releases {
        match what {
            Ok(j) => {
                for &(n, m) in jobs.shares(j) {
                    let n = n as usize;
                    if tier[n] != UNAVAILABLE {
                        hist[slot(n, free[n])] -= 1;
                        hist[slot(n, free[n] + m.count_ones())] += 1;
                    }
                    free[n] += m.count_ones();
                }
            }
            Err(n) => {
                let n = n as usize;
                if tier[n] == UNAVAILABLE {
                    tier[n] = 2;
                    hist[slot(n, free[n])] += 1;
                }
            }
        }
        if fits_groups(&hist, pool.gpn, g, head_order) {
            shadow = t;
            break;
        }
    }
    // Backfill behind the blocked head.
    let mut i = 1;
    let mut tried = 0;
    while i < queue.len() && tried < depth {
        tried += 1;
        let j = queue[i];
        let gj = jobs.gpus(j);
        let fits_now = pool.fits(gj, jobs.order(j));
        let at = if fits_now { pool.place(gj, how, jobs.order(j)) } else { None };
        let Some(at) = at else {
            i += 1;
            continue;
        };
        let ok = if now + jobs.runtime(j, pool.group[at[0].0 as usize]) <= shadow {
            true
        } else {
            // Still running at the shadow time: the head must still fit around it then.
            for &(n, c) in &at {
                let n = n as usize;
                hist[slot(n, free[n])] -= 1;
                free[n] -= c;
                hist[slot(n, free[n])] += 1;
            }
            let shadow_nodes = Nodes { free: &free, tier: &tier, group: &groups, gpn: pool.gpn };
            let still = head_order.iter().any(|&grp| place_on(&shadow_nodes, g, how, grp, 2).is_some());
            if !still {
                for &(n, c) in &at {
                    let n = n as usize;
                    hist[slot(n, free[n])] -= 1;
                    free[n] += c;
                    hist[slot(n, free[n])] += 1;
                }
            }
            still
        };
        if ok {
            started.push((j, start(pool, at)));
            queue.remove(i);
            if pool.hist.chunks(width).all(|h| h[1..].iter().all(|&c| c == 0)) {
                break; // nothing free anywhere
            }
        } else {
            i += 1;
        }
    }
    started
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Jobs(Vec<(u32, f64)>, Vec<Vec<Share>>);
    impl JobView for Jobs {
        fn gpus(&self, j: u32) -> u32 {
            self.0[j as usize].0
        }
        fn runtime(&self, j: u32, _: u16) -> f64 {
            self.0[j as usize].1
        }
        fn order(&self, _: u32) -> &[u16] {
            &[0]
        }
        fn shares(&self, j: u32) -> &[Share] {
            &self.1[j as usize]
        }
    }

    #[test]
    fn pack_uses_the_fullest_node_and_first_fit_the_first() {
        let mut p = Pool::new(&[0, 0, 0], 8);
        p.take(1, 5);
        assert_eq!(p.place(2, Placement::Pack, &[0]), Some(vec![(1, 2)]));
        assert_eq!(p.place(2, Placement::FirstFit, &[0]), Some(vec![(0, 2)]));
        assert_eq!(p.place(16, Placement::Pack, &[0]), Some(vec![(0, 8), (2, 8)]));
        assert_eq!(p.place(17, Placement::Pack, &[0]), Some(vec![(0, 8), (2, 8), (1, 1)]));
        assert_eq!(p.place(20, Placement::Pack, &[0]), None);
        assert!(p.fits(9, &[0]) && p.fits(17, &[0]) && !p.fits(20, &[0]));
        p.set_tier(0, UNAVAILABLE);
        assert_eq!(p.place(16, Placement::Pack, &[0]), None);
        assert!(!p.fits(16, &[0]));
        assert!(p.fits(8, &[0]));
    }

    #[test]
    fn a_job_stays_on_one_group_in_its_order_preferring_powered_nodes() {
        // Nodes 0-1 group 0, nodes 2-3 group 1; node 2 is asleep.
        let mut p = Pool::new(&[0, 0, 1, 1], 8);
        p.set_tier(2, 2);
        assert_eq!(p.place(4, Placement::Pack, &[1, 0]), Some(vec![(3, 4)]));
        // 16 GPUs of group 1 need the sleeping node; group 0 has two powered nodes: no boot.
        assert_eq!(p.place(16, Placement::Pack, &[1, 0]), Some(vec![(0, 8), (1, 8)]));
        // Only group 1 offered: it boots node 2 rather than span groups.
        assert_eq!(p.place(16, Placement::Pack, &[1]), Some(vec![(3, 8), (2, 8)]));
        p.take(0, 8);
        assert_eq!(p.place(16, Placement::Pack, &[0]), None, "group 0 has 8 free GPUs");
        assert!(!p.fits(9, &[0]) && p.fits(9, &[1]) && p.fits(9, &[0, 1]));
        assert_eq!(p.place(24, Placement::Pack, &[0, 1]), None, "no job spans groups");
    }

    #[test]
    fn take_and_give_name_distinct_gpus() {
        let mut p = Pool::new(&[0], 8);
        let a = p.take(0, 3);
        let b = p.take(0, 2);
        assert_eq!(a & b, 0);
        assert_eq!((a | b).count_ones(), 5);
        p.give(0, a);
        assert_eq!(p.free[0], 6);
        let c = p.take(0, 3);
        assert_eq!(c, a);
    }

    #[test]
    fn backfill_never_delays_the_blocked_head() {
        // 1 node of 8: job 0 (running, 6 GPUs, ends at 100). Queue: job 1 needs 8 (blocked,
        // shadow 100); job 2 needs 2 for 500 s (would delay job 1: refused); job 3 needs 2
        // for 50 s (ends before the shadow: backfilled).
        let mut pool = Pool::new(&[0], 8);
        let m = pool.take(0, 6);
        let jobs = Jobs(
            vec![(6, 100.0), (8, 10.0), (2, 500.0), (2, 50.0)],
            vec![vec![(0, m)], vec![], vec![], vec![]],
        );
        let mut ends = Ends::new();
        ends.insert((100f64.to_bits(), 0));
        let mut queue = vec![1, 2, 3];
        let input = PassInput {
            now: 0.0,
            ends: &ends,
            later: &[],
            jobs: &jobs,
            how: Placement::FirstFit,
            depth: 100,
        };
        let s = easy_pass(&mut pool, &mut queue, &input);
        assert_eq!(s.iter().map(|x| x.0).collect::<Vec<_>>(), vec![3]);
        assert_eq!(queue, vec![1, 2]);
    }
}
