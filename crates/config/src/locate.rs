//! Where the configuration is found when no path is given (`-c`, `$WATTSON_CONFIG`): beside
//! `slurm.conf` when `$SLURM_CONF` names it (a site running several clusters, or a private
//! Slurm, keeps each cluster's wattson.toml with its slurm.conf), else wattson's own
//! `/etc/wattson/wattson.toml`, else beside Slurm's default `slurm.conf` in `/etc/slurm`; with
//! none of them, the built-in defaults.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use crate::DEFAULT_PATH;

/// The configuration file's name beside `slurm.conf`.
pub const FILE_NAME: &str = "wattson.toml";

/// Slurm's default configuration directory (where it finds `slurm.conf` without `$SLURM_CONF`).
pub const SLURM_DIR: &str = "/etc/slurm";

/// The places looked at, in order, given `$SLURM_CONF`.
pub fn candidates(slurm_conf: Option<&OsStr>) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Some(dir) = slurm_conf.filter(|s| !s.is_empty()).and_then(|c| Path::new(c).parent()) {
        out.push(dir.join(FILE_NAME));
    }
    out.push(PathBuf::from(DEFAULT_PATH));
    out.push(Path::new(SLURM_DIR).join(FILE_NAME));
    out
}

/// The first of [`candidates`] that is a file.
pub fn find_in(slurm_conf: Option<&OsStr>, is_file: impl Fn(&Path) -> bool) -> Option<PathBuf> {
    candidates(slurm_conf).into_iter().find(|p| is_file(p))
}

/// The configuration file of this process (`$SLURM_CONF` from its environment), if any.
pub fn find() -> Option<PathBuf> {
    find_in(std::env::var_os("SLURM_CONF").as_deref(), Path::is_file)
}

/// [`find`], else [`DEFAULT_PATH`] (for messages and for callers that watch the file appear).
pub fn path() -> PathBuf {
    find().unwrap_or_else(|| PathBuf::from(DEFAULT_PATH))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beside_an_explicit_slurm_conf_first_then_wattsons_own_then_slurms_default() {
        let all = |_: &Path| true;
        let conf = OsStr::new("/opt/cluster-b/etc/slurm.conf");
        assert_eq!(find_in(Some(conf), all), Some(PathBuf::from("/opt/cluster-b/etc/wattson.toml")));
        assert_eq!(find_in(None, all), Some(PathBuf::from("/etc/wattson/wattson.toml")));
        let only_slurm = |p: &Path| p == Path::new("/etc/slurm/wattson.toml");
        assert_eq!(find_in(Some(conf), only_slurm), Some(PathBuf::from("/etc/slurm/wattson.toml")));
        assert_eq!(find_in(Some(OsStr::new("")), |_: &Path| false), None);
        assert_eq!(candidates(None).len(), 2);
    }
}
