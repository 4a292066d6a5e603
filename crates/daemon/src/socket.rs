//! The daemon's Unix socket file: bound at start, kept at its path while the daemon runs (made
//! again if someone removes it, left alone if another file takes the path), and removed at
//! the end only if it is still the one this daemon made.

use std::path::{Path, PathBuf};

use tokio::net::UnixListener;
use tracing::{error, warn};

/// How often the daemon checks that its socket is still at its path.
pub const CHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

/// Refuses a socket path where another daemon answers.
pub fn check_free(path: &Path) -> Result<(), String> {
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(format!("another wattsond is already listening on {}", path.display()));
    }
    Ok(())
}

/// Which file `path` is now (device and inode), without following a link.
fn identity(path: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::symlink_metadata(path).ok().map(|m| (m.dev(), m.ino()))
}

/// The socket this daemon listens on, and the file it made at its path.
pub struct Socket {
    /// Where clients connect.
    pub listener: UnixListener,
    path: PathBuf,
    made: Option<(u64, u64)>,
    /// Another file holds the path (said once).
    displaced: bool,
}

impl Socket {
    /// Binds the socket at `path` (its directory already checked), refusing if another daemon
    /// answers there; everyone may connect, and what they may do is decided from their
    /// credentials.
    pub fn bind(path: &Path) -> Result<Socket, String> {
        check_free(path)?;
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot remove stale socket {}: {e}", path.display())),
        }
        let listener =
            UnixListener::bind(path).map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
            .map_err(|e| format!("cannot set permissions on {}: {e}", path.display()))?;
        Ok(Socket { listener, path: path.to_path_buf(), made: identity(path), displaced: false })
    }

    /// Makes the socket again if its file was removed (clients could no longer reach the
    /// daemon); says so, once, if another file took its path, which it leaves alone.
    pub fn keep(&mut self) {
        match identity(&self.path) {
            now if now == self.made => {}
            None => match Socket::bind(&self.path) {
                Ok(again) => {
                    warn!(socket = %self.path.display(), "the socket was removed: listening there again");
                    // The old one's file is gone: dropping it removes nothing.
                    drop(std::mem::replace(self, again));
                }
                Err(e) => {
                    warn!(socket = %self.path.display(), error = %e, "the socket was removed and cannot be made again")
                }
            },
            Some(_) if !self.displaced => {
                self.displaced = true;
                error!(socket = %self.path.display(), "another file took the socket's path (another wattsond?): this daemon cannot be reached there; it leaves that file alone");
            }
            Some(_) => {}
        }
    }
}

impl Drop for Socket {
    /// Removes the socket file if it is still the one this daemon made.
    fn drop(&mut self) {
        if self.made.is_some() && identity(&self.path) == self.made {
            let _ = std::fs::remove_file(&self.path);
        }
    }
}
