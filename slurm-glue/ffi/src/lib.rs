//! What wattson's Slurm plugins share at the C boundary: the symbols that name a plugin to
//! Slurm ([`plugin_identity!`]), log lines through Slurm's own logger, and a guard that keeps
//! every panic on the Rust side, so a bug in wattson never takes down slurmctld, slurmd or
//! slurmstepd. A plugin whose version Slurm checks to the micro release follows a micro update
//! of its series ([`micro`]).

pub mod micro;

use std::ffi::{CStr, CString, c_char};
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::atomic::{AtomicU32, Ordering};

unsafe extern "C" {
    fn slurm_info(fmt: *const c_char, ...);
    fn slurm_error(fmt: *const c_char, ...);
}

/// The Slurm release the plugins are built for, as Slurm's `SLURM_VERSION_NUMBER`.
pub const SLURM_VERSION_NUMBER: u32 = wattson_slurm_sys::sys::SLURM_VERSION_NUMBER;

/// Exports the symbols Slurm reads to load a plugin: `plugin_name` and `plugin_type` as C's
/// `const char[]` (NUL-terminated arrays, not pointers) and `plugin_version`, the Slurm release
/// the bindings come from. Given the plugin's file name, the plugin also follows a micro
/// release of its series at load ([`follow_the_running_release`]), for the plugin types whose
/// version Slurm checks to the micro (job_submit, acct_gather_energy; not SPANK).
#[macro_export]
macro_rules! plugin_identity {
    ($name:literal, $kind:literal) => {
        #[unsafe(no_mangle)]
        pub static plugin_name: [u8; $name.len() + 1] = $crate::nul_terminated($name);
        #[unsafe(no_mangle)]
        pub static plugin_type: [u8; $kind.len() + 1] = $crate::nul_terminated($kind);
        #[unsafe(no_mangle)]
        pub static plugin_version: ::std::sync::atomic::AtomicU32 =
            ::std::sync::atomic::AtomicU32::new($crate::SLURM_VERSION_NUMBER);
    };
    ($name:literal, $kind:literal, follows_micro = $file:literal) => {
        $crate::plugin_identity!($name, $kind);
        /// Runs when the dynamic loader maps the plugin, before Slurm reads `plugin_version`.
        #[used]
        #[unsafe(link_section = ".init_array")]
        static FOLLOW_THE_RUNNING_RELEASE: extern "C" fn() = {
            extern "C" fn at_load() {
                $crate::follow_the_running_release(&plugin_version, $file);
            }
            at_load
        };
    };
}

/// Sets `version` (the plugin's `plugin_version`) to the running Slurm's release where that is a
/// micro release of the series the plugin was built for, and logs one line saying so (not in
/// slurmstepd, which loads the plugin for every step). Outside a Slurm process, or where
/// libslurm names no single release of the series, it leaves the built version. Never unwinds.
pub fn follow_the_running_release(version: &AtomicU32, plugin: &str) {
    let _ = catch_unwind(AssertUnwindSafe(|| {
        let Some(library) = libslurm_path() else { return };
        // A local file the daemon has mapped already (a few MB); read at most 256 MiB of it.
        let Ok(bytes) = read_bounded(&library, 256 << 20) else { return };
        let built = SLURM_VERSION_NUMBER;
        let micros = micro::micros_in(&bytes, built);
        let line = match micro::follow(built, &micros) {
            micro::Follow::Same => return,
            micro::Follow::Micro(running) => {
                version.store(running, Ordering::Release);
                micro::followed_line(plugin, built, running)
            }
            micro::Follow::Unknown => {
                micro::unknown_line(plugin, built, &library.display().to_string(), &micros)
            }
        };
        let in_stepd = std::fs::read_to_string("/proc/self/comm").is_ok_and(|c| c.trim() == "slurmstepd");
        if !in_stepd {
            info_at_load(&line);
        }
    }));
}

/// [`info`] for code that runs as the plugin is mapped: looks up libslurm's `slurm_info`
/// rather than linking it, and logs nothing outside a Slurm process.
pub fn info_at_load(message: &str) {
    log_at_load(c"slurm_info", message);
}

/// [`error`] for code that runs as the plugin is mapped: looks up libslurm's `slurm_error`
/// rather than linking it, and logs nothing outside a Slurm process.
pub fn error_at_load(message: &str) {
    log_at_load(c"slurm_error", message);
}

/// Logs through libslurm's `logger` (`slurm_info`, `slurm_error`), looked up rather than
/// linked, so that code run at load (and a test binary holding it) needs no libslurm: outside
/// a Slurm process it logs nothing.
fn log_at_load(logger: &CStr, message: &str) {
    // SAFETY: dlsym in the global scope with a NUL-terminated name.
    let log = unsafe { libc::dlsym(libc::RTLD_DEFAULT, logger.as_ptr()) };
    if log.is_null() {
        return;
    }
    // SAFETY: libslurm's loggers are `void f(const char *, ...)`.
    let log =
        unsafe { std::mem::transmute::<*mut libc::c_void, unsafe extern "C" fn(*const c_char, ...)>(log) };
    let line = c_string(message);
    // SAFETY: a constant "%s" format with one valid NUL-terminated string argument.
    unsafe { log(c"%s".as_ptr(), line.as_ptr()) }
}

/// The file of the libslurm this process runs with, found from one of its functions; None
/// outside a Slurm process.
fn libslurm_path() -> Option<std::path::PathBuf> {
    // SAFETY: dlsym in the global scope with a NUL-terminated name.
    let symbol = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"slurm_api_version".as_ptr()) };
    if symbol.is_null() {
        return None;
    }
    let mut info: libc::Dl_info = unsafe { std::mem::zeroed() };
    // SAFETY: `symbol` is an address in a loaded object; `info` is a valid out-parameter.
    if unsafe { libc::dladdr(symbol, &mut info) } == 0 || info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dladdr's file name is a NUL-terminated string owned by the loader.
    let name = unsafe { CStr::from_ptr(info.dli_fname) };
    Some(std::path::PathBuf::from(std::ffi::OsStr::from_bytes(name.to_bytes())))
}

fn read_bounded(path: &std::path::Path, limit: u64) -> std::io::Result<Vec<u8>> {
    let mut bytes = Vec::new();
    std::fs::File::open(path)?.take(limit).read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// `text` as a NUL-terminated byte array of length `N` (its length plus one), at compile time.
pub const fn nul_terminated<const N: usize>(text: &str) -> [u8; N] {
    let bytes = text.as_bytes();
    assert!(bytes.len() + 1 == N, "N is the text's length plus its NUL");
    let mut out = [0u8; N];
    let mut i = 0;
    while i < bytes.len() {
        out[i] = bytes[i];
        i += 1;
    }
    out
}

fn c_string(message: &str) -> CString {
    CString::new(message.replace('\0', " ")).unwrap_or_default()
}

/// Logs an informational line through Slurm (the daemon's log, or the user's terminal in
/// sbatch/srun).
pub fn info(message: &str) {
    let line = c_string(message);
    // SAFETY: a constant "%s" format with one valid NUL-terminated string argument.
    unsafe { slurm_info(c"%s".as_ptr(), line.as_ptr()) }
}

/// Logs an error line through Slurm.
pub fn error(message: &str) {
    let line = c_string(message);
    // SAFETY: as in `info`.
    unsafe { slurm_error(c"%s".as_ptr(), line.as_ptr()) }
}

/// Runs `f` at an entry point called by Slurm; a panic is caught, logged, and turned into
/// `fail_open`, the value that lets Slurm carry on as if wattson were absent.
pub fn guard<T>(entry: &str, fail_open: T, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(value) => value,
        Err(panic) => {
            let what = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".to_string());
            error(&format!("wattson: internal error in {entry}: {what}; continuing without wattson"));
            fail_open
        }
    }
}

/// Panics when the test-only trigger `WATTSON_TEST_PANIC` in the process environment (set by
/// the test for slurmctld) names `point`: how the tests prove a panic does not take Slurm down.
/// Only with the `test-hooks` feature.
#[cfg(feature = "test-hooks")]
pub fn test_panic_trigger(point: &str) {
    if std::env::var("WATTSON_TEST_PANIC").is_ok_and(|v| v == point) {
        panic!("test panic at {point}");
    }
}
