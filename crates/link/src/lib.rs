//! The controller-to-node link: `wattson ctld` asks each node's wattsond to confirm it is idle
//! before powering it down and sets running jobs' pace, over TCP. Each request is the
//! protocol's JSON sealed in a MUNGE credential (the cluster's existing key: no new secret),
//! one line each way; the node serves only root and SlurmUser, and the controller accepts only
//! replies sealed by root. munged refuses a replayed or expired credential.
//!
//! Blocking and small: the controller calls it from its loop; wattsond's async server uses
//! [`open_request`] and [`seal_response`] around its own dispatch.

pub mod munge;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use wattson_protocol::{Error, ErrorCode, Reply, Request, Response};

pub use munge::{Munge, MungeError};

/// wattsond's default link port.
pub const DEFAULT_PORT: u16 = 6828;

/// Longest line read either way (a sealed 1 MiB payload in base64, with room).
pub const MAX_LINE: usize = 2 << 20;

/// Why a call over the link failed.
#[derive(Debug, thiserror::Error)]
pub enum LinkError {
    /// The node could not be reached or stopped answering.
    #[error("{addr}: {error}")]
    Io {
        /// The node's address.
        addr: SocketAddr,
        /// What happened.
        error: std::io::Error,
    },
    /// MUNGE refused to seal or open.
    #[error(transparent)]
    Munge(#[from] MungeError),
    /// The answer was not sealed by root, or not a response.
    #[error("{addr}: {why}")]
    BadReply {
        /// The node's address.
        addr: SocketAddr,
        /// Why.
        why: String,
    },
    /// The node refused the request.
    #[error("{addr}: {error}")]
    Refused {
        /// The node's address.
        addr: SocketAddr,
        /// Its refusal.
        error: Error,
    },
}

/// Sends `request` to the wattsond at `addr`, sealed by `munge`; each connect, write and read
/// waits at most `timeout`.
pub fn call(
    munge: &Munge,
    addr: SocketAddr,
    request: &Request,
    timeout: Duration,
) -> Result<Reply, LinkError> {
    let payload =
        serde_json::to_vec(request).map_err(|e| LinkError::BadReply { addr, why: e.to_string() })?;
    let mut line = munge.seal(&payload)?;
    line.push('\n');
    let io = |error| LinkError::Io { addr, error };
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(io)?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    stream.write_all(line.as_bytes()).map_err(io)?;
    let mut answer = String::new();
    BufReader::new(stream.take(MAX_LINE as u64)).read_line(&mut answer).map_err(io)?;
    let bad = |why: String| LinkError::BadReply { addr, why };
    let opened =
        munge.open(&answer).map_err(|e| bad(format!("the answer is not a valid credential: {e}")))?;
    if opened.uid != 0 {
        return Err(bad(format!("the answer was sealed by uid {}, not by root's wattsond", opened.uid)));
    }
    let response: Response =
        serde_json::from_slice(&opened.payload).map_err(|e| bad(format!("bad reply: {e}")))?;
    response.map_err(|error| LinkError::Refused { addr, error })
}

/// Opens one request line: the sender's uid and the request, or the error to answer with.
pub fn open_request(munge: &Munge, line: &str) -> Result<(u32, Request), Error> {
    let opened = munge.open(line).map_err(|e| Error::new(ErrorCode::PermissionDenied, e.to_string()))?;
    let text = std::str::from_utf8(&opened.payload)
        .map_err(|_| Error::new(ErrorCode::BadRequest, "the request is not UTF-8"))?;
    let request = wattson_protocol::parse_request(&format!("{text}\n"))
        .map_err(|e| Error::new(ErrorCode::BadRequest, e))?;
    Ok((opened.uid, request))
}

/// Seals a response as one line; `None` if munged cannot seal (the connection is then closed
/// without an answer, which the controller reads as a failure).
pub fn seal_response(munge: &Munge, response: &Response) -> Option<Vec<u8>> {
    let payload = serde_json::to_vec(response).ok()?;
    let mut line = munge.seal(&payload).ok()?.into_bytes();
    line.push(b'\n');
    Some(line)
}
