//! What wattson's Slurm plugins share at the C boundary: the symbols that name a plugin to
//! Slurm ([`plugin_identity!`]), log lines through Slurm's own logger, and a guard that keeps
//! every panic on the Rust side, so a bug in wattson never takes down slurmctld, slurmd or
//! slurmstepd.

use std::ffi::{CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

unsafe extern "C" {
    fn slurm_info(fmt: *const c_char, ...);
    fn slurm_error(fmt: *const c_char, ...);
}

/// The Slurm release the plugins are built for, as Slurm's `SLURM_VERSION_NUMBER`.
pub const SLURM_VERSION_NUMBER: u32 = wattson_slurm_sys::sys::SLURM_VERSION_NUMBER;

/// Exports the symbols Slurm reads to load a plugin: `plugin_name` and `plugin_type` as C's
/// `const char[]` (NUL-terminated arrays, not pointers) and `plugin_version`, which must be
/// exactly the running Slurm's release (the bindings come from its headers).
#[macro_export]
macro_rules! plugin_identity {
    ($name:literal, $kind:literal) => {
        #[unsafe(no_mangle)]
        pub static plugin_name: [u8; $name.len() + 1] = $crate::nul_terminated($name);
        #[unsafe(no_mangle)]
        pub static plugin_type: [u8; $kind.len() + 1] = $crate::nul_terminated($kind);
        #[unsafe(no_mangle)]
        pub static plugin_version: u32 = $crate::SLURM_VERSION_NUMBER;
    };
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
