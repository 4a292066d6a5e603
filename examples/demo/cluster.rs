//! The main job's cluster half: `wattson ctld` on a Slurm of two nodes (one simulated H100 in
//! four shards each, wattsond on each, the three plugins), with Slurm's power saving handed to
//! it. The controller powers both idle nodes down, Slurm wakes one for a job, and two jobs
//! whose users let them share a GPU (`--energy-share=yes`) are paired on one GPU with no pair
//! data at all: a trial, measured by the node and learned by the controller, which then powers
//! the idle node down again. A node's power action is a stand-in: "off" stops its slurmd,
//! "on" starts it as from a boot (a real site's actions call its BMC).

use std::path::Path;
use std::process::{Command, Stdio};
use std::thread::sleep;
use std::time::{Duration, Instant};

use fake_nvml::{Config, ProcessLoad, Sim};
use wattson_harness::ctld::{self, Ctld, job_pid, power_conf, power_table, pump, submit_shared};
use wattson_harness::slurm_lab::{self, LabNode, LabOptions, SlurmLab};

use super::{Daemon, Installed, step};

/// The nodes, each at a loopback address of its own (their wattsonds listen on one port).
const NODES: [(&str, &str); 2] = [("n1", "127.0.0.2"), ("n2", "127.0.0.3")];

/// The two jobs' workload tag (each tag is a class of the co-location model).
const TAG: &str = "calm";

/// Runs the act in `dir`; returns what failed, if anything.
pub fn act(from: &Installed, dir: &Path, plugins: &Path, library: &Path) -> Result<(), String> {
    std::fs::create_dir_all(dir).unwrap();
    step("The cluster: wattson ctld on two nodes, with Slurm's power saving and shared GPUs");
    let sims: Vec<Sim> = NODES
        .iter()
        .map(|(name, _)| Sim::create(&dir.join(name).join("gpus"), &Config::uniform("H100", 1)).unwrap())
        .collect();
    let configs: Vec<_> = NODES.iter().map(|(name, _)| dir.join(name).join("wattson.toml")).collect();
    for ((name, _), config) in NODES.iter().zip(&configs) {
        let node_dir = dir.join(name);
        std::fs::write(
            config,
            format!(
                "[daemon]\nsocket = {:?}\nstore = {:?}\nnode_name = \"{name}\"\nslurm_user = \"root\"\n\
                 sample_interval = \"250ms\"\n\n[gpu]\nnvml_library = {library:?}\n\n[policy]\nshards_per_gpu = 4\n",
                node_dir.join("wattsond.sock"),
                node_dir.join("wattson.db"),
            ),
        )
        .unwrap();
    }
    let requests = dir.join("power-requests");
    std::fs::create_dir_all(&requests).unwrap();
    let nodes: Vec<LabNode> = NODES
        .iter()
        .zip(&configs)
        .map(|((name, addr), config)| LabNode {
            addr: addr.to_string(),
            shards: 4,
            // Each node's plugins read its own wattson.toml, where a node's package puts it.
            wattson_config: Some(config.clone()),
            ..LabNode::new(name, 1, "h100")
        })
        .collect();
    let controller = dir.join("wattson.toml");
    let mut lab = SlurmLab::start(LabOptions {
        nodes,
        plugstack: Some("required spank_wattson.so\n".into()),
        job_submit_plugins: Some("wattson".into()),
        plugin_dir: from.plugins_from.as_ref().map(|_| plugins.to_path_buf()),
        // slurmctld's job_submit reads the controller's file (written below, once the lab's
        // munge socket is known; the plugin re-reads it when it appears).
        daemon_env: vec![("WATTSON_CONFIG".into(), controller.display().to_string())],
        extra_conf: power_conf(&from.programs) + "SchedulerParameters=batch_sched_delay=0,bf_interval=1\n",
        ..Default::default()
    });
    let munge = lab.dir().join("run/munge.sock");
    let port = slurm_lab::free_port();
    let link = |listen: &str| format!("\n[link]\n{listen}port = {port}\nmunge_socket = {munge:?}\n");
    let mut daemons = Vec::new();
    for (((name, addr), config), sim) in NODES.iter().zip(&configs).zip(&sims) {
        let text = std::fs::read_to_string(config).unwrap();
        std::fs::write(config, text + &link(&format!("listen = \"{addr}:{port}\"\n"))).unwrap();
        sim.set_load(0, 0.8).unwrap();
        daemons.push(Daemon::start(&from.wattsond, config, sim, &dir.join(name)));
    }
    // The power programs Slurm runs get no environment but $SLURM_CONF: they find the
    // controller's file beside slurm.conf.
    std::os::unix::fs::symlink(&controller, lab.dir().join("etc/wattson.toml")).unwrap();
    let state = dir.join("ctld.json");
    std::fs::write(
        &controller,
        format!(
            "[ctld]\ninterval = \"1s\"\nforecast_window_s = 60\nstate_file = {state:?}\n\
             # No pair data: learn each pair from the nodes' measurements, trying a pair it cannot\n\
             # predict where both jobs' slowdown bounds reach 20%.\n\
             share_learn = true\nshare_try_bound = 0.2\n\n\
             # The lab's nodes boot in seconds.\n[ctld.node]\nboot_s = 2\nshutdown_s = 1\n\n\
             [policy]\nshards_per_gpu = 4\n\n{}{}",
            power_table(&requests, &dir.join("power.log")),
            link(""),
        ),
    )
    .unwrap();
    println!(
        "Slurm cluster {}: n1 and n2, one H100 in 4 shards each; SuspendTime=INFINITE, power programs wattson-suspend/wattson-resume",
        lab.cluster()
    );

    step("wattson ctld sees no demand: both idle nodes go down");
    let ctld_log = dir.join("ctld.log");
    let mut command = Command::new(&from.wattson);
    command.stdin(Stdio::null());
    let _ctld: Ctld = ctld::run_ctld(&lab, command, &controller, &ctld_log);
    println!("$ wattson ctld -c {}   (log {})", controller.display(), ctld_log.display());
    wait_pumping(&mut lab, &requests, "both nodes powered down", Duration::from_secs(60), |lab| {
        NODES.iter().all(|(n, _)| ctld::state(lab, n).contains("POWERED_DOWN"))
    })?;
    show_states(&lab);
    power_status(from, &lab, &controller);

    step("A job that may share its GPU arrives: a node is woken for it");
    let a = submit_shared(&lab, TAG, 40, 30)?;
    println!(
        "Submitted batch job {a} (--gres=gpu:1 --energy-share=yes --energy-slowdown=30 --energy-tag={TAG})"
    );
    let woken = Instant::now();
    wait_pumping(&mut lab, &requests, "job a running", Duration::from_secs(90), |lab| {
        job_state(lab, a) == "RUNNING"
    })?;
    let node = field(&lab, a, "NodeList");
    println!("job {a} RUNNING on {node}, {:.1} s after its submission", woken.elapsed().as_secs_f64());
    show_states(&lab);
    let sim = &sims[NODES.iter().position(|(n, _)| *n == node).ok_or(format!("job {a} on {node}"))?];
    // The simulated job's pace: 80% of the GPU's SMs alone.
    let pa = job_pid(&lab, a).ok_or(format!("job {a} wrote no pid"))?;
    sim.set_processes(0, &[ProcessLoad { pid: pa, sm_pct: 80 }]).unwrap();
    sleep(Duration::from_secs(3));

    step("A second such job: no pair data, both bounds reach the trial's 20%; paired on the same GPU");
    let b = submit_shared(&lab, TAG, 8, 30)?;
    println!("Submitted batch job {b} (the same options)");
    wait_pumping(&mut lab, &requests, "job b running", Duration::from_secs(60), |lab| {
        job_state(lab, b) != "PENDING"
    })?;
    let (b_node, b_comment) = (field(&lab, b, "NodeList"), field(&lab, b, "AdminComment"));
    println!("job {b} {} on {b_node}, AdminComment={b_comment}", job_state(&lab, b));
    if b_node != node || !b_comment.ends_with(",released=share") {
        let submit_log =
            lab.log("slurmctld").lines().filter(|l| l.contains("wattson")).collect::<Vec<_>>().join("\n");
        return Err(format!(
            "job {b} was not released beside job {a} on {node}:\n{}\n{submit_log}",
            log_of(&ctld_log)
        ));
    }
    // Beside each other, each gets 76% of the SMs: 5% slower than alone.
    let pb = job_pid(&lab, b).ok_or(format!("job {b} wrote no pid"))?;
    let shared = [ProcessLoad { pid: pa, sm_pct: 76 }, ProcessLoad { pid: pb, sm_pct: 76 }];
    sim.set_processes(0, &shared).unwrap();
    println!("{}", lab.run_ok("squeue", &["-o", "%.10i %.8T %.6N %.20b"]).trim_end());
    let info = lab.wait_job(b, Duration::from_secs(60));
    sim.set_processes(0, &[ProcessLoad { pid: pa, sm_pct: 80 }]).unwrap();
    println!("job {b} {}", info.state);

    step("The controller asks the node for the pair's measurement and learns it");
    let learned = "measured pair slowdown within the job's bound; learned";
    let started = Instant::now();
    while !log_of(&ctld_log).contains(learned) {
        if started.elapsed() > Duration::from_secs(60) {
            return Err(format!("the controller never learned the pair:\n{}", log_of(&ctld_log)));
        }
        sleep(Duration::from_millis(300));
    }
    let line = log_of(&ctld_log).lines().find(|l| l.contains(learned)).unwrap_or_default().to_string();
    println!("ctld.log: {}", line.trim());
    let info = lab.wait_job(a, Duration::from_secs(90));
    // Its processes are gone from the GPU: wattsond confirms the node idle before it goes down.
    sim.set_processes(0, &[]).unwrap();
    sim.set_load(0, 0.0).unwrap();
    println!("job {a} {}", info.state);

    step("Both nodes idle again: the woken one goes down");
    wait_pumping(&mut lab, &requests, "both nodes powered down again", Duration::from_secs(60), |lab| {
        NODES.iter().all(|(n, _)| ctld::state(lab, n).contains("POWERED_DOWN"))
    })?;
    show_states(&lab);
    power_status(from, &lab, &controller);
    drop(_ctld);
    lab.stop();
    for d in daemons {
        d.stop();
    }
    Ok(())
}

fn field(lab: &SlurmLab, id: u32, name: &str) -> String {
    lab.job_info(id).and_then(|j| j.fields.get(name).cloned()).unwrap_or_default()
}

fn job_state(lab: &SlurmLab, id: u32) -> String {
    lab.job_info(id).map(|j| j.state).unwrap_or_default()
}

fn show_states(lab: &SlurmLab) {
    println!(
        "$ sinfo -N -p lab -o '%N %T'\n{}",
        lab.run_ok("sinfo", &["-N", "-h", "-p", "lab", "-o", "%N %T"]).trim_end()
    );
}

fn power_status(from: &Installed, lab: &SlurmLab, controller: &Path) {
    println!("$ wattson power status");
    let out =
        lab.command(&from.wattson).arg("-c").arg(controller).args(["power", "status"]).output().unwrap();
    print!("{}", String::from_utf8_lossy(&out.stdout));
}

fn log_of(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Carries out the power actions Slurm asks for (printing each) until `done` holds.
fn wait_pumping(
    lab: &mut SlurmLab,
    requests: &Path,
    what: &str,
    timeout: Duration,
    done: impl Fn(&SlurmLab) -> bool,
) -> Result<(), String> {
    let started = Instant::now();
    while !done(lab) {
        for action in pump(lab, requests) {
            let (verb, node) = action.split_once('-').unwrap_or((&action, ""));
            let verb = if verb == "on" { "resume" } else { "suspend" };
            println!(
                "  [power] wattson-{verb} {node}: the node's slurmd {}",
                if verb == "resume" { "started, as from a boot" } else { "stopped" }
            );
        }
        if started.elapsed() > timeout {
            return Err(format!("{what}: not within {timeout:?}\n{}", lab.all_logs()));
        }
        sleep(Duration::from_millis(200));
    }
    Ok(())
}
