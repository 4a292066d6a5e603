//! `[link]`: the controller-to-node link, wattsond's requests from `wattson ctld` over TCP,
//! sealed with the cluster's MUNGE key.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

use crate::duration_in;

/// `[link]` section, read by wattsond (`listen`) and by `wattson ctld` (the rest).
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(default, deny_unknown_fields)]
pub struct LinkConfig {
    /// Where wattsond takes the controller's requests, e.g. `"0.0.0.0:6828"`; unset: it takes
    /// none (and the controller cannot power this node down when `confirm_idle` is on).
    #[serde(default)]
    pub listen: Option<SocketAddr>,
    /// The port the controller dials at each node's `NodeAddr`.
    pub port: u16,
    /// munged's socket; unset: libmunge's default.
    #[serde(default)]
    pub munge_socket: Option<PathBuf>,
    /// Power a node down only once its wattsond confirms that no job and no process holds
    /// its GPUs (a node that cannot confirm stays up, and the log says why).
    pub confirm_idle: bool,
    /// Hold running jobs at full speed while jobs wait for resources, and give them back
    /// their energy-saving setting when the queue clears.
    pub pace: bool,
    /// Every `[ctld] models_sync`, gather the nodes' DVFS measurements, keep the newest of
    /// each workload, write the model table job_submit reads, and hand the merge back to the
    /// nodes: what one node learns decides jobs on all of them.
    pub sync_models: bool,
    /// After each job, gather every node's part of its summary (records, power trace) and
    /// write it into Slurm's accounting (`AdminComment`), where `wattson acct` reads it from
    /// any host.
    pub summaries: bool,
    /// Longest the controller waits for one node's answer (100ms to 1m).
    #[serde(deserialize_with = "timeout")]
    #[schemars(with = "String", extend("x-allowed" = "100ms to 1m"))]
    pub timeout: Duration,
}

impl Default for LinkConfig {
    fn default() -> LinkConfig {
        LinkConfig {
            listen: None,
            port: 6828,
            munge_socket: None,
            confirm_idle: true,
            pace: true,
            sync_models: true,
            summaries: true,
            timeout: Duration::from_secs(3),
        }
    }
}

fn timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
    duration_in(d, Duration::from_millis(100), Duration::from_secs(60))
}
