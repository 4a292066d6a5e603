//! What happens each step: Slurm's scheduling pass, the policy's decision on what it
//! started and what waits ([`Sim::step`]), and the decision enacted: releases, shared GPUs,
//! levels, nodes powered down and booted ([`Sim::apply`]).

use wattson_engine::cluster;

use super::{Event, Sim, View};
use crate::power::NodeState;
use crate::scheduler::{PassInput, UNAVAILABLE, easy_pass};

/// How late after its begin time a deferred job's release still counts as the begin time's (s).
const BEGIN_SLACK_S: f64 = 1e-6;

impl Sim<'_> {
    pub(super) fn boot(&mut self, t: f64, n: usize) {
        self.meter.set_state(n, t, NodeState::Booting);
        self.pool.set_tier(n, 1);
        self.ready_at[n] = self.cadence.scan_after(t) + self.c.node.boot_s;
        self.idle_since[n] = t;
        self.q.push(self.ready_at[n], Event::Booted(n as u32));
    }

    pub(super) fn power_down(&mut self, t: f64, n: usize) {
        self.meter.set_state(n, t, NodeState::ShuttingDown);
        self.pool.set_tier(n, UNAVAILABLE);
        let scan = self.cadence.scan_after(t);
        self.q.push(scan + self.c.node.shutdown_s, Event::ShutDown(n as u32, 0));
        let avail = self.cadence.scan_after(scan + self.c.slurm.suspend_timeout_s);
        self.q.push(avail, Event::Available(n as u32, 0));
        self.later.push((avail, n as u32));
    }

    /// Slurm's pass, then the policy, until neither a release, a boot nor a new queue order
    /// gives the pass more.
    pub(super) fn step(&mut self, t: f64) {
        for _ in 0..4 {
            self.schedule(t);
            let mut acts = self.consult(t);
            if !self.cadence.power_loop(t, &mut self.q) {
                acts.power_up.clear();
                acts.power_down.clear();
            }
            let released = !acts.release.is_empty();
            let booted = !acts.power_up.is_empty();
            let reordered = !acts.queue_order.is_empty();
            self.apply(t, acts);
            if !(released || ((booted || reordered) && !self.queue.is_empty())) {
                break;
            }
        }
    }

    pub(super) fn apply(&mut self, t: f64, mut a: cluster::Actions) {
        if !a.queue_order.is_empty() {
            // The policy ranked the whole queue it saw, and nothing entered it since.
            debug_assert_eq!(a.queue_order.len(), self.queue.len());
            self.queue = std::mem::take(&mut a.queue_order);
        }
        if !a.release.is_empty() {
            self.held.retain(|j| !a.release.contains(j));
            for &j in &a.release {
                self.live[j as usize].released = t;
                self.runs[j as usize].eligible = t;
                self.orders[j as usize] = self.type_order(j);
                self.enqueue(t, j);
            }
        }
        for &(q, h) in &a.share {
            self.join(t, q, h);
        }
        for &(j, l) in &a.levels {
            self.set_level(t, j, l);
        }
        for &n in &a.power_down {
            let nu = n as usize;
            if self.meter.state[nu] == NodeState::On && self.is_idle(nu) {
                self.power_down(t, nu);
            }
        }
        for &n in &a.power_up {
            let nu = n as usize;
            if self.meter.state[nu] == NodeState::Off {
                self.boot(t, nu);
            }
        }
        if let Some(w) = a.wake_at
            && w > t
            && (w < self.next_wake || self.next_wake <= t)
        {
            self.q.push(w, Event::Wake);
            self.next_wake = w;
        }
    }

    /// Job `j`, released at `t`, takes its place in the queue as the lab's Slurm ranks it
    /// (tests/slurm/queue_order.rs): a job whose release is the begin time job_submit gave it
    /// by its submission, ahead of the jobs submitted after it; any other (one held for the
    /// power budget and released) at `t`, after every job queued, as 22.05's priority/basic
    /// does (24.11's priority/multifactor keeps its submission's rank there too).
    fn enqueue(&mut self, t: f64, j: u32) {
        let job = &self.jobs[j as usize];
        let begin = cluster::begin_time(
            &self.policy,
            &self.c.prices,
            self.c.trace_start_utc_s,
            job.submit,
            job.defer_window,
        );
        let at = if begin > job.submit && t <= begin + BEGIN_SLACK_S { job.submit } else { t };
        self.live[j as usize].ranked_at = at;
        let behind = self.queue.iter().rposition(|&q| self.live[q as usize].ranked_at <= at);
        let pos = behind.map_or(0, |i| i + 1);
        self.queue.insert(pos, j);
    }

    pub(super) fn schedule(&mut self, t: f64) {
        if self.queue.is_empty() {
            return;
        }
        let view = View {
            jobs: self.jobs,
            cat: self.cat,
            policy: self.policy,
            orders: &self.orders,
            runs: &self.runs,
            live: &self.live,
        };
        let input = PassInput {
            now: t,
            ends: &self.ends,
            later: &self.later,
            jobs: &view,
            how: self.policy.placement(),
            depth: self.c.slurm.bf_max_job_test,
        };
        let started = easy_pass(&mut self.pool, &mut self.queue, &input);
        for (j, shares) in started {
            let ju = j as usize;
            self.place_on_type(j, self.pool.group[shares[0].0 as usize]);
            let mut ready = t;
            for &(n, _) in &shares {
                let nu = n as usize;
                self.idle_since[nu] = f64::INFINITY;
                if self.meter.state[nu] == NodeState::Off {
                    self.boot(t, nu);
                }
                if self.meter.state[nu] == NodeState::Booting {
                    self.waiting[nu].push(j);
                    self.pending[ju] += 1;
                    ready = ready.max(self.ready_at[nu]);
                }
            }
            self.runs[ju].alloc = t;
            self.runs[ju].shares = shares;
            self.live[ju].ready = ready + self.c.slurm.start_latency(self.waited(ready, j));
            self.run_pos[ju] = self.running.len();
            self.running.push(j);
            let end = self.live[ju].ready + self.runtime[ju];
            self.set_expected_end(j, end);
            if self.pending[ju] == 0 {
                self.launch(t, j);
            }
        }
    }

    /// The scheduler placed job `j` on GPU type `g`: its view, start level and times become
    /// that type's.
    pub(super) fn place_on_type(&mut self, j: u32, g: u16) {
        let ju = j as usize;
        if self.ty[ju] == g {
            return;
        }
        self.ty[ju] = g;
        self.views[ju] = self.jobs[ju].view(j, usize::from(g), self.cat);
        let level = self.policy.start_level(&self.views[ju], self.workload(ju).max_idx() as u16);
        let i = usize::from(level);
        self.live[ju].level = level;
        self.runtime[ju] = self.est_time(ju, level);
        let w = self.workload(ju);
        let (limit_w, gpu_w, slowdown) = (w.limits[i], w.power[i], w.time_ratio(i) - 1.0);
        let r = &mut self.runs[ju];
        (r.limit_w, r.gpu_w, r.slowdown) = (limit_w, gpu_w, slowdown);
    }
}
