use super::*;
use wattson_types::energy::{GpuMeter, GpuReading};
use wattson_types::job::{EnergyPolicy, Hints, JobDvfs, JobGpu, JobState};

const S: i64 = 1_000_000_000;

fn gpu(index: u32, energy_j: f64, setting: Option<GpuSetting>) -> JobGpu {
    let mut meter = GpuMeter::begin(GpuReading { t_ns: 0, ..Default::default() });
    meter.energy_mj = energy_j * 1000.0;
    meter.events.push(MeterEvent::Setting { t_ns: 0, setting: Some(GpuSetting::PowerLimit { mw: 700_000 }) });
    meter.events.push(MeterEvent::Setting { t_ns: 30 * S, setting });
    JobGpu { index, uuid: format!("GPU-{index}"), name: "H100".into(), meter }
}

/// Job 42 on gpu01: 2 GPUs for one hour, 1.8 MJ (0.5 kWh), settled at 420 W by the models.
fn record(key: &str) -> JobRecord {
    JobRecord {
        key: JobKey::parse(key).unwrap(),
        uid: 1000,
        user: Some("alice".into()),
        name: Some("train".into()),
        node: "gpu01".into(),
        begin_ns: 0,
        end_ns: Some(3600 * S),
        state: JobState::Completed,
        hints: Hints { policy: Some(EnergyPolicy::MinEnergy), ..Hints::default() },
        policy: Some(EnergyPolicy::MinEnergy),
        gpus: vec![
            gpu(0, 900_000.0, Some(GpuSetting::PowerLimit { mw: 420_000 })),
            gpu(1, 900_000.0, Some(GpuSetting::PowerLimit { mw: 420_000 })),
        ],
        dvfs: Some(Box::new(JobDvfs {
            tag: "bert".into(),
            reason: Some("least energy within the 10% slowdown bound".into()),
            measured_slowdown: Some(0.062),
            energy_saved_j: Some(360_000.0),
            ..JobDvfs::default()
        })),
        node_share: None,
    }
}

fn config(tables: &str) -> Config {
    Config::parse(tables, "test").unwrap()
}

#[test]
fn a_model_decided_job_reads_like_seff() {
    let flat = |v: &str| format!("[{}]", vec![v; 24].join(", "));
    let cfg =
        config(&format!("[prices]\nhourly_utc = {}\n[carbon]\nhourly_utc = {}\n", flat("0.2"), flat("400")));
    // A step's record is part of the job: left out.
    let records = [record("42"), record("42.0")];
    let out = render(&figures(42, &records, Some(431.6), &cfg, 0));
    let expected = "\
Job ID: 42
User: alice
Nodes: gpu01
GPUs: 2
Elapsed: 01:00:00
GPU energy: 0.500 kWh (1.80MJ)
Energy per GPU-hour: 0.250 kWh
Mean power: 500 W (250 W per GPU)
Peak GPU power: 432 W
Setting: power limit 420 W on 2 GPUs
Why: policy min-energy: the DVFS models chose it for workload \"bert\" (least energy within the 10% slowdown bound); measured slowdown 6.2%
Saved (estimate): 0.100 kWh against the highest setting
Cost: 0.10
CO2: 0.20 kg
";
    assert_eq!(out, expected);
}

#[test]
fn a_job_that_set_its_own_clocks_says_wattson_stood_aside() {
    let mut r = record("43");
    r.hints.gpu_freq = Some("high".into());
    r.policy = Some(EnergyPolicy::Perf);
    r.dvfs = None;
    r.gpus = vec![gpu(0, 3_600_000.0, None)];
    let out = render(&figures(43, &[r], None, &config(""), 0));
    assert!(out.contains("Setting: GPU defaults on 1 GPU\n"), "{out}");
    assert!(
        out.contains("Why: policy perf: the job asked Slurm for --gpu-freq=high, so wattson stood aside\n"),
        "{out}"
    );
    assert!(out.contains("Energy per GPU-hour: 1.000 kWh\n"), "{out}");
    assert!(out.contains("Peak GPU power: n/a (no power trace)\n"), "{out}");
    assert!(out.contains("Saved (estimate): n/a (no model setting)\n"), "{out}");
    assert!(out.contains("Cost: n/a (no [prices] tariff)\nCO2: n/a (no [carbon] table)\n"), "{out}");
}

#[test]
fn a_cpu_only_job_reads_its_scopes_energy_and_no_gpu_setting() {
    use wattson_types::scope::{EnergyScope, NodeShare};
    let mut r = record("44");
    r.gpus = Vec::new();
    r.dvfs = None;
    // 0.25 kWh of CPU and 0.05 of DRAM over the hour.
    r.node_share =
        Some(NodeShare { scope: EnergyScope::Cpu, cpu_mj: Some(9e8), dram_mj: Some(1.8e8), node_mj: None });
    let flat = |v: &str| format!("[{}]", vec![v; 24].join(", "));
    let out =
        render(&figures(44, &[r], None, &config(&format!("[prices]\nhourly_utc = {}\n", flat("1.0"))), 0));
    assert!(out.contains("GPUs: 0\n") && out.contains("GPU energy: 0.000 kWh"), "{out}");
    assert!(out.contains("Energy in Slurm: 0.300 kWh (1.08MJ), scope cpu\n"), "{out}");
    assert!(out.contains("Mean power: 300 W\n") && out.contains("Setting: none (no GPU)\n"), "{out}");
    assert!(
        out.contains("Energy per GPU-hour: n/a (no GPU time)\n") && out.contains("Cost: 0.30\n"),
        "{out}"
    );
}
