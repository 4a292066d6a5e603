//! Whether a job shares its GPUs with other jobs (`gres/shard`, `gres/mps`). The node's prolog
//! does not see it (Slurm 22.05 sets `SLURM_SHARDS_ON_NODE` in the job's steps only), so
//! job_submit writes it from the job's requested TRES into the job's SPANK environment, which
//! the prolog does see ([`SHARES_GPUS_VAR`]).

pub use wattson_types::apportion::SHARES_GPUS_VAR;

/// The GRES that put a job on part of a GPU that other jobs may hold too.
const SHARING_GRES: [&str; 2] = ["shard", "mps"];

/// Whether a job's TRES list as Slurm keeps them (`gres:shard:2` on 22.05, `gres/shard:2`,
/// `gres/mps:a100:50` later; several separated by `,`; per node, per task or per job) ask for
/// part of a GPU.
pub fn from_tres(tres: &str) -> bool {
    tres.split(',').any(|item| {
        let item = item.trim();
        let rest = item.strip_prefix("gres:").or_else(|| item.strip_prefix("gres/")).unwrap_or(item);
        let name = rest.split(':').next().unwrap_or("");
        SHARING_GRES.contains(&name)
    })
}

/// The value job_submit gives [`SHARES_GPUS_VAR`] from the job's TRES lists (per node, per
/// task, per job; NULL ones `None`): `1` for a job on part of a GPU, empty otherwise (so that
/// a value the user set is overwritten).
pub fn spank_value(tres: &[Option<&str>]) -> &'static str {
    if tres.iter().flatten().any(|t| from_tres(t)) { "1" } else { "" }
}

/// Whether a job shares its GPUs, from its prolog's environment (`env` gives a variable's
/// value, empty included; `None` when unset). Without job_submit/wattson's variable the node
/// cannot tell: the job counts as sharing, so that no record is ever closed on a guess.
pub fn from_prolog_env(env: impl Fn(&str) -> Option<String>) -> bool {
    env(SHARES_GPUS_VAR).is_none() || wattson_types::apportion::shares_gpus(env)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_and_mps_share_a_gpu_and_whole_gpus_do_not() {
        assert!(from_tres("gres:shard:1"));
        assert!(from_tres("gres/shard:2"));
        assert!(from_tres("gres/gpu:1,gres/mps:a100:50"));
        assert!(!from_tres("gres:gpu:1"));
        assert!(!from_tres("gres/gpu:h100:2"));
        assert!(!from_tres("gres/shardx:1"));
        assert!(!from_tres(""));
        assert_eq!(spank_value(&[Some("gres:shard:1")]), "1");
        assert_eq!((spank_value(&[Some("gres:gpu:1")]), spank_value(&[None])), ("", ""));
        // Shards asked per task (24.05 and later: `--tres-per-task`, or job_submit's rewrite of a
        // job of several GPUs) put the job on part of each GPU too.
        assert_eq!(spank_value(&[None, Some("cpu=4,gres/shard:2"), None]), "1");
        assert_eq!(spank_value(&[Some("gres/gpu:2"), Some("cpu=4"), None]), "");
    }

    #[test]
    fn the_prolog_knows_whole_gpus_only_from_job_submit() {
        let env = |value: Option<&'static str>| {
            move |name: &str| (name == SHARES_GPUS_VAR).then_some(value).flatten().map(str::to_string)
        };
        assert!(from_prolog_env(env(Some("1"))));
        assert!(!from_prolog_env(env(Some(""))), "job_submit said: whole GPUs");
        assert!(from_prolog_env(env(None)), "no job_submit/wattson: not known, kept open");
    }
}
