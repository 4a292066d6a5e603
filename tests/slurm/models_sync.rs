//! What the DVFS models learn on one node decides jobs on every node: a real Slurm with two
//! GPU nodes on loopback, each with its own wattsond (simulated H100s, the models on, the
//! controller's link on the node's own address), and `wattson models sync` on the controller.

use wattson_harness::node as common;
use wattson_harness::slurm_lab;

use std::time::{Duration, Instant};

use common::{Node, assert_ok};
use slurm_lab::{LabNode, LabOptions, SlurmLab};
use wattson_engine::ModelTable;
use wattson_types::model_owner::ModelOwner;

static WATTSON: std::sync::LazyLock<std::path::PathBuf> =
    std::sync::LazyLock::new(|| wattson_harness::programs::program("wattson"));
const GPU: &str = "NVIDIA H100 80GB HBM3";

/// A node whose wattsond decides by the models with short probe windows, its link on `addr`.
fn probing_node(name: &str, addr: &str, port: u16, munge: &std::path::Path) -> Node {
    let mut node = Node::with_sections(
        fake_nvml::Config::uniform("H100", 2),
        "100ms",
        "",
        "probe_window = \"1s\"\nprobe_settle = \"200ms\"\npower_limit_step_w = 5\n",
    );
    let text = std::fs::read_to_string(&node.config)
        .unwrap()
        .replace("node_name = \"n1\"", &format!("node_name = \"{name}\""));
    std::fs::write(
        &node.config,
        format!("{text}\n[link]\nlisten = \"{addr}:{port}\"\nmunge_socket = {munge:?}\n"),
    )
    .unwrap();
    node.sim.set_workload(0, Some(fake_nvml::Workload { t0_s: 0.02, d_s_mhz: 158.4 })).unwrap();
    node.sim.set_load(0, 1.0).unwrap();
    node.start();
    node
}

/// `wattson job begin` of job `id` for alice on GPU 0, min-energy within 10%, tag `bert`.
fn begin(node: &Node, id: &str) {
    assert_ok(&node.wattson(&[
        "job",
        "begin",
        "--job",
        id,
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
}

#[test]
fn a_tag_learned_on_one_node_is_decided_on_another_and_at_submit() {
    let nodes: Vec<LabNode> = ["n1", "n2"]
        .iter()
        .enumerate()
        .map(|(i, n)| LabNode { addr: format!("127.0.0.{}", i + 2), ..LabNode::new(n, 2, "h100") })
        .collect();
    let lab = SlurmLab::start(LabOptions { nodes: nodes.clone(), ..LabOptions::default() });
    let munge = lab.dir().join("run/munge.sock");
    let port = slurm_lab::free_port();
    let (a, b) =
        (probing_node("n1", &nodes[0].addr, port, &munge), probing_node("n2", &nodes[1].addr, port, &munge));
    let models_file = lab.dir().join("models.json");
    let controller = lab.dir().join("etc/wattson.toml");
    std::fs::write(
        &controller,
        format!(
            "[ctld]\nmeasurements_file = {:?}\n[engine]\nmodels_file = {models_file:?}\n[link]\nport = {port}\nmunge_socket = {munge:?}\n",
            lab.dir().join("measurements.json"),
        ),
    )
    .unwrap();

    // Node A probes the unknown tag and settles.
    begin(&a, "1");
    let deadline = Instant::now() + Duration::from_secs(40);
    let learned = loop {
        if let Some(w) = a.record("1").dvfs.and_then(|d| d.setting) {
            break w;
        }
        assert!(Instant::now() < deadline, "node A never settled: {}", a.log());
        std::thread::sleep(Duration::from_millis(100));
    };
    std::thread::sleep(Duration::from_secs(1));
    a.end("1");
    assert!(learned < 700.0, "{learned}");

    let sync = lab.command(&*WATTSON).arg("-c").arg(&controller).args(["models", "sync"]).output().unwrap();
    assert_ok(&sync);
    let said = String::from_utf8_lossy(&sync.stdout).into_owned();
    assert!(said.contains("from 2 node(s) (n1,n2)") && said.contains("the nodes took 1"), "{said}");

    // At submit: the controller's model table (job_submit's) has alice's model of the tag.
    let table = ModelTable::from_json(&std::fs::read_to_string(&models_file).unwrap()).unwrap();
    assert!(table.get(&ModelOwner::User(1000), "bert", GPU).is_some(), "{table:?}");

    // On node B: the first run there is decided from its first second, no probing.
    begin(&b, "2");
    let d = b.record("2").dvfs.unwrap();
    let setting = d.setting.expect("decided at begin from the merged model");
    assert!(d.probed.is_empty(), "{d:?}");
    assert_eq!(b.sim.gpu_state(0).unwrap().power_limit_mw, (setting * 1000.0) as u32);
    std::thread::sleep(Duration::from_secs(1));
    b.end("2");

    // B's run measured its settled window: the next sync hands that back to A; the one after
    // finds nothing new.
    let sync = || {
        let out =
            lab.command(&*WATTSON).arg("-c").arg(&controller).args(["models", "sync"]).output().unwrap();
        assert_ok(&out);
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let second = sync();
    assert!(second.contains("the nodes took 1"), "{second}");
    let third = sync();
    assert!(third.contains("the nodes took 0"), "{third}");
    lab.stop();
}
