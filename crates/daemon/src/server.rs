//! The Unix socket: accept, authenticate by peer credentials, authorise, dispatch to [`Core`].
//!
//! Each connection carries one request. A slow or silent client times out without affecting
//! anyone else; a malformed request gets a one-line error; the core runs on a blocking thread.

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{UnixListener, UnixStream};
use tracing::{debug, warn};

use super::core::Core;
use wattson_protocol::access::Access;
use wattson_protocol::{Reply, Request, Response};

/// Locks the core, surviving a panic in an earlier holder (the state is still consistent:
/// every change is committed to the store before memory is updated).
pub fn lock(core: &Mutex<Core>) -> MutexGuard<'_, Core> {
    core.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Binds the socket at `path`, refusing if another daemon answers there.
pub fn bind(path: &Path) -> Result<UnixListener, String> {
    if std::os::unix::net::UnixStream::connect(path).is_ok() {
        return Err(format!("another wattsond is already listening on {}", path.display()));
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(format!("cannot remove stale socket {}: {e}", path.display())),
    }
    let listener =
        UnixListener::bind(path).map_err(|e| format!("cannot listen on {}: {e}", path.display()))?;
    // Everyone may connect; what they may do is decided from their credentials.
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
        .map_err(|e| format!("cannot set permissions on {}: {e}", path.display()))?;
    Ok(listener)
}

/// Serves connections until the task is dropped.
pub async fn serve(listener: UnixListener, core: Arc<Mutex<Core>>, policy: Arc<Access>, timeout: Duration) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                let (core, policy) = (core.clone(), policy.clone());
                tokio::spawn(async move {
                    if let Err(e) = handle(stream, core, &policy, timeout).await {
                        debug!(error = %e, "connection ended with an error");
                    }
                });
            }
            Err(e) => {
                warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

async fn handle(
    stream: UnixStream,
    core: Arc<Mutex<Core>>,
    policy: &Access,
    timeout: Duration,
) -> std::io::Result<()> {
    let uid = stream.peer_cred()?.uid();
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let limit = wattson_protocol::MAX_REQUEST_BYTES as u64 + 1;
    let mut reader = BufReader::new(read.take(limit));
    let response: Response = match tokio::time::timeout(timeout, reader.read_line(&mut line)).await {
        Err(_) => Err(format!("no complete request within {timeout:?}")),
        Ok(Err(e)) => Err(format!("cannot read request: {e}")),
        Ok(Ok(_)) => match wattson_protocol::parse_request(&line).and_then(|r| policy.authorize(uid, r)) {
            Ok(request) => dispatch(core, request, uid, policy.is_privileged(uid)).await,
            Err(e) => Err(e),
        },
    };
    if let Err(e) = &response {
        debug!(uid, error = %e, "request refused");
    }
    let mut out =
        serde_json::to_vec(&response).unwrap_or_else(|e| format!("{{\"Err\":\"{e}\"}}").into_bytes());
    out.push(b'\n');
    tokio::time::timeout(timeout, write.write_all(&out)).await.map_err(std::io::Error::other)??;
    write.shutdown().await?;
    // Closing with unread input would reset the connection before the client reads the reply
    // (an oversized request, say): discard what is left, within bounds.
    let mut rest = reader.into_inner().into_inner().take(1 << 20);
    let _ =
        tokio::time::timeout(Duration::from_millis(200), tokio::io::copy(&mut rest, &mut tokio::io::sink()))
            .await;
    Ok(())
}

async fn dispatch(core: Arc<Mutex<Core>>, request: Request, uid: u32, privileged: bool) -> Response {
    let work = move || {
        let mut core = lock(&core);
        match request {
            Request::JobBegin(begin) => core.begin(begin),
            Request::JobEnd { job } => core.end(&job),
            Request::Status => Ok(core.status()),
            Request::Acct(filter) => core.acct(&filter),
            Request::JobSettings { job } => {
                let reply = core.settings(&job)?;
                match &reply {
                    Reply::Settings { uid: owner, .. } if !(privileged || *owner == uid) => {
                        Err(format!("permission denied: job {job} belongs to another user"))
                    }
                    _ => Ok(reply),
                }
            }
        }
    };
    tokio::task::spawn_blocking(work).await.unwrap_or_else(|e| Err(format!("internal error: {e}")))
}
