//! `wattson acct` across the cluster, from any host with Slurm's client: the jobs `sacct` shows
//! the caller (Slurm applies the site's `PrivateData`; nothing here widens it), each with the
//! records of its wattson summary (`AdminComment`). A GPU job's nodes that gave no summary
//! (not yet written, or their wattsond did not answer) show as one row with Slurm's own energy
//! figure for them, marked as such.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Duration;

use chrono::TimeZone;

use crate::report::{Source, Sources};
use wattson_protocol::AcctQuery;
use wattson_sacct::AccountingError;
use wattson_sacct::comment;
use wattson_types::job::{Hints, JobKey, JobRecord, JobState};

/// Records and where each one's figures come from, by (node, job or step id).
#[derive(Debug, Default)]
pub struct Cluster {
    /// The records, jobs in sacct's order.
    pub records: Vec<JobRecord>,
    /// Where each record's figures come from.
    pub sources: Sources,
    /// What Slurm says of each job beyond the records.
    pub jobs: BTreeMap<u32, SlurmJob>,
}

/// What Slurm's accounting says of a job that wattson's records do not.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct SlurmJob {
    /// Its user's name.
    pub user: String,
    /// Its account.
    pub account: String,
    /// Its partition.
    pub partition: String,
    /// Its GPUs, where the site tracks `gres/gpu` in `AccountingStorageTRES`.
    pub gpus: Option<u32>,
}

/// The fields asked of `sacct`, in order (the comments, which may hold a summary, last:
/// `AdminComment` may hold `|`).
const FIELDS: &str = "JobIDRaw,UID,User,JobName,NodeList,Start,End,ConsumedEnergyRaw,AllocTRES,Account,Partition,\
                      AdminComment,SystemComment";

/// One job as `sacct -X` shows it (times in Unix s).
#[derive(Debug, PartialEq)]
struct Row {
    job: u32,
    uid: u32,
    user: String,
    name: String,
    nodes: String,
    start: i64,
    end: Option<i64>,
    energy_j: Option<f64>,
    slurm: SlurmJob,
    comment: String,
}

/// The cluster's records matching `filter`, as the caller may see them.
pub fn fetch(filter: &AcctQuery, timeout: Duration) -> Result<Cluster, AccountingError> {
    let mut sacct = Command::new("sacct");
    sacct.env("SLURM_TIME_FORMAT", "%s").args(["-X", "-n", "-P", "-o", FIELDS]);
    let mut jobs: Vec<u32> = filter.jobs.iter().map(|k| k.job_id).collect();
    jobs.sort_unstable();
    jobs.dedup();
    if !jobs.is_empty() {
        sacct.arg("-j").arg(jobs.iter().map(u32::to_string).collect::<Vec<_>>().join(","));
    }
    match filter.uid {
        Some(uid) => sacct.arg("-u").arg(uid.to_string()),
        None => sacct.arg("-a"),
    };
    let local = |ns: i64| chrono::Local.timestamp_nanos(ns).format("%Y-%m-%dT%H:%M:%S").to_string();
    if let Some(ns) = filter.start_ns {
        sacct.arg("-S").arg(local(ns));
    }
    if let Some(ns) = filter.end_ns {
        sacct.arg("-E").arg(local(ns));
    }
    let text = wattson_sacct::sacct_run(&mut sacct, timeout)?;
    let mut cluster = records_of(text.lines().filter_map(parse_row));
    // A step asked for by id shows only that step, as the node's own query does.
    cluster.records.retain(|r| {
        filter.jobs.is_empty()
            || filter
                .jobs
                .iter()
                .any(|k| k.job_id == r.key.job_id && (k.step.is_empty() || k.step == r.key.step))
    });
    Ok(cluster)
}

fn parse_row(line: &str) -> Option<Row> {
    let mut f = line.splitn(12, '|');
    let mut next = || f.next().map(str::trim);
    let job = next()?.parse().ok()?;
    let uid = next()?.parse().ok()?;
    let (user, name, nodes) = (next()?.to_string(), next()?.to_string(), next()?.to_string());
    let start = next()?.parse().ok()?;
    let end = next()?.parse().ok();
    let energy_j = next()?.parse().ok();
    let gpus = gpu_count(next()?);
    let (account, partition) = (next()?.to_string(), next()?.to_string());
    let comment = next().unwrap_or("").to_string();
    let slurm = SlurmJob { user: user.clone(), account, partition, gpus };
    Some(Row { job, uid, user, name, nodes, start, end, energy_j, slurm, comment })
}

/// The GPUs in a TRES list: `gres/gpu=2` (typed entries, `gres/gpu:h100=2`, repeat the count).
fn gpu_count(tres: &str) -> Option<u32> {
    tres.split(',').find_map(|t| t.strip_prefix("gres/gpu=")).and_then(|n| n.parse().ok())
}

/// Each row's summary records, and a Slurm row for the GPU nodes that gave none.
fn records_of(rows: impl Iterator<Item = Row>) -> Cluster {
    let mut cluster = Cluster::default();
    for row in rows {
        cluster.jobs.insert(row.job, row.slurm.clone());
        let (mut covered_j, mut missing) = (0.0, Vec::new());
        // A GPU job: one with a summary, GPUs in its TRES (where the site tracks gres/gpu), or
        // energy from acct_gather_energy/wattson, which counts GPUs only.
        let mut gpu_job = row.slurm.gpus.is_some_and(|n| n > 0) || row.energy_j.is_some_and(|e| e > 0.0);
        let (admin, system) = comment::split(&row.comment);
        match comment::read(admin, system) {
            Some(Ok(summary)) => {
                for record in summary.nodes.into_iter().flat_map(|n| n.records) {
                    if record.key.step.is_empty() {
                        covered_j += record.energy_j();
                    }
                    cluster.sources.insert((record.node.clone(), record.key.to_string()), Source::Summary);
                    cluster.records.push(record);
                }
                missing = summary.missing.into_iter().map(|m| m.node).collect();
                gpu_job = true;
            }
            Some(Err(_)) | None => missing.push(row.nodes.clone()),
        }
        if missing.is_empty() || !gpu_job {
            continue;
        }
        let record = JobRecord {
            key: JobKey::job(row.job),
            uid: row.uid,
            user: Some(row.user),
            name: Some(row.name),
            node: missing.join(","),
            begin_ns: row.start * 1_000_000_000,
            end_ns: row.end.map(|s| s * 1_000_000_000),
            state: if row.end.is_some() { JobState::Completed } else { JobState::Running },
            hints: Hints::default(),
            policy: None,
            gpus: Vec::new(),
            dvfs: None,
            node_share: None,
        };
        let energy = row.energy_j.map(|e| (e - covered_j).max(0.0));
        cluster.sources.insert((record.node.clone(), record.key.to_string()), Source::Slurm(energy));
        cluster.records.push(record);
    }
    cluster
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattson_sacct::summary::{JobSummary, Missing};
    use wattson_types::summary::NodeSummary;

    #[test]
    fn summaries_give_each_nodes_records_and_slurm_fills_the_nodes_without_one() {
        let record = |node: &str| JobRecord {
            key: JobKey::job(7),
            uid: 1000,
            user: Some("alice".into()),
            name: Some("train".into()),
            node: node.into(),
            begin_ns: 1,
            end_ns: Some(2),
            state: JobState::Completed,
            hints: Hints::default(),
            policy: None,
            gpus: Vec::new(),
            dvfs: None,
            node_share: None,
        };
        let summary = JobSummary {
            job: 7,
            written: 3,
            nodes: vec![NodeSummary {
                node: "n1".into(),
                records: vec![record("n1")],
                ..NodeSummary::default()
            }],
            missing: vec![Missing { node: "n2".into(), why: "timed out".into() }],
        };
        let comment = wattson_sacct::summary::admin_comment("wattson:policy=balanced", &summary).unwrap();
        let text = format!(
            "7|1000|alice|train|n[1-2]|100|200|5000|cpu=2,gres/gpu=2|physics|gpu|{comment}|\n\
             8|1000|alice|prep|n3|100|Unknown|40|cpu=2,gres/gpu=1|physics|gpu||\n\
             9|1000|alice|cpu-only|n3|100|200|0|cpu=2|physics|cpu||\n\
             10|1000|alice|untracked-gres|n4|100|200|70|cpu=2|chem|gpu||\n"
        );
        let cluster = records_of(text.lines().filter_map(parse_row));
        let nodes: Vec<(&str, u32)> =
            cluster.records.iter().map(|r| (r.node.as_str(), r.key.job_id)).collect();
        assert_eq!(nodes, [("n1", 7), ("n2", 7), ("n3", 8), ("n4", 10)]);
        let source = |node: &str, id: &str| cluster.sources[&(node.to_string(), id.to_string())];
        assert_eq!(source("n1", "7"), Source::Summary);
        // n1's record has no GPUs (0 J), so n2's part is all of Slurm's figure.
        assert_eq!(source("n2", "7"), Source::Slurm(Some(5000.0)));
        assert_eq!(source("n3", "8"), Source::Slurm(Some(40.0)));
        assert_eq!(
            (cluster.records[2].state, cluster.records[2].begin_ns),
            (JobState::Running, 100_000_000_000)
        );
        let job = |id: u32| cluster.jobs[&id].clone();
        let physics = SlurmJob {
            user: "alice".into(),
            account: "physics".into(),
            partition: "gpu".into(),
            gpus: Some(2),
        };
        assert_eq!(job(7), physics);
        assert_eq!((job(10).account.as_str(), job(10).gpus), ("chem", None));

        // Beside another tool's mixed-case AdminComment, the summary is in SystemComment.
        let system = wattson_sacct::summary::admin_comment("", &summary).unwrap();
        let line =
            format!("7|1000|alice|train|n[1-2]|100|200|5000|cpu=2,gres/gpu=2|physics|gpu|JS1:Ab|c|{system}");
        let cluster = records_of(std::iter::once(line.as_str()).filter_map(parse_row));
        assert_eq!(cluster.sources[&("n1".to_string(), "7".to_string())], Source::Summary);
    }
}
