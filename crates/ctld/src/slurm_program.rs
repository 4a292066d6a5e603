//! What every program Slurm runs for wattson does first: become an ordinary process again
//! (Slurm closes the standard streams and blocks most signals) and find its configuration
//! (Slurm passes no environment but `SLURM_CONF`).

use std::path::PathBuf;

/// A fixed PATH for the programs and the commands they run.
pub const PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

/// The configuration the programs read: `$WATTSON_CONFIG`, else the file
/// [`wattson_config::locate`] finds (beside Slurm's `slurm.conf` through `$SLURM_CONF` first).
pub fn config_path() -> PathBuf {
    match std::env::var_os("WATTSON_CONFIG") {
        Some(path) => PathBuf::from(path),
        None => wattson_config::locate::path(),
    }
}

/// Makes the process an ordinary one again: standard streams open (on /dev/null where Slurm
/// closed them, so no file opened later lands on fd 0-2), no signal blocked or ignored, a
/// fixed PATH. Call first, before any thread starts.
pub fn reset_process() {
    // SAFETY: plain system calls on this process's own descriptors and signal state, done
    // before any thread is started.
    unsafe {
        for fd in 0..3 {
            if libc::fcntl(fd, libc::F_GETFD) == -1 {
                let opened = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR);
                if opened >= 0 && opened != fd {
                    libc::dup2(opened, fd);
                    libc::close(opened);
                }
            }
        }
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
        for signal in [
            libc::SIGHUP,
            libc::SIGINT,
            libc::SIGQUIT,
            libc::SIGPIPE,
            libc::SIGTERM,
            libc::SIGCHLD,
            libc::SIGALRM,
        ] {
            libc::signal(signal, libc::SIG_DFL);
        }
        // SAFETY (set_var): single-threaded at this point.
        std::env::set_var("PATH", PATH);
        if std::env::var_os("SLURM_CONF").is_none()
            && let Some(conf) = parent_slurm_conf()
        {
            std::env::set_var("SLURM_CONF", conf);
        }
    }
}

/// `SLURM_CONF` of the parent (slurmctld), which Slurm does not pass to `PrologSlurmctld`: where
/// Slurm's configuration is not at its default path, `scontrol` would not find it.
fn parent_slurm_conf() -> Option<std::ffi::OsString> {
    use std::os::unix::ffi::OsStrExt;
    let environ = std::fs::read(format!("/proc/{}/environ", std::os::unix::process::parent_id())).ok()?;
    let value = environ.split(|&b| b == 0).find_map(|var| var.strip_prefix(b"SLURM_CONF="))?;
    Some(std::ffi::OsStr::from_bytes(value).to_os_string())
}
