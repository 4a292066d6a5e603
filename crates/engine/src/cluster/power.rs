//! Node power: Slurm's idle timer for the references, right-sizing for wattson.
//!
//! Right-sizing keeps warm only the idle nodes that demand is likely to need before a booted
//! node could serve it plus one break-even time (`boot_s + k·t_be`): jobs arrive as a Poisson
//! stream at the forecast window's rate, and the warm set is the fewest nodes that the demand
//! within the horizon outgrows with probability below `warm_shortfall`. Every other idle node's
//! expected idle gap exceeds the break-even time, so it is powered down at once (no idle floor,
//! no timer). Free GPUs on partly used nodes and GPUs that running jobs release within the
//! horizon serve demand first; deferred jobs due within the horizon add to it, and so do queued
//! jobs that can start within it (the others wait for busy GPUs, not for a boot). On several
//! GPU types, each type's own arrivals also get a warm count, so jobs find their best type warm.
//!
//! The forecast keeps nodes on but boots none: a node is booted ahead only for that known
//! demand (Slurm boots a sleeping node for a job it places there anyway). Booting for the
//! forecast too used more energy in 23 of the 27 ITP cells and left the policy above Slurm's
//! idle timer in two (docs/sim-cells.md).

use super::{Actions, ClusterPolicy, NodePower, Snapshot, TunedPolicy, release_time};

/// Power actions of `p` for `s`.
pub fn decide(p: &TunedPolicy, s: &Snapshot, a: &mut Actions) {
    match p.kind {
        ClusterPolicy::SlurmPowersave | ClusterPolicy::SlurmShards | ClusterPolicy::PowersaveDvfs => {
            idle_timer(p.tuning.suspend_time_s, s, a)
        }
        ClusterPolicy::Wattson => right_size(p, s, a),
        ClusterPolicy::SlurmDefault
        | ClusterPolicy::ZeusPerJob
        | ClusterPolicy::UniformCap
        | ClusterPolicy::Floor => {}
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
            a.wake_by(due);
        }
    }
}

/// GPUs per second submitted over the forecast window ending now: (jobs smaller than a node,
/// jobs of one node or more).
pub fn arrival_rate(s: &Snapshot, window_s: f64, gpn: u32) -> (f64, f64) {
    let from = s.now - window_s;
    let (mut small, mut whole) = (0u64, 0u64);
    for &(_, g) in s.arrivals.iter().rev().take_while(|x| x.0 >= from) {
        if g < gpn {
            small += u64::from(g);
        } else {
            whole += u64::from(g);
        }
    }
    (small as f64 / window_s, whole as f64 / window_s)
}

/// The break-even time of one of `s`'s nodes (s).
pub fn break_even_s(s: &Snapshot) -> f64 {
    let gpn = s.nodes.first().map_or(1, |n| n.gpus.max(1));
    let idle_w = s.node.base_w + f64::from(gpn) * s.gpu_types.first().map_or(0.0, |g| g.idle_w);
    s.node.break_even_s(idle_w)
}

/// GPUs of the queued jobs that can start within `horizon`, in queue order: each while it
/// fits in the GPUs free on nodes that can run jobs (on, booting or off) plus those that
/// running jobs release within the horizon. The first that does not fit, and those behind it,
/// wait for busy GPUs, so a warm node would only idle until then.
fn startable<'a>(s: &Snapshot<'a>, horizon: f64) -> impl Iterator<Item = u32> + 'a {
    let free: u64 =
        s.nodes.iter().filter(|n| n.power != NodePower::Busy).map(|n| u64::from(n.free_gpus)).sum();
    let released: u64 = s
        .running
        .iter()
        .filter(|r| (1.0 - r.progress) * r.job.work_s <= horizon)
        .map(|r| u64::from(r.job.gpus))
        .sum();
    let mut supply = free + released;
    let queued: &'a [super::Queued] = s.queued;
    queued.iter().map(|q| q.job.gpus).take_while(move |&g| {
        let fits = u64::from(g) <= supply;
        if fits {
            supply -= u64::from(g);
        }
        fits
    })
}

/// How many idle nodes to keep warm (powered on or booting) now: the fewest that the node
/// demand within the horizon exceeds with probability below `warm_shortfall`, and on several
/// GPU types at least the sum of each type's own such count (`warm_set`).
pub fn warm_target(p: &TunedPolicy, s: &Snapshot) -> usize {
    warm_set(p, s).target
}

/// How far ahead the warm set looks (s): a boot and `warm_break_evens` break-even times.
fn horizon_s(p: &TunedPolicy, s: &Snapshot) -> f64 {
    s.node.boot_s + p.tuning.warm_break_evens * break_even_s(s)
}

/// The nodes right-sizing keeps warm and boots.
struct WarmSet {
    /// Idle nodes to keep on or booting, for the known demand and the forecast.
    target: usize,
    /// On several GPU types with known arrival types, the warm nodes each type needs for the
    /// jobs that prefer it (empty otherwise).
    per_type: Vec<usize>,
    /// Idle nodes the known demand alone needs (held jobs due and startable queued jobs, less
    /// the free and freed GPUs): as many are booted ahead.
    known_nodes: usize,
}

/// The warm set of `s`. A job runs on its best type only when a node of it is warm; on
/// another type it costs more energy, or waits for a boot past `type_max_cost`. So each
/// type's demand gets its own quantile, and the target is the larger of their sum and the
/// cluster-wide count.
fn warm_set(p: &TunedPolicy, s: &Snapshot) -> WarmSet {
    let gpn = s.nodes.first().map_or(1, |n| n.gpus.max(1));
    let horizon = horizon_s(p, s);
    let until = s.now + horizon;
    // GPUs of each class (jobs smaller than a node, whole-node jobs) that serve demand first,
    // of any type (placement takes a powered node before a boot): free GPUs on partly used
    // nodes, and those whole-node jobs release within the horizon.
    let mut supply = [0.0f64; 2];
    for n in s.nodes {
        if matches!(n.power, NodePower::On | NodePower::Booting) && !is_idle(n) {
            supply[0] += f64::from(n.free_gpus);
        }
    }
    for r in s.running {
        if r.job.gpus >= gpn && (1.0 - r.progress) * r.job.work_s <= horizon {
            supply[1] += f64::from(r.job.gpus);
        }
    }
    // GPUs certainly wanted within the horizon, counted cluster-wide only (their types are
    // unknown): deferred jobs due within it (those due now are released or budget-held) and
    // startable queued jobs.
    let mut known = [0.0f64; 2];
    let held =
        s.held.iter().filter(|h| (s.now + 1e-9..=until).contains(&release_time(p, s, h))).map(|h| h.job.gpus);
    for gpus in held.chain(startable(s, horizon)) {
        known[usize::from(gpus >= gpn)] += f64::from(gpus);
    }
    let certain = [known[0] - supply[0], known[1] - supply[1]];
    let known_nodes = certain.iter().map(|&g| (g.max(0.0) / f64::from(gpn)).ceil() as usize).sum();
    let all = nodes_needed(p, s, None, horizon, certain);
    let types = s.gpu_types.len() as u16;
    if types < 2 || s.arrival_types.len() != s.arrivals.len() {
        return WarmSet { target: all, per_type: Vec::new(), known_nodes };
    }
    let per_type: Vec<usize> =
        (0..types).map(|t| nodes_needed(p, s, Some(t), horizon, [-supply[0], -supply[1]])).collect();
    WarmSet { target: all.max(per_type.iter().sum()), per_type, known_nodes }
}

/// The fewest idle nodes that the demand within `horizon` outgrows with probability below
/// `warm_shortfall`: of the jobs preferring GPU type `of`, or of all jobs with `None`, on top
/// of `certain` GPUs of each class (jobs smaller than a node, whole-node jobs; negative where
/// free GPUs outnumber the known demand). Each class arrives as a Poisson stream at the
/// forecast window's rate of jobs, each of that window's mean size. Counting jobs rather than
/// GPUs keeps a node warm when a job is likely to come, not merely possible.
fn nodes_needed(p: &TunedPolicy, s: &Snapshot, of: Option<u16>, horizon: f64, certain: [f64; 2]) -> usize {
    let gpn = s.nodes.first().map_or(1, |n| n.gpus.max(1));
    let window = p.tuning.forecast_window_s;
    let mut small = Demand { certain: certain[0], ..Demand::default() };
    let mut whole = Demand { certain: certain[1], ..Demand::default() };
    let recent = s.arrivals.iter().enumerate().rev().take_while(|(_, x)| x.0 >= s.now - window);
    for (i, &(_, g)) in recent {
        if of.is_some_and(|t| s.arrival_types.get(i) != Some(&t)) {
            continue;
        }
        let d = if g < gpn { &mut small } else { &mut whole };
        d.jobs += 1;
        d.gpus += f64::from(g);
    }
    let rate = horizon / window;
    let need = convolve(&small.nodes(rate, gpn), &whole.nodes(rate, gpn));
    let mut below = 0.0;
    for (k, p_k) in need.iter().enumerate() {
        below += p_k;
        if 1.0 - below < p.tuning.warm_shortfall {
            return k;
        }
    }
    need.len()
}

/// One class of demand within the horizon (jobs smaller than a node, or whole-node jobs).
#[derive(Default)]
struct Demand {
    /// Jobs of the class submitted over the forecast window.
    jobs: u32,
    /// Their GPUs.
    gpus: f64,
    /// GPUs known to be wanted (held and startable queued jobs), less free or freed ones.
    certain: f64,
}

impl Demand {
    /// The distribution of the nodes this class needs within the horizon, `rate` being the
    /// horizon over the window: index `k` holds P(k nodes). The Poisson tail is cut below 1e-6.
    fn nodes(&self, rate: f64, gpn: u32) -> Vec<f64> {
        let mean = f64::from(self.jobs) * rate;
        let size = if self.jobs > 0 { self.gpus / f64::from(self.jobs) } else { 0.0 };
        let mut out: Vec<f64> = Vec::new();
        let (mut n, mut ln_fact, mut cdf) = (0u32, 0.0f64, 0.0f64);
        while cdf < 1.0 - 1e-6 && n <= 100_000 {
            let pmf = if mean > 0.0 { (f64::from(n) * mean.ln() - mean - ln_fact).exp() } else { 1.0 };
            let k = ((self.certain + f64::from(n) * size).max(0.0) / f64::from(gpn)).ceil() as usize;
            if out.len() <= k {
                out.resize(k + 1, 0.0);
            }
            out[k] += pmf;
            cdf += pmf;
            n += 1;
            ln_fact += f64::from(n).ln();
        }
        out
    }
}

/// The distribution of the sum of two independent counts.
fn convolve(a: &[f64], b: &[f64]) -> Vec<f64> {
    let mut out = vec![0.0; a.len() + b.len() - 1];
    for (i, x) in a.iter().enumerate() {
        for (j, y) in b.iter().enumerate() {
            out[i + j] += x * y;
        }
    }
    out
}

/// Powers down idle nodes beyond the warm target once they have been idle for
/// `keep_break_evens` break-even times, and boots ahead (in node order) while the warm nodes
/// are fewer than the known demand needs. On several GPU types with known arrival types, the
/// idle nodes kept are chosen first up to each type's own warm count ([`warm_set`]); boots
/// stay in node order (booting the wanted types instead lengthened waits: jobs that accept any
/// type found none warm).
fn right_size(p: &TunedPolicy, s: &Snapshot, a: &mut Actions) {
    let WarmSet { target, per_type: mut quota, known_nodes } = warm_set(p, s);
    let keep_s = p.tuning.keep_break_evens * break_even_s(s);
    // Takes one of a type's quota: the node is wanted first.
    let mut wanted = |i: usize| -> bool {
        match quota.get_mut(usize::from(s.nodes[i].gpu_type)) {
            Some(q) if *q > 0 => {
                *q -= 1;
                true
            }
            _ => false,
        }
    };
    let idle_booting: Vec<usize> = (0..s.nodes.len())
        .filter(|&i| s.nodes[i].power == NodePower::Booting && s.nodes[i].free_gpus == s.nodes[i].gpus)
        .collect();
    for &i in &idle_booting {
        wanted(i);
    }
    // Most recently idle first, nodes of a wanted type before the others: they are kept
    // warm, the rest sleep (the longest idle first).
    let mut idle_on: Vec<usize> =
        (0..s.nodes.len()).filter(|&i| s.nodes[i].power == NodePower::On && is_idle(&s.nodes[i])).collect();
    idle_on.sort_by(|&x, &y| s.nodes[y].idle_since.total_cmp(&s.nodes[x].idle_since).then(x.cmp(&y)));
    let (mut first, rest): (Vec<usize>, Vec<usize>) = idle_on.iter().partition(|&&i| wanted(i));
    first.extend(rest);
    let warm = first.len() + idle_booting.len();
    let mut slept = 0;
    if warm > target {
        let keep = target.saturating_sub(idle_booting.len());
        for &i in first.iter().skip(keep) {
            let due = s.nodes[i].idle_since + keep_s;
            if s.now >= due {
                a.power_down.push(i as u32);
                slept += 1;
            } else {
                a.wake_by(due);
            }
        }
        a.power_down.sort_unstable();
    } else if warm < known_nodes {
        let off = (0..s.nodes.len()).filter(|&i| s.nodes[i].power == NodePower::Off);
        a.power_up.extend(off.take(known_nodes - warm).map(|i| i as u32));
    }
    // The forecast keeps idle nodes on only while its arrivals are in the window, and nothing
    // need happen when the oldest leaves it: look again then (the first whole second after),
    // or a node may idle until the next arrival.
    if first.len() > slept {
        let window = p.tuning.forecast_window_s;
        let in_window = s.arrivals.iter().rev().take_while(|x| x.0 >= s.now - window);
        if let Some(&(t, _)) = in_window.last() {
            a.wake_by((t + window).floor() + 1.0);
        }
    }
    // A queued job may become startable once a running job's release enters the horizon:
    // look again then (on a whole second, as Slurm's times are), so that a sleeping node is
    // booted for it in time.
    if !s.queued.is_empty() && s.nodes.iter().any(|n| n.power == NodePower::Off) {
        let h = horizon_s(p, s);
        let enters = s
            .running
            .iter()
            .map(|r| (1.0 - r.progress) * r.job.work_s - h)
            .filter(|&d| d > 0.0)
            .fold(f64::INFINITY, f64::min);
        if enters.is_finite() {
            let at = (s.now + enters).ceil();
            a.wake_by(at);
        }
    }
}
