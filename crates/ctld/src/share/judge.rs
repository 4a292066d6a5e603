//! What sharing cost each opted-in job, as its node measured it: the controller watches the
//! opted-in jobs that share a GPU; once one has ended it asks the job's node for its record
//! over the link, whose GPU meter carries the job's SM activity alone and shared
//! ([`SmActivity`]). Where the slowdown this made of the job's run
//! ([`SmActivity::run_slowdown`]) broke the job's own bound, its class is paired no more
//! ([`Pairs::observe`]), as the simulator does with the true slowdown of the run. Learning
//! pairs (`share_learn`), the pair's slowdown (the rates alone and shared,
//! [`SmActivity::slowdown`]) beside the one class the job shared with is learned instead, and a
//! pair over the job's bound never shares again.

use std::collections::{BTreeMap, BTreeSet};

use tracing::{info, warn};

use super::{Pairs, ShareJob};
use crate::nodes::Nodes;
use crate::slurm::Node;
use wattson_protocol::{Reply, Request};
use wattson_types::apportion::SmActivity;
use wattson_types::job::{JobKey, JobRecord, JobState};
use wattson_types::query::AcctQuery;

/// Loops a node is asked for an ended job's record before the job is given up.
const ASKS: u32 = 10;

/// An opted-in job seen sharing its GPU.
#[derive(Debug, Clone, PartialEq)]
struct Watched {
    /// Its class.
    class: u16,
    /// Its slowdown bound (fraction).
    bound: f64,
    /// Its node.
    node: String,
    /// The classes of the jobs seen sharing its GPUs.
    neighbours: BTreeSet<u16>,
    /// Asks left once it has ended.
    asks: u32,
}

/// The opted-in jobs seen sharing a GPU, until their nodes' measurements are judged.
#[derive(Debug, Default)]
pub struct Judge {
    watched: BTreeMap<u32, Watched>,
}

/// What a node's measurement of one job said.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// The slowdown sharing made of its run (fraction), within its bound or not.
    Measured {
        /// The slowdown.
        slowdown: f64,
        /// Whether it broke the job's bound (its class is paired no more).
        broke: bool,
    },
    /// Its record has no slowdown: too short alone or shared, or no per-process figures.
    Unmeasured,
}

impl Judge {
    /// Notes the opted-in jobs of known class sharing a GPU in `shares`, and the classes of
    /// the jobs beside them.
    pub fn watch(&mut self, shares: &BTreeMap<u32, ShareJob>) {
        for (&id, s) in shares {
            let (Some(class), Some((node, gpus)), true) = (s.class, &s.placed, s.partnered) else { continue };
            let beside = shares.iter().filter(|&(&other, _)| other != id).filter_map(|(_, o)| {
                let (n, g) = o.placed.as_ref()?;
                (n == node && g.iter().any(|g| gpus.contains(g))).then_some(o.class?)
            });
            let watched = self.watched.entry(id).or_insert_with(|| Watched {
                class,
                bound: s.bound,
                node: node.clone(),
                neighbours: BTreeSet::new(),
                asks: ASKS,
            });
            watched.neighbours.extend(beside);
        }
    }

    /// Each watched job with its class and each class seen beside it.
    pub fn pairs(&self) -> impl Iterator<Item = (u32, u16, u16)> + '_ {
        (self.watched.iter()).flat_map(|(&id, w)| w.neighbours.iter().map(move |&n| (id, w.class, n)))
    }

    /// The watched jobs that no longer run (not in `shares`, or not on a GPU), with their
    /// nodes: each to be asked for its record.
    pub fn due(&self, shares: &BTreeMap<u32, ShareJob>) -> Vec<(u32, String)> {
        self.watched
            .iter()
            .filter(|(id, _)| shares.get(id).is_none_or(|s| s.placed.is_none()))
            .map(|(&id, w)| (id, w.node.clone()))
            .collect()
    }

    /// Judges job `id` by `records`, its node's records of it (`None`: the node did not
    /// answer, or its record is still open: asked again next loop, up to `ASKS` loops),
    /// into `pairs`.
    pub fn judge(&mut self, id: u32, records: Option<&[JobRecord]>, pairs: &mut Pairs) -> Option<Verdict> {
        let watched = self.watched.get_mut(&id)?;
        let ended = records
            .and_then(|rs| rs.iter().find(|r| r.key == JobKey::job(id) && r.state == JobState::Completed));
        let Some(record) = ended else {
            watched.asks -= 1;
            if watched.asks == 0 {
                self.watched.remove(&id);
            }
            return None;
        };
        let watched = self.watched.remove(&id)?;
        let sm = || record.gpus.iter().filter_map(|g| g.meter.sm.as_ref());
        let Some(run) = sm().filter_map(SmActivity::run_slowdown).max_by(f64::total_cmp) else {
            return Some(Verdict::Unmeasured);
        };
        let pair = sm().filter_map(SmActivity::slowdown).max_by(f64::total_cmp);
        // A pair is learned only where the job shared with one class.
        let mut neighbours = watched.neighbours.iter().copied();
        let neighbour = neighbours.next().filter(|_| neighbours.next().is_none());
        let broke = pairs.observe(watched.class, neighbour, pair, run, watched.bound);
        let slowdown = if pairs.learns() { pair.unwrap_or(run) } else { run };
        Some(Verdict::Measured { slowdown, broke })
    }

    /// Asks the nodes of the watched jobs that ended for their records and judges them
    /// ([`Judge::judge`]); logs each verdict.
    pub fn run(&mut self, link: &Nodes, nodes: &[Node], shares: &BTreeMap<u32, ShareJob>, pairs: &mut Pairs) {
        let due = self.due(shares);
        if due.is_empty() {
            return;
        }
        // A node is reached at its `NodeAddr`, else by its name.
        let addrs: Vec<&str> = due
            .iter()
            .map(|(_, name)| {
                nodes.iter().find(|n| &n.name == name).map_or(name.as_str(), |n| n.addr.as_str())
            })
            .collect();
        let asks: Vec<(&str, Request)> = due
            .iter()
            .zip(&addrs)
            .map(|((id, _), addr)| {
                (*addr, Request::Acct(AcctQuery { jobs: vec![JobKey::job(*id)], ..AcctQuery::default() }))
            })
            .collect();
        for ((id, node), answer) in due.iter().zip(link.call_all(&asks)) {
            let records = match answer {
                Ok(Ok(Reply::Acct { records })) => Some(records),
                Ok(Ok(other)) => {
                    warn!(job = id, node = %node, "co-location: unexpected answer {other:?}");
                    None
                }
                Ok(Err(refusal)) => {
                    warn!(job = id, node = %node, error = %refusal, "co-location: the node refused the job's record");
                    None
                }
                Err(why) => {
                    warn!(job = id, node = %node, error = %why, "co-location: cannot ask the node for the job's record");
                    None
                }
            };
            let (class, with) = self.watched.get(id).map_or_else(Default::default, |w| {
                let tags: Vec<&str> = w.neighbours.iter().map(|&n| pairs.tag(n)).collect();
                (pairs.tag(w.class).to_string(), tags.join(","))
            });
            let learns = pairs.learns();
            match self.judge(*id, records.as_deref(), pairs) {
                Some(Verdict::Measured { slowdown, broke: true }) if learns => warn!(
                    job = id, class = %class, with = %with, slowdown_pct = slowdown * 100.0,
                    "co-location: measured pair slowdown over the job's bound; the pair shares no more"
                ),
                Some(Verdict::Measured { slowdown, broke: false }) if learns => info!(
                    job = id, class = %class, with = %with, slowdown_pct = slowdown * 100.0,
                    "co-location: measured pair slowdown within the job's bound; learned"
                ),
                Some(Verdict::Measured { slowdown, broke: true }) => warn!(
                    job = id, class = %class, slowdown_pct = slowdown * 100.0,
                    "co-location: measured slowdown over the job's bound; its class is paired no more"
                ),
                Some(Verdict::Measured { slowdown, broke: false }) => info!(
                    job = id, class = %class, slowdown_pct = slowdown * 100.0,
                    "co-location: measured slowdown within the job's bound"
                ),
                Some(Verdict::Unmeasured) => {
                    info!(job = id, class = %class, "co-location: the node measured no slowdown for the job")
                }
                None => {}
            }
        }
    }
}
