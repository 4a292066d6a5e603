//! The controller-to-node link: `wattson ctld` asks each node's wattsond to confirm it is idle
//! before powering it down and sets running jobs' pace, over TCP. Each request is the
//! protocol's JSON sealed in a MUNGE credential (the cluster's existing key: no new secret)
//! that only root (the daemon) may open, one line each way. The node serves only root and
//! SlurmUser, and seals its reply only to them: for the requester's uid alone, its payload
//! tagged [`REPLY_TAG`] and carrying the request's SHA-256, so a reply is good for nothing
//! but answering that request. A refusal before the requester is known goes back unsealed.
//! The controller accepts only replies sealed by root to its own request. munged refuses a
//! replayed or expired credential.
//!
//! Blocking and small: the controller calls it from its loop; wattsond's async server uses
//! [`open_request`], [`seal_reply`] and [`refusal`] around its own dispatch.

pub mod munge;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use wattson_protocol::{Error, ErrorCode, Reply, Request, Response};

pub use munge::{Munge, MungeError};

/// wattsond's default link port.
pub const DEFAULT_PORT: u16 = 6828;

/// Longest line read either way (a sealed 1 MiB payload in base64, with room).
pub const MAX_LINE: usize = 2 << 20;

/// What a sealed reply's payload says it is: this link's answer, in its first version. A
/// reply is never taken for another MUNGE payload, Slurm's among them.
pub const REPLY_TAG: &str = "wattson-link-reply/1";

/// The payload of a sealed reply.
#[derive(Debug, Serialize, Deserialize)]
struct SealedReply {
    /// [`REPLY_TAG`].
    tag: String,
    /// The SHA-256 of the request's credential line (trimmed), in hex.
    request: String,
    /// The answer.
    response: Response,
}

/// The SHA-256 of a request's credential line, trimmed, in hex.
fn request_hash(line: &str) -> String {
    Sha256::digest(line.trim().as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

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
    let line = munge.seal(&payload, 0)?;
    let io = |error| LinkError::Io { addr, error };
    let mut stream = TcpStream::connect_timeout(&addr, timeout).map_err(io)?;
    stream.set_read_timeout(Some(timeout)).map_err(io)?;
    stream.set_write_timeout(Some(timeout)).map_err(io)?;
    stream.write_all(format!("{line}\n").as_bytes()).map_err(io)?;
    let mut answer = String::new();
    BufReader::new(stream.take(MAX_LINE as u64)).read_line(&mut answer).map_err(io)?;
    let bad = |why: String| LinkError::BadReply { addr, why };
    if !answer.starts_with("MUNGE:") {
        // Unsealed: a refusal before the node knew who asked; anyone on the path could have
        // written it, so it can only fail the call.
        return match serde_json::from_str::<Response>(&answer) {
            Ok(Err(error)) => Err(LinkError::Refused { addr, error }),
            _ => Err(bad("the answer is neither sealed nor a refusal".into())),
        };
    }
    let opened =
        munge.open(&answer).map_err(|e| bad(format!("the answer is not a valid credential: {e}")))?;
    if opened.uid != 0 {
        return Err(bad(format!("the answer was sealed by uid {}, not by root's wattsond", opened.uid)));
    }
    let response = open_reply(&opened.payload, &line).map_err(bad)?;
    response.map_err(|error| LinkError::Refused { addr, error })
}

/// The response in a sealed reply's payload, if it is this link's reply to the request sealed
/// as `request_line`.
fn open_reply(payload: &[u8], request_line: &str) -> Result<Response, String> {
    let reply: SealedReply = serde_json::from_slice(payload).map_err(|e| format!("bad reply: {e}"))?;
    if reply.tag != REPLY_TAG {
        return Err(format!("the answer is not a link reply (tag {:?})", reply.tag));
    }
    if reply.request != request_hash(request_line) {
        return Err("the answer is to another request".into());
    }
    Ok(reply.response)
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

/// Seals the answer to the request sealed as `request_line` by `uid` (root or SlurmUser) as
/// one line that only `uid` may open; `None` if munged cannot seal (the connection is then
/// closed without an answer, which the controller reads as a failure).
pub fn seal_reply(munge: &Munge, request_line: &str, uid: u32, response: &Response) -> Option<Vec<u8>> {
    let reply = SealedReply {
        tag: REPLY_TAG.into(),
        request: request_hash(request_line),
        response: response.clone(),
    };
    let payload = serde_json::to_vec(&reply).ok()?;
    let mut line = munge.seal(&payload, uid).ok()?.into_bytes();
    line.push(b'\n');
    Some(line)
}

/// A refusal of a request whose sender is not served (unknown, not root or SlurmUser), as one
/// unsealed line: nothing sealed by root goes to anyone else.
pub fn refusal(error: &Error) -> Vec<u8> {
    let response: Response = Err(error.clone());
    let mut line = serde_json::to_vec(&response).unwrap_or_default();
    line.push(b'\n');
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sealed(tag: &str, request_line: &str) -> Vec<u8> {
        let reply = SealedReply {
            tag: tag.into(),
            request: request_hash(request_line),
            response: Ok(Reply::Idle { node: "n1".into() }),
        };
        serde_json::to_vec(&reply).unwrap()
    }

    #[test]
    fn a_reply_answers_only_the_request_it_names() {
        let payload = sealed(REPLY_TAG, "MUNGE:request-one:\n");
        assert!(matches!(open_reply(&payload, "MUNGE:request-one:"), Ok(Ok(Reply::Idle { .. }))));
        let other = open_reply(&payload, "MUNGE:request-two:").unwrap_err();
        assert!(other.contains("another request"), "{other}");
        let untagged = open_reply(&sealed("slurm", "MUNGE:request-one:"), "MUNGE:request-one:").unwrap_err();
        assert!(untagged.contains("not a link reply"), "{untagged}");
        assert!(open_reply(b"{\"Ok\":{\"idle\":{\"node\":\"n1\"}}}", "MUNGE:request-one:").is_err());
    }

    #[test]
    fn a_refusal_is_one_plain_line_of_the_protocols_error() {
        let line = refusal(&Error::new(ErrorCode::PermissionDenied, "no"));
        assert!(!line.starts_with(b"MUNGE:") && line.ends_with(b"\n"));
        let response: Response = serde_json::from_slice(&line).unwrap();
        assert_eq!(response.unwrap_err().code, ErrorCode::PermissionDenied);
    }
}
