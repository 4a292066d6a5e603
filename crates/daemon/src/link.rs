//! The controller's requests over TCP ([`wattson_link`]): each connection carries one line, a
//! MUNGE credential sealing the request; the sender's uid comes from MUNGE, never from the
//! request, and only root and SlurmUser are served. Their answer is sealed by this daemon
//! (root) for the requester's uid alone and bound to the request; every other answer (a bad
//! credential, another user) goes back unsealed, so no one else ever gets a credential of
//! root's. Bounded like the socket: the request line within [`LINE_TIMEOUT`] of the
//! connection, a deadline on the answer, a cap on connections at once and on the line's
//! length.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::{debug, error, info, warn};

use crate::server::{Services, dispatch};
use wattson_link::Munge;
use wattson_protocol::{Error, ErrorCode};

/// Connections served at once; more wait in the kernel's backlog. Silent ones give their
/// place back within [`LINE_TIMEOUT`], so hundreds of them a second do not starve the controller.
pub const CONNECTIONS: usize = 256;

/// How long a connection may take to send its request line: the controller sends it at once,
/// a few kilobytes (a merge of models up to 1 MiB), over the cluster's network.
pub const LINE_TIMEOUT: Duration = Duration::from_secs(1);

/// Serves the controller's requests on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, services: Arc<Services>, munge: Munge, timeout: Duration) {
    let slots = Arc::new(Semaphore::new(CONNECTIONS));
    let munge = match Munged::spawn(munge) {
        Ok(munged) => munged,
        Err(e) => {
            return error!(error = %e, "link: cannot start its MUNGE thread; not serving the controller");
        }
    };
    loop {
        let Ok(permit) = slots.clone().acquire_owned().await else { return };
        let (stream, peer) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(e) => {
                warn!(error = %e, "link: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let (services, munge) = (services.clone(), munge.clone());
        tokio::spawn(async move {
            let _permit = permit;
            if let Err(e) = handle(stream, &services, munge, timeout).await {
                debug!(%peer, error = %e, "link: connection ended with an error");
            }
        });
    }
}

/// A MUNGE call the link's thread makes.
type Call = Box<dyn FnOnce(&Munge) + Send>;

/// munged, called one call at a time (opening a request, sealing an answer; each a local
/// socket round trip) from a thread of the link's own: a flood of requests queues for it
/// instead of starting a thread per connection, and never holds the daemon's other work.
#[derive(Clone)]
struct Munged {
    calls: std::sync::mpsc::SyncSender<Call>,
}

impl Munged {
    /// Starts the thread; it ends when the last handle is dropped.
    fn spawn(munge: Munge) -> std::io::Result<Munged> {
        let (calls, queue) = std::sync::mpsc::sync_channel::<Call>(CONNECTIONS);
        std::thread::Builder::new().name("link-munge".into()).spawn(move || {
            for call in queue {
                call(&munge);
            }
        })?;
        Ok(Munged { calls })
    }

    /// Runs `call` on the thread; `None` if its queue is full or it stopped.
    async fn call<T: Send + 'static>(&self, call: impl FnOnce(&Munge) -> T + Send + 'static) -> Option<T> {
        let (done, answer) = tokio::sync::oneshot::channel();
        self.calls.try_send(Box::new(move |munge| drop(done.send(call(munge))))).ok()?;
        answer.await.ok()
    }
}

async fn handle(
    stream: TcpStream,
    services: &Services,
    munge: Munged,
    timeout: Duration,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read.take(wattson_link::MAX_LINE as u64));
    let mut line = String::new();
    let answer = match tokio::time::timeout(LINE_TIMEOUT, reader.read_line(&mut line)).await {
        Err(_) => refusal(ErrorCode::BadRequest, format!("no complete request within {LINE_TIMEOUT:?}")),
        Ok(Err(e)) => refusal(ErrorCode::BadRequest, format!("cannot read request: {e}")),
        Ok(Ok(_)) => {
            let request_line = line.clone();
            match munge.call(move |m| wattson_link::open_request(m, &request_line)).await {
                Some(Ok((uid, request))) if services.access.is_privileged(uid) => {
                    info!(uid, ?request, "link: controller request");
                    let response = match tokio::time::timeout(timeout, dispatch(services, request, uid)).await
                    {
                        Ok(response) => response,
                        Err(_) => Err(Error::new(ErrorCode::Busy, format!("no answer within {timeout:?}"))),
                    };
                    munge.call(move |m| wattson_link::seal_reply(m, &line, uid, &response)).await.flatten()
                }
                Some(Ok((uid, _))) => {
                    warn!(uid, "link: request from a user other than root and SlurmUser refused");
                    refusal(
                        ErrorCode::PermissionDenied,
                        format!("permission denied: only root and SlurmUser may use the link (uid {uid})"),
                    )
                }
                Some(Err(e)) => {
                    warn!(error = %e, "link: request refused");
                    Some(wattson_link::refusal(&e))
                }
                None => refusal(ErrorCode::Busy, "the link's MUNGE queue is full; retry".into()),
            }
        }
    };
    if let Some(out) = answer {
        tokio::time::timeout(timeout, write.write_all(&out)).await.map_err(std::io::Error::other)??;
    }
    write.shutdown().await
}

/// An unsealed refusal line ([`wattson_link::refusal`]).
fn refusal(code: ErrorCode, message: String) -> Option<Vec<u8>> {
    Some(wattson_link::refusal(&Error::new(code, message)))
}
