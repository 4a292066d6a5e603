//! The node's side of the cluster power budget: a running job's level table (`job_levels`) and
//! its GPUs held at one level (`job_pace` with `level`), then back to its energy-saving setting
//! or to full speed, on a simulated H100.

use wattson_harness::node as common;

use std::os::unix::process::CommandExt;
use std::process::Command;
use std::time::Duration;

use common::{NOBODY, Node, assert_ok};
use fake_nvml::{GpuState, Workload};
use wattson_engine::cluster::Level;
use wattson_engine::{Knob, Measurements, Sample};
use wattson_gpu::GpuSetting;
use wattson_protocol::{ClientError, ErrorCode, Pace, Reply, Request};
use wattson_types::job::Progress;
use wattson_types::model_owner::ModelOwner;

const CHILD_SOCKET: &str = "WATTSON_LEVELS_SOCKET";
/// The fake H100's maximum (and default) power limit.
const H100_MAX_MW: u32 = 700_000;
const GRID_STEP_W: f64 = 5.0;
/// The workload's hidden law: 0.1 s per unit at 1980 MHz, a fifth of it clock-independent.
const WORK: Workload = Workload { t0_s: 0.02, d_s_mhz: 158.4 };

fn call(node: &Node, request: Request) -> Result<Reply, ClientError> {
    wattson_protocol::call(&node.socket, &request, Duration::from_secs(5))
}

/// `job_levels` of `job`: (levels, level, bound).
fn levels(node: &Node, job: u32) -> (Vec<Level>, u16, f64) {
    match call(node, Request::JobLevels { job }).unwrap() {
        Reply::JobLevels { job: j, levels, level, bound } if j == job => (levels, level, bound),
        other => panic!("{other:?}"),
    }
}

/// `job_pace` of `job`; the settings the node says the job's GPUs hold now.
fn pace(node: &Node, job: u32, pace: Pace) -> Vec<(u32, GpuSetting)> {
    match call(node, Request::JobPace { job, pace }).unwrap() {
        Reply::Paced { job: j, pace: p, settings } if j == job && p == pace => settings,
        other => panic!("{other:?}"),
    }
}

fn limit_mw(node: &Node) -> u32 {
    node.sim.gpu_state(0).unwrap().power_limit_mw
}

fn watts(mw: f64) -> u32 {
    (mw * 1000.0).round() as u32
}

/// The refusal of a request as `code`.
fn refused(result: Result<Reply, ClientError>) -> ErrorCode {
    match result {
        Err(ClientError::Refused(e)) => e.code,
        other => panic!("not refused: {other:?}"),
    }
}

/// A window of the workload on a fully loaded fake H100 at `limit_w`, from the fake's physics.
fn measured(limit_w: f64) -> Sample {
    let spec = fake_nvml::Config::uniform("H100", 1).spec(0).unwrap();
    let mut gs = GpuState::fresh(&spec, 0);
    gs.load = 1.0;
    gs.power_limit_mw = watts(limit_w);
    let (mw, mhz) = fake_nvml::operating_point(&spec, &gs);
    Sample {
        setting: limit_w,
        time: 1.0 / WORK.rate(f64::from(mhz)),
        power: f64::from(mw) / 1000.0,
        weight: 10.0,
        rel_se: 0.002,
    }
}

/// Not a test on its own: the unprivileged half of
/// `a_jobs_levels_come_from_its_model_and_each_pace_sets_its_gpus`. Asks for job 1's levels and
/// prints the answer.
#[test]
#[ignore = "run by a_jobs_levels_come_from_its_model_and_each_pace_sets_its_gpus as uid 65534"]
fn child_asks_levels() {
    let socket = std::env::var(CHILD_SOCKET).expect("run by its parent test");
    let answer = match wattson_protocol::call(
        std::path::Path::new(&socket),
        &Request::JobLevels { job: 1 },
        Duration::from_secs(5),
    ) {
        Ok(reply) => format!("ok {reply:?}"),
        Err(ClientError::Refused(e)) => format!("{:?}", e.code),
        Err(e) => format!("client error: {e}"),
    };
    println!("ANSWER {answer}");
}

/// A job whose workload the node already knows settles at once below the top; its table is
/// the engine's over the H100's power-limit grid, the defaults last, and it says the level the
/// GPU runs at. Each pace sets the GPU: a level's limit, back to the saving limit, full speed,
/// and a level beyond the table is the defaults.
#[test]
fn a_jobs_levels_come_from_its_model_and_each_pace_sets_its_gpus() {
    let mut node = Node::with_sections(
        fake_nvml::Config::uniform("H100", 1),
        "100ms",
        "",
        // A window longer than the test: the bound's guard never moves the job meanwhile.
        &format!("probe_window = \"600s\"\nprobe_settle = \"200ms\"\npower_limit_step_w = {GRID_STEP_W}\n"),
    );
    node.start();
    let Reply::Status { gpus, .. } = call(&node, Request::Status {}).unwrap() else { panic!() };
    let info = gpus[0].info.clone();
    assert_eq!(info.power_limit_max_mw, Some(H100_MAX_MW));
    let grid = wattson_engine::priors::power_limit_grid(200.0, 700.0, GRID_STEP_W);
    // The controller's merge hands the node the workload measured at five limits.
    let known = Measurements {
        owner: ModelOwner::User(1000),
        gpu_type: info.name.clone(),
        tag: "bert".into(),
        progress: Progress::File,
        knob: Knob::PowerLimit,
        samples: [700.0, 450.0, 550.0, 350.0, 600.0].map(measured).to_vec(),
        settings: grid.clone(),
        updated_ns: wattson_types::now_ns(),
    };
    match call(&node, Request::MergeModels { models: vec![known] }).unwrap() {
        Reply::ModelsMerged { taken, .. } => assert_eq!(taken, 1),
        other => panic!("{other:?}"),
    }
    node.sim.set_workload(0, Some(WORK)).unwrap();
    node.sim.set_load(0, 1.0).unwrap();
    assert_ok(&node.wattson(&[
        "job",
        "begin",
        "--job",
        "1",
        "--uid",
        "1000",
        "--user",
        "alice",
        "--gpus",
        "0",
        "--energy",
        "min-energy",
        "--energy-slowdown",
        "10",
        "--energy-tag",
        "bert",
    ]));
    let saving = limit_mw(&node);
    assert!(
        saving < H100_MAX_MW,
        "the job did not settle below the top at once: {saving} mW\n{}",
        node.log()
    );

    let (table, level, bound) = levels(&node, 1);
    let top = table.len() - 1;
    assert_eq!(table.iter().map(|l| l.setting).collect::<Vec<_>>(), grid, "one level per limit of the grid");
    assert_eq!(table[top].cap_w, 700.0, "the top level is the defaults: up to the maximum limit");
    assert_eq!(table[top].slowdown_hi, 0.0);
    // Levels whose saving is inside the model's noise are admitted by no bound: the largest
    // finite slowdown (JSON has no infinity, and the reply parsed).
    assert!(table[..top].iter().any(|l| l.slowdown_hi == f64::MAX), "{table:?}");
    assert_eq!(watts(table[usize::from(level)].setting), saving, "the level the GPU runs at");
    assert!((bound - 0.10).abs() < 1e-12, "{bound}");
    // The saving level is one the job's bound admits, and the least-energy one of those.
    assert!(table[usize::from(level)].slowdown_hi <= bound, "{:?}", table[usize::from(level)]);

    // Level 0: the lowest limit of the grid, journaled like every setting.
    let low = GpuSetting::PowerLimit { mw: watts(table[0].setting) };
    assert_eq!(pace(&node, 1, Pace::Level(0)), vec![(0, low)]);
    assert_eq!(limit_mw(&node), 200_000);
    assert_eq!(levels(&node, 1).1, 0);
    // Saving: back to the setting the models chose.
    assert_eq!(pace(&node, 1, Pace::Saving), vec![(0, GpuSetting::PowerLimit { mw: saving })]);
    assert_eq!(limit_mw(&node), saving);
    assert_eq!(levels(&node, 1).1, level);
    // A level, then Full: the defaults, nothing journaled.
    pace(&node, 1, Pace::Level(1));
    assert_eq!(limit_mw(&node), watts(table[1].setting));
    assert_eq!(pace(&node, 1, Pace::Full), vec![]);
    assert_eq!(limit_mw(&node), H100_MAX_MW);
    assert_eq!(levels(&node, 1).1 as usize, top);
    // From full speed to a level, then one beyond the table: the defaults.
    pace(&node, 1, Pace::Level(2));
    assert_eq!(limit_mw(&node), watts(table[2].setting));
    assert_eq!(pace(&node, 1, Pace::Level(u16::MAX)), vec![]);
    assert_eq!(limit_mw(&node), H100_MAX_MW);
    pace(&node, 1, Pace::Saving);
    assert_eq!(limit_mw(&node), saving);

    // Only root and SlurmUser may ask; a job not running here is not running.
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &wattson_harness::test_name(module_path!(), "child_asks_levels"),
            "--ignored",
            "--nocapture",
        ])
        .env(CHILD_SOCKET, &node.socket)
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("ANSWER PermissionDenied"), "{text}");
    assert_eq!(refused(call(&node, Request::JobLevels { job: 99 })), ErrorCode::NotRunning);
    assert_eq!(
        refused(call(&node, Request::JobPace { job: 99, pace: Pace::Level(0) })),
        ErrorCode::NotRunning
    );

    // Held at a level when it ends: its GPU goes back to its defaults.
    pace(&node, 1, Pace::Level(0));
    node.end("1");
    assert_eq!(limit_mw(&node), H100_MAX_MW);
}

/// Jobs the models do not decide: a fixed share has two levels (its limit, within its bound,
/// and the defaults), a `perf` job or one sharing a GPU only the defaults; each pace sets the
/// share job's GPU until it shares it.
#[test]
fn a_fixed_share_has_its_limit_and_the_defaults_perf_and_sharing_only_the_defaults() {
    let mut node = Node::h100(2);
    node.start();
    for (job, gpu, policy) in [("1", "0", "min-energy"), ("2", "1", "perf")] {
        assert_ok(&node.wattson(&[
            "job", "begin", "--job", job, "--uid", "1000", "--user", "alice", "--gpus", gpu, "--energy",
            policy,
        ]));
    }
    // The site's min-energy share is 60% of 700 W.
    assert_eq!(limit_mw(&node), 420_000);
    let (table, level, bound) = levels(&node, 1);
    assert_eq!(
        table.iter().map(|l| (l.setting, l.cap_w, l.slowdown_hi)).collect::<Vec<_>>(),
        vec![(420.0, 420.0, 0.10), (700.0, 700.0, 0.0)]
    );
    assert_eq!((level, bound), (0, 0.10));
    assert_eq!(pace(&node, 1, Pace::Level(1)), vec![]);
    assert_eq!(limit_mw(&node), H100_MAX_MW);
    assert_eq!(levels(&node, 1).1, 1);
    pace(&node, 1, Pace::Level(0));
    assert_eq!(limit_mw(&node), 420_000);
    pace(&node, 1, Pace::Full);
    assert_eq!(limit_mw(&node), H100_MAX_MW);
    pace(&node, 1, Pace::Saving);
    assert_eq!(limit_mw(&node), 420_000);

    let (table, level, bound) = levels(&node, 2);
    assert_eq!(
        table,
        vec![Level { setting: 700.0, slowdown_hi: 0.0, energy_ratio: 1.0, power_w: 700.0, cap_w: 700.0 }]
    );
    assert_eq!((level, bound), (0, 0.0));
    assert_eq!(pace(&node, 2, Pace::Level(0)), vec![]);
    assert_eq!(node.sim.gpu_state(1).unwrap().power_limit_mw, H100_MAX_MW);

    // A min-energy job that comes to share job 1's GPU: both run at the defaults, whatever
    // level the controller asks, and job 1's table says so.
    assert_ok(&node.wattson(&[
        "job",
        "begin",
        "--job",
        "3",
        "--uid",
        "1001",
        "--user",
        "bob",
        "--gpus",
        "0",
        "--energy",
        "min-energy",
        "--shares-gpus",
    ]));
    assert_eq!(limit_mw(&node), H100_MAX_MW);
    let (table, level, bound) = levels(&node, 1);
    assert_eq!((table.len(), level, bound), (1, 0, 0.0), "{table:?}");
    assert_eq!(table[0].cap_w, 700.0);
    for job in [1, 3] {
        assert_eq!(pace(&node, job, Pace::Level(0)), vec![]);
        assert_eq!(limit_mw(&node), H100_MAX_MW);
        pace(&node, job, Pace::Saving);
        assert_eq!(limit_mw(&node), H100_MAX_MW);
    }
}
