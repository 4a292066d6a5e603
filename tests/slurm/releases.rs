//! The lab's Slurm release (`WATTSON_SLURM_RELEASE`, see the harness's `slurm_lab::release`)
//! and a SPANK plugin loaded into a Slurm of another release than the one it was built for:
//! Slurm refuses it, the plugin says why in one line naming both releases, and with
//! `optional` in plugstack.conf jobs run without it. And what 24.05 and later offer a job of
//! several GPUs that may share them, and job_submit's rewrite of such jobs (docs/slurm.md,
//! "GPU sharing").
//! `scripts/test-releases` runs these, and the Slurm-facing subset of `slurm::`, on 24.11 and
//! 26.05.

use std::time::Duration;

use wattson_harness::node as common;
use wattson_harness::slurm_lab::{self, LabOptions, SlurmLab};

/// The version the lab's own `scontrol -V` prints (`slurm-wlm 24.11.5` gives `24.11.5`).
fn lab_version(lab: &SlurmLab) -> String {
    let said = lab.run_ok("scontrol", &["-V"]);
    said.split_whitespace().last().unwrap_or_default().to_string()
}

#[test]
fn the_lab_runs_the_release_asked_for_and_loads_the_plugins_built_for_it() {
    let built = common::build_plugins(false);
    let plugins = tempfile::tempdir().unwrap();
    slurm_lab::install_plugin(&built.join(common::PLUGIN_LIBS[0]), plugins.path(), "spank_wattson.so");
    let lab = SlurmLab::start(LabOptions {
        plugstack: Some(format!("optional {}\n", plugins.path().join("spank_wattson.so").display())),
        ..LabOptions::default()
    });
    let version = lab_version(&lab);
    match &slurm_lab::release().name {
        Some(release) => assert_eq!(wattson_slurm::release_of(&version), Some(release.as_str()), "{version}"),
        // The machine's own Slurm is the one whose headers the workspace is built against.
        None => assert_eq!(version, wattson_slurm::slurm_version()),
    }
    // The plugin loads: sbatch offers its options, and it has nothing to say about releases.
    let help = lab.run_ok("sbatch", &["--help"]);
    assert!(help.contains("--energy"), "{help}");
    let (id, said) = lab.sbatch_verbose(&[], "true").unwrap();
    assert!(!said.contains("was built for Slurm"), "{said}");
    assert_eq!(lab.wait_job(id, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    let slurmd = lab.log("slurmd-n1");
    assert!(!slurmd.contains("Incompatible") && !slurmd.contains("was built for Slurm"), "{slurmd}");
}

#[test]
#[ignore = "needs a lab of another release than the machine's: WATTSON_SLURM_RELEASE=24.11 (scripts/test-releases)"]
fn a_spank_plugin_of_another_release_is_refused_with_both_named_and_jobs_run() {
    assert!(slurm_lab::release().root.is_some(), "set WATTSON_SLURM_RELEASE to 24.11 or 26.05");
    // Built against the machine's own headers (22.05), loaded into the lab's release.
    let built = common::build_plugins_for_installed_slurm();
    let plugins = tempfile::tempdir().unwrap();
    slurm_lab::install_plugin(&built.join(common::PLUGIN_LIBS[0]), plugins.path(), "spank_wattson.so");
    let lab = SlurmLab::start(LabOptions {
        plugstack: Some(format!("optional {}\n", plugins.path().join("spank_wattson.so").display())),
        ..LabOptions::default()
    });
    let running = lab_version(&lab);
    let built_for = wattson_slurm::slurm_version();
    assert_ne!(wattson_slurm::release_of(&running), wattson_slurm::release_of(&built_for));
    let series = wattson_slurm::release_of(&running).unwrap();
    let line = format!(
        "spank_wattson.so was built for Slurm {built_for} but runs in Slurm {series}, which does not load it"
    );

    // Slurm refuses the plugin (its own line names only the plugin's version) and the
    // plugin's line names both. sbatch: no --energy options, and a job without them runs.
    let refused = lab.sbatch(&["--energy=eco"], "true").unwrap_err();
    assert!(refused.contains("energy"), "--energy was accepted: {refused}");
    let (id, said) = lab.sbatch_verbose(&[], "echo ran").unwrap();
    assert_eq!(said.matches(&line).count(), 1, "sbatch said: {said}");
    let info = lab.wait_job(id, Duration::from_secs(60));
    assert_eq!(info.state, "COMPLETED", "{}", lab.all_logs());
    assert_eq!(lab.job_output(id).trim(), "ran");

    // On the node: the same line, and the plugin did nothing (loaded, with no wattsond, its
    // prolog would log that the job is not accounted).
    let slurmd = lab.log("slurmd-n1");
    assert!(slurmd.contains(&line), "{slurmd}");
    assert!(slurmd.contains("Incompatible Slurm plugin"), "{slurmd}");
    assert!(!slurmd.contains("not accounted"), "{slurmd}");
}

/// The shards of job `id`, as `scontrol -d` shows them (`shard:4(2/4,2/4)`).
fn shards_of(lab: &SlurmLab, id: u32) -> String {
    let shown = lab.run_ok("scontrol", &["-d", "-o", "show", "job", &id.to_string()]);
    shown.split_whitespace().find_map(|w| w.strip_prefix("GRES=")).unwrap_or_default().to_string()
}

/// Waits until job `id` runs; its shards then.
fn running_shards(lab: &SlurmLab, id: u32) -> String {
    lab.wait_running(id, Duration::from_secs(30));
    shards_of(lab, id)
}

/// A lab of one node of `gpus` H100s with 4 shards each, where a job may hold shards of
/// several GPUs (`MULTIPLE_SHARING_GRES_PJ`).
fn several_gpus_sharing_lab(gpus: u32) -> SlurmLab {
    let node = slurm_lab::LabNode {
        shards: 4 * gpus,
        cpus: 4 * gpus,
        ..slurm_lab::LabNode::new("n1", gpus, "h100")
    };
    SlurmLab::start(LabOptions {
        nodes: vec![node],
        extra_conf: MULTIPLE_SHARING.into(),
        ..LabOptions::default()
    })
}

/// The slurm.conf line that lets a job hold shards of several GPUs.
const MULTIPLE_SHARING: &str = "SelectTypeParameters=CR_Core,MULTIPLE_SHARING_GRES_PJ\n";

#[test]
#[ignore = "needs a lab of 24.05 or later: WATTSON_SLURM_RELEASE=24.11 (scripts/test-releases)"]
fn a_jobs_shards_cover_half_of_each_of_its_gpus_only_one_task_per_sharing() {
    // What docs/slurm.md says Slurm offers a job of several GPUs that may share them: on a
    // node of two GPUs with 4 shards each, with MULTIPLE_SHARING_GRES_PJ.
    assert!(slurm_lab::release().root.is_some(), "set WATTSON_SLURM_RELEASE to 24.11 or 26.05");
    let lab = several_gpus_sharing_lab(2);
    // Shards asked per job fill one GPU before the next.
    for (asked, held) in [("shard:4", "shard:4(4/4,0/4)"), ("shard:6", "shard:6(4/4,2/4)")] {
        let id = lab.sbatch(&[&format!("--gres={asked}")], "sleep 30").unwrap();
        assert_eq!(running_shards(&lab, id), held);
        lab.run_ok("scancel", &[&id.to_string()]);
        let _ = lab.wait_job(id, Duration::from_secs(30));
    }
    // One task per GPU, each task's shards on a GPU no other task of the job has: half of
    // each, and a second such job takes the other halves.
    let per_task = ["--ntasks=2", "--tres-per-task=gres/shard:2", "--gres-flags=one-task-per-sharing"];
    let a = lab.sbatch(&per_task, "sleep 30").unwrap();
    assert_eq!(running_shards(&lab, a), "shard:4(2/4,2/4)");
    let b = lab.sbatch(&per_task, "sleep 30").unwrap();
    assert_eq!(running_shards(&lab, b), "shard:4(2/4,2/4)");
}

#[test]
#[ignore = "needs a lab of 24.05 or later: WATTSON_SLURM_RELEASE=24.11 (scripts/test-releases)"]
fn opted_in_jobs_of_two_gpus_and_two_tasks_share_both_gpus_each_charged_its_part() {
    // job_submit with `[policy] share_gpus = 2` on a node of two simulated H100s with 4 shards
    // each and MULTIPLE_SHARING_GRES_PJ: a job of 2 GPUs and 2 tasks asks half of each GPU.
    assert!(slurm_lab::release().root.is_some(), "set WATTSON_SLURM_RELEASE to 24.11 or 26.05");
    let policy = "enact = \"share\"\nshards_per_gpu = 4\nshare_gpus = 2\n";
    let node = common::Node::with_sections(fake_nvml::Config::uniform("H100", 2), "200ms", policy, "");
    let lab_node = slurm_lab::LabNode { shards: 8, cpus: 8, ..slurm_lab::LabNode::new("n1", 2, "h100") };
    let (node, lab) = super::slurm::plugged_lab(node, lab_node, false, "", &[], false, MULTIPLE_SHARING);
    node.sim.set_load(0, 0.6).unwrap();
    node.sim.set_load(1, 0.3).unwrap();
    let opted = ["-N1", "-n2", "--gres=gpu:2", "--energy-share=yes"];
    let long = "#!/bin/sh\nsleep 6\n";
    let (a, said) = lab.sbatch_verbose(&opted, long).unwrap();
    assert!(said.contains("each of its 2 tasks asks 2 shards (half a GPU) of a GPU of its own"), "{said}");
    let b = lab.sbatch(&opted, long).unwrap();
    // Both run at once, each on half of both GPUs.
    for id in [a, b] {
        assert_eq!(running_shards(&lab, id), "shard:4(2/4,2/4)", "job {id}\n{}", lab.all_logs());
        super::shared_gpus::wait_recorded(&node, &lab, id);
        let info = lab.job_info(id).unwrap();
        let admin = info.fields.get("AdminComment").cloned().unwrap_or_default();
        assert!(admin.ends_with(",share=yes,shards=2,shared_gpus=2"), "{admin}");
    }
    // One that asks two GPUs for one task keeps them whole, and waits for them.
    let whole =
        lab.sbatch(&["-N1", "-n1", "--gres=gpu:2", "--energy-share=yes"], "#!/bin/sh\ntrue\n").unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(lab.job_info(whole).map(|j| j.state).unwrap_or_default(), "PENDING", "{}", lab.all_logs());
    for id in [a, b, whole] {
        assert_eq!(lab.wait_job(id, Duration::from_secs(90)).state, "COMPLETED", "{}", lab.all_logs());
    }
    assert!(
        lab.log("slurmctld").contains("keeps its GPU request: it asks several GPUs but not one task per GPU"),
        "{}",
        lab.log("slurmctld")
    );
    // Each record holds both GPUs, shared and said so; on each GPU the two parts are each
    // job's share of the fake driver's truth and add up to the GPU's counter.
    let records: Vec<_> = [a, b].iter().map(|id| node.record(&id.to_string())).collect();
    for r in &records {
        let gpus: Vec<u32> = r.gpus.iter().map(|g| g.index).collect();
        assert_eq!(gpus, [0, 1], "job {}", r.key);
        assert_eq!(r.split(), Some(wattson_types::apportion::Split::Equal), "job {}", r.key);
    }
    for k in 0..2 {
        super::shared_gpus::assert_parts_add_up_on(&node, &records, k);
    }
    let alone = node.record(&whole.to_string());
    assert!(alone.begin_ns >= records.iter().map(|r| r.end_ns.unwrap()).max().unwrap());
}

#[test]
#[ignore = "needs a lab of 24.05 or later: WATTSON_SLURM_RELEASE=24.11 (scripts/test-releases)"]
fn slurm_packs_jobs_of_two_gpus_onto_half_used_gpus_and_mixes_partners_of_other_sizes() {
    // Where Slurm puts one-task-per-sharing jobs of 2 GPUs (2 tasks of 2 shards) on a node of
    // four GPUs with 4 shards each (docs/slurm.md): what `wattson ctld` would have to steer
    // to pair such jobs by its model.
    assert!(slurm_lab::release().root.is_some(), "set WATTSON_SLURM_RELEASE to 24.11 or 26.05");
    let lab = several_gpus_sharing_lab(4);
    let per_task = ["-N1", "--ntasks=2", "--tres-per-task=gres/shard:2", "--gres-flags=one-task-per-sharing"];
    // Alike: the second job takes the other halves of the first one's GPUs, the third two free
    // GPUs, the fourth the third one's other halves.
    let ids: Vec<u32> = (0..4).map(|_| lab.sbatch(&per_task, "sleep 60").unwrap()).collect();
    let alike: Vec<String> = ids.iter().map(|&id| running_shards(&lab, id)).collect();
    let (first, second) = ("shard:4(2/4,2/4,0/4,0/4)", "shard:4(0/4,0/4,2/4,2/4)");
    assert_eq!(alike, [first, first, second, second]);
    for id in ids {
        lab.run_ok("scancel", &[&id.to_string()]);
        lab.wait_job(id, Duration::from_secs(30));
    }
    // Mixed: a 1-GPU shard job packs onto a half-used GPU of a 2-GPU job, and the next 2-GPU
    // job straddles: the 2-GPU job's other half, and a free GPU.
    assert_eq!(running_shards(&lab, lab.sbatch(&per_task, "sleep 60").unwrap()), first);
    let one = lab.sbatch(&["-N1", "--gres=shard:2"], "sleep 60").unwrap();
    assert_eq!(running_shards(&lab, one), "shard:2(2/4,0/4,0/4,0/4)");
    let straddling = lab.sbatch(&per_task, "sleep 60").unwrap();
    assert_eq!(running_shards(&lab, straddling), "shard:4(0/4,2/4,2/4,0/4)");
}

#[test]
#[ignore = "needs a lab of 24.05 or later: WATTSON_SLURM_RELEASE=24.11 (scripts/test-releases)"]
fn ctld_pairs_jobs_of_two_gpus_on_both_and_keeps_them_off_the_gpu_of_a_job_of_one() {
    // `wattson ctld` with a pair file and `[policy] share_gpus = 2`, on a node of four
    // simulated H100s with 4 shards each: opted-in jobs of 2 GPUs and 2 tasks pair by the
    // model, and one never goes where Slurm would put it across a job of one GPU and a free
    // GPU (measured above).
    use super::ctld::{ctld_log, wait_live};
    use super::ctld_share::{PAIRS, field, share_ctld, share_lab_of, submit};
    assert!(slurm_lab::release().root.is_some(), "set WATTSON_SLURM_RELEASE to 24.11 or 26.05");
    let work = tempfile::tempdir().unwrap();
    let (node, lab, state) = share_lab_of(work.path(), PAIRS, 4, "share_gpus = 2\n", MULTIPLE_SHARING, "");
    for k in 0..4 {
        node.sim.set_load(k, 0.5).unwrap();
    }
    let _ctld = share_ctld(&lab, &node);
    wait_live(&lab, &state);
    let two = |secs: u32| {
        let args = ["-N1", "-n2", "--gres=gpu:2", "--energy-share=yes", "--energy=min-energy"];
        let args = [&args[..], &["--energy-slowdown=10", "--energy-tag=small"]].concat();
        lab.sbatch(&args, &format!("#!/bin/sh\nsleep {secs}\n")).unwrap()
    };
    // `small` beside `small`: the second job of two GPUs joins the first on both.
    let a = two(20);
    assert_eq!(running_shards(&lab, a), "shard:4(2/4,2/4,0/4,0/4)", "{}", ctld_log(&lab));
    super::shared_gpus::wait_recorded(&node, &lab, a);
    let b = two(20);
    assert_eq!(running_shards(&lab, b), "shard:4(2/4,2/4,0/4,0/4)", "{}", ctld_log(&lab));
    super::shared_gpus::wait_recorded(&node, &lab, b);
    // A job of one GPU takes half of a free GPU.
    let c = submit(&lab, "small", 10);
    assert_eq!(running_shards(&lab, c), "shard:2(0/4,0/4,2/4,0/4)", "{}", ctld_log(&lab));
    super::shared_gpus::wait_recorded(&node, &lab, c);
    // Another job of two GPUs would take the other half of c's GPU and half of the free one:
    // it waits, held, until c ends.
    let d = two(1);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(lab.job_info(d).unwrap().state, "PENDING", "{}", ctld_log(&lab));
    assert!(field(&lab, d, "Reason").starts_with("JobHeld"), "{}", ctld_log(&lab));
    for id in [a, b, c, d] {
        assert_eq!(lab.wait_job(id, Duration::from_secs(90)).state, "COMPLETED", "{}", lab.all_logs());
    }
    let records: Vec<_> = [a, b].iter().map(|id| node.record(&id.to_string())).collect();
    for r in &records {
        let gpus: Vec<u32> = r.gpus.iter().map(|g| g.index).collect();
        assert_eq!(
            (gpus, r.split()),
            (vec![0, 1], Some(wattson_types::apportion::Split::Equal)),
            "job {}",
            r.key
        );
    }
    for k in 0..2 {
        super::shared_gpus::assert_parts_add_up_on(&node, &records, k);
    }
    let (rc, rd) = (node.record(&c.to_string()), node.record(&d.to_string()));
    assert!(rd.begin_ns >= rc.end_ns.unwrap(), "job {d} began beside job {c}");
    assert_eq!(rd.split(), None, "job {d} had its GPUs alone");

    // With three GPUs free beside a lone job of one GPU, a job of two is kept off the node:
    // Slurm would pack it onto that job's GPU and a free one.
    let e = submit(&lab, "small", 8);
    super::shared_gpus::wait_recorded(&node, &lab, e);
    let f = two(1);
    std::thread::sleep(Duration::from_secs(3));
    assert_eq!(lab.job_info(f).unwrap().state, "PENDING", "{}", ctld_log(&lab));
    assert_eq!(field(&lab, f, "ExcNodeList"), "n1", "{}", ctld_log(&lab));
    for id in [e, f] {
        assert_eq!(lab.wait_job(id, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    }
    let (re, rf) = (node.record(&e.to_string()), node.record(&f.to_string()));
    assert!(rf.begin_ns >= re.end_ns.unwrap(), "job {f} began beside job {e}");
}
