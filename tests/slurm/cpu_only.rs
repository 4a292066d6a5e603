//! A CPU-only node on real Slurm (`task/cgroup`, `jobacct_gather/cgroup`, cgroup v1): wattsond with `scope = "cpu"`
//! and no GPU library (the one configured does not exist), the lab's node with no GPU GRES.
//! Two jobs sharing the node each get their own energy, divided by their real cgroup CPU time,
//! the parts adding up to the node's RAPL energy within 0.5%; a whole-node job gets all of
//! it within 0.1%; `sacct`'s ConsumedEnergy is wattson's figure.
//!
//! Real: Slurm, its cgroups, the jobs' CPU time, the plugins, wattsond. Simulated: RAPL, a
//! powercap tree whose counters a thread of this test advances by 2,400 W (package) and 600 W
//! (DRAM) per CPU the jobs keep busy, as it reads the jobs' cgroups every 10 ms: the truth is
//! what it counted.

use wattson_harness::cpu_node::{self, RaplZone};
use wattson_harness::node as common;
use wattson_harness::slurm_lab::LabNode;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::slurm::{ENERGY_CONF, SACCT_MARGIN, energy_of, plugged_lab};
use common::Node;

/// What the fake RAPL has counted: each job's CPU time last seen (ns) and the zones.
struct Meter {
    jobs: BTreeMap<u32, u64>,
    zones: [RaplZone; 2],
}

/// Package and DRAM µJ per ns of CPU time: 2,400 W and 600 W per busy CPU (far more than a CPU
/// draws, so that Slurm's whole joules stay well within 0.1% of a few CPU-seconds' energy on a
/// busy machine, where a job gets less CPU than it asks).
const PACKAGE_UJ_PER_NS: f64 = 2.4;
const DRAM_UJ_PER_NS: f64 = 0.6;

/// A job's CPU time in its cgroup, as Slurm's jobacct_gather/cgroup makes it on cgroup v1 (jobs
/// run as root here; Debian's build names the tree after the node: `slurm_<node>`).
fn usage(job: u32) -> Option<u64> {
    ["slurm", "slurm_n1"].iter().find_map(|tree| {
        let path = PathBuf::from(format!("/sys/fs/cgroup/cpuacct/{tree}/uid_0/job_{job}/cpuacct.usage"));
        std::fs::read_to_string(path).ok()?.trim().parse().ok()
    })
}

/// [`ENERGY_CONF`] with jobs' CPU time in their cgroups: on cgroup v1, Slurm makes a job's
/// `cpuacct` cgroup only for `jobacct_gather/cgroup` (task/cgroup constrains cpuset, memory and
/// devices alone).
fn energy_conf() -> String {
    let conf = ENERGY_CONF.replace("jobacct_gather/linux", "jobacct_gather/cgroup");
    assert_ne!(conf, ENERGY_CONF);
    conf
}

/// Advances the zones by the CPU time the tracked jobs used since the last look, every 10 ms
/// until `stop`.
fn drive(meter: Arc<Mutex<Meter>>, stop: Arc<AtomicBool>) {
    while !stop.load(Ordering::Relaxed) {
        {
            let mut m = meter.lock().unwrap();
            let mut used = 0u64;
            for (&job, seen) in m.jobs.iter_mut() {
                if let Some(now) = usage(job).filter(|&now| now > *seen) {
                    used += now - *seen;
                    *seen = now;
                }
            }
            if used > 0 {
                m.zones[0].advance((used as f64 * PACKAGE_UJ_PER_NS) as u64);
                m.zones[1].advance((used as f64 * DRAM_UJ_PER_NS) as u64);
            }
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A shell that keeps `n` CPUs busy for `secs` seconds.
fn burn(n: u32, secs: f64) -> String {
    let one = format!("timeout {secs} sh -c 'while :; do :; done' &\n");
    format!("{}wait\n", one.repeat(n as usize))
}

/// Energy µJ counted so far, both zones.
fn counted(meter: &Mutex<Meter>) -> u64 {
    let m = meter.lock().unwrap();
    m.zones[0].truth_uj + m.zones[1].truth_uj
}

#[test]
fn cpu_only_jobs_on_real_slurm_get_their_cgroup_cpu_share_of_rapl_and_a_whole_node_job_all_of_it() {
    let powercap = tempfile::tempdir().unwrap();
    let zones = cpu_node::rapl(powercap.path());
    let node = Node::without_gpus(
        "200ms",
        "nvml_library = \"/nonexistent/libnvidia-ml.so.1\"\n",
        &format!("scope = \"cpu\"\npowercap = {:?}\n", powercap.path()),
    );
    let checked = common::check_config(&node.config);
    common::assert_ok(&checked);
    let said = String::from_utf8_lossy(&checked.stdout).into_owned();
    assert!(said.contains("GPUs: not looked for") && said.contains("can measure: scope \"cpu\""), "{said}");
    let (node, lab) = plugged_lab(node, LabNode::new("n1", 0, "none"), false, "", &[], true, &energy_conf());
    let meter = Arc::new(Mutex::new(Meter { jobs: BTreeMap::new(), zones }));
    let stop = Arc::new(AtomicBool::new(false));
    let driver = {
        let (meter, stop) = (meter.clone(), stop.clone());
        std::thread::spawn(move || drive(meter, stop))
    };
    let track = |id: u32| {
        meter.lock().unwrap().jobs.insert(id, 0);
    };

    // Two jobs of one CPU each share the node: A keeps its CPU busy 4 s, B 2 s; both idle
    // a second before and two after (nothing counted across their begins and ends).
    let script = |secs: f64| format!("#!/bin/sh\nsleep 1\n{}sleep 2\n", burn(1, secs));
    let a = lab.sbatch(&["-c1"], &script(4.0)).unwrap();
    track(a);
    let b = lab.sbatch(&["-c1"], &script(2.0)).unwrap();
    track(b);
    for id in [a, b] {
        assert_eq!(lab.wait_job(id, Duration::from_secs(90)).state, "COMPLETED", "{}", lab.all_logs());
    }
    let shared_uj = counted(&meter);
    // A whole-node job: both CPUs busy 3 s.
    let c = lab.sbatch(&["--exclusive"], &format!("#!/bin/sh\nsleep 1\n{}sleep 3\n", burn(2, 3.0))).unwrap();
    track(c);
    assert_eq!(lab.wait_job(c, Duration::from_secs(90)).state, "COMPLETED", "{}", lab.all_logs());
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    driver.join().unwrap();
    let whole_uj = counted(&meter) - shared_uj;
    let cpu_ns = meter.lock().unwrap().jobs.clone();

    let joules = |id: u32| {
        let record = node.record(&id.to_string());
        assert!(record.gpus.is_empty() && record.end_ns.is_some(), "{record:?}");
        let share = record.node_share.unwrap_or_else(|| panic!("job {id}: no share: {record:?}"));
        assert_eq!(share.scope.as_str(), "cpu");
        record.scoped_energy_mj().unwrap() / 1000.0
    };
    let (ja, jb, jc) = (joules(a), joules(b), joules(c));
    let truth = |id: u32| cpu_ns[&id] as f64 * (PACKAGE_UJ_PER_NS + DRAM_UJ_PER_NS) / 1e6;
    println!(
        "RAPL counted {:.1} J shared, {:.1} J whole-node; job {a} {ja:.1} J (its CPU's {:.1}), \
         job {b} {jb:.1} J (its CPU's {:.1}), job {c} {jc:.1} J; CPU ns {cpu_ns:?}",
        shared_uj as f64 / 1e6,
        whole_uj as f64 / 1e6,
        truth(a),
        truth(b)
    );
    // The two jobs' parts add up to what RAPL counted while they ran, within 0.5%.
    let shared_j = shared_uj as f64 / 1e6;
    assert!(common::rel_err(ja + jb, shared_j) < 5e-3, "{ja} + {jb} vs RAPL {shared_j} J");
    // Each its own: near the energy its CPU time drew. On a loaded machine (the whole Slurm
    // suite beside a release build) one run was 9.5% off, some intervals split by time where a
    // job's CPU time was not read (a job's cgroup gone before wattsond heard of its end, now
    // read as no CPU used): within 15% here, which a split by time alone (the 2:1 CPU ratio
    // taken as 1:1: 26% off) still fails.
    for (id, got) in [(a, ja), (b, jb)] {
        assert!(common::rel_err(got, truth(id)) < 0.15, "job {id}: {got} J vs its CPU's {} J", truth(id));
    }
    // The whole-node job: all of it, within 0.1%.
    let whole_j = whole_uj as f64 / 1e6;
    assert!(common::rel_err(jc, whole_j) < 1e-3, "whole-node job {jc} J vs RAPL {whole_j} J");

    // Slurm's ConsumedEnergy is wattson's figure (its last poll at the extern step's end).
    let deadline = Instant::now() + Duration::from_secs(30);
    for (id, wattson_j) in [(a, ja), (b, jb), (c, jc)] {
        let slurm_j = loop {
            let out = lab
                .run_ok("sacct", &["-n", "-P", "-X", "-j", &id.to_string(), "-o", "JobID,ConsumedEnergyRaw"]);
            if let Some(j) = energy_of(&out, &id.to_string()).filter(|&j| j > 0) {
                break j as f64;
            }
            assert!(
                Instant::now() < deadline,
                "sacct shows no energy for {id}: {out}\n{}",
                lab.log("slurmdbd")
            );
            std::thread::sleep(Duration::from_millis(300));
        };
        println!("job {id}: sacct {slurm_j} J, wattson {wattson_j:.1} J");
        assert!(
            common::rel_err(slurm_j, wattson_j) < SACCT_MARGIN,
            "job {id}: sacct {slurm_j} J vs wattson {wattson_j} J\n{}",
            lab.log("slurmd-n1")
        );
    }
    let slurm_whole = energy_of_sacct(&lab, c);
    assert!(
        common::rel_err(slurm_whole, whole_j) < 1e-3,
        "whole-node job: sacct {slurm_whole} J vs RAPL {whole_j} J"
    );
    lab.stop();
}

/// Job `id`'s `ConsumedEnergyRaw` in `sacct`, J (present: polled for above).
fn energy_of_sacct(lab: &wattson_harness::slurm_lab::SlurmLab, id: u32) -> f64 {
    let out =
        lab.run_ok("sacct", &["-n", "-P", "-X", "-j", &id.to_string(), "-o", "JobID,ConsumedEnergyRaw"]);
    energy_of(&out, &id.to_string()).unwrap_or_else(|| panic!("{out}")) as f64
}
