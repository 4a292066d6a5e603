//! The node's GPUs behind disposable helper threads, every call with a deadline.
//!
//! NVML calls block, and a wedged driver or a GPU stuck in a reset can block them for good.
//! [`GpuPool`] never makes a GPU call on its caller's thread: a batch of calls (one per GPU)
//! runs on a helper thread, one GPU after the other as a single reader would, while the caller
//! waits at most the deadline for each call. A call past its deadline marks its GPU stuck and
//! its helper is given up (it stays blocked in the driver); the batch's other GPUs go on on
//! another helper, and every further call to the stuck GPU fails at once
//! ([`GpuError::Timeout`]) until the blocked call returns. One hung GPU therefore delays only
//! the callers that meet it first, by one deadline, and never the other GPUs' calls after.
//!
//! A batch is one hand-over to a helper and one back, whatever its size: the daemon's sample
//! of every GPU costs two thread switches, not two per GPU.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use wattson_gpu::{GpuBackend, GpuError, GpuInfo, GpuSettings};
use wattson_types::energy::GpuReading;

/// At most this many helper threads: more would mean helpers blocked in the driver on GPUs
/// already known stuck, which are never called again while stuck.
const MAX_HELPERS: usize = 64;

type Task = Box<dyn FnOnce() + Send>;

/// The node's GPUs, called on helper threads within a deadline; itself a [`GpuBackend`].
pub struct GpuPool {
    backend: Arc<dyn GpuBackend>,
    /// Per GPU: whether a call on it is past its deadline and has not returned.
    stuck: Arc<[AtomicBool]>,
    helpers: Arc<Helpers>,
    deadline: Duration,
}

impl GpuPool {
    /// A pool over `backend`'s GPUs; helpers are started as calls need them.
    pub fn new(backend: Arc<dyn GpuBackend>, deadline: Duration) -> GpuPool {
        let stuck = backend.devices().iter().map(|_| AtomicBool::new(false)).collect();
        GpuPool { backend, stuck, helpers: Arc::new(Helpers::default()), deadline }
    }

    /// Whether GPU `index` has a call past its deadline.
    pub fn is_stuck(&self, index: u32) -> bool {
        self.stuck.get(index as usize).is_some_and(|s| s.load(Ordering::Acquire))
    }

    /// Runs `call` on each GPU of `indices`, one after the other on a helper thread, each
    /// within the deadline; results in the order given.
    pub fn each<T: Send + 'static>(
        &self,
        indices: &[u32],
        call: impl Fn(&dyn GpuBackend, u32) -> Result<T, GpuError> + Clone + Send + 'static,
    ) -> Vec<Result<T, GpuError>> {
        let mut results: Vec<Option<Result<T, GpuError>>> = indices.iter().map(|_| None).collect();
        let mut from = 0;
        while from < indices.len() {
            let mut todo = Vec::new();
            for (pos, &index) in indices.iter().enumerate().skip(from) {
                match self.stuck.get(index as usize) {
                    None => results[pos] = Some(Err(GpuError::NotFound(format!("index {index}")))),
                    Some(s) if s.load(Ordering::Acquire) => {
                        results[pos] = Some(Err(GpuError::Timeout(self.deadline)))
                    }
                    Some(_) => todo.push((pos, index)),
                }
            }
            if todo.is_empty() {
                break;
            }
            let batch = Arc::new(Batch::new(todo.len()));
            let task = {
                let (batch, backend, stuck, call) =
                    (batch.clone(), self.backend.clone(), self.stuck.clone(), call.clone());
                let todo = todo.clone();
                Box::new(move || batch.run(&todo, backend.as_ref(), &stuck, call))
            };
            if !self.helpers.submit(task) {
                for (pos, _) in todo {
                    results[pos] = Some(Err(GpuError::Timeout(self.deadline)));
                }
                break;
            }
            // Everything before the call past its deadline is settled; the rest starts anew.
            let (done, hung) = batch.wait(self.deadline);
            for (k, result) in done.into_iter().enumerate() {
                results[todo[k].0] = result;
            }
            match hung {
                None => break,
                Some(k) => {
                    let (pos, index) = todo[k];
                    self.stuck[index as usize].store(true, Ordering::Release);
                    results[pos] = Some(Err(GpuError::Timeout(self.deadline)));
                    from = pos + 1;
                }
            }
        }
        results.into_iter().map(|r| r.unwrap_or(Err(GpuError::Timeout(self.deadline)))).collect()
    }

    /// Reads every GPU, each within the deadline; results by index.
    pub fn read_all(&self) -> Vec<Result<GpuReading, GpuError>> {
        let all: Vec<u32> = (0..self.stuck.len() as u32).collect();
        self.each(&all, |b, i| b.read(i))
    }

    /// Runs `call` on GPU `index` within the deadline.
    fn call<T: Send + 'static>(
        &self,
        index: u32,
        call: impl Fn(&dyn GpuBackend, u32) -> Result<T, GpuError> + Clone + Send + 'static,
    ) -> Result<T, GpuError> {
        self.each(&[index], call).pop().unwrap_or(Err(GpuError::Timeout(self.deadline)))
    }
}

/// One batch of calls in flight: the helper fills it in, the caller watches the clock.
struct Batch<T> {
    state: Mutex<BatchState<T>>,
    finished: Condvar,
}

struct BatchState<T> {
    /// Results so far, by position in the batch.
    results: Vec<Option<Result<T, GpuError>>>,
    /// The position being called and since when.
    current: Option<(usize, Instant)>,
    finished: bool,
    /// The caller gave up on the batch: the helper makes no further call.
    abandoned: bool,
}

impl<T> Batch<T> {
    fn new(len: usize) -> Batch<T> {
        let results = (0..len).map(|_| None).collect();
        let state = BatchState { results, current: None, finished: false, abandoned: false };
        Batch { state: Mutex::new(state), finished: Condvar::new() }
    }

    fn lock(&self) -> MutexGuard<'_, BatchState<T>> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The helper's side: calls each GPU in turn, recording each result as it comes.
    fn run(
        &self,
        todo: &[(usize, u32)],
        backend: &dyn GpuBackend,
        stuck: &[AtomicBool],
        call: impl Fn(&dyn GpuBackend, u32) -> Result<T, GpuError>,
    ) {
        for (k, &(_, index)) in todo.iter().enumerate() {
            {
                let mut state = self.lock();
                if state.abandoned {
                    return;
                }
                state.current = Some((k, Instant::now()));
            }
            let result = call(backend, index);
            // The call returned: whoever marked the GPU stuck for it may call it again.
            stuck[index as usize].store(false, Ordering::Release);
            let mut state = self.lock();
            state.results[k] = Some(result);
            state.current = None;
        }
        self.lock().finished = true;
        self.finished.notify_one();
    }

    /// The caller's side: waits until the batch is done, or until its current call has run
    /// past `deadline`. Returns the results so far and the position of the call given up on.
    fn wait(&self, deadline: Duration) -> (Vec<Option<Result<T, GpuError>>>, Option<usize>) {
        let mut state = self.lock();
        loop {
            if state.finished {
                return (std::mem::take(&mut state.results), None);
            }
            // Before the helper starts, count from now: a queued batch is not a hung GPU.
            let (k, since) = state.current.unwrap_or((usize::MAX, Instant::now()));
            let left = deadline.saturating_sub(since.elapsed());
            if left.is_zero() && k != usize::MAX {
                state.abandoned = true;
                return (std::mem::take(&mut state.results), Some(k));
            }
            state = self
                .finished
                .wait_timeout(state, left.max(Duration::from_millis(1)))
                .map(|(s, _)| s)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }
}

/// Helper threads: started when every one is busy, kept idle otherwise.
#[derive(Default)]
struct Helpers {
    queue: Mutex<VecDeque<Task>>,
    ready: Condvar,
    /// Helpers waiting for a task and not yet promised to one.
    idle: AtomicUsize,
    started: AtomicUsize,
}

impl Helpers {
    /// Hands `task` to an idle helper, or to a new one; false when no helper can be had.
    fn submit(self: &Arc<Helpers>, task: Task) -> bool {
        // Promise the task an idle helper, or start one: a task never waits behind a helper
        // that is blocked in the driver.
        let promised =
            self.idle.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1)).is_ok();
        if !promised {
            if self.started.fetch_add(1, Ordering::AcqRel) >= MAX_HELPERS {
                self.started.fetch_sub(1, Ordering::AcqRel);
                return false;
            }
            let helpers = self.clone();
            let spawned = std::thread::Builder::new().name("gpu-call".into()).spawn(move || helpers.serve());
            if spawned.is_err() {
                self.started.fetch_sub(1, Ordering::AcqRel);
                return false;
            }
        }
        self.queue.lock().unwrap_or_else(PoisonError::into_inner).push_back(task);
        self.ready.notify_one();
        true
    }

    fn serve(&self) {
        loop {
            let task = {
                let mut queue = self.queue.lock().unwrap_or_else(PoisonError::into_inner);
                loop {
                    if let Some(task) = queue.pop_front() {
                        break task;
                    }
                    queue = self.ready.wait(queue).unwrap_or_else(PoisonError::into_inner);
                }
            };
            task();
            self.idle.fetch_add(1, Ordering::AcqRel);
        }
    }
}

impl GpuBackend for GpuPool {
    fn devices(&self) -> &[GpuInfo] {
        self.backend.devices()
    }

    fn read(&self, index: u32) -> Result<GpuReading, GpuError> {
        self.call(index, |b, i| b.read(i))
    }

    fn read_many(&self, indices: &[u32]) -> Vec<Result<GpuReading, GpuError>> {
        self.each(indices, |b, i| b.read(i))
    }

    fn read_counters(&self, indices: &[u32]) -> Vec<Result<(i64, Option<u64>), GpuError>> {
        self.each(indices, |b, i| b.read_counter(i))
    }

    fn settings(&self, index: u32) -> Result<GpuSettings, GpuError> {
        self.call(index, |b, i| b.settings(i))
    }

    fn compute_processes(&self, index: u32) -> Result<Vec<u32>, GpuError> {
        self.call(index, |b, i| b.compute_processes(i))
    }

    fn process_utilization(&self, index: u32, since_us: u64) -> Result<Vec<(u32, u32)>, GpuError> {
        self.call(index, move |b, i| b.process_utilization(i, since_us))
    }

    fn set_power_limit(&self, index: u32, mw: u32) -> Result<(), GpuError> {
        self.call(index, move |b, i| b.set_power_limit(i, mw))
    }

    fn set_locked_clocks(&self, index: u32, min_mhz: u32, max_mhz: u32) -> Result<(), GpuError> {
        self.call(index, move |b, i| b.set_locked_clocks(i, min_mhz, max_mhz))
    }

    fn reset_locked_clocks(&self, index: u32) -> Result<(), GpuError> {
        self.call(index, |b, i| b.reset_locked_clocks(i))
    }

    fn restore_defaults(&self, index: u32) -> Result<(), GpuError> {
        // One trip to a helper for both calls.
        self.call(index, |b, i| b.restore_defaults(i))
    }
}
