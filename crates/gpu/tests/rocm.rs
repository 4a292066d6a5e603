//! The AMD backend (ROCm SMI, loaded at run time) against the simulated GPUs of the fake ROCm
//! SMI (`tests/fake-amdsmi`), in-process: enumeration with Slurm's numbers from the render
//! minors, the energy count in mJ by its resolution, power and caps in their units, setters
//! that validate like ROCm SMI, processes, faults; `[gpu] backend = "auto"`; and the real
//! library. One test function: each library reads its directory once per process.

use wattson_gpu::{Choice, GpuBackend, GpuError, Libraries, RocmBackend};
use wattson_types::job::GpuRef;

#[test]
fn the_amd_backend_reads_resolves_and_validates_settings() {
    let dir =
        std::env::temp_dir().join(format!("wattson-gpu-rocm-{}-{}", std::process::id(), fake_nvml::now_ns()));
    let mut config = fake_nvml::Config::uniform("MI300X", 3);
    config.gpu[1].energy_counter = Some(false);
    // Slurm's numbers (render minors 128 + N) in another order than ROCm SMI's indices.
    for (gpu, minor) in [(0, 2), (1, 0), (2, 1)] {
        config.gpu[gpu].minor_number = Some(minor);
    }
    config.gpu[2].pci_bus_id = Some("0000:c1:00.0".into());
    let sim = fake_nvml::Sim::create(&dir, &config).unwrap();
    // SAFETY: set before any thread of this test binary loads a library; this is its only test.
    unsafe { std::env::set_var(fake_amdsmi::DIR_ENV, sim.dir()) };
    let exe = std::env::current_exe().unwrap();
    let lib = fake_amdsmi::library_path_next_to(&exe).expect("libfake_amdsmi.so built beside the test");
    let nvml = fake_nvml::library_path_next_to(&exe).expect("libfake_nvml.so built beside the test");

    // auto: NVML loads but its driver is not (no WATTSON_FAKE_NVML_DIR): ROCm SMI drives them.
    let auto = wattson_gpu::open(Choice::Auto, Libraries { nvml: Some(&nvml), amd: Some(&lib) }).unwrap();
    assert_eq!((auto.what.as_str(), auto.backend.devices().len()), ("ROCm SMI", 3));
    drop(auto);
    // Neither: the error gives both reasons.
    let none = std::path::Path::new("/nonexistent/librocm_smi64.so.1");
    let err =
        wattson_gpu::open(Choice::Auto, Libraries { nvml: Some(&nvml), amd: Some(none) }).err().unwrap();
    assert!(err.to_string().contains("NVML") && err.to_string().contains("ROCm SMI"), "{err}");
    assert!(matches!(RocmBackend::open(Some(none)), Err(GpuError::Driver(_))));

    let gpus = RocmBackend::open(Some(&lib)).unwrap();
    let d = gpus.devices();
    assert_eq!(d.len(), 3);
    assert_eq!(d[0].name, "AMD Instinct MI300X");
    assert!(d[0].energy_counter && !d[1].energy_counter);
    assert_eq!((d[0].power_limit_min_mw, d[0].power_limit_max_mw), (Some(200_000), Some(750_000)));
    assert_eq!(d[0].power_limit_default_mw, Some(750_000));
    let spec_0 = fake_nvml::Config::load(sim.dir()).unwrap().spec(0).unwrap();
    let lowest = spec_0.min_clock();
    assert_eq!((d[0].sm_clocks_mhz.first(), d[0].sm_clocks_mhz.last()), (Some(&2100), Some(&lowest)));
    assert!(d[0].sm_clocks_mhz.len() <= 32 && d[0].sm_clocks_mhz.windows(2).all(|w| w[0] > w[1]));
    assert_eq!(d[0].mem_clocks_mhz, vec![1300]);
    assert_eq!(d[2].pci_bus_id, "0000:c1:00.0");
    assert_eq!(d[0].uuid, fake_amdsmi::wattson_uuid(&spec_0.uuid));
    assert_eq!(d.iter().map(|g| g.minor_number).collect::<Vec<_>>(), vec![Some(2), Some(0), Some(1)]);
    assert!(d.iter().all(|g| g.mig.is_empty()));

    // Slurm's number N is /dev/dri/renderD<128+N>; UUIDs and PCI bus ids resolve too.
    assert_eq!(gpus.resolve(&GpuRef::Index(0)), Ok(1));
    assert_eq!(gpus.resolve(&GpuRef::Index(2)), Ok(0));
    assert_eq!(gpus.resolve(&GpuRef::Id(d[2].uuid.clone())), Ok(2));
    assert_eq!(gpus.resolve(&GpuRef::Id("c1:00.0".into())), Ok(2));
    assert!(matches!(gpus.resolve(&GpuRef::Index(3)), Err(GpuError::NotFound(_))));

    // The energy in mJ is the count × 15.3 µJ; it follows the simulated GPU's truth.
    sim.set_load(0, 1.0).unwrap();
    // The fake serves the last whole millisecond's energy as the present draw's, so the first
    // read waits until the load change is a whole update interval old (without it, one run
    // in six here read within that millisecond and was 35-170 mJ off the truth).
    std::thread::sleep(std::time::Duration::from_millis(2));
    let (t0, e0) = gpus.read_counter(0).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let (t1, e1) = gpus.read_counter(0).unwrap();
    let (e0, e1) = (e0.unwrap(), e1.unwrap());
    let served = |mj| *sim.counter_read_instants(0, mj).unwrap().last().unwrap();
    let truth = sim.truth_energy_mj(0, served(e0), served(e1)).unwrap();
    assert!(((e1 - e0) as f64 - truth).abs() <= 2.0, "{} mJ counted, {truth} mJ drawn", e1 - e0);
    // The served value is at most one update interval (1 ms) older than the read.
    assert!(t0 - served(e0) >= 0 && t1 - served(e1) < 50_000_000);
    assert!(served(e0) % fake_amdsmi::UPDATE_INTERVAL_NS == 0, "the count is the last whole millisecond's");

    // Readings in mW, MHz, percent.
    let busy = gpus.read(0).unwrap();
    sim.set_load(0, 0.0).unwrap();
    let idle = gpus.read(0).unwrap();
    assert_eq!(busy.power_mw, Some(720_000));
    assert_eq!(idle.power_mw, Some(140_000));
    assert_eq!((busy.util_pct, idle.util_pct), (Some(100), Some(0)));
    assert_eq!(busy.sm_clock_mhz, Some(2100));
    assert_eq!(gpus.read(1).unwrap().energy_mj, None, "no counter on GPU 1");

    // Processes: each GPU's own, from ROCm SMI's system-wide list.
    let p = |pid| fake_nvml::ProcessLoad { pid, sm_pct: 50 };
    sim.set_processes(0, &[p(11), p(12)]).unwrap();
    sim.set_processes(2, &[p(12), p(13)]).unwrap();
    assert_eq!(gpus.compute_processes(0).unwrap(), vec![11, 12]);
    assert_eq!(gpus.compute_processes(2).unwrap(), vec![12, 13]);
    assert!(gpus.compute_processes(1).unwrap().is_empty());
    assert_eq!(gpus.process_utilization(0, 0), Err(GpuError::NotSupported));

    // Power caps in µW underneath, validated; the cap binds; clock ranges; restore.
    assert!(matches!(gpus.set_power_limit(0, 800_000), Err(GpuError::InvalidValue(_))));
    gpus.set_power_limit(0, 300_000).unwrap();
    assert_eq!(gpus.settings(0).unwrap().power_limit_mw, Some(300_000));
    assert_eq!(sim.gpu_state(0).unwrap().power_limit_mw, 300_000);
    sim.set_load(0, 1.0).unwrap();
    assert!(gpus.read(0).unwrap().power_mw.unwrap() <= 300_000);
    assert!(matches!(gpus.set_locked_clocks(0, 1000, 900), Err(GpuError::InvalidValue(_))));
    assert!(matches!(gpus.set_locked_clocks(0, 100, 900), Err(GpuError::InvalidValue(_))));
    gpus.set_power_limit(0, 750_000).unwrap();
    gpus.set_locked_clocks(0, lowest, 1200).unwrap();
    assert_eq!(sim.gpu_state(0).unwrap().locked_clocks_mhz, Some((lowest, 1200)));
    gpus.restore_defaults(0).unwrap();
    let back = sim.gpu_state(0).unwrap();
    assert_eq!((back.power_limit_mw, back.locked_clocks_mhz), (750_000, None));

    // Without privilege ROCm SMI refuses, as it does for non-root callers.
    let mut unprivileged = fake_nvml::Config::load(sim.dir()).unwrap();
    unprivileged.privileged_uids = vec![];
    std::fs::write(sim.dir().join(fake_nvml::CONFIG_FILE), unprivileged.to_toml()).unwrap();
    assert_eq!(gpus.set_power_limit(0, 400_000), Err(GpuError::NoPermission));

    // A lost GPU errs alone.
    sim.set_fault(1, fake_nvml::Fault::Lost).unwrap();
    assert_eq!(gpus.read(1), Err(GpuError::Lost));
    assert!(gpus.read(0).is_ok());
    let _ = std::fs::remove_dir_all(&dir);

    // The real ROCm SMI (librocm-smi64-1, installed with the headers by scripts/install-deps),
    // through the same bindings: on a machine without AMD GPUs it does not start, and says so.
    match RocmBackend::open(None) {
        Ok(real) => assert!(real.devices().iter().all(|d| !d.name.is_empty() && d.uuid.starts_with("GPU-"))),
        Err(GpuError::Driver(why)) => {
            assert!(why.starts_with("ROCm SMI did not start: ") && !why.contains("unavailable"), "{why}")
        }
        Err(e) => panic!("{e:?}"),
    }
}
