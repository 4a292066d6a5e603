//! The summary table for a terminal: per policy, energy, JCT, the plain waits from submission
//! beside the imposed waits ([`super::waits`]), and a line per policy on the deferrable jobs.

use std::fmt::Write as _;

use super::metrics::Report;

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{:+.1}%", (x - 1.0) * 100.0))
}

/// The summary table for a terminal.
pub fn to_table(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "cluster {}, trace {}, seed {}; the policies know {}",
        r.cluster, r.trace, r.seed, r.knowledge
    );
    let _ = writeln!(
        out,
        "{:<16} {:>10} {:>9} {:>8} {:>8} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>5} {:>9} {:>9} {:>9} {:>6} {:>7} {:>8} {:>8} {:>9}",
        "policy",
        "energy",
        "gpu",
        "idle",
        "transit",
        "cost",
        "jct mean",
        "jct med",
        "jct p99",
        "wait mean",
        "wait p99",
        "imposed",
        "imp p99",
        "late",
        "defer",
        "wait top",
        "makespan",
        "util",
        "pstate",
        "E vs def",
        "JCT vs d",
        "capture"
    );
    let _ = writeln!(
        out,
        "{:<16} {:>10} {:>9} {:>8} {:>8} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>5} {:>9} {:>9} {:>9} {:>6} {:>7} {:>8} {:>8} {:>9}",
        "",
        "kWh",
        "kWh",
        "kWh",
        "kWh",
        "",
        "h",
        "h",
        "h",
        "h",
        "h",
        "h",
        "h",
        "jobs",
        "h",
        "10% h",
        "d",
        "",
        "changes",
        "",
        "",
        ""
    );
    for s in &r.summaries {
        let idle = s.gpu_idle_kwh + s.node_base_kwh + s.off_kwh;
        let _ = writeln!(
            out,
            "{:<16} {:>10.0} {:>9.0} {:>8.0} {:>8.1} {:>7.0} {:>9.2} {:>9.2} {:>9.1} {:>9.3} {:>9.2} {:>9.3} {:>9.2} {:>5} {:>9.3} {:>9.2} {:>9.2} {:>6.3} {:>7} {:>8} {:>8} {:>9}",
            s.policy,
            s.energy_kwh,
            s.gpu_busy_kwh,
            idle,
            s.transition_kwh,
            s.cost,
            s.jct_mean_s / 3600.0,
            s.jct_median_s / 3600.0,
            s.jct_p99_s / 3600.0,
            s.wait_mean_s / 3600.0,
            s.wait_p99_s / 3600.0,
            s.waits.imposed_wait_mean_s / 3600.0,
            s.waits.imposed_wait_p99_s / 3600.0,
            s.waits.late_jobs,
            s.defer_mean_s / 3600.0,
            s.wait_large_mean_s / 3600.0,
            s.makespan_s / 86400.0,
            s.gpu_util,
            s.power_state_changes,
            pct(s.energy_vs_default),
            pct(s.jct_vs_default),
            s.capture.map_or_else(|| "-".to_string(), |x| format!("{:.1}%", x * 100.0)),
        );
    }
    let _ = writeln!(
        out,
        "idle = idle GPUs + node base power + powered-off draw; JCT = end - submit; wait = start - submit;\n\
         imposed = wait less the deferral window the job's user asked for (at least 0); late = jobs started after their window;\n\
         defer = held back before Slurm's queue (part of wait); wait top = mean wait of the tenth of jobs with the most GPU-hours;\n\
         capture = share of (slurm-default - floor) energy saved; idle-timer rows at their least-energy SuspendTime"
    );
    for s in r.summaries.iter().filter(|s| s.waits.deferrable_jobs > 0) {
        let w = &s.waits;
        let _ = writeln!(
            out,
            "{}: the {} jobs that asked for deferral waited {:.3} h on average from submission; {} started past their window, by {:.3} h on average (at most {:.3} h)",
            s.policy,
            w.deferrable_jobs,
            w.deferrable_wait_mean_s / 3600.0,
            w.late_jobs,
            w.lateness_mean_s / 3600.0,
            w.lateness_max_s / 3600.0
        );
    }
    if let Some(k) = r.summaries.iter().map(|s| s.killed_jobs).find(|&k| k > 0) {
        let _ = writeln!(
            out,
            "{k} jobs reached their time limit and were killed (the same jobs under every policy)"
        );
    }
    for s in r.summaries.iter().filter(|s| s.suspend_time_s.is_some() || s.bound_violations > 0) {
        let st = s.suspend_time_s.map_or_else(String::new, |v| format!(" SuspendTime={v:.0}s"));
        let _ = writeln!(out, "{}:{st} {} jobs over their slowdown bound", s.policy, s.bound_violations);
    }
    out
}
