//! Loads the built `libfake_nvml.so` through nvml-wrapper 0.13, exactly as wattsond does,
//! and checks identity, size protocols, exact energy, setters and faults.
//!
//! The library reads `WATTSON_FAKE_NVML_DIR` at init and lives once per process, so all
//! in-process checks are in one test function.

use fake_nvml::{Config, DIR_ENV, Fault, GpuConfig, ProcessLoad, Sim, library_path_next_to, now_ns};
use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::Clock;
use nvml_wrapper::enums::device::GpuLockedClocksSetting;
use nvml_wrapper::error::NvmlError;
use nvml_wrapper_sys::bindings::*;
use std::path::{Path, PathBuf};
use std::thread::sleep;
use std::time::Duration;

fn library() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    library_path_next_to(&exe)
        .unwrap_or_else(|| panic!("libfake_nvml.so not found next to {}", exe.display()))
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("fake-nvml-it-{tag}-{}-{}", std::process::id(), now_ns()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn init(lib: &Path) -> Result<Nvml, NvmlError> {
    Nvml::builder().lib_path(lib.as_os_str()).init()
}

fn is<T: std::fmt::Debug>(r: Result<T, NvmlError>, want: fn(&NvmlError) -> bool) {
    match r {
        Err(e) if want(&e) => {}
        other => panic!("unexpected result {other:?}"),
    }
}

/// Counter delta between two reads must equal the truth integral: bracketed by the instants
/// before/after each read, and to within 1 mJ at the exact read instants.
fn check_counter_matches_truth(sim: &Sim, dev: &nvml_wrapper::Device, gpu: u32, mid: impl FnOnce()) {
    let a0 = now_ns();
    let c0 = dev.total_energy_consumption().unwrap();
    let t0 = sim.last_access_ns().unwrap();
    let a1 = now_ns();
    mid();
    let b0 = now_ns();
    let c1 = dev.total_energy_consumption().unwrap();
    let t1 = sim.last_access_ns().unwrap();
    let b1 = now_ns();
    let delta = (c1 - c0) as f64;
    let lo = sim.truth_energy_mj(gpu, a1, b0).unwrap();
    let hi = sim.truth_energy_mj(gpu, a0, b1).unwrap();
    assert!(lo - 1.0 <= delta && delta <= hi + 1.0, "counter delta {delta} mJ outside truth [{lo}, {hi}]");
    assert!(a0 <= t0 && t0 <= a1 && b0 <= t1 && t1 <= b1);
    let exact = sim.truth_energy_mj(gpu, t0, t1).unwrap();
    assert!((delta - exact).abs() <= 1.0, "counter delta {delta} mJ != truth {exact} mJ");
}

#[test]
fn fake_driver_through_nvml_wrapper() {
    let lib = library();
    let dir = temp_dir("main");
    let mut cfg = Config::uniform("H100", 2);
    cfg.gpu.push(GpuConfig { energy_counter: Some(false), ..GpuConfig::preset("A100") });
    let sim = Sim::create(&dir, &cfg).unwrap();

    // Without the env var (or with a directory lacking config.toml) the "driver" is not loaded.
    // SAFETY: this is the only test in this binary; no other thread reads the environment.
    unsafe { std::env::remove_var(DIR_ENV) };
    is(init(&lib), |e| matches!(e, NvmlError::DriverNotLoaded));
    let empty = temp_dir("empty");
    unsafe { std::env::set_var(DIR_ENV, &empty) };
    is(init(&lib), |e| matches!(e, NvmlError::DriverNotLoaded));
    unsafe { std::env::set_var(DIR_ENV, sim.dir()) };
    let nvml = init(&lib).unwrap();

    // Identity and lookups.
    assert_eq!(nvml.device_count().unwrap(), 3);
    assert!(nvml.sys_driver_version().unwrap().starts_with("550."));
    // The simulation's own configuration: its GPUs' UUIDs are its directory's.
    let spec0 = Config::load(sim.dir()).unwrap().spec(0).unwrap();
    assert_ne!(spec0.uuid, cfg.spec(0).unwrap().uuid, "another machine's GPU 0");
    let mut dev0 = nvml.device_by_index(0).unwrap();
    assert_eq!(dev0.name().unwrap(), "NVIDIA H100 80GB HBM3");
    assert_eq!(dev0.uuid().unwrap(), spec0.uuid);
    assert_eq!(nvml.device_by_index(2).unwrap().name().unwrap(), "NVIDIA A100-SXM4-40GB");
    let uuid1 = nvml.device_by_index(1).unwrap().uuid().unwrap();
    assert_ne!(uuid1, spec0.uuid);
    assert_eq!(nvml.device_by_uuid(uuid1.as_str()).unwrap().index().unwrap(), 1);
    is(nvml.device_by_uuid("GPU-nope"), |e| matches!(e, NvmlError::NotFound));
    is(nvml.device_by_index(3), |e| matches!(e, NvmlError::InvalidArg));
    let dev1 = nvml.device_by_pci_bus_id("00000000:18:00.0").unwrap();
    assert_eq!(dev1.index().unwrap(), 1);
    assert_eq!(nvml.device_by_pci_bus_id("0000:18:00.0").unwrap().index().unwrap(), 1);
    let pci = dev1.pci_info().unwrap();
    assert_eq!((pci.bus_id.as_str(), pci.bus, pci.domain), ("00000000:18:00.0", 0x18, 0));
    assert!(dev0.running_compute_processes().unwrap().is_empty());

    // Clocks, including the size protocol on the raw symbols.
    assert_eq!(dev0.supported_memory_clocks().unwrap(), vec![2619]);
    let clocks = dev0.supported_graphics_clocks(2619).unwrap();
    assert_eq!(clocks.len(), 110);
    assert_eq!((clocks[0], clocks[109]), (1980, 345));
    assert!(clocks.windows(2).all(|w| w[0] > w[1]));
    let raw = nvml.lib();
    let h0 = unsafe { dev0.handle() };
    let mut buf = [0u32; 16];
    let mut count = 16;
    let rc = unsafe { raw.nvmlDeviceGetSupportedGraphicsClocks(h0, 2619, &mut count, buf.as_mut_ptr()) };
    assert_eq!((rc, count), (nvmlReturn_enum_NVML_ERROR_INSUFFICIENT_SIZE, 110));
    let mut big = vec![0u32; count as usize];
    let rc = unsafe { raw.nvmlDeviceGetSupportedGraphicsClocks(h0, 2619, &mut count, big.as_mut_ptr()) };
    assert_eq!((rc, count), (nvmlReturn_enum_NVML_SUCCESS, 110));
    assert_eq!(big, clocks);
    let mut zero = 0;
    let rc = unsafe { raw.nvmlDeviceGetComputeRunningProcesses_v3(h0, &mut zero, std::ptr::null_mut()) };
    assert_eq!((rc, zero), (nvmlReturn_enum_NVML_SUCCESS, 0));
    let bogus = std::ptr::without_provenance_mut(77);
    let mut mw = 0;
    assert_eq!(
        unsafe { raw.nvmlDeviceGetPowerUsage(bogus, &mut mw) },
        nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT
    );
    let rc = unsafe { raw.nvmlDeviceGetPowerUsage(h0, std::ptr::null_mut()) };
    assert_eq!(rc, nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT);
    assert_eq!(dev0.max_clock_info(Clock::Graphics).unwrap(), 1980);
    assert_eq!(dev0.max_clock_info(Clock::Memory).unwrap(), 2619);
    assert_eq!(dev0.clock_info(Clock::Memory).unwrap(), 2619);

    // Exact energy: the counter delta equals the truth integral across a load change.
    sim.set_load(0, 0.3).unwrap();
    check_counter_matches_truth(&sim, &dev0, 0, || {
        sleep(Duration::from_millis(150));
        sim.set_load(0, 0.9).unwrap();
        sleep(Duration::from_millis(150));
    });
    assert_eq!(dev0.utilization_rates().unwrap().gpu, 90);
    assert_eq!(dev0.power_usage().unwrap(), sim.gpu_state(0).unwrap().power_mw);

    // Power limit: validation, then capping lowers power and the effective clock.
    sim.set_load(0, 1.0).unwrap();
    assert_eq!(dev0.power_usage().unwrap(), 650_000);
    assert_eq!(dev0.clock_info(Clock::SM).unwrap(), 1980);
    let c = dev0.power_management_limit_constraints().unwrap();
    assert_eq!((c.min_limit, c.max_limit), (200_000, 700_000));
    assert_eq!(dev0.power_management_limit_default().unwrap(), 700_000);
    is(dev0.set_power_management_limit(199_000), |e| matches!(e, NvmlError::InvalidArg));
    is(dev0.set_power_management_limit(700_001), |e| matches!(e, NvmlError::InvalidArg));
    assert_eq!(dev0.power_management_limit().unwrap(), 700_000);
    dev0.set_power_management_limit(400_000).unwrap();
    assert_eq!(dev0.power_management_limit().unwrap(), 400_000);
    assert_eq!(dev0.enforced_power_limit().unwrap(), 400_000);
    assert_eq!(dev0.power_usage().unwrap(), 400_000);
    let capped = dev0.clock_info(Clock::Graphics).unwrap();
    assert!(capped < 1980 && capped > 345, "{capped}");
    dev0.set_power_management_limit(700_000).unwrap();
    assert_eq!(dev0.power_usage().unwrap(), 650_000);

    // Locked and application clocks.
    let lock = |min, max| GpuLockedClocksSetting::Numeric { min_clock_mhz: min, max_clock_mhz: max };
    is(dev0.set_gpu_locked_clocks(lock(1500, 1005)), |e| matches!(e, NvmlError::InvalidArg));
    is(dev0.set_gpu_locked_clocks(lock(1000, 1500)), |e| matches!(e, NvmlError::InvalidArg));
    dev0.set_gpu_locked_clocks(lock(1005, 1500)).unwrap();
    assert_eq!(dev0.clock_info(Clock::SM).unwrap(), 1500);
    assert!(dev0.power_usage().unwrap() < 500_000);
    dev0.reset_gpu_locked_clocks().unwrap();
    assert_eq!(dev0.clock_info(Clock::SM).unwrap(), 1980);
    is(dev0.set_applications_clocks(1593, 1200), |e| matches!(e, NvmlError::InvalidArg));
    is(dev0.set_applications_clocks(2619, 1201), |e| matches!(e, NvmlError::InvalidArg));
    dev0.set_applications_clocks(2619, 1200).unwrap();
    assert_eq!(dev0.applications_clock(Clock::Graphics).unwrap(), 1200);
    assert_eq!(dev0.clock_info(Clock::Graphics).unwrap(), 1200);
    dev0.reset_applications_clocks().unwrap();
    assert_eq!(dev0.applications_clock(Clock::Graphics).unwrap(), 1980);

    // Setters need a privileged euid (config is re-read on every call).
    let euid = unsafe { libc::geteuid() };
    let mut unpriv = cfg.clone();
    unpriv.privileged_uids = vec![euid.wrapping_add(1)];
    std::fs::write(dir.join(fake_nvml::CONFIG_FILE), unpriv.to_toml()).unwrap();
    is(dev0.set_power_management_limit(400_000), |e| matches!(e, NvmlError::NoPermission));
    is(dev0.reset_applications_clocks(), |e| matches!(e, NvmlError::NoPermission));
    std::fs::write(dir.join(fake_nvml::CONFIG_FILE), cfg.to_toml()).unwrap();
    dev0.reset_applications_clocks().unwrap();

    // Lost: only that GPU errors, its physical energy keeps accruing.
    sim.set_load(1, 0.5).unwrap();
    sim.set_fault(1, Fault::Lost).unwrap();
    is(dev1.name(), |e| matches!(e, NvmlError::GpuLost));
    is(dev1.total_energy_consumption(), |e| matches!(e, NvmlError::GpuLost));
    is(nvml.device_by_index(1), |e| matches!(e, NvmlError::GpuLost));
    assert_eq!(dev0.name().unwrap(), "NVIDIA H100 80GB HBM3");
    let lost_at = sim.gpu_state(1).unwrap().counter_mj;
    sleep(Duration::from_millis(20));
    sim.clear_fault(1, Fault::Lost).unwrap();
    assert!(dev1.total_energy_consumption().unwrap() > lost_at);

    // Counter faults.
    is(nvml.device_by_index(2).unwrap().total_energy_consumption(), |e| matches!(e, NvmlError::NotSupported));
    sim.set_fault(0, Fault::CounterUnsupported).unwrap();
    is(dev0.total_energy_consumption(), |e| matches!(e, NvmlError::NotSupported));
    assert_eq!(dev0.power_usage().unwrap(), 650_000);
    sim.clear_fault(0, Fault::CounterUnsupported).unwrap();
    let before = dev0.total_energy_consumption().unwrap();
    assert!(before > 1_000_000_000);
    sim.set_fault(0, Fault::CounterReset).unwrap();
    let after = dev0.total_energy_consumption().unwrap();
    assert!(after < 1_000_000, "counter did not reset: {before} -> {after}");
    check_counter_matches_truth(&sim, &dev0, 0, || sleep(Duration::from_millis(100)));

    // Per-process utilisation: none without processes (NVML's NOT_FOUND: no samples), the
    // processes set, or NOT_SUPPORTED where the driver gives none; running processes likewise.
    is(dev0.process_utilization_stats(0), |e| matches!(e, NvmlError::NotFound));
    assert!(dev0.running_compute_processes().unwrap().is_empty());
    let processes = [ProcessLoad { pid: 4242, sm_pct: 70 }, ProcessLoad { pid: 4343, sm_pct: 20 }];
    sim.set_processes(0, &processes).unwrap();
    assert!(sim.set_processes(0, &[ProcessLoad { pid: 1, sm_pct: 101 }]).is_err());
    let samples = dev0.process_utilization_stats(0).unwrap();
    let seen: Vec<(u32, u32)> = samples.iter().map(|s| (s.pid, s.sm_util)).collect();
    assert_eq!(seen, vec![(4242, 70), (4343, 20)]);
    assert!(samples.iter().all(|s| s.timestamp > 0));
    let pids: Vec<u32> = dev0.running_compute_processes().unwrap().iter().map(|p| p.pid).collect();
    assert_eq!(pids, vec![4242, 4343]);
    sim.set_process_utilization(0, false).unwrap();
    is(dev0.process_utilization_stats(0), |e| matches!(e, NvmlError::NotSupported));
    sim.set_process_utilization(0, true).unwrap();
    sim.set_processes(0, &[]).unwrap();

    // Shutdown and re-init (a daemon restart): the counter continues from the shared state.
    let last = dev0.total_energy_consumption().unwrap();
    nvml.shutdown().unwrap();
    sleep(Duration::from_millis(20));
    let nvml = init(&lib).unwrap();
    let again = nvml.device_by_index(0).unwrap().total_energy_consumption().unwrap();
    assert!(again > last + 650 * 20, "{last} -> {again}");
    drop(nvml);
    std::fs::remove_dir_all(&dir).unwrap();
    std::fs::remove_dir_all(&empty).unwrap();
}
