//! The controller's requests over TCP ([`wattson_link`]): each connection carries one line, a
//! MUNGE credential sealing the request; the sender's uid comes from MUNGE, never from the
//! request, and only root and SlurmUser are served. The answer is sealed by this daemon
//! (root), so the controller knows who answered. Bounded like the socket: a deadline on every
//! read and write, a cap on connections at once and on the line's length.

use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tracing::{debug, info, warn};

use crate::server::{Services, dispatch};
use wattson_link::Munge;
use wattson_protocol::{Error, ErrorCode, Response};

/// Connections served at once; more wait in the kernel's backlog.
const CONNECTIONS: usize = 32;

/// Serves the controller's requests on `listener` until the task is dropped.
pub async fn serve(listener: TcpListener, services: Arc<Services>, munge: Munge, timeout: Duration) {
    let slots = Arc::new(Semaphore::new(CONNECTIONS));
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

async fn handle(
    stream: TcpStream,
    services: &Services,
    munge: Munge,
    timeout: Duration,
) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut reader = BufReader::new(read.take(wattson_link::MAX_LINE as u64));
    let mut line = String::new();
    let response: Response = match tokio::time::timeout(timeout, reader.read_line(&mut line)).await {
        Err(_) => Err(Error::new(ErrorCode::BadRequest, format!("no complete request within {timeout:?}"))),
        Ok(Err(e)) => Err(Error::new(ErrorCode::BadRequest, format!("cannot read request: {e}"))),
        Ok(Ok(_)) => {
            let opener = munge.clone();
            match tokio::task::spawn_blocking(move || wattson_link::open_request(&opener, &line)).await {
                Ok(Ok((uid, request))) if services.access.is_privileged(uid) => {
                    info!(uid, ?request, "link: controller request");
                    match tokio::time::timeout(timeout, dispatch(services, request, uid)).await {
                        Ok(response) => response,
                        Err(_) => Err(Error::new(ErrorCode::Busy, format!("no answer within {timeout:?}"))),
                    }
                }
                Ok(Ok((uid, _))) => {
                    warn!(uid, "link: request from a user other than root and SlurmUser refused");
                    Err(Error::new(
                        ErrorCode::PermissionDenied,
                        format!("permission denied: only root and SlurmUser may use the link (uid {uid})"),
                    ))
                }
                Ok(Err(e)) => {
                    warn!(error = %e, "link: request refused");
                    Err(e)
                }
                Err(e) => Err(Error::new(ErrorCode::Internal, e.to_string())),
            }
        }
    };
    let sealed = tokio::task::spawn_blocking(move || wattson_link::seal_response(&munge, &response))
        .await
        .ok()
        .flatten();
    if let Some(out) = sealed {
        tokio::time::timeout(timeout, write.write_all(&out)).await.map_err(std::io::Error::other)??;
    }
    write.shutdown().await
}
