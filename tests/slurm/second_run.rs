//! A workload tag's second run through real Slurm: decided at submission from what its first
//! run taught the node, and held on its GPU from its first second, on either knob.

use wattson_harness::node as common;

use std::time::{Duration, Instant};

use common::Node;
use wattson_engine::Knob;

use super::slurm::{Cluster, cluster_on};

/// `enact = "model"` (the default) through a real Slurm, on the power-limit knob: a tag's first
/// run probes and settles within its bound; its second run is decided at submit (AdminComment
/// shows the model's prediction, from the table the node wrote) and runs at that setting from
/// its first second, with no probe; `wattson acct` shows what was done.
#[test]
fn a_tags_second_run_is_decided_at_submit_and_runs_there_from_its_first_second() {
    second_run_decided_at_submit(Knob::PowerLimit);
}

/// The same on the SM-clock knob (`[engine] knob = "sm-clock"`): locked clocks, in MHz.
#[test]
fn on_the_sm_clock_knob_a_tags_second_run_is_decided_at_submit() {
    second_run_decided_at_submit(Knob::SmClock);
}

fn second_run_decided_at_submit(knob: Knob) {
    let node = Node::with_sections(
        fake_nvml::Config::uniform("H100", 4),
        "100ms",
        "",
        &format!(
            "probe_window = \"1s\"\nprobe_settle = \"200ms\"\npower_limit_step_w = 5\nknob = \"{}\"\n",
            knob.as_str()
        ),
    );
    for gpu in 0..4 {
        node.sim.set_workload(gpu, Some(fake_nvml::Workload { t0_s: 0.02, d_s_mhz: 158.4 })).unwrap();
        node.sim.set_load(gpu, 1.0).unwrap();
    }
    let top = match knob {
        Knob::PowerLimit => 700.0,
        Knob::SmClock => 1980.0,
    };
    // What the fake GPU holds, on the knob's scale.
    let held = |c: &Cluster, gpu: u32| {
        let gs = c.node.sim.gpu_state(gpu).unwrap();
        match knob {
            Knob::PowerLimit => Some(f64::from(gs.power_limit_mw) / 1000.0),
            Knob::SmClock => gs.locked_clocks_mhz.map(|(lo, hi)| {
                assert_eq!(lo, hi, "the clock is locked at one value");
                f64::from(hi)
            }),
        }
    };
    let unit = knob.unit();
    let c = cluster_on(node, "", &[], false, "");
    let args = ["--gres=gpu:1", "--energy=min-energy", "--energy-slowdown=10", "--energy-tag=bert"];
    let first = c.lab.sbatch(&args, "#!/bin/sh\nsleep 12\n").unwrap();
    let info = c.lab.wait_job(first, Duration::from_secs(90));
    assert_eq!(info.state, "COMPLETED", "{}", c.lab.all_logs());
    assert!(info.get("AdminComment").contains("tag=bert,model=none"), "{:?}", info.fields);
    let probed = c.node.record(&first.to_string()).dvfs.unwrap();
    let learned = probed.setting.expect("the first run settled");
    assert_eq!(probed.knob, knob);
    assert!(probed.probed.len() >= 3 && probed.probed[0] == top && learned < top, "{probed:?}");

    let second = c.lab.sbatch(&args, "#!/bin/sh\nsleep 4\n").unwrap();
    // From its first second: as soon as the node knows the job, its GPU is at the setting.
    let deadline = Instant::now() + Duration::from_secs(30);
    let (gpu, setting) = loop {
        let out = c.node.wattson(&["acct", "-j", &second.to_string(), "--json"]);
        if !common::parse_acct_json(&out).is_empty() {
            let record = c.node.record(&second.to_string());
            let setting = record.dvfs.as_ref().and_then(|d| d.setting).expect("decided at begin");
            break (record.gpus[0].index, setting);
        }
        assert!(Instant::now() < deadline, "job {second} never reached the node\n{}", c.lab.all_logs());
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(held(&c, gpu), Some(setting));
    let info = c.lab.wait_job(second, Duration::from_secs(60));
    let comment = info.get("AdminComment");
    assert!(
        comment.contains("tag=bert,model=") && comment.contains(&format!("{unit}(slowdown")),
        "{comment}"
    );
    assert!(
        comment.contains(&format!(":{setting:.0}{unit}(")),
        "submit predicted what the node ran: {comment} vs {setting}"
    );
    let d = c.node.record(&second.to_string()).dvfs.unwrap();
    assert!(d.probed.is_empty(), "the second run probed: {d:?}");
    let id = second.to_string();
    let out = c.node.wattson(&["acct", "-j", &id, "-X", "-n", "-P", "-o", "Setting,Probes,Slowdown"]);
    common::assert_ok(&out);
    let row = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(row.starts_with(&format!("{setting:.0}{unit}|0|")), "{row}");
    let slowdown: f64 = row.trim().rsplit('|').next().unwrap().trim_end_matches('%').parse().unwrap();
    assert!(slowdown <= 10.0, "the bound held: {row}");
    // After the job the GPU is back at its defaults on either knob.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let gs = c.node.sim.gpu_state(gpu).unwrap();
        if (gs.power_limit_mw, gs.locked_clocks_mhz) == (700_000, None) {
            break;
        }
        assert!(Instant::now() < deadline, "GPU {gpu} not restored: {gs:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
}
