//! What the DVFS models learn, shared across the cluster: the controller gathers every
//! powered node's workload measurements over the link, keeps the newest copy of each
//! ([`wattson_engine::newest`], with its own saved copy, so nodes that sleep lose nothing),
//! writes the model table job_submit reads (`[engine] models_file`), and hands the merge back
//! to every node that answered. A tag learned on one node is then decided at submit and applied
//! from its first second on any other.

use std::path::Path;

use tracing::{info, warn};

use crate::nodes::Nodes;
use crate::power_status::write_whole;
use crate::slurm::{Node, Power};
use wattson_config::EngineConfig;
use wattson_engine::{Measurements, ModelTable, newest};
use wattson_protocol::{Reply, Request};

/// The most of a merge sent in one request (JSON bytes): well under the link's 1 MiB payload.
const CHUNK_BYTES: usize = 256 * 1024;

/// What one sync did.
#[derive(Debug, Default)]
pub struct Synced {
    /// Nodes that answered.
    pub answered: Vec<String>,
    /// Nodes that could not be asked, with why.
    pub failed: Vec<(String, String)>,
    /// Workloads in the merge (dropped ones included).
    pub workloads: usize,
    /// Workloads the nodes took, summed over nodes.
    pub taken: usize,
}

/// Reads the controller's saved merge; none yet is an empty one.
pub fn load(path: &Path) -> Result<Vec<Measurements>, String> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes).map_err(|e| format!("{}: {e}", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(format!("{}: {e}", path.display())),
    }
}

/// One sync over the powered-on nodes of `seen`; the merge is saved at `measurements_file`
/// and fitted, on each GPU type's knob, into `engine.models_file`. Fails only when the controller's own files cannot be read
/// or written; a node that cannot be asked is listed and asked again next time.
pub fn sync(
    link: &Nodes,
    seen: &[Node],
    measurements_file: &Path,
    engine: &EngineConfig,
) -> Result<Synced, String> {
    let models_file = &engine.models_file;
    let targets: Vec<&Node> = seen.iter().filter(|n| n.power == Power::On && n.gpus > 0).collect();
    let asks: Vec<(&str, Request)> = targets.iter().map(|n| (n.addr.as_str(), Request::Models {})).collect();
    let mut copies = load(measurements_file)?;
    let mut synced = Synced::default();
    let mut answered = Vec::new();
    for (node, answer) in targets.iter().zip(link.call_all(&asks)) {
        match answer {
            Ok(Ok(Reply::Models { models, .. })) => {
                copies.extend(models);
                answered.push(*node);
            }
            Ok(Ok(other)) => synced.failed.push((node.name.clone(), format!("unexpected answer {other:?}"))),
            Ok(Err(refusal)) => synced.failed.push((node.name.clone(), format!("wattsond: {refusal}"))),
            Err(why) => synced.failed.push((node.name.clone(), why)),
        }
    }
    let merged = newest(copies);
    synced.workloads = merged.len();
    let json = serde_json::to_vec(&merged).map_err(|e| e.to_string())?;
    write_whole(measurements_file, &json).map_err(|e| format!("{}: {e}", measurements_file.display()))?;
    let table = ModelTable::from_measurements(&merged, |gpu| engine.knob_for(gpu))
        .to_json()
        .map_err(|e| e.to_string())?;
    write_whole(models_file, table.as_bytes()).map_err(|e| format!("{}: {e}", models_file.display()))?;
    for chunk in chunks(&merged) {
        let asks: Vec<(&str, Request)> = answered
            .iter()
            .map(|n| (n.addr.as_str(), Request::MergeModels { models: chunk.to_vec() }))
            .collect();
        for (node, answer) in answered.iter().zip(link.call_all(&asks)) {
            match answer {
                Ok(Ok(Reply::ModelsMerged { taken, .. })) => synced.taken += taken,
                Ok(Ok(other)) => warn!(node = %node.name, ?other, "unexpected answer to a merge"),
                Ok(Err(refusal)) => warn!(node = %node.name, error = %refusal, "the node refused the merge"),
                Err(why) => warn!(node = %node.name, error = %why, "cannot hand the merge over; next sync"),
            }
        }
    }
    synced.answered = answered.iter().map(|n| n.name.clone()).collect();
    info!(
        answered = synced.answered.len(),
        failed = synced.failed.len(),
        workloads = synced.workloads,
        taken = synced.taken,
        "models synced"
    );
    Ok(synced)
}

/// `merged` cut into runs of at most [`CHUNK_BYTES`] of JSON each (a single larger workload
/// goes alone).
fn chunks(merged: &[Measurements]) -> Vec<&[Measurements]> {
    let mut out = Vec::new();
    let (mut start, mut bytes) = (0, 0);
    for (i, m) in merged.iter().enumerate() {
        let size = serde_json::to_vec(m).map_or(0, |v| v.len());
        if i > start && bytes + size > CHUNK_BYTES {
            out.push(&merged[start..i]);
            (start, bytes) = (i, 0);
        }
        bytes += size;
    }
    if start < merged.len() {
        out.push(&merged[start..]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattson_types::job::Progress;
    use wattson_types::model_owner::ModelOwner;

    fn workload(tag: &str, samples: usize) -> Measurements {
        Measurements {
            owner: ModelOwner::User(1000),
            gpu_type: "H100".into(),
            tag: tag.into(),
            progress: Progress::File,
            knob: wattson_engine::Knob::PowerLimit,
            samples: (0..samples)
                .map(|i| wattson_engine::Sample::new(700.0 - i as f64, 0.1, 400.0, 1.0))
                .collect(),
            settings: vec![700.0],
            updated_ns: 1,
        }
    }

    #[test]
    fn a_merge_goes_out_in_chunks_under_the_links_limit_and_whole() {
        let merged: Vec<Measurements> = (0..40).map(|i| workload(&format!("t{i}"), 200)).collect();
        let cut = chunks(&merged);
        assert!(cut.len() > 1, "40 large workloads in one request");
        assert_eq!(cut.iter().map(|c| c.len()).sum::<usize>(), 40);
        for c in &cut {
            assert!(serde_json::to_vec(c).unwrap().len() <= CHUNK_BYTES + 1024);
        }
        assert!(chunks(&[]).is_empty());
        assert_eq!(chunks(&merged[..1]).len(), 1);
    }

    #[test]
    fn no_saved_merge_is_an_empty_one_and_a_bad_one_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        assert!(load(&dir.path().join("none.json")).unwrap().is_empty());
        std::fs::write(dir.path().join("bad.json"), "{").unwrap();
        assert!(load(&dir.path().join("bad.json")).unwrap_err().contains("bad.json"));
    }
}
