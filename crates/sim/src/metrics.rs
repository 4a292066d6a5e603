//! Results per policy, the oracle lower bound, and their CSV / JSON / text renderings.
//!
//! JCT = end − submit; wait = start − submit (queueing, deferral and boot). Percentiles are
//! nearest-rank. Energy is kept in joules and reported in kWh; cost prices each UTC hour's
//! energy at that hour's tariff.

use std::fmt::Write as _;

use serde::Serialize;

use super::cluster::ClusterConfig;
use super::policies::{PolicyKind, SimJob};
use super::power::{BIN_S, EnergyParts};
use super::simulate::RunResult;
use super::workloads::Catalog;

const J_PER_KWH: f64 = 3.6e6;

/// One policy's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Policy name.
    pub policy: String,
    /// Jobs run.
    pub jobs: usize,
    /// Total energy (kWh).
    pub energy_kwh: f64,
    /// GPUs running jobs (kWh).
    pub gpu_busy_kwh: f64,
    /// Idle GPUs of powered nodes (kWh).
    pub gpu_idle_kwh: f64,
    /// Node base draw while powered (kWh).
    pub node_base_kwh: f64,
    /// Powered-off nodes (kWh).
    pub off_kwh: f64,
    /// Shutdowns and boots (kWh).
    pub transition_kwh: f64,
    /// The cluster power integrated over time (kWh): must equal `energy_kwh`.
    pub timeline_kwh: f64,
    /// Energy cost under the tariff (currency of the tariff).
    pub cost: f64,
    /// Mean job completion time (s).
    pub jct_mean_s: f64,
    /// Median JCT (s).
    pub jct_median_s: f64,
    /// 99th percentile JCT (s).
    pub jct_p99_s: f64,
    /// Mean wait before running (s).
    pub wait_mean_s: f64,
    /// Median wait (s).
    pub wait_median_s: f64,
    /// 99th percentile wait (s).
    pub wait_p99_s: f64,
    /// Last end − first submission (s).
    pub makespan_s: f64,
    /// GPU-seconds of jobs / (GPUs · makespan).
    pub gpu_util: f64,
    /// Power-downs plus boots.
    pub power_state_changes: u64,
    /// Highest cluster power (kW).
    pub peak_kw: f64,
    /// Time above the power budget (s), when a budget is set.
    pub over_budget_s: f64,
    /// Mean measured slowdown from the power limit (fraction).
    pub mean_slowdown: f64,
    /// Jobs whose measured slowdown exceeds their bound (only meaningful for `wattson`).
    pub bound_violations: usize,
    /// Jobs that started later than they could have for cheaper electricity.
    pub deferred_jobs: usize,
    /// Energy / slurm-default's.
    pub energy_vs_default: Option<f64>,
    /// Mean JCT / slurm-default's.
    pub jct_vs_default: Option<f64>,
    /// Energy / the oracle's.
    pub energy_vs_oracle: Option<f64>,
    /// Mean JCT / the oracle's.
    pub jct_vs_oracle: Option<f64>,
}

/// Hourly mean cluster power of one policy, for the plot.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PowerSeries {
    /// Policy name.
    pub policy: String,
    /// Start of the first hour (s, trace time).
    pub origin_s: f64,
    /// Mean power per hour (kW).
    pub kw: Vec<f64>,
}

/// Everything one `wattson sim` run reports.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// Cluster name.
    pub cluster: String,
    /// Trace name.
    pub trace: String,
    /// Seed of the hint draws.
    pub seed: u64,
    /// Per policy, in report order.
    pub summaries: Vec<Summary>,
    /// Per policy (oracle included).
    pub power: Vec<PowerSeries>,
}

fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let k = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[k - 1]
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() { f64::NAN } else { v.iter().sum::<f64>() / v.len() as f64 }
}

fn cost_of(bins: &[f64], origin: f64, c: &ClusterConfig) -> f64 {
    bins.iter()
        .enumerate()
        .map(|(k, j)| {
            let t = (origin + k as f64 * BIN_S).floor() as i64 + c.trace_start_utc_s;
            c.prices.price_at(t).unwrap_or(0.0) * j / J_PER_KWH
        })
        .sum()
}

struct Times {
    jct: Vec<f64>,
    wait: Vec<f64>,
    gpu_s: f64,
    slow: Vec<f64>,
    violations: usize,
}

fn times(jobs: &[SimJob], starts: impl Iterator<Item = (f64, f64, f64)>) -> Times {
    let mut t = Times { jct: Vec::new(), wait: Vec::new(), gpu_s: 0.0, slow: Vec::new(), violations: 0 };
    for (j, (start, end, slow)) in jobs.iter().zip(starts) {
        t.jct.push(end - j.submit);
        t.wait.push(start - j.submit);
        t.gpu_s += f64::from(j.gpus) * (end - start);
        t.slow.push(slow);
        if slow > j.bound + 1e-12 {
            t.violations += 1;
        }
    }
    t.jct.sort_by(f64::total_cmp);
    t.wait.sort_by(f64::total_cmp);
    t
}

#[allow(clippy::too_many_arguments)]
fn summary(
    policy: PolicyKind,
    c: &ClusterConfig,
    parts: EnergyParts,
    timeline_j: f64,
    cost: f64,
    t: Times,
    makespan: f64,
    changes: u64,
    peak_w: f64,
    over_budget_s: f64,
    deferred: usize,
) -> Summary {
    Summary {
        policy: policy.name().to_string(),
        jobs: t.jct.len(),
        energy_kwh: parts.total_j() / J_PER_KWH,
        gpu_busy_kwh: parts.gpu_busy_j / J_PER_KWH,
        gpu_idle_kwh: parts.gpu_idle_j / J_PER_KWH,
        node_base_kwh: parts.node_base_j / J_PER_KWH,
        off_kwh: parts.off_j / J_PER_KWH,
        transition_kwh: parts.transition_j / J_PER_KWH,
        timeline_kwh: timeline_j / J_PER_KWH,
        cost,
        jct_mean_s: mean(&t.jct),
        jct_median_s: nearest_rank(&t.jct, 0.5),
        jct_p99_s: nearest_rank(&t.jct, 0.99),
        wait_mean_s: mean(&t.wait),
        wait_median_s: nearest_rank(&t.wait, 0.5),
        wait_p99_s: nearest_rank(&t.wait, 0.99),
        makespan_s: makespan,
        gpu_util: if makespan > 0.0 { t.gpu_s / (c.total_gpus() as f64 * makespan) } else { 0.0 },
        power_state_changes: changes,
        peak_kw: peak_w / 1000.0,
        over_budget_s,
        mean_slowdown: mean(&t.slow),
        bound_violations: t.violations,
        deferred_jobs: deferred,
        energy_vs_default: None,
        jct_vs_default: None,
        energy_vs_oracle: None,
        jct_vs_oracle: None,
    }
}

/// Summarises a simulated run.
pub fn summarize(r: &RunResult, jobs: &[SimJob], c: &ClusterConfig) -> (Summary, PowerSeries) {
    let t = times(jobs, r.jobs.iter().map(|x| (x.start, x.end, x.slowdown)));
    let deferred = jobs
        .iter()
        .zip(&r.jobs)
        .filter(|(j, x)| j.defer_window > 0.0 && x.alloc > j.submit && r.policy == PolicyKind::Wattson)
        .count();
    let m = &r.meter;
    let cost = cost_of(&m.bins, m.bin_origin, c);
    let s = summary(
        r.policy,
        c,
        m.parts,
        m.timeline_j(),
        cost,
        t,
        r.t_end - r.t0,
        m.state_changes,
        m.peak_w,
        m.over_budget_s,
        deferred,
    );
    (s, series(r.policy, m.bin_origin, &m.bins))
}

fn series(p: PolicyKind, origin: f64, bins: &[f64]) -> PowerSeries {
    PowerSeries {
        policy: p.name().to_string(),
        origin_s: origin,
        kw: bins.iter().map(|j| j / BIN_S / 1000.0).collect(),
    }
}

/// The oracle: every job at its least-energy measured limit, started at submission, only
/// its GPUs' energy counted (no idle, no node base, no transitions).
pub fn oracle(jobs: &[SimJob], catalog: &Catalog, c: &ClusterConfig) -> (Summary, PowerSeries) {
    let t0 = jobs.first().map_or(0.0, |j| j.submit);
    let origin = t0 - (t0 + c.trace_start_utc_s as f64).rem_euclid(BIN_S);
    let mut bins: Vec<f64> = Vec::new();
    let mut parts = EnergyParts::default();
    let mut peak_changes: Vec<(f64, f64)> = Vec::new();
    let mut spans = Vec::with_capacity(jobs.len());
    for j in jobs {
        let w = &catalog.workloads[j.workload];
        let i = j.setting_for(PolicyKind::Oracle);
        let ratio = w.time_ratio(i);
        let (start, end) = (j.submit, j.submit + j.duration * ratio);
        let p = f64::from(j.gpus) * w.power[i];
        parts.gpu_busy_j += p * (end - start);
        let mut a = start;
        while a < end {
            let k = ((a - origin) / BIN_S).floor() as usize;
            let e = (origin + (k + 1) as f64 * BIN_S).min(end);
            if bins.len() <= k {
                bins.resize(k + 1, 0.0);
            }
            bins[k] += p * (e - a);
            a = if e > a { e } else { end };
        }
        peak_changes.push((start, p));
        peak_changes.push((end, -p));
        spans.push((start, end, ratio - 1.0));
    }
    peak_changes.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let (mut now, mut peak) = (0.0f64, 0.0f64);
    for (_, d) in peak_changes {
        now += d;
        peak = peak.max(now);
    }
    let t_end = spans.iter().map(|s| s.1).fold(t0, f64::max);
    let timeline: f64 = bins.iter().sum();
    let cost = cost_of(&bins, origin, c);
    let t = times(jobs, spans.into_iter());
    let s = summary(PolicyKind::Oracle, c, parts, timeline, cost, t, t_end - t0, 0, peak, 0.0, 0);
    (s, series(PolicyKind::Oracle, origin, &bins))
}

/// Fills the ratio columns from the slurm-default and oracle rows, where present.
pub fn add_ratios(summaries: &mut [Summary]) {
    let find = |name: &str| summaries.iter().find(|s| s.policy == name).map(|s| (s.energy_kwh, s.jct_mean_s));
    let base = find(PolicyKind::SlurmDefault.name());
    let orc = find(PolicyKind::Oracle.name());
    for s in summaries.iter_mut() {
        if let Some((e, j)) = base {
            s.energy_vs_default = Some(s.energy_kwh / e);
            s.jct_vs_default = Some(s.jct_mean_s / j);
        }
        if let Some((e, j)) = orc {
            s.energy_vs_oracle = Some(s.energy_kwh / e);
            s.jct_vs_oracle = Some(s.jct_mean_s / j);
        }
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or_else(String::new, |x| format!("{x:.4}"))
}

/// The summary table as CSV (one row per policy).
pub fn to_csv(r: &Report) -> String {
    let mut out = String::from(
        "policy,jobs,energy_kwh,gpu_busy_kwh,gpu_idle_kwh,node_base_kwh,off_kwh,transition_kwh,timeline_kwh,cost,\
         jct_mean_s,jct_median_s,jct_p99_s,wait_mean_s,wait_median_s,wait_p99_s,makespan_s,gpu_util,\
         power_state_changes,peak_kw,over_budget_s,mean_slowdown,bound_violations,deferred_jobs,\
         energy_vs_default,jct_vs_default,energy_vs_oracle,jct_vs_oracle\n",
    );
    for s in &r.summaries {
        let _ = writeln!(
            out,
            "{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.2},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.4},{},{:.3},{:.1},{:.5},{},{},{},{},{},{}",
            s.policy,
            s.jobs,
            s.energy_kwh,
            s.gpu_busy_kwh,
            s.gpu_idle_kwh,
            s.node_base_kwh,
            s.off_kwh,
            s.transition_kwh,
            s.timeline_kwh,
            s.cost,
            s.jct_mean_s,
            s.jct_median_s,
            s.jct_p99_s,
            s.wait_mean_s,
            s.wait_median_s,
            s.wait_p99_s,
            s.makespan_s,
            s.gpu_util,
            s.power_state_changes,
            s.peak_kw,
            s.over_budget_s,
            s.mean_slowdown,
            s.bound_violations,
            s.deferred_jobs,
            opt(s.energy_vs_default),
            opt(s.jct_vs_default),
            opt(s.energy_vs_oracle),
            opt(s.jct_vs_oracle),
        );
    }
    out
}

/// Hourly cluster power per policy as CSV: `hour_start_s` then one kW column per policy.
pub fn power_csv(r: &Report) -> String {
    let mut out = String::from("hour_start_s");
    for p in &r.power {
        let _ = write!(out, ",{}_kw", p.policy);
    }
    out.push('\n');
    let origin = r.power.iter().map(|p| p.origin_s).fold(f64::INFINITY, f64::min);
    let len = r
        .power
        .iter()
        .map(|p| ((p.origin_s - origin) / BIN_S).round() as usize + p.kw.len())
        .max()
        .unwrap_or(0);
    for k in 0..len {
        let t = origin + k as f64 * BIN_S;
        let _ = write!(out, "{t:.0}");
        for p in &r.power {
            let i = k as i64 - ((p.origin_s - origin) / BIN_S).round() as i64;
            let v = usize::try_from(i).ok().and_then(|i| p.kw.get(i)).copied().unwrap_or(0.0);
            let _ = write!(out, ",{v:.3}");
        }
        out.push('\n');
    }
    out
}

/// The report as pretty JSON.
pub fn to_json(r: &Report) -> String {
    serde_json::to_string_pretty(r).unwrap_or_else(|e| format!("{{\"error\": \"{e}\"}}"))
}

fn pct(v: Option<f64>) -> String {
    v.map_or_else(|| "-".to_string(), |x| format!("{:+.1}%", (x - 1.0) * 100.0))
}

/// The summary table for a terminal.
pub fn to_table(r: &Report) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "cluster {}, trace {}, seed {}", r.cluster, r.trace, r.seed);
    let _ = writeln!(
        out,
        "{:<16} {:>10} {:>9} {:>8} {:>8} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6} {:>7} {:>8} {:>8} {:>9}",
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
        "makespan",
        "util",
        "pstate",
        "E vs def",
        "JCT vs d",
        "E vs orc"
    );
    let _ = writeln!(
        out,
        "{:<16} {:>10} {:>9} {:>8} {:>8} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>6} {:>7} {:>8} {:>8} {:>9}",
        "", "kWh", "kWh", "kWh", "kWh", "", "h", "h", "h", "h", "h", "d", "", "changes", "", "", "x"
    );
    for s in &r.summaries {
        let idle = s.gpu_idle_kwh + s.node_base_kwh + s.off_kwh;
        let _ = writeln!(
            out,
            "{:<16} {:>10.0} {:>9.0} {:>8.0} {:>8.1} {:>7.0} {:>9.2} {:>9.2} {:>9.1} {:>9.2} {:>9.1} {:>9.2} {:>6.3} {:>7} {:>8} {:>8} {:>9}",
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
            s.makespan_s / 86400.0,
            s.gpu_util,
            s.power_state_changes,
            pct(s.energy_vs_default),
            pct(s.jct_vs_default),
            s.energy_vs_oracle.map_or_else(|| "-".to_string(), |x| format!("{x:.3}")),
        );
    }
    let _ = writeln!(
        out,
        "idle = idle GPUs + node base power + powered-off draw; JCT = end - submit; wait = start - submit"
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 0.5), 50.0);
        assert_eq!(nearest_rank(&v, 0.99), 99.0);
        assert_eq!(nearest_rank(&v, 1.0), 100.0);
        assert_eq!(nearest_rank(&[7.0], 0.5), 7.0);
        assert!(nearest_rank(&[], 0.5).is_nan());
    }
}
