//! A systemd unit's sandbox, emulated without systemd: the unit file in `systemd/` is parsed and
//! its process is started in a private mount namespace with the restrictions the unit declares,
//! so the tests and the shipped units cannot drift apart.
//!
//! Emulated from the unit's `[Service]` section: `ProtectSystem=` (strict: every mount read-only
//! but /dev, /proc, /sys), `ProtectHome=` (/home, /root, /run/user replaced by an empty read-only
//! tmpfs), `PrivateTmp=` (a fresh /tmp and /var/tmp), `ProtectKernelTunables=` (/sys and
//! /proc/sys read-only), `ProtectControlGroups=` (/sys/fs/cgroup read-only), the writable
//! `StateDirectory=`, `RuntimeDirectory=`, `LogsDirectory=`, `CacheDirectory=` (each a fresh
//! directory owned by the unit's user, bound at its place) and `ReadWritePaths=`, `User=`,
//! `Group=`, `CapabilityBoundingSet=`, `NoNewPrivileges=`, `UMask=`, a clean environment, and
//! `ExecStart=` (its program replaced by the one Cargo built). Not emulated: seccomp
//! (`SystemCallFilter=`), `DevicePolicy=`, `RestrictNamespaces=` and the other settings that do
//! not decide where a process may write.
//!
//! The process runs under `strace`, which records every failing file-system call: a write the
//! sandbox refused (`EROFS`, or `EACCES` on a write) is reported by [`Running::refused_writes`]
//! even when the daemon only logs it and goes on.
//!
//! The mount points of the writable directories (e.g. /var/lib/wattson) are created on the host
//! when absent, as systemd itself does; nothing is written inside them: each is covered by a
//! fresh directory of the test within the namespace.
#![allow(dead_code)]

use std::fmt::Write as _;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `[Service]` assignments of a unit file, in order.
pub struct Unit {
    /// The file's name, for messages.
    pub name: String,
    service: Vec<(String, String)>,
    unit: Vec<(String, String)>,
}

impl Unit {
    /// Reads `systemd/<name>` from the repository.
    pub fn shipped(name: &str) -> Unit {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd").join(name);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        Unit::parse(name, &text)
    }

    /// Parses a unit file's text: sections, `Key=value` lines, comments, continued lines.
    pub fn parse(name: &str, text: &str) -> Unit {
        let mut unit = Unit { name: name.to_string(), service: Vec::new(), unit: Vec::new() };
        let mut section = String::new();
        let mut pending = String::new();
        for raw in text.lines() {
            let line = raw.trim();
            if pending.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with(';')) {
                continue;
            }
            if let Some(head) = line.strip_suffix('\\') {
                pending.push_str(head);
                pending.push(' ');
                continue;
            }
            let whole = std::mem::take(&mut pending) + line;
            if let Some(name) = whole.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                section = name.to_string();
                continue;
            }
            let (key, value) =
                whole.split_once('=').unwrap_or_else(|| panic!("{name}: not an assignment: {whole}"));
            let entry = (key.trim().to_string(), value.trim().to_string());
            match section.as_str() {
                "Service" => unit.service.push(entry),
                "Unit" => unit.unit.push(entry),
                _ => {}
            }
        }
        unit
    }

    /// The last value of a single-valued `[Service]` key.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.service.iter().rev().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// Whether a boolean `[Service]` key is on.
    pub fn yes(&self, key: &str) -> bool {
        matches!(self.get(key), Some("yes" | "true" | "on" | "1"))
    }

    /// The words of a list-valued `[Service]` key, as systemd builds them: every assignment adds
    /// its words, an empty assignment clears the list. `None` when the key is absent.
    pub fn words(&self, key: &str) -> Option<Vec<String>> {
        let mut out: Option<Vec<String>> = None;
        for (_, value) in self.service.iter().filter(|(k, _)| k == key) {
            let list = out.get_or_insert_with(Vec::new);
            if value.is_empty() {
                list.clear();
            }
            list.extend(value.split_whitespace().map(str::to_string));
        }
        out
    }

    /// Every value of a `[Unit]` key (e.g. `Documentation`).
    pub fn unit_words(&self, key: &str) -> Vec<String> {
        self.unit
            .iter()
            .filter(|(k, _)| k == key)
            .flat_map(|(_, v)| v.split_whitespace().map(str::to_string))
            .collect()
    }

    /// The places the unit lets its process write, each with whether systemd creates it for
    /// the unit (and hands it to the unit's user).
    pub fn writable_paths(&self) -> Vec<(PathBuf, bool)> {
        let mut out = Vec::new();
        for (key, base) in [
            ("StateDirectory", "/var/lib"),
            ("RuntimeDirectory", "/run"),
            ("LogsDirectory", "/var/log"),
            ("CacheDirectory", "/var/cache"),
        ] {
            for dir in self.words(key).unwrap_or_default() {
                out.push((Path::new(base).join(dir), true));
            }
        }
        for path in self.words("ReadWritePaths").unwrap_or_default() {
            out.push((PathBuf::from(path.trim_start_matches(['-', '+'])), false));
        }
        out
    }
}

/// How a test runs a unit's program in the unit's sandbox.
pub struct Sandbox<'a> {
    /// The unit.
    pub unit: &'a Unit,
    /// `ExecStart=`'s program replaced by this one (Cargo's build of it).
    pub program: PathBuf,
    /// A whole command line instead of `ExecStart=`'s (for probing the sandbox itself).
    pub command: Option<Vec<String>>,
    /// Replacements of `ExecStart=` arguments (e.g. the configuration file's path).
    pub replace_args: Vec<(String, String)>,
    /// More environment on top of systemd's clean one (fake GPUs, `SLURM_CONF`).
    pub env: Vec<(String, String)>,
    /// Paths that stand for files a real node has outside /tmp and /home (Slurm's
    /// configuration, the build tree standing for /usr): visible read-only where the unit
    /// would hide them.
    pub fixtures: Vec<PathBuf>,
    /// Paths that stand for devices the unit may use (the fake GPUs' state stands for
    /// /dev/nvidia*): writable.
    pub devices: Vec<PathBuf>,
    /// Where the test keeps the sandbox's directories, trace and log.
    pub work: PathBuf,
}

/// A unit's program running in its sandbox.
pub struct Running {
    child: Child,
    /// The host directory bound at each writable path of the unit.
    pub writable: Vec<(PathBuf, PathBuf)>,
    trace: PathBuf,
    log: PathBuf,
}

/// The system calls whose failures the trace keeps.
const TRACED: &str = "trace=open,openat,openat2,creat,mkdir,mkdirat,rename,renameat,renameat2,unlink,unlinkat,\
link,linkat,symlink,symlinkat,chmod,fchmodat,chown,fchownat,lchown,truncate,utimensat,mknod,mknodat,bind";

fn quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "'\\''"))
}

fn quote_path(p: &Path) -> String {
    quote(&p.to_string_lossy())
}

/// Mount points of the test's own mount namespace (the sandbox starts from a copy of it).
fn mount_points() -> Vec<PathBuf> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").expect("mountinfo");
    text.lines()
        .filter_map(|l| l.split(' ').nth(4))
        .map(|p| {
            // Octal escapes (\040 for a space) in mount points.
            let mut out = String::new();
            let mut chars = p.chars().peekable();
            while let Some(c) = chars.next() {
                if c == '\\' {
                    let code: String = chars.by_ref().take(3).collect();
                    out.push(u8::from_str_radix(&code, 8).map(char::from).unwrap_or('?'));
                } else {
                    out.push(c);
                }
            }
            PathBuf::from(out)
        })
        .collect()
}

fn under(path: &Path, roots: &[&str]) -> bool {
    roots.iter().any(|r| path.starts_with(r))
}

impl Sandbox<'_> {
    /// `ExecStart=`'s argv with the program and replaced arguments swapped in.
    fn argv(&self) -> Vec<String> {
        if let Some(command) = &self.command {
            return command.clone();
        }
        let exec = self.unit.get("ExecStart").unwrap_or_else(|| panic!("{}: no ExecStart", self.unit.name));
        let mut words: Vec<String> = exec.split_whitespace().map(str::to_string).collect();
        words[0] = self.program.to_string_lossy().into_owned();
        for w in &mut words[1..] {
            if let Some((_, to)) = self.replace_args.iter().find(|(from, _)| from == w) {
                *w = to.clone();
            }
        }
        words
    }

    /// Directories the unit hides (PrivateTmp, ProtectHome) that exist here.
    fn hidden(&self) -> Vec<(&'static str, bool)> {
        let mut out = Vec::new();
        if self.unit.yes("PrivateTmp") {
            out.extend([("/tmp", true), ("/var/tmp", true)]);
        }
        if let Some("yes" | "true" | "read-only" | "tmpfs") = self.unit.get("ProtectHome") {
            out.extend([("/home", false), ("/root", false), ("/run/user", false)]);
        }
        out.retain(|(d, _)| Path::new(d).is_dir());
        out
    }

    /// The shell script that builds the namespace's mounts and starts the program.
    fn script(&self, writable: &[(PathBuf, PathBuf)]) -> String {
        let mut s = String::from("set -eu\n");
        // Every bind source is opened first: later steps hide or freeze the paths themselves.
        let mut fd = 10;
        let mut binds = Vec::new(); // (fd, target, writable)
        for (target, backing) in writable {
            writeln!(s, "exec {fd}<{}", quote_path(backing)).unwrap();
            binds.push((fd, target.clone(), true));
            fd += 1;
        }
        for (paths, rw) in [(&self.fixtures, false), (&self.devices, true)] {
            for p in paths {
                writeln!(s, "exec {fd}<{}", quote_path(p)).unwrap();
                binds.push((fd, p.clone(), rw));
                fd += 1;
            }
        }
        let system = self.unit.get("ProtectSystem");
        let frozen: Vec<PathBuf> = match system {
            Some("strict") => {
                mount_points().into_iter().filter(|m| !under(m, &["/proc", "/sys", "/dev"])).collect()
            }
            Some("full") => ["/usr", "/boot", "/efi", "/etc"].map(PathBuf::from).to_vec(),
            Some("yes" | "true") => ["/usr", "/boot", "/efi"].map(PathBuf::from).to_vec(),
            _ => Vec::new(),
        };
        for m in frozen.iter().filter(|m| m.exists()) {
            let m = quote_path(m);
            if system != Some("strict") {
                // Not necessarily a mount point of its own: bind it onto itself first.
                writeln!(s, "mount -c --bind {m} {m}").unwrap();
            }
            writeln!(s, "mount -c -o remount,bind,ro {m}").unwrap();
        }
        if self.unit.yes("ProtectKernelTunables") {
            s.push_str("mount -c --bind /proc/sys /proc/sys\nmount -c -o remount,bind,ro /proc/sys\n");
            s.push_str("mount -c -o remount,bind,ro /sys\n");
        }
        if self.unit.yes("ProtectControlGroups") && Path::new("/sys/fs/cgroup").is_dir() {
            s.push_str("mount -c -o remount,bind,ro /sys/fs/cgroup\n");
        }
        for (dir, private) in self.hidden() {
            let mode = if private { "1777" } else { "0755" };
            writeln!(s, "mount -t tmpfs -o mode={mode},nosuid,nodev tmpfs {dir}").unwrap();
        }
        for (fd, target, rw) in &binds {
            let t = quote_path(target);
            writeln!(s, "mkdir -p {t}\nmount -c --bind /proc/self/fd/{fd} {t}").unwrap();
            let mode = if *rw { "rw" } else { "ro" };
            writeln!(s, "mount -c -o remount,bind,{mode} {t}\nexec {fd}<&-").unwrap();
        }
        for (dir, private) in self.hidden() {
            if !private {
                writeln!(s, "mount -c -o remount,bind,ro {dir}").unwrap();
            }
        }
        if let Some(mask) = self.unit.get("UMask") {
            writeln!(s, "umask {mask}").unwrap();
        }
        // The program, traced, with systemd's clean environment, user and capabilities.
        write!(s, "exec strace -f -qq -Z -e {TRACED} -o /proc/self/fd/1 -- env -i").unwrap();
        write!(s, " PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin").unwrap();
        for (k, v) in &self.env {
            write!(s, " {}", quote(&format!("{k}={v}"))).unwrap();
        }
        write!(s, " setpriv").unwrap();
        if let Some(user) = self.unit.get("User").filter(|u| *u != "root") {
            let group =
                self.unit.get("Group").map(quote).unwrap_or_else(|| format!("\"$(id -g {})\"", quote(user)));
            write!(s, " --reuid={} --regid={group} --init-groups", quote(user)).unwrap();
        }
        if let Some(caps) = self.unit.words("CapabilityBoundingSet") {
            let mut set = String::from("-all");
            for c in caps {
                write!(set, ",+{}", c.trim_start_matches("CAP_").to_lowercase()).unwrap();
            }
            write!(s, " --bounding-set={set} --inh-caps=-all").unwrap();
        }
        if self.unit.yes("NoNewPrivileges") {
            s.push_str(" --no-new-privs");
        }
        s.push_str(" --");
        for w in self.argv() {
            write!(s, " {}", quote(&w)).unwrap();
        }
        s.push('\n');
        s
    }

    /// Starts the program in the sandbox; panics when `strace` is missing.
    pub fn start(&self) -> Running {
        assert!(
            Command::new("strace").arg("-V").output().is_ok_and(|o| o.status.success()),
            "the unit sandbox tests need strace (scripts/install-deps installs it)"
        );
        std::fs::create_dir_all(&self.work).unwrap();
        let owner = self.unit.get("User").unwrap_or("root");
        let mut writable = Vec::new();
        for (i, (target, created)) in self.unit.writable_paths().into_iter().enumerate() {
            // systemd creates the unit's directories (and their mount points) itself.
            std::fs::create_dir_all(&target).unwrap_or_else(|e| panic!("{}: {e}", target.display()));
            let backing = self.work.join(format!("writable-{i}"));
            std::fs::create_dir_all(&backing).unwrap();
            std::fs::set_permissions(&backing, std::fs::Permissions::from_mode(0o755)).unwrap();
            if created {
                let status = Command::new("chown").arg(format!("{owner}:")).arg(&backing).status().unwrap();
                assert!(status.success(), "chown {owner} {}", backing.display());
            }
            writable.push((target, backing));
        }
        let script = self.script(&writable);
        std::fs::write(self.work.join("sandbox.sh"), &script).unwrap();
        let trace = self.work.join("trace");
        let log = self.work.join("log");
        let child = Command::new("unshare")
            .args(["-m", "--propagation", "private", "bash", "-c", &script])
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&trace).unwrap())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("unshare");
        Running { child, writable, trace, log }
    }
}

impl Running {
    /// The host directory standing for the writable path `inside` (e.g. /var/lib/wattson).
    /// `None` when the unit does not let its process write there.
    pub fn host_dir(&self, inside: &str) -> Option<&Path> {
        self.writable.iter().find(|(t, _)| t == Path::new(inside)).map(|(_, host)| host.as_path())
    }

    /// What the program (and the sandbox's setup) wrote on stderr.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Failing calls that tried to write where the sandbox does not allow it.
    pub fn refused_writes(&self) -> Vec<String> {
        let text = std::fs::read_to_string(&self.trace).unwrap_or_default();
        text.lines()
            .filter(|l| {
                l.contains("EROFS")
                    || ((l.contains("EACCES") || l.contains("EPERM"))
                        && (l.contains("O_WRONLY")
                            || l.contains("O_RDWR")
                            || l.contains("O_CREAT")
                            || !l.contains("open")))
            })
            .map(str::to_string)
            .collect()
    }

    /// Whether the sandbox (or the program) has exited, with its status.
    pub fn exited(&mut self) -> Option<std::process::ExitStatus> {
        self.child.try_wait().unwrap()
    }

    /// The program's pid (strace's only child), once it runs.
    fn program_pid(&self) -> Option<u32> {
        let pid = self.child.id();
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .ok()?
            .split_whitespace()
            .next()?
            .parse()
            .ok()
    }

    /// Waits until `done` holds (checked every 100 ms); panics with the log after `timeout`,
    /// and at once when `strict` and a write was refused.
    pub fn wait_for(
        &mut self,
        timeout: Duration,
        what: &str,
        strict: bool,
        mut done: impl FnMut(&Running) -> bool,
    ) {
        let deadline = Instant::now() + timeout;
        while !done(self) {
            let refused = self.refused_writes();
            assert!(
                !strict || refused.is_empty(),
                "writes outside the unit's paths before {what}:\n{}\n{}",
                refused.join("\n"),
                self.log()
            );
            if let Some(status) = self.exited() {
                panic!("the sandboxed program exited ({status}) before {what}:\n{}", self.log());
            }
            assert!(Instant::now() < deadline, "no {what} after {timeout:?}:\n{}", self.log());
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Stops the program as systemd would (SIGTERM, then SIGKILL after 10 s).
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        if let Some(pid) = self.program_pid() {
            let _ = Command::new("kill").args(["-TERM", &pid.to_string()]).status();
        }
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Some(status) = self.exited() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        if let Some(pid) = self.program_pid() {
            let _ = Command::new("kill").args(["-KILL", &pid.to_string()]).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        if self.exited().is_none() {
            self.stop();
        }
    }
}
