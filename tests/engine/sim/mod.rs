//! `wattson sim` checks on real data: ElasticFlow's ITP trace (microsoft/elasticflow-traces @
//! 277ed24d, MIT) and Zeus's V100 measurements (ml-energy/zeus @ 75a8b939, Apache-2.0), read
//! from `data/`. A missing file fails the test. Debug-mode fast: the 195-job trace and
//! a 1,500-job prefix of cluster04; the full trace runs in `benches/sim.rs`.
//!
//! Every check here recomputes its quantity from the simulator's raw per-job and per-node
//! records, independently of the simulator's own energy meter and bookkeeping.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use wattson_sim::power::NodeState;
use wattson_sim::{Catalog, ClusterConfig, ClusterPolicy, Outcome, TraceFormat};

mod budget;
mod defer;
mod limits;
mod share;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn data(rel: &str) -> PathBuf {
    let p = Path::new(ROOT).join("data").join(rel);
    assert!(p.exists(), "data file missing: {} (the simulator tests need data/)", p.display());
    p
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap_or_else(|e| panic!("cannot read {}: {e}", p.display()))
}

fn inputs() -> (ClusterConfig, Catalog) {
    let cpath = Path::new(ROOT).join("etc/sim/cluster.toml");
    let c = ClusterConfig::from_toml(&read(&cpath), "etc/sim/cluster.toml").expect("cluster file parses");
    let z = data("dvfs/zeus-power-limit/summary_power_v100.csv");
    let cat = Catalog::from_zeus_csv(&read(&z), "zeus").expect("zeus parses");
    (c, cat)
}

fn run(trace: &str, limit: usize, seed: u64) -> (ClusterConfig, Catalog, Outcome) {
    let (c, cat) = inputs();
    let mut t =
        wattson_sim::trace::parse(&read(&data(trace)), trace, TraceFormat::Auto).expect("trace parses");
    t.truncate(limit);
    let o =
        wattson_sim::run(&c, &cat, &t, trace, &wattson_sim::policies::ALL, seed).expect("simulation runs");
    (c, cat, o)
}

fn rel_close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * a.abs().max(b.abs()).max(1.0)
}

/// Energy parts recomputed from job records and node-state stretches.
fn check_conservation(c: &ClusterConfig, o: &Outcome) {
    // Each node's GPU idle draw, from its group's GPU type.
    let idle_w: Vec<f64> =
        c.groups.iter().flat_map(|g| std::iter::repeat_n(g.gpu_idle_w(), g.nodes as usize)).collect();
    let gpn = f64::from(c.gpus_per_node);
    for r in &o.runs {
        let name = r.policy.name();
        let mut busy = 0.0;
        // Busy GPU-seconds per node.
        let mut busy_gpu_s = vec![0.0; idle_w.len()];
        for (k, (j, x)) in o.jobs.iter().zip(&r.jobs).enumerate() {
            assert!(x.start.is_finite() && x.end.is_finite(), "{name}: job {} never ran", j.id);
            assert!(
                x.eligible >= j.submit - 1e-9 && x.alloc >= x.eligible - 1e-9 && x.start >= x.alloc - 1e-9,
                "{name}: job {} starts early",
                j.id
            );
            let gpus: u32 = x.shares.iter().map(|s| s.1.count_ones()).sum();
            assert_eq!(gpus, j.gpus, "{name}: job {} got {gpus} GPUs", j.id);
            busy += f64::from(j.gpus) * x.gpu_w * (x.end - x.start);
            for &(n, m) in &x.shares {
                busy_gpu_s[n as usize] += f64::from(m.count_ones()) * (x.end - x.start);
            }
            // A GPU two jobs shared was busy once: each pair's stretch is taken off once, on
            // each GPU they shared (all of the job's).
            for &(other, from, to) in &x.partners {
                assert!(
                    to >= from && from >= x.start - 1e-9 && to <= x.end + 1e-9,
                    "{name}: job {} shared outside its run",
                    j.id
                );
                if other as usize > k {
                    for &(n, m) in &x.shares {
                        busy_gpu_s[n as usize] -= f64::from(m.count_ones()) * (to - from);
                    }
                }
            }
        }
        let (mut on_s, mut off_s, mut down_s, mut boot_s) = (0.0, 0.0, 0.0, 0.0);
        let mut idle_j = 0.0;
        for i in &r.meter.intervals {
            let d = i.to - i.from;
            assert!(d >= -1e-9, "{name}: negative stretch");
            match i.state {
                NodeState::On => {
                    on_s += d;
                    idle_j += d * gpn * idle_w[i.node as usize];
                }
                NodeState::Off | NodeState::OffWait => off_s += d,
                NodeState::ShuttingDown => down_s += d,
                NodeState::Booting => boot_s += d,
            }
        }
        idle_j -= busy_gpu_s.iter().zip(&idle_w).map(|(s, w)| s * w).sum::<f64>();
        let span = (r.t_end - r.t0) * f64::from(c.nodes());
        assert!(
            rel_close(on_s + off_s + down_s + boot_s, span, 1e-9),
            "{name}: node stretches do not tile time"
        );
        let p = r.meter.parts;
        assert!(rel_close(p.gpu_busy_j, busy, 1e-9), "{name}: busy {} vs {busy}", p.gpu_busy_j);
        assert!(rel_close(p.node_base_j, on_s * c.node.base_w, 1e-9), "{name}: base");
        assert!(rel_close(p.gpu_idle_j, idle_j, 1e-9), "{name}: idle GPUs {} vs {idle_j}", p.gpu_idle_j);
        assert!(rel_close(p.off_j, off_s * c.node.off_w, 1e-9), "{name}: off");
        let trans = down_s * c.node.shutdown_w + boot_s * c.node.boot_w;
        assert!(rel_close(p.transition_j, trans, 1e-9), "{name}: transitions");
        let s = o.report.summaries.iter().find(|s| s.policy == name).unwrap();
        let parts_kwh = s.gpu_busy_kwh + s.gpu_idle_kwh + s.node_base_kwh + s.off_kwh + s.transition_kwh;
        assert!(rel_close(parts_kwh, s.energy_kwh, 1e-12), "{name}: parts do not add up");
        assert!(
            rel_close(s.timeline_kwh, s.energy_kwh, 1e-9),
            "{name}: timeline {} vs parts {}",
            s.timeline_kwh,
            s.energy_kwh
        );
    }
}

/// A job's hold on one GPU: (allocated, ended, job index).
type Held = (f64, f64, usize);

/// No GPU in two jobs at once but recorded partners, and jobs run only on powered-on nodes:
/// an interval sweep.
fn check_no_double_booking(c: &ClusterConfig, o: &Outcome) {
    for r in &o.runs {
        let name = r.policy.name();
        let mut per_gpu: BTreeMap<(u32, u32), Vec<Held>> = BTreeMap::new();
        for (k, x) in r.jobs.iter().enumerate() {
            for &(n, mask) in &x.shares {
                for g in 0..c.gpus_per_node {
                    if mask & (1u64 << g) != 0 {
                        per_gpu.entry((n, g)).or_default().push((x.alloc, x.end, k));
                    }
                }
            }
        }
        // Two jobs overlap on a GPU only as partners over exactly that stretch.
        let partners = |a: usize, b: usize, from: f64, to: f64| {
            r.jobs[a].partners.iter().any(|p| p.0 as usize == b && p.1 <= from + 1e-9 && to <= p.2 + 1e-9)
        };
        for (gpu, mut v) in per_gpu {
            v.sort_by(|a, b| a.0.total_cmp(&b.0));
            for (i, a) in v.iter().enumerate() {
                for b in v[i + 1..].iter().take_while(|b| b.0 < a.1 - 1e-9) {
                    assert!(
                        partners(a.2, b.2, b.0, a.1.min(b.1)),
                        "{name}: GPU {gpu:?} double-booked at {}",
                        b.0
                    );
                }
            }
        }
        let mut on: BTreeMap<u32, Vec<(f64, f64)>> = BTreeMap::new();
        for i in r.meter.intervals.iter().filter(|i| i.state == NodeState::On) {
            on.entry(i.node).or_default().push((i.from, i.to));
        }
        for x in &r.jobs {
            for &(n, _) in &x.shares {
                let ok = on
                    .get(&n)
                    .is_some_and(|v| v.iter().any(|&(a, b)| a <= x.start + 1e-9 && x.end <= b + 1e-9));
                assert!(ok, "{name}: a job ran on node {n} while it was not on ({}..{})", x.start, x.end);
            }
        }
    }
}

fn check_sanity(o: &Outcome) {
    let by = |p: ClusterPolicy| o.report.summary(p).unwrap();
    let floor = by(ClusterPolicy::Floor);
    for s in &o.report.summaries {
        assert!(floor.energy_kwh <= s.energy_kwh * (1.0 + 1e-12), "floor above {}", s.policy);
    }
    // Every policy that keeps each job within its bound spends at least the floor's GPU energy,
    // wattson (which changes a job's level mid-run) included.
    for p in [
        ClusterPolicy::SlurmDefault,
        ClusterPolicy::SlurmPowersave,
        ClusterPolicy::PowersaveDvfs,
        ClusterPolicy::Wattson,
    ] {
        assert!(
            floor.gpu_busy_kwh <= by(p).gpu_busy_kwh * (1.0 + 1e-12),
            "floor GPU energy {} above {p:?}'s {}",
            floor.gpu_busy_kwh,
            by(p).gpu_busy_kwh
        );
    }
    assert_eq!(by(ClusterPolicy::SlurmDefault).power_state_changes, 0);
    assert_eq!(by(ClusterPolicy::ZeusPerJob).power_state_changes, 0);
    assert!(by(ClusterPolicy::SlurmPowersave).power_state_changes > 0);
    assert!(by(ClusterPolicy::PowersaveDvfs).power_state_changes > 0);
    for p in [ClusterPolicy::Wattson, ClusterPolicy::PowersaveDvfs] {
        let w = o.runs.iter().find(|r| r.policy == p).unwrap();
        for (j, x) in o.jobs.iter().zip(&w.jobs) {
            assert!(
                x.slowdown <= j.bound + 1e-12,
                "{}: job {} slowed {} > bound {}",
                p.name(),
                j.id,
                x.slowdown,
                j.bound
            );
        }
    }
    for p in [ClusterPolicy::SlurmDefault, ClusterPolicy::SlurmPowersave] {
        let d = o.runs.iter().find(|r| r.policy == p).unwrap();
        assert!(
            d.jobs.iter().all(|x| x.slowdown == 0.0 && x.level_changes == 0),
            "{p:?} runs at the max limit"
        );
    }
    // The idle-timer rows report their least-energy SuspendTime among the swept values.
    for p in [ClusterPolicy::SlurmPowersave, ClusterPolicy::PowersaveDvfs] {
        let pts: Vec<_> = o.report.sweep.iter().filter(|x| x.policy == p.name()).collect();
        assert_eq!(pts.len(), 4, "{p:?} sweeps SuspendTime 300/600/1800/3600");
        let least = pts.iter().map(|x| x.energy_kwh).fold(f64::INFINITY, f64::min);
        assert_eq!(by(p).energy_kwh, least);
    }
}

#[test]
fn small_trace_conserves_energy_jobs_and_gpus() {
    let (c, _, o) = run("traces/itp-elasticflow/195job.csv", usize::MAX, 1);
    assert_eq!(o.jobs.len(), 195);
    check_conservation(&c, &o);
    check_no_double_booking(&c, &o);
    check_sanity(&o);
}

#[test]
fn cluster04_prefix_conserves_energy_jobs_and_gpus() {
    let (c, _, o) = run("traces/itp-elasticflow/cluster04.csv", 1500, 3);
    assert_eq!(o.jobs.len(), 1500);
    check_conservation(&c, &o);
    check_no_double_booking(&c, &o);
    check_sanity(&o);
}

/// The heterogeneous cluster file (V100, A40 and P100 groups) and its aligned catalog.
fn hetero_inputs() -> (ClusterConfig, Catalog) {
    let cpath = Path::new(ROOT).join("etc/sim/cluster-hetero.toml");
    let c = ClusterConfig::from_toml(&read(&cpath), "cluster-hetero.toml").expect("hetero file parses");
    // Each group's Zeus file, relative to the cluster file as `wattson sim` reads it.
    let texts: Vec<String> = c.groups.iter().map(|g| read(&cpath.with_file_name(&g.zeus_csv))).collect();
    let files: Vec<(&str, &str)> =
        texts.iter().zip(&c.groups).map(|(t, g)| (t.as_str(), g.gpu.as_str())).collect();
    let cat = Catalog::from_zeus_csvs(&files).expect("zeus files parse");
    (c, cat)
}

/// Energy-aware placement over GPU types against the same policy placing in configuration
/// order (Slurm's node order): less energy at no worse mean queueing wait (1%), every bound
/// measured and held, each job on one type, and the meter's parts recomputed per node type.
/// Other traces and seeds: `cargo run --release -p wattson-sim --example hetero`.
#[test]
fn hetero_cluster_placement_by_energy_beats_type_oblivious() {
    let (base, cat) = hetero_inputs();
    assert_eq!(cat.types.len(), 3);
    for (trace, seed) in [("cluster01.csv", 1), ("cluster03.csv", 2), ("cluster06.csv", 1)] {
        let t = wattson_sim::trace::parse(
            &read(&data(&format!("traces/itp-elasticflow/{trace}"))),
            trace,
            TraceFormat::Auto,
        )
        .expect("trace parses");
        let mut got = Vec::new();
        for aware in [true, false] {
            let mut c = base.clone();
            c.wattson.tuning.type_aware = aware;
            let o = wattson_sim::run(
                &c,
                &cat,
                &t,
                trace,
                &[ClusterPolicy::SlurmPowersave, ClusterPolicy::Wattson],
                seed,
            )
            .unwrap();
            check_conservation(&c, &o);
            check_no_double_booking(&c, &o);
            let groups = c.node_groups();
            let run = o.runs.iter().find(|r| r.policy == ClusterPolicy::Wattson).unwrap();
            for (j, x) in o.jobs.iter().zip(&run.jobs) {
                let g = groups[x.shares[0].0 as usize];
                assert!(
                    x.shares.iter().all(|s| groups[s.0 as usize] == g),
                    "{trace}: job {} spans GPU types",
                    j.id
                );
                assert!(
                    x.slowdown <= j.bound + 1e-9,
                    "{trace}: job {} slowed {} > {}",
                    j.id,
                    x.slowdown,
                    j.bound
                );
            }
            let s = o.report.summaries.iter().find(|s| s.policy == "wattson").unwrap();
            got.push((s.energy_kwh, s.queue_wait_mean_s));
        }
        let ((e_aware, w_aware), (e_blind, w_blind)) = (got[0], got[1]);
        assert!(e_aware < e_blind, "{trace}: type-aware {e_aware} kWh vs oblivious {e_blind} kWh");
        assert!(w_aware <= 1.01 * w_blind, "{trace}: mean queue wait {w_aware} s vs oblivious {w_blind} s");
    }
}

#[test]
fn same_inputs_give_byte_identical_outputs_and_another_seed_differs() {
    let render = |o: &Outcome| {
        let r = &o.report;
        [
            wattson_sim::metrics::to_csv(r),
            wattson_sim::metrics::to_json(r),
            wattson_sim::metrics::power_csv(r),
            wattson_sim::plot::energy_vs_jct(r),
            wattson_sim::plot::energy_vs_wait(r),
            wattson_sim::plot::power_over_time(r),
        ]
    };
    let a = render(&run("traces/itp-elasticflow/cluster04.csv", 800, 5).2);
    let b = render(&run("traces/itp-elasticflow/cluster04.csv", 800, 5).2);
    assert_eq!(a, b);
    let c = render(&run("traces/itp-elasticflow/cluster04.csv", 800, 6).2);
    assert_ne!(a[0], c[0], "the seed changes the hints, so wattson's results");
}

fn wattson_bin() -> Command {
    let mut c = Command::new(wattson_harness::programs::program("wattson"));
    c.current_dir(ROOT);
    c
}

#[test]
fn cli_writes_identical_files_twice() {
    let trace = data("traces/itp-elasticflow/195job.csv");
    let dirs = [tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap()];
    for d in &dirs {
        let out = wattson_bin()
            .args(["sim", "--trace"])
            .arg(&trace)
            .args([
                "--cluster",
                "etc/sim/cluster.toml",
                "--policies",
                "all",
                "--seed",
                "9",
                "--sweep",
                "--out",
            ])
            .arg(d.path())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout);
        for p in wattson_sim::policies::ALL {
            // The shipped cluster file sets no budget and opts no job in to sharing, so neither
            // the budget reference nor the shard reference runs.
            let want = p != ClusterPolicy::UniformCap && p != ClusterPolicy::SlurmShards;
            assert_eq!(stdout.contains(p.name()), want, "table and {}", p.name());
        }
    }
    for f in [
        "summary.csv",
        "summary.json",
        "power_hourly.csv",
        "energy_vs_jct.svg",
        "energy_vs_wait.svg",
        "energy_vs_imposed_wait.svg",
        "power_over_time.svg",
    ] {
        let a = std::fs::read(dirs[0].path().join(f)).unwrap();
        let b = std::fs::read(dirs[1].path().join(f)).unwrap();
        assert!(!a.is_empty() && a == b, "{f} differs between runs");
    }
}

#[test]
fn cli_bad_input_is_a_clear_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let bad_trace = dir.path().join("t.csv");
    std::fs::write(&bad_trace, "submit,gpus,duration\n0,1,100\n10,two,100\n").unwrap();
    let bad_cluster = dir.path().join("c.toml");
    std::fs::write(
        &bad_cluster,
        read(&Path::new(ROOT).join("etc/sim/cluster.toml")).replace("nodes = 80", "nodes = 0"),
    )
    .unwrap();
    let bad_limit = dir.path().join("l.csv");
    std::fs::write(&bad_limit, "submit,gpus,duration,time_limit\n0,1,100,3600\n10,1,100,1h\n").unwrap();
    let huge = dir.path().join("huge.csv");
    std::fs::write(&huge, "submit,gpus,duration\n0,1000,100\n").unwrap();
    let cases: Vec<(Vec<String>, &str)> = vec![
        (vec!["--trace".into(), bad_trace.display().to_string()], "t.csv:3: gpus = \"two\" is not a number"),
        (vec!["--trace".into(), "/nonexistent.csv".into()], "/nonexistent.csv: cannot read"),
        (
            vec!["--trace".into(), bad_limit.display().to_string()],
            "l.csv:3: time_limit = \"1h\": allowed a number of seconds above 0",
        ),
        (
            vec![
                "--trace".into(),
                bad_trace.display().to_string(),
                "--cluster".into(),
                bad_cluster.display().to_string(),
            ],
            "c.toml: nodes = 0",
        ),
        (vec!["--trace".into(), huge.display().to_string()], "asks for 1000 GPUs; the cluster has 640"),
        (
            vec![
                "--trace".into(),
                huge.display().to_string(),
                "--cluster".into(),
                Path::new(ROOT).join("etc/sim/cluster-hetero.toml").display().to_string(),
            ],
            "asks for 1000 GPUs; the largest group of one GPU type has 320",
        ),
        (
            vec![
                "--trace".into(),
                huge.display().to_string(),
                "--cluster".into(),
                Path::new(ROOT).join("etc/sim/cluster-hetero.toml").display().to_string(),
                "--zeus".into(),
                "z.csv".into(),
            ],
            "--zeus replaces one group's zeus_csv",
        ),
        (
            vec!["--trace".into(), bad_trace.display().to_string(), "--policies".into(), "fast".into()],
            "unknown policy",
        ),
    ];
    for (args, want) in cases {
        let out = wattson_bin().arg("sim").args(&args).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{args:?} succeeded");
        assert!(err.contains(want) && err.starts_with("wattson: error: "), "{args:?}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

#[test]
fn generic_trace_replays() {
    let (c, cat) = inputs();
    let text = "submit,gpus,duration,tag\n0,8,3600,bert\n10,16,7200,resnet50\n20,1,600,mystery\n";
    let t = wattson_sim::trace::parse(text, "g.csv", TraceFormat::Auto).unwrap();
    let o = wattson_sim::run(&c, &cat, &t, "g.csv", &wattson_sim::policies::ALL, 1).unwrap();
    check_conservation(&c, &o);
    check_no_double_booking(&c, &o);
    let d = o.runs.iter().find(|r| r.policy == ClusterPolicy::SlurmDefault).unwrap();
    // An empty cluster starts every job at submission and runs it for its trace duration.
    for (j, x) in o.jobs.iter().zip(&d.jobs) {
        assert_eq!(x.start, j.submit);
        assert_eq!(x.end - x.start, j.duration);
    }
}

/// The earlier wait targets (docs/sim-history.md, under the perfect-knowledge what-if) on the full cluster04 trace (15,802 jobs) at 123 nodes (~50% load) and
/// 80 nodes (~77% load), seed 1, shipped defaults, every target: no bound broken, least energy
/// but the floor, capture ≥ 90%, mean and p99 queueing wait within 1% of slurm-powersave's.
/// These were set, and hold, under the perfect-knowledge what-if (every policy knows each run
/// time; wattson reorders the queue, the references keep FIFO), which this test keeps; the
/// honest comparison is `cluster04_under_time_limits_and_one_order`. They predate the wait-cost
/// bound and the lag cap, and are kept without them (`max_wait_cost=100 max_lag_s=10000000`),
/// and with the knobs wattson shipped then (`queue_order=response-ratio congestion_raise=0.5`).
/// All five seeds: `cargo run --release -p wattson-sim --example brain -- cluster04.csv 80,123 5 perfect=1 max_wait_cost=100 max_lag_s=10000000 queue_order=response-ratio congestion_raise=0.5`.
#[test]
fn cluster04_wattson_beats_every_reference_but_the_floor() {
    let (mut base, cat) = inputs();
    base.limits.perfect = true;
    for kv in
        ["max_wait_cost=100", "max_lag_s=10000000", "queue_order=response-ratio", "congestion_raise=0.5"]
    {
        wattson_sim::overrides::apply(&mut base, kv).unwrap();
    }
    let t = wattson_sim::trace::parse(
        &read(&data("traces/itp-elasticflow/cluster04.csv")),
        "cluster04.csv",
        TraceFormat::Auto,
    )
    .expect("trace parses");
    for nodes in [123, 80] {
        let mut c = base.clone();
        c.groups[0].nodes = nodes;
        let o = wattson_sim::run(&c, &cat, &t, "cluster04.csv", &wattson_sim::policies::ALL, 1).unwrap();
        let by = |p: ClusterPolicy| o.report.summary(p).unwrap();
        let w = by(ClusterPolicy::Wattson);
        // Measured bound violations, recomputed from the job records.
        let run = o.runs.iter().find(|r| r.policy == ClusterPolicy::Wattson).unwrap();
        let over = o
            .jobs
            .iter()
            .zip(&run.jobs)
            .filter(|(j, x)| (x.end - x.start) / j.duration - 1.0 > j.bound + 1e-9);
        assert_eq!(over.count(), 0, "{nodes} nodes: wattson broke a slowdown bound");
        for s in &o.report.summaries {
            if s.policy != w.policy && s.policy != ClusterPolicy::Floor.name() {
                assert!(
                    w.energy_kwh < s.energy_kwh,
                    "{nodes} nodes: {} {} <= wattson {}",
                    s.policy,
                    s.energy_kwh,
                    w.energy_kwh
                );
            }
        }
        let (d, f) = (by(ClusterPolicy::SlurmDefault).energy_kwh, by(ClusterPolicy::Floor).energy_kwh);
        let capture = (d - w.energy_kwh) / (d - f);
        assert!(capture >= 0.90, "{nodes} nodes: capture {capture}");
        let ps = by(ClusterPolicy::SlurmPowersave);
        for (what, ours, theirs) in [
            ("mean", w.queue_wait_mean_s, ps.queue_wait_mean_s),
            ("p99", w.queue_wait_p99_s, ps.queue_wait_p99_s),
        ] {
            assert!(
                ours <= theirs * 1.01,
                "{nodes} nodes: {what} queueing wait {ours} s vs slurm-powersave {theirs} s"
            );
        }
    }
}
