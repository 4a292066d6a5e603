//! How the node's energy besides its GPUs is shared among jobs: what the node drew between two
//! readings goes to the jobs that ran between them. The node is read at every sample and at
//! every job's begin and end, so the jobs of an interval ran through all of it.
//!
//! By CPU time (`split = "cpu-time"`, where every running job's cgroup could be read, or was
//! read and is gone since: such a job used none): a job's
//! share of an interval is its CPU time in it over the jobs' CPU time in it summed. By time
//! (`split = "time"`, or an interval whose CPU times are not all known, or in which no job used
//! the CPUs): each job weighs the same for the time it ran there (its time in the interval over
//! the jobs' time in it summed, or over the interval where that is longer: energy drawn while
//! no job ran is nobody's). CPUs allocated are not weighed: Slurm does not tell wattsond, and
//! the packages' draw follows what runs, not what is allocated. A step's record gets its job's
//! share for the time the step ran.

use std::collections::BTreeMap;

use super::NodeTotals;
use wattson_types::job::{JobKey, JobRecord};

/// Adds to each running record's share its part of what the node drew from `prev` to `now`.
/// `cpu_ns`: each job's CPU time in the interval (by job id), where every running job's is
/// known; `None` divides by time. Parts a record has no figure for (`None`: not measured
/// here) stay `None`.
pub fn charge(
    prev: &NodeTotals,
    now: &NodeTotals,
    running: &mut BTreeMap<JobKey, JobRecord>,
    cpu_ns: Option<&BTreeMap<u32, u64>>,
) {
    let span = now.t_ns - prev.t_ns;
    if span <= 0 {
        return;
    }
    let ran = |r: &JobRecord| (now.t_ns - r.begin_ns.max(prev.t_ns)).clamp(0, span);
    let jobs = || running.values().filter(|r| r.key.step.is_empty());
    let jobs_ns: i64 = jobs().map(ran).sum();
    let weight = jobs_ns.max(span) as f64;
    // By CPU time only where every job's is known and some job used the CPUs.
    let by_cpu = cpu_ns.filter(|cpu| jobs().all(|r| cpu.contains_key(&r.key.job_id)));
    let cpu_total: u64 = by_cpu.map(|cpu| jobs().map(|r| cpu[&r.key.job_id]).sum()).unwrap_or(0);
    let by_cpu = by_cpu.filter(|_| cpu_total > 0);
    let fractions: BTreeMap<JobKey, f64> = running
        .values()
        .map(|r| {
            let fraction = match by_cpu {
                None => ran(r) as f64 / weight,
                Some(cpu) => {
                    let job = cpu[&r.key.job_id] as f64 / cpu_total as f64;
                    let job_ran = running.get(&JobKey::job(r.key.job_id)).map(ran).unwrap_or(0);
                    match r.key.step.is_empty() {
                        true => job,
                        false if job_ran > 0 => job * ran(r) as f64 / job_ran as f64,
                        false => 0.0,
                    }
                }
            };
            (r.key.clone(), fraction)
        })
        .collect();
    let delta = |a: Option<f64>, b: Option<f64>| match (a, b) {
        (Some(a), Some(b)) if b >= a => Some(b - a),
        _ => None,
    };
    let cpu = delta(prev.cpu_mj, now.cpu_mj);
    let dram = delta(prev.dram_mj, now.dram_mj);
    let node = delta(prev.node_mj, now.node_mj);
    for record in running.values_mut() {
        let fraction = fractions[&record.key];
        let Some(share) = record.node_share.as_mut() else { continue };
        for (part, delta) in
            [(&mut share.cpu_mj, cpu), (&mut share.dram_mj, dram), (&mut share.node_mj, node)]
        {
            if let (Some(part), Some(delta)) = (part.as_mut(), delta) {
                *part += delta * fraction;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattson_types::job::{Hints, JobState};
    use wattson_types::scope::{EnergyScope, NodeShare};

    const S: i64 = 1_000_000_000;

    fn record(key: &str, begin_s: i64) -> JobRecord {
        JobRecord {
            key: JobKey::parse(key).unwrap(),
            uid: 1,
            user: None,
            name: None,
            node: "n1".into(),
            begin_ns: begin_s * S,
            end_ns: None,
            state: JobState::Running,
            hints: Hints::default(),
            policy: None,
            gpus: Vec::new(),
            dvfs: None,
            node_share: Some(NodeShare {
                scope: EnergyScope::GpuCpu,
                cpu_mj: Some(0.0),
                dram_mj: Some(0.0),
                node_mj: None,
            }),
        }
    }

    fn totals(t_s: i64, cpu: f64, dram: f64) -> NodeTotals {
        NodeTotals { t_ns: t_s * S, cpu_mj: Some(cpu), dram_mj: Some(dram), node_mj: Some(cpu * 10.0) }
    }

    fn shares(running: &BTreeMap<JobKey, JobRecord>) -> Vec<(String, f64, f64)> {
        running
            .values()
            .map(|r| {
                let s = r.node_share.unwrap();
                (r.key.to_string(), s.cpu_mj.unwrap(), s.dram_mj.unwrap())
            })
            .collect()
    }

    #[test]
    fn each_job_gets_the_same_weight_for_the_time_it_ran_in_the_interval() {
        let mut running: BTreeMap<JobKey, JobRecord> =
            [record("1", 0), record("2", 15)].into_iter().map(|r| (r.key.clone(), r)).collect();
        // 10 s to 20 s: job 1 ran 10 s, job 2 ran 5 s; 300 mJ of CPU, 30 of DRAM.
        charge(&totals(10, 1000.0, 100.0), &totals(20, 1300.0, 130.0), &mut running, None);
        assert_eq!(shares(&running), [("1".into(), 200.0, 20.0), ("2".into(), 100.0, 10.0)]);
        // Job 1 alone from 20 s to 30 s gets it all; the node part, not measured for it, stays
        // none.
        running.remove(&JobKey::job(2));
        charge(&totals(20, 1300.0, 130.0), &totals(30, 1500.0, 150.0), &mut running, None);
        assert_eq!(shares(&running), [("1".into(), 400.0, 40.0)]);
        assert_eq!(running[&JobKey::job(1)].node_share.unwrap().node_mj, None);
    }

    #[test]
    fn energy_while_no_job_ran_is_nobodys_and_a_step_gets_its_jobs_share() {
        let mut running: BTreeMap<JobKey, JobRecord> =
            [record("3", 25), record("3.0", 28)].into_iter().map(|r| (r.key.clone(), r)).collect();
        charge(&totals(20, 0.0, 0.0), &totals(30, 1000.0, 0.0), &mut running, None);
        assert_eq!(shares(&running), [("3".into(), 500.0, 0.0), ("3.0".into(), 200.0, 0.0)]);
        // No time passed, or a counter that went back: nothing added.
        charge(&totals(30, 1000.0, 0.0), &totals(30, 2000.0, 0.0), &mut running, None);
        charge(&totals(30, 1000.0, 0.0), &totals(40, 500.0, 0.0), &mut running, None);
        assert_eq!(shares(&running)[0], ("3".into(), 500.0, 0.0));
    }

    fn cpu(of: &[(u32, u64)]) -> BTreeMap<u32, u64> {
        of.iter().copied().collect()
    }

    #[test]
    fn by_cpu_time_each_job_gets_its_cpu_times_part_and_the_parts_add_up() {
        let mut running: BTreeMap<JobKey, JobRecord> = [record("1", 0), record("2", 0), record("2.0", 15)]
            .into_iter()
            .map(|r| (r.key.clone(), r))
            .collect();
        // 10 s to 20 s: job 1 used 3 CPU-seconds, job 2 used 1; 400 mJ of CPU, 40 of DRAM.
        let used = cpu(&[(1, 3_000_000_000), (2, 1_000_000_000)]);
        charge(&totals(10, 1000.0, 100.0), &totals(20, 1400.0, 140.0), &mut running, Some(&used));
        // Job 2's step ran half the interval: half its job's part.
        assert_eq!(
            shares(&running),
            [("1".into(), 300.0, 30.0), ("2".into(), 100.0, 10.0), ("2.0".into(), 50.0, 5.0)]
        );
        let jobs: f64 = shares(&running).iter().filter(|s| !s.0.contains('.')).map(|s| s.1).sum();
        assert_eq!(jobs, 400.0, "all the interval's energy, to the jobs");
        // A job whose CPU time is not known, or no CPU used at all: by time for this interval.
        for used in [cpu(&[(1, 5)]), cpu(&[(1, 0), (2, 0)])] {
            let mut again = running.clone();
            again.remove(&JobKey::parse("2.0").unwrap());
            for r in again.values_mut() {
                r.node_share.as_mut().unwrap().cpu_mj = Some(0.0);
            }
            charge(&totals(20, 0.0, 0.0), &totals(30, 100.0, 0.0), &mut again, Some(&used));
            assert_eq!(shares(&again).iter().map(|s| s.1).collect::<Vec<_>>(), [50.0, 50.0], "{used:?}");
        }
    }
}
