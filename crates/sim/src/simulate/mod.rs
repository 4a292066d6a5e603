//! The event loop: the physics of one policy over one prepared trace. Policy lives in the
//! engine ([`wattson_engine::cluster::decide`]); this file only moves time, GPUs and watts.
//!
//! Events (arrivals, job ends, boots, shutdowns, the policy's wake-ups) come off
//! [`super::events::Queue`]; after the last event of an instant, Slurm's FIFO + EASY backfill
//! pass runs, then the policy sees a snapshot and its actions are applied (releases, levels,
//! power); a release or a boot that a waiting job could use runs the pass again. A level change
//! moves a running job's end: its progress is kept in units of work at the top level.
//!
//! On a cluster of several GPU types a job runs on one type; its order of types comes from the
//! engine ([`cluster::placement::type_order`]) when it enters the queue, and its view, level
//! table and times become that type's when the scheduler places it.

use std::collections::BTreeSet;

use wattson_engine::cluster::{self, Decider, GpuType, JobView as EngineJob, Level, TunedPolicy};
use wattson_engine::colocation::Learning;

use super::cluster::ClusterConfig;
use super::events::{Event, Queue};
use super::policies::SimJob;
use super::power::{Meter, NodeState};
use super::scheduler::{Ends, JobView, Pool, Share};
use super::workloads::Catalog;

pub use super::record::{JobRun, RunResult};

mod act;
mod cadence;
mod share;
mod snapshot;

use snapshot::Bufs;

struct View<'a> {
    jobs: &'a [SimJob],
    cat: &'a Catalog,
    policy: TunedPolicy,
    orders: &'a [Vec<u16>],
    runs: &'a [JobRun],
    live: &'a [Live],
}

impl JobView for View<'_> {
    fn gpus(&self, j: u32) -> u32 {
        self.jobs[j as usize].gpus
    }
    fn runtime(&self, j: u32, group: u16) -> f64 {
        // Slurm's estimate: the time limit, stretched by the level the job would start at.
        let (job, g) = (&self.jobs[j as usize], usize::from(group));
        let w = self.cat.get(g, job.workload);
        let level = self.policy.start_level(&job.view(j, g, self.cat), w.max_idx() as u16);
        job.limit_on(g, self.cat) * w.time_ratio(usize::from(level))
    }
    fn order(&self, j: u32) -> &[u16] {
        &self.orders[j as usize]
    }
    fn shares(&self, j: u32) -> &[Share] {
        // Of two jobs on one GPU, the one Slurm expects to end last frees it.
        let l = &self.live[j as usize];
        if l.partner != NO_PARTNER && (self.live[l.partner as usize].exp_end, l.partner) > (l.exp_end, j) {
            return &[];
        }
        &self.runs[j as usize].shares
    }
}

/// Per-job dynamic state.
#[derive(Debug, Clone, Copy)]
struct Live {
    level: u16,
    /// Work done (fraction) at `seg`.
    done: f64,
    /// Start of the current level's stretch (s).
    seg: f64,
    /// Energy per GPU so far (J) and limit·seconds so far.
    energy: f64,
    limit_s: f64,
    /// Expected end (s), as in `ends`: Slurm's, from the time limit.
    exp_end: f64,
    /// When its nodes are up (s).
    ready: f64,
    epoch: u32,
    released: f64,
    /// Where Slurm ranks it in FIFO order once it may start (s; [`Sim::enqueue`]).
    ranked_at: f64,
    /// The job sharing its GPU ([`NO_PARTNER`]: none).
    partner: u32,
    /// Its time ratio from sharing (1: alone).
    slow: f64,
    /// Its time ratio while it last shared (1: never shared): what its node's record gives at
    /// its end.
    shared_slow: f64,
}

/// [`Live::partner`] of a job alone on its GPUs.
const NO_PARTNER: u32 = u32::MAX;

struct Sim<'a> {
    c: &'a ClusterConfig,
    cat: &'a Catalog,
    models: Vec<Vec<Level>>,
    /// Per workload, the limits measured so far (probes, then every limit a job ran at).
    measured: Vec<Vec<usize>>,
    jobs: &'a [SimJob],
    /// Each job's view on its GPU type (type 0 until placed).
    views: Vec<EngineJob>,
    /// Each job's GPU type (0 until placed).
    ty: Vec<u16>,
    /// Each job's order of GPU types, set when it enters the queue.
    orders: Vec<Vec<u16>>,
    policy: TunedPolicy,
    pool: Pool,
    meter: Meter,
    q: Queue,
    queue: Vec<u32>,
    held: Vec<u32>,
    ends: Ends,
    runs: Vec<JobRun>,
    /// Each job's run time as Slurm expects it at its level (its time limit, stretched).
    runtime: Vec<f64>,
    live: Vec<Live>,
    running: Vec<u32>,
    run_pos: Vec<usize>,
    waiting: Vec<Vec<u32>>,
    pending: Vec<u32>,
    ready_at: Vec<f64>,
    idle_since: Vec<f64>,
    later: Vec<(f64, u32)>,
    arrivals: Vec<(f64, u32)>,
    /// Each arrival's best GPU type, when the policy places by type (else empty).
    arrival_types: Vec<u16>,
    arr_lo: usize,
    /// Every submission `(time, GPUs)`, for the clairvoyant bound (`[wattson] clairvoyant`).
    future: Vec<(f64, u32)>,
    /// Each submission's best GPU type, parallel to `future` when types matter.
    future_types: Vec<u16>,
    next_wake: f64,
    /// The policy's power decisions and Slurm's power scans ([`cadence`]).
    cadence: cadence::Cadence,
    done: usize,
    gpu_types: Vec<GpuType>,
    bufs: Bufs,
    /// The policy's steps, with the wait-cost guard it keeps between them.
    decider: Decider,
    /// Co-location classes whose measured slowdown broke a job's bound.
    broken: BTreeSet<usize>,
    /// Class pairs that were found not to fit on one GPU.
    unfit: BTreeSet<(usize, usize)>,
    /// The pairs learned from shared runs ([`share::learning`]); `None`: the catalog's model as given.
    learning: Option<Learning>,
    /// Sees every snapshot the policy decides on and its actions.
    observe: &'a mut Observer<'a>,
}

/// Simulates `policy` over prepared `jobs` (sorted by submission); `models` are the engine's
/// level tables per workload ([`super::policies::level_tables`]).
pub fn simulate(
    c: &ClusterConfig,
    catalog: &Catalog,
    models: &[Vec<Level>],
    jobs: &[SimJob],
    policy: TunedPolicy,
) -> RunResult {
    simulate_observed(c, catalog, models, jobs, policy, &mut |_, _, _| {})
}

/// Sees each snapshot the policy decides on, its actions, and the nodes (indices) a running
/// job of the snapshot holds.
pub type Observer<'a> = dyn FnMut(&cluster::Snapshot, &cluster::Actions, &dyn Fn(u32) -> Vec<u32>) + 'a;

/// [`simulate`], handing `observe` every snapshot the policy decides on and the actions it
/// took (to replay the same states through another view builder, as `wattson-ctld`'s).
pub fn simulate_observed(
    c: &ClusterConfig,
    catalog: &Catalog,
    models: &[Vec<Level>],
    jobs: &[SimJob],
    policy: TunedPolicy,
    observe: &mut Observer,
) -> RunResult {
    let t0 = jobs.first().map_or(0.0, |j| j.submit);
    let n = c.nodes() as usize;
    let views: Vec<EngineJob> = jobs.iter().enumerate().map(|(i, j)| j.view(i as u32, 0, catalog)).collect();
    let mut runs = Vec::with_capacity(jobs.len());
    let mut runtime = Vec::with_capacity(jobs.len());
    let mut live = Vec::with_capacity(jobs.len());
    for (j, v) in jobs.iter().zip(&views) {
        let w = catalog.get(0, j.workload);
        let level = policy.start_level(v, w.max_idx() as u16);
        let i = usize::from(level);
        runtime.push(j.limit_on(0, catalog) * w.time_ratio(i));
        runs.push(JobRun {
            eligible: f64::NAN,
            alloc: f64::NAN,
            start: f64::NAN,
            end: f64::NAN,
            limit_w: w.limits[i],
            gpu_w: w.power[i],
            slowdown: w.time_ratio(i) - 1.0,
            shares: Vec::new(),
            level_changes: 0,
            partners: Vec::new(),
        });
        live.push(Live {
            level,
            done: 0.0,
            seg: f64::NAN,
            energy: 0.0,
            limit_s: 0.0,
            exp_end: f64::NAN,
            ready: f64::NAN,
            epoch: 0,
            released: f64::NAN,
            ranked_at: f64::NAN,
            partner: NO_PARTNER,
            slow: 1.0,
            shared_slow: 1.0,
        });
    }
    let mut s = Sim {
        c,
        cat: catalog,
        models: models.to_vec(),
        measured: catalog.types.iter().flatten().map(|w| w.probes().to_vec()).collect(),
        jobs,
        views,
        ty: vec![0; jobs.len()],
        orders: vec![Vec::new(); jobs.len()],
        policy,
        pool: Pool::new(&c.node_groups(), c.gpus_per_node),
        meter: Meter::new(c, t0),
        q: Queue::default(),
        queue: Vec::new(),
        held: Vec::new(),
        ends: Ends::new(),
        runs,
        runtime,
        live,
        running: Vec::new(),
        run_pos: vec![usize::MAX; jobs.len()],
        waiting: vec![Vec::new(); n],
        pending: vec![0; jobs.len()],
        ready_at: vec![t0; n],
        idle_since: vec![t0; n],
        later: Vec::new(),
        arrivals: Vec::with_capacity(jobs.len()),
        arrival_types: Vec::new(),
        arr_lo: 0,
        decider: Decider::default(),
        broken: BTreeSet::new(),
        unfit: BTreeSet::new(),
        learning: share::learning(c, catalog.colocation.as_ref()),
        future: if c.wattson.sim.clairvoyant {
            jobs.iter().map(|j| (j.submit, j.gpus)).collect()
        } else {
            Vec::new()
        },
        future_types: Vec::new(),
        next_wake: f64::NEG_INFINITY,
        cadence: cadence::Cadence::new(c, policy.kind, t0),
        done: 0,
        gpu_types: c.groups.iter().map(|g| GpuType { idle_w: g.gpu_idle_w() }).collect(),
        bufs: Bufs::default(),
        observe,
    };
    if c.wattson.sim.clairvoyant && s.types_matter() {
        s.future_types = (0..jobs.len() as u32).map(|j| s.type_order(j)[0]).collect();
    }
    for (i, j) in jobs.iter().enumerate() {
        s.q.push(j.submit, Event::Arrive(i as u32));
    }
    s.q.push(t0, Event::Wake);
    let mut t_end = t0;
    while let Some((t, ev)) = s.q.pop() {
        s.handle(t, ev);
        if matches!(ev, Event::Finish(..)) {
            t_end = t_end.max(t);
        }
        if s.q.peek_time() != Some(t) {
            s.step(t);
        }
        if s.done == jobs.len() {
            break;
        }
    }
    s.meter.finish(t_end);
    let deferred = s.live.iter().zip(jobs).filter(|(l, j)| l.released > j.submit).count();
    RunResult {
        policy: policy.kind,
        suspend_time_s: policy.kind.uses_idle_timer().then_some(policy.tuning.suspend_time_s),
        jobs: s.runs,
        meter: s.meter,
        t0,
        t_end,
        deferred,
    }
}

impl Sim<'_> {
    fn handle(&mut self, t: f64, ev: Event) {
        match ev {
            Event::Arrive(j) => {
                self.arrivals.push((t, self.jobs[j as usize].gpus));
                if self.types_matter() {
                    let best = self.type_order(j)[0];
                    self.arrival_types.push(best);
                }
                self.held.push(j);
            }
            Event::Finish(j, e) => {
                if self.live[j as usize].epoch == e {
                    self.finish(t, j);
                }
            }
            Event::Booted(n) => {
                let nu = n as usize;
                self.meter.set_state(nu, t, NodeState::On);
                self.pool.set_tier(nu, 0);
                self.idle_since[nu] = t;
                for j in std::mem::take(&mut self.waiting[nu]) {
                    self.pending[j as usize] -= 1;
                    if self.pending[j as usize] == 0 {
                        self.launch(t, j);
                    }
                }
            }
            Event::ShutDown(n, _) => self.meter.set_state(n as usize, t, NodeState::OffWait),
            Event::Available(n, _) => {
                self.meter.set_state(n as usize, t, NodeState::Off);
                self.pool.set_tier(n as usize, 2);
                self.later.retain(|&(_, m)| m != n);
            }
            Event::Launch(j) => self.begin(t, j),
            Event::Wake => {}
        }
    }

    fn is_idle(&self, n: usize) -> bool {
        self.pool.free[n] == self.pool.gpn && self.waiting[n].is_empty()
    }

    /// Job `j`'s workload as measured on its GPU type.
    fn workload(&self, j: usize) -> &super::workloads::Workload {
        self.cat.get(usize::from(self.ty[j]), self.jobs[j].workload)
    }

    /// Run time of job `j`'s whole work at level `l` on its GPU type (s).
    fn full_time(&self, j: usize, l: u16) -> f64 {
        self.jobs[j].time_on(usize::from(self.ty[j]), usize::from(l), self.cat)
    }

    /// Job `j`'s time limit on its GPU type at level `l` (s): its limit stretched by the level,
    /// as wattson extends a slowed job's limit by the time its slowdown costs.
    fn est_time(&self, j: usize, l: u16) -> f64 {
        self.jobs[j].limit_on(usize::from(self.ty[j]), self.cat) * self.workload(j).time_ratio(usize::from(l))
    }

    /// Work left before job `j` reaches its time limit (s at the top level): what Slurm knows
    /// of its remaining run.
    fn limit_left(&self, j: usize) -> f64 {
        let ty = usize::from(self.ty[j]);
        let done = self.live[j].done * self.jobs[j].work_on(ty, self.cat);
        (self.jobs[j].limit_on(ty, self.cat) - done).max(0.0)
    }

    /// Charges job `j`'s current stretch up to `t` (work done, energy, limit·time).
    fn settle(&mut self, t: f64, j: usize) {
        let full = self.pace(j);
        let i = usize::from(self.live[j].level);
        let (p, lim) = (self.draw(j), self.workload(j).limits[i]);
        let dt = t - self.live[j].seg;
        if dt > 0.0 {
            self.learn(self.views[j].model as usize, i);
        }
        let l = &mut self.live[j];
        if dt > 0.0 {
            l.done += if full > 0.0 { dt / full } else { 1.0 };
            l.energy += dt * p;
            l.limit_s += dt * lim;
        }
        l.seg = t;
    }

    /// The daemons have measured level table `w` (a workload on a GPU type) at limit `i`: the
    /// engine refits it on everything measured so far (a refit that fails keeps the old table).
    fn learn(&mut self, w: usize, i: usize) {
        if !self.c.wattson.sim.learn || self.measured[w].contains(&i) {
            return;
        }
        self.measured[w].push(i);
        self.measured[w].sort_unstable();
        let n = self.cat.len();
        let wl = self.cat.get(w / n, w % n);
        if let Ok(m) = wl.fit_on(&self.measured[w]) {
            self.models[w] =
                cluster::levels::table(&m, &wl.limits, &wattson_engine::ChooserConfig::default());
        }
    }

    fn set_expected_end(&mut self, j: u32, end: f64) {
        let l = &mut self.live[j as usize];
        self.ends.remove(&(l.exp_end.to_bits(), j));
        l.exp_end = end;
        self.ends.insert((end.to_bits(), j));
    }

    fn set_level(&mut self, t: f64, j: u32, level: u16) {
        let ju = j as usize;
        let old = self.live[ju].level;
        // A shared GPU runs at its defaults (the top level, set when the pair formed).
        if old == level || self.run_pos[ju] == usize::MAX || self.live[ju].partner != NO_PARTNER {
            return;
        }
        if self.runs[ju].start.is_finite() {
            self.settle(t, ju);
            let was = self.draw(ju);
            self.live[ju].level = level;
            self.redraw(t, ju, was);
            self.runs[ju].level_changes += 1;
            self.reschedule(t, ju);
            let ratio = self.workload(ju).time_ratio(usize::from(level));
            self.set_expected_end(j, t + self.limit_left(ju) * ratio);
        } else {
            self.live[ju].level = level;
            let end = self.live[ju].ready + self.est_time(ju, level);
            self.set_expected_end(j, end);
        }
        self.runtime[ju] = self.est_time(ju, level);
    }

    /// Whether job `j`, allocated or launched at `t`, waited: Slurm starts it on another
    /// event than its release (GPUs coming free, its nodes coming up).
    fn waited(&self, t: f64, j: u32) -> bool {
        t > self.runs[j as usize].eligible
    }

    /// Job `j`'s nodes are up at `t`: its body begins after Slurm's start latency.
    fn launch(&mut self, t: f64, j: u32) {
        let latency = self.c.slurm.start_latency(self.waited(t, j));
        if latency > 0.0 {
            self.q.push(t + latency, Event::Launch(j));
        } else {
            self.begin(t, j);
        }
    }

    fn begin(&mut self, t: f64, j: u32) {
        let ju = j as usize;
        let level = self.live[ju].level;
        let end = t + self.pace(ju);
        self.set_expected_end(j, t + self.est_time(ju, level));
        self.runs[ju].start = t;
        self.live[ju].seg = t;
        self.live[ju].epoch += 1;
        let w = self.draw(ju);
        for k in 0..self.runs[ju].shares.len() {
            let (n, m) = self.runs[ju].shares[k];
            self.meter.run(n as usize, t, i64::from(m.count_ones()), w);
        }
        self.q.push(end, Event::Finish(j, self.live[ju].epoch));
    }

    fn finish(&mut self, t: f64, j: u32) {
        let ju = j as usize;
        self.settle(t, ju);
        let i = usize::from(self.live[ju].level);
        let (p, lim, ratio) = (self.draw(ju), self.workload(ju).limits[i], self.workload(ju).time_ratio(i));
        let span = t - self.runs[ju].start;
        let work = self.full_time(ju, self.workload(ju).max_idx() as u16);
        let l = self.live[ju];
        let r = &mut self.runs[ju];
        r.end = t;
        if (r.level_changes == 0 && r.partners.is_empty()) || span <= 0.0 {
            (r.gpu_w, r.limit_w, r.slowdown) = (p, lim, ratio - 1.0);
        } else {
            (r.gpu_w, r.limit_w) = (l.energy / span, l.limit_s / span);
            r.slowdown = span / work - 1.0;
        }
        self.done += 1;
        self.ends.remove(&(l.exp_end.to_bits(), j));
        let pos = self.run_pos[ju];
        self.running.swap_remove(pos);
        if let Some(&moved) = self.running.get(pos) {
            self.run_pos[moved as usize] = pos;
        }
        self.run_pos[ju] = usize::MAX;
        if !self.runs[ju].partners.is_empty() {
            self.judge_sharing(ju);
            self.learn_at_end(ju);
        }
        if self.live[ju].partner != NO_PARTNER {
            // The partner keeps the GPU.
            self.part(t, ju);
            return;
        }
        for k in 0..self.runs[ju].shares.len() {
            let (n, m) = self.runs[ju].shares[k];
            let nu = n as usize;
            self.pool.give(nu, m);
            self.meter.run(nu, t, -i64::from(m.count_ones()), p);
            if self.is_idle(nu) {
                self.idle_since[nu] = t;
            }
        }
    }
}
