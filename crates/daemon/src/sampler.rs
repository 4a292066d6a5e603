//! The sampler: reads every GPU at each interval (each GPU on its own thread, within the
//! deadline), hands the readings to the state owner, and publishes metrics. It also answers
//! `status`: requests that arrive together share one round of GPU reads, so users asking for
//! status cannot multiply the daemon's NVML calls.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::MissedTickBehavior;
use tracing::warn;

use crate::gpus::GpuPool;
use crate::metrics::Metrics;
use crate::owner::Owner;
use wattson_gpu::GpuBackend;
use wattson_protocol::{GpuStatus, Reply};

/// Status requests waiting beyond this are refused as busy.
const QUEUE: usize = 256;

/// A handle for asking the sampler for the node's status.
#[derive(Clone)]
pub struct StatusRequests {
    requests: mpsc::Sender<oneshot::Sender<Reply>>,
}

impl StatusRequests {
    /// The node's GPUs as read now (or by a read that started after this call), with their jobs.
    pub async fn status(&self) -> Option<Reply> {
        let (tx, rx) = oneshot::channel();
        self.requests.try_send(tx).ok()?;
        rx.await.ok()
    }
}

/// The sampler's parts, before it starts.
pub struct Sampler {
    pool: Arc<GpuPool>,
    owner: Owner,
    node: String,
    metrics: Metrics,
    published: watch::Sender<Arc<str>>,
    requests: mpsc::Receiver<oneshot::Sender<Reply>>,
}

impl Sampler {
    /// A sampler over `pool`; returns it with the status handle and the published metrics.
    pub fn new(
        pool: Arc<GpuPool>,
        owner: Owner,
        node: String,
    ) -> (Sampler, StatusRequests, watch::Receiver<Arc<str>>) {
        let metrics = Metrics::new(&node, pool.devices());
        let (published, metrics_text) = watch::channel(Arc::from(metrics.encode()));
        let (tx, requests) = mpsc::channel(QUEUE);
        let sampler = Sampler { pool, owner, node, metrics, published, requests };
        (sampler, StatusRequests { requests: tx }, metrics_text)
    }

    /// One sample now: read, advance the meters, publish metrics.
    pub async fn sample_once(&mut self) {
        let pool = self.pool.clone();
        let readings = match tokio::task::spawn_blocking(move || pool.read_all()).await {
            Ok(readings) => readings,
            Err(e) => return warn!(error = %e, "GPU reads failed"),
        };
        match self.owner.sample(readings).await {
            Ok(tick) => {
                self.metrics.observe(&tick);
                self.published.send_replace(Arc::from(self.metrics.encode()));
            }
            Err(e) => warn!(error = %e, "cannot advance the meters"),
        }
    }

    /// Samples every `every` and answers status requests, until the task is dropped.
    pub async fn run(mut self, every: Duration) {
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => self.sample_once().await,
                Some(first) = self.requests.recv() => {
                    let mut waiting = vec![first];
                    while let Ok(more) = self.requests.try_recv() {
                        waiting.push(more);
                    }
                    let reply = self.status().await;
                    for tx in waiting {
                        let _ = tx.send(reply.clone());
                    }
                }
            }
        }
    }

    async fn status(&self) -> Reply {
        let pool = self.pool.clone();
        let gpus = tokio::task::spawn_blocking(move || read_status(&pool)).await.unwrap_or_default();
        let running = self.owner.running();
        let gpus = gpus
            .into_iter()
            .map(|mut gpu| {
                gpu.jobs = running
                    .iter()
                    .filter(|r| r.gpus.iter().any(|g| g.index == gpu.info.index))
                    .map(|r| r.key.clone())
                    .collect();
                gpu
            })
            .collect();
        Reply::Status { node: self.node.clone(), gpus }
    }
}

/// Every GPU's reading, settings and processes (jobs are filled in by the caller).
fn read_status(pool: &GpuPool) -> Vec<GpuStatus> {
    let readings = pool.read_all();
    pool.devices()
        .iter()
        .zip(readings)
        .map(|(info, reading)| {
            // A GPU that did not answer the read is not asked again.
            let (settings, processes) = match &reading {
                Ok(_) => {
                    (pool.settings(info.index).ok(), pool.compute_processes(info.index).unwrap_or_default())
                }
                Err(_) => (None, Vec::new()),
            };
            GpuStatus {
                info: info.clone(),
                error: reading.as_ref().err().map(|e| e.to_string()),
                reading: reading.ok(),
                settings,
                processes,
                jobs: Vec::new(),
            }
        })
        .collect()
}
