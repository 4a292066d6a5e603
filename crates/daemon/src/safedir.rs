//! Directories the daemon (root) creates files in, opened once and verified along their whole
//! path, then used only through the open handle.
//!
//! The path is resolved one component at a time from `/`, never letting the kernel follow a
//! link: every directory and link met must belong to root (or the daemon's own user), and no
//! directory on the way may be writable by others unless it is sticky (as `/tmp` is: there a
//! user can neither rename nor replace an entry that is not theirs). The directory itself must
//! be writable by its owner only. Links owned by root are followed by reading them, so
//! `/var/run -> /run` is fine; a link a user planted is refused. Files are then created,
//! read, renamed and removed relative to the open directory (`openat`, `renameat`,
//! `unlinkat`), so no later change to the path can redirect them.
//!
//! Written by hand on `nix`'s `*at` calls: `openat2(RESOLVE_NO_SYMLINKS)` would refuse the
//! root-owned links many systems have on such paths, and no crate in the tree checks
//! ownership along the way.

use std::collections::VecDeque;
use std::ffi::{OsStr, OsString};
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use nix::errno::Errno;
use nix::fcntl::{AtFlags, OFlag, openat, readlinkat, renameat};
use nix::sys::stat::{FileStat, Mode, SFlag, fstat, fstatat, mkdirat};
use nix::unistd::{UnlinkatFlags, unlinkat};
use wattson_config::EngineConfig;

/// Most links followed while resolving one path (as the kernel's own limit).
const MAX_LINKS: usize = 40;

/// A directory opened once, after checking that nobody but root can change what its path
/// names; files inside are reached only through it.
#[derive(Debug)]
pub struct TrustedDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl TrustedDir {
    /// Opens `path` (creating what is missing of it, mode 0755), checking every directory
    /// and link on the way; `what` names it in errors (a config key).
    pub fn open(path: &Path, what: &str) -> Result<TrustedDir, String> {
        let fd = resolve(path, true)
            .map_err(|e| format!("{what} {}: {e}", path.display()))?
            .expect("missing directories are created");
        Ok(TrustedDir { fd, path: path.to_path_buf() })
    }

    /// Checks `path` as [`TrustedDir::open`] would, creating nothing: a missing part would be
    /// created inside a directory that passed.
    pub fn check(path: &Path, what: &str) -> Result<(), String> {
        resolve(path, false).map(drop).map_err(|e| format!("{what} {}: {e}", path.display()))
    }

    /// The path it was opened by, for messages and for the names handed to jobs.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What `name` is inside the directory, without following a link; `None` if nothing.
    pub fn stat(&self, name: &str) -> std::io::Result<Option<FileStat>> {
        match fstatat(&self.fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
            Ok(st) => Ok(Some(st)),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Removes `name` if it is there and is not a directory.
    pub fn remove(&self, name: &str) -> std::io::Result<()> {
        match unlinkat(&self.fd, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Creates `name` afresh (whatever was there goes; never through a link) with `mode`,
    /// owned by `uid` when given; the file is open for writing.
    pub fn create(&self, name: &str, mode: u32, uid: Option<u32>) -> std::io::Result<File> {
        self.remove(name)?;
        let flags = OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let file = File::from(openat(&self.fd, name, flags, Mode::from_bits_truncate(mode))?);
        if let Some(uid) = uid
            && let Err(e) = std::os::unix::fs::fchown(&file, Some(uid), None)
        {
            let _ = self.remove(name);
            return Err(e);
        }
        Ok(file)
    }

    /// Opens `name` for reading and writing, created (mode 0600) if missing, never through a
    /// link: a lock file, kept between runs.
    pub fn open_lock(&self, name: &str) -> std::io::Result<File> {
        let flags = OFlag::O_RDWR | OFlag::O_CREAT | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let file = File::from(openat(&self.fd, name, flags, Mode::from_bits_truncate(0o600))?);
        if !file.metadata()?.file_type().is_file() {
            return Err(std::io::Error::other(format!("{name} is not a plain file")));
        }
        Ok(file)
    }

    /// Opens `name` for reading if it is a plain file (never a link, a pipe or a device,
    /// never blocking).
    pub fn open_file(&self, name: &str) -> std::io::Result<File> {
        let flags = OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
        let file = File::from(openat(&self.fd, name, flags, Mode::empty())?);
        if !file.metadata()?.file_type().is_file() {
            return Err(std::io::Error::other(format!("{name} is not a plain file")));
        }
        Ok(file)
    }

    /// Reads at most `limit` bytes of the plain file `name`.
    pub fn read(&self, name: &str, limit: u64) -> std::io::Result<Vec<u8>> {
        let mut bytes = Vec::new();
        self.open_file(name)?.take(limit).read_to_end(&mut bytes)?;
        Ok(bytes)
    }

    /// Replaces `name` with `bytes` so that a reader sees the old or the new file whole, also
    /// after a crash: a fresh temporary file, synced, renamed over, directory synced.
    pub fn write_atomically(&self, name: &str, bytes: &[u8], mode: u32) -> std::io::Result<()> {
        let tmp = format!("{name}.tmp.{}", std::process::id());
        let mut file = self.create(&tmp, mode, None)?;
        let written = file.write_all(bytes).and_then(|()| file.sync_all());
        if let Err(e) = written.and_then(|()| Ok(renameat(&self.fd, tmp.as_str(), &self.fd, name)?)) {
            let _ = self.remove(&tmp);
            return Err(e);
        }
        nix::unistd::fsync(&self.fd)?;
        Ok(())
    }
}

/// The directories of the models' files (`[engine] progress_dir` and the directory of
/// `models_file`), opened and checked once at start.
#[derive(Debug, Clone)]
pub struct EngineDirs {
    /// Where each job's progress file is created, named by its job id.
    pub progress: Arc<TrustedDir>,
    /// The directory of the model table.
    pub models: Arc<TrustedDir>,
    /// The model table's file name in `models`.
    pub models_name: String,
}

impl EngineDirs {
    /// Opens and checks both directories of `engine`'s files.
    pub fn open(engine: &EngineConfig) -> Result<EngineDirs, String> {
        // Files named by job id are created and removed there: never among the system's own.
        if engine.progress_dir.parent().is_none() {
            return Err("engine.progress_dir must be a directory of its own, not /".into());
        }
        let progress = TrustedDir::open(&engine.progress_dir, "engine.progress_dir")?;
        let file = &engine.models_file;
        let (Some(dir), Some(name)) = (file.parent(), file.file_name().and_then(|n| n.to_str())) else {
            return Err(format!("engine.models_file {} names no file", file.display()));
        };
        let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
        let models = TrustedDir::open(dir, "the directory of engine.models_file")?;
        check_model_table(&models, name, file)?;
        Ok(EngineDirs {
            progress: Arc::new(progress),
            models: Arc::new(models),
            models_name: name.to_string(),
        })
    }
}

impl EngineDirs {
    /// Checks both directories and the model table as [`EngineDirs::open`] would, creating
    /// nothing.
    pub fn check(engine: &EngineConfig) -> Result<(), String> {
        TrustedDir::check(&engine.progress_dir, "engine.progress_dir")?;
        let file = &engine.models_file;
        let dir = file.parent().filter(|d| !d.as_os_str().is_empty()).unwrap_or(Path::new("."));
        TrustedDir::check(dir, "the directory of engine.models_file")?;
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        match TrustedDir::open_existing(dir) {
            Some(models) => check_model_table(&models, name, file),
            None => Ok(()),
        }
    }
}

impl TrustedDir {
    /// `path` opened as [`TrustedDir::open`] would if it is there and passes; creates nothing.
    fn open_existing(path: &Path) -> Option<TrustedDir> {
        let fd = resolve(path, false).ok()??;
        Some(TrustedDir { fd, path: path.to_path_buf() })
    }
}

/// Largest model table read to check it.
const MAX_MODEL_TABLE_BYTES: u64 = 256 << 20;

/// Refuses a models file that exists and is not a model table: it would be overwritten at
/// the first model written.
fn check_model_table(dir: &TrustedDir, name: &str, path: &Path) -> Result<(), String> {
    let refuse = |what: String| {
        Err(format!(
            "engine.models_file {} {what}, not a wattson model table; it is left as it is. Give \
             the path of a model table or of a file that does not exist yet",
            path.display()
        ))
    };
    match dir.stat(name) {
        Ok(None) => return Ok(()),
        Ok(Some(st)) if st.st_mode & libc::S_IFMT != libc::S_IFREG => {
            return refuse("is not a regular file".into());
        }
        Ok(Some(st)) if st.st_size == 0 => return Ok(()),
        Ok(Some(_)) => {}
        Err(e) => return Err(format!("cannot inspect engine.models_file {}: {e}", path.display())),
    }
    let bytes = dir
        .read(name, MAX_MODEL_TABLE_BYTES)
        .map_err(|e| format!("cannot read engine.models_file {}: {e}", path.display()))?;
    let text = String::from_utf8_lossy(&bytes);
    match wattson_engine::ModelTable::from_json(&text) {
        Ok(_) => Ok(()),
        Err(e) => refuse(format!("holds other data ({e})")),
    }
}

/// Checks that nobody but root can change the file at `path` (a program the daemon runs, a
/// library it loads) or what its path names: its directory as [`TrustedDir::check`] checks
/// one, every link on the way root's, the file root's and writable by root only. `what` names
/// it in errors (a config key).
pub fn check_file(path: &Path, what: &str) -> Result<(), String> {
    check_file_at(path, 0).map_err(|e| format!("{what} {}: {e}", path.display()))
}

fn check_file_at(path: &Path, links: usize) -> Result<(), String> {
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Err("names no file".into());
    };
    let dir = if dir.as_os_str().is_empty() { Path::new(".") } else { dir };
    let fd = resolve(dir, false)?.ok_or_else(|| format!("{} does not exist", dir.display()))?;
    let st = match fstatat(&fd, name, AtFlags::AT_SYMLINK_NOFOLLOW) {
        Err(Errno::ENOENT) => return Err("no such file".into()),
        other => other.map_err(|e| format!("cannot inspect {}: {e}", path.display()))?,
    };
    let mode = st.st_mode & 0o7777;
    if !trusted_owner(st.st_uid) {
        return Err(format!("{} belongs to uid {}: it must be root's", path.display(), st.st_uid));
    }
    match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
        SFlag::S_IFLNK if links < MAX_LINKS => {
            let target = PathBuf::from(
                readlinkat(&fd, name).map_err(|e| format!("cannot read {}: {e}", path.display()))?,
            );
            check_file_at(&dir.join(target), links + 1)
        }
        SFlag::S_IFLNK => Err(format!("too many links at {}", path.display())),
        SFlag::S_IFREG if mode & 0o022 != 0 => Err(format!(
            "{} is writable by other users (mode {mode:o}); only root may be able to change it",
            path.display()
        )),
        SFlag::S_IFREG => Ok(()),
        _ => Err(format!("{} is not a regular file", path.display())),
    }
}

/// Whether `uid` may own what the daemon relies on: root, or the daemon's own user.
fn trusted_owner(uid: u32) -> bool {
    uid == 0 || uid == nix::unistd::geteuid().as_raw()
}

/// Opens `path` one component at a time from `/`, creating missing directories (with
/// `create`; else `None` at the first one missing), following only links that root owns,
/// refusing anything another user could change.
fn resolve(path: &Path, create: bool) -> Result<Option<OwnedFd>, String> {
    let absolute = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir().map_err(|e| format!("no working directory: {e}"))?.join(path)
    };
    let mut pending: VecDeque<OsString> = VecDeque::new();
    push_front(&mut pending, &absolute);
    let mut shown = PathBuf::from("/");
    let mut stack = vec![open_root()?];
    check_dir(&fstat(&stack[0]).map_err(|e| e.to_string())?, &shown, pending.is_empty())?;
    let mut links = 0;
    while let Some(name) = pending.pop_front() {
        if name == ".." {
            if stack.len() > 1 {
                stack.pop();
                shown.pop();
            }
            continue;
        }
        let dir = stack.last().expect("the root stays");
        let here = shown.join(&name);
        let st = match fstatat(dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW) {
            Err(Errno::ENOENT) if !create => return Ok(None),
            Err(Errno::ENOENT) => {
                match mkdirat(dir, name.as_os_str(), Mode::from_bits_truncate(0o755)) {
                    Ok(()) | Err(Errno::EEXIST) => {}
                    Err(e) => return Err(format!("cannot create {}: {e}", here.display())),
                }
                fstatat(dir, name.as_os_str(), AtFlags::AT_SYMLINK_NOFOLLOW)
            }
            other => other,
        }
        .map_err(|e| format!("cannot inspect {}: {e}", here.display()))?;
        if !trusted_owner(st.st_uid) {
            return Err(format!(
                "{} belongs to uid {}: every directory and link on the path must be root's",
                here.display(),
                st.st_uid
            ));
        }
        match SFlag::from_bits_truncate(st.st_mode) & SFlag::S_IFMT {
            SFlag::S_IFLNK => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(format!("too many links at {}", here.display()));
                }
                let target = readlinkat(dir, name.as_os_str())
                    .map_err(|e| format!("cannot read {}: {e}", here.display()))?;
                let target = PathBuf::from(target);
                if target.is_absolute() {
                    stack.truncate(1);
                    shown = PathBuf::from("/");
                }
                push_front(&mut pending, &target);
            }
            SFlag::S_IFDIR => {
                let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
                let next = openat(dir, name.as_os_str(), flags, Mode::empty())
                    .map_err(|e| format!("cannot open {}: {e}", here.display()))?;
                let opened = fstat(&next).map_err(|e| e.to_string())?;
                if (opened.st_dev, opened.st_ino) != (st.st_dev, st.st_ino) {
                    return Err(format!("{} changed while it was checked", here.display()));
                }
                check_dir(&opened, &here, pending.is_empty())?;
                stack.push(next);
                shown = here;
            }
            _ => return Err(format!("{} is not a directory", here.display())),
        }
    }
    Ok(stack.pop())
}

fn open_root() -> Result<OwnedFd, String> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC;
    openat(nix::fcntl::AT_FDCWD, "/", flags, Mode::empty()).map_err(|e| format!("cannot open /: {e}"))
}

/// Puts `path`'s components before those still to resolve (`.` dropped, `..` kept).
fn push_front(pending: &mut VecDeque<OsString>, path: &Path) {
    for component in path.components().rev() {
        match component {
            Component::Normal(name) => pending.push_front(name.to_owned()),
            Component::ParentDir => pending.push_front(OsStr::from_bytes(b"..").to_owned()),
            Component::RootDir | Component::CurDir | Component::Prefix(_) => {}
        }
    }
}

/// Refuses a directory another user could create, rename or replace entries in; an
/// ancestor (`last` false) may be sticky, since the next entry must be root's anyway.
fn check_dir(st: &FileStat, path: &Path, last: bool) -> Result<(), String> {
    let mode = st.st_mode & 0o7777;
    let sticky = mode & 0o1000 != 0;
    if !trusted_owner(st.st_uid) || (mode & 0o022 != 0 && (last || !sticky)) {
        return Err(format!(
            "{} is writable by other users (owner uid {}, mode {mode:o}); use a directory only root \
             can write, on a path only root can change, such as /var/lib/wattson",
            path.display(),
            st.st_uid,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn chmod(path: &Path, mode: u32) {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    }

    #[test]
    fn missing_directories_are_created_and_files_stay_inside() {
        let top = tempfile::tempdir().unwrap();
        chmod(top.path(), 0o755);
        let dir = TrustedDir::open(&top.path().join("a/b/../c"), "engine.progress_dir").unwrap();
        assert!(top.path().join("a/c").is_dir());
        dir.write_atomically("m.json", b"{}", 0o644).unwrap();
        assert_eq!(std::fs::read(top.path().join("a/c/m.json")).unwrap(), b"{}");
        assert_eq!(dir.read("m.json", 1).unwrap(), b"{");
        // A link in place of a file is replaced, never followed.
        let victim = top.path().join("victim");
        std::fs::write(&victim, b"keep").unwrap();
        std::os::unix::fs::symlink(&victim, top.path().join("a/c/7")).unwrap();
        drop(dir.create("7", 0o600, None).unwrap());
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep");
        assert!(dir.open_file("7").is_ok());
        dir.remove("7").unwrap();
        assert!(dir.stat("7").unwrap().is_none());
    }

    #[test]
    fn a_root_owned_link_on_the_path_is_followed_and_a_writable_directory_refused() {
        let top = tempfile::tempdir().unwrap();
        chmod(top.path(), 0o755);
        std::fs::create_dir(top.path().join("real")).unwrap();
        chmod(&top.path().join("real"), 0o755);
        std::os::unix::fs::symlink("real", top.path().join("alias")).unwrap();
        let dir = TrustedDir::open(&top.path().join("alias/p"), "x").unwrap();
        drop(dir.create("1", 0o600, None).unwrap());
        assert!(top.path().join("real/p/1").is_file());
        chmod(&top.path().join("real"), 0o777);
        let err = TrustedDir::open(&top.path().join("alias/p"), "x").unwrap_err();
        assert!(err.contains("writable by other users") && err.contains("777"), "{err}");
        // A sticky ancestor is fine; a sticky directory to write in is not.
        chmod(&top.path().join("real"), 0o1777);
        TrustedDir::open(&top.path().join("alias/p"), "x").unwrap();
        assert!(TrustedDir::open(&top.path().join("real"), "x").is_err());
    }

    #[test]
    fn a_file_is_followed_through_roots_links_to_a_file_only_root_can_change() {
        let top = tempfile::tempdir().unwrap();
        chmod(top.path(), 0o755);
        let lib = top.path().join("lib.so.1");
        std::fs::write(&lib, b"x").unwrap();
        chmod(&lib, 0o755);
        std::os::unix::fs::symlink("lib.so.1", top.path().join("lib.so")).unwrap();
        check_file(&top.path().join("lib.so"), "gpu.nvml_library").unwrap();
        // The file a root link points at is judged, not the link.
        std::os::unix::fs::chown(&lib, Some(65534), None).unwrap();
        let err = check_file(&top.path().join("lib.so"), "gpu.nvml_library").unwrap_err();
        assert!(err.starts_with("gpu.nvml_library") && err.contains("belongs to uid 65534"), "{err}");
        std::os::unix::fs::chown(&lib, Some(0), None).unwrap();
        chmod(&lib, 0o775);
        assert!(check_file(&lib, "k").unwrap_err().contains("writable by other users"));
        assert!(check_file(&top.path().join("none"), "k").unwrap_err().contains("no such file"));
        std::fs::create_dir(top.path().join("dir")).unwrap();
        assert!(check_file(&top.path().join("dir"), "k").unwrap_err().contains("not a regular file"));
    }
}
