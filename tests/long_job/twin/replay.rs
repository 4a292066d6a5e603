//! One replay of the twin's slice through a real Slurm: the lab, its daemons, the clock that
//! submits each job at its compressed time, the hand that carries out Slurm's power actions
//! after the model's boot and shutdown delays, and what was observed.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use wattson_harness::node as common;
use wattson_harness::slurm_lab::{self, LabNode, LabOptions, SlurmLab};
use wattson_sim::power::EnergyParts;
use wattson_sim::{Catalog, ClusterConfig, SimJob};

use super::{GPUS_PER_NODE, LAB_TICK_S, NODES};
use wattson_harness::ctld::{Ctld, run_ctld};

/// Who powers idle nodes down.
#[derive(Debug, Clone, Copy)]
pub(super) enum Policy {
    /// Slurm's own idle timer (`SuspendTime`, lab seconds).
    Timer { suspend_time_s: u32 },
    /// `wattson ctld`, with Slurm's timer off.
    Ctld,
}

/// One job as the lab saw it (seconds from the replay's start).
#[derive(Debug, Clone, Copy)]
struct Ran {
    /// Due (its submission time in the trace).
    submit: f64,
    /// The job's body began.
    start: f64,
    /// The job's body ended.
    end: f64,
}

/// A power action Slurm asked for, when the hand saw it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Power {
    Off(f64),
    On(f64),
}

/// What one replay observed.
pub(super) struct Observed {
    /// Each job, in trace order.
    jobs: Vec<Ran>,
    power: Vec<Vec<Power>>,
    /// Energy by part: busy GPUs from wattson's records, the rest from the node power model
    /// over the observed power states.
    pub parts: EnergyParts,
    /// From the first submission to the last job's end, s.
    pub makespan_s: f64,
    /// The lab's start latencies, measured by probe jobs before the replay.
    pub calibration: Calibration,
}

impl Observed {
    fn waits(&self) -> Vec<f64> {
        let mut w = self.wait_by_job();
        w.sort_by(f64::total_cmp);
        w
    }

    /// Mean wait from submission, s.
    pub fn wait_mean_s(&self) -> f64 {
        let w = self.waits();
        w.iter().sum::<f64>() / w.len() as f64
    }

    /// 99th percentile of the waits (nearest rank), s.
    pub fn wait_p99_s(&self) -> f64 {
        let w = self.waits();
        w[((0.99 * w.len() as f64).ceil() as usize).clamp(1, w.len()) - 1]
    }

    /// Each job's wait, in trace order, s.
    pub fn wait_by_job(&self) -> Vec<f64> {
        self.jobs.iter().map(|j| j.start - j.submit).collect()
    }

    /// The power actions the hand carried out, in time order: (s, whether a boot).
    pub fn power_actions(&self) -> Vec<(f64, bool)> {
        let mut all: Vec<(f64, bool)> = self
            .power
            .iter()
            .flatten()
            .map(|p| match *p {
                Power::Off(t) => (t, false),
                Power::On(t) => (t, true),
            })
            .collect();
        all.sort_by(|a, b| a.0.total_cmp(&b.0));
        all
    }

    /// Power-downs and boots started.
    pub fn power_cycles(&self) -> u64 {
        self.power.iter().map(|p| p.len() as u64).sum()
    }
}

fn now_s() -> f64 {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs_f64()
}

/// The fake GPUs of a node: V100s with the measured power-limit range of the Zeus curves and
/// the model's idle draw.
fn gpus(catalog: &Catalog, idle_w: f64) -> fake_nvml::Config {
    let limits = &catalog.types[0][0].limits;
    let (lo, hi) =
        (limits.iter().copied().fold(f64::INFINITY, f64::min), limits.iter().copied().fold(0.0, f64::max));
    let mut cfg = fake_nvml::Config::uniform("V100", GPUS_PER_NODE as usize);
    for g in &mut cfg.gpu {
        g.power_limit_min_w = Some(lo);
        g.power_limit_max_w = Some(hi);
        g.power_limit_default_w = Some(hi);
        g.idle_w = Some(idle_w);
    }
    cfg
}

/// `fake-gpu-job`'s curve argument for a workload: seconds per unit scaled so that a unit takes
/// one second at the top limit (a job's work is its run time at full speed).
fn curve_arg(catalog: &Catalog, workload: usize) -> String {
    let w = &catalog.types[0][workload];
    let top = w.time[w.max_idx()];
    (0..w.limits.len())
        .map(|i| format!("{}:{}:{}", w.limits[i], w.time[i] / top, w.power[i]))
        .collect::<Vec<_>>()
        .join(",")
}

/// slurm.conf lines: power saving with the programs ctld's tests use, the model's timeouts,
/// and backfill and the power-save thread every second.
fn slurm_conf(policy: Policy, cluster: &ClusterConfig, prolog: &Path, epilog: &Path) -> String {
    let program = |name: &str| wattson_harness::programs::program(name).display().to_string();
    let suspend_time = match policy {
        Policy::Timer { suspend_time_s } => suspend_time_s.to_string(),
        Policy::Ctld => "INFINITE".to_string(),
    };
    let mut conf = format!(
        "SuspendTime={suspend_time}\nSuspendProgram={}\nResumeProgram={}\nResumeFailProgram={}\n\
         PrologSlurmctld={}\nSuspendTimeout={}\nResumeTimeout={}\n\
         SlurmctldParameters=power_save_interval={LAB_TICK_S}\n\
         SchedulerParameters=batch_sched_delay=0,bf_interval=1\n\
         Prolog={}\nEpilog={}\n",
        program("wattson-suspend"),
        program("wattson-resume"),
        program("wattson-resume-fail"),
        program("wattson-ctld-prolog"),
        cluster.slurm.suspend_timeout_s.round(),
        cluster.slurm.resume_timeout_s.round(),
        prolog.display(),
        epilog.display(),
    );
    if let Policy::Ctld = policy {
        // Slurm runs its power-save machinery only where some node may be suspended.
        conf.push_str("PartitionName=wattson Nodes=ALL Hidden=YES State=INACTIVE SuspendTime=31536000\n");
    }
    conf
}

/// Job `k`'s batch script: its GPUs run its workload's curve until its work is done; its
/// start, end and node go to `stamps/<k>`.
fn job_script(
    k: usize,
    j: &SimJob,
    catalog: &Catalog,
    fake_job: &Path,
    drivers: &str,
    stamps: &Path,
) -> String {
    format!(
        "#!/bin/bash\ntrap '' TERM\ns=$(date +%s.%N)\n{drivers}{fake} --dir \"$d\" --gpus \"${{CUDA_VISIBLE_DEVICES:-$SLURM_JOB_GPUS}}\" --work {work} --curve {curve}\n\
         echo \"$s $(date +%s.%N) $SLURMD_NODENAME\" >{stamps}/{k}.tmp && mv {stamps}/{k}.tmp {stamps}/{k}\n",
        fake = fake_job.display(),
        work = j.duration,
        curve = curve_arg(catalog, j.workload),
        stamps = stamps.display(),
    )
}

/// A `case` on the node name that sets `var` to each node's value.
fn by_node(var: &str, values: &[(String, String)]) -> String {
    let mut s = String::from("case \"$SLURMD_NODENAME\" in\n");
    for (node, value) in values {
        let _ = writeln!(s, "  {node}) {var}={value:?} ;;");
    }
    s + "esac\n"
}

/// Runs `jobs` (the simulator's prepared jobs, submission order) through a real Slurm under
/// `policy`; returns what it observed.
pub(super) fn run(jobs: &[SimJob], catalog: &Catalog, cluster: &ClusterConfig, policy: Policy) -> Observed {
    let names: Vec<String> = (1..=NODES).map(|i| format!("n{i}")).collect();
    let idle_w = cluster.groups[0].gpu_idle_w();
    // wattsond on every node runs each job at full speed (every job's policy is perf, as in
    // the simulator), and listens for the controller on its node's address.
    let mut daemons: Vec<common::Node> = names
        .iter()
        .map(|_| common::Node::with_sections(gpus(catalog, idle_w), "1s", "default = \"perf\"\n", ""))
        .collect();
    let work = tempfile::tempdir().unwrap();
    let stamps = work.path().join("stamps");
    std::fs::create_dir(&stamps).unwrap();
    std::fs::set_permissions(work.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    // The lab's munged socket, once the lab runs (the daemons start before it).
    let munge = work.path().join("munge.sock");
    let port = slurm_lab::free_port();
    let nodes: Vec<LabNode> = names
        .iter()
        .enumerate()
        .map(|(i, n)| LabNode {
            addr: format!("127.0.0.{}", i + 2),
            cpus: GPUS_PER_NODE,
            ..LabNode::new(n, GPUS_PER_NODE, "v100")
        })
        .collect();
    std::thread::scope(|s| {
        for (d, n) in daemons.iter_mut().zip(&nodes) {
            let munge = &munge;
            s.spawn(move || {
                let text = std::fs::read_to_string(&d.config)
                    .unwrap()
                    .replace("node_name = \"n1\"", &format!("node_name = \"{}\"", n.name));
                let link = format!("[link]\nlisten = \"{}:{port}\"\nmunge_socket = {munge:?}\n", n.addr);
                std::fs::write(&d.config, format!("{text}\n{link}")).unwrap();
                d.start();
            });
        }
    });
    let wattson = wattson_harness::programs::program("wattson");
    let configs: Vec<(String, String)> =
        names.iter().zip(&daemons).map(|(n, d)| (n.clone(), d.config.display().to_string())).collect();
    let drivers: Vec<(String, String)> =
        names.iter().zip(&daemons).map(|(n, d)| (n.clone(), d.sim.dir().display().to_string())).collect();
    // Slurm's Prolog and Epilog as docs/slurm.md's plugin-free set-up gives them, each node's
    // wattsond found by node name (the lab's nodes share one host).
    let (prolog, epilog) = (work.path().join("prolog.sh"), work.path().join("epilog.sh"));
    for (path, verb) in [(&prolog, "begin"), (&epilog, "end")] {
        let script = format!(
            "#!/bin/sh\n{}export WATTSON_CONFIG=\"$c\"\n{} job {verb} >>{}/prolog.log 2>&1\nexit 0\n",
            by_node("c", &configs),
            wattson.display(),
            work.path().display()
        );
        std::fs::write(path, script).unwrap();
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let fake_job = wattson_harness::programs::program("fake-gpu-job");
    // Without cgroups: the twin's nodes declare 8 CPUs each (one per GPU, by
    // `config_overrides`) on a machine of two, and under task/cgroup,task/affinity its jobs ran
    // past their time limits (slurmd: "job ... allocated no CPUs"; measured in a clean run),
    // which stalls the replay. It compares power decisions, not process tracking.
    let mut lab = SlurmLab::start(LabOptions {
        nodes: nodes.clone(),
        extra_conf: slurm_conf(policy, cluster, &prolog, &epilog),
        cgroups: false,
        ..Default::default()
    });
    std::os::unix::fs::symlink(lab.dir().join("run/munge.sock"), &munge).unwrap();
    let power = lab.dir().join("power");
    std::fs::create_dir(&power).unwrap();
    let node = &cluster.node;
    std::fs::write(
        lab.dir().join("etc/wattson.toml"),
        format!(
            "[ctld]\ninterval = \"{LAB_TICK_S}s\"\nforecast_window_s = {}\nstate_file = \"{state}\"\n\
             [ctld.node]\nbase_w = {}\noff_w = {}\nshutdown_s = {}\nshutdown_w = {}\nboot_s = {}\nboot_w = {}\n\
             [power]\nsuspend = [\"/usr/bin/touch\", \"{p}/off-{{node}}\"]\nresume = [\"/usr/bin/touch\", \"{p}/on-{{node}}\"]\n\
             timeout = \"10s\"\nlog = \"{log}\"\n[link]\nport = {port}\nmunge_socket = {munge:?}\n",
            cluster.wattson.tuning.forecast_window_s,
            node.base_w,
            node.off_w,
            node.shutdown_s,
            node.shutdown_w,
            node.boot_s,
            node.boot_w,
            p = power.display(),
            log = lab.dir().join("log/power.log").display(),
            state = lab.dir().join("ctld.json").display(),
        ),
    )
    .unwrap();

    let job_drivers = by_node("d", &drivers);
    let calibration = calibrate(&lab, &names, &stamps);
    // The controller decides before the first job is due, as the simulator's does at its
    // start: the replay's clock starts when its first loop has asked for the idle nodes'
    // power-down (a job submitted before that loop would find every node up).
    let _ctld: Option<Ctld> = matches!(policy, Policy::Ctld).then(|| {
        let command = slurm_lab::release().command(&wattson);
        let ctld =
            run_ctld(&lab, command, &lab.dir().join("etc/wattson.toml"), &lab.dir().join("log/ctld.log"));
        let deadline = Instant::now() + Duration::from_secs(60);
        while std::fs::read_dir(&power).unwrap().next().is_none() {
            assert!(
                Instant::now() < deadline,
                "ctld asked for no power-down in 60 s\n{}",
                std::fs::read_to_string(lab.dir().join("log/ctld.log")).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        ctld
    });
    // Under Slurm's timer the replay's clock starts when the first node went idle, so that no
    // node has been idle longer than the simulator's (idle from its start); ctld's starts now.
    let (t0, epoch0) = match policy {
        Policy::Timer { .. } => {
            let behind = Duration::from_secs_f64((now_s() - calibration.idle_from).max(0.0));
            (Instant::now() - behind, calibration.idle_from)
        }
        Policy::Ctld => (Instant::now(), now_s()),
    };
    let mut submitted: Vec<(u32, f64)> = Vec::new();
    let mut power_log: Vec<Vec<Power>> = vec![Vec::new(); names.len()];
    let mut boots: Vec<(f64, usize)> = Vec::new();
    let last_submit = jobs.iter().map(|j| j.submit).fold(0.0, f64::max);
    let deadline = last_submit + 3.0 * jobs.iter().map(|j| j.limit).fold(0.0, f64::max) + 120.0;
    loop {
        let now = t0.elapsed().as_secs_f64();
        // The jobs now due, submitted a few at once (one sbatch after another would trail a
        // burst of the trace by seconds). A job's wait counts from when it was due.
        let due: Vec<usize> = (submitted.len()..jobs.len()).take_while(|&k| jobs[k].submit <= now).collect();
        for batch in due.chunks(8) {
            let ids: Vec<u32> = std::thread::scope(|s| {
                let lab = &lab;
                let handles: Vec<_> = batch
                    .iter()
                    .map(|&k| {
                        let script = job_script(k, &jobs[k], catalog, &fake_job, &job_drivers, &stamps);
                        s.spawn(move || {
                            let j = &jobs[k];
                            let minutes = (j.limit / 60.0).round().max(1.0) as u64;
                            let gres = format!("--gres=gpu:{}", j.gpus);
                            let (time, name) = (format!("--time={minutes}"), format!("twin-{k}"));
                            lab.sbatch(&[&gres, "-N", "1", &time, "-J", &name], &script)
                                .unwrap_or_else(|e| panic!("sbatch of trace job {k}: {e}"))
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).collect()
            });
            submitted.extend(batch.iter().zip(ids).map(|(&k, id)| (id, jobs[k].submit)));
        }
        for entry in std::fs::read_dir(&power).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            std::fs::remove_file(entry.path()).unwrap();
            let at = t0.elapsed().as_secs_f64();
            let (verb, node) =
                name.split_once('-').unwrap_or_else(|| panic!("unexpected power request {name}"));
            let i =
                names.iter().position(|n| n == node).unwrap_or_else(|| panic!("power request for {node}"));
            match verb {
                "off" => {
                    lab.power_off(node);
                    power_log[i].push(Power::Off(at));
                }
                "on" => {
                    power_log[i].push(Power::On(at));
                    boots.push((at + cluster.node.boot_s, i));
                }
                _ => panic!("unexpected power request {name}"),
            }
        }
        let now = t0.elapsed().as_secs_f64();
        boots.retain(|&(due, i)| {
            if due <= now {
                lab.power_on(&names[i]);
                false
            } else {
                true
            }
        });
        if submitted.len() == jobs.len() && (0..jobs.len()).all(|k| stamps.join(k.to_string()).exists()) {
            break;
        }
        if now > deadline {
            let missing: Vec<usize> =
                (0..jobs.len()).filter(|k| !stamps.join(k.to_string()).exists()).collect();
            panic!(
                "{policy:?}: jobs {missing:?} not done after {now:.0} s\n{}\n{}",
                std::fs::read_to_string(lab.dir().join("log/ctld.log")).unwrap_or_default(),
                lab.all_logs()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(_ctld);

    // Each job's own stamps, and its record on the node it ran on (closed by the epilog).
    let mut ran = Vec::new();
    let mut busy_j = 0.0;
    let mut busy_gpu_s = vec![0.0; names.len()];
    for (k, &(id, submit)) in submitted.iter().enumerate() {
        let text = std::fs::read_to_string(stamps.join(k.to_string())).unwrap();
        let f: Vec<&str> = text.split_whitespace().collect();
        let (start, end) = (f[0].parse::<f64>().unwrap() - epoch0, f[1].parse::<f64>().unwrap() - epoch0);
        let i = names.iter().position(|n| n == f[2]).unwrap();
        let record = closed_record(&daemons[i], id);
        // wattson's record of the job is its GPUs' true energy (the fake driver's), exactly.
        let truth_mj: f64 = daemons[i].truth_mj(&record).iter().sum();
        assert!(
            (record.energy_mj() - truth_mj).abs() <= 1e-3 * truth_mj + 1.0,
            "job {id} on {}: recorded {} mJ, truth {truth_mj} mJ\n{record:?}\n{}",
            names[i],
            record.energy_mj(),
            daemons[i].log()
        );
        busy_j += record.energy_j();
        let secs = (record.end_ns.unwrap() - record.begin_ns) as f64 / 1e9;
        busy_gpu_s[i] += secs * record.gpus.len() as f64;
        ran.push(Ran { submit, start, end });
    }
    let makespan_s = ran.iter().map(|r| r.end).fold(0.0, f64::max);
    let parts = energy(cluster, &power_log, &busy_gpu_s, busy_j, makespan_s);
    lab.stop();
    Observed { jobs: ran, power: power_log, parts, makespan_s, calibration }
}

/// What the probes before a replay measured.
#[derive(Debug, Clone, Copy)]
pub(super) struct Calibration {
    /// From sbatch to a job's body running on an idle node (median), s.
    pub start_latency_s: f64,
    /// From a job's body ending to the body of the job queued behind it running (median), s.
    pub queued_start_latency_s: f64,
    /// When the first node went idle for good (the earliest end of the last probes), epoch s.
    idle_from: f64,
}

/// The lab's start latencies, before the replay: on every node, a job queued behind one
/// holding all the node's GPUs (from that job's body ending to its own running), then, on
/// all nodes at once, a short job on the idle node (from sbatch to its body running); twice
/// (the first round warms each node's first launch up and is not counted), the medians of
/// the second. The last probes end within a moment of each other, so every node's idle time
/// starts about when the replay's does, as the simulator's nodes are idle from its start.
fn calibrate(lab: &SlurmLab, names: &[String], stamps: &Path) -> Calibration {
    let round = |r: usize| -> Vec<(f64, f64, f64)> {
        let together = std::sync::Barrier::new(names.len());
        std::thread::scope(|s| {
            let handles: Vec<_> = names
                .iter()
                .map(|n| {
                    let together = &together;
                    s.spawn(move || {
                        let stamp = |what: &str| stamps.join(format!("probe-{r}-{n}-{what}"));
                        let read = |what: &str| -> f64 {
                            std::fs::read_to_string(stamp(what)).unwrap().trim().parse().unwrap()
                        };
                        let body = |what: &str, sleep: &str| {
                            format!("#!/bin/bash\n{sleep}date +%s.%N >{}\n", stamp(what).display())
                        };
                        let all = format!("--gres=gpu:{GPUS_PER_NODE}");
                        let first =
                            lab.sbatch(&[&all, "-w", n, "-J", "probe"], &body("first", "sleep 1\n")).unwrap();
                        let queued = lab
                            .sbatch(&["--gres=gpu:1", "-w", n, "-J", "probe"], &body("queued", ""))
                            .unwrap();
                        lab.wait_job(first, Duration::from_secs(60));
                        lab.wait_job(queued, Duration::from_secs(60));
                        together.wait();
                        let at = now_s();
                        let id =
                            lab.sbatch(&["--gres=gpu:1", "-w", n, "-J", "probe"], &body("idle", "")).unwrap();
                        lab.wait_job(id, Duration::from_secs(60));
                        (read("idle") - at, read("queued") - read("first"), read("idle"))
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    };
    round(0);
    let measured = round(1);
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let queued: Vec<f64> = measured.iter().map(|m| m.1).collect();
    assert!(queued.iter().all(|&q| q > 0.0), "a queued probe began before the job ahead ended: {queued:?}");
    Calibration {
        start_latency_s: median(measured.iter().map(|m| m.0).collect()),
        queued_start_latency_s: median(queued),
        idle_from: measured.iter().map(|m| m.2).fold(f64::INFINITY, f64::min),
    }
}

/// `job`'s record on `daemon`, once its end is recorded.
fn closed_record(daemon: &common::Node, job: u32) -> wattson_types::job::JobRecord {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = daemon.record(&job.to_string());
        if r.end_ns.is_some() {
            return r;
        }
        assert!(Instant::now() < deadline, "job {job}'s record never closed\n{}", daemon.log());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The energy of a replay to `horizon`: busy GPUs as wattson recorded them, and the node power
/// model over the power states the hand carried out (on; shutting down for `shutdown_s` after
/// a power-off; off; booting for `boot_s` after a power-on; on again).
fn energy(
    cluster: &ClusterConfig,
    power: &[Vec<Power>],
    busy_gpu_s: &[f64],
    busy_j: f64,
    horizon: f64,
) -> EnergyParts {
    let n = &cluster.node;
    let idle_w = cluster.groups[0].gpu_idle_w();
    let mut parts = EnergyParts { gpu_busy_j: busy_j, ..Default::default() };
    let span = |from: f64, to: f64| (to.min(horizon) - from.min(horizon)).max(0.0);
    for (events, busy) in power.iter().zip(busy_gpu_s) {
        let (mut on, mut down, mut off, mut boot) = (0.0, 0.0, 0.0, 0.0);
        let mut since = 0.0;
        for e in events {
            match *e {
                Power::Off(t) => {
                    on += span(since, t);
                    down += span(t, t + n.shutdown_s);
                    since = t + n.shutdown_s;
                }
                Power::On(t) => {
                    off += span(since, t);
                    boot += span(t, t + n.boot_s);
                    since = t + n.boot_s;
                }
            }
        }
        match events.last() {
            Some(Power::Off(_)) => off += span(since, horizon),
            _ => on += span(since, horizon),
        }
        parts.node_base_j += n.base_w * on;
        parts.gpu_idle_j += idle_w * (on * f64::from(GPUS_PER_NODE) - busy).max(0.0);
        parts.off_j += n.off_w * off;
        parts.transition_j += n.shutdown_w * down + n.boot_w * boot;
    }
    parts
}
