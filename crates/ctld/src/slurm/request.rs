//! What a pending job asked for, as `scontrol -o show job` shows it (the same text in every
//! release): its owner, name, account, wattson's note in its AdminComment, its per-node GPU
//! request and the nodes it excludes. The controller reads it only to place jobs by GPU type.

use super::record;

/// One job of `scontrol -o show job`.
#[derive(Debug, Clone, PartialEq)]
pub struct Request {
    /// Job id.
    pub id: u32,
    /// Its owner's uid.
    pub uid: u32,
    /// Its owner's name (`UserId=alice(1000)`: `alice`).
    pub user: String,
    /// Job name.
    pub name: String,
    /// Slurm account, if any.
    pub account: Option<String>,
    /// What job_submit recorded (`wattson:policy=...,slowdown=10%,tag=bert,...`), if anything.
    pub admin_comment: String,
    /// GPUs per node of an untyped request (`gres:gpu:2`, `gres/gpu:2`); `None` when the job
    /// names a GPU type, asks for GPUs otherwise (`--gpus`), or for none.
    pub untyped_gpus: Option<u32>,
    /// The nodes it excludes (`ExcNodeList`, as Slurm prints it: a host list or empty).
    pub excluded: String,
    /// The nodes it must run on (`ReqNodeList`, a host list as Slurm shows it; empty: none).
    pub required: String,
    /// The GPUs its shards are on, for a running job on shards (`scontrol -d`'s
    /// `GRES=shard:2(IDX:0)` or `GRES=shard:4(2/4,2/4)`); empty otherwise.
    pub shard_gpus: Vec<u32>,
}

impl Request {
    /// The tag its models learn under: `--energy-tag` (recorded by job_submit), else
    /// `user:jobname`, as the nodes key them.
    pub fn tag(&self) -> String {
        self.note("tag").map_or_else(|| format!("{}:{}", self.user, self.name), str::to_string)
    }

    /// Its slowdown bound (fraction) as job_submit recorded it (`slowdown=10%`); 0 without.
    pub fn bound(&self) -> f64 {
        self.note("slowdown")
            .and_then(|v| v.strip_suffix('%')?.parse::<f64>().ok())
            .filter(|b| b.is_finite() && *b >= 0.0)
            .map_or(0.0, |b| b / 100.0)
    }

    /// Whether job_submit gave it shards for its opt-in to GPU sharing (`shards=N`).
    pub fn shares(&self) -> bool {
        self.note("shards").is_some()
    }

    /// Whether it names nodes it must run on (`ReqNodeList`).
    pub fn names_nodes(&self) -> bool {
        !self.required.is_empty()
    }

    /// GPUs it shares, each with one partner, as job_submit recorded them (`shared_gpus=2`;
    /// 1 without).
    pub fn shared_gpus(&self) -> u32 {
        self.note("shared_gpus").and_then(|v| v.parse().ok()).filter(|&n| n > 0).unwrap_or(1)
    }

    /// Whether its AdminComment has the entry `mark` (`held=share`).
    pub fn marked(&self, mark: &str) -> bool {
        self.admin_comment.split(',').any(|e| e.trim() == mark)
    }

    /// The value of `key=` in wattson's AdminComment note.
    fn note(&self, key: &str) -> Option<&str> {
        let note = self.admin_comment.strip_prefix("wattson:")?;
        note.split(',').find_map(|kv| kv.strip_prefix(key)?.strip_prefix('='))
    }
}

/// GPUs per node of a `TresPerNode` value that asks for untyped GPUs only.
fn untyped(tres: &str) -> Option<u32> {
    let mut gpus = None;
    for entry in tres.split(',').filter(|e| !e.is_empty()) {
        let rest = entry.strip_prefix("gres:").or_else(|| entry.strip_prefix("gres/"))?;
        let Some(n) = rest.strip_prefix("gpu:") else { continue };
        gpus = Some(n.parse::<u32>().ok()?);
    }
    gpus
}

/// The AdminComment `comment` with its entry `mark` replaced by `by` (a hold's mark by its
/// release's).
pub fn replace_mark(comment: &str, mark: &str, by: &str) -> String {
    comment.split(',').map(|e| if e.trim() == mark { by } else { e }).collect::<Vec<_>>().join(",")
}

/// The GPUs of a detail `GRES=` value on shards: `shard:2(IDX:0)`, `shard:h100:2(IDX:1)`
/// (22.05), `shard:4(2/4,2/4)` (23.02 on: the GPUs whose shards it holds); none for GPUs.
fn shard_gpus(gres: &str) -> Vec<u32> {
    let paren = gres.strip_prefix("shard:").and_then(|s| s.split_once('(')?.1.strip_suffix(')'));
    paren.map_or_else(Vec::new, super::gres::held_gpus)
}

/// Parses `scontrol -o show job`, one job per line; lines without a job id are skipped.
pub fn parse_requests(text: &str) -> Vec<Request> {
    text.lines()
        .filter_map(|line| {
            let f = record(line);
            let id = f.get("JobId")?.parse().ok()?;
            let owner = f.get("UserId").map_or("", String::as_str);
            let (user, uid) = owner.split_once('(')?;
            let present = |k: &str| f.get(k).filter(|v| !matches!(v.as_str(), "" | "(null)")).cloned();
            Some(Request {
                id,
                uid: uid.trim_end_matches(')').parse().ok()?,
                user: user.to_string(),
                name: f.get("JobName").cloned().unwrap_or_default(),
                account: present("Account"),
                admin_comment: present("AdminComment").unwrap_or_default(),
                untyped_gpus: present("TresPerNode").and_then(|t| untyped(&t)).filter(|&n| n > 0),
                excluded: present("ExcNodeList").unwrap_or_default(),
                required: present("ReqNodeList").unwrap_or_default(),
                shard_gpus: f.get("GRES").map_or_else(Vec::new, |g| shard_gpus(g)),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SHOW: &str = "JobId=3 JobName=train UserId=alice(1000) GroupId=alice(1000) Account=physics \
        JobState=PENDING Reason=Resources AdminComment=wattson:policy=min-energy,slowdown=10%,tag=bert,model=none \
        ReqNodeList=(null) ExcNodeList=(null) NodeList= TresPerNode=gres:gpu:2\n\
        JobId=4 JobName=x UserId=bob(1001) Account=(null) ReqNodeList=n1 ExcNodeList=n[2-3] TresPerNode=gres/gpu:h100:1\n\
        JobId=5 JobName=y UserId=bob(1001) TresPerNode=gres/gpu:1,gres/shard:2\n\
        JobId=6 JobName=z UserId=bob(1001)\n\
        JobId=7 JobName=s UserId=bob(1001) JOB_GRES=shard:2   Nodes=n1 CPU_IDs=1 Mem=0 GRES=shard:2(IDX:1) \
        AdminComment=wattson:policy=balanced,share=yes,shards=2,held=share TresPerNode=gres:shard:2\n";

    #[test]
    fn a_pending_jobs_request_is_read_with_wattsons_note() {
        let r = parse_requests(SHOW);
        assert_eq!(r.iter().map(|r| r.id).collect::<Vec<_>>(), [3, 4, 5, 6, 7]);
        assert_eq!((r[0].uid, r[0].user.as_str(), r[0].account.as_deref()), (1000, "alice", Some("physics")));
        assert_eq!((r[0].tag(), r[0].bound()), ("bert".to_string(), 0.1));
        assert_eq!((r[0].untyped_gpus, r[0].excluded.as_str(), r[0].names_nodes()), (Some(2), "", false));
        // A typed request is never a candidate; names and exclusions are kept.
        assert_eq!((r[1].untyped_gpus, r[1].excluded.as_str(), r[1].names_nodes()), (None, "n[2-3]", true));
        assert_eq!((r[1].tag(), r[1].bound(), r[1].account.as_deref()), ("bob:x".to_string(), 0.0, None));
        assert_eq!(r[2].untyped_gpus, Some(1));
        assert_eq!(r[3].untyped_gpus, None);
        // A running opted-in job on shards (scontrol -d, 22.05's lab): its GPU and marks.
        assert_eq!(
            (r[4].shard_gpus.as_slice(), r[4].shares(), r[4].marked("held=share")),
            (&[1][..], true, true)
        );
        assert_eq!(
            (r[0].shard_gpus.as_slice(), r[0].shares(), r[4].marked("held=budget")),
            (&[][..], false, false)
        );
        assert_eq!((r[4].shared_gpus(), r[0].shared_gpus()), (1, 1));
        assert_eq!(shard_gpus("shard:h100:2(IDX:0)"), [0]);
        assert!(shard_gpus("gpu:1(IDX:0)").is_empty(), "a whole GPU is no share");
        assert_eq!(shard_gpus("shard:2(0/4,2/4)"), [1], "24.11's form: used/total per GPU");
        assert!(shard_gpus("shard:2(0/4,0/4)").is_empty());
        // A job of two GPUs sharing both (24.05 on, one task per sharing).
        assert_eq!(shard_gpus("shard:4(0/4,2/4,2/4,0/4)"), [1, 2]);
        let two = parse_requests(
            "JobId=8 UserId=bob(1001) GRES=shard:4(2/4,2/4) \
             AdminComment=wattson:policy=balanced,share=yes,shards=2,shared_gpus=2\n",
        );
        assert_eq!((two[0].shard_gpus.as_slice(), two[0].shared_gpus()), (&[0, 1][..], 2));
    }
}
