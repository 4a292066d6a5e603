//! Files the daemon (root) keeps: one daemon per store, a corrupt store kept aside, files
//! created without following links and written atomically, and no directory a user could
//! swap files in.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use wattson_store::{Store, StoreError};

/// The exclusive lock on a store, held for the life of the daemon (released by the kernel
/// when the process ends, however it ends).
#[derive(Debug)]
pub struct StoreLock {
    _file: File,
}

/// The lock file beside `store`.
pub fn lock_path(store: &Path) -> PathBuf {
    let mut name = store.as_os_str().to_owned();
    name.push(".lock");
    PathBuf::from(name)
}

/// Takes the store's lock, or says which daemon holds it: two daemons on one store would both
/// meter and both restore the same GPUs.
pub fn lock_store(store: &Path) -> Result<StoreLock, String> {
    let path = lock_path(store);
    let mut file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| format!("cannot open the lock {}: {e}", path.display()))?;
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            let who = if holder.is_empty() { String::new() } else { format!(" (pid {holder})") };
            return Err(format!(
                "another wattsond{who} is using the store {}; stop it first (its lock: {})",
                store.display(),
                path.display()
            ));
        }
        Err(TryLockError::Error(e)) => return Err(format!("cannot lock {}: {e}", path.display())),
    }
    let write_pid = |file: &mut File| -> std::io::Result<()> {
        file.set_len(0)?;
        file.rewind()?;
        writeln!(file, "{}", std::process::id())
    };
    write_pid(&mut file).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(StoreLock { _file: file })
}

/// How the store was opened.
pub enum Opened {
    /// The file was sound.
    Intact(Store),
    /// The file was corrupt: it (and its WAL) now lie at `aside`, and `store` is fresh.
    Replaced {
        /// The fresh store.
        store: Store,
        /// Where the corrupt file was kept.
        aside: PathBuf,
    },
}

/// Opens the daemon's store; a corrupt one (not a database, or failing SQLite's quick check) is
/// renamed aside with its WAL and shared memory, never deleted, and a fresh one is created.
pub fn open_store(path: &Path) -> Result<Opened, String> {
    match Store::open(path) {
        Ok(store) => match store.is_intact() {
            Ok(true) => return Ok(Opened::Intact(store)),
            Ok(false) => {}
            Err(e) => return Err(format!("cannot check the store: {e}")),
        },
        Err(StoreError::NotADatabase { .. }) => {}
        Err(e) => return Err(format!("cannot open the store: {e}")),
    }
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or_default();
    let with = |suffix: &str| {
        let mut name = path.as_os_str().to_owned();
        name.push(suffix);
        PathBuf::from(name)
    };
    let aside = with(&format!(".corrupt-{stamp}"));
    for suffix in ["", "-wal", "-shm"] {
        match std::fs::rename(with(suffix), with(&format!(".corrupt-{stamp}{suffix}"))) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(format!("the store is corrupt and cannot be kept aside: {e}"));
            }
            _ => {}
        }
    }
    let store = Store::open(path).map_err(|e| format!("cannot create a fresh store: {e}"))?;
    Ok(Opened::Replaced { store, aside })
}

/// The progress file a job was given before the daemon restarted, if it is still the plain
/// file it was (not a link, owned by the job's user when the daemon is root): the job may hold
/// it open. Else a fresh one, as [`create_progress_file`].
pub fn reuse_progress_file(dir: &Path, job_id: u32, uid: u32) -> std::io::Result<PathBuf> {
    let path = dir.join(job_id.to_string());
    match std::fs::symlink_metadata(&path) {
        Ok(m) if m.file_type().is_file() && (!nix::unistd::geteuid().is_root() || m.uid() == uid) => Ok(path),
        _ => create_progress_file(dir, job_id, uid),
    }
}

/// Creates the job's progress file, owned by the job's user when the daemon is root. Never
/// follows a link; ownership changes on the open file, so nothing can be swapped in between.
pub fn create_progress_file(dir: &Path, job_id: u32, uid: u32) -> std::io::Result<PathBuf> {
    let path = dir.join(job_id.to_string());
    match std::fs::remove_file(&path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)?;
    if nix::unistd::geteuid().is_root()
        && let Err(e) = std::os::unix::fs::fchown(&file, Some(uid), None)
    {
        // A file the job cannot write is no progress file.
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    Ok(path)
}

/// Replaces `path` with `bytes` so that a reader sees the old or the new file whole, also
/// after a crash: a fresh temporary file (never a link), synced, renamed over, directory
/// synced.
pub fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = path.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(format!(".tmp.{}", std::process::id()));
    let tmp = dir.join(name);
    let _ = std::fs::remove_file(&tmp);
    let mut file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&tmp)?;
    let written = file.write_all(bytes).and_then(|()| file.sync_all());
    if let Err(e) = written.and_then(|()| std::fs::rename(&tmp, path)) {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    File::open(dir)?.sync_all()
}

/// Creates `dir` if missing (mode 0755) and refuses it if a user could write in it.
pub fn trusted_dir(dir: &Path, what: &str) -> Result<(), String> {
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o755)
        .create(dir)
        .map_err(|e| format!("cannot create {what} {}: {e}", dir.display()))?;
    check_trusted_dir(dir, what)
}

/// Refuses a directory where a user other than root (or the daemon's own user) could create,
/// rename or replace files: the daemon would then write where a user chose.
pub fn check_trusted_dir(dir: &Path, what: &str) -> Result<(), String> {
    let meta = std::fs::metadata(dir).map_err(|e| format!("cannot inspect {what} {}: {e}", dir.display()))?;
    let euid = nix::unistd::geteuid().as_raw();
    let trusted_owner = meta.uid() == 0 || meta.uid() == euid;
    let writable_by_others = meta.mode() & 0o022 != 0;
    if !trusted_owner || writable_by_others {
        return Err(format!(
            "{what} {} is writable by other users (owner uid {}, mode {:o}); use a directory only \
             root can write, such as /var/lib/wattson",
            dir.display(),
            meta.uid(),
            meta.mode() & 0o7777
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn the_second_lock_names_the_first_holder() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("w.db");
        let first = lock_store(&store).unwrap();
        let err = lock_store(&store).unwrap_err();
        assert!(err.contains(&format!("pid {}", std::process::id())), "{err}");
        drop(first);
        lock_store(&store).unwrap();
        let mode = std::fs::metadata(lock_path(&store)).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    #[test]
    fn a_lock_path_that_is_a_symlink_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = dir.path().join("w.db");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), lock_path(&store)).unwrap();
        assert!(lock_store(&store).is_err());
        assert!(!dir.path().join("elsewhere").exists());
    }

    #[test]
    fn atomic_writes_replace_whole_files_and_never_follow_links() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("models.json");
        write_atomically(&path, b"one").unwrap();
        write_atomically(&path, b"two").unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"two");
        // A link where the temporary file goes is removed, not followed.
        let victim = dir.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        let tmp = dir.path().join(format!("models.json.tmp.{}", std::process::id()));
        std::os::unix::fs::symlink(&victim, &tmp).unwrap();
        write_atomically(&path, b"three").unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert_eq!(std::fs::read(&path).unwrap(), b"three");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2, "no temporary file left");
    }

    #[test]
    fn a_directory_others_can_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        check_trusted_dir(dir.path(), "store directory").unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        let err = check_trusted_dir(dir.path(), "store directory").unwrap_err();
        assert!(err.contains("writable by other users") && err.contains("1777"), "{err}");
    }
}
