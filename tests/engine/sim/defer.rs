//! Deferral as Slurm queues it: a job that job_submit deferred waits, once its begin time has
//! come, where its submission ranks it, ahead of the jobs submitted after it (the lab's Slurm
//! does so: tests/slurm/queue_order.rs).

use super::*;

#[test]
fn a_deferred_job_once_its_begin_time_comes_starts_before_a_job_submitted_after_it() {
    let (mut c, cat) = inputs();
    c.groups[0].nodes = 1;
    // The trace starts at midnight UTC; 01:00 to 01:59 is the one cheap hour.
    c.trace_start_utc_s = 0;
    c.prices.hourly_utc = (0..24).map(|h| if h == 1 { 0.10 } else { 0.30 }).collect();
    // The node's GPUs are busy for two hours; at 10 s a job that allows two hours of deferral
    // is submitted, at 20 s one that allows none. None may be slowed.
    let n = c.gpus_per_node;
    let text = format!(
        "submit,gpus,duration,slowdown_pct,defer_s\n0,{n},7200,0,0\n10,{n},600,0,7200\n20,{n},600,0,0\n"
    );
    let t = wattson_sim::trace::parse(&text, "d.csv", TraceFormat::Auto).unwrap();
    let o = wattson_sim::run(&c, &cat, &t, "d.csv", &[ClusterPolicy::Wattson], 1).unwrap();
    let w = &o.runs.iter().find(|r| r.policy == ClusterPolicy::Wattson).unwrap().jobs;
    let (busy, deferred, later) = (&w[0], &w[1], &w[2]);
    assert_eq!(deferred.eligible, 3600.0, "deferred to the cheap hour");
    assert_eq!(later.eligible, 20.0);
    assert_eq!(deferred.start, busy.end, "first when the GPUs free");
    assert_eq!(later.start, deferred.end);
}
