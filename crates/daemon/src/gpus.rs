//! The node's GPUs behind one worker thread each, every call with a deadline.
//!
//! NVML calls block, and a wedged driver or a GPU stuck in a reset can block them for good.
//! [`GpuPool`] runs each GPU's calls on that GPU's own thread: a caller waits at most the
//! deadline, and once a GPU has a call past its deadline every further call to it fails at once
//! ([`GpuError::Timeout`]) until the stuck call returns. One hung GPU therefore delays only the
//! jobs on it, and only once.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::time::Duration;

use wattson_gpu::{GpuBackend, GpuError, GpuInfo, GpuSettings};
use wattson_types::energy::GpuReading;

type Job = Box<dyn FnOnce(&dyn GpuBackend) + Send>;

/// One GPU's worker: its queue and whether a call on it is past its deadline.
struct Worker {
    queue: SyncSender<Job>,
    stuck: Arc<AtomicBool>,
}

/// The node's GPUs, each behind its own thread; itself a [`GpuBackend`].
pub struct GpuPool {
    devices: Vec<GpuInfo>,
    workers: Vec<Worker>,
    deadline: Duration,
}

impl GpuPool {
    /// Starts one worker thread per GPU of `backend`.
    pub fn new(backend: Arc<dyn GpuBackend>, deadline: Duration) -> GpuPool {
        let devices = backend.devices().to_vec();
        let workers = devices
            .iter()
            .map(|info| {
                // A short queue: a GPU that does not drain it is stuck, and callers fail fast.
                let (tx, rx) = sync_channel::<Job>(16);
                let backend = backend.clone();
                std::thread::Builder::new()
                    .name(format!("gpu{}", info.index))
                    .spawn(move || serve(backend, rx))
                    .expect("spawn a GPU worker thread");
                Worker { queue: tx, stuck: Arc::new(AtomicBool::new(false)) }
            })
            .collect();
        GpuPool { devices, workers, deadline }
    }

    /// Whether GPU `index` has a call past its deadline.
    pub fn is_stuck(&self, index: u32) -> bool {
        self.workers.get(index as usize).is_some_and(|w| w.stuck.load(Ordering::Acquire))
    }

    /// Runs `call` on GPU `index`'s thread and waits at most the deadline for its result.
    fn call<T: Send + 'static>(
        &self,
        index: u32,
        call: impl FnOnce(&dyn GpuBackend) -> Result<T, GpuError> + Send + 'static,
    ) -> Result<T, GpuError> {
        let (tx, rx) = sync_channel(1);
        self.start(index, call, tx)?;
        self.wait(index, &rx)
    }

    /// Waits at most the deadline for a call started on GPU `index`; past it, the GPU is stuck.
    fn wait<T>(&self, index: u32, rx: &Receiver<Result<T, GpuError>>) -> Result<T, GpuError> {
        rx.recv_timeout(self.deadline).map_err(|_| {
            self.workers[index as usize].stuck.store(true, Ordering::Release);
            GpuError::Timeout(self.deadline)
        })?
    }

    /// Runs `call` on each GPU of `indices` at once, each on its own thread within the
    /// deadline; results in the order given.
    pub fn each<T: Send + 'static>(
        &self,
        indices: &[u32],
        call: impl Fn(&dyn GpuBackend, u32) -> Result<T, GpuError> + Clone + Send + 'static,
    ) -> Vec<Result<T, GpuError>> {
        let started: Vec<_> = indices
            .iter()
            .map(|&i| {
                let (tx, rx) = sync_channel(1);
                let call = call.clone();
                (self.start(i, move |b| call(b, i), tx), rx)
            })
            .collect();
        started
            .into_iter()
            .zip(indices)
            .map(|((started, rx), &i)| started.and_then(|()| self.wait(i, &rx)))
            .collect()
    }

    /// Reads every GPU at once, each within the deadline; results by index.
    pub fn read_all(&self) -> Vec<Result<GpuReading, GpuError>> {
        let all: Vec<u32> = (0..self.devices.len() as u32).collect();
        self.each(&all, |b, i| b.read(i))
    }

    /// Queues `call` on GPU `index` with its result going to `tx`, without waiting.
    fn start<T: Send + 'static>(
        &self,
        index: u32,
        call: impl FnOnce(&dyn GpuBackend) -> Result<T, GpuError> + Send + 'static,
        tx: SyncSender<Result<T, GpuError>>,
    ) -> Result<(), GpuError> {
        let worker =
            self.workers.get(index as usize).ok_or_else(|| GpuError::NotFound(format!("index {index}")))?;
        if worker.stuck.load(Ordering::Acquire) {
            return Err(GpuError::Timeout(self.deadline));
        }
        let stuck = worker.stuck.clone();
        let job: Job = Box::new(move |backend| {
            let result = call(backend);
            stuck.store(false, Ordering::Release);
            let _ = tx.send(result);
        });
        worker.queue.try_send(job).map_err(|_| {
            worker.stuck.store(true, Ordering::Release);
            GpuError::Timeout(self.deadline)
        })
    }
}

fn serve(backend: Arc<dyn GpuBackend>, jobs: Receiver<Job>) {
    while let Ok(job) = jobs.recv() {
        job(backend.as_ref());
    }
}

impl GpuBackend for GpuPool {
    fn devices(&self) -> &[GpuInfo] {
        &self.devices
    }

    fn read(&self, index: u32) -> Result<GpuReading, GpuError> {
        self.call(index, move |b| b.read(index))
    }

    fn read_many(&self, indices: &[u32]) -> Vec<Result<GpuReading, GpuError>> {
        self.each(indices, |b, i| b.read(i))
    }

    fn settings(&self, index: u32) -> Result<GpuSettings, GpuError> {
        self.call(index, move |b| b.settings(index))
    }

    fn compute_processes(&self, index: u32) -> Result<Vec<u32>, GpuError> {
        self.call(index, move |b| b.compute_processes(index))
    }

    fn set_power_limit(&self, index: u32, mw: u32) -> Result<(), GpuError> {
        self.call(index, move |b| b.set_power_limit(index, mw))
    }

    fn set_locked_clocks(&self, index: u32, min_mhz: u32, max_mhz: u32) -> Result<(), GpuError> {
        self.call(index, move |b| b.set_locked_clocks(index, min_mhz, max_mhz))
    }

    fn reset_locked_clocks(&self, index: u32) -> Result<(), GpuError> {
        self.call(index, move |b| b.reset_locked_clocks(index))
    }

    fn restore_defaults(&self, index: u32) -> Result<(), GpuError> {
        // One trip to the GPU's thread for both calls.
        self.call(index, move |b| b.restore_defaults(index))
    }
}
