//! Shared GPUs: a queued job the policy starts on a running job's GPU ([`Sim::join`]), both
//! slowed by their measured pair slowdown and charged their part of the GPU's draw
//! ([`crate::colocation`]), until one ends ([`Sim::part`]) and the other runs alone again.
//! The GPU stays with whichever job ends last: the pool sees it held throughout.

use std::collections::BTreeSet;

use wattson_engine::colocation::Learning;

use super::{NO_PARTNER, Sim};
use crate::colocation::{Colocation, shared_draws};

impl Sim<'_> {
    /// Seconds job `j`'s whole work takes at its level and its current pace.
    pub(super) fn pace(&self, j: usize) -> f64 {
        self.full_time(j, self.live[j].level) * self.live[j].slow
    }

    /// Job `j`'s draw per GPU now (W): its measured power at its level alone, its part of
    /// the shared GPU's draw while shared.
    pub(super) fn draw(&self, j: usize) -> f64 {
        let alone = |k: usize| self.workload(k).power[usize::from(self.live[k].level)];
        let k = self.live[j].partner;
        if k == NO_PARTNER {
            return alone(j);
        }
        let ku = k as usize;
        let w = self.workload(j);
        let idle = self.gpu_types[usize::from(self.ty[j])].idle_w;
        let slow = [self.live[j].slow - 1.0, self.live[ku].slow - 1.0];
        shared_draws([alone(j), alone(ku)], slow, idle, w.limits[w.max_idx()])[0]
    }

    /// Moves job `j`'s draw on the meter from `old` (W per GPU) to what it draws now.
    pub(super) fn redraw(&mut self, t: f64, j: usize, old: f64) {
        self.redraw_to(t, j, old, self.draw(j));
    }

    /// Job `j`'s end moved: a new finish event at its current pace.
    pub(super) fn reschedule(&mut self, t: f64, j: usize) {
        let left = (1.0 - self.live[j].done).max(0.0) * self.pace(j);
        self.live[j].epoch += 1;
        self.q.push(t + left, super::Event::Finish(j as u32, self.live[j].epoch));
    }

    /// Starts queued job `q` now on running job `h`'s GPU (the policy's [`Actions::share`]),
    /// both at the top level. A pair that does not fit on one GPU (Gavel measured none) is
    /// not started: the job stays queued, and the policy learns never to pair the two
    /// classes again.
    ///
    /// [`Actions::share`]: wattson_engine::cluster::Actions::share
    pub(super) fn join(&mut self, t: f64, q: u32, h: u32) {
        let (qu, hu) = (q as usize, h as usize);
        let colo = self.cat.colocation.as_ref().expect("jobs share only where a model is given");
        let (Some(cq), Some(ch)) = (self.jobs[qu].share, self.jobs[hu].share) else { return };
        let (Some(sq), Some(sh)) = (colo.slowdown(cq, ch), colo.slowdown(ch, cq)) else {
            self.unfit.insert((usize::from(cq), usize::from(ch)));
            return;
        };
        if let Some(l) = &mut self.learning {
            l.join(usize::from(cq), usize::from(ch));
        }
        self.queue.retain(|&j| j != q);
        let shares = self.runs[hu].shares.clone();
        self.place_on_type(q, self.pool.group[shares[0].0 as usize]);
        self.set_level(t, h, self.workload(hu).max_idx() as u16);
        let top = self.workload(qu).max_idx() as u16;
        self.live[qu].level = top;
        self.runtime[qu] = self.est_time(qu, top);
        let r = &mut self.runs[qu];
        (r.alloc, r.start, r.shares) = (t, t, shares);
        self.live[qu].ready = t;
        self.live[qu].seg = t;
        self.run_pos[qu] = self.running.len();
        self.running.push(q);
        self.set_expected_end(q, t + self.runtime[qu]);
        self.settle(t, hu);
        let old_h = self.draw(hu);
        self.live[qu].partner = h;
        self.live[hu].partner = q;
        self.live[qu].slow = 1.0 + sq;
        self.live[hu].slow = 1.0 + sh;
        self.live[qu].shared_slow = 1.0 + sq;
        self.live[hu].shared_slow = 1.0 + sh;
        self.runs[qu].partners.push((h, t, f64::NAN));
        self.runs[hu].partners.push((q, t, f64::NAN));
        self.redraw(t, qu, 0.0);
        self.redraw(t, hu, old_h);
        self.reschedule(t, qu);
        self.reschedule(t, hu);
    }

    /// Job `j`, sharing its GPU, ends at `t` (settled): its draw leaves the meter, and its
    /// partner runs alone on the GPU from now on.
    pub(super) fn part(&mut self, t: f64, j: usize) {
        let k = self.live[j].partner as usize;
        self.settle(t, k);
        let (old_j, old_k) = (self.draw(j), self.draw(k));
        self.redraw_to(t, j, old_j, 0.0);
        for (a, b) in [(j, k), (k, j)] {
            self.live[a].partner = NO_PARTNER;
            self.live[a].slow = 1.0;
            if let Some(p) = self.runs[a].partners.iter_mut().rev().find(|p| p.0 as usize == b) {
                p.2 = t;
            }
        }
        self.redraw(t, k, old_k);
        self.reschedule(t, k);
    }

    /// Moves job `j`'s draw on the meter from `old` to `new` (W per GPU).
    fn redraw_to(&mut self, t: f64, j: usize, old: f64, new: f64) {
        for k in 0..self.runs[j].shares.len() {
            let (n, m) = self.runs[j].shares[k];
            self.meter.adjust(n as usize, t, f64::from(m.count_ones()) * (new - old));
        }
    }

    /// Job `j`, which shared its GPU, has ended: where the policy learns pairs, its pair's
    /// slowdown is learned as the controller learns it from the job's record, at the job's end
    /// and only where it shared with one class; the pairs on trial are then those of the jobs
    /// that shared and still run (a pair stays on trial until both its jobs have ended).
    pub(super) fn learn_at_end(&mut self, j: usize) {
        let Some(l) = &mut self.learning else { return };
        let jobs = self.jobs;
        let class = |k: usize| jobs[k].share.map(usize::from);
        let withs: BTreeSet<usize> =
            self.runs[j].partners.iter().filter_map(|p| class(p.0 as usize)).collect();
        if let (Some(c), Some(&with), 1) = (class(j), withs.first(), withs.len()) {
            l.measure(c, with, self.live[j].shared_slow - 1.0);
        }
        // `j` has left the running jobs.
        let runs = &self.runs;
        let sharing = (self.running.iter().map(|&x| x as usize)).flat_map(|x| {
            runs[x].partners.iter().filter_map(move |p| Some((x as u32, class(x)?, class(p.0 as usize)?)))
        });
        l.on_trial(sharing.collect::<Vec<_>>());
    }

    /// Job `j`, which shared its GPU, has ended: a run slowed over its bound stops its class
    /// from being paired again; where the policy learns pairs, its pairs with the classes it
    /// shared with instead (its measured pairs stand in its model for the predictions, and a
    /// class is not dropped for one partner).
    pub(super) fn judge_sharing(&mut self, j: usize) {
        let Some(class) = self.jobs[j].share else { return };
        if self.runs[j].slowdown <= self.jobs[j].bound + 1e-6 {
            return;
        }
        if self.learning.is_none() {
            self.broken.insert(usize::from(class));
            return;
        }
        for &(k, _, _) in &self.runs[j].partners {
            if let Some(with) = self.jobs[k as usize].share {
                self.unfit.insert((usize::from(class), usize::from(with)));
            }
        }
    }
}

/// The policy's pair learning ([`Learning`]) where it learns pairs (`share_learn`, or no prior:
/// `pair_prior = false`), from the catalog's pairs or, without a prior, from none.
pub(super) fn learning(
    c: &crate::cluster::ClusterConfig,
    colocation: Option<&Colocation>,
) -> Option<Learning> {
    let colocation = colocation?;
    let (learn, prior) = (c.wattson.tuning.share_learn, c.wattson.sim.pair_prior);
    if !learn && prior {
        return None;
    }
    Some(if prior {
        Learning::with_prior(&colocation.model)
    } else {
        Learning::new(colocation.names.len(), &[])
    })
}
