//! MIG through nvml-wrapper 0.13, as wattsond and Slurm's `gpu/nvml` ask for it: the mode, the
//! instances' handles, UUIDs, names, ids and slices, and what stays the physical GPU's.
//! One test function: the library lives once per process.

use fake_nvml::{Config, DIR_ENV, GpuConfig, Sim, library_path_next_to, now_ns};
use nvml_wrapper::Nvml;
use nvml_wrapper::error::NvmlError;

#[test]
fn mig_instances_through_nvml_wrapper() {
    let exe = std::env::current_exe().unwrap();
    let lib = library_path_next_to(&exe).expect("libfake_nvml.so next to the test");
    let dir = std::env::temp_dir().join(format!("fake-nvml-mig-{}-{}", std::process::id(), now_ns()));
    let mut cfg = Config::uniform("H100", 2);
    cfg.gpu[1].mig = Some(vec!["3g.40gb".into(), "1c.3g.40gb".into()]);
    cfg.gpu.push(GpuConfig::preset("V100"));
    let sim = Sim::create(&dir, &cfg).unwrap();
    // SAFETY: set before any thread of this test process reads the environment.
    unsafe { std::env::set_var(DIR_ENV, sim.dir()) };
    let nvml = Nvml::builder().lib_path(lib.as_os_str()).init().unwrap();
    assert_eq!(nvml.device_count().unwrap(), 3, "MIG instances are not counted as GPUs");

    let whole = nvml.device_by_index(0).unwrap();
    let split = nvml.device_by_index(1).unwrap();
    let v100 = nvml.device_by_index(2).unwrap();
    let mode = |d: &nvml_wrapper::Device| d.mig_mode().map(|m| (m.current, m.pending));
    assert_eq!(mode(&whole).unwrap(), (0, 0));
    assert_eq!(mode(&split).unwrap(), (1, 1));
    assert!(matches!(mode(&v100), Err(NvmlError::NotSupported)));
    assert_eq!(split.mig_device_count().unwrap(), 7, "the most a GPU holds");
    assert!(matches!(whole.mig_device_by_index(0), Err(NvmlError::InvalidArg)), "MIG is off");
    assert!(matches!(split.mig_device_by_index(2), Err(NvmlError::NotFound)));

    let truth = sim.mig_instances(1).unwrap();
    assert_eq!(truth.len(), 2);
    for (k, want) in truth.iter().enumerate() {
        let mut m = split.mig_device_by_index(k as u32).unwrap();
        assert_eq!(m.uuid().unwrap(), want.uuid);
        assert!(m.mig_is_mig_device_handle().unwrap());
        assert_eq!(m.name().unwrap(), format!("NVIDIA H100 80GB HBM3 MIG {}", want.profile));
        let attrs = m.attributes().unwrap();
        assert_eq!(
            (attrs.gpu_instance_slice_count, attrs.compute_instance_slice_count, attrs.memory_size_mb),
            (3, [3, 1][k], 40 * 1024)
        );
        assert_eq!(m.mig_parent_device().unwrap().uuid().unwrap(), split.uuid().unwrap());
        // nvml-wrapper 0.13 wraps neither id call: through its loaded symbols, as Slurm calls them.
        let lib = nvml.lib();
        let (mut gi, mut ci) = (u32::MAX, u32::MAX);
        // SAFETY: valid handle and out-pointers; the symbols are the fake's.
        unsafe {
            assert_eq!((lib.nvmlDeviceGetGpuInstanceId.as_ref().unwrap())(m.handle(), &mut gi), 0);
            assert_eq!((lib.nvmlDeviceGetComputeInstanceId.as_ref().unwrap())(m.handle(), &mut ci), 0);
        }
        assert_eq!((gi, ci), (want.gpu_instance_id, want.compute_instance_id));
        // Energy and power are the physical GPU's only.
        assert!(m.total_energy_consumption().is_err());
        assert!(m.set_power_management_limit(300_000).is_err());
    }
    assert!(!split.mig_is_mig_device_handle().unwrap());
    assert!(whole.attributes().is_ok());
    // In MIG mode the driver gives no utilisation, nor per process.
    assert!(matches!(split.utilization_rates(), Err(NvmlError::NotSupported)));
    assert!(matches!(split.process_utilization_stats(0), Err(NvmlError::NotSupported)));
    assert!(whole.utilization_rates().is_ok());
    // The physical GPU's counter and settings work as on any GPU: a setting made there applies
    // to every instance, which is why wattson makes none on a shared one.
    assert!(split.total_energy_consumption().is_ok());
    let mut split = split;
    split.set_power_management_limit(400_000).unwrap();
    assert_eq!(sim.gpu_state(1).unwrap().power_limit_mw, 400_000);
    drop(nvml);
    let _ = std::fs::remove_dir_all(&dir);
}
