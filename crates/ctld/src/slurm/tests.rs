//! Parsing real Slurm 22.05 output (lines captured from the test lab).

use super::*;

const IDLE: &str = "NodeName=n1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=0.51 AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:h100:2 NodeAddr=127.0.0.1 NodeHostName=localhost Port=39589 Version=22.05.8 OS=Linux 6.18.44 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=2000 AllocMem=0 FreeMem=21796 Sockets=2 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=lab,wattson  BootTime=2026-11-23T17:50:21 SlurmdStartTime=2026-11-23T23:36:19 LastBusyTime=2026-11-23T23:36:19 CfgTRES=cpu=2,mem=2000M,billing=2,gres/gpu=2 AllocTRES= CapWatts=n/a CurrentWatts=0 AveWatts=0 ExtSensorsJoules=n/s ExtSensorsWatts=0 ExtSensorsTemp=n/s";
const MIXED_USED: &str = "NodeName=n4 CPUAlloc=1 Gres=gpu:a100:2,gpu:h100:2 GresDrain=N/A GresUsed=gpu:a100:2(IDX:0-1),gpu:h100:1(IDX:0) State=MIXED CfgTRES=cpu=2 AllocTRES=cpu=1";
const MIXED_UNCOUNTED: &str = "NodeName=n1 CPUAlloc=1 CPUEfctv=2 Gres=gpu:h100:2 State=MIXED Weight=1 CfgTRES=cpu=2,mem=2000M,billing=2 AllocTRES=cpu=1 CurrentWatts=0";
const DRAINING: &str = "NodeName=n2 CPUAlloc=0 Gres=gpu:h100:2 State=IDLE+POWERING_DOWN Weight=1 CfgTRES=cpu=2,gres/gpu=2 AllocTRES= ExtSensorsTemp=n/s Reason=POWER_DOWN_ASAP [nobody@2026-11-23T23:36:21]";
const ADMIN: &str = "NodeName=n3 CPUAlloc=0 Gres=gpu:h100:2 State=IDLE+DRAIN Weight=1 CfgTRES=cpu=2,gres/gpu=2 AllocTRES= Reason=bad fan, replace [root@2026-11-23T23:36:21]";

#[test]
fn nodes_power_gpus_and_reasons() {
    let text = [IDLE, MIXED_UNCOUNTED, DRAINING, ADMIN].join("\n");
    let nodes = parse_nodes(&text).unwrap();
    let [idle, mixed, draining, admin] = &nodes[..] else { panic!("{nodes:?}") };
    assert_eq!((idle.power, idle.gpus, idle.alloc_gpus, idle.free_gpus()), (Power::On, 2, Some(0), 2));
    assert_eq!(idle.gpu_type.as_deref(), Some("h100"));
    assert!(idle.is_idle() && !idle.is_held_by_admin());
    // Without gres/gpu in the TRES, a node with a job counts as full.
    assert_eq!((mixed.alloc_gpus, mixed.free_gpus(), mixed.is_idle()), (None, 0, false));
    assert_eq!(draining.power, Power::PoweringDown);
    assert!(!draining.is_held_by_admin(), "wattson's own power_down_asap drain");
    assert_eq!(admin.reason, "bad fan, replace");
    assert!(admin.is_held_by_admin());
    let used = &parse_nodes(MIXED_USED).unwrap()[0];
    assert_eq!((used.gpus, used.alloc_gpus, used.free_gpus()), (4, Some(3), 1));
}

/// Two GPUs, 8 shards; shard jobs on both GPUs, then on GPU 0 only (the 22.05 lab's
/// `GresUsed`, the rest of the line cut).
const SHARDS_ON_BOTH: &str = "NodeName=n1 CPUAlloc=3 Gres=gpu:h100:2,shard:h100:8 GresDrain=N/A GresUsed=gpu:h100:0(IDX:N/A),shard:h100:2(IDX:0-1) State=MIXED Weight=1";
const SHARDS_ON_ONE: &str = "NodeName=n1 CPUAlloc=1 Gres=gpu:h100:2,shard:h100:8 GresDrain=N/A GresUsed=gpu:h100:0(IDX:N/A),shard:h100:2(IDX:0) State=MIXED Weight=1";

#[test]
fn a_gpu_that_holds_shards_is_not_free_and_a_shard_job_takes_a_gpu() {
    let both = &parse_nodes(SHARDS_ON_BOTH).unwrap()[0];
    assert_eq!((both.gpus, both.alloc_gpus, both.free_gpus()), (2, Some(2), 0));
    let one = &parse_nodes(SHARDS_ON_ONE).unwrap()[0];
    assert_eq!((one.alloc_gpus, one.free_gpus()), (Some(1), 1));
    let mixed = "NodeName=n1 Gres=gpu:4,shard:16 GresUsed=gpu:2(IDX:0,3),shard:4(IDX:1-2) State=MIXED";
    assert_eq!(parse_nodes(mixed).unwrap()[0].free_gpus(), 0);
    // 24.11 and 26.05 give each GPU's shards used of its total.
    let counted = "NodeName=n1 Gres=gpu:h100:2,shard:h100:8 GresUsed=gpu:h100:0(IDX:N/A),shard:h100:2(2/4,0/4) State=MIXED";
    let counted = &parse_nodes(counted).unwrap()[0];
    assert_eq!((counted.shard_gpus.as_slice(), counted.free_gpus()), (&[0][..], 1));
    let jobs = parse_jobs(
        "7|RUNNING|None|1|gres:shard:2|2026-11-23T23:36:19|0:05|1:00|100|n1|lab||0\n\
         8|PENDING|Resources|1|gres/shard:2|2026-11-23T23:36:19|0:00|1:00|100||lab||0\n",
    )
    .unwrap();
    assert_eq!(jobs.iter().map(|j| j.gpus).collect::<Vec<_>>(), [1, 1], "part of one GPU each");
}

#[test]
fn powered_down_and_resuming_nodes() {
    let off = parse_nodes("NodeName=n2 CPUAlloc=0 Gres=gpu:2 State=IDLE+POWERED_DOWN").unwrap();
    assert_eq!(off[0].power, Power::Off);
    let up = parse_nodes("NodeName=n2 CPUAlloc=2 Gres=gpu:2 State=MIXED+POWERING_UP").unwrap();
    assert_eq!(up[0].power, Power::PoweringUp);
    let failed =
        parse_nodes("NodeName=n2 Gres=gpu:2 State=DOWN+POWERED_DOWN Reason=ResumeTimeout reached").unwrap();
    assert!(failed[0].is_held_by_admin(), "down~ is not wattson's to use");
    assert!(failed[0].resume_failed());
    let retrying =
        parse_nodes("NodeName=n2 Gres=gpu:2 State=DOWN+POWERING_UP Reason=ResumeTimeout reached").unwrap();
    assert!(!retrying[0].resume_failed(), "a retry under way has not failed yet");
    assert!(parse_nodes("Gres=gpu:2 State=IDLE").is_err());
}

#[test]
fn jobs_gpus_times_and_queue_state() {
    let text = "7|PENDING|Priority|3|gres:gpu:2|2026-11-23T23:36:19|0:00|UNLIMITED|4294901759||lab||0\n\
                8|RUNNING|None|1|gres/gpu:h100:1|2026-11-23T23:36:19|1-01:02:03|2-00:00:00|1|gpu[01-02]|lab|gpu01|-250\n\
                9|PENDING|BeginTime|1|N/A|2026-11-23T23:36:19|0:00|30:00|0||lab||0\n";
    let jobs = parse_jobs(text).unwrap();
    assert_eq!((jobs[0].gpus, jobs[0].limit_s, jobs[0].is_queued()), (6, None, true));
    assert_eq!(jobs[1].gpus, 1);
    assert_eq!(
        (jobs[1].nice, &jobs[1].partitions[..], &jobs[1].requested[..]),
        (-250, &["lab".to_string()][..], &["gpu01".to_string()][..])
    );
    assert_eq!(jobs[1].elapsed_s, 86400.0 + 3723.0);
    assert_eq!(jobs[1].limit_s, Some(2.0 * 86400.0));
    assert!(jobs[1].is_running() && !jobs[1].is_queued());
    assert_eq!(
        (jobs[0].nodes.len(), &jobs[1].nodes[..]),
        (0, &["gpu01".to_string(), "gpu02".to_string()][..])
    );
    assert!(!jobs[2].is_queued(), "waiting for its begin time");
    assert_eq!(jobs[2].limit_s, Some(1800.0));
    assert!(jobs[0].submit > 1_700_000_000);
    assert!(parse_jobs("1|PENDING|None").is_err());
    assert!(parse_jobs("1|RUNNING|None|1|N/A|2026-11-23T23:36:19|0:00|30:00|1|n[1-;rm]|lab||0\n").is_err());
}

/// Debian 12's 22.05.8, read as text (its `scontrol` has no `--json`), captured by
/// scripts/capture-slurm-outputs: n1 busy (a 2-GPU job), n2 half busy (a 1-GPU job, weight
/// 7), n3 drained, n4 powered down; a job pending on resources (nice 100), one on a dependency.
#[test]
fn the_text_of_22_05s_daemons() {
    let nodes = parse_nodes(include_str!("../../fixtures/slurm/22.05/nodes.txt")).unwrap();
    let [n1, n2, n3, n4] = &nodes[..] else { panic!("{nodes:?}") };
    assert_eq!(
        (n1.name.as_str(), n1.base.as_str(), n1.alloc_gpus, n1.free_gpus()),
        ("n1", "MIXED", Some(2), 0)
    );
    assert_eq!((n2.weight, n2.alloc_gpus, n2.free_gpus(), n2.alloc_cpus), (7, Some(1), 1, 1));
    assert_eq!((n3.reason.as_str(), n3.flags.clone()), ("capture drain", vec!["DRAIN".to_string()]));
    assert!(n3.is_held_by_admin() && !n2.is_held_by_admin());
    assert_eq!((n4.power, n4.is_idle(), n4.addr.as_str()), (Power::Off, true, "127.0.0.1"));
    assert_eq!(n4.partitions, ["lab", "wattson"]);

    let jobs = parse_jobs(include_str!("../../fixtures/slurm/22.05/squeue.txt")).unwrap();
    let ids: Vec<u32> = jobs.iter().map(|j| j.id).collect();
    assert_eq!(ids, [7, 6, 4, 5]);
    let [waiting, queued, busy, half] = &jobs[..] else { panic!("{jobs:?}") };
    assert_eq!((waiting.reason.as_str(), waiting.gpus, waiting.is_queued()), ("Dependency", 0, false));
    assert_eq!(
        (queued.reason.as_str(), queued.gpus, queued.nice, queued.priority),
        ("Resources", 2, 100, 4294901655)
    );
    assert!(queued.is_queued());
    assert_eq!((queued.requested.clone(), queued.limit_s), (vec!["n1".to_string()], Some(300.0)));
    assert_eq!(
        (busy.priority, busy.nodes.clone(), busy.elapsed_s, busy.limit_s),
        (4294901757, vec!["n1".to_string()], 1.0, Some(600.0))
    );
    assert_eq!((half.gpus, half.nodes.clone()), (1, vec!["n2".to_string()]));
    // 22.05's own priorities fall with each submission and with nice.
    assert!(
        busy.priority > half.priority
            && half.priority > waiting.priority
            && waiting.priority > queued.priority
    );
}

/// 24.11 appends the timeout to the reason a node already had (its `power_down_asap` drain),
/// as captured from the lab: still a failed resume, the controller's to retry.
#[test]
fn a_resume_timeout_appended_to_an_earlier_reason_is_a_failed_resume() {
    let line = "NodeName=n2 CPUAlloc=0 Gres=gpu:h100:2 NodeAddr=127.0.0.3 State=DOWN+POWERED_DOWN Weight=6 \
                Partitions=lab,wattson CfgTRES=cpu=2,mem=2000M,billing=2 AllocTRES= \
                Reason=POWER_DOWN_ASAP : ResumeTimeout reached [root@2026-11-26T10:18:06]";
    let node = &parse_nodes(line).unwrap()[0];
    assert_eq!(node.reason, "POWER_DOWN_ASAP : ResumeTimeout reached");
    assert!(node.resume_failed());
    let own =
        parse_nodes(&format!("NodeName=n2 State=DOWN+POWERED_DOWN Reason=POWER_DOWN_ASAP : {RESUME_FAILED}"))
            .unwrap();
    assert!(own[0].resume_failed());
    let other = parse_nodes(
        "NodeName=n2 Gres=gpu:2 State=DOWN+POWERED_DOWN Reason=bad fan : not ResumeTimeout reached",
    )
    .unwrap();
    assert!(!other[0].resume_failed());
}

/// The retry count the controller writes into a node's reason survives the next failure,
/// kept whole (22.05) or with Slurm's words appended (24.11).
#[test]
fn a_nodes_retries_are_read_back_from_its_reason() {
    let kept = parse_nodes(&format!(
        "NodeName=n2 State=DOWN+POWERED_DOWN Reason={RETRIED} 2 [slurm@2026-11-26T10:18:06]"
    ))
    .unwrap();
    assert!(kept[0].resume_failed());
    assert_eq!(kept[0].retries(), 2);
    let appended = parse_nodes(&format!(
        "NodeName=n2 State=DOWN+POWERED_DOWN Reason={RETRIED} 1 : ResumeTimeout reached"
    ))
    .unwrap();
    assert_eq!((appended[0].resume_failed(), appended[0].retries()), (true, 1));
    let first = parse_nodes("NodeName=n2 State=DOWN+POWERED_DOWN Reason=ResumeTimeout reached").unwrap();
    assert_eq!(first[0].retries(), 0);
}

#[test]
fn jobs_are_put_in_the_order_slurm_tries_them() {
    // 22.05's squeue lists 7, 6, 4, 5; its priorities put 4, 5, 7, then 6 (nice 100).
    let mut jobs = parse_jobs(include_str!("../../fixtures/slurm/22.05/squeue.txt")).unwrap();
    in_slurms_order(&mut jobs);
    assert_eq!(jobs.iter().map(|j| j.id).collect::<Vec<_>>(), [4, 5, 7, 6]);
    // Equal priorities (multifactor with the partition's factor only), listed newest first
    // as squeue did in the lab: the older job first.
    let mut equal = parse_jobs(
        "3|PENDING|ReqNodeNotAvail, UnavailableNodes:n1|1|gres:gpu:1|2026-11-26T10:29:16|0:00|1:00|1000||lab|n1|0\n\
         2|PENDING|Resources|1|gres:gpu:2|2026-11-26T10:29:16|0:00|1:00:00|1000||lab|n1|0\n",
    )
    .unwrap();
    in_slurms_order(&mut equal);
    assert_eq!(equal.iter().map(|j| j.id).collect::<Vec<_>>(), [2, 3]);
}
