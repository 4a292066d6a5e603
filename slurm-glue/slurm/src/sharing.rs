//! Whether a job shares its GPUs with other jobs (`gres/shard`, `gres/mps`). The node's prolog
//! does not see it (Slurm 22.05 sets `SLURM_SHARDS_ON_NODE` in the job's steps only), so
//! job_submit writes it from the job's requested TRES into the job's SPANK environment, which
//! the prolog does see ([`SHARES_GPUS_VAR`]).

pub use wattson_types::share::SHARES_GPUS_VAR;

/// The GRES that put a job on part of a GPU that other jobs may hold too.
const SHARING_GRES: [&str; 2] = ["shard", "mps"];

/// Whether a job's per-node TRES as Slurm keeps them (`gres:shard:2` on 22.05,
/// `gres/shard:2`, `gres/mps:a100:50` later; several separated by `,`) ask for part of a GPU.
pub fn from_tres_per_node(tres: &str) -> bool {
    tres.split(',').any(|item| {
        let item = item.trim();
        let rest = item.strip_prefix("gres:").or_else(|| item.strip_prefix("gres/")).unwrap_or(item);
        let name = rest.split(':').next().unwrap_or("");
        SHARING_GRES.contains(&name)
    })
}

/// The value job_submit gives [`SHARES_GPUS_VAR`]: `1` for a job on part
/// of a GPU, empty otherwise (so that a value the user set is overwritten).
pub fn spank_value(tres_per_node: Option<&str>) -> &'static str {
    if tres_per_node.is_some_and(from_tres_per_node) { "1" } else { "" }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_and_mps_share_a_gpu_and_whole_gpus_do_not() {
        assert!(from_tres_per_node("gres:shard:1"));
        assert!(from_tres_per_node("gres/shard:2"));
        assert!(from_tres_per_node("gres/gpu:1,gres/mps:a100:50"));
        assert!(!from_tres_per_node("gres:gpu:1"));
        assert!(!from_tres_per_node("gres/gpu:h100:2"));
        assert!(!from_tres_per_node("gres/shardx:1"));
        assert!(!from_tres_per_node(""));
        assert_eq!(spank_value(Some("gres:shard:1")), "1");
        assert_eq!((spank_value(Some("gres:gpu:1")), spank_value(None)), ("", ""));
    }
}
