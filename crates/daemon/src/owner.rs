//! The one owner of the daemon's state: a thread that holds [`State`] (job meters, the GPU
//! settings journal, the prober, the store's writer) and takes commands over a channel, each
//! with a reply. Nothing else touches the state; what others need to read (the running jobs and
//! their meters) is published after every command.

use std::sync::Arc;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};

use tokio::sync::{oneshot, watch};
use tracing::{info, warn};

use crate::state::{State, Tick};
use wattson_engine::Measurements;
use wattson_gpu::GpuError;
use wattson_protocol::{Error, ErrorCode, JobBegin, Pace, Reply};
use wattson_store::Unreadable;
use wattson_types::energy::GpuReading;
use wattson_types::job::{JobKey, JobRecord};

/// Commands queued beyond this are refused as busy rather than piling up.
const QUEUE: usize = 1024;

/// What the owner is asked to do.
enum Command {
    Begin(JobBegin, oneshot::Sender<Result<Reply, Error>>),
    End(JobKey, oneshot::Sender<Result<Reply, Error>>),
    Settings(JobKey, oneshot::Sender<Result<Reply, Error>>),
    Pace(u32, Pace, oneshot::Sender<Result<Reply, Error>>),
    Levels(u32, oneshot::Sender<Result<Reply, Error>>),
    Models(oneshot::Sender<Result<Reply, Error>>),
    MergeModels(Vec<Measurements>, oneshot::Sender<Result<Reply, Error>>),
    Sample(Vec<Result<GpuReading, GpuError>>, oneshot::Sender<Tick>),
    NodeEnergy(Option<std::time::Duration>, oneshot::Sender<()>),
    Shutdown(Vec<Result<GpuReading, GpuError>>, oneshot::Sender<()>),
    Quarantine(Vec<Unreadable>),
}

/// The running jobs as of the owner's last command, for readers.
pub type Running = Arc<Vec<JobRecord>>;

/// A handle to the owner: cheap to clone, one per task that needs it.
#[derive(Clone)]
pub struct Owner {
    commands: SyncSender<Command>,
    running: watch::Receiver<Running>,
}

impl Owner {
    /// Starts the owner thread on `core`.
    pub fn spawn(core: State) -> Owner {
        let (commands, inbox) = sync_channel(QUEUE);
        let (publish, running) = watch::channel(Arc::new(core.running().cloned().collect()));
        std::thread::Builder::new()
            .name("state".into())
            .spawn(move || run(core, inbox, publish))
            .expect("spawn the state owner thread");
        Owner { commands, running }
    }

    /// The running jobs, as last published.
    pub fn running(&self) -> Running {
        self.running.borrow().clone()
    }

    /// Records a job's start.
    pub async fn begin(&self, req: JobBegin) -> Result<Reply, Error> {
        self.ask(|tx| Command::Begin(req, tx)).await?
    }

    /// Records a job's end.
    pub async fn end(&self, job: JobKey) -> Result<Reply, Error> {
        self.ask(|tx| Command::End(job, tx)).await?
    }

    /// A running job's decision and settings.
    pub async fn settings(&self, job: JobKey) -> Result<Reply, Error> {
        self.ask(|tx| Command::Settings(job, tx)).await?
    }

    /// Sets a running job's pace (the controller's request).
    pub async fn pace(&self, job: u32, pace: Pace) -> Result<Reply, Error> {
        self.ask(|tx| Command::Pace(job, pace, tx)).await?
    }

    /// A running job's level table (the controller's request, for the power budget).
    pub async fn levels(&self, job: u32) -> Result<Reply, Error> {
        self.ask(|tx| Command::Levels(job, tx)).await?
    }

    /// Every workload's stored measurements.
    pub async fn models(&self) -> Result<Reply, Error> {
        self.ask(Command::Models).await?
    }

    /// Takes the controller's merge of every node's measurements.
    pub async fn merge_models(&self, models: Vec<Measurements>) -> Result<Reply, Error> {
        self.ask(|tx| Command::MergeModels(models, tx)).await?
    }

    /// Advances the meters with one reading of every GPU.
    pub async fn sample(&self, readings: Vec<Result<GpuReading, GpuError>>) -> Result<Tick, Error> {
        self.ask(|tx| Command::Sample(readings, tx)).await
    }

    /// Has the state read the node's meters besides the GPUs and share what they drew among
    /// the running jobs.
    pub async fn node_energy(&self) -> Result<(), Error> {
        self.ask(|tx| Command::NodeEnergy(None, tx)).await
    }

    /// [`Owner::node_energy`] only if the last reading is older than `age` (a figure asked for
    /// now, at most so stale, without a reading for each of many requests).
    pub async fn node_energy_older_than(&self, age: std::time::Duration) -> Result<(), Error> {
        self.ask(|tx| Command::NodeEnergy(Some(age), tx)).await
    }

    /// Persists the meters one last time, restores orphaned GPUs, and stops the owner.
    pub async fn shutdown(&self, readings: Vec<Result<GpuReading, GpuError>>) {
        let _ = self.ask(|tx| Command::Shutdown(readings, tx)).await;
    }

    /// Moves the records a reader could not read to the store's quarantine (if they still
    /// cannot be read); answers nothing and never waits.
    pub fn quarantine(&self, rows: Vec<Unreadable>) {
        let _ = self.commands.try_send(Command::Quarantine(rows));
    }

    async fn ask<T>(&self, command: impl FnOnce(oneshot::Sender<T>) -> Command) -> Result<T, Error> {
        let (tx, rx) = oneshot::channel();
        match self.commands.try_send(command(tx)) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return Err(Error::new(ErrorCode::Busy, "wattsond is busy: too many requests queued; retry"));
            }
            Err(TrySendError::Disconnected(_)) => return Err(stopped()),
        }
        rx.await.map_err(|_| stopped())
    }
}

fn stopped() -> Error {
    Error::new(ErrorCode::Internal, "wattsond's state owner has stopped")
}

fn run(mut core: State, inbox: Receiver<Command>, publish: watch::Sender<Running>) {
    while let Ok(command) = inbox.recv() {
        // A panic in one command must not take the state down with it: the store already
        // holds every committed change, and the caller gets an error.
        let outcome = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| match command {
            Command::Begin(req, reply) => {
                let _ = reply.send(core.begin(req));
                false
            }
            Command::End(job, reply) => {
                let _ = reply.send(core.end(&job));
                false
            }
            Command::Settings(job, reply) => {
                let _ = reply.send(core.settings(&job));
                false
            }
            Command::Pace(job, pace, reply) => {
                let _ = reply.send(core.pace(job, pace));
                false
            }
            Command::Levels(job, reply) => {
                let _ = reply.send(core.levels(job));
                false
            }
            Command::Models(reply) => {
                let _ = reply.send(core.models());
                false
            }
            Command::MergeModels(models, reply) => {
                let _ = reply.send(core.merge_models(&models));
                false
            }
            Command::Sample(readings, reply) => {
                let _ = reply.send(core.sample(readings));
                false
            }
            Command::Quarantine(rows) => {
                core.quarantine(&rows);
                false
            }
            Command::NodeEnergy(older_than, reply) => {
                core.sample_node_older_than(older_than);
                let _ = reply.send(());
                false
            }
            Command::Shutdown(readings, reply) => {
                core.sample(readings);
                // The node's energy up to the stop is the running jobs' too.
                core.sample_node();
                core.restore_orphans();
                let _ = reply.send(());
                true
            }
        }));
        publish.send_replace(Arc::new(core.running().cloned().collect()));
        match outcome {
            Ok(true) => break,
            Ok(false) => {}
            Err(_) => warn!("a command panicked; its caller gets an error and the daemon goes on"),
        }
    }
    info!("state owner stopped");
}
