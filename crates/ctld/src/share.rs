//! Co-location on a real Slurm (`[ctld] share_pairs`): the engine's pairs
//! ([`cluster::Actions::share`]) enacted through Slurm's shards.
//!
//! Slurm packs shard jobs: one given half a GPU's shards starts beside a job on a half-used
//! GPU of its node before it takes a free GPU (measured on 22.05). So job_submit holds every
//! opted-in job given shards (`held=share`) while the controller is live, and the controller
//! releases it (`released=share`):
//! - **beside** the running job the engine pairs it with: `ReqNodeList` is that job's node,
//!   and only when the model lets it join every opted-in job alone on a GPU there;
//! - **alone**, when the GPUs free on powered nodes hold it: `ExcNodeList` keeps it off the
//!   nodes of lone opted-in jobs the model does not let it join (its own exclusions kept).
//!
//! A job is released only when the model lets it share with every opted-in job released and
//! not yet started, since Slurm may start those on one GPU in one pass; the exclusions of those
//! jobs follow the lone jobs each loop. A job released beside a partner that ends, or takes
//! another partner, before it starts, or whose partner's node gains a lone job it may not join,
//! gets its own `ReqNodeList` back and is then kept off GPUs as one released alone. A job whose
//! tag the pair file does not name shares with none. Jobs that wait stay held.
//!
//! A job of several GPUs (job_submit's `shared_gpus=N`, one task per GPU on shards) is a
//! candidate of `N` GPUs: the model lets it join only a job of as many, so it is kept off the
//! nodes of lone opted-in jobs of other sizes, where Slurm would put it across two partners.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use wattson_config::ConfigError;
use wattson_config::ctld::{SHARE_HELD_MARK, SHARE_RELEASED_MARK};
use wattson_config::pairs::{self, PairMeasurement};
use wattson_engine::cluster::{self, Snapshot, levels::allowance, share::free_gpus_hold};
use wattson_engine::colocation::{Candidate, Interference, Learning, PairSlowdown, Sharing, slowdowns};
use wattson_sacct::hostlist;

use tracing::{info, warn};

use crate::slurm::request::Request;
use crate::slurm::{Job, Slurm};

/// The engine's interference model, its classes named by workload tag: fitted on the site's
/// pair file, or (`share_learn`) learned from the nodes' measurements with the file, if any,
/// as its prior.
#[derive(Debug, Clone)]
pub struct Pairs {
    tags: Vec<String>,
    model: Interference,
    /// Where pairs are learned: the learning, whose model replaces `model`.
    learning: Option<Learning>,
    broken: BTreeSet<usize>,
    unfit: BTreeSet<(usize, usize)>,
    min_gain: f64,
    try_bound: f64,
}

impl Pairs {
    /// The model fitted to `measured` (each tag a class, in sorted order).
    pub fn new(measured: &[PairMeasurement]) -> Pairs {
        let tags: Vec<String> = measured
            .iter()
            .flat_map(|p| [p.job.clone(), p.with.clone()])
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let class = |tag: &str| tags.iter().position(|t| t == tag).unwrap_or(0);
        let pairs: Vec<PairSlowdown> = measured
            .iter()
            .map(|p| PairSlowdown { victim: class(&p.job), neighbour: class(&p.with), slowdown: p.slowdown })
            .collect();
        let model = Interference::fit(tags.len(), &pairs);
        let t = cluster::Tuning::default();
        let (min_gain, try_bound) = (t.share_min_gain, t.share_try_bound);
        Pairs {
            tags,
            model,
            learning: None,
            broken: BTreeSet::new(),
            unfit: BTreeSet::new(),
            min_gain,
            try_bound,
        }
    }

    /// The same, pairing as `tuning`'s `share_min_gain` and `share_try_bound` say, and with
    /// `share_learn`, learning pairs from here on with what it was given as the prior.
    pub fn with_tuning(self, tuning: &cluster::Tuning) -> Pairs {
        let learning = tuning.share_learn.then(|| Learning::with_prior(&self.model));
        Pairs { min_gain: tuning.share_min_gain, try_bound: tuning.share_try_bound, learning, ..self }
    }

    /// Judges a node's measurement as the simulator judges its own: class `victim` shared its
    /// GPU with class `neighbour` (`None`: with several) and its run took `run` longer. Over the
    /// job's `bound`, its class is paired no more, or, learning pairs, the pair never shares
    /// again; learning, the pair's own slowdown `pair` (the rates alone and shared) is learned.
    /// Returns whether the run broke the bound.
    pub fn observe(
        &mut self,
        victim: u16,
        neighbour: Option<u16>,
        pair: Option<f64>,
        run: f64,
        bound: f64,
    ) -> bool {
        let (victim, neighbour) = (usize::from(victim), neighbour.map(usize::from));
        let broke = run > bound + 1e-6;
        match (&mut self.learning, neighbour) {
            (None, _) => {
                if broke {
                    self.broken.insert(victim);
                }
            }
            (Some(learning), Some(neighbour)) => {
                if let Some(pair) = pair {
                    learning.measure(victim, neighbour, pair);
                }
                if broke {
                    self.unfit.insert((victim, neighbour));
                }
            }
            (Some(_), None) => {}
        }
        broke
    }

    /// Whether pairs are learned (`share_learn`).
    pub fn learns(&self) -> bool {
        self.learning.is_some()
    }

    /// The tags of the classes paired no more, in order.
    pub fn broken_tags(&self) -> Vec<String> {
        self.broken.iter().filter_map(|&c| self.tags.get(c).cloned()).collect()
    }

    /// Pairs the classes of `tags` no more (as a controller before this one learned); a tag
    /// the pair file no longer names is dropped.
    pub fn break_tags(&mut self, tags: &[String]) {
        let classes: Vec<u16> = tags.iter().filter_map(|t| self.class(t)).collect();
        self.broken.extend(classes.into_iter().map(usize::from));
    }

    /// The pairs measured on the cluster, by tags (learning; none otherwise).
    pub fn learned(&self) -> Vec<PairMeasurement> {
        let Some(learning) = &self.learning else { return Vec::new() };
        learning
            .measured()
            .iter()
            .map(|(&(v, n), &slowdown)| PairMeasurement {
                job: self.tags[v].clone(),
                with: self.tags[n].clone(),
                slowdown,
            })
            .collect()
    }

    /// The pairs never to share again (a job's run broke its bound beside the other), by tags.
    pub fn unfit_tags(&self) -> Vec<[String; 2]> {
        self.unfit.iter().map(|&(v, n)| [self.tags[v].clone(), self.tags[n].clone()]).collect()
    }

    /// Takes back what a controller before this one learned: its measured pairs and the pairs
    /// never to share again (learning only).
    pub fn relearn(&mut self, learned: &[PairMeasurement], unfit: &[[String; 2]]) {
        if self.learning.is_none() {
            return;
        }
        for p in learned {
            let (v, n) = (self.class_or_new(&p.job), self.class_or_new(&p.with));
            if let (Some(l), Some(v), Some(n)) = (&mut self.learning, v, n) {
                l.measure(usize::from(v), usize::from(n), p.slowdown);
            }
        }
        for [v, n] in unfit {
            if let (Some(v), Some(n)) = (self.class_or_new(v), self.class_or_new(n)) {
                self.unfit.insert((usize::from(v), usize::from(n)));
            }
        }
    }

    /// The tag of class `class`.
    pub fn tag(&self, class: u16) -> &str {
        self.tags.get(usize::from(class)).map_or("", String::as_str)
    }

    /// Reads the pair file at `path` ([`pairs::load`]).
    pub fn load(path: &Path) -> Result<Pairs, ConfigError> {
        Ok(Pairs::new(&pairs::load(path)?))
    }

    /// The class of workload `tag`, if the file names it.
    pub fn class(&self, tag: &str) -> Option<u16> {
        self.tags.iter().position(|t| t == tag).and_then(|c| u16::try_from(c).ok())
    }

    /// The class of workload `tag`; learning, a tag never seen is a new class (none past
    /// `u16`'s range).
    pub fn class_or_new(&mut self, tag: &str) -> Option<u16> {
        if let Some(class) = self.class(tag) {
            return Some(class);
        }
        let learning = self.learning.as_mut()?;
        let class = u16::try_from(self.tags.len()).ok()?;
        self.tags.push(tag.to_string());
        learning.grow(self.tags.len());
        Some(class)
    }

    /// Learning, from `sharing`, `(job, its class, a class beside it)` for the jobs sharing a
    /// GPU, about to, or awaiting their judgement: puts on trial exactly their class pairs
    /// never measured both ways, and notes the classes beside each job ([`Learning::on_trial`]).
    pub fn on_trial(&mut self, sharing: impl IntoIterator<Item = (u32, u16, u16)>) {
        if let Some(learning) = &mut self.learning {
            learning.on_trial(sharing.into_iter().map(|(j, a, b)| (j, usize::from(a), usize::from(b))));
        }
    }

    /// What the engine decides co-location with.
    pub fn sharing(&self) -> Sharing<'_> {
        Sharing {
            broken: &self.broken,
            unfit: &self.unfit,
            min_gain: self.min_gain,
            try_bound: self.try_bound,
            ..Sharing::learned_or(self.learning.as_ref(), &self.model)
        }
    }
}

/// An opted-in job (job_submit gave it shards), as the controller sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ShareJob {
    /// Its class in the pair file; `None`: its tag is not there, and it shares with none.
    pub class: Option<u16>,
    /// Its slowdown bound (fraction), as its AdminComment records it.
    pub bound: f64,
    /// GPUs it shares, each with one partner (`shared_gpus=`; 1 without).
    pub gpus: u32,
    /// Whether it is pending (held or not).
    pub pending: bool,
    /// Whether job_submit holds it for the controller (pending, `held=share`).
    pub held: bool,
    /// The node and GPUs its shards are on, while it runs.
    pub placed: Option<(String, Vec<u32>)>,
    /// Whether another opted-in job runs on one of its GPUs.
    pub partnered: bool,
    /// The nodes it excludes (`ExcNodeList`), as Slurm shows them.
    pub excluded: BTreeSet<String>,
    /// The nodes it must run on (`ReqNodeList`), as Slurm shows them.
    pub required: Vec<String>,
    /// Its AdminComment.
    pub comment: String,
}

/// The opted-in jobs among `requests`, by id, with what `jobs` (squeue) says of their state.
pub fn share_jobs(requests: &[Request], jobs: &[Job], pairs: &mut Pairs) -> BTreeMap<u32, ShareJob> {
    let state: BTreeMap<u32, &Job> = jobs.iter().map(|j| (j.id, j)).collect();
    let mut out: BTreeMap<u32, ShareJob> = requests
        .iter()
        .filter(|r| r.shares())
        .filter_map(|r| {
            let job = state.get(&r.id)?;
            let placed = job
                .is_running()
                .then(|| Some((job.nodes.first()?.clone(), r.shard_gpus.clone())))
                .flatten()
                .filter(|(_, gpus)| !gpus.is_empty());
            let share = ShareJob {
                class: pairs.class_or_new(&r.tag()),
                bound: r.bound(),
                gpus: r.shared_gpus(),
                pending: job.state == Some(wattson_sacct::SlurmState::Pending),
                held: job.is_held() && r.marked(SHARE_HELD_MARK),
                placed,
                partnered: false,
                excluded: hostlist::expand(&r.excluded).unwrap_or_default().into_iter().collect(),
                required: hostlist::expand(&r.required).unwrap_or_default(),
                comment: r.admin_comment.clone(),
            };
            Some((r.id, share))
        })
        .collect();
    let mut on_gpu: BTreeMap<(&str, u32), usize> = BTreeMap::new();
    for (node, gpus) in out.values().filter_map(|s| s.placed.as_ref()) {
        for &gpu in gpus {
            *on_gpu.entry((node.as_str(), gpu)).or_default() += 1;
        }
    }
    let shared = |(node, gpus): &(String, Vec<u32>)| gpus.iter().any(|&g| on_gpu[&(node.as_str(), g)] > 1);
    let partnered: BTreeSet<u32> =
        out.iter().filter(|(_, s)| s.placed.as_ref().is_some_and(shared)).map(|(&id, _)| id).collect();
    for (id, s) in &mut out {
        s.partnered = partnered.contains(id);
    }
    out
}

/// Where the controller lets Slurm start a held opted-in job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// On this node, beside the running job the engine paired it with.
    Beside {
        /// The node (`ReqNodeList`).
        node: String,
        /// The job it joins.
        partner: u32,
    },
    /// On a GPU of its own, off these nodes (`ExcNodeList`: its own and the controller's).
    Alone(Vec<String>),
}

/// One held job to release.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Release {
    /// Job id.
    pub job: u32,
    /// Where it may start.
    pub place: Place,
    /// Its AdminComment once released (`held=share` become `released=share`).
    pub comment: String,
}

/// What the controller asks of Slurm for the opted-in jobs this loop.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Gate {
    /// Held jobs to release, in queue order.
    pub release: Vec<Release>,
    /// Jobs released beside a partner, not started, whose place there is gone: (job, its own
    /// `ReqNodeList` back; empty: none).
    pub require: Vec<(u32, Vec<String>)>,
    /// Released jobs not yet started whose exclusions change: (job, whole `ExcNodeList`).
    pub exclude: Vec<(u32, Vec<String>)>,
}

/// What the controller changed of the released jobs not yet started, to give back; kept in
/// the state file for the controller after it.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Released {
    /// The exclusions each had of its own when released: the controller's part of its
    /// `ExcNodeList` is the rest, replaced as the lone jobs change.
    pub own: BTreeMap<u32, BTreeSet<String>>,
    /// Those released beside a partner.
    pub beside: BTreeMap<u32, Beside>,
}

impl Released {
    /// Whether it holds nothing to give back.
    pub fn is_empty(&self) -> bool {
        self.own.is_empty() && self.beside.is_empty()
    }
}

/// How long a job released beside a partner may pend there before the controller gives it its
/// own node list back (s). Slurm tries a released job at once and again at each backfill pass
/// (`bf_interval`, 30 s by default): a job still pending after this is short of CPUs or memory
/// on that node, and would otherwise wait there while GPUs are free elsewhere.
pub const BESIDE_PATIENCE_S: f64 = 120.0;

/// A job released beside a partner: where, when, and the node list its user gave it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Beside {
    /// The running job it joins.
    pub partner: u32,
    /// The partner's node, its `ReqNodeList` now.
    pub node: String,
    /// Its own `ReqNodeList` before (empty: none).
    pub own: Vec<String>,
    /// When it was released (Unix s; 0 from a state file written before this was kept: long
    /// ago).
    #[serde(default)]
    pub at: f64,
}

/// This loop's releases and exclusions ([module docs](self)), from the engine's `actions` on
/// `snapshot` and the opted-in jobs `shares`; keeps `released` up to date.
pub fn gate(
    pairs: &Pairs,
    released: &mut Released,
    snapshot: &Snapshot,
    actions: &cluster::Actions,
    shares: &BTreeMap<u32, ShareJob>,
) -> Gate {
    let sharing = pairs.sharing();
    let candidate = |id: u32, s: &ShareJob| -> Option<Candidate> {
        // A running job's bound is what its run so far left of it.
        let running = snapshot.running.iter().find(|r| r.job.id == id);
        let bound = running.map_or(s.bound, allowance);
        // Its run left: a running job's limit less its progress, a pending job's limit.
        let pending = snapshot.queued.iter().map(|q| q.job).chain(snapshot.held.iter().map(|h| h.job));
        let left_s = match running {
            Some(r) => (1.0 - r.progress).max(0.0) * r.job.work_s,
            None => pending.filter(|j| j.id == id).map(|j| j.work_s).next().unwrap_or(f64::INFINITY),
        };
        Some(Candidate { job: id, class: usize::from(s.class?), gpus: s.gpus, bound, left_s })
    };
    let allowed = |a: Option<Candidate>, b: Option<Candidate>| match (a, b) {
        (Some(a), Some(b)) => slowdowns(&sharing, &a, &b).is_some(),
        _ => false,
    };
    // Opted-in jobs alone on a GPU, with their node, and those released but not started.
    let lone: Vec<(Option<Candidate>, &str)> = shares
        .iter()
        .filter(|(_, s)| !s.partnered)
        .filter_map(|(&id, s)| Some((candidate(id, s), s.placed.as_ref()?.0.as_str())))
        .collect();
    let mut visible: Vec<(u32, Option<Candidate>)> =
        shares.iter().filter(|(_, s)| s.pending && !s.held).map(|(&id, s)| (id, candidate(id, s))).collect();
    // The nodes of the lone jobs `c` may not join, but for `partner`'s: the pair released
    // together is on trial by that release, not barred by it.
    let kept_off = |c: Option<Candidate>, partner: Option<u32>| -> BTreeSet<String> {
        (lone.iter())
            .filter(|(l, _)| l.is_none_or(|l| Some(l.job) != partner) && !allowed(c, *l))
            .map(|(_, node)| node.to_string())
            .collect()
    };
    let mut gate = Gate::default();
    let Released { own, beside } = released;
    own.retain(|id, _| visible.iter().any(|(v, _)| v == id));
    // A job that started or ended is forgotten. Its place is gone once the partner ended or
    // took another partner, once a lone job it may not join runs on the partner's node (Slurm
    // might start it there), or once it pended there longer than BESIDE_PATIENCE_S.
    beside.retain(|&id, b| {
        if !visible.iter().any(|&(v, _)| v == id) {
            return false;
        }
        let partner_waits = shares
            .get(&b.partner)
            .is_some_and(|p| !p.partnered && p.placed.as_ref().is_some_and(|(n, _)| *n == b.node));
        let me = candidate(id, &shares[&id]);
        let waits = partner_waits
            && snapshot.now - b.at <= BESIDE_PATIENCE_S
            && !kept_off(me, Some(b.partner)).contains(&b.node);
        if !waits {
            gate.require.push((id, b.own.clone()));
        }
        waits
    });
    for &(id, _) in &visible {
        let s = &shares[&id];
        // Released by an earlier controller: all its exclusions count as its own.
        let mine = own.entry(id).or_insert_with(|| s.excluded.clone());
        let partner = beside.get(&id).map(|b| b.partner);
        let whole: BTreeSet<String> = mine.union(&kept_off(candidate(id, s), partner)).cloned().collect();
        if whole != s.excluded {
            gate.exclude.push((id, whole.into_iter().collect()));
        }
    }
    for (q, holds) in snapshot.queued.iter().zip(free_gpus_hold(snapshot)) {
        let id = q.job.id;
        let Some(s) = shares.get(&id).filter(|s| s.held) else { continue };
        let me = candidate(id, s);
        if !visible.iter().all(|&(_, v)| allowed(me, v)) {
            continue;
        }
        let partner = actions.share.iter().find(|&&(j, _)| j == id).map(|&(_, r)| r);
        // Beside the engine's partner where nothing on its node bars it; else alone where the
        // free GPUs hold it (with share_first the engine pairs a job that free GPUs hold too).
        let beside_partner = partner
            .and_then(|r| Some((r, shares.get(&r)?.placed.as_ref()?.0.clone())))
            .filter(|(_, node)| {
                !s.excluded.contains(node)
                    && lone.iter().filter(|(_, n)| n == node).all(|(l, _)| allowed(me, *l))
            });
        let place = match beside_partner {
            Some((partner, node)) => {
                let own = s.required.clone();
                beside.insert(id, Beside { partner, node: node.clone(), own, at: snapshot.now });
                Place::Beside { node, partner }
            }
            None if holds => Place::Alone(s.excluded.union(&kept_off(me, None)).cloned().collect()),
            None => continue,
        };
        own.insert(id, s.excluded.clone());
        gate.release.push(Release { job: id, place, comment: released_comment(&s.comment) });
        visible.push((id, me));
    }
    gate
}

/// Puts on trial ([`Pairs::on_trial`]), each loop, the class pairs of the jobs released
/// beside a partner that have not started (`released`) and of the jobs the `judge` watches
/// (sharing a GPU, or ended and not yet judged): learning, a pair never measured both ways
/// shares no other GPU meanwhile, and where the model cannot predict it no other pair of its
/// classes is tried; a job whose own slowdown beside a class is not measured shares again
/// only with that class, so that its record teaches. Derived from what the controller sees,
/// a pair leaves its trial however its sharing ends: measured, judged without a measurement,
/// or never started.
pub fn on_trial(
    pairs: &mut Pairs,
    released: &Released,
    shares: &BTreeMap<u32, ShareJob>,
    judge: &judge::Judge,
) {
    let class = |id: &u32| shares.get(id).and_then(|s| s.class);
    let beside = (released.beside.iter()).filter_map(|(&job, b)| {
        let (c, p) = (class(&job)?, class(&b.partner)?);
        Some([(job, c, p), (b.partner, p, c)])
    });
    pairs.on_trial(beside.flatten().chain(judge.pairs()).collect::<Vec<_>>());
}

/// Asks Slurm for what `gate` says: releases each opted-in job where it may start, and keeps
/// released ones off the GPUs of jobs they may not join. A job that started or ended meanwhile
/// refuses the update: the next loop sees it.
pub fn enact(slurm: &Slurm, gate: &Gate) {
    for (job, required) in &gate.require {
        info!(job, required = ?required, "reqnodelist: its place beside its partner is gone (the partner ended or took another, a job it may not join runs there, or it pended there too long), its own node list back");
        if let Err(e) = slurm.require_nodes(*job, required) {
            warn!(job, error = %e, "cannot give the job its node list back");
        }
    }
    for (job, excluded) in &gate.exclude {
        info!(job, excluded = ?excluded, "excnodelist: off the GPUs of opted-in jobs it may not share with");
        if let Err(e) = slurm.exclude_nodes(*job, excluded) {
            warn!(job, error = %e, "cannot set the job's excluded nodes");
        }
    }
    for r in &gate.release {
        let placed = match &r.place {
            Place::Beside { node, partner } => {
                info!(job = r.job, partner, node = %node, "release: beside the job the co-location model pairs it with");
                slurm.require_nodes(r.job, std::slice::from_ref(node))
            }
            Place::Alone(excluded) => {
                info!(job = r.job, excluded = ?excluded, "release: on a GPU of its own");
                if excluded.is_empty() { Ok(()) } else { slurm.exclude_nodes(r.job, excluded) }
            }
        };
        // Released only where it was placed: a job placed nowhere waits for the next loop.
        if let Err(e) = placed.and_then(|()| slurm.release_held(r.job, &r.comment)) {
            warn!(job = r.job, error = %e, "cannot release the job; next loop");
        }
    }
}

/// `comment` with `held=share` replaced by `released=share`.
fn released_comment(comment: &str) -> String {
    crate::slurm::request::replace_mark(comment, SHARE_HELD_MARK, SHARE_RELEASED_MARK)
}

pub mod judge;

#[cfg(test)]
mod tests;
