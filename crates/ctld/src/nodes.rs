//! The controller's requests to each node's wattsond over the link ([`wattson_link`]):
//! confirm that a node is idle before it is powered down, and set running jobs' pace.

use std::collections::BTreeMap;
use std::net::{SocketAddr, ToSocketAddrs};

use tracing::{info, warn};

use wattson_config::link::LinkConfig;
use wattson_link::{LinkError, Munge};
use wattson_protocol::{ErrorCode, Pace, Reply, Request};

/// The link to the nodes, and the pace each running job was last given.
pub struct Nodes {
    config: LinkConfig,
    munge: Result<Munge, String>,
    /// Pace last set per job; a job not listed runs at [`Pace::Saving`] (the nodes' default).
    paced: BTreeMap<u32, Pace>,
}

impl Nodes {
    /// The link as `config` says.
    pub fn new(config: LinkConfig) -> Nodes {
        let munge = Munge::new(config.munge_socket.as_deref()).map_err(|e| e.to_string());
        Nodes { config, munge, paced: BTreeMap::new() }
    }

    /// Sends `request` to the wattsond at `addr` (a node's `NodeAddr`); `Ok(Err(..))` is the
    /// node's refusal.
    fn call(&self, addr: &str, request: &Request) -> Result<Result<Reply, wattson_protocol::Error>, String> {
        let munge = self.munge.as_ref().map_err(Clone::clone)?;
        let target: SocketAddr = (addr, self.config.port)
            .to_socket_addrs()
            .map_err(|e| format!("{addr}: {e}"))?
            .next()
            .ok_or_else(|| format!("{addr}: no address"))?;
        match wattson_link::call(munge, target, request, self.config.timeout) {
            Ok(reply) => Ok(Ok(reply)),
            Err(LinkError::Refused { error, .. }) => Ok(Err(error)),
            Err(e) => Err(e.to_string()),
        }
    }

    /// The nodes of `candidates` (name, address) that may be powered down: all of them when
    /// confirmation is off, else those whose wattsond confirms no job or process holds their
    /// GPUs. Each node kept up is returned with the reason.
    pub fn confirm_idle(&self, candidates: &[(String, String)]) -> (Vec<String>, Vec<(String, String)>) {
        if !self.config.confirm_idle {
            return (candidates.iter().map(|(n, _)| n.clone()).collect(), Vec::new());
        }
        let mut confirmed = Vec::new();
        let mut kept = Vec::new();
        for (name, addr) in candidates {
            match self.call(addr, &Request::ConfirmIdle {}) {
                Ok(Ok(Reply::Idle { .. })) => confirmed.push(name.clone()),
                Ok(Ok(other)) => kept.push((name.clone(), format!("unexpected answer {other:?}"))),
                Ok(Err(refusal)) => kept.push((name.clone(), format!("wattsond: {refusal}"))),
                Err(why) => kept.push((name.clone(), format!("wattsond cannot be asked: {why}"))),
            }
        }
        (confirmed, kept)
    }

    /// Gives each running job (id, its nodes' addresses) `pace` where it differs from what it
    /// was last given; forgets jobs that are no longer running. A node that cannot be reached
    /// is tried again next loop. Returns how many jobs changed pace.
    pub fn pace(&mut self, pace: Pace, running: &[(u32, Vec<String>)]) -> usize {
        let mut changed = 0;
        self.paced.retain(|job, _| running.iter().any(|(id, _)| id == job));
        for (job, addrs) in running {
            if self.paced.get(job).copied().unwrap_or(Pace::Saving) == pace {
                continue;
            }
            let request = Request::JobPace { job: *job, pace };
            let mut done = true;
            for addr in addrs {
                match self.call(addr, &request) {
                    Ok(Ok(_)) => info!(job, node = %addr, ?pace, "pace set"),
                    // A job with nothing of wattson's on that node (no GPU there).
                    Ok(Err(refusal)) if refusal.code == ErrorCode::NotRunning => {}
                    Ok(Err(refusal)) => {
                        warn!(job, node = %addr, ?pace, error = %refusal, "the node refused the job's pace");
                    }
                    Err(why) => {
                        warn!(job, node = %addr, ?pace, error = %why, "cannot set the job's pace; retried next loop");
                        done = false;
                    }
                }
            }
            if done {
                self.paced.insert(*job, pace);
                changed += 1;
            }
        }
        changed
    }

    /// Whether running jobs are paced at all.
    pub fn paces(&self) -> bool {
        self.config.pace
    }
}
