//! A job Slurm's accounting says has ended, as the controller reads it from `sacct` (text
//! here, JSON in [`super::json::sacct`]) to gather its energy summary.

use wattson_sacct::{comment, hostlist};

/// A job that ended and has no summary yet.
#[derive(Debug, Clone, PartialEq)]
pub struct Ended {
    /// The job.
    pub job: u32,
    /// Its cluster (`sacctmgr` changes every record with the id otherwise).
    pub cluster: String,
    /// Its nodes.
    pub nodes: Vec<String>,
    /// When it ended, s since the Unix epoch.
    pub end: i64,
    /// Its `AdminComment` so far (the job_submit note).
    pub comment: String,
}

impl Ended {
    /// This job, when it ran on nodes and neither its `AdminComment` nor `system` (its
    /// `SystemComment`) holds a summary.
    pub(crate) fn unsummarized(self, system: &str) -> Option<Ended> {
        (comment::read(&self.comment, system).is_none() && !self.nodes.is_empty()).then_some(self)
    }
}

/// Parses `sacct -X -n -P -o JobIDRaw,Cluster,NodeList,End,AdminComment,SystemComment` (End in Unix s),
/// keeping jobs that ran on nodes and hold no summary.
pub fn parse_ended(text: &str) -> Vec<Ended> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.splitn(5, '|');
            let job = fields.next()?.trim().parse().ok()?;
            let cluster = fields.next()?.trim().to_string();
            let nodes = match fields.next()?.trim() {
                // A job cancelled before it started.
                "None assigned" | "" => Vec::new(),
                list => hostlist::expand(list).ok()?,
            };
            let end = fields.next()?.trim().parse().ok()?;
            let (admin, system) = comment::split(fields.next().unwrap_or(""));
            Ended { job, cluster, nodes, end, comment: admin.to_string() }.unsummarized(system)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattson_sacct::summary::{self, JobSummary};

    #[test]
    fn ended_jobs_without_a_summary_are_listed_with_their_nodes() {
        let summarized = summary::admin_comment("wattson:policy=balanced", &JobSummary::default()).unwrap();
        let text = format!(
            "7|lab|n[1-2]|1700000100|wattson:policy=balanced\n8|lab|n1|1700000200|{summarized}\n\
             9|lab|None assigned|1700000300|\n10|lab|n2|1700000400|a|b|\nbad\n"
        );
        let ended = parse_ended(&text);
        assert_eq!(ended.len(), 2, "{ended:?}");
        assert_eq!(ended[0].job, 7);
        assert_eq!(ended[0].nodes, ["n1", "n2"]);
        assert_eq!((ended[0].end, ended[0].cluster.as_str()), (1_700_000_100, "lab"));
        assert_eq!((ended[1].job, ended[1].comment.as_str()), (10, "a|b"));
    }

    /// 22.05's sacct (captured by scripts/capture-slurm-outputs, as the controller asks): job 1
    /// ended on n2, job 2 on n1 with both comments, job 3 cancelled before it started (no
    /// nodes: left out). The JSON form of each release: crate::slurm::json::sacct.
    #[test]
    fn the_text_of_22_05s_sacct() {
        let ended = parse_ended(include_str!("../../fixtures/slurm/22.05/sacct.txt"));
        let [one, two] = &ended[..] else { panic!("{ended:?}") };
        assert_eq!((one.job, one.nodes.clone(), one.end), (1, vec!["n2".to_string()], 1_795_692_474));
        assert_eq!((one.cluster.as_str(), one.comment.as_str()), ("lab10241x0", ""));
        assert_eq!((two.job, two.end, two.comment.as_str()), (2, 1_795_692_475, "capture admin note"));
    }
}
