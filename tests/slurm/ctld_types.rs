//! `wattson ctld` placing pending jobs by GPU type on a real Slurm (the lab of [`super::ctld`],
//! with H100s on n1 and n3 and A100s on n2): a job that asked for untyped GPUs waits for the
//! type its workload's models rank best, while a job that named a type keeps it.

use std::time::{Duration, Instant};

use wattson_engine::{Knob, Measurements, ModelTable, Sample};
use wattson_harness::slurm_lab::{LabOptions, SlurmLab};
use wattson_types::job::Progress;
use wattson_types::model_owner::ModelOwner;

use super::ctld::{ctld_log, lab_of_types, start_ctld, wait_for};

/// root's workload `train` measured on `gpu` at three power limits: the same time per unit
/// of work at each limit, at `watts` each.
fn measured(gpu: &str, limits: [f64; 3], watts: [f64; 3]) -> Measurements {
    let times = [1.3, 1.1, 1.0];
    Measurements {
        owner: ModelOwner::User(0),
        gpu_type: gpu.into(),
        tag: "root:train".into(),
        progress: Progress::File,
        knob: Knob::PowerLimit,
        samples: (0..30)
            .map(|i| {
                Sample::new(limits[i % 3], times[i % 3] * (1.0 + 0.001 * (i / 3) as f64), watts[i % 3], 1.0)
            })
            .collect(),
        settings: limits.to_vec(),
        updated_ns: 1,
    }
}

/// A field of `scontrol show job`.
fn field(lab: &SlurmLab, job: u32, key: &str) -> String {
    lab.job_info(job).map(|j| j.get(key).to_string()).unwrap_or_default()
}

/// `train` does the same work on an A100 at under a quarter of an H100's draw, so the engine offers it
/// only the A100s (an H100 costs more than twice as much, with its share of the node's base).
/// With every GPU busy, an untyped `train` is kept off the H100 nodes (its ExcNodeList) and an
/// H100-typed one is left alone: when n1's H100s free, only the typed one starts there; the
/// untyped one starts on n2 once n2's A100s free.
#[test]
fn a_pending_untyped_job_waits_for_the_gpu_type_the_engine_ranks_and_a_typed_one_keeps_its_own() {
    let (mut lab, power, _daemons) = lab_of_types(
        "manage_power = false\nweights = false",
        // Backfill each second: the typed job starts beside the untyped one held behind it.
        LabOptions {
            extra_conf: "SchedulerParameters=batch_sched_delay=0,bf_interval=1\n".into(),
            ..LabOptions::default()
        },
        ["h100", "a100", "h100"],
    );
    let workloads = vec![
        measured("NVIDIA H100 80GB HBM3", [400.0, 550.0, 700.0], [560.0, 650.0, 700.0]),
        measured("NVIDIA A100-SXM4-80GB", [200.0, 300.0, 400.0], [130.0, 150.0, 160.0]),
    ];
    let table = ModelTable::from_measurements(&workloads, |_| Knob::PowerLimit);
    assert!(table.get(&ModelOwner::User(0), "root:train", "a100").is_some(), "the A100 model fits");
    assert!(table.get(&ModelOwner::User(0), "root:train", "h100").is_some(), "the H100 model fits");
    // The controller merges its saved measurements into the model table it reads.
    let (measurements, models) = (lab.dir().join("measurements.json"), lab.dir().join("models.json"));
    std::fs::write(&measurements, serde_json::to_vec(&workloads).unwrap()).unwrap();
    std::fs::write(&models, table.to_json().unwrap()).unwrap();
    let toml = lab.dir().join("etc/wattson.toml");
    let text = std::fs::read_to_string(&toml).unwrap().replacen(
        "[ctld]\n",
        &format!("[engine]\nmodels_file = {models:?}\n[ctld]\nmeasurements_file = {measurements:?}\n"),
        1,
    );
    std::fs::write(&toml, text).unwrap();

    let busy: Vec<u32> = ["n1", "n2", "n3"]
        .iter()
        .map(|n| lab.sbatch(&["--gres=gpu:2", "-w", n], "sleep 300\n").unwrap())
        .collect();
    wait_for(&mut lab, &power, "every GPU busy", Duration::from_secs(60), |lab| {
        busy.iter().all(|&j| lab.job_info(j).is_some_and(|j| j.state == "RUNNING"))
    });
    let untyped = lab.sbatch(&["--gres=gpu:1", "-J", "train"], "sleep 300\n").unwrap();
    let typed = lab.sbatch(&["--gres=gpu:h100:1", "-J", "train"], "sleep 300\n").unwrap();
    let _ctld = start_ctld(&lab);
    wait_for(&mut lab, &power, "the untyped job kept off the H100 nodes", Duration::from_secs(20), |lab| {
        field(lab, untyped, "ExcNodeList") == "n1,n3"
    });
    let log = ctld_log(&lab);
    assert!(log.contains("excnodelist") && log.contains("a100"), "{log}");
    assert_eq!(field(&lab, typed, "ExcNodeList"), "(null)", "{log}");
    assert_eq!(field(&lab, untyped, "TresPerNode"), "gres:gpu:1");
    assert_eq!(field(&lab, typed, "TresPerNode"), "gres:gpu:h100:1");

    // n1's H100s free: the typed job starts there, the untyped one keeps waiting.
    lab.run_ok("scancel", &[&busy[0].to_string()]);
    wait_for(&mut lab, &power, "the typed job on n1", Duration::from_secs(20), |lab| {
        lab.job_info(typed).is_some_and(|j| j.state == "RUNNING" && j.get("NodeList") == "n1")
    });
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(5) {
        let info = lab.job_info(untyped).unwrap();
        assert_eq!(info.state, "PENDING", "{} on {}\n{}", info.state, info.get("NodeList"), ctld_log(&lab));
        std::thread::sleep(Duration::from_millis(250));
    }
    // n2's A100s free: the untyped job starts there.
    lab.run_ok("scancel", &[&busy[1].to_string()]);
    wait_for(&mut lab, &power, "the untyped job on n2", Duration::from_secs(20), |lab| {
        lab.job_info(untyped).is_some_and(|j| j.state == "RUNNING" && j.get("NodeList") == "n2")
    });
    let all: Vec<String> = busy.iter().chain([&untyped, &typed]).map(u32::to_string).collect();
    let all: Vec<&str> = all.iter().map(String::as_str).collect();
    lab.run_ok("scancel", &all);
    lab.stop();
}
