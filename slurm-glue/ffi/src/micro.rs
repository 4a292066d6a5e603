//! Following Slurm's micro releases. Slurm loads a job_submit or acct_gather_energy plugin only
//! when its `plugin_version` is the daemon's own `major.minor.micro`, and a daemon whose
//! configured plugin is refused does not start. Within a release series Slurm's C interface
//! (`slurm.h`, libslurm's API number) does not change, so a plugin built for 24.11.5 works in
//! 24.11.6: at load, before Slurm reads `plugin_version`, the plugin finds the running release
//! in the libslurm that the daemon loaded and, where it is a micro release of the series the
//! plugin was built for, takes that release as its version. Another series is left alone.

use std::collections::BTreeSet;

use wattson_slurm_sys::version_string as version;

/// What the plugin built for `built` does in a process whose libslurm names `found` releases.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Follow {
    /// The running release is the one the plugin was built for: nothing to do.
    Same,
    /// A micro release of the same series: the plugin loads as this `SLURM_VERSION_NUMBER`.
    Micro(u32),
    /// libslurm names no release of the plugin's series, or several: the plugin keeps the
    /// version it was built for (Slurm loads it only if that is the running one).
    Unknown,
}

/// The distinct micro numbers of the release strings of `built`'s series (`22.05.`) that
/// `library` (the bytes of libslurm) holds as whole C strings: `22.05.9`, or `22.05.9-rc1`.
pub fn micros_in(library: &[u8], built: u32) -> BTreeSet<u32> {
    let prefix = format!("{}.{:02}.", built >> 16, (built >> 8) & 0xff);
    library
        .split(|b| *b == 0)
        .filter_map(|text| text.strip_prefix(prefix.as_bytes()))
        .filter_map(|rest| {
            let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
            let tail = &rest[digits..];
            let clean = tail.is_empty() || (tail[0] == b'-' && tail.iter().all(|b| b.is_ascii_graphic()));
            if digits == 0 || digits > 3 || !clean {
                return None;
            }
            std::str::from_utf8(&rest[..digits]).ok()?.parse::<u32>().ok().filter(|m| *m <= 0xff)
        })
        .collect()
}

/// Decides from the micro numbers libslurm names ([`micros_in`]).
pub fn follow(built: u32, micros: &BTreeSet<u32>) -> Follow {
    let mut only = micros.iter();
    match (only.next(), only.next()) {
        (Some(&micro), None) if micro == built & 0xff => Follow::Same,
        (Some(&micro), None) => Follow::Micro((built & !0xff) | micro),
        _ => Follow::Unknown,
    }
}

/// The one line a daemon logs when a plugin follows a micro release: what runs, and that
/// everything works as built.
pub fn followed_line(plugin: &str, built: u32, running: u32) -> String {
    format!(
        "wattson: {plugin} was built for Slurm {} and runs in Slurm {}, a micro release of the same \
         series with the same C interface: it loads as {} and everything it does works as built; \
         install wattson built for {} at the next maintenance to silence this line",
        version(built),
        version(running),
        version(running),
        version(running)
    )
}

/// The line a daemon logs when a plugin cannot tell which release runs.
pub fn unknown_line(plugin: &str, built: u32, library: &str, micros: &BTreeSet<u32>) -> String {
    let found: Vec<String> = micros.iter().map(|m| version((built & !0xff) | m)).collect();
    format!(
        "wattson: {plugin} cannot tell which Slurm release runs ({library} names {}): it keeps the \
         version it was built for, {}, which Slurm loads only if it is the running release",
        if found.is_empty() { "none of its series".to_string() } else { found.join(" and ") },
        version(built)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lib(strings: &[&str]) -> Vec<u8> {
        let mut bytes = b"\x7fELF junk".to_vec();
        for s in strings {
            bytes.push(0);
            bytes.extend_from_slice(s.as_bytes());
        }
        bytes.push(0);
        bytes
    }

    #[test]
    fn a_micro_release_of_the_series_is_followed_and_another_series_is_not() {
        let built = 0x16_05_08; // 22.05.8
        let same = micros_in(&lib(&["slurm-wlm", "22.05.8", "%s %s"]), built);
        assert_eq!(follow(built, &same), Follow::Same);
        let next = micros_in(&lib(&["22.05.9", "node %s"]), built);
        assert_eq!(follow(built, &next), Follow::Micro(0x16_05_09));
        let older = micros_in(&lib(&["22.05.2-rc1"]), built);
        assert_eq!(follow(built, &older), Follow::Micro(0x16_05_02));
        // 24.11 in the library: nothing of 22.05's series, so nothing to follow.
        let other = micros_in(&lib(&["24.11.5"]), built);
        assert_eq!(follow(built, &other), Follow::Unknown);
        assert_eq!(follow(0x18_0b_05, &micros_in(&lib(&["24.11.6"]), 0x18_0b_05)), Follow::Micro(0x18_0b_06));
    }

    #[test]
    fn only_whole_strings_count_and_two_releases_are_unknown() {
        let built = 0x16_05_08;
        // Inside longer text, with other characters after the number, or too long: not a release.
        let none =
            micros_in(&lib(&["slurm 22.05.9", "22.05.9x", "22.05.", "22.05.1234", "22.05.9 ok"]), built);
        assert!(none.is_empty(), "{none:?}");
        let two = micros_in(&lib(&["22.05.8", "22.05.9"]), built);
        assert_eq!(follow(built, &two), Follow::Unknown);
        let line = unknown_line("x.so", built, "/lib/libslurmfull.so", &two);
        assert!(line.contains("names 22.05.8 and 22.05.9"), "{line}");
    }

    #[test]
    fn the_followed_line_names_both_releases_on_one_line() {
        let line = followed_line("job_submit_wattson.so", 0x18_0b_05, 0x18_0b_06);
        assert!(line.contains("built for Slurm 24.11.5 and runs in Slurm 24.11.6"), "{line}");
        assert!(line.contains("works as built"), "{line}");
        assert!(!line.contains('\n'));
    }
}
