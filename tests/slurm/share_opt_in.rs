//! Users' opt-in to GPU sharing on a real Slurm (Debian's 22.05 by default, started by the
//! harness on loopback), with wattsond on one simulated H100 whose Slurm node has 4 shards:
//! job_submit turns an opted-in job's whole GPU into 2 shards, so two such jobs run on the GPU
//! at once, each charged its part; jobs that did not opt in keep the whole GPU and wait.

use std::time::Duration;

use wattson_harness::node::Node;
use wattson_harness::slurm_lab::{LabNode, SlurmLab};
use wattson_types::apportion::Split;
use wattson_types::job::JobState;

use super::shared_gpus::{assert_parts_add_up, lab_on, wait_recorded};

/// wattsond on one simulated H100 with 4 shards per GPU in `[policy]` and partition
/// `inference` opted in by default; a one-node Slurm with partitions `lab` (the default) and
/// `inference` on that node.
fn opt_in_cluster() -> (Node, SlurmLab) {
    let policy = "enact = \"share\"\nshards_per_gpu = 4\nshare_partitions = [\"inference\"]\n";
    let node = Node::with_sections(fake_nvml::Config::uniform("H100", 1), "200ms", policy, "");
    let lab_node = LabNode { shards: 4, cpus: 4, ..LabNode::new("n1", 1, "h100") };
    lab_on(node, lab_node, false, "PartitionName=inference Nodes=n1 MaxTime=INFINITE State=UP")
}

fn field(lab: &SlurmLab, id: u32, name: &str) -> String {
    lab.job_info(id).and_then(|j| j.fields.get(name).cloned()).unwrap_or_default()
}

#[test]
fn opted_in_one_gpu_jobs_share_the_gpu_and_the_others_keep_it_whole() {
    let (node, lab) = opt_in_cluster();
    node.sim.set_load(0, 0.6).unwrap();
    // sbatch wraps the help: compare its words.
    let help = lab.run_ok("sbatch", &["--help"]).split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(
        help.contains(
            "--energy-share=yes|no yes: wattson may put the job on a GPU another opted-in job uses"
        ),
        "{help}"
    );
    // A bad value is refused at sbatch, saying what is allowed.
    let err = lab.sbatch(&["--gres=gpu:1", "--energy-share=maybe"], "#!/bin/sh\ntrue\n").unwrap_err();
    assert!(err.contains("--energy-share=maybe: not one of yes, no"), "{err}");
    let err = lab.sbatch(&["--gres=gpu:1", "--export=ALL,WATTSON_ENERGY_SHARE=1"], "#!/bin/sh\ntrue\n");
    assert!(err.unwrap_err().contains("wattson: --energy-share=1: not one of yes, no"));

    let long = "#!/bin/sh\nsleep 6\n";
    let shared = ["--gres=gpu:1", "--energy-share=yes"];
    let (a, said) = lab.sbatch_verbose(&shared, long).unwrap();
    assert!(said.contains("asks 2 shards (half a GPU)"), "{said}");
    let b = lab.sbatch(&shared, long).unwrap();
    wait_recorded(&node, &lab, a);
    wait_recorded(&node, &lab, b);
    let states = [a, b].map(|id| lab.job_info(id).map(|j| j.state).unwrap_or_default());
    assert_eq!(states, ["RUNNING", "RUNNING"], "both run on the one GPU at once\n{}", lab.all_logs());
    for id in [a, b] {
        assert!(field(&lab, id, "TresPerNode").ends_with("shard:2"), "{}", field(&lab, id, "TresPerNode"));
        assert!(
            field(&lab, id, "AdminComment").ends_with(",share=yes,shards=2"),
            "{}",
            field(&lab, id, "AdminComment")
        );
    }
    // While they run: one that says no, one outside the default partitions, one inside it.
    let short = "#!/bin/sh\nsleep 1\n";
    let refused = lab.sbatch(&["--gres=gpu:1", "--energy-share=no", "-p", "inference"], short).unwrap();
    let plain = lab.sbatch(&["--gres=gpu:1"], short).unwrap();
    let by_default = lab.sbatch(&["--gres=gpu:1", "-p", "inference"], short).unwrap();
    let per_job = lab.sbatch(&["--gpus=1", "--energy-share=yes"], short).unwrap();
    assert!(
        field(&lab, per_job, "TresPerNode").ends_with("shard:2"),
        "{}",
        field(&lab, per_job, "TresPerNode")
    );
    assert_eq!(field(&lab, per_job, "TresPerJob"), "", "--gpus=1 became shards per node");
    assert!(
        field(&lab, refused, "AdminComment").ends_with(",share=no"),
        "{}",
        field(&lab, refused, "AdminComment")
    );
    assert!(!field(&lab, plain, "AdminComment").contains("share"), "{}", field(&lab, plain, "AdminComment"));
    assert!(field(&lab, by_default, "AdminComment").ends_with(",share=yes,shards=2"));
    for id in [refused, plain] {
        assert!(field(&lab, id, "TresPerNode").ends_with("gpu:1"), "{}", field(&lab, id, "TresPerNode"));
    }
    std::thread::sleep(Duration::from_millis(1500));
    for id in [refused, plain, by_default, per_job] {
        let state = lab.job_info(id).map(|j| j.state).unwrap_or_default();
        assert_eq!(state, "PENDING", "job {id}: the GPU's shards are all held\n{}", lab.all_logs());
    }
    assert_eq!([a, b].map(|id| node.record(&id.to_string()).state), [JobState::Running; 2]);
    // The two waiting shard jobs are held until both sharing jobs end: otherwise one could
    // join whichever of the two ends last, and the parts below would have a third holder.
    let waiting = [by_default, per_job].map(|id| id.to_string());
    lab.run_ok("scontrol", &["hold", &waiting[0], &waiting[1]]);
    for id in [a, b] {
        assert_eq!(lab.wait_job(id, Duration::from_secs(90)).state, "COMPLETED", "{}", lab.all_logs());
    }
    lab.run_ok("scontrol", &["release", &waiting[0], &waiting[1]]);
    for id in [refused, plain, by_default, per_job] {
        assert_eq!(lab.wait_job(id, Duration::from_secs(90)).state, "COMPLETED", "{}", lab.all_logs());
    }
    let records: Vec<_> = [a, b].iter().map(|id| node.record(&id.to_string())).collect();
    for r in &records {
        assert_eq!((r.state, r.gpus.len(), r.gpus[0].index), (JobState::Completed, 1, 0));
        assert_eq!(r.split(), Some(Split::Equal), "job {}: shared, and said so", r.key);
        assert_eq!(r.hints.share, Some(true));
    }
    assert_parts_add_up(&node, &records);
    // The whole-GPU jobs began only once both sharing jobs had ended, and had the GPU alone.
    let ended = records.iter().map(|r| r.end_ns.unwrap()).max().unwrap();
    for (id, share) in [(refused, Some(false)), (plain, None)] {
        let r = node.record(&id.to_string());
        assert_eq!(r.hints.share, share, "job {id}'s hint as recorded");
        assert!(r.begin_ns >= ended, "job {id} began while the sharing jobs ran");
    }
    assert_eq!(node.record(&by_default.to_string()).hints.share, Some(true), "the partition's default");

    // A job naming no partition is judged by Slurm's default one (`lab`), once it is listed
    // (job_submit rereads wattson.toml when it changes).
    let toml = std::fs::read_to_string(&node.config).unwrap();
    let listed =
        toml.replace("share_partitions = [\"inference\"]", "share_partitions = [\"inference\", \"lab\"]");
    assert_ne!(toml, listed);
    std::fs::write(&node.config, listed).unwrap();
    let unnamed = lab.sbatch(&["--gres=gpu:1"], "#!/bin/sh\ntrue\n").unwrap();
    assert!(
        field(&lab, unnamed, "AdminComment").ends_with(",share=yes,shards=2"),
        "{}",
        field(&lab, unnamed, "AdminComment")
    );
    assert_eq!(lab.wait_job(unnamed, Duration::from_secs(60)).state, "COMPLETED", "{}", lab.all_logs());
    let shown = node.wattson(&[
        "acct",
        "-j",
        &format!("{a},{refused},{plain}"),
        "-X",
        "-P",
        "-n",
        "-o",
        "JobID,Share",
    ]);
    let shown = String::from_utf8_lossy(&shown.stdout).into_owned();
    assert_eq!(shown, format!("{a}|yes\n{refused}|no\n{plain}|\n"));
}
