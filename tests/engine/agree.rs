//! One decision path: the simulator's states replayed through `wattson-ctld`'s view builder.
//!
//! The simulator runs wattson's policy on the 195-job ITP trace over 10 nodes (jobs queue),
//! then on a small trace where sleeping nodes are booted for a queued job (the ITP replay has
//! hardly any such boot). At every instant the policy decides, the test writes what Slurm
//! would print for that state
//! (`scontrol -d -o show node`, `squeue` with the controller's format), parses it with the
//! controller's parsers, builds the controller's view (its memory carried from state to state,
//! as between loops) and asks the engine again. Every action must agree: power down and up,
//! the queue order, the running jobs raised, levels, the node weights, when to be asked again.
//! Slurm's text carries whole seconds, so every job runs at its top level (bounds of 0): every
//! event then falls on a whole second. What the controller cannot see (jobs' level tables, held
//! on their nodes) is left out of this comparison, and said so in docs/ctld.md.

use std::path::Path;

use chrono::{Local, TimeZone};
use wattson_ctld::Planner;
use wattson_ctld::slurm::{SQUEUE_FORMAT, parse_jobs, parse_nodes};
use wattson_engine::cluster::{self, Actions, ClusterPolicy, NodePower, Snapshot, TunedPolicy};
use wattson_sim::{Catalog, ClusterConfig, TraceFormat};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// Where simulated time 0 falls (Unix s).
const EPOCH: f64 = 1_790_000_000.0;

fn stamp(t: f64) -> String {
    Local.timestamp_opt((EPOCH + t) as i64, 0).unwrap().format("%Y-%m-%dT%H:%M:%S").to_string()
}

fn duration(s: f64) -> String {
    let s = s.round() as i64;
    format!("{}-{:02}:{:02}:{:02}", s / 86400, s % 86400 / 3600, s % 3600 / 60, s % 60)
}

/// What `scontrol -d -o show node` prints for the snapshot's nodes (all in partition `lab`).
fn node_text(s: &Snapshot) -> String {
    let mut out = String::new();
    for (i, n) in s.nodes.iter().enumerate() {
        let used = n.gpus - n.free_gpus;
        let base = match used {
            0 => "IDLE",
            u if u == n.gpus => "ALLOCATED",
            _ => "MIXED",
        };
        let flag = match n.power {
            NodePower::On => "",
            NodePower::Booting => "+POWERING_UP",
            NodePower::Off => "+POWERED_DOWN",
            NodePower::Busy => "+POWERING_DOWN",
        };
        out += &format!(
            "NodeName=n{i} CPUAlloc={} Gres=gpu:v100:{} GresUsed=gpu:v100:{used}(IDX:N/A) State={base}{flag} \
             Weight=1 Partitions=lab,wattson NodeAddr=n{i}\n",
            u32::from(used > 0),
            n.gpus
        );
    }
    out
}

/// What `squeue -h -t PD,CF,R -o SQUEUE_FORMAT` prints for the snapshot's jobs: queued and held
/// ones pending (held ones just submitted, no reason yet), running ones with their nodes.
fn job_text(s: &Snapshot, gpn: u32, nodes_of: &dyn Fn(u32) -> Vec<u32>) -> String {
    assert_eq!(SQUEUE_FORMAT.matches('%').count(), 13, "the rendering follows the controller's format");
    let shape = |gpus: u32| if gpus > gpn { (gpus.div_ceil(gpn), gpn) } else { (1, gpus) };
    let mut out = String::new();
    let pending = s
        .queued
        .iter()
        .map(|q| (q.job, q.eligible, "Resources"))
        .chain(s.held.iter().map(|h| (h.job, h.submit, "None")));
    for (job, submit, reason) in pending {
        let (n, per) = shape(job.gpus);
        out += &format!(
            "{}|PENDING|{reason}|{n}|gres:gpu:{per}|{}|0:00|{}|1||lab||0\n",
            job.id,
            stamp(submit),
            duration(job.work_s)
        );
    }
    for r in s.running {
        let (n, per) = shape(r.job.gpus);
        let state = if r.elapsed_s > 0.0 || r.progress > 0.0 { "RUNNING" } else { "CONFIGURING" };
        let nodes: Vec<String> = nodes_of(r.job.id).iter().map(|i| format!("n{i}")).collect();
        // Submitted `elapsed` before the start at the latest; the arrival forecast reads it.
        out += &format!(
            "{}|{state}|None|{n}|gres:gpu:{per}|{}|{}|{}|1|{}|lab||0\n",
            r.job.id,
            stamp(0.0),
            duration(r.elapsed_s),
            duration(r.job.work_s),
            nodes.join(",")
        );
    }
    out
}

/// Every knob of the engine's `Tuning` away from its default: the simulator reads these lines
/// as its `[wattson]` table and the controller as `[ctld]`.
const KNOBS: &str = "\
forecast_window_s = 1800.0
warm_break_evens = 1.5
keep_break_evens = 0.5
warm_shortfall = 0.25
pack = false
min_price_drop = 0.3
dvfs_min_free = 0.1
dvfs_horizon_s = 600.0
congestion_raise = 0.5
raise_after_runs = 0.5
count_node_base = false
type_aware = false
type_max_cost = 3.0
queue_order = \"response-ratio\"
size_exponent = 0.75
max_wait_cost = 0.1
max_lag_s = 1200.0
share_first = false
share_min_gain = 0.2
share_try_bound = 0.4
share_learn = true
";

/// A trace where a sleeping node must be booted ahead: on 4 nodes, each round two 8-GPU jobs
/// run 20,000 s, and a 32-GPU job that needs every node waits for them while the other two
/// nodes sleep; as their ends come within the warm horizon, those two are booted for it.
fn boot_ahead_trace(rounds: u32) -> String {
    let mut out = String::from(
        "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\n",
    );
    for k in 0..rounds {
        let t = 100_000 * k;
        for (i, (at, gpus, run)) in [(0, 8, 20_000), (0, 8, 20_000), (100, 32, 3_600)].into_iter().enumerate()
        {
            out += &format!("r{k}j{i},{},1000,inception3,{},64,{gpus},{run}\n", t + at, t + at + 2 * run);
        }
    }
    out
}

#[test]
fn the_controller_decides_as_the_simulator_on_the_same_states() {
    let data = Path::new(ROOT).join("data");
    let itp = std::fs::read_to_string(data.join("traces/itp-elasticflow/195job.csv")).unwrap();
    let (jobs, compared, mut seen) = replay(&itp, 10, false);
    assert_eq!(jobs, 195);
    // Time limits as the jobs' runs (the controller sees them so): the ends the warm set
    // looks ahead to are the true ones.
    let (jobs, more, also) = replay(&boot_ahead_trace(12), 4, true);
    assert_eq!(jobs, 36);
    // Not vacuous: every kind of decision was taken, and compared, many times.
    (0..5).for_each(|i| seen[i] += also[i]);
    eprintln!(
        "compared {compared} + {more} states; power_down/power_up/queue_order/raised/queue>1: {seen:?}"
    );
    assert!(compared > 400, "{compared}");
    assert!(seen.iter().all(|&n| n >= 10), "{seen:?}");
}

/// Replays `trace_text` on `nodes` nodes through the simulator and the controller, asserting
/// that every decision agrees: the jobs run, the states compared, and how many of them held
/// each kind of decision (power down, power up, queue order, raised jobs, a queue of two).
fn replay(trace_text: &str, nodes: u32, perfect_limits: bool) -> (usize, usize, [usize; 5]) {
    let text = std::fs::read_to_string(Path::new(ROOT).join("etc/sim/cluster.toml")).unwrap();
    let text = text
        .replace("nodes = 80", &format!("nodes = {nodes}"))
        .replace("[wattson]\n", &format!("[wattson]\n{KNOBS}"));
    let mut c = ClusterConfig::from_toml(&text, "cluster.toml").unwrap();
    c.hints.slowdown = vec![[0.0, 1.0]];
    c.hints.defer_fraction = 0.0;
    c.limits.perfect = perfect_limits;
    let data = Path::new(ROOT).join("data");
    let zeus = std::fs::read_to_string(data.join("dvfs/zeus-power-limit/summary_power_v100.csv")).unwrap();
    let cat = Catalog::from_zeus_csv(&zeus, "zeus").unwrap();
    let trace = wattson_sim::trace::parse(trace_text, "trace.csv", TraceFormat::Auto).unwrap();
    let jobs = wattson_sim::policies::prepare(&trace, &cat, &c, 1).unwrap();
    let models = wattson_sim::policies::level_tables(&cat).unwrap();
    let policy = TunedPolicy { kind: ClusterPolicy::Wattson, tuning: c.tuning(1800.0) };

    // The controller configured from the same knob lines, and as the simulated cluster: its
    // node model.
    // (Learning pairs needs the shards job_submit gives an opted-in job.)
    let ctld_text = format!("[ctld]\n{KNOBS}[policy]\nshards_per_gpu = 4\n");
    let mut config = wattson_config::Config::parse(&ctld_text, "wattson.toml").unwrap();
    config.ctld.node = c.node;
    config.ctld.gpu_idle_w = Some(c.groups[0].gpu_idle_w());
    let defaults = cluster::Tuning::default();
    for key in cluster::Tuning::KEYS {
        assert!(
            KNOBS.contains(&format!("\n{key} = ")) || KNOBS.starts_with(&format!("{key} = ")),
            "{key} is not set here"
        );
    }
    let fields = |t: &cluster::Tuning| serde_json::to_value(t).unwrap();
    for (key, value) in fields(&policy.tuning).as_object().unwrap() {
        assert_ne!(Some(value), fields(&defaults).get(key), "{key}: the simulator did not take it");
    }
    assert_eq!(
        wattson_ctld::snapshot::policy(&config.ctld),
        policy,
        "one policy, as each side configures it"
    );
    // Slurm's text carries whole seconds: an idle node's sleep at a fraction of its break-even
    // time would fall between them, so the replay keeps idle nodes the default way, both sides.
    c.wattson.tuning.keep_break_evens = defaults.keep_break_evens;
    config.ctld.tuning.keep_break_evens = defaults.keep_break_evens;
    let policy = TunedPolicy { kind: ClusterPolicy::Wattson, tuning: c.tuning(1800.0) };
    assert_eq!(wattson_ctld::snapshot::policy(&config.ctld), policy);
    let mut planner = Planner::new(config.clone());

    let gpn = c.gpus_per_node;
    let (mut compared, mut differ) = (0usize, Vec::new());
    let mut seen = [0usize; 5];
    let mut observe = |s: &Snapshot, sim: &Actions, nodes_of: &dyn Fn(u32) -> Vec<u32>| {
        assert_eq!(s.now.fract(), 0.0, "every event on a whole second");
        let nodes = parse_nodes(&node_text(s)).unwrap();
        let slurm_jobs = parse_jobs(&job_text(s, gpn, nodes_of)).unwrap();
        let (view, ctld) = planner.decide(&nodes, &slurm_jobs, &Default::default(), EPOCH + s.now);
        // Just-submitted jobs are in Slurm's queue at once; the simulator holds them for the
        // policy's release first: compared once released.
        if !s.held.is_empty() {
            return;
        }
        compared += 1;
        let cs = view.snapshot(EPOCH + s.now, &config);
        let weights =
            (cluster::placement::node_weights(&policy, s), cluster::placement::node_weights(&policy, &cs));
        let mut ctld_wake = ctld.wake_at.map(|w| w - EPOCH);
        if let (Some(w), Some(sw)) = (ctld_wake, sim.wake_at) {
            // Unix seconds and back: equal to a rounding.
            if (w - sw).abs() < 1e-6 {
                ctld_wake = Some(sw);
            }
        }
        // Levels are compared apart (both must be empty: every job at its top level); the
        // controller releases nothing (Slurm holds no job for it).
        let a = Actions { levels: Vec::new(), ..sim.clone() };
        let b = Actions { levels: Vec::new(), wake_at: ctld_wake, ..ctld.clone() };
        for (i, k) in [&a.power_down, &a.power_up, &a.queue_order, &a.raised].iter().enumerate() {
            seen[i] += usize::from(!k.is_empty());
        }
        seen[4] += usize::from(s.queued.len() > 1);
        if a != b || weights.0 != weights.1 || !sim.levels.is_empty() || !ctld.levels.is_empty() {
            differ.push(format!(
                "t={} sim {a:?} {:?} ctld {b:?} {:?} weights {:?}",
                s.now, sim.levels, ctld.levels, weights
            ));
        }
    };
    let run = wattson_sim::simulate::simulate_observed(&c, &cat, &models, &jobs, policy, &mut observe);
    assert!(
        differ.is_empty(),
        "{} of {compared} states differ; first: {:#?}",
        differ.len(),
        &differ[..differ.len().min(5)]
    );
    (run.jobs.len(), compared, seen)
}

#[test]
fn the_controller_and_the_simulator_ship_the_same_defaults() {
    let shipped = std::fs::read_to_string(Path::new(ROOT).join("etc/sim/cluster.toml")).unwrap();
    let sim = ClusterConfig::from_toml(&shipped, "cluster.toml").unwrap().wattson.tuning;
    let ctld = wattson_config::Config::default().ctld.tuning;
    assert_eq!(sim, cluster::Tuning::default(), "the simulator's shipped cluster file sets no knob");
    assert_eq!(ctld, sim, "wattson ctld's defaults are the simulator's");
    let example = std::fs::read_to_string(Path::new(ROOT).join("etc/wattson.toml")).unwrap();
    let example = wattson_config::Config::parse(&example, "etc/wattson.toml").unwrap().ctld.tuning;
    assert_eq!(example, sim, "etc/wattson.toml shows the shipped values");
}
