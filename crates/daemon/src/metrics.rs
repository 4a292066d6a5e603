//! Prometheus `/metrics` under wattson's own names, so that a node that also runs
//! dcgm-exporter serves no metric twice: per-GPU energy (a counter, read from the GPU's own
//! counter), power, SM clock and utilisation (gauges, in base units), whether each GPU
//! answered, and per-job energy with the job label when the site asks for it.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use prometheus_client::encoding::text::encode;
use prometheus_client::encoding::{EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::{MetricType, TypedMetric};
use prometheus_client::registry::Registry;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tracing::{debug, warn};

use crate::asks::SamplerHandle;

use crate::state::Tick;
use wattson_gpu::GpuInfo;
use wattson_types::job::JobKey;

type Labels = Vec<(&'static str, String)>;
type Gauges = Family<Labels, Gauge<f64, AtomicU64>>;
type Counters = Family<Labels, ReadCounter>;

/// A counter whose value is read from the device (the GPU's energy counter), not counted
/// here. It restarts from zero when the driver reloads, which Prometheus takes as a reset.
#[derive(Debug, Default, Clone)]
pub struct ReadCounter(Arc<AtomicU64>);

impl ReadCounter {
    fn set(&self, value: f64) {
        self.0.store(value.to_bits(), Ordering::Relaxed);
    }
}

impl TypedMetric for ReadCounter {
    const TYPE: MetricType = MetricType::Counter;
}

impl EncodeMetric for ReadCounter {
    fn encode(&self, mut encoder: MetricEncoder) -> Result<(), std::fmt::Error> {
        encoder.encode_counter::<NoLabelSet, _, u64>(&f64::from_bits(self.0.load(Ordering::Relaxed)), None)
    }

    fn metric_type(&self) -> MetricType {
        Self::TYPE
    }
}

/// How long one scrape connection may last, request and answer together.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(5);

/// Most scrape connections open at once (counted in the daemon's own open files).
pub const SCRAPE_CONNECTIONS: usize = 256;

/// How long a scrape connection may take to send its request's headers: a scraper sends
/// them at once, so half-sent requests give their place back within this.
pub const HEADER_TIMEOUT: Duration = Duration::from_secs(1);

/// The daemon's metrics.
pub struct Metrics {
    registry: Registry,
    power_w: Gauges,
    energy_j: Counters,
    unattributed_j: Counters,
    sm_clock_hz: Gauges,
    util_ratio: Gauges,
    gpu_up: Gauges,
    /// Per-job energy, when the site serves it (`[metrics] jobs`).
    job_energy_j: Option<Gauges>,
    gpu_labels: Vec<Labels>,
    job_labels: Vec<Labels>,
}

impl Metrics {
    /// Registers the metrics for these GPUs, with per-job energy if `jobs`.
    pub fn new(node: &str, gpus: &[GpuInfo], jobs: bool) -> Metrics {
        let mut registry = Registry::default();
        let mut gauge = |name: &str, help: &str| {
            let family = Gauges::default();
            registry.register(name, help, family.clone());
            family
        };
        let power_w = gauge("wattson_gpu_power_watts", "Power draw of the GPU");
        let sm_clock_hz = gauge("wattson_gpu_sm_clock_hertz", "SM clock of the GPU");
        let util_ratio =
            gauge("wattson_gpu_utilization_ratio", "Share of the last sample period the GPU was busy");
        let gpu_up = gauge("wattson_gpu_up", "1 if the GPU answered the last sample, else 0");
        let job_energy_j =
            jobs.then(|| gauge("wattson_job_gpu_energy_joules", "GPU energy of a running job so far (in J)"));
        let energy_j = Counters::default();
        registry.register(
            "wattson_gpu_energy_joules",
            "Energy the GPU consumed since its driver loaded (NVML's energy counter)",
            energy_j.clone(),
        );
        let unattributed_j = Counters::default();
        registry.register(
            "wattson_gpu_unattributed_energy_joules",
            "Energy of a shared GPU that processes of no job on it used, given to no job",
            unattributed_j.clone(),
        );
        let gpu_labels = gpus
            .iter()
            .map(|g| {
                vec![
                    ("gpu", g.index.to_string()),
                    ("uuid", g.uuid.clone()),
                    ("model", g.name.clone()),
                    ("node", node.to_string()),
                ]
            })
            .collect();
        Metrics {
            registry,
            power_w,
            energy_j,
            unattributed_j,
            sm_clock_hz,
            util_ratio,
            gpu_up,
            job_energy_j,
            gpu_labels,
            job_labels: Vec::new(),
        }
    }

    /// Updates every gauge from a sampling tick; jobs that ended disappear.
    pub fn observe(&mut self, tick: &Tick) {
        for (labels, reading) in self.gpu_labels.iter().zip(&tick.readings) {
            self.gpu_up.get_or_create(labels).set(if reading.is_ok() { 1.0 } else { 0.0 });
            let Ok(r) = reading else { continue };
            let set = |family: &Gauges, value: Option<f64>| match value {
                Some(v) => {
                    family.get_or_create(labels).set(v);
                }
                None => {
                    family.remove(labels);
                }
            };
            set(&self.power_w, r.power_mw.map(|p| f64::from(p) / 1e3));
            set(&self.sm_clock_hz, r.sm_clock_mhz.map(|f| f64::from(f) * 1e6));
            set(&self.util_ratio, r.util_pct.map(|u| f64::from(u) / 100.0));
            match r.energy_mj {
                Some(mj) => self.energy_j.get_or_create(labels).set(mj as f64 / 1e3),
                None => {
                    self.energy_j.remove(labels);
                }
            }
        }
        for (&index, &mj) in &tick.unattributed {
            if let Some(labels) = self.gpu_labels.get(index as usize) {
                self.unattributed_j.get_or_create(labels).set(mj / 1e3);
            }
        }
        let Some(job_energy_j) = &self.job_energy_j else { return };
        for labels in self.job_labels.drain(..) {
            job_energy_j.remove(&labels);
        }
        for (key, gpu, mj) in &tick.job_energy {
            let labels = job_labels(key, *gpu);
            job_energy_j.get_or_create(&labels).set(mj / 1000.0);
            self.job_labels.push(labels);
        }
    }

    /// The metrics in Prometheus' text format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        encode(&mut out, &self.registry).expect("writing to a String cannot fail");
        out
    }
}

fn job_labels(key: &JobKey, gpu: u32) -> Labels {
    vec![("job", key.job_id.to_string()), ("step", key.step.clone()), ("gpu", gpu.to_string())]
}

/// Serves `/metrics` on a bound listener until the task is dropped; each scrape asks the
/// sampler, which owns the metrics, to encode them. One request per connection, each within
/// [`SCRAPE_TIMEOUT`] (its headers within [`HEADER_TIMEOUT`]), at most
/// [`SCRAPE_CONNECTIONS`] at once: half-sent requests cannot hold the scrapers off.
pub async fn serve(listener: TcpListener, sampler: SamplerHandle) {
    let app = Router::new().route(
        "/metrics",
        get(move || {
            let sampler = sampler.clone();
            async move {
                match sampler.metrics().await {
                    Some(body) => (
                        [(
                            header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        body,
                    )
                        .into_response(),
                    None => StatusCode::SERVICE_UNAVAILABLE.into_response(),
                }
            }
        }),
    );
    let slots = Arc::new(Semaphore::new(SCRAPE_CONNECTIONS));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                warn!(error = %e, "metrics: accept failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        // Over the limit the connection is closed at once: scrapers retry, nothing piles up.
        let Ok(slot) = slots.clone().try_acquire_owned() else { continue };
        let service = TowerToHyperService::new(app.clone());
        tokio::spawn(async move {
            let connection = hyper::server::conn::http1::Builder::new()
                .timer(TokioTimer::new())
                .header_read_timeout(HEADER_TIMEOUT)
                .keep_alive(false)
                .serve_connection(TokioIo::new(stream), service);
            if tokio::time::timeout(SCRAPE_TIMEOUT, connection).await.is_err() {
                debug!("metrics: connection closed after {SCRAPE_TIMEOUT:?}");
            }
            drop(slot);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattson_gpu::GpuError;
    use wattson_types::energy::GpuReading;

    fn gpu(index: u32) -> GpuInfo {
        GpuInfo {
            index,
            uuid: format!("GPU-{index}"),
            name: "NVIDIA H100".into(),
            pci_bus_id: String::new(),
            minor_number: None,
            energy_counter: true,
            power_limit_min_mw: None,
            power_limit_max_mw: None,
            power_limit_default_mw: None,
            sm_clocks_mhz: vec![],
            mem_clocks_mhz: vec![],
            mig: Vec::new(),
        }
    }

    #[test]
    fn gauges_follow_readings_and_jobs() {
        let mut m = Metrics::new("n1", &[gpu(0), gpu(1)], true);
        let reading = GpuReading {
            t_ns: 1,
            energy_mj: Some(5000),
            power_mw: Some(250_500),
            sm_clock_mhz: Some(1980),
            util_pct: Some(97),
        };
        m.observe(&Tick {
            readings: vec![Ok(reading), Err(GpuError::Lost)],
            job_energy: vec![(JobKey::job(42), 0, 12_345.0)],
            unattributed: [(1, 2_500.0)].into(),
        });
        let text = m.encode();
        assert!(
            text.contains(
                r#"wattson_gpu_power_watts{gpu="0",uuid="GPU-0",model="NVIDIA H100",node="n1"} 250.5"#
            ),
            "{text}"
        );
        assert!(text.contains("# TYPE wattson_gpu_energy_joules counter"), "{text}");
        assert!(
            text.contains(
                r#"wattson_gpu_energy_joules_total{gpu="0",uuid="GPU-0",model="NVIDIA H100",node="n1"} 5.0"#
            ),
            "{text}"
        );
        assert!(text.contains(r#"wattson_gpu_sm_clock_hertz{gpu="0",uuid="GPU-0",model="NVIDIA H100",node="n1"} 1980000000.0"#), "{text}");
        assert!(
            text.contains(
                r#"wattson_gpu_utilization_ratio{gpu="0",uuid="GPU-0",model="NVIDIA H100",node="n1"} 0.97"#
            ),
            "{text}"
        );
        assert!(
            text.contains(r#"wattson_gpu_up{gpu="1",uuid="GPU-1",model="NVIDIA H100",node="n1"} 0"#),
            "{text}"
        );
        assert!(text.contains(r#"wattson_job_gpu_energy_joules{job="42",step="",gpu="0"} 12.345"#), "{text}");
        assert!(
            text.contains(r#"wattson_gpu_unattributed_energy_joules_total{gpu="1",uuid="GPU-1",model="NVIDIA H100",node="n1"} 2.5"#),
            "{text}"
        );
        m.observe(&Tick { readings: vec![Ok(reading), Ok(reading)], ..Tick::default() });
        assert!(!m.encode().contains("job=\"42\""));

        // Without `[metrics] jobs`, no job id or job energy is served.
        let mut m = Metrics::new("n1", &[gpu(0)], false);
        m.observe(&Tick {
            readings: vec![Ok(reading)],
            job_energy: vec![(JobKey::job(42), 0, 1.0)],
            ..Tick::default()
        });
        let text = m.encode();
        assert!(text.contains("wattson_gpu_power_watts") && !text.contains("wattson_job"), "{text}");
    }
}
