//! The event loop: one policy over one prepared trace, on the cluster model.
//!
//! Events (arrivals, releases of deferred jobs, job ends, boots, shutdowns, idle timers) come
//! off [`super::events::Queue`]; after the last event of an instant the scheduler runs one
//! FIFO + EASY backfill pass, then (for `wattson`) right-sizing. Nothing steps per second.

use std::collections::{BTreeSet, VecDeque};

use super::cluster::ClusterConfig;
use super::events::{Event, Queue};
use super::policies::{PolicyKind, SimJob};
use super::power::{Meter, NodeState};
use super::scheduler::{Ends, JobView, PassInput, Pool, Share, UNAVAILABLE, easy_pass};
use super::workloads::Catalog;

/// What happened to one job under one policy.
#[derive(Debug, Clone, PartialEq)]
pub struct JobRun {
    /// When the scheduler gave it GPUs (s); NaN if never.
    pub alloc: f64,
    /// When it started running (after any boot) (s); NaN if never.
    pub start: f64,
    /// When it ended (s); NaN if never.
    pub end: f64,
    /// Power limit it ran at (W).
    pub limit_w: f64,
    /// Measured average power per GPU at that limit (W).
    pub gpu_w: f64,
    /// Measured slowdown vs the max limit (fraction; may be slightly negative: noise).
    pub slowdown: f64,
    /// Its GPUs: (node, bit mask) per node.
    pub shares: Vec<Share>,
}

/// One policy's simulated run.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// The policy.
    pub policy: PolicyKind,
    /// Per job, in prepared-job order.
    pub jobs: Vec<JobRun>,
    /// The energy meter, finished at the last job end.
    pub meter: Meter,
    /// First submission (s).
    pub t0: f64,
    /// Last job end (s).
    pub t_end: f64,
}

struct View<'a> {
    jobs: &'a [SimJob],
    runtime: &'a [f64],
    runs: &'a [JobRun],
}

impl JobView for View<'_> {
    fn gpus(&self, j: u32) -> u32 {
        self.jobs[j as usize].gpus
    }
    fn runtime(&self, j: u32) -> f64 {
        self.runtime[j as usize]
    }
    fn shares(&self, j: u32) -> &[Share] {
        &self.runs[j as usize].shares
    }
}

struct Sim<'a> {
    c: &'a ClusterConfig,
    jobs: &'a [SimJob],
    policy: PolicyKind,
    pool: Pool,
    meter: Meter,
    q: Queue,
    queue: Vec<u32>,
    ends: Ends,
    runs: Vec<JobRun>,
    runtime: Vec<f64>,
    waiting: Vec<Vec<u32>>,
    pending: Vec<u32>,
    ready_at: Vec<f64>,
    epoch: Vec<u32>,
    later: Vec<(f64, u32)>,
    arrivals: VecDeque<(f64, u32)>,
    arrival_gpus: u64,
    upcoming: BTreeSet<(u64, u32)>,
    break_even: f64,
    done: usize,
    relaxed: Vec<(f64, f64, f64, f64)>,
}

/// Simulates `policy` (not the oracle, which needs no simulation: see
/// [`super::metrics::oracle`]) over prepared `jobs` (sorted by submission).
pub fn simulate(c: &ClusterConfig, catalog: &Catalog, jobs: &[SimJob], policy: PolicyKind) -> RunResult {
    let t0 = jobs.first().map_or(0.0, |j| j.submit);
    let n = c.nodes as usize;
    let mut runs = Vec::with_capacity(jobs.len());
    let mut runtime = Vec::with_capacity(jobs.len());
    let mut relaxed = Vec::new();
    for j in jobs {
        let w = &catalog.workloads[j.workload];
        let chosen = j.setting_for(policy);
        // wattson starts from the max limit and relaxes to the engine's choice only when the
        // cluster has room (see `schedule`): a slowdown during congestion is paid in queueing.
        let i = if policy == PolicyKind::Wattson { w.max_idx() } else { chosen };
        let ratio = w.time_ratio(i);
        runtime.push(j.duration * ratio);
        runs.push(JobRun {
            alloc: f64::NAN,
            start: f64::NAN,
            end: f64::NAN,
            limit_w: w.limits[i],
            gpu_w: w.power[i],
            slowdown: ratio - 1.0,
            shares: Vec::new(),
        });
        let r = w.time_ratio(chosen);
        relaxed.push((j.duration * r, w.limits[chosen], w.power[chosen], r - 1.0));
    }
    let mut s = Sim {
        c,
        jobs,
        policy,
        pool: Pool::new(c.nodes, c.gpus_per_node),
        meter: Meter::new(c, t0),
        q: Queue::default(),
        queue: Vec::new(),
        ends: Ends::new(),
        runs,
        runtime,
        waiting: vec![Vec::new(); n],
        pending: vec![0; jobs.len()],
        ready_at: vec![t0; n],
        epoch: vec![0; n],
        later: Vec::new(),
        arrivals: VecDeque::new(),
        arrival_gpus: 0,
        upcoming: BTreeSet::new(),
        break_even: c.node.break_even_s(c.node_idle_w()),
        done: 0,
        relaxed,
    };
    for (i, j) in jobs.iter().enumerate() {
        s.q.push(j.submit, Event::Arrive(i as u32));
    }
    if policy == PolicyKind::SlurmPowersave {
        for node in 0..n {
            s.q.push(t0 + c.slurm.suspend_time_s, Event::IdleTimer(node as u32, 0));
        }
    }
    let mut t_end = t0;
    while let Some((t, ev)) = s.q.pop() {
        s.handle(t, ev);
        if matches!(ev, Event::Finish(_)) {
            t_end = t_end.max(t);
        }
        if s.q.peek_time() != Some(t) {
            s.schedule(t);
            if policy == PolicyKind::Wattson {
                s.right_size(t);
            }
        }
        if s.done == jobs.len() {
            break;
        }
    }
    s.meter.finish(t_end);
    RunResult { policy, jobs: s.runs, meter: s.meter, t0, t_end }
}

impl Sim<'_> {
    fn handle(&mut self, t: f64, ev: Event) {
        match ev {
            Event::Arrive(j) => self.arrive(t, j),
            Event::Release(j) => {
                self.upcoming.remove(&(t.to_bits(), j));
                self.queue.push(j);
            }
            Event::Finish(j) => self.finish(t, j),
            Event::Booted(n) => {
                let nu = n as usize;
                self.meter.set_state(nu, t, NodeState::On);
                self.pool.set_tier(nu, 0);
                self.epoch[nu] += 1;
                for j in std::mem::take(&mut self.waiting[nu]) {
                    self.pending[j as usize] -= 1;
                    if self.pending[j as usize] == 0 {
                        self.begin(t, j);
                    }
                }
                self.maybe_idle(t, nu);
            }
            Event::ShutDown(n, _) => self.meter.set_state(n as usize, t, NodeState::OffWait),
            Event::Available(n, _) => {
                self.meter.set_state(n as usize, t, NodeState::Off);
                self.pool.set_tier(n as usize, 2);
                self.later.retain(|&(_, m)| m != n);
            }
            Event::IdleTimer(n, e) => {
                let nu = n as usize;
                if self.epoch[nu] == e && self.meter.state[nu] == NodeState::On && self.is_idle(nu) {
                    self.power_down(t, nu);
                }
            }
        }
    }

    fn is_idle(&self, n: usize) -> bool {
        self.pool.free[n] == self.pool.gpn && self.waiting[n].is_empty()
    }

    fn maybe_idle(&mut self, t: f64, n: usize) {
        if self.policy == PolicyKind::SlurmPowersave
            && self.is_idle(n)
            && self.meter.state[n] == NodeState::On
        {
            self.q.push(t + self.c.slurm.suspend_time_s, Event::IdleTimer(n as u32, self.epoch[n]));
        }
    }

    fn arrive(&mut self, t: f64, j: u32) {
        let job = &self.jobs[j as usize];
        if self.policy == PolicyKind::Wattson {
            self.arrivals.push_back((t, job.gpus));
            self.arrival_gpus += u64::from(job.gpus);
            if job.defer_window > 0.0 {
                let off = self.c.trace_start_utc_s;
                let now = t.floor() as i64 + off;
                let best = self.c.prices.cheapest_start(now, job.defer_window.floor() as i64);
                let (p_now, p_best) = (self.c.prices.price_at(now), self.c.prices.price_at(best));
                if let (Some(a), Some(b)) = (p_now, p_best)
                    && best > now
                    && b <= a * (1.0 - self.c.wattson.min_price_drop)
                {
                    let release = t + (best - now) as f64 - t.fract();
                    self.q.push(release, Event::Release(j));
                    self.upcoming.insert((release.to_bits(), j));
                    return;
                }
            }
        }
        self.queue.push(j);
    }

    fn finish(&mut self, t: f64, j: u32) {
        let ju = j as usize;
        self.runs[ju].end = t;
        self.done += 1;
        self.ends.remove(&(t.to_bits(), j));
        let w = self.runs[ju].gpu_w;
        for k in 0..self.runs[ju].shares.len() {
            let (n, m) = self.runs[ju].shares[k];
            let nu = n as usize;
            self.pool.give(nu, m);
            self.meter.run(nu, t, -i64::from(m.count_ones()), w);
            if self.is_idle(nu) {
                self.epoch[nu] += 1;
                self.maybe_idle(t, nu);
            }
        }
    }

    fn begin(&mut self, t: f64, j: u32) {
        let ju = j as usize;
        let end = t + self.runtime[ju];
        let exp = self.runs[ju].end; // expected end, set at allocation
        self.ends.remove(&(exp.to_bits(), j));
        self.ends.insert((end.to_bits(), j));
        self.runs[ju].start = t;
        self.runs[ju].end = f64::NAN;
        let w = self.runs[ju].gpu_w;
        for k in 0..self.runs[ju].shares.len() {
            let (n, m) = self.runs[ju].shares[k];
            self.meter.run(n as usize, t, i64::from(m.count_ones()), w);
        }
        self.q.push(end, Event::Finish(j));
    }

    fn boot(&mut self, t: f64, n: usize) {
        self.meter.set_state(n, t, NodeState::Booting);
        self.pool.set_tier(n, 1);
        self.epoch[n] += 1;
        self.ready_at[n] = t + self.c.node.boot_s;
        self.q.push(self.ready_at[n], Event::Booted(n as u32));
    }

    fn power_down(&mut self, t: f64, n: usize) {
        self.meter.set_state(n, t, NodeState::ShuttingDown);
        self.pool.set_tier(n, UNAVAILABLE);
        self.epoch[n] += 1;
        let e = self.epoch[n];
        self.q.push(t + self.c.node.shutdown_s, Event::ShutDown(n as u32, e));
        let avail = t + self.c.slurm.suspend_timeout_s;
        self.q.push(avail, Event::Available(n as u32, e));
        self.later.push((avail, n as u32));
    }

    fn schedule(&mut self, t: f64) {
        if self.queue.is_empty() {
            return;
        }
        let view = View { jobs: self.jobs, runtime: &self.runtime, runs: &self.runs };
        let input = PassInput {
            now: t,
            ends: &self.ends,
            later: &self.later,
            jobs: &view,
            how: self.policy.placement(),
            depth: self.c.slurm.bf_max_job_test,
        };
        let started = easy_pass(&mut self.pool, &mut self.queue, &input);
        let roomy = self.policy == PolicyKind::Wattson && self.queue.is_empty() && {
            let free: u64 = self.pool.free.iter().map(|&f| u64::from(f)).sum();
            let total = self.c.total_gpus() as f64;
            (total - free as f64) / total <= self.c.wattson.dvfs_load_limit
        };
        for (j, shares) in started {
            let ju = j as usize;
            if roomy {
                let (rt, limit, w, slow) = self.relaxed[ju];
                self.runtime[ju] = rt;
                let r = &mut self.runs[ju];
                (r.limit_w, r.gpu_w, r.slowdown) = (limit, w, slow);
            }
            let mut ready = t;
            for &(n, _) in &shares {
                let nu = n as usize;
                self.epoch[nu] += 1;
                if self.meter.state[nu] == NodeState::Off {
                    self.boot(t, nu);
                }
                if self.meter.state[nu] == NodeState::Booting {
                    self.waiting[nu].push(j);
                    self.pending[ju] += 1;
                    ready = ready.max(self.ready_at[nu]);
                }
            }
            let exp = ready + self.runtime[ju];
            self.runs[ju].alloc = t;
            self.runs[ju].shares = shares;
            self.runs[ju].end = exp;
            self.ends.insert((exp.to_bits(), j));
            if self.pending[ju] == 0 {
                self.begin(t, j);
            }
        }
    }

    /// Keeps as many idle nodes warm as the forecast needs within the break-even time;
    /// powers the rest down (an idle gap beyond break-even is expected for them) and boots
    /// ahead of forecast demand. Only when no job is waiting in the queue.
    fn right_size(&mut self, t: f64) {
        if !self.queue.is_empty() {
            return;
        }
        let window = self.c.wattson.forecast_window_s;
        while let Some(&(a, g)) = self.arrivals.front() {
            if a >= t - window {
                break;
            }
            self.arrivals.pop_front();
            self.arrival_gpus -= u64::from(g);
        }
        let gpn = f64::from(self.pool.gpn);
        let rate_nodes = self.arrival_gpus as f64 / gpn / window;
        let horizon = t + self.break_even + self.c.node.boot_s;
        let soon: u64 = self
            .upcoming
            .iter()
            .take_while(|(b, _)| f64::from_bits(*b) <= horizon)
            .map(|&(_, j)| u64::from(self.jobs[j as usize].gpus))
            .sum();
        let target = f64::from(self.c.wattson.min_warm_nodes)
            + (rate_nodes * (self.break_even + self.c.node.boot_s) + soon as f64 / gpn).ceil();
        let target = target as usize;
        let idle_on: Vec<usize> = (0..self.pool.free.len())
            .filter(|&n| self.meter.state[n] == NodeState::On && self.is_idle(n))
            .collect();
        let idle_booting = (0..self.pool.free.len())
            .filter(|&n| self.meter.state[n] == NodeState::Booting && self.is_idle(n))
            .count();
        let warm = idle_on.len() + idle_booting;
        if warm > target {
            for &n in idle_on.iter().rev().take(warm - target) {
                self.power_down(t, n);
            }
        } else if warm < target {
            let off: Vec<usize> = (0..self.pool.free.len())
                .filter(|&n| self.meter.state[n] == NodeState::Off)
                .take(target - warm)
                .collect();
            for n in off {
                self.boot(t, n);
            }
        }
    }
}
