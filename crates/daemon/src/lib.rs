//! `wattsond`, the node daemon: samples the GPUs, meters each job's energy, keeps the store,
//! answers the socket, serves metrics, and tells systemd when it is ready.

mod adapt;
pub mod core;
mod enforce;
pub mod metrics;
pub mod server;

use std::sync::{Arc, Mutex};

use tokio::signal::unix::{SignalKind, signal};
use tokio::time::MissedTickBehavior;
use tracing::{error, info, warn};

use self::core::Core;
use self::metrics::Metrics;
use self::server::lock;
use wattson_config::Config;
use wattson_gpu::{GpuBackend, NvmlBackend};
use wattson_protocol::access::Access;
use wattson_store::Store;

/// Runs the daemon on its own runtime until SIGTERM or SIGINT. Errors are start-up failures,
/// worded for a person.
pub fn run_blocking(config: Config) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(run(config))
}

/// Runs the daemon until SIGTERM or SIGINT. Errors are start-up failures, worded for a person.
pub async fn run(config: Config) -> Result<(), String> {
    let backend = NvmlBackend::open(config.gpu.nvml_library.as_deref()).map_err(|e| e.to_string())?;
    info!(gpus = backend.devices().len(), driver = ?backend.driver_version(), "GPUs found");
    let store_path = &config.daemon.store;
    if let Some(dir) = store_path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    }
    let store = Store::open(store_path).map_err(|e| format!("cannot open the store: {e}"))?;
    let node = config.node_name();
    let mut metrics = Metrics::new(&node, backend.devices());
    let mut core = Core::new(Box::new(backend), store, node, &config)?;
    let (access, unknown) = Access::resolve(&config.daemon.slurm_user, &config.daemon.admins);
    for name in unknown {
        warn!(user = %name, "configured user does not exist on this node; ignored");
    }
    let policy = Arc::new(access);
    let listener = server::bind(&config.daemon.socket)?;

    // One sample before serving, so resumed jobs catch up and metrics are never empty.
    metrics.observe(&core.sample());
    let core = Arc::new(Mutex::new(core));
    let metrics = Arc::new(Mutex::new(metrics));

    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(server::serve(listener, core.clone(), policy, config.daemon.request_timeout));
    tasks.spawn(sampling_loop(core.clone(), metrics.clone(), config.daemon.sample_interval));
    if let Some(addr) = config.metrics.listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot serve metrics on {addr}: {e}"))?;
        let metrics = metrics.clone();
        tasks.spawn(async move {
            if let Err(e) = metrics::serve(listener, metrics).await {
                error!(error = %e, "metrics endpoint stopped");
            }
        });
        info!(%addr, "serving /metrics");
    }
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Ready]);
    info!(socket = %config.daemon.socket.display(), "wattsond ready");

    let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
    let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
    tokio::select! {
        _ = term.recv() => info!("SIGTERM: stopping"),
        _ = int.recv() => info!("SIGINT: stopping"),
    }
    let _ = sd_notify::notify(&[sd_notify::NotifyState::Stopping]);
    tasks.abort_all();
    // Persist the running meters one last time (the jobs resume at the next start), and
    // return to defaults any GPU still changed for a job that is not running.
    let core = core.clone();
    let _ = tokio::task::spawn_blocking(move || {
        let mut core = lock(&core);
        core.sample();
        core.restore_orphans();
    })
    .await;
    let _ = std::fs::remove_file(&config.daemon.socket);
    info!("wattsond stopped");
    Ok(())
}

async fn sampling_loop(core: Arc<Mutex<Core>>, metrics: Arc<Mutex<Metrics>>, every: std::time::Duration) {
    let mut interval = tokio::time::interval(every);
    interval.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        interval.tick().await;
        let core = core.clone();
        match tokio::task::spawn_blocking(move || lock(&core).sample()).await {
            Ok(tick) => metrics.lock().unwrap_or_else(|p| p.into_inner()).observe(&tick),
            Err(e) => error!(error = %e, "sampling failed"),
        }
    }
}
