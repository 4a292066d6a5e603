//! `wattson report`: jobs' GPU energy summed by user, account, partition or GPU type, with
//! GPU-hours, energy per GPU-hour, cost from the `[prices]` tariff, CO2 from the `[carbon]`
//! table, and the energy wattson's DVFS decisions saved (an estimate, labelled as such).

use std::collections::BTreeMap;

use serde::Serialize;
use wattson_types::job::JobRecord;
use wattson_types::prices::{CarbonIntensity, PriceSchedule};

/// What the jobs are grouped by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum GroupBy {
    /// The job's user.
    User,
    /// The job's Slurm account.
    Account,
    /// The job's Slurm partition.
    Partition,
    /// The model of the job's GPUs (`(no GPU)` for a CPU-only job).
    GpuType,
}

/// One job, as the report counts it.
#[derive(Debug, Clone)]
pub struct JobEnergy<'a> {
    /// The job's record on one node (the job's own, not a step's).
    pub record: &'a JobRecord,
    /// Its energy, J (the record's meters, or Slurm's figure for a row from Slurm).
    pub energy_j: f64,
    /// Its GPUs there (for a row from Slurm: as Slurm counts them, if it does).
    pub gpus: u32,
    /// Whether the figure is Slurm's, not wattson's.
    pub from_slurm: bool,
    /// Its user's name (Slurm's, else the record's, else the uid).
    pub user: String,
    /// Its Slurm account ("" where unknown).
    pub account: &'a str,
    /// Its Slurm partition.
    pub partition: &'a str,
}

/// One group's totals.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    /// The group's name (`(unknown)` where Slurm did not say).
    pub group: String,
    /// Jobs in the group.
    pub jobs: usize,
    /// GPU-hours: each node's GPUs times the job's elapsed time there.
    pub gpu_hours: f64,
    /// GPU energy, kWh.
    pub energy_kwh: f64,
    /// Cost from the tariff; `None` without one.
    pub cost: Option<f64>,
    /// CO2 from the carbon table, kg; `None` without one.
    pub co2_kg: Option<f64>,
    /// Estimate: energy the models' settings saved against the highest limit, kWh.
    pub saved_kwh_estimate: f64,
    /// The part of `energy_kwh` that is Slurm's figure (nodes whose wattsond gave no summary).
    pub from_slurm_kwh: f64,
}

impl Totals {
    /// kWh per GPU-hour; `None` with no GPU-hours.
    pub fn kwh_per_gpu_hour(&self) -> Option<f64> {
        (self.gpu_hours > 0.0).then(|| self.energy_kwh / self.gpu_hours)
    }
}

const J_PER_KWH: f64 = 3.6e6;

/// The GPU type of a job that held no GPU (`--by gpu-type`): a CPU-only job.
pub const NO_GPU: &str = "(no GPU)";

/// `jobs` summed per group (sorted by name), then the whole as a last row named `TOTAL`.
/// Cost and CO2 spread each job's energy evenly over its run, hour by hour.
pub fn totals(
    jobs: &[JobEnergy],
    by: GroupBy,
    prices: &PriceSchedule,
    carbon: &CarbonIntensity,
    now_ns: i64,
) -> Vec<Totals> {
    let mut groups: BTreeMap<String, (Totals, std::collections::BTreeSet<u32>)> = BTreeMap::new();
    let mut all = (Totals { group: "TOTAL".into(), ..Totals::default() }, std::collections::BTreeSet::new());
    for job in jobs {
        let r = job.record;
        let name = match by {
            GroupBy::User => job.user.clone(),
            GroupBy::Account => job.account.to_string(),
            GroupBy::Partition => job.partition.to_string(),
            GroupBy::GpuType => match r.gpus.first() {
                Some(gpu) => gpu.name.clone(),
                None if job.gpus == 0 => NO_GPU.to_string(),
                None => String::new(),
            },
        };
        let name = if name.is_empty() { "(unknown)".to_string() } else { name };
        let end_ns = r.end_ns.unwrap_or(now_ns).max(r.begin_ns);
        let hours = (end_ns - r.begin_ns) as f64 / 3.6e12;
        let kwh = job.energy_j / J_PER_KWH;
        let cost = spread(kwh, r.begin_ns, end_ns, |t| prices.price_at(t));
        let co2 = spread(kwh, r.begin_ns, end_ns, |t| carbon.at(t)).map(|g| g / 1000.0);
        let saved = r.dvfs.as_ref().and_then(|d| d.energy_saved_j).unwrap_or(0.0) / J_PER_KWH;
        let group = groups
            .entry(name.clone())
            .or_insert_with(|| (Totals { group: name, ..Totals::default() }, Default::default()));
        for (t, ids) in [(&mut group.0, &mut group.1), (&mut all.0, &mut all.1)] {
            ids.insert(r.key.job_id);
            t.jobs = ids.len();
            t.gpu_hours += f64::from(job.gpus) * hours;
            t.energy_kwh += kwh;
            t.cost = add(t.cost, cost);
            t.co2_kg = add(t.co2_kg, co2);
            t.saved_kwh_estimate += saved;
            if job.from_slurm {
                t.from_slurm_kwh += kwh;
            }
        }
    }
    groups.into_values().map(|(t, _)| t).chain([all.0]).collect()
}

fn add(sum: Option<f64>, part: Option<f64>) -> Option<f64> {
    match (sum, part) {
        (Some(a), Some(b)) => Some(a + b),
        (None, b) => b,
        (a, None) => a,
    }
}

/// `kwh` spread evenly over `[begin_ns, end_ns]`, each hour's share times `rate` at that hour;
/// `None` when there is no rate.
fn spread(kwh: f64, begin_ns: i64, end_ns: i64, rate: impl Fn(i64) -> Option<f64>) -> Option<f64> {
    let (begin, end) = (begin_ns as f64 / 1e9, end_ns as f64 / 1e9);
    if end <= begin {
        return rate(begin.floor() as i64).map(|r| r * kwh);
    }
    let mut sum = 0.0;
    let mut t = begin;
    while t < end {
        let next = ((t / 3600.0).floor() + 1.0) * 3600.0;
        let slice = next.min(end) - t;
        sum += rate(t.floor() as i64)? * kwh * slice / (end - begin);
        t = next;
    }
    Some(sum)
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattson_types::job::{Hints, JobKey, JobState};

    fn record(job: u32, user: &str, begin_h: f64, end_h: f64) -> JobRecord {
        JobRecord {
            key: JobKey::job(job),
            uid: 1000,
            user: Some(user.into()),
            name: None,
            node: "n1".into(),
            begin_ns: (begin_h * 3.6e12) as i64,
            end_ns: Some((end_h * 3.6e12) as i64),
            state: JobState::Completed,
            hints: Hints::default(),
            policy: None,
            gpus: Vec::new(),
            dvfs: None,
            node_share: None,
        }
    }

    #[test]
    fn groups_sum_energy_gpu_hours_cost_and_co2_hour_by_hour() {
        // alice: 2 kWh on 2 GPUs from 05:30 to 06:30 (half at the night price), and the same
        // job's second node (1 kWh from Slurm); bob: 4 kWh on 4 GPUs from 10:00 to 12:00.
        let (a, a2, b) =
            (record(1, "alice", 5.5, 6.5), record(1, "alice", 5.5, 6.5), record(2, "bob", 10.0, 12.0));
        let job = |record, kwh: f64, gpus, from_slurm| JobEnergy {
            record,
            energy_j: kwh * J_PER_KWH,
            gpus,
            from_slurm,
            user: record.user.clone().unwrap(),
            account: "",
            partition: "gpu",
        };
        let jobs = [job(&a, 2.0, 2, false), job(&a2, 1.0, 0, true), job(&b, 4.0, 4, false)];
        let prices = PriceSchedule { hourly_utc: (0..24).map(|h| if h < 6 { 0.10 } else { 0.30 }).collect() };
        let carbon = CarbonIntensity { hourly_utc: vec![500.0; 24] };
        let t = totals(&jobs, GroupBy::User, &prices, &carbon, 0);
        assert_eq!(t.iter().map(|t| t.group.as_str()).collect::<Vec<_>>(), ["alice", "bob", "TOTAL"]);
        let close = |x: Option<f64>, y: f64| x.is_some_and(|x| (x - y).abs() < 1e-9);
        assert_eq!((t[0].jobs, t[0].energy_kwh, t[0].from_slurm_kwh), (1, 3.0, 1.0));
        assert!((t[0].gpu_hours - 2.0).abs() < 1e-9);
        assert!(close(t[0].cost, 1.5 * 0.10 + 1.5 * 0.30), "{:?}", t[0].cost);
        assert!(
            close(t[1].cost, 4.0 * 0.30) && close(t[1].co2_kg, 2.0) && close(t[1].kwh_per_gpu_hour(), 0.5)
        );
        assert_eq!((t[2].jobs, t[2].energy_kwh), (2, 7.0));
        assert!(close(t[2].co2_kg, 3.5));
        // No tariff, no carbon table: no cost, no CO2. Unknown accounts are named so.
        let t = totals(&jobs, GroupBy::Account, &PriceSchedule::default(), &CarbonIntensity::default(), 0);
        assert_eq!((t[0].group.as_str(), t[0].cost, t[0].co2_kg), ("(unknown)", None, None));
    }

    #[test]
    fn a_cpu_only_job_is_its_own_gpu_type_and_a_job_whose_gpus_are_not_known_is_unknown() {
        let (cpu, slurm) = (record(3, "carol", 1.0, 2.0), record(4, "dave", 1.0, 2.0));
        let job = |record, gpus| JobEnergy {
            record,
            energy_j: J_PER_KWH,
            gpus,
            from_slurm: gpus > 0,
            user: String::new(),
            account: "",
            partition: "cpu",
        };
        let none = (PriceSchedule::default(), CarbonIntensity::default());
        let t = totals(&[job(&cpu, 0), job(&slurm, 2)], GroupBy::GpuType, &none.0, &none.1, 0);
        let groups: Vec<(&str, f64)> = t.iter().map(|t| (t.group.as_str(), t.energy_kwh)).collect();
        assert_eq!(groups, [("(no GPU)", 1.0), ("(unknown)", 1.0), ("TOTAL", 2.0)]);
        assert_eq!(t[0].kwh_per_gpu_hour(), None, "no GPU-hours");
    }
}
