//! Placement by GPU type on a real Slurm. On a cluster of several GPU types the engine ranks
//! the types for each queued job ([`placement::ranked_types`], from the model table of the
//! job's workload) and picks the one it should start on ([`placement::type_to_start`]); the
//! controller tells Slurm by excluding the pending job's nodes of every other type
//! (`ExcNodeList`). Slurm 22.05 accepts a new typed `TresPerNode` for a pending job but does
//! not honour it (the job still starts on any type), and refuses `Gres=`; an excluded node it
//! never gives the job. Only jobs that asked for untyped GPUs per node and named no nodes are
//! touched: a job that asked for a type keeps it, and the nodes a user excluded stay excluded.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::SystemTime;

use tracing::warn;

use wattson_config::Config;
use wattson_engine::ModelTable;
use wattson_engine::cluster::{Snapshot, TunedPolicy, placement};
use wattson_sacct::hostlist;

use crate::slurm::Node;
use crate::slurm::request::Request;

/// One restriction to send: the job, the nodes it may not use, and the GPU type it is left.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restriction {
    /// Job id.
    pub job: u32,
    /// Its whole exclusion list: what its user excluded and the nodes of the other types.
    pub excluded: Vec<String>,
    /// The GPU type it may start on, as Slurm names it.
    pub gpu_type: String,
}

/// What placement by type remembers: the model table as last read, and the exclusion each
/// restricted job had of its own (so a later choice replaces only the controller's part).
#[derive(Debug, Default)]
pub struct ByType {
    table: ModelTable,
    stamp: Option<SystemTime>,
    own: BTreeMap<u32, BTreeSet<String>>,
}

/// Whether `nodes` have GPUs of more than one type.
pub fn several_types(nodes: &[Node]) -> bool {
    let types: BTreeSet<&str> =
        nodes.iter().filter(|n| n.gpus > 0).map(|n| n.gpu_type.as_deref().unwrap_or("")).collect();
    types.len() > 1
}

impl ByType {
    /// Rereads the model table at `path` when it changed; a table that cannot be read keeps
    /// the last one in force.
    fn refresh(&mut self, path: &Path) {
        let Ok(stamp) = std::fs::metadata(path).and_then(|m| m.modified()) else { return };
        if self.stamp == Some(stamp) {
            return;
        }
        match std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|t| ModelTable::from_json(&t).map_err(|e| e.to_string()))
        {
            Ok(table) => (self.table, self.stamp) = (table, Some(stamp)),
            Err(e) => {
                warn!(file = %path.display(), error = %e, "cannot read the model table; placing by the last one")
            }
        }
    }

    /// The restrictions that place `requests`' queued jobs of `s` by type, for the jobs whose
    /// exclusion list must change. `types` names `s`'s GPU types.
    pub fn plan(
        &mut self,
        policy: &TunedPolicy,
        config: &Config,
        nodes: &[Node],
        types: &[String],
        s: &Snapshot,
        requests: &[Request],
    ) -> Vec<Restriction> {
        let pending: BTreeSet<u32> = s.queued.iter().map(|q| q.job.id).collect();
        self.own.retain(|id, _| pending.contains(id));
        if types.len() < 2 || pending.is_empty() {
            return Vec::new();
        }
        self.refresh(&config.engine.models_file);
        let names: Vec<&str> = types.iter().map(String::as_str).collect();
        let per_node = s.nodes.iter().map(|n| n.gpus).max().unwrap_or(1).max(1);
        let base_share_w = s.node.base_w / f64::from(per_node);
        let mut out = Vec::new();
        for r in requests.iter().filter(|r| pending.contains(&r.id) && !r.names_nodes()) {
            let Some(per_node_gpus) = r.untyped_gpus else { continue };
            let Some(queued) = s.queued.iter().find(|q| q.job.id == r.id) else { continue };
            let (owner, tag) = (config.engine.model_owner.owner(r.uid, r.account.as_deref()), r.tag());
            let job = placement::Workload {
                owner: &owner,
                tag: &tag,
                bound: r.bound(),
                limit_s: queued.job.work_s,
            };
            let ranked = placement::ranked_types(policy, &self.table, &job, &names, base_share_w);
            let now: BTreeSet<String> =
                hostlist::expand(&r.excluded).unwrap_or_default().into_iter().collect();
            let own = self.own.get(&r.id).cloned();
            let Some(t) = placement::type_to_start(s, r.id, queued.job.gpus.max(per_node_gpus), &ranked)
            else {
                // Nothing ranked (any more): give the job back the exclusion it had.
                if let Some(own) = own.filter(|own| *own != now) {
                    self.own.remove(&r.id);
                    out.push(Restriction {
                        job: r.id,
                        excluded: own.into_iter().collect(),
                        gpu_type: String::new(),
                    });
                }
                continue;
            };
            let own = own.unwrap_or_else(|| now.clone());
            let mut excluded = own.clone();
            for (i, n) in nodes.iter().enumerate() {
                if n.gpus > 0 && s.nodes.get(i).is_some_and(|v| v.gpu_type != t) {
                    excluded.insert(n.name.clone());
                }
            }
            self.own.insert(r.id, own);
            if excluded != now {
                let gpu_type = types[usize::from(t)].clone();
                out.push(Restriction { job: r.id, excluded: excluded.into_iter().collect(), gpu_type });
            }
        }
        out
    }
}
