//! The Unix socket: accept, authenticate by peer credentials, authorise, and pass each request
//! to the part that answers it: job begin/end/settings to the state owner, `acct` to the
//! reader, `status` to the sampler.
//!
//! Each connection carries one request. A slow or silent client times out without affecting
//! anyone else; a malformed request gets a one-line error with a code.

use std::os::unix::fs::MetadataExt;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::UnixStream;
use tracing::{debug, warn};

use crate::admission::{Admission, Admit, Limits};
use crate::asks::SamplerHandle;
use crate::owner::Owner;
use crate::reader::Reader;
use crate::socket::Socket;
use wattson_protocol::access::Access;
use wattson_protocol::{Error, ErrorCode, Reply, Request, Response};
use wattson_types::job::JobKey;

/// Who answers what.
pub struct Services {
    /// The state owner: job begin, end and settings.
    pub owner: Owner,
    /// The acct reader.
    pub reader: Reader,
    /// The sampler: status.
    pub sampler: SamplerHandle,
    /// Who may do what.
    pub access: Access,
}

/// Serves connections until the task is dropped. Root and SlurmUser are always served at
/// once; other users' connections are admitted as [`crate::admission`] says: served, parked
/// until one of the user's connections ends (backpressure, not a refusal to spin on), or
/// refused when even the waiting room is full. No user can take the file descriptors or the
/// tasks that Slurm's calls need. The socket is kept at its path ([`Socket::keep`]).
pub async fn serve(mut socket: Socket, services: Arc<Services>, timeout: Duration, limits: Limits) {
    let mut admission = Admission::new(limits);
    let (closed_tx, mut closed_rx) = tokio::sync::mpsc::unbounded_channel::<u32>();
    let start = |stream: UnixStream, uid: u32, counted: bool| {
        let services = services.clone();
        let slot = counted.then(|| Slot { uid, closed: closed_tx.clone() });
        tokio::spawn(async move {
            let _slot = slot;
            if let Err(e) = handle(stream, uid, &services, timeout).await {
                debug!(error = %e, "connection ended with an error");
            }
        });
    };
    let mut check = tokio::time::interval(crate::socket::CHECK_EVERY);
    check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            _ = check.tick() => socket.keep(),
            accepted = socket.listener.accept() => {
                let stream = match accepted {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let Ok(uid) = stream.peer_cred().map(|c| c.uid()) else { continue };
                if services.access.is_privileged(uid) {
                    start(stream, uid, false);
                    continue;
                }
                match admission.admit(uid, stream) {
                    Admit::Now(stream) => start(stream, uid, true),
                    Admit::Parked => {}
                    Admit::Refused(stream, why) => {
                        debug!(uid, "connection refused: {why}");
                        refuse(&stream, why);
                    }
                }
                for (stream, why) in admission.take_evicted() {
                    debug!("waiting connection refused: {why}");
                    refuse(&stream, why);
                }
            }
            Some(uid) = closed_rx.recv() => {
                if let Some((uid, stream)) = admission.release(uid) {
                    start(stream, uid, true);
                }
            }
        }
    }
}

/// A counted connection's place; handed back when dropped, however the connection ends.
struct Slot {
    uid: u32,
    closed: tokio::sync::mpsc::UnboundedSender<u32>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let _ = self.closed.send(self.uid);
    }
}

/// Tells a refused client why, if its socket takes the line at once, and closes.
fn refuse(stream: &UnixStream, why: String) {
    let response: Response =
        Err(Error::new(ErrorCode::Busy, format!("wattsond refused the connection: {why}")));
    if let Ok(mut line) = serde_json::to_vec(&response) {
        line.push(b'\n');
        let _ = stream.try_write(&line);
    }
}

async fn handle(stream: UnixStream, uid: u32, services: &Services, timeout: Duration) -> std::io::Result<()> {
    let (read, mut write) = stream.into_split();
    let mut line = String::new();
    let limit = wattson_protocol::MAX_REQUEST_BYTES as u64 + 1;
    let mut reader = BufReader::new(read.take(limit));
    let bad = |message: String| Error::new(ErrorCode::BadRequest, message);
    let response: Response = match tokio::time::timeout(timeout, reader.read_line(&mut line)).await {
        Err(_) => Err(bad(format!("no complete request within {timeout:?}"))),
        Ok(Err(e)) => Err(bad(format!("cannot read request: {e}"))),
        Ok(Ok(_)) => match wattson_protocol::parse_request(&line).map_err(bad) {
            Ok(request) => match services.access.authorize(uid, request) {
                Ok(request) => match tokio::time::timeout(timeout, dispatch(services, request, uid)).await {
                    Ok(response) => response,
                    Err(_) => {
                        Err(Error::new(ErrorCode::Busy, format!("no answer within {timeout:?}; retry")))
                    }
                },
                Err(e) => Err(e),
            },
            Err(e) => Err(e),
        },
    };
    if let Err(e) = &response {
        debug!(uid, error = %e, "request refused");
    }
    let mut out = serde_json::to_vec(&response).unwrap_or_else(|e| {
        let error = Error::new(ErrorCode::Internal, format!("cannot encode the reply: {e}"));
        serde_json::to_vec(&Response::Err(error)).unwrap_or_default()
    });
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

/// The controller asks before powering the node down: no running job, no process on any GPU,
/// and every GPU answering (a GPU that does not answer cannot be confirmed free).
async fn confirm_idle(services: &Services) -> Response {
    let busy = |why: String| Err(Error::new(ErrorCode::Conflict, why));
    if let Some(job) = services.owner.running().first() {
        return busy(format!("job {} runs here", job.key));
    }
    let Some(Reply::Status { node, gpus }) = services.sampler.status().await else {
        return Err(Error::new(ErrorCode::Busy, "too many status requests waiting; retry"));
    };
    for (index, gpu) in gpus.iter().enumerate() {
        if let Some(error) = &gpu.error {
            return busy(format!("GPU {index} does not answer ({error})"));
        }
        if !gpu.processes.is_empty() {
            return busy(format!("GPU {index} has processes {:?}", gpu.processes));
        }
    }
    Ok(Reply::Idle { node })
}

/// A running job's (or step's) energy in its scope (`[energy] scope`) up to a reading taken for
/// this request (Slurm's energy plugin asks at each of its polls): the meters advanced on a copy,
/// so the record is untouched. A GPU the job shares with another is not advanced: its part of
/// the interval is known only at the next sample.
async fn job_energy(services: &Services, key: JobKey, uid: u32) -> Response {
    let job = key.job_id;
    // The node's meters read now (or within the last 100 ms: requests in a crowd share one
    // reading), so that the share of the node's energy is as current as the GPUs'.
    if services.owner.running().iter().any(|r| r.key == key && r.node_share.is_some()) {
        let _ = services.owner.node_energy_older_than(Duration::from_millis(100)).await;
    }
    let running = services.owner.running();
    let Some(record) = running.iter().find(|r| r.key == key) else {
        return Err(Error::new(ErrorCode::NotRunning, format!("job {key} has no record running here")));
    };
    if !(services.access.sees_all(uid) || record.uid == uid) {
        // As for a job that is not here: a user learns nothing of another user's jobs.
        return Err(Error::new(ErrorCode::NotRunning, format!("job {key} has no record running here")));
    }
    let shared =
        |index: u32| running.iter().any(|r| r.key.job_id != job && r.gpus.iter().any(|g| g.index == index));
    let Some(Reply::Status { gpus, .. }) = services.sampler.status().await else {
        return Err(Error::new(ErrorCode::Busy, "too many status requests waiting; retry"));
    };
    let mut now = record.clone();
    let mut power_mw = 0u64;
    for used in &mut now.gpus {
        if let Some(reading) = gpus.iter().find(|g| g.info.index == used.index).and_then(|g| g.reading) {
            power_mw += u64::from(reading.power_mw.unwrap_or(0));
            if !shared(used.index) {
                used.meter.advance(reading);
            }
        }
    }
    // The configured scope's: the GPUs' up to this reading, the rest of the node's up to the
    // reading just taken.
    let energy_mj =
        now.scoped_energy_mj().map_err(|e| Error::new(ErrorCode::Internal, format!("job {job}: {e}")))?;
    Ok(Reply::JobEnergy { job, energy_mj: energy_mj.round() as u64, power_mw })
}

/// What a user may see of the node's status, as Slurm shows other users' jobs to nobody: the
/// GPUs, their own jobs, and only processes they own.
fn seen_by(reply: Reply, uid: u32, services: &Services) -> Reply {
    let Reply::Status { node, mut gpus } = reply else { return reply };
    let running = services.owner.running();
    let theirs = |key: &JobKey| running.iter().any(|r| r.key == *key && r.uid == uid);
    let owned_by = |pid: u32| std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() == uid);
    for gpu in &mut gpus {
        gpu.jobs.retain(theirs);
        gpu.processes.retain(|&pid| owned_by(pid));
    }
    Reply::Status { node, gpus }
}

/// Answers an authorised request from `uid` (over the socket or the controller link).
pub(crate) async fn dispatch(services: &Services, request: Request, uid: u32) -> Response {
    request.validate()?;
    match request {
        Request::JobBegin(begin) => services.owner.begin(begin).await,
        Request::JobEnd { job } => services.owner.end(job).await,
        Request::Status {} => {
            let reply = services
                .sampler
                .status()
                .await
                .ok_or_else(|| Error::new(ErrorCode::Busy, "too many status requests waiting; retry"))?;
            Ok(if services.access.is_privileged(uid) { reply } else { seen_by(reply, uid, services) })
        }
        Request::Acct(filter) => services.reader.acct(filter).await,
        Request::JobPace { job, pace } => services.owner.pace(job, pace).await,
        Request::JobLevels { job } => services.owner.levels(job).await,
        Request::JobSeries { job } => {
            let reply = services.reader.series(job.clone()).await?;
            match &reply {
                // As for a job with no record: a user learns nothing of another user's jobs.
                Reply::Series { uid: owner, .. } if !(services.access.sees_all(uid) || *owner == uid) => {
                    Err(crate::reader::no_record(&job))
                }
                _ => Ok(reply),
            }
        }
        Request::ConfirmIdle {} => confirm_idle(services).await,
        Request::JobEnergy { job, step } => job_energy(services, JobKey { job_id: job, step }, uid).await,
        Request::Models {} => services.owner.models().await,
        Request::MergeModels { models } => services.owner.merge_models(models).await,
        Request::JobSummary { job, bins } => services.reader.summary(job, bins).await,
        Request::JobSettings { job } => {
            let reply = services.owner.settings(job.clone()).await?;
            match &reply {
                Reply::Settings { uid: owner, .. }
                    if !(services.access.is_privileged(uid) || *owner == uid) =>
                {
                    Err(crate::state::not_running(&job))
                }
                _ => Ok(reply),
            }
        }
    }
}
