//! The NVML backend on a node with GPUs in MIG mode (the simulated driver, in-process through
//! nvml-wrapper): the instances it describes, and how a job's naming of one resolves: its
//! `MIG-` UUID, the form of drivers before R470, and Slurm's number. One test function: the
//! library reads its directory once per process.

use wattson_gpu::{GpuBackend, GpuError, NvmlBackend, slurm_places};
use wattson_types::job::GpuRef;

#[test]
fn mig_instances_are_described_and_resolve_to_their_gpu() {
    let dir =
        std::env::temp_dir().join(format!("wattson-gpu-mig-{}-{}", std::process::id(), fake_nvml::now_ns()));
    let mut config = fake_nvml::Config::uniform("H100", 3);
    config.gpu[0].mig = Some(vec!["3g.40gb".into(), "3g.40gb".into()]);
    config.gpu[2].mig = Some(vec!["4g.40gb".into(), "1c.2g.20gb".into(), "1g.10gb".into()]);
    let sim = fake_nvml::Sim::create(&dir, &config).unwrap();
    // SAFETY: set before any thread of this test binary loads NVML; this is its only test.
    unsafe { std::env::set_var(fake_nvml::DIR_ENV, sim.dir()) };
    let exe = std::env::current_exe().unwrap();
    let lib = fake_nvml::library_path_next_to(&exe).expect("libfake_nvml.so built beside the test");
    let gpus = NvmlBackend::open(Some(&lib)).unwrap();
    let d = gpus.devices();
    assert_eq!(d.len(), 3, "instances are not GPUs of their own");
    assert!(d[1].mig.is_empty());
    for gpu in [0, 2] {
        let truth = sim.mig_instances(gpu).unwrap();
        let got = &d[gpu as usize].mig;
        assert_eq!(got.len(), truth.len());
        for (m, t) in got.iter().zip(&truth) {
            assert_eq!((&m.uuid, &m.profile, m.compute_slices), (&t.uuid, &t.profile, t.compute_slices));
            assert_eq!(
                (m.gpu_instance_id, m.compute_instance_id),
                (Some(t.gpu_instance_id), Some(t.compute_instance_id))
            );
        }
    }
    assert_eq!(d[2].mig.iter().map(|m| m.compute_slices).collect::<Vec<_>>(), vec![4, 1, 1]);

    // By MIG UUID (any case) and by the older `MIG-<GPU UUID>/<GI>/<CI>` form.
    let m = &d[2].mig[1];
    assert_eq!(gpus.resolve_instance(&GpuRef::Id(m.uuid.to_uppercase())), Ok((2, Some(m.clone()))));
    let old = format!("MIG-{}/{}/{}", d[2].uuid, m.gpu_instance_id.unwrap(), m.compute_instance_id.unwrap());
    assert_eq!(gpus.resolve_instance(&GpuRef::Id(old)), Ok((2, Some(m.clone()))));
    assert!(matches!(gpus.resolve_instance(&GpuRef::Id("MIG-nonesuch".into())), Err(GpuError::NotFound(_))));
    // A whole GPU by its UUID, as ever.
    assert_eq!(gpus.resolve_instance(&GpuRef::Id(d[1].uuid.clone())), Ok((1, None)));

    // Slurm's numbers follow its GRES list: GPU 0's two instances, GPU 1, GPU 2's three.
    let want: Vec<(u32, Option<&str>)> = vec![
        (0, Some(d[0].mig[0].uuid.as_str())),
        (0, Some(d[0].mig[1].uuid.as_str())),
        (1, None),
        (2, Some(d[2].mig[0].uuid.as_str())),
        (2, Some(d[2].mig[1].uuid.as_str())),
        (2, Some(d[2].mig[2].uuid.as_str())),
    ];
    let places = slurm_places(d);
    let got: Vec<(u32, Option<&str>)> =
        places.iter().map(|(i, m)| (*i, m.as_ref().map(|m| m.uuid.as_str()))).collect();
    assert_eq!(got, want);
    for (n, (index, m)) in places.iter().enumerate() {
        assert_eq!(gpus.resolve_instance(&GpuRef::Index(n as u32)), Ok((*index, m.clone())));
    }
    assert!(matches!(gpus.resolve(&GpuRef::Index(6)), Err(GpuError::NotFound(_))));

    // The GPUs' counters are read as ever; in MIG mode the driver gives no utilisation.
    let r = gpus.read(0).unwrap();
    assert!(r.energy_mj.is_some() && r.util_pct.is_none());
    assert_eq!(gpus.read(1).unwrap().util_pct, Some(0));
    drop(gpus);
    let _ = std::fs::remove_dir_all(&dir);
}
