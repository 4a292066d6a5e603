//! The co-location pair file (`[ctld] share_pairs`): what the site measured of jobs sharing a
//! GPU, by workload tag (`--energy-tag`). One `[[pair]]` per measurement:
//!
//! ```toml
//! [[pair]]
//! job = "resnet"   # the job measured
//! with = "bert"    # the job that shared its GPU
//! slowdown = 0.12  # its time sharing over its time alone, minus one
//! ```

use std::path::Path;

use serde::Deserialize;

use crate::ConfigError;

/// One measured pair.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct PairMeasurement {
    /// The tag of the job measured.
    pub job: String,
    /// The tag of the job that shared its GPU.
    pub with: String,
    /// Its time sharing over its time alone, minus one (0 to 100).
    pub slowdown: f64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PairFile {
    #[serde(default)]
    pair: Vec<PairMeasurement>,
}

/// Reads the pair file at `path`: at least one pair, tags not empty, slowdowns from 0 to 100.
pub fn load(path: &Path) -> Result<Vec<PairMeasurement>, ConfigError> {
    let text = crate::read_bounded(path)
        .map_err(|e| ConfigError(format!("{}: cannot read the pair file: {e}", path.display())))?;
    parse(&text, &path.display().to_string())
}

/// Parses a pair file's `text`, naming `origin` in errors.
pub fn parse(text: &str, origin: &str) -> Result<Vec<PairMeasurement>, ConfigError> {
    let file: PairFile = toml::from_str(text).map_err(|e| {
        let line = e.span().map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        ConfigError(format!("{origin}:{}: {}", line.unwrap_or(1), e.message().trim_end()))
    })?;
    if file.pair.is_empty() {
        return Err(ConfigError(format!("{origin}: no [[pair]]: nothing to decide co-location from")));
    }
    for (i, p) in file.pair.iter().enumerate() {
        if p.job.trim().is_empty() || p.with.trim().is_empty() {
            return Err(ConfigError(format!("{origin}: pair {}: job and with name tags, not empty", i + 1)));
        }
        if !(0.0..=100.0).contains(&p.slowdown) {
            return Err(ConfigError(format!(
                "{origin}: pair {} ({} with {}): slowdown {} is not from 0 to 100",
                i + 1,
                p.job,
                p.with,
                p.slowdown
            )));
        }
    }
    Ok(file.pair)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_are_read_and_bad_ones_named() {
        let text = "[[pair]]\njob = \"a\"\nwith = \"b\"\nslowdown = 0.1\n[[pair]]\njob = \"b\"\nwith = \"a\"\nslowdown = 0\n";
        let pairs = parse(text, "p.toml").unwrap();
        assert_eq!(pairs.len(), 2);
        assert_eq!((pairs[0].job.as_str(), pairs[0].with.as_str(), pairs[0].slowdown), ("a", "b", 0.1));
        let bad = |t: &str| parse(t, "p.toml").unwrap_err().0;
        assert_eq!(bad(""), "p.toml: no [[pair]]: nothing to decide co-location from");
        assert!(
            bad("[[pair]]\njob = \"a\"\nwith = \"b\"\nslowdown = -1\n")
                .contains("pair 1 (a with b): slowdown -1")
        );
        assert!(bad("[[pair]]\njob = \"\"\nwith = \"b\"\nslowdown = 1\n").contains("not empty"));
        let typo = bad("[[pair]]\njob = \"a\"\nwith = \"b\"\nslowdwn = 1\n");
        assert!(typo.starts_with("p.toml:") && typo.contains("unknown field `slowdwn`"), "{typo}");
        assert!(
            load(Path::new("/nonexistent/pairs.toml")).unwrap_err().0.contains("cannot read the pair file")
        );
    }
}
