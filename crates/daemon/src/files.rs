//! Files the daemon (root) keeps: one daemon per store, a corrupt store kept aside, files
//! created without following links and written atomically, and no directory a user could
//! swap files in.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

pub use crate::safedir::TrustedDir;
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
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(&path)
        .map_err(|e| format!("cannot open the lock {}: {e}", path.display()))?;
    match take(file, &path)? {
        Taken::Ours(file) => Ok(StoreLock { _file: file }),
        Taken::Held(who) => Err(format!(
            "another wattsond{who} is using the store {}; stop it first (its lock: {})",
            store.display(),
            path.display()
        )),
    }
}

/// Where the GPUs' locks are: one file per GPU UUID, the same for every daemon on the node
/// whatever its configuration (the unit's runtime directory, kept across restarts).
pub const GPU_LOCKS: &str = "/run/wattson/gpus";

/// The exclusive locks on the node's GPUs, held for the life of the daemon.
#[derive(Debug)]
pub struct GpuLocks {
    _files: Vec<File>,
}

/// Takes a lock on each GPU (by UUID) in `dir`, or says which daemon drives one already: two
/// daemons on other stores would both meter, set and restore the same GPUs.
pub fn lock_gpus(dir: &Path, uuids: &[String]) -> Result<GpuLocks, String> {
    let locks = TrustedDir::open(dir, "the GPUs' lock directory")?;
    let mut files = Vec::with_capacity(uuids.len());
    for uuid in uuids {
        let name: String =
            uuid.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '_' }).collect();
        let name = format!("{name}.lock");
        let path = dir.join(&name);
        let file =
            locks.open_lock(&name).map_err(|e| format!("cannot open the lock {}: {e}", path.display()))?;
        match take(file, &path)? {
            Taken::Ours(file) => files.push(file),
            Taken::Held(who) => {
                return Err(format!(
                    "another wattsond{who} drives GPU {uuid} (another store or configuration); one \
                     daemon per node: stop it first (its lock: {})",
                    path.display()
                ));
            }
        }
    }
    Ok(GpuLocks { _files: files })
}

/// A lock file taken, or held by another process.
enum Taken {
    /// This daemon's now, its pid written in it.
    Ours(File),
    /// Another's: ` (pid N)` as it wrote, or nothing.
    Held(String),
}

/// Takes the exclusive lock on `file` (at `path`) and writes this process's pid in it.
fn take(mut file: File, path: &Path) -> Result<Taken, String> {
    match file.try_lock() {
        Ok(()) => {}
        Err(TryLockError::WouldBlock) => {
            let mut holder = String::new();
            let _ = file.read_to_string(&mut holder);
            let holder = holder.trim();
            return Ok(Taken::Held(if holder.is_empty() {
                String::new()
            } else {
                format!(" (pid {holder})")
            }));
        }
        Err(TryLockError::Error(e)) => return Err(format!("cannot lock {}: {e}", path.display())),
    }
    let write_pid = |file: &mut File| -> std::io::Result<()> {
        file.set_len(0)?;
        file.rewind()?;
        writeln!(file, "{}", std::process::id())
    };
    write_pid(&mut file).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    Ok(Taken::Ours(file))
}

/// How the store was opened.
pub enum Opened {
    /// The file was sound.
    Intact(Store),
    /// The file was there but empty (0 bytes: truncated, or its first write lost): its records
    /// and restore journal, if it had any, are gone; `store` is new, written into it.
    WasEmpty(Store),
    /// The file was corrupt: it (and its WAL) now lie at `aside`, and `store` is fresh.
    Replaced {
        /// The fresh store.
        store: Store,
        /// Where the corrupt file was kept.
        aside: PathBuf,
    },
}

/// The text SQLite keeps of the store's first table, in the file or its WAL: it marks a
/// wattson store even where the file's header is damaged.
const STORE_MARK: &[u8] = b"CREATE TABLE job_gpus";
/// How much of the file and of its WAL is searched for [`STORE_MARK`].
const MARK_SEARCH_BYTES: u64 = 8 << 20;
/// The first bytes of every SQLite database.
const SQLITE_MAGIC: &[u8] = b"SQLite format 3\0";

/// Refuses a `store` path that names something other than a wattson store (a copy of
/// `/etc/passwd`, the configuration file, another program's database): the daemon would
/// otherwise take it for a damaged store and put it aside. Missing, empty, a store (damaged
/// or not) and a database not yet given its tables are fine.
pub fn check_store_file(path: &Path) -> Result<(), String> {
    let refuse = |what: &str| {
        Err(format!(
            "daemon.store {} {what}, not a wattson store; it is left as it is. Give the path of \
             a wattson store or of a file that does not exist yet",
            path.display()
        ))
    };
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(format!("cannot inspect daemon.store {}: {e}", path.display())),
    };
    if !meta.is_file() {
        return refuse("is not a regular file");
    }
    if meta.len() == 0 {
        return Ok(());
    }
    let head = |path: &Path| -> std::io::Result<Vec<u8>> {
        let file =
            OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC).open(path)?;
        let mut bytes = Vec::new();
        file.take(MARK_SEARCH_BYTES).read_to_end(&mut bytes)?;
        Ok(bytes)
    };
    let marked = |bytes: &[u8]| bytes.windows(STORE_MARK.len()).any(|w| w == STORE_MARK);
    let bytes = head(path).map_err(|e| format!("cannot read daemon.store {}: {e}", path.display()))?;
    let wal = head(&with_suffix(path, "-wal")).unwrap_or_default();
    if marked(&bytes) || marked(&wal) {
        return Ok(());
    }
    if !bytes.starts_with(SQLITE_MAGIC) {
        return refuse("holds other data");
    }
    // A database of one page and an empty log has no table yet: a store created by a daemon
    // stopped before it wrote its tables.
    let page = match bytes.get(16..18).map(|b| u16::from_be_bytes([b[0], b[1]])) {
        Some(1) => 65536,
        Some(n) => u32::from(n),
        None => 0,
    };
    if meta.len() <= u64::from(page) && wal.len() <= 32 {
        return Ok(());
    }
    refuse("is another program's SQLite database")
}

fn with_suffix(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_owned();
    name.push(suffix);
    PathBuf::from(name)
}

/// Opens the daemon's store; a corrupt one (not a database, or failing SQLite's quick check) is
/// renamed aside with its WAL and shared memory, never deleted, and a fresh one is created.
/// A file that is not a wattson store at all is refused ([`check_store_file`]).
pub fn open_store(path: &Path) -> Result<Opened, String> {
    check_store_file(path)?;
    let empty = std::fs::metadata(path).is_ok_and(|m| m.len() == 0)
        && std::fs::metadata(with_suffix(path, "-wal")).map_or(true, |m| m.len() == 0);
    match Store::open(path) {
        Ok(store) => match store.is_intact() {
            Ok(true) if empty => return Ok(Opened::WasEmpty(store)),
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
    let with = |suffix: &str| with_suffix(path, suffix);
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
/// it open. Else a fresh one, as [`create_progress_file`]. Returns the file's name in `dir`.
pub fn reuse_progress_file(dir: &TrustedDir, job_id: u32, uid: u32) -> std::io::Result<String> {
    let name = job_id.to_string();
    match dir.stat(&name)? {
        Some(st)
            if st.st_mode & libc::S_IFMT == libc::S_IFREG
                && (!nix::unistd::geteuid().is_root() || st.st_uid == uid) =>
        {
            Ok(name)
        }
        _ => create_progress_file(dir, job_id, uid),
    }
}

/// Creates the job's progress file in `dir`, readable and writable by the job's user only
/// (its owner when the daemon is root). Never follows a link; ownership changes on the open
/// file, so nothing can be swapped in between. Returns the file's name in `dir`.
pub fn create_progress_file(dir: &TrustedDir, job_id: u32, uid: u32) -> std::io::Result<String> {
    let name = job_id.to_string();
    let owner = nix::unistd::geteuid().is_root().then_some(uid);
    dir.create(&name, 0o600, owner)?;
    Ok(name)
}

/// Creates `dir` if missing and refuses it if a user could write in it or change where its
/// path leads (see [`TrustedDir`]).
pub fn trusted_dir(dir: &Path, what: &str) -> Result<(), String> {
    TrustedDir::open(dir, what).map(drop)
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
    fn stores_young_old_or_damaged_pass_and_other_files_do_not() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("w.db");
        check_store_file(&path).unwrap();
        std::fs::write(&path, b"").unwrap();
        check_store_file(&path).unwrap();
        drop(Store::open(&path).unwrap());
        check_store_file(&path).unwrap();
        // A header wiped, as in the fault test: still a store (its tables' text remains).
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[..100].fill(0x5a);
        std::fs::write(&path, &bytes).unwrap();
        check_store_file(&path).unwrap();
        std::fs::write(&path, b"root:x:0:0:root:/root:/bin/bash\n").unwrap();
        let err = check_store_file(&path).unwrap_err();
        assert!(err.contains("daemon.store") && err.contains("not a wattson store"), "{err}");
        assert!(check_store_file(dir.path()).unwrap_err().contains("not a regular file"));
    }

    #[test]
    fn a_directory_others_can_write_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        trusted_dir(dir.path(), "store directory").unwrap();
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o1777)).unwrap();
        let err = trusted_dir(dir.path(), "store directory").unwrap_err();
        assert!(err.contains("writable by other users") && err.contains("1777"), "{err}");
    }
}
