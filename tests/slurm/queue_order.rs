//! Where a deferred job queues once its begin time has passed, and a held one once released,
//! in real Slurm: what the simulator's scheduler does with a job that wattson deferred or
//! held for the power budget (crates/sim, `Sim::enqueue`).

use std::time::Duration;

use wattson_harness::slurm_lab::{LabOptions, SlurmLab};

const JOB_TIMEOUT: Duration = Duration::from_secs(60);

#[test]
fn a_deferred_job_once_eligible_ranks_by_its_submission_and_a_released_one_last() {
    let lab = SlurmLab::start(LabOptions::default());
    let stamped = |tag: &str| {
        format!("date +%s.%N > {}\nsleep 2\n", lab.dir().join(format!("jobs/{tag}.start")).display())
    };
    // n1's four GPUs are busy; a held job is submitted, then one deferred by 3 s, then one
    // neither held nor deferred.
    let busy = lab.sbatch(&["--gres=gpu:4"], "sleep 600\n").unwrap();
    lab.wait_running(busy, JOB_TIMEOUT);
    let held = lab.sbatch(&["--gres=gpu:4", "--hold"], &stamped("held")).unwrap();
    let deferred = lab.sbatch(&["--gres=gpu:4", "--begin=now+3"], &stamped("deferred")).unwrap();
    let later = lab.sbatch(&["--gres=gpu:4"], &stamped("later")).unwrap();
    // Past the begin time the deferred job waits for the GPUs; the held one is released (as
    // the controller releases a job held for the power budget); then the GPUs free.
    std::thread::sleep(Duration::from_secs(6));
    lab.run_ok("scontrol", &["release", &held.to_string()]);
    std::thread::sleep(Duration::from_secs(1));
    lab.run_ok("scancel", &[&busy.to_string()]);
    for id in [held, deferred, later] {
        assert_eq!(lab.wait_job(id, JOB_TIMEOUT).state, "COMPLETED", "{}", lab.all_logs());
    }
    let start = |tag: &str| -> f64 {
        let path = lab.dir().join(format!("jobs/{tag}.start"));
        std::fs::read_to_string(&path).unwrap().trim().parse().unwrap()
    };
    let (h, d, l) = (start("held"), start("deferred"), start("later"));
    eprintln!(
        "started: deferred job {deferred} at {d}, the later one {later} at {l}, the released {held} at {h}"
    );
    assert!(d < l, "the deferred job started {:.1} s after the one submitted after it", d - l);
    // A job held and released gets a new priority under priority/basic (22.05's default):
    // last. Under priority/multifactor (24.11's and 26.05's) it keeps its submission's: first.
    let config = lab.run_ok("scontrol", &["show", "config"]);
    let basic = config.lines().any(|l| l.starts_with("PriorityType") && l.contains("priority/basic"));
    if basic {
        assert!(l < h, "the released job started {:.1} s before the one submitted after it", l - h);
    } else {
        assert!(h < d, "the released job started {:.1} s after the ones submitted after it", h - d);
    }
}
