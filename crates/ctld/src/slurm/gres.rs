//! Slurm's GRES strings as its commands print them: a node's `Gres` and `GresUsed`, a job's
//! `%b` request and its detail `GRES=` (`scontrol -d`). Pure parsing, for [`super`].

/// The comma-separated entries of `list`, commas inside parentheses kept
/// (`gpu:a100:2(IDX:0-1,3),gpu:h100:1(IDX:0)`).
pub(crate) fn entries(list: &str) -> Vec<&str> {
    let (mut out, mut depth, mut from) = (Vec::new(), 0u32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                out.push(&list[from..i]);
                from = i + 1;
            }
            _ => {}
        }
    }
    out.push(&list[from..]);
    out
}

/// The GPUs holding shards or MPS shares of jobs in a `GresUsed=` value, by entry, which no
/// whole-GPU job can have: `shard:h100:2(IDX:0-1)` (22.05: GPUs 0 and 1 of that type),
/// `shard:h100:2(2/4,0/4)` (23.02 on: shards used of each GPU's, GPU 0).
fn shard_entries(used: &str) -> Vec<Vec<u32>> {
    entries(used)
        .into_iter()
        .filter(|e| e.starts_with("shard:") || e.starts_with("mps:"))
        .filter_map(|e| Some(held_gpus(e.split_once('(')?.1.trim_end_matches(')'))))
        .collect()
}

/// The GPUs a GRES entry's parenthesis names as held: an index list (`IDX:0-1,3`; `IDX:N/A`:
/// none) or each GPU's used and total count (`2/4,0/4`: GPU 0).
pub(crate) fn held_gpus(paren: &str) -> Vec<u32> {
    match paren.strip_prefix("IDX:") {
        Some(list) => index_list(list),
        None => (0u32..)
            .zip(paren.split(','))
            .filter(|(_, counts)| {
                counts.split_once('/').and_then(|(used, _)| used.parse::<u64>().ok()).unwrap_or(0) > 0
            })
            .map(|(i, _)| i)
            .collect(),
    }
}

/// GPUs a `GresUsed=` value allocates, whole or in shares.
pub(crate) fn gres_used_gpus(used: &str) -> u32 {
    gres_gpus(used) + shard_entries(used).iter().map(|e| e.len() as u32).sum::<u32>()
}

/// The GPU indices of a `GresUsed=` value that hold shares, sorted (as Slurm numbers them per
/// type; a job's detail `GRES=shard:2(IDX:0)` names the same).
pub(crate) fn shard_gpus(used: &str) -> Vec<u32> {
    let held: std::collections::BTreeSet<u32> = shard_entries(used).into_iter().flatten().collect();
    held.into_iter().collect()
}

/// The indices of an `IDX:` list (`0-1,3`); `N/A` and anything unreadable: none.
fn index_list(list: &str) -> Vec<u32> {
    list.split(',')
        .filter_map(|range| match range.split_once('-') {
            Some((a, b)) => Some((a.parse::<u32>().ok()?..=b.parse::<u32>().ok()?).collect::<Vec<_>>()),
            None => range.parse().ok().map(|i| vec![i]),
        })
        .flatten()
        .collect()
}

/// GPUs of a `Gres=` or `GresUsed=` value: `gpu:4`, `gpu:h100:4(S:0-1)`,
/// `gpu:a100:2(IDX:0-1),gpu:h100:0(IDX:N/A)`.
pub(crate) fn gres_gpus(gres: &str) -> u32 {
    entries(gres)
        .into_iter()
        .filter(|e| e.starts_with("gpu:"))
        .filter_map(|e| e.split('(').next()?.rsplit(':').next()?.parse::<u32>().ok())
        .sum()
}

/// The GPU type of the first typed GPU entry of a `Gres=` value (`gpu:h100:4(S:0-1)`: `h100`).
pub(crate) fn gres_type(gres: &str) -> Option<String> {
    entries(gres).into_iter().find_map(|e| {
        let fields: Vec<&str> = e.split('(').next()?.split(':').collect();
        match fields[..] {
            ["gpu", ty, _] => Some(ty.to_string()),
            _ => None,
        }
    })
}

/// GPUs per node of a `%b` value (`gres:gpu:2`, `gres/gpu:h100:2`, `N/A`); a request for
/// shards or MPS (`gres:shard:2`) counts one.
pub(crate) fn gpus_per_node(tres: &str) -> u32 {
    let count = |kind: &str| -> u32 {
        tres.split(',')
            .filter(|e| e.contains(kind))
            .filter_map(|e| e.rsplit(':').next()?.parse::<u32>().ok())
            .sum()
    };
    // Shards or MPS share of a GPU: part of one GPU per node.
    match count("gpu") {
        0 if count("shard") + count("mps") > 0 => 1,
        gpus => gpus,
    }
}
