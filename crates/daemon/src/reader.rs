//! `acct` queries, served from their own read-only store connection on a low-priority thread:
//! a user's query never waits for the writer, and the writer never waits for a user. Running
//! jobs show the live meters the state owner last published.

use std::path::Path;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use tokio::sync::oneshot;
use tracing::warn;

use crate::owner::Owner;
use wattson_protocol::{AcctQuery, Error, ErrorCode, MAX_SUMMARY_BINS, Reply};
use wattson_store::Store;
use wattson_types::job::{JobKey, JobRecord, JobState};
use wattson_types::summary::{MAX_STEPS, NodeSummary, power_traces};

/// Queries waiting beyond this are refused as busy.
const QUEUE: usize = 64;

/// Niceness of the reader thread: queries yield the CPU to job begin/end and sampling.
const NICE: i32 = 10;

/// What the reader is asked: recorded jobs, one job's series, or a job's summary here.
enum Ask {
    Acct(AcctQuery),
    Series(JobKey),
    Summary { job: u32, bins: u32 },
}

type Query = (Ask, oneshot::Sender<Result<Reply, Error>>);

/// A handle to the reader thread.
#[derive(Clone)]
pub struct Reader {
    queries: SyncSender<Query>,
}

impl Reader {
    /// Opens a read-only connection to the store at `path` and starts the reader thread.
    pub fn spawn(path: &Path, owner: Owner, node: String) -> Result<Reader, String> {
        let store =
            Store::open_read_only(path).map_err(|e| format!("cannot open the store for reading: {e}"))?;
        let (queries, inbox) = sync_channel(QUEUE);
        std::thread::Builder::new()
            .name("acct".into())
            .spawn(move || serve(store, owner, &node, inbox))
            .map_err(|e| format!("cannot start the acct thread: {e}"))?;
        Ok(Reader { queries })
    }

    /// Recorded jobs matching `filter` (already narrowed to what the caller may see).
    pub async fn acct(&self, filter: AcctQuery) -> Result<Reply, Error> {
        self.ask(Ask::Acct(filter)).await
    }

    /// The power series of `job` and its owner (the caller checks who may see it).
    pub async fn series(&self, job: JobKey) -> Result<Reply, Error> {
        self.ask(Ask::Series(job)).await
    }

    /// This node's records of `job` and its GPUs' power in about `bins` bins.
    pub async fn summary(&self, job: u32, bins: u32) -> Result<Reply, Error> {
        self.ask(Ask::Summary { job, bins }).await
    }

    async fn ask(&self, ask: Ask) -> Result<Reply, Error> {
        let (tx, rx) = oneshot::channel();
        match self.queries.try_send((ask, tx)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return Err(Error::new(ErrorCode::Busy, "wattsond is busy with other queries; retry"));
            }
            Err(TrySendError::Disconnected(_)) => return Err(stopped()),
        }
        rx.await.map_err(|_| stopped())?
    }
}

fn stopped() -> Error {
    Error::new(ErrorCode::Internal, "wattsond's acct thread has stopped")
}

fn serve(store: Store, owner: Owner, node: &str, inbox: Receiver<Query>) {
    // SAFETY: setpriority on the calling thread (PRIO_PROCESS with a thread id) has no
    // memory-safety preconditions; failure only leaves the priority as it was.
    let niced = unsafe { libc::setpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t, NICE) };
    if niced != 0 {
        warn!("cannot lower the acct thread's priority; queries compete with job begin/end");
    }
    while let Ok((ask, reply)) = inbox.recv() {
        let _ = reply.send(match ask {
            Ask::Acct(filter) => query(&store, &owner, &filter),
            Ask::Series(job) => series(&store, &owner, job),
            Ask::Summary { job, bins } => summary(&store, &owner, node, job, bins),
        });
    }
}

/// The answer about a job with no record here (also to a user asking about another's).
pub(crate) fn no_record(job: &JobKey) -> Error {
    Error::new(ErrorCode::NotRunning, format!("job {job} has no record on this node"))
}

fn series(store: &Store, owner: &Owner, job: JobKey) -> Result<Reply, Error> {
    let store_error = |e: wattson_store::StoreError| Error::new(ErrorCode::Store, e.to_string());
    let query = AcctQuery { jobs: vec![job.clone()], ..AcctQuery::default() };
    let records = readable(store, owner, &query)?;
    let Some(record) = records.iter().rev().find(|r| r.key == job) else {
        return Err(no_record(&job));
    };
    let points = store.samples(&job).map_err(store_error)?;
    Ok(Reply::Series { uid: record.uid, job, points })
}

fn summary(store: &Store, owner: &Owner, node: &str, job: u32, bins: u32) -> Result<Reply, Error> {
    let key = JobKey::job(job);
    let Reply::Acct { records } =
        query(store, owner, &AcctQuery { jobs: vec![key.clone()], ..AcctQuery::default() })?
    else {
        unreachable!("query answers with records")
    };
    let mut summary = NodeSummary { node: node.to_string(), ..NodeSummary::default() };
    if let Some(record) = records.iter().rev().find(|r| r.key == key) {
        let points = store.samples(&key).map_err(|e| Error::new(ErrorCode::Store, e.to_string()))?;
        let bins = bins.clamp(1, MAX_SUMMARY_BINS) as usize;
        summary.begin_ns = record.begin_ns;
        summary.power = power_traces(&points, record.begin_ns, bins);
    }
    let steps = records.iter().filter(|r| !r.key.step.is_empty()).count();
    summary.steps_left_out = steps.saturating_sub(MAX_STEPS);
    let mut kept_steps = 0;
    summary.records = records
        .into_iter()
        .filter(|r| {
            let keep = r.key.step.is_empty() || kept_steps < MAX_STEPS;
            kept_steps += usize::from(!r.key.step.is_empty());
            keep
        })
        .collect();
    Ok(Reply::JobSummary { summary })
}

/// The records of `filter` that can be read; those that cannot go to the owner for the
/// store's quarantine, so that one damaged record never fails every query that covers it.
fn readable(store: &Store, owner: &Owner, filter: &AcctQuery) -> Result<Vec<JobRecord>, Error> {
    let read = store.query_readable(filter).map_err(|e| Error::new(ErrorCode::Store, e.to_string()))?;
    if !read.unreadable.is_empty() {
        owner.quarantine(read.unreadable);
    }
    Ok(read.records)
}

fn query(store: &Store, owner: &Owner, filter: &AcctQuery) -> Result<Reply, Error> {
    let mut records = readable(store, owner, filter)?;
    if records.iter().any(|r| r.state == JobState::Running) {
        let running = owner.running();
        for record in records.iter_mut().filter(|r| r.state == JobState::Running) {
            if let Some(live) = running.iter().find(|r| r.key == record.key) {
                record.gpus = live.gpus.clone();
            }
        }
    }
    Ok(Reply::Acct { records })
}
