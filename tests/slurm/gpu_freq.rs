//! Slurm's own `--gpu-freq` on a real Slurm (Debian's build passes it on and sets no clock
//! itself): wattson stands aside for such a job, leaving its GPUs at the clocks and limits the
//! job asked for, and its record says so; a job beside it without the option is capped as the
//! site's policy says.

use wattson_harness::node as common;
use wattson_harness::slurm_lab;

use std::time::{Duration, Instant};

use common::Node;
use slurm_lab::{LabNode, LabOptions, SlurmLab};
use wattson_types::job::EnergyPolicy;

const MAX_W: u32 = 700_000;

fn power_limits(node: &Node) -> Vec<u32> {
    (0..4).map(|g| node.sim.gpu_state(g).unwrap().power_limit_mw).collect()
}

#[test]
fn a_job_with_gpu_freq_runs_at_its_own_clocks_and_its_record_says_wattson_stood_aside() {
    // Fixed shares: a min-energy job's GPUs are capped at 60% of 700 W.
    let mut node = Node::h100(4);
    node.start();
    let plugins = node.dir.path().join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let built = common::build_plugins(false);
    for (lib, plugin) in
        common::PLUGIN_LIBS.into_iter().zip(["spank_wattson.so", "job_submit_wattson.so", ""])
    {
        if !plugin.is_empty() {
            slurm_lab::install_plugin(&built.join(lib), &plugins, plugin);
        }
    }
    let lab = SlurmLab::start(LabOptions {
        nodes: vec![LabNode::new("n1", 4, "h100")],
        plugstack: Some(format!(
            "required {} config={}\n",
            plugins.join("spank_wattson.so").display(),
            node.config.display()
        )),
        job_submit_plugins: Some("wattson".into()),
        plugin_dir: Some(plugins.clone()),
        daemon_env: vec![("WATTSON_CONFIG".into(), node.config.display().to_string())],
        ..LabOptions::default()
    });
    let script = "#!/bin/sh\nsleep 4\necho \"freq=$SLURM_GPU_FREQ\"\n";
    let own = lab.sbatch(&["--gres=gpu:2", "--energy=min-energy", "--gpu-freq=high"], script).unwrap();
    let capped = lab.sbatch(&["--gres=gpu:2", "--energy=min-energy"], script).unwrap();
    // Both run: the plain job's two GPUs are capped, the --gpu-freq job's two are not. The
    // daemon records a start before it sets the job's caps, so the caps are awaited; at no
    // time may more than the plain job's two GPUs be capped.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let began = |id: u32| node.acct_json(&["-X", "-j", &id.to_string()]).len() == 1;
        let both = began(own) && began(capped);
        let limits = power_limits(&node);
        let at = |w: u32| limits.iter().filter(|&&l| l == w).count();
        assert!(at(420_000) <= 2 && at(420_000) + at(MAX_W) == 4, "{limits:?}");
        if both && at(420_000) == 2 {
            break;
        }
        assert!(Instant::now() < deadline, "jobs never began capped: {limits:?}\n{}", lab.all_logs());
        std::thread::sleep(Duration::from_millis(100));
    }
    let info = lab.wait_job(own, Duration::from_secs(60));
    assert_eq!(info.state, "COMPLETED", "{}", lab.all_logs());
    assert_eq!(info.get("TresFreq"), "gpu:high");
    assert!(
        info.get("AdminComment").contains("wattson:policy=perf,stands-aside=gpu-freq"),
        "{:?}",
        info.fields
    );
    assert!(lab.job_output(own).contains("freq=high"), "{}", lab.job_output(own));
    lab.wait_job(capped, Duration::from_secs(60));

    // The record: what the job asked of Slurm, and that wattson ran it at its own clocks.
    let record = node.record(&own.to_string());
    assert_eq!(record.hints.gpu_freq.as_deref(), Some("high"));
    assert_eq!(record.policy, Some(EnergyPolicy::Perf));
    let other = node.record(&capped.to_string());
    assert_eq!((other.hints.gpu_freq, other.policy), (None, Some(EnergyPolicy::MinEnergy)));
    assert!(lab.log("slurmd-n1").contains("stands aside"), "{}", lab.log("slurmd-n1"));
    lab.stop();
}
