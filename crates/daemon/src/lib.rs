//! `wattsond`, the node daemon: samples the GPUs, meters each job's energy, keeps the store,
//! answers the socket, serves metrics, and tells systemd when it is ready.

mod adapt;
pub mod admission;
mod apportion;
pub mod args;
pub mod asks;
mod backend;
mod boundary;
pub mod clock;
pub mod cpu_only;
mod enforce;
pub mod files;
pub mod gpu_pool;
mod identity;
pub mod link;
pub mod metrics;
pub mod node_energy;
pub mod owner;
pub mod reader;
pub mod safedir;
pub mod sampler;
pub mod server;
pub mod socket;
pub mod state;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use tokio::signal::unix::{SignalKind, signal};
use tracing::{error, info, warn};

use self::clock::SystemClock;
use self::gpu_pool::GpuPool;
use self::owner::Owner;
use self::reader::Reader;
use self::sampler::Sampler;
use self::server::Services;
use self::state::State;
use wattson_config::Config;
use wattson_gpu::GpuBackend;
use wattson_protocol::access::Access;

/// How long one GPU call may take before the GPU counts as stuck.
pub const GPU_DEADLINE: Duration = Duration::from_secs(2);

/// Runs the daemon on its own runtime until SIGTERM or SIGINT. Errors are start-up failures,
/// worded for a person.
pub fn run_blocking(config: Config) -> Result<(), String> {
    raise_open_files_limit();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    runtime.block_on(run(config))
}

/// Raises the soft limit on open files to the hard one: users' connections are fitted to it
/// ([`admission::Limits::for_open_files`]), the rest is the daemon's own and Slurm's.
fn raise_open_files_limit() {
    use nix::sys::resource::{Resource, getrlimit, setrlimit};
    if let Ok((soft, hard)) = getrlimit(Resource::RLIMIT_NOFILE)
        && soft < hard
        && let Err(e) = setrlimit(Resource::RLIMIT_NOFILE, hard, hard)
    {
        warn!(error = %e, soft, hard, "cannot raise the open files limit");
    }
}

/// The admission totals for the open-files limit the daemon has now.
fn admission_limits() -> admission::Limits {
    use nix::sys::resource::{Resource, getrlimit};
    let open_files = getrlimit(Resource::RLIMIT_NOFILE).map(|(soft, _)| soft).unwrap_or(1024);
    let limits = admission::Limits::for_open_files(open_files);
    info!(
        open_files,
        users_total = limits.total,
        shared = limits.shared,
        waiting = limits.waiting,
        "connection admission fitted to the open-files limit"
    );
    if limits.total < 64 * admission::RESERVED_PER_USER {
        warn!(open_files, "the open-files limit leaves room for few users' connections; raise LimitNOFILE");
    }
    limits
}

/// Every check the start makes of what the configuration names, creating and changing
/// nothing: the store's directory and file, the engine's directories and model table, the
/// energy scope's meters. For `wattsond --check-config` (the configuration's own checks run
/// when it is parsed); returns what the node can measure, one line each
/// ([`cpu_only::measurable`]).
pub fn check_config(config: &Config) -> Result<Vec<String>, String> {
    let store = &config.daemon.store;
    if let Some(dir) = store.parent().filter(|d| !d.as_os_str().is_empty()) {
        safedir::TrustedDir::check(dir, "the store's directory")?;
    }
    files::check_store_file(store)?;
    safedir::EngineDirs::check(&config.engine)?;
    if let Some(dir) = parent(&config.daemon.socket) {
        safedir::TrustedDir::check(dir, "the directory of daemon.socket")?;
    }
    check_named(config)?;
    cpu_only::measurable(config, || backend::open(&config.gpu))
}

/// The directory of `path`, if it names one.
fn parent(path: &std::path::Path) -> Option<&std::path::Path> {
    path.parent().filter(|d| !d.as_os_str().is_empty())
}

/// Checks that nobody but root can change what the configuration has the daemon load, run or
/// read besides its own files: the NVML and ROCm SMI libraries (never loaded with `scope =
/// "cpu"`), the BMC's program (`scope = "node"`), the powercap tree the node's meters read and
/// the cgroup tree the jobs' CPU time is read from. A user who could would run code as root or
/// add energy to jobs.
fn check_named(config: &Config) -> Result<(), String> {
    use wattson_config::energy::{EnergyScope, NodeSplit};
    if let Some(library) = &config.gpu.nvml_library
        && config.energy.scope != EnergyScope::Cpu
    {
        safedir::check_file(library, "gpu.nvml_library")?;
    }
    if let Some(library) = &config.gpu.amd_library
        && config.energy.scope != EnergyScope::Cpu
    {
        safedir::check_file(library, "gpu.amd_library")?;
    }
    if config.energy.split == NodeSplit::CpuTime && config.energy.cgroups.exists() {
        safedir::TrustedDir::check(&config.energy.cgroups, "energy.cgroups")?;
    }
    if config.energy.scope == EnergyScope::Node {
        safedir::check_file(std::path::Path::new(&config.energy.ipmi_command[0]), "energy.ipmi_command")?;
    }
    safedir::TrustedDir::check(&config.energy.powercap, "energy.powercap")
}

/// Runs the daemon until SIGTERM or SIGINT. Errors are start-up failures, worded for a person.
pub async fn run(config: Config) -> Result<(), String> {
    socket::check_free(&config.daemon.socket)?;
    let store_path = &config.daemon.store;
    if let Some(dir) = parent(store_path) {
        files::trusted_dir(dir, "the store's directory")?;
    }
    if let Some(dir) = parent(&config.daemon.socket) {
        files::trusted_dir(dir, "the directory of daemon.socket")?;
    }
    check_named(&config)?;
    // Opened once, here, and used only through their handles.
    let dirs = safedir::EngineDirs::open(&config.engine)?;
    files::check_store_file(store_path)?;
    // Held until the process ends: one daemon per store, taken before anything is touched.
    let _lock = files::lock_store(store_path)?;
    // A scope whose part this node lacks is refused before anything is touched.
    let energy = config.energy.clone();
    let node_meters =
        tokio::task::spawn_blocking(move || node_energy::NodeMeters::open(&energy, wattson_types::now_ns()))
            .await
            .map_err(|e| e.to_string())??;
    // None at all on a CPU-only node (scope "cpu", or "node" where no GPU library loads).
    let backend = cpu_only::gpus(&config, || backend::open(&config.gpu))?;
    // Held until the process ends: one daemon per GPU, taken before any GPU is touched.
    let uuids: Vec<String> = backend.devices().iter().map(|g| g.uuid.clone()).collect();
    let _gpu_locks = files::lock_gpus(std::path::Path::new(files::GPU_LOCKS), &uuids)?;
    let pool = Arc::new(GpuPool::new(backend, GPU_DEADLINE));
    // A new store has no restore journal: every GPU goes back to its defaults.
    let restore_all = || {
        for index in 0..pool.devices().len() as u32 {
            if let Err(e) = pool.restore_defaults(index) {
                warn!(gpu = index, error = %e, "cannot restore GPU defaults");
            }
        }
    };
    let store = match files::open_store(store_path)? {
        files::Opened::Intact(store) => store,
        files::Opened::Replaced { store, aside } => {
            error!(
                store = %store_path.display(),
                kept_aside = %aside.display(),
                "the store is corrupt: kept aside, starting a fresh one; every GPU goes back to its defaults"
            );
            restore_all();
            store
        }
        files::Opened::WasEmpty(store) => {
            error!(
                store = %store_path.display(),
                "the store was an empty file (0 bytes): whatever it held is gone; a new store is \
                 written into it, and every GPU goes back to its defaults"
            );
            restore_all();
            store
        }
    };
    let node = config.node_name();
    let mut core = State::new(pool.clone(), SystemClock::shared(), store, node.clone(), &config, dirs)?;
    let cgroups = (config.energy.split == wattson_config::energy::NodeSplit::CpuTime)
        .then(|| node_energy::cgroup::JobCgroups::new(&config.energy.cgroups, &node));
    core.attach_node_meters(node_meters, cgroups);
    let owner = Owner::spawn(core);
    let reader = Reader::spawn(store_path, owner.clone(), node.clone())?;
    let (sampler, sampler_handle) = Sampler::new(pool.clone(), owner.clone(), node, config.metrics.jobs);
    let mut sampler = sampler.with_node_meters();
    let (access, unknown) = Access::resolve(&config.daemon.slurm_user, &config.daemon.admins);
    for name in unknown {
        warn!(user = %name, "configured user does not exist on this node; ignored");
    }
    let socket = socket::Socket::bind(&config.daemon.socket)?;

    // One sample before serving, so resumed jobs catch up and metrics are never empty.
    sampler.sample_once().await;
    let services =
        Arc::new(Services { owner: owner.clone(), reader, sampler: sampler_handle.clone(), access });
    let mut tasks = tokio::task::JoinSet::new();
    tasks.spawn(server::serve(socket, services.clone(), config.daemon.request_timeout, admission_limits()));
    tasks.spawn(sampler.run(config.daemon.sample_interval));
    if let Some(addr) = config.link.listen {
        let munge =
            wattson_link::Munge::new(config.link.munge_socket.as_deref()).map_err(|e| e.to_string())?;
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot take the controller's requests on {addr}: {e}"))?;
        tasks.spawn(link::serve(listener, services.clone(), munge, config.daemon.request_timeout));
        info!(%addr, "taking the controller's requests (MUNGE-sealed, root and SlurmUser only)");
    }
    if let Some(addr) = config.metrics.listen {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| format!("cannot serve metrics on {addr}: {e}"))?;
        if !addr.ip().is_loopback() {
            warn!(%addr, "/metrics is served beyond this host, to anyone who can reach the port");
        }
        tasks.spawn(metrics::serve(listener, sampler_handle));
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
    let readings = tokio::task::spawn_blocking(move || pool.read_all()).await.unwrap_or_default();
    owner.shutdown(readings).await;
    // The socket's file goes with the server's task, and only if it is still this daemon's.
    while tasks.join_next().await.is_some() {}
    info!("wattsond stopped");
    Ok(())
}
