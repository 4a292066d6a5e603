//! What one loop of the controller asks of Slurm and of the nodes, and why: the plan the
//! [`crate::Planner`] makes and the loop carries out.

use wattson_protocol::Pace;

use crate::{by_type, share};

/// What one loop asks of Slurm, and why.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Nodes to power down.
    pub power_down: Vec<String>,
    /// Nodes to power up ahead of known demand (queued or held jobs).
    pub power_up: Vec<String>,
    /// Nodes whose resume failed, to power up again, with the try number.
    pub retry: Vec<(String, u32)>,
    /// Nodes whose resume failed too often, to leave down for an administrator.
    pub give_up: Vec<(String, u32)>,
    /// New node weights, for the nodes whose weight differs: (weight, nodes).
    pub weights: Vec<(u32, Vec<String>)>,
    /// New nice values of pending jobs, for the jobs whose nice differs: (job, nice), the
    /// engine's queue order as an offset on the priority Slurm computes.
    pub nice: Vec<(u32, i64)>,
    /// Pending jobs to keep off the nodes of every GPU type but the one the engine ranks for
    /// them ([`by_type`]).
    pub restrict: Vec<by_type::Restriction>,
    /// Jobs job_submit held for the power budget whose start now fits, each with the
    /// AdminComment it is released with ([`crate::budget`]).
    pub release: Vec<(u32, String)>,
    /// Opted-in jobs to release beside a partner or alone, and exclusions ([`share`]).
    pub share: share::Gate,
    /// Idle nodes the arrival forecast wants kept on.
    pub warm_target: usize,
    /// Idle powered-on nodes seen.
    pub idle: usize,
    /// Jobs waiting for resources.
    pub queued: usize,
    /// Running jobs, the pace each should have (full speed for those queued work waits for,
    /// the engine's [`wattson_engine::cluster::Actions::raised`]; under a power budget, the engine's level for
    /// each job whose node gave its table) and their nodes' addresses.
    pub running: Vec<(u32, Pace, Vec<String>)>,
    /// Where each node of `power_down` is reached, to confirm it idle first.
    pub addrs: std::collections::BTreeMap<String, String>,
}
