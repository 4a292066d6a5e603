//! wattson's Slurm plugins inside real Slurm daemons (Debian's slurmctld/slurmd 22.05, started
//! by the harness on loopback), with wattsond on simulated GPUs: Slurm is the judge.

use wattson_harness::node as common;
use wattson_harness::slurm_lab;

use std::time::{Duration, Instant};

use common::Node;
use slurm_lab::{LabNode, LabOptions, SlurmLab};

const MAX_W: u32 = 700_000;

/// Starts wattsond on `node` and a one-node Slurm (`lab_node`) whose three plugins talk to it:
/// built with their test-only hooks (the panic triggers below) when `test_hooks`, the SPANK
/// plugin given `spank_args`, Slurm's daemons `daemon_env`, Slurm's accounting (slurmdbd on
/// MariaDB) when `accounting`, and `extra_conf` lines in slurm.conf.
pub(super) fn plugged_lab(
    node: Node,
    lab_node: LabNode,
    test_hooks: bool,
    spank_args: &str,
    daemon_env: &[(&str, &str)],
    accounting: bool,
    extra_conf: &str,
) -> (Node, SlurmLab) {
    let (node, options) =
        plugged_options(node, lab_node, test_hooks, spank_args, daemon_env, accounting, extra_conf);
    (node, SlurmLab::start(options))
}

/// [`plugged_lab`]'s wattsond, started, and the options of its lab, not yet started.
pub(super) fn plugged_options(
    mut node: Node,
    lab_node: LabNode,
    test_hooks: bool,
    spank_args: &str,
    daemon_env: &[(&str, &str)],
    accounting: bool,
    extra_conf: &str,
) -> (Node, LabOptions) {
    node.start();
    let plugins = node.dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let built = common::build_plugins(test_hooks);
    let names = ["spank_wattson.so", "job_submit_wattson.so", "acct_gather_energy_wattson.so"];
    for (lib, plugin) in common::PLUGIN_LIBS.into_iter().zip(names) {
        slurm_lab::install_plugin(&built.join(lib), &plugins, plugin);
    }
    let mut env: Vec<(String, String)> = vec![("WATTSON_CONFIG".into(), node.config.display().to_string())];
    env.extend(daemon_env.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let mut spank =
        format!("required {} config={}", plugins.join("spank_wattson.so").display(), node.config.display());
    if !spank_args.is_empty() {
        spank = format!("{spank} {spank_args}");
    }
    let options = LabOptions {
        nodes: vec![lab_node],
        plugstack: Some(format!("{spank}\n")),
        job_submit_plugins: Some("wattson".into()),
        plugin_dir: Some(plugins),
        daemon_env: env,
        accounting,
        extra_conf: extra_conf.to_string(),
        ..Default::default()
    };
    (node, options)
}

/// A node with wattsond on 4 simulated H100s, and a one-node Slurm whose plugins talk to it.
pub(super) struct Cluster {
    pub(super) node: Node,
    pub(super) lab: SlurmLab,
}

fn cluster(spank_args: &str, daemon_env: &[(&str, &str)]) -> Cluster {
    cluster_with(spank_args, daemon_env, false, "")
}

/// [`cluster`], optionally with Slurm's accounting (slurmdbd on MariaDB) so `sacct` works, and
/// with `extra_conf` lines in slurm.conf.
fn cluster_with(
    spank_args: &str,
    daemon_env: &[(&str, &str)],
    accounting: bool,
    extra_conf: &str,
) -> Cluster {
    cluster_on(Node::h100(4), spank_args, daemon_env, accounting, extra_conf)
}

/// [`cluster_with`] on `node` (4 GPUs, not started yet).
pub(super) fn cluster_on(
    node: Node,
    spank_args: &str,
    daemon_env: &[(&str, &str)],
    accounting: bool,
    extra_conf: &str,
) -> Cluster {
    let lab_node = LabNode::new("n1", 4, "h100");
    let (node, lab) = plugged_lab(node, lab_node, true, spank_args, daemon_env, accounting, extra_conf);
    Cluster { node, lab }
}

fn power_limits(node: &Node) -> Vec<u32> {
    (0..4).map(|g| node.sim.gpu_state(g).unwrap().power_limit_mw).collect()
}

#[test]
fn a_min_energy_job_runs_capped_is_accounted_exactly_and_its_gpus_are_restored() {
    let c = cluster("", &[]);
    let script = "#!/bin/sh\nsleep 3\nenv | grep -E '^(WATTSON_|SLURM_JOB_GPUS)' | sort\n";
    let submitted = wattson_types::now_ns();
    let (id, said) = c
        .lab
        .sbatch_verbose(
            &["--gres=gpu:2", "--energy=min-energy", "--energy-tag=bert-squad", "--job-name=bert-ft"],
            script,
        )
        .unwrap();
    // While it runs, its two GPUs are capped at 60 % of 700 W and the others are not.
    let deadline = Instant::now() + Duration::from_secs(30);
    let capped = loop {
        let limits = power_limits(&c.node);
        if limits.iter().filter(|&&l| l == 420_000).count() == 2 {
            break limits;
        }
        assert!(Instant::now() < deadline, "GPUs never capped: {limits:?}\n{}\n{said}", c.lab.all_logs());
        std::thread::sleep(Duration::from_millis(100));
    };
    assert_eq!(capped.iter().filter(|&&l| l == MAX_W).count(), 2, "{capped:?}");
    let info = c.lab.wait_job(id, Duration::from_secs(60));
    let finished = wattson_types::now_ns();
    assert_eq!(info.state, "COMPLETED", "{}", c.lab.all_logs());
    assert!(info.get("AdminComment").contains("wattson:policy=min-energy,power=60%"), "{:?}", info.fields);

    // The job saw what it got.
    let output = c.lab.job_output(id);
    assert!(output.contains("WATTSON_POLICY=min-energy"), "{output}\n{}", c.lab.log("slurmd-n1"));
    assert!(output.contains("WATTSON_GPU_POWER_LIMIT_W=420"), "{output}");

    // Restored after the job, and its energy is the GPUs' exact energy.
    let deadline = Instant::now() + Duration::from_secs(10);
    while power_limits(&c.node) != vec![MAX_W; 4] {
        assert!(
            Instant::now() < deadline,
            "GPUs not restored: {:?}\n{}",
            power_limits(&c.node),
            c.node.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let record = c.node.record(&id.to_string());
    assert_eq!(record.gpus.len(), 2);
    assert_eq!(record.hints.tag.as_deref(), Some("bert-squad"));
    // The job's name reached the node (job_submit passes it through the SPANK environment:
    // the prolog has no SLURM_JOB_NAME), so the default tag `user:jobname` can learn.
    assert_eq!(record.name.as_deref(), Some("bert-ft"));
    common::assert_exact(
        &c.node,
        &record,
        common::Bracket(submitted, finished),
        common::Bracket(submitted, finished),
        0.001,
    );
    let acct = c.node.wattson(&["acct", "-j", &id.to_string(), "-o", "JobID,NGPUs,Method,Policy", "-P"]);
    assert_eq!(
        String::from_utf8_lossy(&acct.stdout).lines().nth(1),
        Some(format!("{id}|2|counter|min-energy").as_str())
    );
}

#[test]
fn bad_hints_are_refused_at_submission_with_what_is_allowed() {
    let c = cluster("", &[]);
    for (flag, expected) in [
        ("--energy=fast", "--energy=fast: not one of min-energy, balanced, perf"),
        ("--energy-slowdown=-3", "--energy-slowdown=-3: not a percentage between 0 and 1000"),
        ("--energy-defer=tomorrow", "--energy-defer=tomorrow: not a duration from 0 to 7d"),
    ] {
        let err = c.lab.sbatch(&[flag], "#!/bin/sh\ntrue\n").unwrap_err();
        assert!(err.contains(expected), "{flag}: {err}");
    }
    // A submission that bypasses sbatch's options is checked again inside slurmctld.
    let err = c.lab.sbatch(&["--export=ALL,WATTSON_ENERGY=fast"], "#!/bin/sh\ntrue\n").unwrap_err();
    assert!(err.contains("wattson: --energy=fast: not one of"), "{err}");
    let queue = c.lab.run_ok("squeue", &["-h", "-o", "%i"]);
    assert!(queue.trim().is_empty(), "no refused job may be queued: {queue}");
    // sbatch --help lists the options.
    let help = c.lab.run_ok("sbatch", &["--help"]);
    assert!(help.contains("--energy=policy") && help.contains("--energy-defer=duration"), "{help}");
}

#[test]
fn jobs_run_when_wattsond_is_down_or_hung_and_slurm_logs_why() {
    let mut c = cluster("timeout=1s", &[]);
    c.node.stop();
    let id = c.lab.sbatch(&["--gres=gpu:1"], "#!/bin/sh\ntrue\n").unwrap();
    assert_eq!(c.lab.wait_job(id, Duration::from_secs(60)).state, "COMPLETED");
    assert!(
        c.lab.log("slurmd-n1").contains(&format!("wattson: job {id}: not accounted")),
        "{}",
        c.lab.log("slurmd-n1")
    );

    // A socket that accepts and never answers: each plugin call gives up after 1 s.
    let hung = std::os::unix::net::UnixListener::bind(&c.node.socket).unwrap();
    let warm = c.lab.sbatch(&[], "#!/bin/sh\ntrue\n").unwrap();
    c.lab.wait_job(warm, Duration::from_secs(60));
    let t = Instant::now();
    let id = c.lab.sbatch(&["--gres=gpu:1"], "#!/bin/sh\ntrue\n").unwrap();
    assert_eq!(c.lab.wait_job(id, Duration::from_secs(60)).state, "COMPLETED");
    // Prolog, the batch step's begin and exit, user init and epilog: each 1 s at most.
    assert!(t.elapsed() < Duration::from_secs(1 + 5 + 2), "{:?}", t.elapsed());
    assert!(c.lab.log("slurmd-n1").contains("did not answer within 1s"), "{}", c.lab.log("slurmd-n1"));
    drop(hung);
}

#[test]
fn a_panic_inside_the_plugins_does_not_take_slurm_down() {
    let c = cluster("test_panic=job_prolog", &[]);
    let id = c.lab.sbatch(&["--gres=gpu:1"], "#!/bin/sh\ntrue\n").unwrap();
    assert_eq!(c.lab.wait_job(id, Duration::from_secs(60)).state, "COMPLETED");
    assert!(
        c.lab.log("slurmd-n1").contains("internal error in slurm_spank_job_prolog"),
        "{}",
        c.lab.log("slurmd-n1")
    );
    assert_eq!(c.lab.node_state("n1"), "idle");
    drop(c);

    // In slurmctld: a job whose name is the trigger makes job_submit panic; the job is accepted.
    let c = cluster("", &[("WATTSON_TEST_PANIC", "boom")]);
    let id = c.lab.sbatch(&["--job-name=boom"], "#!/bin/sh\ntrue\n").unwrap();
    assert_eq!(c.lab.wait_job(id, Duration::from_secs(60)).state, "COMPLETED");
    assert!(c.lab.log("slurmctld").contains("internal error in job_submit"), "{}", c.lab.log("slurmctld"));
    assert!(c.lab.run_ok("scontrol", &["ping"]).contains("is UP"));
}

#[test]
fn a_deferrable_job_waits_for_the_cheap_hour() {
    let c = cluster("", &[]);
    // A tariff where the next UTC hour is the only cheap one.
    let hour = (wattson_types::now_ns() / 3_600_000_000_000 % 24) as usize;
    let prices: Vec<String> =
        (0..24).map(|h| if h == (hour + 1) % 24 { "0.05".into() } else { "0.30".to_string() }).collect();
    let mut config = std::fs::OpenOptions::new().append(true).open(&c.node.config).unwrap();
    use std::io::Write;
    writeln!(config, "[prices]\nhourly_utc = [{}]", prices.join(", ")).unwrap();
    drop(config);
    let (id, said) = c.lab.sbatch_verbose(&["--energy-defer=2h"], "#!/bin/sh\ntrue\n").unwrap();
    assert!(said.contains("wattson: deferred to"), "{said}");
    let info = c.lab.job_info(id).unwrap();
    assert_eq!(info.state, "PENDING", "{:?}", info.fields);
    assert_eq!(info.get("Reason"), "BeginTime");
    assert!(info.get("AdminComment").contains(",deferred="), "{:?}", info.fields);
    // Not deferrable: runs now.
    let now = c.lab.sbatch(&[], "#!/bin/sh\ntrue\n").unwrap();
    assert_eq!(c.lab.wait_job(now, Duration::from_secs(60)).state, "COMPLETED");
}

#[test]
fn the_decision_is_in_slurms_own_accounting() {
    let c = cluster_with("", &[], true, "");
    let id = c.lab.sbatch(&["--gres=gpu:1", "--energy=min-energy"], "#!/bin/sh\ntrue\n").unwrap();
    assert_eq!(c.lab.wait_job(id, Duration::from_secs(60)).state, "COMPLETED");
    // slurmdbd stores job records asynchronously: poll.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = c
            .lab
            .run_ok("sacct", &["-j", &id.to_string(), "-n", "-P", "-X", "-o", "JobID,State,AdminComment"]);
        if out.trim() == format!("{id}|COMPLETED|wattson:policy=min-energy,power=60%") {
            break;
        }
        assert!(Instant::now() < deadline, "sacct shows {out:?}\n{}", c.lab.log("slurmdbd"));
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Poll until job `id` runs, then give its prolog a moment; returns its `AdminComment`.
fn admin_comment_once_running(c: &Cluster, id: u32) -> String {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let info = c.lab.job_info(id).unwrap();
        if info.state == "RUNNING" {
            std::thread::sleep(Duration::from_millis(700));
            return info.get("AdminComment").to_string();
        }
        assert!(Instant::now() < deadline, "job {id} never ran: {:?}\n{}", info.fields, c.lab.all_logs());
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// One decision from one source, recorded as enforced: an exported look-alike of a SPANK
/// option does not override `sbatch --energy` in Slurm's record; hints given only in the job's
/// environment (`--export`, the REST API) reach the node and are enforced as recorded; a tag
/// cannot add fields to `AdminComment`.
#[test]
fn what_slurm_records_is_what_the_node_enforces() {
    let c = cluster("", &[]);
    let script = "#!/bin/sh\nsleep 4\n";
    let fake = "--export=ALL,_SLURM_SPANK_OPTION_wattson_energy=min-energy";
    let a = c.lab.sbatch(&["--gres=gpu:1", "--energy=perf", fake], script).unwrap();
    let comment = admin_comment_once_running(&c, a);
    assert_eq!(power_limits(&c.node), [MAX_W; 4], "the node runs perf");
    assert!(comment.starts_with("wattson:policy=perf"), "Slurm records {comment:?} for a perf job");
    assert_eq!(c.lab.wait_job(a, Duration::from_secs(60)).state, "COMPLETED");

    let b = c.lab.sbatch(&["--gres=gpu:1", "--export=ALL,WATTSON_ENERGY=min-energy"], script).unwrap();
    let comment = admin_comment_once_running(&c, b);
    assert!(comment.starts_with("wattson:policy=min-energy"), "{comment:?}");
    let limits = power_limits(&c.node);
    assert_eq!(
        limits.iter().filter(|&&l| l == 420_000).count(),
        1,
        "recorded min-energy, enforced {limits:?}"
    );
    assert_eq!(c.lab.wait_job(b, Duration::from_secs(60)).state, "COMPLETED");

    let err = c.lab.sbatch(&["--energy=min-energy", "--energy-tag=x,policy=perf"], script).unwrap_err();
    assert!(err.contains("--energy-tag"), "{err}");
}

/// `wattson acct`'s State is how Slurm ended the job (from its accounting), not wattson's
/// record: a job that succeeds, fails, is cancelled and runs out of time, each on a GPU.
#[test]
fn acct_state_is_the_state_slurm_gave_the_job() {
    let c = cluster_with("", &[], true, "");
    let gpu = ["--gres=gpu:1"];
    // Two CPUs: the long ones first, the short ones once the cancelled one frees its CPU.
    let timeout = c.lab.sbatch(&["--gres=gpu:1", "--time=1"], "#!/bin/sh\nsleep 600\n").unwrap();
    let cancelled = c.lab.sbatch(&gpu, "#!/bin/sh\nsleep 600\n").unwrap();
    admin_comment_once_running(&c, cancelled);
    c.lab.run_ok("scancel", &[&cancelled.to_string()]);
    let completed = c.lab.sbatch(&gpu, "#!/bin/sh\ntrue\n").unwrap();
    let failed = c.lab.sbatch(&gpu, "#!/bin/sh\nexit 3\n").unwrap();
    let jobs = [(completed, "COMPLETED"), (failed, "FAILED"), (cancelled, "CANCELLED"), (timeout, "TIMEOUT")];
    for (id, _) in jobs {
        c.lab.wait_job(id, Duration::from_secs(180));
    }
    let ids: Vec<String> = jobs.iter().map(|(id, _)| id.to_string()).collect();
    let ids = ids.join(",");
    // slurmdbd stores job records asynchronously: poll until sacct has every job's end.
    let expected: String = jobs.iter().map(|(id, state)| format!("{id}|{state}\n")).collect();
    let sacct = || c.lab.run_ok("sacct", &["-X", "-n", "-P", "-o", "JobIDRaw,State", "-j", &ids]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = sacct();
    while seen
        .lines()
        .map(|l| l.split(' ').next().unwrap_or(""))
        .map(|l| format!("{l}\n"))
        .collect::<String>()
        != sorted(&expected)
    {
        assert!(Instant::now() < deadline, "sacct shows {seen:?}\n{}", c.lab.log("slurmdbd"));
        std::thread::sleep(Duration::from_millis(300));
        seen = sacct();
    }
    let acct = |args: &[&str]| {
        let mut cmd = c.lab.command(wattson_harness::programs::program("wattson"));
        cmd.arg("-c").arg(&c.node.config).args(["acct", "-X", "-n", "-P"]).args(args);
        let out = cmd.output().unwrap();
        common::assert_ok(&out);
        String::from_utf8(out.stdout).unwrap()
    };
    // (wattson lists records in the order they began; sorted here like sacct's.)
    assert_eq!(sorted(&acct(&["-j", &ids, "-o", "JobID,State"])), sorted(&expected));
    // -s selects by Slurm's state, long or short names.
    assert_eq!(
        sorted(&acct(&["-j", &ids, "-s", "F,TO", "-o", "JobID"])),
        sorted(&format!("{failed}\n{timeout}\n"))
    );
    assert_eq!(
        acct(&["-j", &ids, "-s", "cancelled", "-o", "JobID,GPUEnergyRaw"]).split('|').next(),
        Some(&*cancelled.to_string())
    );
    // Every job was metered on its GPU whatever its end.
    for (id, _) in jobs {
        assert!(c.node.record(&id.to_string()).energy_j() > 0.0, "job {id}");
    }
}

/// Lines sorted by job id, as sacct lists them.
fn sorted(lines: &str) -> String {
    let mut v: Vec<&str> = lines.lines().collect();
    v.sort_by_key(|l| l.split(['|', ' ']).next().unwrap_or("").parse::<u64>().unwrap_or(0));
    v.iter().map(|l| format!("{l}\n")).collect()
}

/// slurmd and then slurmctld restarted while a capped GPU job runs: the job keeps running and
/// completes, its GPU stays capped throughout and is restored after, and its energy is exact
/// (the job's own slurmstepd reports its end, whatever happened to the daemons).
#[test]
fn a_job_outlives_slurmd_and_slurmctld_restarts_capped_and_exactly_accounted() {
    let mut c = cluster("", &[]);
    let submitted = wattson_types::now_ns();
    let id = c
        .lab
        .sbatch(&["--gres=gpu:1", "--energy=min-energy", "-A", "physics"], "#!/bin/sh\nsleep 10\n")
        .unwrap();
    admin_comment_once_running(&c, id);
    // The job's account reached wattsond (models may be shared within it).
    assert!(c.node.log().contains("account=\"physics\""), "{}", c.node.log());
    let capped = |c: &Cluster| power_limits(&c.node).iter().filter(|&&l| l == 420_000).count();
    assert_eq!(capped(&c), 1, "{:?}", power_limits(&c.node));
    c.lab.restart_slurmd("n1");
    assert_eq!(capped(&c), 1, "still capped after slurmd's restart");
    c.lab.restart_slurmctld();
    assert_eq!(capped(&c), 1, "still capped after slurmctld's restart");
    let info = c.lab.wait_job(id, Duration::from_secs(90));
    let finished = wattson_types::now_ns();
    assert_eq!(info.state, "COMPLETED", "{}", c.lab.all_logs());
    let deadline = Instant::now() + Duration::from_secs(10);
    while power_limits(&c.node) != vec![MAX_W; 4] {
        assert!(Instant::now() < deadline, "GPU not restored: {:?}\n{}", power_limits(&c.node), c.node.log());
        std::thread::sleep(Duration::from_millis(100));
    }
    let record = c.node.record(&id.to_string());
    assert_eq!(record.state, wattson_types::job::JobState::Completed);
    let around = common::Bracket(submitted, finished);
    common::assert_exact(&c.node, &record, around, around, 0.001);
}

/// slurm.conf for Slurm's own energy accounting fed by wattson (docs/slurm.md).
pub(super) const ENERGY_CONF: &str = "AcctGatherEnergyType=acct_gather_energy/wattson\n\
    JobAcctGatherType=jobacct_gather/linux\nJobAcctGatherFrequency=task=1\n\
    PrologFlags=Alloc,Contain\nAcctGatherNodeFreq=1";

/// A step's (or the job's) `ConsumedEnergyRaw` in joules from `sstat`/`sacct` output lines
/// `JobID|ConsumedEnergyRaw`, for the line whose id is `id`.
pub(super) fn energy_of(lines: &str, id: &str) -> Option<u64> {
    lines
        .lines()
        .find_map(|l| l.split_once('|').filter(|(j, _)| *j == id).and_then(|(_, e)| e.trim().parse().ok()))
}

#[test]
fn sacct_and_sstat_show_the_jobs_gpu_energy_as_wattson_metered_it() {
    let mut c = cluster_with("", &[], true, ENERGY_CONF);
    // Every GPU busy, the job's and the others: only the job's may count.
    for gpu in 0..4 {
        c.node.sim.set_load(gpu, 0.5 + 0.1 * f64::from(gpu)).unwrap();
    }
    let done = c.node.dir.path().join("work-done");
    let script = format!("#!/bin/sh\nsleep 12\ntouch {}\nsleep 1\n", done.display());
    let id = c.lab.sbatch(&["--gres=gpu:2"], &script).unwrap();
    let extern_step = format!("{id}.extern");
    // While it runs, sstat shows the job's energy growing.
    let sstat =
        || c.lab.run("sstat", &["-n", "-P", "-a", "-j", &id.to_string(), "-o", "JobID,ConsumedEnergyRaw"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut seen = Vec::new();
    while seen.len() < 2 {
        let out = String::from_utf8_lossy(&sstat().stdout).into_owned();
        if let Some(j) =
            energy_of(&out, &extern_step).filter(|&j| j > 0 && seen.last().is_none_or(|&l| j > l))
        {
            seen.push(j);
        }
        assert!(
            Instant::now() < deadline,
            "sstat never showed a growing energy: {seen:?} {out}\n{}",
            c.lab.all_logs()
        );
        std::thread::sleep(Duration::from_millis(700));
    }
    // The node's power reaches slurmd (scontrol show node: CurrentWatts).
    let node = c.lab.run_ok("scontrol", &["show", "node", "n1"]);
    let watts: u64 = node
        .split_whitespace()
        .find_map(|w| w.strip_prefix("CurrentWatts="))
        .and_then(|w| w.parse().ok())
        .unwrap_or(0);
    assert!(watts > 1000, "CurrentWatts of 4 busy H100s: {node}");
    // wattsond killed and restarted mid-job: the steps' polls fail meanwhile, and the next
    // ones after the restart carry the figures on (a pause after a refused poll would lose the
    // last seconds: sacct short of wattson's figure).
    c.node.kill9();
    std::thread::sleep(Duration::from_millis(1500));
    c.node.start();
    // The job's work ends: its GPUs go idle, as real ones do when the processes exit.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done.exists() {
        assert!(Instant::now() < deadline, "the job never finished its work");
        std::thread::sleep(Duration::from_millis(50));
    }
    for gpu in 0..4 {
        c.node.sim.set_load(gpu, 0.0).unwrap();
    }
    assert_eq!(c.lab.wait_job(id, Duration::from_secs(60)).state, "COMPLETED", "{}", c.lab.all_logs());
    let record = c.node.record(&id.to_string());
    let wattson_j = record.energy_j();
    let truth_j: f64 = c.node.truth_mj(&record).iter().sum::<f64>() / 1000.0;
    // slurmdbd stores the job's row once its steps are in: poll.
    let sacct =
        || c.lab.run_ok("sacct", &["-n", "-P", "-X", "-j", &id.to_string(), "-o", "JobID,ConsumedEnergyRaw"]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let slurm_j = loop {
        let out = sacct();
        if let Some(j) = energy_of(&out, &id.to_string()).filter(|&j| j > 0) {
            break j as f64;
        }
        assert!(Instant::now() < deadline, "sacct shows no energy: {out}\n{}", c.lab.log("slurmdbd"));
        std::thread::sleep(Duration::from_millis(300));
    };
    // A job's figure in Slurm covers its steps, up to the last one's end; wattson's job record
    // runs on to the epilog, a moment later (longer on a loaded machine, or under
    // proctrack/cgroup), and its batch step's record ends with the step. The batch step idles
    // its GPUs for its last second, so Slurm's figure lies between wattson's two, whenever the
    // epilog ran.
    let batch_j = c.node.record(&format!("{id}.batch")).energy_j();
    println!(
        "sacct {slurm_j} J, wattson batch step {batch_j:.1} J, job {wattson_j:.1} J, truth {truth_j:.1} J"
    );
    assert!(common::rel_err(wattson_j, truth_j) < 0.001, "wattson {wattson_j} vs truth {truth_j}");
    assert!(
        slurm_j >= batch_j * (1.0 - SACCT_MARGIN) && slurm_j <= wattson_j * (1.0 + SACCT_MARGIN),
        "sacct {slurm_j} J outside wattson's batch step {batch_j} J and job {wattson_j} J (truth {truth_j} J)\n{}",
        c.lab.log("slurmd-n1")
    );
}

/// How far Slurm's figure may lie outside wattson's batch step and job: its last poll of a
/// step may come just before the step's end, and it counts whole joules.
pub(super) const SACCT_MARGIN: f64 = 0.005;

#[test]
fn with_wattsond_down_the_energy_plugin_lets_jobs_run_and_logs_why() {
    let mut c = cluster_with("timeout=1s", &[], false, ENERGY_CONF);
    c.node.stop();
    let t = Instant::now();
    let id = c.lab.sbatch(&["--gres=gpu:1"], "#!/bin/sh\nsleep 2\n").unwrap();
    assert_eq!(c.lab.wait_job(id, Duration::from_secs(60)).state, "COMPLETED");
    // One failed poll per step process, then the figures are left alone for 30 s.
    assert!(t.elapsed() < Duration::from_secs(20), "{:?}", t.elapsed());
    let log = c.lab.log("slurmd-n1");
    assert!(log.contains("acct_gather_energy/wattson: ") && log.contains("not reachable"), "{log}");
}
