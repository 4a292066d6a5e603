//! Checks of the paths and addresses an administrator gives, made when the configuration is
//! parsed (so `wattsond --check-config` makes them too): each names what it must be.

use std::path::Path;

use super::{Config, ConfigError};

/// Refuses paths that cannot be what their key needs, and a `/metrics` open beyond this
/// host that the site did not say it meant.
pub(crate) fn check(config: &Config, text: &str, origin: &str) -> Result<(), ConfigError> {
    let err = |key: &str, message: String| Err(ConfigError::at(text, origin, key, &message));
    for (key, path) in [
        ("daemon.store", &config.daemon.store),
        ("daemon.socket", &config.daemon.socket),
        ("engine.models_file", &config.engine.models_file),
    ] {
        if let Some(why) = not_a_file_name(path) {
            return err(key, format!("{key} {path:?} {why}; give the path of a file"));
        }
    }
    let progress = &config.engine.progress_dir;
    if progress.as_os_str().is_empty() || progress.parent().is_none() {
        return err(
            "engine.progress_dir",
            format!("engine.progress_dir {progress:?} must be a directory of its own, not / or empty"),
        );
    }
    if let Some(addr) = config.metrics.listen
        && !addr.ip().is_loopback()
        && !config.metrics.public
    {
        return err(
            "metrics.listen",
            format!(
                "metrics.listen {addr} serves /metrics to anyone who can reach the port; listen on \
                 127.0.0.1, or set metrics.public = true if that is meant"
            ),
        );
    }
    Ok(())
}

/// Why `path` cannot name a file, if it cannot: empty, `/`, or ending in `/`, `.` or `..`.
fn not_a_file_name(path: &Path) -> Option<&'static str> {
    let text = path.as_os_str().as_encoded_bytes();
    if text.is_empty() {
        return Some("is empty");
    }
    if text.ends_with(b"/") || path.file_name().is_none() || text.ends_with(b"/.") || text == b"." {
        return Some("names a directory");
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str) -> String {
        Config::parse(text, "w.toml").unwrap_err().0
    }

    #[test]
    fn empty_root_and_directory_paths_are_refused_with_their_key() {
        assert!(refused("[daemon]\nstore = \"\"\n").contains("daemon.store \"\" is empty"));
        assert!(refused("[daemon]\nstore = \"/\"\n").contains("daemon.store \"/\" names a directory"));
        assert!(refused("[daemon]\nstore = \"/var/lib/wattson/\"\n").contains("names a directory"));
        assert!(refused("[daemon]\nsocket = \"/run/..\"\n").contains("daemon.socket"));
        assert!(refused("[engine]\nmodels_file = \"/var/lib/.\"\n").contains("engine.models_file"));
        assert!(refused("[engine]\nprogress_dir = \"/\"\n").contains("engine.progress_dir"));
        assert!(refused("[engine]\nprogress_dir = \"\"\n").contains("engine.progress_dir"));
        Config::parse("[daemon]\nstore = \"/var/lib/wattson/w.db\"\n", "w.toml").unwrap();
    }

    #[test]
    fn errors_found_after_parsing_name_the_line_that_set_the_key() {
        let text = "# a site's file\n[daemon]\nnode_name = \"n1\"\nstore = \"/\"\n";
        assert!(refused(text).starts_with("w.toml:4: daemon.store"), "{}", refused(text));
        let text = "[engine]\nprobe_window = \"1s\"\nprobe_settle = \"2s\"\n";
        assert!(refused(text).starts_with("w.toml:3: engine.probe_settle"), "{}", refused(text));
        let text = "metrics.listen = \"0.0.0.0:9400\"\n";
        assert!(refused(text).starts_with("w.toml:1: metrics.listen"), "{}", refused(text));
        // A default the file does not set has no line.
        let text = "[engine]\nprobe_window = \"1s\"\n";
        assert!(refused(text).starts_with("w.toml: engine.probe_settle"), "{}", refused(text));
    }

    #[test]
    fn metrics_beyond_this_host_need_saying_so() {
        for addr in ["0.0.0.0:9400", "[::]:9400", "10.1.2.3:9400"] {
            let e = refused(&format!("[metrics]\nlisten = \"{addr}\"\n"));
            assert!(e.contains("metrics.listen") && e.contains("metrics.public"), "{e}");
            Config::parse(&format!("[metrics]\nlisten = \"{addr}\"\npublic = true\n"), "w").unwrap();
        }
        Config::parse("[metrics]\nlisten = \"127.0.0.1:9400\"\n", "w").unwrap();
        Config::parse("[metrics]\nlisten = \"[::1]:9400\"\n", "w").unwrap();
    }
}
