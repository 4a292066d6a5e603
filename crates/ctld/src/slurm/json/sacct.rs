//! `sacct --json` (Slurm 23.02 and later, and 22.05's own): the ended jobs the summary pass
//! reads, with only the fields it uses (id, cluster, nodes, end, the two comment fields).

use serde::Deserialize;
use tracing::warn;

use wattson_sacct::hostlist;

use super::{JsonError, Number, Reply, reply};
use crate::slurm::ended::Ended;

/// `sacct --json`.
pub const ENDED: &str = "sacct --json";

#[derive(Debug, Deserialize)]
struct JsonEnded {
    job_id: u32,
    #[serde(default)]
    cluster: String,
    nodes: Option<String>,
    time: Times,
    #[serde(default)]
    comment: Comments,
}

#[derive(Debug, Deserialize)]
struct Times {
    end: Option<Number>,
}

/// 22.05 prints `null` for an empty comment, later releases `""`.
#[derive(Debug, Default, Deserialize)]
struct Comments {
    administrator: Option<String>,
    system: Option<String>,
}

/// Parses `sacct --json`, keeping the jobs that ended on nodes and hold no summary (as
/// [`crate::slurm::ended::parse_ended`] does with the text form). A job whose node list cannot
/// be read is left out, with a warning.
pub fn parse_ended(text: &str) -> Result<Vec<Ended>, JsonError> {
    let reply: Reply<JsonEnded> = reply(ENDED, text)?;
    Ok(reply
        .jobs
        .into_iter()
        .filter_map(|j| {
            // A job not ended yet has no end (0, or unset on 23.11 and later).
            let end = j.time.end.and_then(|e| e.value()).filter(|e| *e > 0)?;
            let nodes = match j.nodes.as_deref().map(str::trim) {
                // A job cancelled before it started.
                None | Some("" | "None assigned") => Vec::new(),
                Some(list) => match hostlist::expand(list) {
                    Ok(nodes) => nodes,
                    Err(e) => {
                        warn!(job = j.job_id, nodes = list, error = %e, "{ENDED}: unreadable node list; job left out");
                        return None;
                    }
                },
            };
            let admin = j.comment.administrator.unwrap_or_default();
            let system = j.comment.system.unwrap_or_default();
            Ended { job: j.job_id, cluster: j.cluster, nodes, end, comment: admin }.unsummarized(&system)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    //! On each release's real `sacct` (crates/ctld/fixtures/slurm, captured by
    //! scripts/capture-slurm-outputs): job 1 ended on n2, job 2 on n1 with an `AdminComment` and
    //! a `SystemComment`, job 3 cancelled before it started. Values read off the captures.

    use super::*;
    use wattson_sacct::summary::{self, JobSummary};

    const RELEASES: [(&str, &str, &str, i64); 3] = [
        (
            include_str!("../../../fixtures/slurm/22.05/sacct.json"),
            include_str!("../../../fixtures/slurm/22.05/sacct.txt"),
            "lab10241x0",
            1795692474,
        ),
        (
            include_str!("../../../fixtures/slurm/24.11/sacct.json"),
            include_str!("../../../fixtures/slurm/24.11/sacct.txt"),
            "lab11924x0",
            1795692508,
        ),
        (
            include_str!("../../../fixtures/slurm/26.05/sacct.json"),
            include_str!("../../../fixtures/slurm/26.05/sacct.txt"),
            "lab15683x0",
            1795692537,
        ),
    ];

    #[test]
    fn ended_jobs_of_each_release() {
        for (json, _, cluster, end) in RELEASES {
            let ended = parse_ended(json).unwrap();
            let [plain, commented] = &ended[..] else { panic!("{ended:?}") };
            assert_eq!((plain.job, plain.cluster.as_str(), plain.end), (1, cluster, end));
            assert_eq!((plain.nodes.clone(), plain.comment.as_str()), (vec!["n2".to_string()], ""));
            // Job 2 ended a second later on n1; job 3, cancelled before it started, is left out.
            assert_eq!((commented.job, commented.end), (2, end + 1));
            assert_eq!(
                (commented.nodes.clone(), commented.comment.as_str()),
                (vec!["n1".to_string()], "capture admin note")
            );
        }
    }

    #[test]
    fn a_summary_in_the_system_comment_leaves_the_job_out() {
        let summarized = summary::admin_comment("", &JobSummary::default()).unwrap();
        for (json, ..) in RELEASES {
            let quoted = serde_json::to_string(&summarized).unwrap();
            let done = json.replace("\"capture system note\"", &quoted);
            assert_ne!(done, json);
            let ids: Vec<u32> = parse_ended(&done).unwrap().iter().map(|e| e.job).collect();
            assert_eq!(ids, [1]);
        }
    }

    #[test]
    fn the_json_and_text_of_one_release_read_the_same() {
        for (json, text, ..) in RELEASES {
            assert_eq!(parse_ended(json).unwrap(), crate::slurm::ended::parse_ended(text));
        }
    }

    #[test]
    fn errors_name_the_command() {
        let garbage = parse_ended("<html>").unwrap_err().to_string();
        assert!(garbage.starts_with("sacct --json: unreadable JSON"), "{garbage}");
        let said =
            r#"{"jobs": [], "errors": [{"description": "", "error": "Unable to connect to database"}]}"#;
        assert_eq!(
            parse_ended(said).unwrap_err().to_string(),
            "sacct --json: Slurm says: Unable to connect to database"
        );
    }

    #[test]
    fn fields_slurm_adds_are_ignored_and_unended_or_unreadable_jobs_left_out() {
        let text = r#"{"jobs": [
            {"job_id": 5, "cluster": "c", "nodes": "n[1-2]", "time": {"end": {"set": true, "infinite": false, "number": 9}},
             "comment": {"administrator": "note", "system": null, "new": 1}, "power": {"joules": 3}},
            {"job_id": 6, "cluster": "c", "nodes": "n1", "time": {"end": {"set": false, "infinite": false, "number": 0}}},
            {"job_id": 7, "cluster": "c", "nodes": "n1", "time": {"end": 0}},
            {"job_id": 8, "cluster": "c", "nodes": "n[1-", "time": {"end": 10}},
            {"job_id": 9, "nodes": "n3", "time": {"end": 11}}
        ], "meta": {"new": true}}"#;
        let ended = parse_ended(text).unwrap();
        let [five, nine] = &ended[..] else { panic!("{ended:?}") };
        assert_eq!((five.job, five.nodes.len(), five.end, five.comment.as_str()), (5, 2, 9, "note"));
        assert_eq!((nine.job, nine.cluster.as_str(), nine.comment.as_str()), (9, "", ""));
    }
}
