//! A job's summary in Slurm's accounting (`AdminComment`, docs/accounting.md): what every
//! node's wattsond knew of the job, written once after it ends, read back by `wattson acct`
//! from any host with Slurm's client.
//!
//! Format: what the field held before (the job_submit plugin's note `wattson:policy=...`,
//! another tool's text; [`crate::comment`] picks the field) if anything, then `;`, then
//! [`MARK`] and the summary as JSON, deflated, in unpadded lower-case base32 (RFC 4648's
//! alphabet): `sacctmgr` lower-cases the values it sets, so the text must survive that; it is
//! read back in either case.

use std::io::{Read, Write};

use data_encoding::{Encoding, Specification};
use serde::{Deserialize, Serialize};

use wattson_types::summary::NodeSummary;

/// Where the summary starts in an `AdminComment`; the digit is the format's version.
pub const MARK: &str = "ws1:";

/// Longest `AdminComment` written: power traces are halved until the summary fits.
pub const MAX_COMMENT: usize = 32 * 1024;

/// A node of the job that gave no summary, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Missing {
    /// Node name.
    pub node: String,
    /// Why it gave none.
    pub why: String,
}

/// What wattson knew of one job across its nodes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct JobSummary {
    /// The job.
    pub job: u32,
    /// When the summary was written, s since the Unix epoch.
    pub written: i64,
    /// Each node that answered.
    pub nodes: Vec<NodeSummary>,
    /// Nodes that did not: their figures are only in Slurm's own accounting.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub missing: Vec<Missing>,
}

/// Why an `AdminComment` holds no readable summary.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum SummaryError {
    /// The text after the mark is not a summary of this version.
    #[error("unreadable wattson summary: {0}")]
    Unreadable(String),
}

/// `summary` encoded after `comment`'s job_submit note (an older summary in it replaced), its
/// power traces thinned until the whole is at most [`MAX_COMMENT`] bytes.
pub fn admin_comment(comment: &str, summary: &JobSummary) -> Result<String, SummaryError> {
    let note = split(comment).0;
    let mut summary = summary.clone();
    loop {
        let encoded = encode(&summary)?;
        let text = if note.is_empty() { encoded } else { format!("{note};{encoded}") };
        let thinnest = summary.nodes.iter().flat_map(|n| &n.power).all(|t| t.watts.len() <= 1);
        if text.len() <= MAX_COMMENT || thinnest {
            return Ok(text);
        }
        for trace in summary.nodes.iter_mut().flat_map(|n| &mut n.power) {
            *trace = halve(trace);
        }
    }
}

/// The summary in an `AdminComment`: `None` when it holds none.
pub fn read(comment: &str) -> Option<Result<JobSummary, SummaryError>> {
    split(comment).1.map(decode)
}

/// The job_submit note and the encoded summary (after its mark) of an `AdminComment`.
pub fn split(comment: &str) -> (&str, Option<&str>) {
    let comment = comment.trim();
    let lower = comment.to_ascii_lowercase();
    if lower.starts_with(MARK) {
        return ("", Some(&comment[MARK.len()..]));
    }
    match lower.rfind(&format!(";{MARK}")) {
        Some(at) => (&comment[..at], Some(&comment[at + 1 + MARK.len()..])),
        None => (comment, None),
    }
}

fn encode(summary: &JobSummary) -> Result<String, SummaryError> {
    let json = serde_json::to_vec(summary).map_err(|e| SummaryError::Unreadable(e.to_string()))?;
    let mut deflate = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::best());
    let packed = deflate.write_all(&json).and_then(|()| deflate.finish());
    let packed = packed.map_err(|e| SummaryError::Unreadable(e.to_string()))?;
    Ok(format!("{MARK}{}", base32().encode(&packed)))
}

fn decode(text: &str) -> Result<JobSummary, SummaryError> {
    let bad = |e: String| SummaryError::Unreadable(e);
    let packed = base32().decode(text.trim().as_bytes()).map_err(|e| bad(e.to_string()))?;
    let mut json = Vec::new();
    // A summary is at most MAX_COMMENT bytes deflated; 64 MiB inflated is far beyond any real one.
    flate2::read::DeflateDecoder::new(&packed[..])
        .take(64 << 20)
        .read_to_end(&mut json)
        .map_err(|e| bad(e.to_string()))?;
    serde_json::from_slice(&json).map_err(|e| bad(e.to_string()))
}

/// RFC 4648 base32 in lower case, unpadded; upper case read as lower.
fn base32() -> Encoding {
    let mut spec = Specification::new();
    spec.symbols.push_str("abcdefghijklmnopqrstuvwxyz234567");
    spec.translate.from.push_str("ABCDEFGHIJKLMNOPQRSTUVWXYZ");
    spec.translate.to.push_str("abcdefghijklmnopqrstuvwxyz");
    spec.encoding().expect("a valid base32 specification")
}

/// `trace` with each two bins merged into one (energy kept).
fn halve(trace: &wattson_types::summary::PowerTrace) -> wattson_types::summary::PowerTrace {
    let mut out = wattson_types::summary::PowerTrace { gpu: trace.gpu, ..Default::default() };
    let mut start = 0.0f32;
    for (times, watts) in trace.t_s.chunks(2).zip(trace.watts.chunks(2)) {
        let mut prev = start;
        let mut energy = 0.0f64;
        for (&t, &w) in times.iter().zip(watts) {
            energy += f64::from(w) * f64::from(t - prev);
            prev = t;
        }
        let end = *times.last().expect("chunks are never empty");
        out.watts.push((energy / f64::from((end - start).max(f32::EPSILON))) as f32);
        out.t_s.push(end);
        start = end;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattson_types::summary::PowerTrace;

    fn summary(bins: usize) -> JobSummary {
        let trace = PowerTrace {
            gpu: 0,
            t_s: (1..=bins).map(|i| i as f32).collect(),
            watts: (1..=bins).map(|i| 100.0 + (i % 7) as f32 * 31.3).collect(),
        };
        let node = NodeSummary { node: "gpu01".into(), power: vec![trace], ..NodeSummary::default() };
        JobSummary {
            job: 42,
            written: 1_700_000_000,
            nodes: vec![node],
            missing: vec![Missing { node: "gpu02".into(), why: "wattsond: timed out".into() }],
        }
    }

    #[test]
    fn a_summary_reads_back_whole_after_the_submit_note() {
        let s = summary(100);
        let note = "wattson:policy=min-energy,slowdown=10%";
        let comment = admin_comment(note, &s).unwrap();
        assert!(comment.starts_with(&format!("{note};{MARK}")), "{comment}");
        assert_eq!(read(&comment), Some(Ok(s.clone())));
        // Written again (a rerun): the old summary is replaced, the note kept.
        let again = admin_comment(&comment, &s).unwrap();
        assert_eq!(again, comment);
        // No note: the comment is the summary alone.
        let alone = admin_comment("", &s).unwrap();
        assert!(alone.starts_with(MARK));
        assert_eq!(read(&alone), Some(Ok(s.clone())));
        assert_eq!(read(note), None);
        assert!(matches!(read(&format!("{note};{MARK}not-base32!")), Some(Err(_))));
        // As sacctmgr may store it: all in upper or lower case.
        assert_eq!(read(&comment.to_ascii_uppercase()).unwrap().unwrap(), s);
    }

    #[test]
    fn a_long_trace_is_thinned_to_fit_keeping_its_energy() {
        let s = summary(200_000);
        let comment = admin_comment("", &s).unwrap();
        assert!(comment.len() <= MAX_COMMENT, "{}", comment.len());
        let back = read(&comment).unwrap().unwrap();
        let (long, short) = (&s.nodes[0].power[0], &back.nodes[0].power[0]);
        assert!(short.watts.len() < long.watts.len() / 4, "{}", short.watts.len());
        assert_eq!(short.t_s.last(), long.t_s.last());
        let rel = (short.energy_j() - long.energy_j()).abs() / long.energy_j();
        assert!(rel < 1e-4, "{} vs {}", short.energy_j(), long.energy_j());
    }
}
