//! The sampler: reads every GPU at each interval (on a helper thread, each GPU within the
//! deadline), hands the readings to the state owner, and keeps the metrics. It also answers
//! `status` (requests that arrive together share one round of GPU reads, so users asking for
//! status cannot multiply the daemon's NVML calls) and `/metrics` scrapes (encoded only when
//! asked for).

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::time::MissedTickBehavior;
use tracing::warn;

use crate::asks::{Ask, SamplerHandle};
use crate::gpu_pool::GpuPool;
use crate::metrics::Metrics;
use crate::owner::Owner;
use wattson_gpu::GpuBackend;
use wattson_protocol::{GpuStatus, Reply};

/// Requests waiting beyond this are refused as busy.
const QUEUE: usize = 256;

/// The sampler's parts, before it starts.
pub struct Sampler {
    pool: Arc<GpuPool>,
    /// Whether the state reads the node's meters besides the GPUs at each sample.
    node: bool,
    owner: Owner,
    node_name: String,
    metrics: Metrics,
    requests: mpsc::Receiver<Ask>,
}

impl Sampler {
    /// A sampler over `pool`, and the handle to ask it things.
    pub fn new(
        pool: Arc<GpuPool>,
        owner: Owner,
        node: String,
        job_metrics: bool,
    ) -> (Sampler, SamplerHandle) {
        let metrics = Metrics::new(&node, pool.devices(), job_metrics);
        let (tx, requests) = mpsc::channel(QUEUE);
        (
            Sampler { pool, node: false, owner, node_name: node, metrics, requests },
            SamplerHandle { requests: tx },
        )
    }

    /// Also has the state read the node's meters besides the GPUs at every sample (the state
    /// holds them: it reads them at jobs' begins and ends too).
    pub fn with_node_meters(mut self) -> Sampler {
        self.node = true;
        self
    }

    /// One sample now: read, advance the meters, update the metrics.
    pub async fn sample_once(&mut self) {
        let pool = self.pool.clone();
        let readings = match tokio::task::spawn_blocking(move || pool.read_all()).await {
            Ok(readings) => readings,
            Err(e) => return warn!(error = %e, "GPU reads failed"),
        };
        match self.owner.sample(readings).await {
            Ok(tick) => self.metrics.observe(&tick),
            Err(e) => warn!(error = %e, "cannot advance the meters"),
        }
        if self.node
            && let Err(e) = self.owner.node_energy().await
        {
            warn!(error = %e, "cannot share the node's energy among the jobs");
        }
    }

    /// Samples every `every` and answers requests, until the task is dropped.
    pub async fn run(mut self, every: Duration) {
        // Ping systemd's watchdog only where the unit asked for one (WatchdogSec).
        let watchdog = sd_notify::watchdog_enabled().is_some();
        let mut interval = tokio::time::interval(every);
        interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = interval.tick() => {
                    self.sample_once().await;
                    // Alive: sampled, and the state owner advanced the meters.
                    if watchdog {
                        let _ = sd_notify::notify(&[sd_notify::NotifyState::Watchdog]);
                    }
                }
                Some(first) = self.requests.recv() => {
                    let mut status = Vec::new();
                    for ask in std::iter::once(first).chain(std::iter::from_fn(|| self.requests.try_recv().ok())) {
                        match ask {
                            Ask::Status(tx) => status.push(tx),
                            Ask::Metrics(tx) => {
                                let _ = tx.send(self.metrics.encode());
                            }
                        }
                    }
                    if !status.is_empty() {
                        let reply = self.status().await;
                        for tx in status {
                            let _ = tx.send(reply.clone());
                        }
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
        Reply::Status { node: self.node_name.clone(), gpus }
    }
}

/// Every GPU's reading, settings and processes, in one batch on a helper thread (jobs are
/// filled in by the caller).
fn read_status(pool: &GpuPool) -> Vec<GpuStatus> {
    let all: Vec<u32> = pool.devices().iter().map(|d| d.index).collect();
    let read = pool.each(&all, |b, i| {
        let reading = b.read(i)?;
        Ok((reading, b.settings(i).ok(), b.compute_processes(i).unwrap_or_default()))
    });
    pool.devices()
        .iter()
        .zip(read)
        .map(|(info, read)| {
            let (reading, error, settings, processes) = match read {
                Ok((reading, settings, processes)) => (Some(reading), None, settings, processes),
                Err(e) => (None, Some(e.to_string()), None, Vec::new()),
            };
            GpuStatus { info: info.clone(), error, reading, settings, processes, jobs: Vec::new() }
        })
        .collect()
}
