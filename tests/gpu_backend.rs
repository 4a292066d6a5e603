//! The NVML backend against the simulated GPUs, in-process through nvml-wrapper: enumeration,
//! lookups, readings, and setters that validate like NVML. One test function: the library
//! reads its directory once per process.

use wattson_harness::node as common;

use wattson_gpu::{GpuBackend, GpuError, NvmlBackend};
use wattson_types::job::GpuRef;

#[test]
fn the_nvml_backend_reads_resolves_and_validates_settings() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = fake_nvml::Config::uniform("A100", 2);
    config.gpu[1].energy_counter = Some(false);
    let sim = fake_nvml::Sim::create(&dir.path().join("gpus"), &config).unwrap();
    // SAFETY: set before any thread of this test binary loads NVML; this is its only test.
    unsafe { std::env::set_var(fake_nvml::DIR_ENV, sim.dir()) };
    let gpus = NvmlBackend::open(Some(&common::fake_library())).unwrap();

    let d = gpus.devices();
    assert_eq!(d.len(), 2);
    assert!(d[0].name.contains("A100"), "{}", d[0].name);
    assert!(d[0].energy_counter && !d[1].energy_counter);
    assert_eq!((d[0].power_limit_min_mw, d[0].power_limit_max_mw), (Some(100_000), Some(400_000)));
    assert_eq!(d[0].sm_clocks_mhz.first(), Some(&1410));
    assert!(d[0].sm_clocks_mhz.len() > 16 && d[0].mem_clocks_mhz.len() == 1);
    assert_ne!(d[0].uuid, d[1].uuid);
    assert_eq!((d[0].minor_number, d[1].minor_number), (Some(0), Some(1)));

    // Lookups by index, UUID and PCI bus id (long and short forms).
    assert_eq!(gpus.resolve(&GpuRef::Id(d[1].uuid.clone())), Ok(1));
    assert_eq!(gpus.resolve(&GpuRef::Id(d[1].pci_bus_id.clone())), Ok(1));
    let short = d[1].pci_bus_id.split_once(':').unwrap().1.to_string();
    assert_eq!(gpus.resolve(&GpuRef::Id(short)), Ok(1));
    assert!(matches!(gpus.resolve(&GpuRef::Index(2)), Err(GpuError::NotFound(_))));

    // Readings follow the simulated load.
    sim.set_load(0, 1.0).unwrap();
    let busy = gpus.read(0).unwrap();
    sim.set_load(0, 0.0).unwrap();
    let idle = gpus.read(0).unwrap();
    assert!(busy.power_mw.unwrap() > idle.power_mw.unwrap());
    assert!(idle.energy_mj.unwrap() >= busy.energy_mj.unwrap());
    assert_eq!(busy.util_pct, Some(100));
    assert_eq!(gpus.read(1).unwrap().energy_mj, None, "no counter on GPU 1");
    assert!(gpus.compute_processes(0).unwrap().is_empty());

    // Setters validate like NVML, and valid settings take effect.
    assert!(matches!(gpus.set_power_limit(0, 450_000), Err(GpuError::InvalidValue(_))));
    gpus.set_power_limit(0, 150_000).unwrap();
    assert_eq!(gpus.settings(0).unwrap().power_limit_mw, Some(150_000));
    sim.set_load(0, 1.0).unwrap();
    assert!(gpus.read(0).unwrap().power_mw.unwrap() <= 150_000);
    assert!(matches!(gpus.set_locked_clocks(0, 1000, 900), Err(GpuError::InvalidValue(_))));
    assert!(
        matches!(gpus.set_locked_clocks(0, 1001, 1003), Err(GpuError::InvalidValue(_))),
        "unsupported clock"
    );
    let lowest = *d[0].sm_clocks_mhz.last().unwrap();
    gpus.set_locked_clocks(0, lowest, lowest).unwrap();
    gpus.set_power_limit(0, 400_000).unwrap();
    assert_eq!(gpus.read(0).unwrap().sm_clock_mhz, Some(lowest));
    gpus.reset_locked_clocks(0).unwrap();
    assert_eq!(gpus.read(0).unwrap().sm_clock_mhz, Some(1410));

    // Without privilege the driver refuses, as NVML does for non-root callers.
    let mut unprivileged = config.clone();
    unprivileged.privileged_uids = vec![];
    std::fs::write(sim.dir().join(fake_nvml::CONFIG_FILE), unprivileged.to_toml()).unwrap();
    assert_eq!(gpus.set_power_limit(0, 200_000), Err(GpuError::NoPermission));

    // A lost GPU errs alone.
    sim.set_fault(1, fake_nvml::Fault::Lost).unwrap();
    assert_eq!(gpus.read(1), Err(GpuError::Lost));
    assert!(gpus.read(0).is_ok());
}
