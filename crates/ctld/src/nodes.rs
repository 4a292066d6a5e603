//! The controller's requests to each node's wattsond over the link ([`wattson_link`]):
//! confirm that a node is idle before it is powered down, and set running jobs' pace.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use wattson_config::link::LinkConfig;
use wattson_engine::cluster::Level;
use wattson_link::{LinkError, Munge};
use wattson_protocol::{ErrorCode, Pace, Reply, Request};

/// A running job's DVFS levels, as its node gives them ([`wattson_protocol::Reply::JobLevels`]).
#[derive(Debug, Clone, PartialEq)]
pub struct JobLevels {
    /// Its level table, the top level (the GPUs' defaults) last.
    pub levels: Vec<Level>,
    /// The level it runs at now.
    pub level: u16,
    /// Its slowdown bound (fraction).
    pub bound: f64,
}

/// A node's answer (`Ok(Err(..))`: its refusal), or why it could not be asked.
pub(crate) type Answer = Result<Result<Reply, wattson_protocol::Error>, String>;

/// Nodes asked at once.
const PARALLEL: usize = 64;

/// The answer of a node left unasked because its fan-out ran out of time.
const NOT_ASKED: &str = "not asked: the fan-out's deadline passed; next loop";

/// How many running jobs went to each pace in one [`Nodes::pace`].
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Paced {
    /// To full speed.
    pub full: usize,
    /// Back to their saving setting.
    pub saving: usize,
    /// To a level the power budget allows.
    pub level: usize,
}

/// The link to the nodes, and the pace each running job was last given.
pub struct Nodes {
    config: LinkConfig,
    munge: Result<Munge, String>,
    /// Longest one fan-out ([`Nodes::call_all`]) may take.
    deadline: Option<Duration>,
    /// Pace last set per job; a job not listed runs at [`Pace::Saving`] (the nodes' default).
    paced: BTreeMap<u32, Pace>,
    /// Whether `paced` is known (false: every running job's pace is sent at the next loop).
    paces_known: bool,
}

impl Nodes {
    /// The link as `config` says. Every running job's pace is sent at the first
    /// [`Nodes::pace`]: a controller before this one may have set them.
    pub fn new(config: LinkConfig) -> Nodes {
        let munge = Munge::new(config.munge_socket.as_deref()).map_err(|e| e.to_string());
        Nodes { config, munge, deadline: None, paced: BTreeMap::new(), paces_known: false }
    }

    /// The same link, each fan-out ending within `deadline` (the controller's loop interval).
    pub fn within(self, deadline: Duration) -> Nodes {
        Nodes { deadline: Some(deadline), ..self }
    }

    /// Sends `request` to the wattsond at `addr` (a node's `NodeAddr`), waiting at most
    /// `timeout`; `Ok(Err(..))` is the node's refusal.
    fn call(&self, addr: &str, request: &Request, timeout: Duration) -> Answer {
        let munge = self.munge.as_ref().map_err(Clone::clone)?;
        let target: SocketAddr = (addr, self.config.port)
            .to_socket_addrs()
            .map_err(|e| format!("{addr}: {e}"))?
            .next()
            .ok_or_else(|| format!("{addr}: no address"))?;
        match wattson_link::call(munge, target, request, timeout) {
            Ok(reply) => Ok(Ok(reply)),
            Err(LinkError::Refused { error, .. }) => Ok(Err(error)),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Sends each request to its address, [`PARALLEL`] workers taking the next ask as each
    /// finishes (an unreachable node holds one worker for one link timeout); no call outlasts
    /// the deadline, and asks not sent by then are answered [`NOT_ASKED`]. The answers in order.
    pub(crate) fn call_all(&self, asks: &[(&str, Request)]) -> Vec<Answer> {
        let ends = self.deadline.map(|d| Instant::now() + d);
        let next = AtomicUsize::new(0);
        let work = || {
            let mut mine = Vec::new();
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((addr, request)) = asks.get(i) else { return mine };
                let left = ends.map_or(self.config.timeout, |e| e.saturating_duration_since(Instant::now()));
                let answer = if left.is_zero() {
                    Err(NOT_ASKED.to_string())
                } else {
                    self.call(addr, request, left.min(self.config.timeout))
                };
                mine.push((i, answer));
            }
        };
        let mut answers: Vec<Option<Answer>> = (0..asks.len()).map(|_| None).collect();
        std::thread::scope(|s| {
            let workers: Vec<_> = (0..PARALLEL.min(asks.len())).map(|_| s.spawn(work)).collect();
            for (i, answer) in workers.into_iter().filter_map(|w| w.join().ok()).flatten() {
                answers[i] = Some(answer);
            }
        });
        answers.into_iter().map(|a| a.unwrap_or_else(|| Err("the request panicked".into()))).collect()
    }

    /// The nodes of `candidates` (name, address) that may be powered down: all of them when
    /// confirmation is off, else those whose wattsond confirms no job or process holds their
    /// GPUs. Each node kept up is returned with the reason.
    pub fn confirm_idle(&self, candidates: &[(String, String)]) -> (Vec<String>, Vec<(String, String)>) {
        if !self.config.confirm_idle {
            return (candidates.iter().map(|(n, _)| n.clone()).collect(), Vec::new());
        }
        let asks: Vec<(&str, Request)> =
            candidates.iter().map(|(_, addr)| (addr.as_str(), Request::ConfirmIdle {})).collect();
        let mut confirmed = Vec::new();
        let mut kept = Vec::new();
        for ((name, _), answer) in candidates.iter().zip(self.call_all(&asks)) {
            match answer {
                Ok(Ok(Reply::Idle { .. })) => confirmed.push(name.clone()),
                Ok(Ok(other)) => kept.push((name.clone(), format!("unexpected answer {other:?}"))),
                Ok(Err(refusal)) => kept.push((name.clone(), format!("wattsond: {refusal}"))),
                Err(why) => kept.push((name.clone(), format!("wattsond cannot be asked: {why}"))),
            }
        }
        (confirmed, kept)
    }

    /// Gives each running job (id, pace, its nodes' addresses) its pace where it differs from
    /// what it was last given; forgets jobs that are no longer running. A node that cannot be
    /// reached is tried again next loop. Returns how many jobs went to each pace.
    pub fn pace(&mut self, running: &[(u32, Pace, Vec<String>)]) -> Paced {
        self.paced.retain(|job, _| running.iter().any(|(id, _, _)| id == job));
        let known = self.paces_known;
        let last = |paced: &BTreeMap<u32, Pace>, job: u32| {
            known.then(|| paced.get(&job).copied().unwrap_or(Pace::Saving))
        };
        let due: Vec<(u32, Pace, &str)> = running
            .iter()
            .filter(|(job, pace, _)| last(&self.paced, *job) != Some(*pace))
            .flat_map(|(job, pace, addrs)| addrs.iter().map(move |addr| (*job, *pace, addr.as_str())))
            .collect();
        let asks: Vec<(&str, Request)> =
            due.iter().map(|&(job, pace, addr)| (addr, Request::JobPace { job, pace })).collect();
        let mut failed: Vec<u32> = Vec::new();
        for (&(job, pace, addr), answer) in due.iter().zip(self.call_all(&asks)) {
            match answer {
                Ok(Ok(_)) => info!(job, node = %addr, ?pace, "pace set"),
                // A job with nothing of wattson's on that node (no GPU there).
                Ok(Err(refusal)) if refusal.code == ErrorCode::NotRunning => {}
                Ok(Err(refusal)) => {
                    warn!(job, node = %addr, ?pace, error = %refusal, "the node refused the job's pace");
                }
                Err(why) => {
                    warn!(job, node = %addr, ?pace, error = %why, "cannot set the job's pace; retried next loop");
                    failed.push(job);
                }
            }
        }
        self.paces_known = failed.is_empty();
        let mut paced = Paced::default();
        for &(job, pace, _) in running {
            if last(&self.paced, job) != Some(pace) && !failed.contains(&job) {
                self.paced.insert(job, pace);
                match pace {
                    Pace::Full => paced.full += 1,
                    Pace::Saving => paced.saving += 1,
                    Pace::Level(_) => paced.level += 1,
                }
            }
        }
        paced
    }

    /// Each running job's level table from the node at its address (`(job, addr)`), for the
    /// power budget; a job whose node cannot be asked or has no record of it is left out (the
    /// engine counts it at its GPUs' largest limit).
    pub fn levels(&self, running: &[(u32, String)]) -> BTreeMap<u32, JobLevels> {
        let asks: Vec<(&str, Request)> =
            running.iter().map(|(job, addr)| (addr.as_str(), Request::JobLevels { job: *job })).collect();
        let mut out = BTreeMap::new();
        for ((job, addr), answer) in running.iter().zip(self.call_all(&asks)) {
            match answer {
                Ok(Ok(Reply::JobLevels { levels, level, bound, .. })) => {
                    out.insert(*job, JobLevels { levels, level, bound });
                }
                Ok(Ok(other)) => warn!(job, node = %addr, "unexpected answer to job levels: {other:?}"),
                Ok(Err(refusal)) if refusal.code == ErrorCode::NotRunning => {}
                Ok(Err(refusal)) => {
                    warn!(job, node = %addr, error = %refusal, "the node refused the job's levels")
                }
                Err(why) => {
                    warn!(job, node = %addr, error = %why, "cannot ask for the job's levels; next loop")
                }
            }
        }
        out
    }

    /// Sends every running job's pace at the next [`Nodes::pace`]: another controller may
    /// have set them.
    pub fn forget_paces(&mut self) {
        self.paces_known = false;
    }

    /// Whether running jobs are paced at all.
    pub fn paces(&self) -> bool {
        self.config.pace
    }

    /// Whether the nodes' DVFS measurements are merged.
    pub fn syncs_models(&self) -> bool {
        self.config.sync_models
    }

    /// Whether jobs' summaries are gathered and written into Slurm's accounting.
    pub fn summarizes(&self) -> bool {
        self.config.summaries
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes(confirm_idle: bool) -> Nodes {
        let config = LinkConfig {
            munge_socket: Some("/nonexistent/munge.socket".into()),
            confirm_idle,
            ..LinkConfig::default()
        };
        Nodes::new(config)
    }

    #[test]
    fn a_node_that_cannot_be_asked_stays_up_with_the_reason_and_is_paced_again_next_loop() {
        let candidates = vec![("n1".to_string(), "127.0.0.1".to_string())];
        let (confirmed, kept) = nodes(true).confirm_idle(&candidates);
        assert!(confirmed.is_empty());
        assert!(kept[0].1.starts_with("wattsond cannot be asked: MUNGE"), "{kept:?}");
        // Without confirmation, Slurm's word is enough.
        assert_eq!(nodes(false).confirm_idle(&candidates).0, ["n1"]);
        let mut n = nodes(true);
        let running = vec![(7, Pace::Full, vec!["127.0.0.1".to_string()])];
        assert_eq!(n.pace(&running), Paced::default(), "not reached: not counted");
        assert!(n.paced.is_empty(), "not remembered as paced: asked again next loop");
    }
}
