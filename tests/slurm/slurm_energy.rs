//! GPU energy in Slurm's own accounting across nodes: a real Slurm (slurmdbd on a private
//! MariaDB) with two GPU nodes, each slurmd with `acct_gather_energy/wattson` talking to its own
//! wattsond on simulated GPUs. Slurm sums a job's nodes: the job's `sacct` energy is the sum of
//! what each node's wattsond metered for it. After the job, `wattson ctld` gathers both nodes'
//! records over the link into the job's summary in Slurm's accounting (`AdminComment`), which
//! `wattson acct` reads from a host with no wattsond, as `sacct` lets each user see it.

use wattson_harness::node as common;
use wattson_harness::slurm_lab;

use std::time::{Duration, Instant};

use common::{Node, assert_ok};
use slurm_lab::{LabNode, LabOptions, SlurmLab};
use wattson_sacct::summary::{self, JobSummary};

static WATTSON: std::sync::LazyLock<std::path::PathBuf> =
    std::sync::LazyLock::new(|| wattson_harness::programs::program("wattson"));

/// The login node's flat tariff (per kWh, 24 hours) and carbon intensity (g/kWh).
const PRICE: &str = "0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2, 0.2";
const CO2: &str = "400, 400, 400, 400, 400, 400, 400, 400, 400, 400, 400, 400, 400, 400, 400, 400, 400, 400, 400, 400, 400, 400, 400, 400";

/// slurm.conf for Slurm's energy accounting fed by wattson (docs/slurm.md).
const ENERGY_CONF: &str = "AcctGatherEnergyType=acct_gather_energy/wattson\nJobAcctGatherType=jobacct_gather/linux\n\
                           JobAcctGatherFrequency=task=1\nPrologFlags=Alloc,Contain\nPrivateData=jobs";

/// A wattsond (not started) on 2 simulated H100s that calls itself `name`. Its GPUs draw
/// nothing when idle: the records here are ended by hand a moment after Slurm's last poll
/// (the epilog would end them at once), and an idle GPU's draw in that moment would count in
/// one figure and not the other.
fn node(name: &str) -> Node {
    let mut gpus = fake_nvml::Config::uniform("H100", 2);
    for gpu in &mut gpus.gpu {
        gpu.idle_w = Some(0.0);
    }
    let node = Node::new(gpus, "200ms");
    let text = std::fs::read_to_string(&node.config).unwrap();
    std::fs::write(&node.config, text.replace("node_name = \"n1\"", &format!("node_name = \"{name}\"")))
        .unwrap();
    node
}

#[test]
fn a_two_node_jobs_sacct_energy_is_the_sum_of_both_nodes_and_its_summary_holds_both_records() {
    let mut daemons = [node("n1"), node("n2")];
    let plugins = daemons[0].dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let built = common::build_plugins(false);
    slurm_lab::install_plugin(&built.join(common::PLUGIN_LIBS[2]), &plugins, "acct_gather_energy_wattson.so");
    let nodes: Vec<LabNode> = ["n1", "n2"]
        .iter()
        .zip(&daemons)
        .enumerate()
        .map(|(i, (name, d))| LabNode {
            env: vec![("WATTSON_CONFIG".into(), d.config.display().to_string())],
            addr: format!("127.0.0.{}", i + 2),
            ..LabNode::new(name, 2, "h100")
        })
        .collect();
    let lab = SlurmLab::start(LabOptions {
        nodes: nodes.clone(),
        plugin_dir: Some(plugins),
        accounting: true,
        extra_conf: ENERGY_CONF.into(),
        ..LabOptions::default()
    });
    let munge = lab.dir().join("run/munge.sock");
    let port = slurm_lab::free_port();
    for (d, n) in daemons.iter_mut().zip(&nodes) {
        d.start_with_link(&n.addr, port, &munge);
    }
    let (id, per_node, slurm_j) = two_node_job(&lab, &daemons);
    let wattson_j: f64 = per_node.iter().sum();
    println!(
        "sacct {slurm_j} J; wattson n1 {:.1} J + n2 {:.1} J = {wattson_j:.1} J",
        per_node[0], per_node[1]
    );
    // Both nodes weigh (0.9 and 0.6 of 700 W): a node left out would miss by 40% or more.
    assert!(per_node.iter().all(|&e| e > 0.3 * wattson_j), "{per_node:?}");
    assert!(common::rel_err(slurm_j, wattson_j) < 0.005, "sacct {slurm_j} J vs wattson {wattson_j} J");

    // The controller's loop writes the job's summary (power and placement left alone here).
    let controller = lab.summaries_only_controller(port);
    assert_ok(&lab.command(&*WATTSON).arg("-c").arg(&controller).args(["ctld", "--once"]).output().unwrap());
    let comment = lab.run_ok("sacct", &["-n", "-P", "-X", "-j", &id.to_string(), "-o", "AdminComment"]);
    assert!(comment.trim().starts_with("wattson:policy=balanced;ws1:"), "the note stays first: {comment}");
    let summary: JobSummary = summary::read(comment.trim()).expect("a summary").expect("readable");
    // What `wattson summary show` prints is the same summary.
    let shown = lab.command(&*WATTSON).args(["summary", "show", "-j", &id.to_string()]).output().unwrap();
    assert_ok(&shown);
    assert_eq!(serde_json::from_slice::<JobSummary>(&shown.stdout).unwrap(), summary);
    // It parses back to each node's own record, number for number.
    assert!(summary.missing.is_empty(), "{:?}", summary.missing);
    assert_eq!(summary.nodes.iter().map(|n| n.node.as_str()).collect::<Vec<_>>(), ["n1", "n2"]);
    for (part, d) in summary.nodes.iter().zip(&daemons) {
        let job = part.records.iter().find(|r| r.key.step.is_empty()).expect("the job's record");
        assert_eq!(*job, d.record(&id.to_string()));
        // One trace, GPU 0's, adding up to its metered energy (the last bin ends at the last
        // reading, up to one sample before the end).
        assert_eq!(part.power.iter().map(|t| t.gpu).collect::<Vec<_>>(), [0]);
        let traced = part.power[0].energy_j();
        assert!(common::rel_err(traced, job.energy_j()) < 0.03, "{traced} J vs {} J", job.energy_j());
    }
    let summed: f64 = summary
        .nodes
        .iter()
        .flat_map(|n| &n.records)
        .filter(|r| r.key.step.is_empty())
        .map(|r| r.energy_j())
        .sum();
    assert!((summed - wattson_j).abs() < 1e-6, "{summed} vs {wattson_j}");
    // A second loop finds nothing new to write.
    let again = lab
        .command(&*WATTSON)
        .arg("-c")
        .arg(&controller)
        .args(["summary", "write", "--lookback", "1h"])
        .output()
        .unwrap();
    assert_ok(&again);
    assert!(
        String::from_utf8_lossy(&again.stdout).trim().is_empty(),
        "{}",
        String::from_utf8_lossy(&again.stdout)
    );

    // From a host with no wattsond (a login node): every node's record, from the summary.
    let login = lab.dir().join("etc/login.toml");
    std::fs::write(
        &login,
        format!(
            "[daemon]\nsocket = {:?}\nstore = {:?}\n[prices]\nhourly_utc = [{PRICE}]\n[carbon]\nhourly_utc = [{CO2}]\n",
            lab.dir().join("none.sock"),
            lab.dir().join("none.db")
        ),
    )
    .unwrap();
    let acct = |id: u32| {
        let out = lab
            .command(&*WATTSON)
            .arg("-c")
            .arg(&login)
            .args(["acct", "-j", &id.to_string(), "-n", "-P", "-o", "JobID,NodeList,GPUEnergyRaw,Source"])
            .output()
            .unwrap();
        assert_ok(&out);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let rows = acct(id);
    let expected: String = ["n1", "n2"]
        .iter()
        .zip(&per_node)
        .map(|(n, e)| format!("{id}|{n}|{}|summary\n", e.round() as u64))
        .collect();
    assert_eq!(rows, expected);
    // Its chart from there: both nodes' GPU 0.
    let chart = lab.dir().join("job.svg");
    let plotted = lab
        .command(&*WATTSON)
        .arg("-c")
        .arg(&login)
        .args(["acct", "-j", &id.to_string(), "--plot"])
        .arg(&chart)
        .output()
        .unwrap();
    assert_ok(&plotted);
    let svg = std::fs::read_to_string(&chart).unwrap();
    assert_eq!(svg.matches("class=\"trace\"").count(), 2, "{svg}");
    assert!(svg.contains(">n1 gpu0<") && svg.contains(">n2 gpu0<"), "{svg}");

    // A second job, and n2's wattsond stops before the controller asks: the summary is written
    // without n2 once [ctld] summary_wait has passed (0s here), and the report still covers
    // n2, from Slurm's own energy figure, marked as such.
    let (id2, per_node2, slurm_j2) = two_node_job(&lab, &daemons);
    daemons[1].stop();
    let text = std::fs::read_to_string(&controller).unwrap();
    std::fs::write(&controller, text.replace("[ctld]\n", "[ctld]\nsummary_wait = \"0s\"\n")).unwrap();
    let written =
        lab.command(&*WATTSON).arg("-c").arg(&controller).args(["summary", "write"]).output().unwrap();
    assert_ok(&written);
    assert_eq!(String::from_utf8_lossy(&written.stdout).trim(), format!("{id2}: written without n2"));
    let rows = acct(id2);
    let lines: Vec<&str> = rows.lines().collect();
    assert_eq!(lines.len(), 2, "{rows}");
    assert_eq!(lines[0], format!("{id2}|n1|{}|summary", per_node2[0].round() as u64));
    let from_slurm: f64 = lines[1]
        .strip_prefix(&format!("{id2}|n2|"))
        .and_then(|l| l.strip_suffix("|slurm"))
        .unwrap()
        .parse()
        .unwrap();
    assert!(
        (from_slurm - (slurm_j2 - per_node2[0])).abs() <= 1.0,
        "{from_slurm} vs {slurm_j2} - {}",
        per_node2[0]
    );
    assert!(
        common::rel_err(from_slurm, per_node2[1]) < 0.01,
        "n2 from Slurm {from_slurm} J vs its record {} J",
        per_node2[1]
    );
    // The report sums both jobs, marks the part that is Slurm's, and prices it.
    let report = |uid: u32, which: &[&str]| {
        let mut command = lab.command_as(&*WATTSON, uid, uid);
        command.arg("-c").arg(&login).args(["report", "-S", "now-1hours", "--json"]).args(which);
        let out = command.output().unwrap();
        assert_ok(&out);
        serde_json::from_slice::<serde_json::Value>(&out.stdout).unwrap()
    };
    let totals = report(0, &[]);
    let groups: Vec<&str> = totals.as_array().unwrap().iter().map(|t| t["group"].as_str().unwrap()).collect();
    assert_eq!(groups, ["root", "TOTAL"], "{totals}");
    let root = &totals[0];
    let kwh = (wattson_j + per_node2[0] + from_slurm) / 3.6e6;
    let field = |name: &str| root[name].as_f64().unwrap();
    assert_eq!(root["jobs"], 2);
    // (to the joule: acct printed n2's part in whole joules)
    let joule = 1.0 / 3.6e6;
    assert!((field("energy_kwh") - kwh).abs() < joule, "{root} vs {kwh} kWh");
    assert!((field("from_slurm_kwh") - from_slurm / 3.6e6).abs() < joule, "{root}");
    let (cost, co2) = (field("cost") / field("energy_kwh"), field("co2_kg") / field("energy_kwh"));
    assert!((cost - 0.2).abs() < 1e-9 && (co2 - 0.4).abs() < 1e-9, "{root}");
    assert!(field("gpu_hours") > 3.0 * 10.0 / 3600.0, "three nodes' GPU 0 for 10 s or more: {root}");

    // A user sees only their own jobs: Slurm's PrivateData=jobs hides root's jobs from nobody
    // even with -a, and nobody's own job shows.
    let nobody = 65534;
    // Under PrivateData, slurmdbd shows a user the jobs of their associations: nobody gets one
    // before submitting.
    lab.run_ok("sacctmgr", &["-i", "add", "user", "name=nobody", "account=root"]);
    // slurmctld learns of it from slurmdbd a moment later; a job submitted before gets none.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !lab
        .run_ok("scontrol", &["show", "assoc_mgr", "users=nobody", "flags=assoc"])
        .contains("UserName=nobody")
    {
        assert!(Instant::now() < deadline, "slurmctld never learned of nobody's association");
        std::thread::sleep(Duration::from_millis(200));
    }
    let id3 = lab
        .sbatch(
            &["--uid", &nobody.to_string(), "-o", "/dev/null", "-w", "n1", "--gres=gpu:1"],
            "#!/bin/sh\nsleep 3\n",
        )
        .unwrap();
    lab.wait_running(id3, Duration::from_secs(60));
    daemons[0].begin(&id3.to_string(), nobody, "0");
    lab.wait_job(id3, Duration::from_secs(60));
    daemons[0].end(&id3.to_string());
    assert_ok(
        &lab.command(&*WATTSON).arg("-c").arg(&controller).args(["summary", "write"]).output().unwrap(),
    );
    for dir in [lab.dir().to_path_buf(), lab.dir().join("etc"), lab.dir().join("run")] {
        std::fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    }
    let acct_as = |uid: u32, which: &[&str]| {
        let mut command = lab.command_as(&*WATTSON, uid, uid);
        command.arg("-c").arg(&login).arg("acct").args(which).args([
            "-n",
            "-P",
            "-o",
            "JobID,NodeList,Source",
        ]);
        let out = command.output().unwrap();
        assert_ok(&out);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let everyone = ["-a", "-S", "now-1hours"];
    // slurmdbd applies a new user's associations to PrivateData a moment after sacctmgr
    // returns: nobody's own job may take a few seconds to show.
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut mine = acct_as(nobody, &everyone);
    while mine.is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(500));
        mine = acct_as(nobody, &everyone);
    }
    assert_eq!(mine, format!("{id3}|n1|summary\n"), "{}", lab.log("slurmdbd"));
    assert_eq!(acct_as(nobody, &["-j", &id.to_string()]), "", "root's job, asked for by id");
    let all = acct_as(0, &everyone);
    for job in [id, id2, id3] {
        assert!(all.contains(&format!("{job}|n1|summary")), "root sees every job: {all}");
    }
    let groups = |totals: serde_json::Value| -> Vec<String> {
        totals.as_array().unwrap().iter().map(|t| t["group"].as_str().unwrap().to_string()).collect()
    };
    assert_eq!(groups(report(nobody, &["-a"])), ["nobody", "TOTAL"]);
    assert_eq!(groups(report(0, &["-a"])), ["nobody", "root", "TOTAL"]);
    lab.stop();
}

/// Runs a job on both nodes' GPU 0 (every GPU busy at different loads: only the job's may
/// count), begun and ended on each node's wattsond by hand as the SPANK plugin would; its id,
/// each node's record energy (J) and Slurm's energy for the job (J).
fn two_node_job(lab: &SlurmLab, daemons: &[Node]) -> (u32, Vec<f64>, f64) {
    // Every GPU busy, at different loads: only the job's GPU on each node may count.
    for (d, loads) in daemons.iter().zip([[0.9, 0.3], [0.6, 0.8]]) {
        for (gpu, load) in loads.into_iter().enumerate() {
            d.sim.set_load(gpu as u32, load).unwrap();
        }
    }
    let dir = daemons[0].dir.path().display().to_string();
    let script = format!("#!/bin/sh\nsleep 10\ntouch {dir}/done-$SLURM_JOB_ID\nsleep 1\n");
    let id = lab.sbatch(&["-N", "2", "--gres=gpu:1"], &script).unwrap();
    let done = daemons[0].dir.path().join(format!("done-{id}"));
    lab.wait_running(id, Duration::from_secs(60));
    // A note as job_submit writes it: the summary goes after it.
    lab.run_ok("scontrol", &["update", &format!("job={id}"), "AdminComment=wattson:policy=balanced"]);
    // What the SPANK prolog does on each node (here by hand: one plugstack for both nodes of
    // this lab would name one wattsond): the job's GPU 0 begins on each node's wattsond.
    for d in daemons {
        d.begin(&id.to_string(), 0, "0");
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !done.exists() {
        assert!(Instant::now() < deadline, "the job never finished its work");
        std::thread::sleep(Duration::from_millis(50));
    }
    // The work is done: the GPUs go idle, as real ones do when the job's processes exit.
    for d in daemons {
        for gpu in 0..2 {
            d.sim.set_load(gpu, 0.0).unwrap();
        }
    }
    assert_eq!(lab.wait_job(id, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    let per_node: Vec<f64> = daemons
        .iter()
        .map(|d| {
            d.end(&id.to_string());
            d.record(&id.to_string()).energy_j()
        })
        .collect();
    let sacct = || {
        lab.run_ok(
            "sacct",
            &["-n", "-P", "-X", "-j", &id.to_string(), "-o", "JobID,NNodes,ConsumedEnergyRaw"],
        )
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    let slurm_j: f64 = loop {
        let out = sacct();
        let energy = out
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{id}|2|")))
            .and_then(|e| e.trim().parse::<f64>().ok())
            .filter(|&e| e > 0.0);
        if let Some(e) = energy {
            break e;
        }
        assert!(Instant::now() < deadline, "sacct shows no energy: {out}\n{}", lab.log("slurmdbd"));
        std::thread::sleep(Duration::from_millis(300));
    };
    (id, per_node, slurm_j)
}
