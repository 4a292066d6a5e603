//! The daemon's state machine on in-process fake GPUs and a manual clock: begin, sample, end,
//! restart resume, settings enforced and restored, and a hung GPU that delays only its own job.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::clock::{Clock, ManualClock};
use crate::gpu_pool::GpuPool;
use crate::state::State;
use wattson_config::Config;
use wattson_gpu::{GpuBackend, GpuError, GpuInfo, GpuSettings};
use wattson_protocol::{ErrorCode, JobBegin, Reply};
use wattson_store::Store;
use wattson_types::energy::GpuReading;
use wattson_types::job::{GpuRef, Hints, JobKey, JobRecord};

const T0: i64 = 1_800_000_000_000_000_000;
const W: u32 = 300;
const DEADLINE: Duration = Duration::from_secs(1);

/// GPUs drawing a constant `W` watts, with an exact counter on the shared manual clock.
struct FakeGpus {
    clock: Arc<ManualClock>,
    devices: Vec<GpuInfo>,
    limits_mw: Vec<AtomicU32>,
    hung: Vec<AtomicBool>,
    applied: Mutex<Vec<(u32, u32)>>,
}

impl FakeGpus {
    fn new(clock: Arc<ManualClock>, n: u32) -> Arc<FakeGpus> {
        let devices = (0..n)
            .map(|index| GpuInfo {
                index,
                uuid: format!("GPU-{index}"),
                name: "NVIDIA H100 80GB HBM3".into(),
                pci_bus_id: format!("00000000:{:02x}:00.0", index + 1),
                minor_number: Some(index),
                energy_counter: true,
                power_limit_min_mw: Some(200_000),
                power_limit_max_mw: Some(700_000),
                power_limit_default_mw: Some(700_000),
                sm_clocks_mhz: vec![1980],
                mem_clocks_mhz: vec![2619],
                mig: Vec::new(),
            })
            .collect();
        Arc::new(FakeGpus {
            clock,
            devices,
            limits_mw: (0..n).map(|_| AtomicU32::new(700_000)).collect(),
            hung: (0..n).map(|_| AtomicBool::new(false)).collect(),
            applied: Mutex::new(Vec::new()),
        })
    }

    fn wait_if_hung(&self, index: u32) {
        while self.hung[index as usize].load(Ordering::SeqCst) {
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

impl GpuBackend for FakeGpus {
    fn devices(&self) -> &[GpuInfo] {
        &self.devices
    }

    fn read(&self, index: u32) -> Result<GpuReading, GpuError> {
        self.wait_if_hung(index);
        let t_ns = self.clock.wall_ns();
        // Energy since the epoch of the test at a constant W watts: mJ = W · ms. The counter
        // runs on the GPU's own time, which a step of the wall clock does not move.
        let elapsed_ns = self.clock.monotonic().as_nanos() as i64 - T0;
        let energy_mj = Some(u64::from(W) * (elapsed_ns / 1_000_000) as u64);
        Ok(GpuReading {
            t_ns,
            energy_mj,
            power_mw: Some(W * 1000),
            sm_clock_mhz: Some(1980),
            util_pct: Some(100),
        })
    }

    fn settings(&self, index: u32) -> Result<GpuSettings, GpuError> {
        let power_limit_mw = Some(self.limits_mw[index as usize].load(Ordering::SeqCst));
        Ok(GpuSettings { power_limit_mw, app_sm_clock_mhz: Some(1980) })
    }

    fn compute_processes(&self, _: u32) -> Result<Vec<u32>, GpuError> {
        Ok(Vec::new())
    }

    fn set_power_limit(&self, index: u32, mw: u32) -> Result<(), GpuError> {
        self.wait_if_hung(index);
        self.limits_mw[index as usize].store(mw, Ordering::SeqCst);
        self.applied.lock().unwrap().push((index, mw));
        Ok(())
    }

    fn set_locked_clocks(&self, _: u32, _: u32, _: u32) -> Result<(), GpuError> {
        Ok(())
    }

    fn reset_locked_clocks(&self, _: u32) -> Result<(), GpuError> {
        Ok(())
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    path: std::path::PathBuf,
    clock: Arc<ManualClock>,
    gpus: Arc<FakeGpus>,
    pool: Arc<GpuPool>,
    config: Config,
}

impl Fixture {
    fn new(enact: &str, n: u32) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("wattson.db");
        let clock = ManualClock::at(T0);
        let gpus = FakeGpus::new(clock.clone(), n);
        let pool = Arc::new(GpuPool::new(gpus.clone(), DEADLINE));
        let text = format!(
            "[daemon]\nstore = {:?}\n[policy]\nenact = {enact:?}\n[engine]\nprogress_dir = {:?}\nmodels_file = {:?}\n",
            path.display().to_string(),
            dir.path().join("progress").display().to_string(),
            dir.path().join("models.json").display().to_string(),
        );
        let config = Config::parse(&text, "test").unwrap();
        Fixture { _dir: dir, path, clock, gpus, pool, config }
    }

    fn core(&self) -> State {
        let store = Store::open(&self.path).unwrap();
        let dirs = crate::safedir::EngineDirs::open(&self.config.engine).unwrap();
        State::new(self.pool.clone(), self.clock.clone(), store, "n1".into(), &self.config, dirs).unwrap()
    }

    fn sample(&self, core: &mut State) {
        core.sample(self.pool.read_all());
    }
}

fn begin(job: u32, gpus: &[u32]) -> JobBegin {
    JobBegin {
        job: JobKey::job(job),
        uid: 1000,
        user: Some("alice".into()),
        name: Some("train".into()),
        account: None,
        gpus: gpus.iter().map(|&i| GpuRef::Index(i)).collect(),
        hints: Hints::default(),
        shares_gpus: false,
    }
}

fn ended(reply: Reply) -> JobRecord {
    match reply {
        Reply::Ended { record } => record,
        other => panic!("{other:?}"),
    }
}

#[test]
fn energy_is_the_counter_delta_from_begin_to_end() {
    let f = Fixture::new("share", 2);
    let mut core = f.core();
    core.begin(begin(7, &[0, 1])).unwrap();
    for _ in 0..10 {
        f.clock.advance(Duration::from_secs(1));
        f.sample(&mut core);
    }
    f.clock.advance(Duration::from_millis(500));
    let record = ended(core.end(&JobKey::job(7)).unwrap());
    // Two GPUs at 300 W for 10.5 s.
    assert_eq!(record.energy_j(), 2.0 * 300.0 * 10.5);
    assert!(!core.is_running(&JobKey::job(7)));
    let again = ended(core.end(&JobKey::job(7)).unwrap());
    assert_eq!(again.energy_j(), record.energy_j(), "a repeated end returns the same record");
}

/// The wall clock is stepped back an hour mid-job: the energy (from the GPU's counter) is
/// unchanged, and the record never has a negative duration.
#[test]
fn a_wall_clock_stepped_back_loses_no_energy_and_no_duration_goes_negative() {
    let f = Fixture::new("share", 1);
    let mut core = f.core();
    core.begin(begin(9, &[0])).unwrap();
    f.clock.advance(Duration::from_secs(3));
    f.sample(&mut core);
    f.clock.step_wall(-3_600_000_000_000);
    f.clock.advance(Duration::from_secs(2));
    f.sample(&mut core);
    let record = ended(core.end(&JobKey::job(9)).unwrap());
    assert_eq!(record.energy_j(), 300.0 * 5.0);
    assert!(record.end_ns.unwrap() >= record.begin_ns, "{record:?}");
}

#[test]
fn a_restarted_daemon_resumes_the_running_job() {
    let f = Fixture::new("share", 1);
    {
        let mut core = f.core();
        core.begin(begin(8, &[0])).unwrap();
        f.clock.advance(Duration::from_secs(3));
        f.sample(&mut core);
    } // The daemon dies here: no end, no clean shutdown.
    f.clock.advance(Duration::from_secs(4));
    let mut core = f.core();
    assert!(core.is_running(&JobKey::job(8)));
    f.clock.advance(Duration::from_secs(1));
    let record = ended(core.end(&JobKey::job(8)).unwrap());
    assert_eq!(record.energy_j(), 300.0 * 8.0, "energy while the daemon was down is counted");
}

#[test]
fn a_share_setting_is_applied_at_begin_and_restored_at_end() {
    let f = Fixture::new("share", 2);
    let mut core = f.core();
    let Reply::Begun { settings, .. } = core.begin(begin(9, &[1])).unwrap() else { panic!() };
    assert_eq!(settings.len(), 1, "{settings:?}");
    assert!(f.gpus.limits_mw[1].load(Ordering::SeqCst) < 700_000);
    assert_eq!(f.gpus.limits_mw[0].load(Ordering::SeqCst), 700_000, "other GPUs untouched");
    core.end(&JobKey::job(9)).unwrap();
    assert_eq!(f.gpus.limits_mw[1].load(Ordering::SeqCst), 700_000, "restored at end");
}

#[test]
fn errors_carry_codes() {
    let f = Fixture::new("share", 1);
    let mut core = f.core();
    assert_eq!(core.end(&JobKey::job(404)).unwrap_err().code, ErrorCode::NotRunning);
    assert_eq!(core.begin(begin(1, &[])).unwrap_err().code, ErrorCode::BadRequest);
    assert_eq!(core.begin(begin(1, &[5])).unwrap_err().code, ErrorCode::BadRequest);
    core.begin(begin(2, &[0])).unwrap();
    let mut other = begin(2, &[0]);
    other.uid = 1001;
    assert_eq!(core.begin(other).unwrap_err().code, ErrorCode::Conflict);
}

#[test]
fn the_prober_sets_a_probe_limit_at_begin() {
    let f = Fixture::new("model", 1);
    let mut core = f.core();
    let Reply::Begun { decision, settings, .. } = core.begin(begin(3, &[0])).unwrap() else { panic!() };
    assert!(decision.by_model());
    assert_eq!(settings.len(), 1, "the first probe holds a limit: {settings:?}");
    core.end(&JobKey::job(3)).unwrap();
    assert_eq!(f.gpus.limits_mw[0].load(Ordering::SeqCst), 700_000, "restored at end");
}

#[test]
fn a_hung_gpu_delays_only_its_own_job() {
    let f = Fixture::new("share", 2);
    let mut core = f.core();
    f.gpus.hung[0].store(true, Ordering::SeqCst);
    // The sampler meets the hung GPU first and waits one deadline for it.
    let readings = f.pool.read_all();
    assert!(matches!(readings[0], Err(GpuError::Timeout(_))), "{:?}", readings[0]);
    assert!(readings[1].is_ok());
    assert!(f.pool.is_stuck(0));
    core.sample(readings);

    // From then on, the other GPU's jobs begin and end without waiting for it (a wait would
    // take a whole deadline).
    for job in 10..30 {
        let started = Instant::now();
        core.begin(begin(job, &[1])).unwrap();
        f.clock.advance(Duration::from_millis(100));
        core.end(&JobKey::job(job)).unwrap();
        assert!(started.elapsed() < DEADLINE / 2, "job {job} took {:?}", started.elapsed());
    }

    // The hung GPU's job is recorded, with the GPU lost for the time it did not answer.
    core.begin(begin(40, &[0])).unwrap();
    f.clock.advance(Duration::from_secs(1));
    let record = ended(core.end(&JobKey::job(40)).unwrap());
    assert!(record.gpus[0].meter.lost, "{record:?}");
    f.gpus.hung[0].store(false, Ordering::SeqCst);
}

#[test]
fn a_gpu_hung_mid_batch_costs_one_deadline_and_the_gpus_after_it_are_still_read() {
    let f = Fixture::new("share", 3);
    f.gpus.hung[1].store(true, Ordering::SeqCst);
    let started = Instant::now();
    let readings = f.pool.read_all();
    let first = started.elapsed();
    assert!(readings[0].is_ok() && readings[2].is_ok(), "{readings:?}");
    assert!(matches!(readings[1], Err(GpuError::Timeout(_))), "{:?}", readings[1]);
    assert!(first >= DEADLINE && first < DEADLINE * 2, "one deadline, not more: {first:?}");
    assert!(f.pool.is_stuck(1));

    // While its call is blocked, the stuck GPU fails at once and the others answer.
    let started = Instant::now();
    let readings = f.pool.read_all();
    assert!(started.elapsed() < DEADLINE / 2, "{:?}", started.elapsed());
    assert!(readings[0].is_ok() && readings[2].is_ok() && readings[1].is_err(), "{readings:?}");

    // Once the blocked call returns, the GPU is called again.
    f.gpus.hung[1].store(false, Ordering::SeqCst);
    let waited = Instant::now();
    while f.pool.is_stuck(1) {
        assert!(waited.elapsed() < DEADLINE, "the GPU stays stuck after its call returned");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(f.pool.read_all().iter().all(Result::is_ok));
}

#[test]
fn concurrent_callers_never_wait_behind_each_other() {
    // Eight callers at once, each reading every GPU: each batch gets its own helper, so none
    // waits a deadline behind another, and no GPU is taken for stuck.
    let f = Fixture::new("share", 4);
    let started = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..8 {
            s.spawn(|| {
                for _ in 0..20 {
                    assert!(f.pool.read_all().iter().all(Result::is_ok));
                }
            });
        }
    });
    assert!(started.elapsed() < DEADLINE, "{:?}", started.elapsed());
    assert!((0..4).all(|i| !f.pool.is_stuck(i)));
}

#[test]
fn check_config_makes_the_starts_checks_and_creates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = |store: &std::path::Path, models: &std::path::Path| {
        let text = format!(
            "[daemon]\nstore = {:?}\n[engine]\nprogress_dir = {:?}\nmodels_file = {:?}\n",
            store.display().to_string(),
            dir.path().join("run/progress").display().to_string(),
            models.display().to_string(),
        );
        Config::parse(&text, "test").unwrap()
    };
    let (store, models) = (dir.path().join("db/w.db"), dir.path().join("lib/models.json"));
    crate::check_config(&config(&store, &models)).unwrap();
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "check_config created something");
    let passwd = dir.path().join("passwd");
    std::fs::write(&passwd, "root:x:0:0::/root:/bin/sh\n").unwrap();
    let err = crate::check_config(&config(&passwd, &models)).unwrap_err();
    assert!(err.contains("daemon.store") && err.contains("not a wattson store"), "{err}");
    let err = crate::check_config(&config(&store, &passwd)).unwrap_err();
    assert!(err.contains("engine.models_file") && err.contains("not a wattson model table"), "{err}");
}

#[test]
fn a_jobs_node_share_survives_a_restart_and_is_in_its_final_record() {
    use crate::node_energy::NodeTotals;
    use wattson_types::scope::{EnergyScope, NodeShare};
    let f = Fixture::new("share", 1);
    let empty = NodeShare { scope: EnergyScope::GpuCpu, cpu_mj: Some(0.0), dram_mj: None, node_mj: None };
    let totals =
        |cpu_mj: f64| NodeTotals { t_ns: f.clock.wall_ns(), cpu_mj: Some(cpu_mj), ..NodeTotals::default() };
    {
        let mut core = f.core();
        core.measure_node(empty);
        core.begin(begin(8, &[0])).unwrap();
        core.charge_node(totals(0.0));
        f.clock.advance(Duration::from_secs(2));
        core.charge_node(totals(1000.0));
    } // The daemon dies here: no end, no clean shutdown.
    f.clock.advance(Duration::from_secs(4));
    let mut core = f.core();
    core.measure_node(empty);
    // A new daemon's meters count from zero again: its first reading only marks the start.
    core.charge_node(totals(0.0));
    f.clock.advance(Duration::from_secs(1));
    core.charge_node(totals(600.0));
    let record = ended(core.end(&JobKey::job(8)).unwrap());
    assert_eq!(
        record.node_share,
        Some(NodeShare { cpu_mj: Some(1600.0), ..empty }),
        "kept through the restart"
    );
    assert_eq!(record.scoped_energy_mj(), Ok(record.energy_mj() + 1600.0));
}

/// A node's RAPL package zone and Slurm's v1 job cgroups, in files the test writes.
struct CpuNode {
    dir: tempfile::TempDir,
}

impl CpuNode {
    /// The zone's counter at 0, no cgroup yet.
    fn new() -> CpuNode {
        let node = CpuNode { dir: tempfile::tempdir().unwrap() };
        let zone = node.zone();
        std::fs::create_dir_all(&zone).unwrap();
        std::fs::write(zone.join("name"), "package-0\n").unwrap();
        std::fs::write(zone.join("max_energy_range_uj"), "1000000000000\n").unwrap();
        node.counter(0);
        node
    }

    fn zone(&self) -> std::path::PathBuf {
        self.dir.path().join("powercap/intel-rapl:0")
    }

    /// Sets the package counter, µJ.
    fn counter(&self, uj: u64) {
        std::fs::write(self.zone().join("energy_uj"), format!("{uj}\n")).unwrap();
    }

    /// Job `job`'s cgroup (of uid 1000).
    fn job_dir(&self, job: u32) -> std::path::PathBuf {
        self.dir.path().join(format!("cgroup/cpuacct/slurm/uid_1000/job_{job}"))
    }

    /// Sets job `job`'s CPU time, ns (its cgroup made where missing).
    fn cpu(&self, job: u32, ns: u64) {
        std::fs::create_dir_all(self.job_dir(job)).unwrap();
        std::fs::write(self.job_dir(job).join("cpuacct.usage"), format!("{ns}\n")).unwrap();
    }

    /// `core` reading these meters and cgroups under the CPU scope.
    fn attach(&self, core: &mut State) {
        use crate::node_energy::{NodeMeters, cgroup::JobCgroups};
        use wattson_config::energy::{EnergyConfig, EnergyScope};
        let powercap = self.dir.path().join("powercap");
        let config = EnergyConfig { scope: EnergyScope::Cpu, powercap, ..EnergyConfig::default() };
        let cgroups = JobCgroups::new(&self.dir.path().join("cgroup"), "n1");
        core.attach_node_meters(NodeMeters::open(&config, 0).unwrap(), Some(cgroups));
    }
}

#[test]
fn cpu_only_jobs_are_recorded_where_the_scope_counts_the_node_and_divided_by_cgroup_cpu_time() {
    use wattson_config::energy::EnergyScope;
    use wattson_types::scope::NodeShare;
    let f = Fixture::new("share", 1);
    let node = CpuNode::new();
    let (counter, cpu) = (|uj| node.counter(uj), |job, ns| node.cpu(job, ns));
    // Under the GPU scope a job without GPUs has nothing to account.
    {
        let mut core = f.core();
        core.measure_node(NodeShare {
            scope: EnergyScope::Gpu,
            cpu_mj: Some(0.0),
            dram_mj: None,
            node_mj: None,
        });
        let e = core.begin(begin(1, &[])).unwrap_err();
        assert!(e.message.contains("names no GPUs"), "{e:?}");
    }
    let mut core = f.core();
    node.attach(&mut core);
    core.begin(begin(1, &[])).unwrap();
    core.begin(begin(2, &[])).unwrap();
    // A reading while job 1's cgroup is not made yet: its CPU time still counts from zero.
    cpu(2, 0);
    core.sample_node();
    // Job 1 used three times job 2's CPU time: three quarters of 400 mJ.
    cpu(1, 3_000_000_000);
    cpu(2, 1_000_000_000);
    counter(400_000);
    f.clock.advance(Duration::from_secs(1));
    core.sample_node();
    // Nobody used a CPU: 100 mJ by time, half each (read at job 2's end).
    counter(500_000);
    f.clock.advance(Duration::from_secs(1));
    let two = ended(core.end(&JobKey::job(2)).unwrap());
    // Job 1 alone: all of it, to its end.
    cpu(1, 4_000_000_000);
    counter(700_000);
    f.clock.advance(Duration::from_secs(1));
    let one = ended(core.end(&JobKey::job(1)).unwrap());
    assert!(one.gpus.is_empty() && two.gpus.is_empty());
    assert_eq!(two.node_share.unwrap().cpu_mj, Some(100.0 + 50.0));
    assert_eq!(one.node_share.unwrap().cpu_mj, Some(300.0 + 50.0 + 200.0));
    assert_eq!(one.scoped_energy_mj(), Ok(550.0), "the CPU scope: CPU and DRAM (none here), no GPU");
}

#[test]
fn a_job_whose_cgroup_is_gone_at_its_end_used_no_cpu_since_it_was_last_read() {
    let f = Fixture::new("share", 1);
    let node = CpuNode::new();
    let (counter, cpu) = (|uj| node.counter(uj), |job, ns| node.cpu(job, ns));
    let mut core = f.core();
    node.attach(&mut core);
    cpu(1, 0);
    cpu(2, 0);
    core.begin(begin(1, &[])).unwrap();
    core.begin(begin(2, &[])).unwrap();
    // Both used a CPU-second: 100 mJ each.
    cpu(1, 1_000_000_000);
    cpu(2, 1_000_000_000);
    counter(200_000);
    f.clock.advance(Duration::from_secs(1));
    core.sample_node();
    // Job 2's processes end and Slurm removes its cgroup before wattsond hears of its end,
    // while job 1 keeps a CPU busy: that interval is all job 1's (by time, half would be job 2's).
    std::fs::remove_dir_all(node.job_dir(2)).unwrap();
    cpu(1, 2_000_000_000);
    counter(400_000);
    f.clock.advance(Duration::from_secs(1));
    let two = ended(core.end(&JobKey::job(2)).unwrap());
    cpu(1, 3_000_000_000);
    counter(500_000);
    f.clock.advance(Duration::from_secs(1));
    let one = ended(core.end(&JobKey::job(1)).unwrap());
    assert_eq!(two.node_share.unwrap().cpu_mj, Some(100.0));
    assert_eq!(one.node_share.unwrap().cpu_mj, Some(100.0 + 200.0 + 100.0));
}
