//! Results per policy and their CSV / JSON / text renderings (the floor is in [`super::floor`]).
//!
//! JCT = end − submit; wait = start − submit (queueing, deferral and boot: the yardstick);
//! deferral = eligible − submit, reported in its own column; the imposed wait leaves out the
//! deferral window a job's user asked for ([`super::waits`]), beside the plain wait; the largest tenth is the tenth of
//! jobs with the most GPU-seconds (GPUs × run time). Percentiles are nearest-rank. Energy is kept in joules and reported in kWh; cost prices each UTC hour's
//! energy at that hour's tariff.

use std::fmt::Write as _;

use serde::Serialize;

use super::cluster::ClusterConfig;
use super::policies::{ClusterPolicy, SimJob};
use super::power::{BIN_S, EnergyParts};
use super::simulate::RunResult;
use super::waits::{WaitFigures, Waits};

pub use super::table::to_table;

/// Joules per kWh.
pub const J_PER_KWH: f64 = 3.6e6;

/// One policy's results.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Summary {
    /// Policy name.
    pub policy: String,
    /// Slurm's `SuspendTime` of the reported run (the least-energy one of the sweep), for the
    /// idle-timer policies (s).
    pub suspend_time_s: Option<f64>,
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
    /// Mean queueing wait: start − eligible, where a deferred job is eligible when the policy
    /// releases it into Slurm's queue (s).
    pub queue_wait_mean_s: f64,
    /// 99th percentile queueing wait (s).
    pub queue_wait_p99_s: f64,
    /// Mean deferral: eligible − submit, the time the policy held jobs back (s).
    pub defer_mean_s: f64,
    /// Mean wait (from submission) of the tenth of jobs with the most GPU-seconds (s).
    pub wait_large_mean_s: f64,
    /// The waits the policy imposed, less the windows users chose, and the deferrable jobs'
    /// lateness ([`super::waits`]).
    #[serde(flatten)]
    pub waits: WaitFigures,
    /// Jobs that reached their time limit and were killed.
    pub killed_jobs: usize,
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
    /// Jobs whose measured slowdown exceeds their bound (policies that ignore bounds have some).
    pub bound_violations: usize,
    /// Level changes of running jobs.
    pub level_changes: u64,
    /// Jobs that started later than they could have for cheaper electricity.
    pub deferred_jobs: usize,
    /// Jobs that shared a GPU with another job for some of their run.
    pub shared_jobs: usize,
    /// Share of the jobs' GPU time spent on a GPU shared with another job.
    pub shared_gpu_time: f64,
    /// Energy / slurm-default's.
    pub energy_vs_default: Option<f64>,
    /// Mean JCT / slurm-default's.
    pub jct_vs_default: Option<f64>,
    /// Energy / the floor's.
    pub energy_vs_floor: Option<f64>,
    /// Share of (slurm-default − floor) energy this policy saves.
    pub capture: Option<f64>,
}

/// One run of a knob sweep (for the Pareto plot).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SweepPoint {
    /// Policy name.
    pub policy: String,
    /// The knob and its value, e.g. `SuspendTime=300`.
    pub knob: String,
    /// Total energy (kWh).
    pub energy_kwh: f64,
    /// Mean wait from submission (s).
    pub wait_mean_s: f64,
    /// 99th percentile wait from submission (s).
    pub wait_p99_s: f64,
    /// Mean imposed wait: wait less the job's own deferral window, at least 0 (s).
    pub imposed_wait_mean_s: f64,
    /// Mean JCT (s).
    pub jct_mean_s: f64,
}

impl SweepPoint {
    /// The point of a run of `policy` at `knob`, from its summary.
    pub fn of(policy: &str, knob: String, s: &Summary) -> SweepPoint {
        SweepPoint {
            policy: policy.to_string(),
            knob,
            energy_kwh: s.energy_kwh,
            wait_mean_s: s.wait_mean_s,
            wait_p99_s: s.wait_p99_s,
            imposed_wait_mean_s: s.waits.imposed_wait_mean_s,
            jct_mean_s: s.jct_mean_s,
        }
    }
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
    /// Per policy (floor included).
    pub power: Vec<PowerSeries>,
    /// Every run of every knob sweep, in run order.
    pub sweep: Vec<SweepPoint>,
    /// The cluster power budget, if any (W).
    pub budget_w: Option<f64>,
    /// What the policies knew of run times: `time limits` or the labelled what-if
    /// `perfect knowledge (what-if)`.
    pub knowledge: String,
}

impl Report {
    /// The summary of `policy`'s run, if it ran.
    pub fn summary(&self, policy: ClusterPolicy) -> Option<&Summary> {
        self.summaries.iter().find(|s| s.policy == policy.name())
    }
}

/// The `p` quantile of `sorted`, nearest rank; NaN when empty.
pub(crate) fn nearest_rank(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let k = ((p * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len());
    sorted[k - 1]
}

fn mean(v: &[f64]) -> f64 {
    if v.is_empty() { f64::NAN } else { v.iter().sum::<f64>() / v.len() as f64 }
}

pub(crate) fn cost_of(bins: &[f64], origin: f64, c: &ClusterConfig) -> f64 {
    bins.iter()
        .enumerate()
        .map(|(k, j)| {
            let t = (origin + k as f64 * BIN_S).floor() as i64 + c.trace_start_utc_s;
            c.prices.price_at(t).unwrap_or(0.0) * j / J_PER_KWH
        })
        .sum()
}

pub(crate) struct Times {
    jct: Vec<f64>,
    wait: Vec<f64>,
    queue_wait: Vec<f64>,
    defer: Vec<f64>,
    wait_large: Vec<f64>,
    waits: Waits,
    killed: usize,
    gpu_s: f64,
    slow: Vec<f64>,
    violations: usize,
}

/// One job's times: (eligible, start, end, measured slowdown).
pub(crate) type JobTimes = (f64, f64, f64, f64);

pub(crate) fn times(jobs: &[SimJob], starts: impl Iterator<Item = JobTimes>) -> Times {
    let mut t = Times {
        jct: Vec::new(),
        wait: Vec::new(),
        queue_wait: Vec::new(),
        defer: Vec::new(),
        wait_large: Vec::new(),
        waits: Waits::default(),
        killed: jobs.iter().filter(|j| j.killed).count(),
        gpu_s: 0.0,
        slow: Vec::new(),
        violations: 0,
    };
    for (j, (eligible, start, end, slow)) in jobs.iter().zip(starts) {
        t.jct.push(end - j.submit);
        t.wait.push(start - j.submit);
        t.waits.push(start - j.submit, j.defer_window);
        t.queue_wait.push(start - eligible);
        t.defer.push(eligible - j.submit);
        t.gpu_s += f64::from(j.gpus) * (end - start);
        t.slow.push(slow);
        if slow > j.bound + 1e-12 {
            t.violations += 1;
        }
    }
    t.wait_large = largest_tenth(jobs).into_iter().map(|k| t.wait[k]).collect();
    t.jct.sort_by(f64::total_cmp);
    t.wait.sort_by(f64::total_cmp);
    t.queue_wait.sort_by(f64::total_cmp);
    t
}

/// Jobs of run `r` over their slowdown bound that shared a GPU only in pairs of classes that
/// had shared before in the run (none of their shared periods was their pair's first): the
/// breaks a learned pair must never cause.
pub fn repeat_violations(r: &RunResult, jobs: &[SimJob]) -> usize {
    let pair = |k: usize, other: u32| Some((jobs[k].share?, jobs[other as usize].share?));
    let key = |(a, b): (u16, u16)| (a.min(b), a.max(b));
    let mut first: std::collections::BTreeMap<(u16, u16), f64> = Default::default();
    for (k, run) in r.jobs.iter().enumerate() {
        for &(other, start, _) in &run.partners {
            if let Some(p) = pair(k, other) {
                let at = first.entry(key(p)).or_insert(start);
                *at = at.min(start);
            }
        }
    }
    let in_a_first =
        |k: usize, other: u32, start: f64| pair(k, other).is_some_and(|p| first[&key(p)] == start);
    (r.jobs.iter().enumerate())
        .filter(|(k, run)| !run.partners.is_empty() && run.slowdown > jobs[*k].bound + 1e-12)
        .filter(|(k, run)| !run.partners.iter().any(|&(other, start, _)| in_a_first(*k, other, start)))
        .count()
}

/// Indices of the tenth of `jobs` (rounded up) with the most GPU-seconds (ties: trace order).
pub fn largest_tenth(jobs: &[SimJob]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..jobs.len()).collect();
    let size = |k: usize| f64::from(jobs[k].gpus) * jobs[k].duration;
    idx.sort_by(|&a, &b| size(b).total_cmp(&size(a)).then(a.cmp(&b)));
    idx.truncate(jobs.len().div_ceil(10));
    idx
}

/// What a summary is made of besides the job times.
pub(crate) struct Totals {
    pub(crate) parts: EnergyParts,
    pub(crate) timeline_j: f64,
    pub(crate) cost: f64,
    pub(crate) makespan: f64,
    pub(crate) changes: u64,
    pub(crate) peak_w: f64,
    pub(crate) over_budget_s: f64,
    pub(crate) deferred: usize,
    pub(crate) level_changes: u64,
    pub(crate) suspend_time_s: Option<f64>,
    /// Jobs that shared a GPU, and their GPU-seconds shared.
    pub(crate) shared: (usize, f64),
}

pub(crate) fn summary(policy: ClusterPolicy, c: &ClusterConfig, t: Times, x: Totals) -> Summary {
    let Totals {
        parts,
        timeline_j,
        cost,
        makespan,
        changes,
        peak_w,
        over_budget_s,
        deferred,
        level_changes,
        suspend_time_s,
        shared,
    } = x;
    Summary {
        policy: policy.name().to_string(),
        suspend_time_s,
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
        queue_wait_mean_s: mean(&t.queue_wait),
        queue_wait_p99_s: nearest_rank(&t.queue_wait, 0.99),
        defer_mean_s: mean(&t.defer),
        wait_large_mean_s: mean(&t.wait_large),
        waits: t.waits.figures(),
        killed_jobs: t.killed,
        makespan_s: makespan,
        gpu_util: if makespan > 0.0 { t.gpu_s / (c.total_gpus() as f64 * makespan) } else { 0.0 },
        power_state_changes: changes,
        peak_kw: peak_w / 1000.0,
        over_budget_s,
        mean_slowdown: mean(&t.slow),
        bound_violations: t.violations,
        level_changes,
        deferred_jobs: deferred,
        shared_jobs: shared.0,
        shared_gpu_time: if t.gpu_s > 0.0 { shared.1 / t.gpu_s } else { 0.0 },
        energy_vs_default: None,
        jct_vs_default: None,
        energy_vs_floor: None,
        capture: None,
    }
}

/// Summarises a simulated run.
pub fn summarize(r: &RunResult, jobs: &[SimJob], c: &ClusterConfig) -> (Summary, PowerSeries) {
    let t = times(jobs, r.jobs.iter().map(|x| (x.eligible, x.start, x.end, x.slowdown)));
    let m = &r.meter;
    let x = Totals {
        parts: m.parts,
        timeline_j: m.timeline_j(),
        cost: cost_of(&m.bins, m.bin_origin, c),
        makespan: r.t_end - r.t0,
        changes: m.state_changes,
        peak_w: m.peak_w,
        over_budget_s: m.over_budget_s,
        deferred: r.deferred,
        level_changes: r.jobs.iter().map(|j| u64::from(j.level_changes)).sum(),
        suspend_time_s: r.suspend_time_s,
        shared: (
            r.jobs.iter().filter(|j| !j.partners.is_empty()).count(),
            r.jobs.iter().flat_map(|j| &j.partners).map(|p| p.2 - p.1).sum(),
        ),
    };
    (summary(r.policy, c, t, x), series(r.policy, m.bin_origin, &m.bins))
}

pub(crate) fn series(p: ClusterPolicy, origin: f64, bins: &[f64]) -> PowerSeries {
    PowerSeries {
        policy: p.name().to_string(),
        origin_s: origin,
        kw: bins.iter().map(|j| j / BIN_S / 1000.0).collect(),
    }
}

/// Fills the ratio columns from the slurm-default and floor rows, where present.
pub fn add_ratios(summaries: &mut [Summary]) {
    let find = |name: &str| summaries.iter().find(|s| s.policy == name).map(|s| (s.energy_kwh, s.jct_mean_s));
    let base = find(ClusterPolicy::SlurmDefault.name());
    let floor = find(ClusterPolicy::Floor.name()).map(|f| f.0);
    for s in summaries.iter_mut() {
        if let Some((e, j)) = base {
            s.energy_vs_default = Some(s.energy_kwh / e);
            s.jct_vs_default = Some(s.jct_mean_s / j);
        }
        if let Some(f) = floor {
            s.energy_vs_floor = Some(s.energy_kwh / f);
        }
        if let (Some((d, _)), Some(f)) = (base, floor)
            && d > f
        {
            s.capture = Some((d - s.energy_kwh) / (d - f));
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
         jct_mean_s,jct_median_s,jct_p99_s,wait_mean_s,wait_median_s,wait_p99_s,queue_wait_mean_s,queue_wait_p99_s,makespan_s,gpu_util,\
         power_state_changes,peak_kw,over_budget_s,mean_slowdown,bound_violations,level_changes,deferred_jobs,\
         energy_vs_default,jct_vs_default,energy_vs_floor,capture,suspend_time_s,defer_mean_s,wait_large_mean_s,\
         killed_jobs,knowledge,shared_jobs,shared_gpu_time,imposed_wait_mean_s,imposed_wait_p99_s,deferrable_jobs,\
         deferrable_wait_mean_s,late_jobs,lateness_mean_s,lateness_max_s\n",
    );
    for s in &r.summaries {
        let _ = writeln!(
            out,
            "{},{},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.3},{:.2},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.1},{:.4},{},{:.3},{:.1},{:.5},{},{},{},{},{},{},{},{},{:.1},{:.1},{},{},{},{:.4},{:.1},{:.1},{},{:.1},{},{:.1},{:.1}",
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
            s.queue_wait_mean_s,
            s.queue_wait_p99_s,
            s.makespan_s,
            s.gpu_util,
            s.power_state_changes,
            s.peak_kw,
            s.over_budget_s,
            s.mean_slowdown,
            s.bound_violations,
            s.level_changes,
            s.deferred_jobs,
            opt(s.energy_vs_default),
            opt(s.jct_vs_default),
            opt(s.energy_vs_floor),
            opt(s.capture),
            s.suspend_time_s.map_or_else(String::new, |v| format!("{v:.0}")),
            s.defer_mean_s,
            s.wait_large_mean_s,
            s.killed_jobs,
            r.knowledge,
            s.shared_jobs,
            s.shared_gpu_time,
            s.waits.imposed_wait_mean_s,
            s.waits.imposed_wait_p99_s,
            s.waits.deferrable_jobs,
            s.waits.deferrable_wait_mean_s,
            s.waits.late_jobs,
            s.waits.lateness_mean_s,
            s.waits.lateness_max_s,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::JobRun;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(nearest_rank(&v, 0.5), 50.0);
        assert_eq!(nearest_rank(&v, 0.99), 99.0);
        assert_eq!(nearest_rank(&v, 1.0), 100.0);
        assert_eq!(nearest_rank(&[7.0], 0.5), 7.0);
        assert!(nearest_rank(&[], 0.5).is_nan());
    }

    #[test]
    fn a_break_is_a_repeat_only_where_none_of_the_jobs_shared_periods_was_its_pairs_first() {
        let c = ClusterConfig::from_toml(crate::cluster::tests::SMALL, "small.toml").unwrap();
        let job = |share| SimJob {
            id: String::new(),
            submit: 0.0,
            gpus: 1,
            duration: 100.0,
            limit: 100.0,
            killed: false,
            gpu_types: Vec::new(),
            gpu_fraction: 1.0,
            workload: 0,
            share: Some(share),
            bound: 0.5,
            defer_window: 0.0,
            choices: Vec::new(),
            floor_type: 0,
        };
        let run = |slowdown, partners: &[(u32, f64)]| JobRun {
            eligible: 0.0,
            alloc: 0.0,
            start: 0.0,
            end: 100.0,
            limit_w: 0.0,
            gpu_w: 0.0,
            slowdown,
            shares: Vec::new(),
            level_changes: 0,
            partners: partners.iter().map(|&(k, from)| (k, from, from + 10.0)).collect(),
        };
        // Classes 0, 0, 0, 0, 1. Jobs 0 and 1 are class 0's first pair (at 10), jobs 2 and 3
        // its second (at 50); job 3 then shares with job 4, the first pair of classes 0 and 1.
        let jobs = [job(0), job(0), job(0), job(0), job(1)];
        let runs = |slow: [f64; 4]| RunResult {
            policy: ClusterPolicy::Wattson,
            suspend_time_s: None,
            jobs: vec![
                run(slow[0], &[(1, 10.0)]),
                run(0.1, &[(0, 10.0)]),
                run(slow[1], &[(3, 50.0)]),
                run(slow[2], &[(2, 50.0), (4, 70.0)]),
                run(slow[3], &[]),
            ],
            meter: crate::power::Meter::new(&c, 0.0),
            t0: 0.0,
            t_end: 100.0,
            deferred: 0,
        };
        assert_eq!(
            repeat_violations(&runs([0.1, 0.1, 0.1, 0.9]), &jobs),
            0,
            "within bounds, or never shared"
        );
        assert_eq!(repeat_violations(&runs([0.6, 0.1, 0.6, 0.1]), &jobs), 0, "each shared in a first");
        assert_eq!(repeat_violations(&runs([0.6, 0.6, 0.6, 0.1]), &jobs), 1, "job 2: only the second");
    }
}
