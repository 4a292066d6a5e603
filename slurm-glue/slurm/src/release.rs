//! Whether the Slurm a plugin is loaded into is the release it was built for. Slurm refuses a
//! job_submit or acct_gather_energy plugin of another version, and a SPANK plugin of another
//! release series (`major.minor`), with a line naming only the plugin's version; the SPANK
//! plugin, as it is mapped, names both. At that moment Slurm offers no release number, only
//! libslurm's API number (`slurm_api_version()`), one more with every release series.

use wattson_slurm_sys::release_of;

/// libslurm's API number (`libslurm.so.<N>`) of each release series. Measured on Debian's
/// 22.05 (38), 24.11 (42) and 26.05 (45); the others follow Slurm's one-per-release sequence.
const API_OF_RELEASE: &[(&str, u32)] = &[
    ("22.05", 38),
    ("23.02", 39),
    ("23.11", 40),
    ("24.05", 41),
    ("24.11", 42),
    ("25.05", 43),
    ("25.11", 44),
    ("26.05", 45),
];

/// The API number of `slurm_api_version()`'s value (`SLURM_VERSION_NUM(api, 0, 0)`).
pub fn api_of(slurm_api_version: u32) -> u32 {
    slurm_api_version >> 16
}

/// A plugin built for one Slurm release series, loaded into another.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mismatch {
    /// The version the plugin was built for (`22.05.8`).
    pub built: String,
    /// The running release series (`24.11`), when the table knows its API number.
    pub running: Option<&'static str>,
    /// The running libslurm's API number (`42`).
    pub running_api: u32,
}

impl std::fmt::Display for Mismatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (running, wanted) = match self.running {
            Some(release) => (format!("Slurm {release}"), format!("Slurm {release}")),
            None => (format!("a Slurm with libslurm API {}", self.running_api), "this Slurm".to_string()),
        };
        write!(
            f,
            "wattson: spank_wattson.so was built for Slurm {} but runs in {running}, which does not load \
             it: jobs run without wattson (no --energy options, no accounting) where plugstack.conf \
             lists it as optional; install the wattson built for {wanted}",
            self.built
        )
    }
}

/// Compares the release series of `built` (`22.05.8`) with the running libslurm's, as Slurm
/// does for SPANK plugins (a micro update is no mismatch). A plugin of a series the table does
/// not know cannot tell, and says nothing.
pub fn check(built: &str, running_api: u32) -> Result<(), Mismatch> {
    let Some(series) = release_of(built) else { return Ok(()) };
    let Some(&(_, built_api)) = API_OF_RELEASE.iter().find(|(r, _)| *r == series) else { return Ok(()) };
    if built_api == running_api {
        return Ok(());
    }
    let running = API_OF_RELEASE.iter().find(|(_, api)| *api == running_api).map(|(r, _)| *r);
    Err(Mismatch { built: built.to_string(), running, running_api })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn another_release_series_is_a_mismatch_naming_both() {
        let m = check("22.05.8", api_of(0x2a0000)).unwrap_err();
        let line = m.to_string();
        assert!(
            line.contains("built for Slurm 22.05.8 but runs in Slurm 24.11, which does not load it"),
            "{line}"
        );
        assert!(line.ends_with("install the wattson built for Slurm 24.11"), "{line}");
        assert!(!line.contains('\n'));
        assert_eq!(check("24.11.5", 45).unwrap_err().running, Some("26.05"));
        let unknown = check("24.11.5", 60).unwrap_err().to_string();
        assert!(unknown.contains("runs in a Slurm with libslurm API 60"), "{unknown}");
    }

    #[test]
    fn the_same_series_or_an_unknown_build_is_no_mismatch() {
        assert_eq!(check("24.11.5", 42), Ok(()));
        assert_eq!(check("24.11.9", 42), Ok(()));
        assert_eq!(check("22.05.8", 38), Ok(()));
        assert_eq!(check("99.05.1", 38), Ok(()));
        assert_eq!(check("garbage", 38), Ok(()));
    }
}
