//! Enacting a job's GPU-sharing opt-in at submission: an opted-in job that asks one whole GPU
//! on one node is rewritten to ask half a GPU's shards (`gres/shard`), so that two such jobs
//! fit on one GPU. Where the site allows jobs of several GPUs (`[policy] share_gpus`) and
//! Slurm offers it (24.05 and later), a job of N GPUs and N tasks on one node asks half a GPU's
//! shards per task, one task per GPU (`--gres-flags=one-task-per-sharing`), so that two such
//! jobs share all N GPUs. Anything else is left as it is, with the reason ([`Kept`]). Pure:
//! job_submit reads the request from the job description and writes the rewrite back.

/// What a job asks of GPUs, as job_submit reads its description (`None`: the field is NULL;
/// counts as Slurm keeps them, `NO_VAL` or 0 when not given).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GpuRequest<'a> {
    /// `tres_per_node` (`--gres`, `--gpus-per-node`): `gres:gpu:1` on 22.05, `gres/gpu:1` later.
    pub tres_per_node: Option<&'a str>,
    /// `tres_per_job` (`--gpus`).
    pub tres_per_job: Option<&'a str>,
    /// `tres_per_task` (`--tres-per-task`, and `cpu=N` for `-c N` on later releases).
    pub tres_per_task: Option<&'a str>,
    /// The other fields that may name GPUs (`tres_per_socket`, `cpus_per_tres`,
    /// `mem_per_tres`, `tres_bind`, `tres_freq`): a job naming GPUs in any of them, or in
    /// `tres_per_task`, is left alone, since they would no longer match what it asks.
    pub others: Vec<Option<&'a str>>,
    /// `min_nodes` (`-N`).
    pub min_nodes: u32,
    /// `max_nodes` (`-N a-b`).
    pub max_nodes: u32,
    /// `num_tasks` (`-n`).
    pub num_tasks: u32,
}

/// The rewritten request.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardRewrite {
    /// The job's new `tres_per_node` (empty: none).
    pub tres_per_node: String,
    /// Whether `tres_per_job` is cleared (the GPUs were asked with `--gpus`).
    pub clear_tres_per_job: bool,
    /// Shards asked instead of each GPU.
    pub shards: u32,
    /// The GPUs whose halves the job asks (1, or the N of a job of N GPUs).
    pub gpus: u32,
    /// For a job of several GPUs, its new `tres_per_task` (the shards, per task), to be asked
    /// with one task per sharing GPU (`GRES_ONE_TASK_PER_SHARING`).
    pub tres_per_task: Option<String>,
}

/// Why an opted-in job keeps its request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, strum::Display)]
pub enum Kept {
    /// The site rewrites nothing (`[policy] shards_per_gpu = 0`).
    #[strum(to_string = "[policy] shards_per_gpu is 0")]
    SiteRewritesNothing,
    /// The job asks no GPU.
    #[strum(to_string = "it asks no GPU")]
    NoGpu,
    /// The job asks shards or MPS already.
    #[strum(to_string = "it asks shards or MPS already")]
    SharesAlready,
    /// The job asks more than one GPU, or GPUs in several ways.
    #[strum(to_string = "it asks more than one whole GPU")]
    NotOneGpu,
    /// The job asks more GPUs than the site lets share (`[policy] share_gpus`).
    #[strum(to_string = "it asks more GPUs than [policy] share_gpus")]
    MoreThanSiteShares,
    /// The job asks several GPUs and this Slurm cannot give it half of each (before 24.05).
    #[strum(to_string = "sharing several GPUs needs Slurm 24.05 or later")]
    ReleaseCannotShareSeveral,
    /// The job asks N > 1 GPUs but not N tasks on one node (`-N 1 -n N`).
    #[strum(to_string = "it asks several GPUs but not one task per GPU on one node (-N 1 -n N)")]
    NotOneTaskPerGpu,
    /// The job may run on several nodes.
    #[strum(to_string = "it may span several nodes")]
    SeveralNodes,
    /// GPUs are named per socket or task, or with CPUs, memory, binding or clocks per GPU.
    #[strum(
        to_string = "it names GPUs per socket, per task, or with per-GPU CPUs, memory, binding or clocks"
    )]
    GpusNamedElsewhere,
    /// A request wattson does not read.
    #[strum(to_string = "its GPU request is not one wattson reads")]
    Unreadable,
}

/// Slurm's "not given" for a 32-bit count.
const NO_VAL: u32 = 0xffff_fffe;

/// One `gres` item: `gres:gpu:h100:1` as its prefix (`gres:`, `gres/` or none), name and count.
struct Item<'a> {
    prefix: &'a str,
    name: &'a str,
    count: Option<u64>,
}

fn item(text: &str) -> Item<'_> {
    let text = text.trim();
    let (prefix, rest) = ["gres:", "gres/"]
        .iter()
        .find_map(|p| text.strip_prefix(p).map(|rest| (&text[..p.len()], rest)))
        .unwrap_or(("", text));
    let mut parts = rest.split(':');
    let name = parts.next().unwrap_or("");
    // `gpu`, `gpu:2`, `gpu:h100`, `gpu:h100:2`: a count is the last part when it is a number.
    let tail: Vec<&str> = parts.collect();
    let count = match tail.last().map(|last| last.parse::<u64>()) {
        None => Some(1),
        Some(Ok(n)) => Some(n),
        // `gpu:h100`: a type and no count.
        Some(Err(_)) if tail.len() == 1 => Some(1),
        Some(Err(_)) => None,
    };
    Item { prefix, name, count }
}

fn items(tres: Option<&str>) -> Vec<&str> {
    tres.map(|t| t.split(',').filter(|s| !s.trim().is_empty()).collect()).unwrap_or_default()
}

fn names_gpus(tres: &str) -> bool {
    items(Some(tres)).iter().any(|i| matches!(item(i).name, "gpu" | "shard" | "mps"))
}

/// What the site and this Slurm let an opted-in job ask instead of its whole GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShareRule {
    /// Shards asked instead of each GPU (half a GPU's), `None`: the site rewrites nothing.
    pub shards: Option<u32>,
    /// The most GPUs of a job rewritten (`[policy] share_gpus`).
    pub most_gpus: u32,
    /// Whether this Slurm gives each task its shards on a GPU of its own (24.05 and later).
    pub one_task_per_sharing: bool,
}

/// The request an opted-in job is given under `rule`: half a GPU's shards instead of each of
/// its whole GPUs, or why it keeps what it asked.
pub fn rewrite(request: &GpuRequest, rule: ShareRule) -> Result<ShardRewrite, Kept> {
    let Some(shards) = rule.shards else { return Err(Kept::SiteRewritesNothing) };
    let per_node = items(request.tres_per_node);
    let per_job = items(request.tres_per_job);
    let all = || per_node.iter().chain(&per_job).map(|i| item(i));
    if all().any(|i| matches!(i.name, "shard" | "mps")) {
        return Err(Kept::SharesAlready);
    }
    let gpus: Vec<Item> = all().filter(|i| i.name == "gpu").collect();
    let count = match gpus.as_slice() {
        [] => return Err(Kept::NoGpu),
        [one] => one.count.ok_or(Kept::Unreadable)?,
        _ => return Err(Kept::NotOneGpu),
    };
    if count == 0 {
        return Err(Kept::NoGpu);
    }
    if count > u64::from(rule.most_gpus) {
        return Err(if rule.most_gpus == 1 { Kept::NotOneGpu } else { Kept::MoreThanSiteShares });
    }
    let named_elsewhere =
        request.others.iter().chain([&request.tres_per_task]).flatten().any(|t| names_gpus(t));
    if named_elsewhere {
        return Err(Kept::GpusNamedElsewhere);
    }
    let unset = |n: u32| n == 0 || n == NO_VAL;
    let count = count as u32;
    if count > 1 {
        if !rule.one_task_per_sharing {
            return Err(Kept::ReleaseCannotShareSeveral);
        }
        if request.max_nodes != 1 || request.num_tasks != count {
            return Err(Kept::NotOneTaskPerGpu);
        }
    }
    let one_node = request.max_nodes == 1
        || (unset(request.max_nodes)
            && (unset(request.min_nodes) || request.min_nodes == 1)
            && (unset(request.num_tasks) || request.num_tasks == 1));
    if !one_node {
        return Err(Kept::SeveralNodes);
    }
    // The GPUs asked per job (`--gpus=N`) must be all `tres_per_job` holds, since it is cleared.
    let from_job = per_job.iter().any(|i| item(i).name == "gpu");
    if from_job && per_job.len() != 1 {
        return Err(Kept::NotOneGpu);
    }
    let prefix = gpus[0].prefix;
    let mut kept: Vec<String> =
        per_node.iter().filter(|i| item(i).name != "gpu").map(|i| i.trim().to_string()).collect();
    // Shards carry no GPU type in gres.conf as Slurm documents them: the type is not kept.
    let tres_per_task = if count == 1 {
        kept.push(format!("{prefix}shard:{shards}"));
        None
    } else {
        let mut own: Vec<&str> = items(request.tres_per_task);
        let ask = format!("gres/shard:{shards}");
        own.push(&ask);
        Some(own.join(","))
    };
    Ok(ShardRewrite {
        tres_per_node: kept.join(","),
        clear_tres_per_job: from_job,
        shards,
        gpus: count,
        tres_per_task,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn per_node(tres: &str) -> GpuRequest<'_> {
        GpuRequest {
            tres_per_node: Some(tres),
            min_nodes: NO_VAL,
            max_nodes: NO_VAL,
            num_tasks: NO_VAL,
            ..Default::default()
        }
    }

    /// Half of 2·`shards` shards, for jobs of one GPU, on a Slurm before 24.05.
    fn one(shards: u32) -> ShareRule {
        ShareRule { shards: Some(shards), most_gpus: 1, one_task_per_sharing: false }
    }

    fn rewritten(tres: &str) -> String {
        rewrite(&per_node(tres), one(2)).unwrap().tres_per_node
    }

    #[test]
    fn one_whole_gpu_becomes_half_a_gpus_shards_in_the_same_spelling() {
        assert_eq!(rewritten("gres:gpu:1"), "gres:shard:2");
        assert_eq!(rewritten("gres/gpu:1"), "gres/shard:2");
        assert_eq!(rewritten("gres/gpu:h100:1"), "gres/shard:2", "the type is not kept");
        assert_eq!(rewritten("gres:gpu"), "gres:shard:2", "no count: one");
        assert_eq!(rewritten("gres:gpu:h100"), "gres:shard:2");
        assert_eq!(rewritten("gres/nvme:1,gres/gpu:1"), "gres/nvme:1,gres/shard:2", "other GRES kept");
        let r = rewrite(&per_node("gres:gpu:1"), one(3)).unwrap();
        assert_eq!((r.shards, r.clear_tres_per_job), (3, false));
    }

    #[test]
    fn gpus_one_moves_to_shards_per_node() {
        let request = GpuRequest { tres_per_node: None, tres_per_job: Some("gres/gpu:1"), ..per_node("") };
        let r = rewrite(&request, one(4)).unwrap();
        assert_eq!((r.tres_per_node.as_str(), r.clear_tres_per_job), ("gres/shard:4", true));
        let with_more = GpuRequest { tres_per_job: Some("gres/gpu:1,license/x:1"), ..request };
        assert_eq!(rewrite(&with_more, one(4)), Err(Kept::NotOneGpu));
    }

    #[test]
    fn anything_but_one_whole_gpu_on_one_node_is_kept_and_says_why() {
        let kept = |r: GpuRequest| rewrite(&r, one(2)).unwrap_err();
        assert_eq!(
            rewrite(&per_node("gres:gpu:1"), ShareRule { shards: None, ..one(2) }),
            Err(Kept::SiteRewritesNothing)
        );
        assert_eq!(kept(per_node("gres:gpu:2")), Kept::NotOneGpu);
        assert_eq!(kept(per_node("gres/gpu:a100:1,gres/gpu:h100:1")), Kept::NotOneGpu);
        assert_eq!(kept(per_node("gres/shard:1")), Kept::SharesAlready);
        assert_eq!(kept(per_node("gres/gpu:1,gres/mps:50")), Kept::SharesAlready);
        assert_eq!(kept(per_node("gres/nvme:1")), Kept::NoGpu);
        assert_eq!(kept(per_node("gres/gpu:0")), Kept::NoGpu);
        assert_eq!(kept(GpuRequest { tres_per_node: None, ..per_node("") }), Kept::NoGpu);
        assert_eq!(kept(per_node("gres/gpu:x:y")), Kept::Unreadable);
        let both = GpuRequest { tres_per_job: Some("gres/gpu:1"), ..per_node("gres/gpu:1") };
        assert_eq!(kept(both), Kept::NotOneGpu);
        for (min, max, tasks) in [(2, NO_VAL, NO_VAL), (1, 2, NO_VAL), (NO_VAL, NO_VAL, 4)] {
            let r = GpuRequest { min_nodes: min, max_nodes: max, num_tasks: tasks, ..per_node("gres:gpu:1") };
            assert_eq!(kept(r), Kept::SeveralNodes, "{min} {max} {tasks}");
        }
        let pinned = GpuRequest { max_nodes: 1, num_tasks: 4, ..per_node("gres:gpu:1") };
        assert!(rewrite(&pinned, one(2)).is_ok(), "-N1 with four tasks is one node");
        let cpus = GpuRequest { others: vec![None, Some("gres:gpu:4")], ..per_node("gres:gpu:1") };
        assert_eq!(kept(cpus), Kept::GpusNamedElsewhere);
        let freq = GpuRequest { others: vec![Some("cpu=high")], ..per_node("gres:gpu:1") };
        assert!(rewrite(&freq, one(2)).is_ok(), "a CPU frequency names no GPU");
    }

    #[test]
    fn a_job_of_n_gpus_and_n_tasks_on_one_node_asks_half_of_each_gpu_per_task() {
        let rule = ShareRule { shards: Some(2), most_gpus: 4, one_task_per_sharing: true };
        let job = |tres: &'static str, tasks| GpuRequest { max_nodes: 1, num_tasks: tasks, ..per_node(tres) };
        let r = rewrite(&job("gres/gpu:2", 2), rule).unwrap();
        assert_eq!(r.tres_per_node, "", "no GPU per node is left");
        assert_eq!((r.tres_per_task.as_deref(), r.gpus, r.shards), (Some("gres/shard:2"), 2, 2));
        let typed = rewrite(&job("gres/nvme:1,gres/gpu:h100:4", 4), rule).unwrap();
        assert_eq!((typed.tres_per_node.as_str(), typed.gpus), ("gres/nvme:1", 4), "other GRES kept");
        let cpus = GpuRequest { tres_per_task: Some("cpu=4"), ..job("gres/gpu:2", 2) };
        assert_eq!(rewrite(&cpus, rule).unwrap().tres_per_task.as_deref(), Some("cpu=4,gres/shard:2"));
        let by_job = GpuRequest { tres_per_node: None, tres_per_job: Some("gres/gpu:2"), ..job("", 2) };
        let r = rewrite(&by_job, rule).unwrap();
        assert!(r.clear_tres_per_job && r.tres_per_node.is_empty() && r.gpus == 2);
        // One GPU is rewritten as before, per node.
        let r = rewrite(&job("gres/gpu:1", 1), rule).unwrap();
        assert_eq!((r.tres_per_node.as_str(), r.tres_per_task, r.gpus), ("gres/shard:2", None, 1));
        // Kept, and why: more GPUs than the site shares; a Slurm before 24.05; not one task per
        // GPU, or not pinned to one node; GPUs named per task.
        assert_eq!(rewrite(&job("gres/gpu:8", 8), rule), Err(Kept::MoreThanSiteShares));
        assert_eq!(rewrite(&job("gres/gpu:2", 2), one(2)), Err(Kept::NotOneGpu));
        let old = ShareRule { one_task_per_sharing: false, ..rule };
        assert_eq!(rewrite(&job("gres/gpu:2", 2), old), Err(Kept::ReleaseCannotShareSeveral));
        for tasks in [1, 4, NO_VAL] {
            assert_eq!(
                rewrite(&job("gres/gpu:2", tasks), rule),
                Err(Kept::NotOneTaskPerGpu),
                "{tasks} tasks"
            );
        }
        let loose = GpuRequest { max_nodes: NO_VAL, ..job("gres/gpu:2", 2) };
        assert_eq!(rewrite(&loose, rule), Err(Kept::NotOneTaskPerGpu));
        let named = GpuRequest { tres_per_task: Some("gres/gpu:1"), ..job("gres/gpu:2", 2) };
        assert_eq!(rewrite(&named, rule), Err(Kept::GpusNamedElsewhere));
    }
}
