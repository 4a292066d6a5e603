//! MUNGE credentials through libmunge (`munge-sys`): a payload sealed by one host's munged is
//! opened by any host sharing the cluster's key, which also learns the sender's uid and gid.
//! munged refuses a credential decoded twice (replay) or older than its time to live.
//!
//! A thin safe layer written here: the `munge_auth` crate leaks its buffers and panics on a
//! credential with a NUL byte, which a root daemon reading the network cannot afford.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::Path;
use std::ptr;

use munge_sys as sys;

/// Largest payload sealed or accepted (libmunge's own limit is 1 MiB).
pub const MAX_PAYLOAD: usize = 1 << 20;

/// A MUNGE failure, with libmunge's words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("MUNGE: {0}")]
pub struct MungeError(pub String);

/// An opened credential: its payload and who sealed it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opened {
    /// The payload.
    pub payload: Vec<u8>,
    /// The sender's uid.
    pub uid: u32,
    /// The sender's gid.
    pub gid: u32,
}

/// Access to a munged: the default socket, or the one given.
#[derive(Debug, Clone, Default)]
pub struct Munge {
    socket: Option<CString>,
}

/// A libmunge context, destroyed on drop.
struct Ctx(sys::munge_ctx_t);

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: created by munge_ctx_create and destroyed once.
        unsafe { sys::munge_ctx_destroy(self.0) }
    }
}

impl Ctx {
    fn error(&self, code: sys::munge_err_t) -> MungeError {
        // SAFETY: both return static or context-owned NUL-terminated strings (or NULL).
        let text = unsafe {
            let s = sys::munge_ctx_strerror(self.0);
            if s.is_null() { sys::munge_strerror(code) } else { s }
        };
        let text = if text.is_null() {
            format!("error {code}")
        } else {
            // SAFETY: non-null, NUL-terminated, alive while the context is.
            unsafe { CStr::from_ptr(text) }.to_string_lossy().into_owned()
        };
        MungeError(text)
    }
}

impl Munge {
    /// munged at `socket`, or at libmunge's default socket.
    pub fn new(socket: Option<&Path>) -> Result<Munge, MungeError> {
        let socket = socket
            .map(|p| CString::new(p.as_os_str().as_encoded_bytes()))
            .transpose()
            .map_err(|_| MungeError("the socket path contains a NUL byte".into()))?;
        Ok(Munge { socket })
    }

    fn ctx(&self) -> Result<Ctx, MungeError> {
        // SAFETY: plain constructor; NULL on allocation failure.
        let raw = unsafe { sys::munge_ctx_create() };
        if raw.is_null() {
            return Err(MungeError("cannot create a context".into()));
        }
        let ctx = Ctx(raw);
        if let Some(socket) = &self.socket {
            // SAFETY: MUNGE_OPT_SOCKET takes one `char *`, copied by libmunge.
            let rc = unsafe {
                sys::munge_ctx_set(ctx.0, sys::munge_opt_MUNGE_OPT_SOCKET as c_int, socket.as_ptr())
            };
            if rc != 0 {
                return Err(ctx.error(rc));
            }
        }
        Ok(ctx)
    }

    /// Seals `payload` in a credential (a line of base64 text) that only the process of uid
    /// `reader` may open (munged refuses it to any other uid).
    pub fn seal(&self, payload: &[u8], reader: u32) -> Result<String, MungeError> {
        if payload.len() > MAX_PAYLOAD {
            return Err(MungeError(format!("payload of {} bytes is over {MAX_PAYLOAD}", payload.len())));
        }
        let ctx = self.ctx()?;
        // SAFETY: MUNGE_OPT_UID_RESTRICTION takes one `uid_t`.
        let rc = unsafe {
            sys::munge_ctx_set(ctx.0, sys::munge_opt_MUNGE_OPT_UID_RESTRICTION as c_int, reader as sys::uid_t)
        };
        if rc != 0 {
            return Err(ctx.error(rc));
        }
        let mut cred: *mut c_char = ptr::null_mut();
        // SAFETY: buf/len describe `payload`; `cred` receives a malloc'd string we free.
        let rc = unsafe {
            sys::munge_encode(&mut cred, ctx.0, payload.as_ptr().cast::<c_void>(), payload.len() as c_int)
        };
        if rc != 0 {
            if !cred.is_null() {
                // SAFETY: allocated by libmunge with malloc.
                unsafe { libc::free(cred.cast()) };
            }
            return Err(ctx.error(rc));
        }
        // SAFETY: success gives a NUL-terminated string, freed right after the copy.
        let text = unsafe { CStr::from_ptr(cred) }.to_string_lossy().into_owned();
        unsafe { libc::free(cred.cast()) };
        Ok(text)
    }

    /// Opens a credential: checks it with munged and returns its payload and sender.
    pub fn open(&self, cred: &str) -> Result<Opened, MungeError> {
        let cred =
            CString::new(cred.trim()).map_err(|_| MungeError("the credential contains a NUL byte".into()))?;
        let ctx = self.ctx()?;
        let mut buf: *mut c_void = ptr::null_mut();
        let mut len: c_int = 0;
        let (mut uid, mut gid): (sys::uid_t, sys::gid_t) = (0, 0);
        // SAFETY: out-pointers are valid; `buf` may be set even on some errors and is freed.
        let rc = unsafe { sys::munge_decode(cred.as_ptr(), ctx.0, &mut buf, &mut len, &mut uid, &mut gid) };
        let payload = if buf.is_null() || len <= 0 {
            Vec::new()
        } else {
            // SAFETY: libmunge allocated `len` bytes at `buf`.
            unsafe { std::slice::from_raw_parts(buf.cast::<u8>(), len as usize) }.to_vec()
        };
        if !buf.is_null() {
            // SAFETY: allocated by libmunge with malloc.
            unsafe { libc::free(buf) };
        }
        if rc != 0 {
            return Err(ctx.error(rc));
        }
        Ok(Opened { payload, uid, gid })
    }
}
