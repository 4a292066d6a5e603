//! A job's summary on one node, as the controller gathers it after the job to write into
//! Slurm's accounting: the node's records of the job and its steps, and each GPU's power over
//! the job, downsampled.

use serde::{Deserialize, Serialize};

use crate::energy::SeriesPoint;
use crate::job::JobRecord;

/// One GPU's power over a job, in bins: `watts[i]` is the mean power from the end of bin
/// `i - 1` (the job's begin for bin 0) to `t_s[i]`, from the energy metered between those
/// readings, so the bins add up to the metered energy.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PowerTrace {
    /// NVML index of the GPU on its node.
    pub gpu: u32,
    /// End of each bin, seconds after `begin_ns`.
    pub t_s: Vec<f32>,
    /// Mean power in each bin, W.
    pub watts: Vec<f32>,
}

impl PowerTrace {
    /// Energy the bins add up to, J.
    pub fn energy_j(&self) -> f64 {
        let mut last = 0.0;
        let mut sum = 0.0;
        for (&t, &w) in self.t_s.iter().zip(&self.watts) {
            sum += f64::from(w) * f64::from(t - last);
            last = t;
        }
        sum
    }
}

/// What one node knows of a job.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeSummary {
    /// Node name, as Slurm calls it.
    pub node: String,
    /// The node's records of the job and its first steps (none if the job had no GPUs there).
    pub records: Vec<JobRecord>,
    /// Steps recorded here but left out of `records` (at most [`MAX_STEPS`] are kept).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub steps_left_out: usize,
    /// When the power traces start, ns since the Unix epoch (the job's begin on the node).
    pub begin_ns: i64,
    /// Each of the job's GPUs' power over the job.
    pub power: Vec<PowerTrace>,
}

/// Most step records a node's summary carries besides the job's own.
pub const MAX_STEPS: usize = 32;

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Each GPU's power in `points` (one GPU's readings in time order, the job's energy on that GPU
/// so far in each), cut into at most `bins` bins of equal duration from `begin_ns`.
pub fn power_traces(points: &[SeriesPoint], begin_ns: i64, bins: usize) -> Vec<PowerTrace> {
    let mut gpus: Vec<u32> = points.iter().map(|p| p.gpu_index).collect();
    gpus.sort_unstable();
    gpus.dedup();
    let end_ns = points.iter().map(|p| p.t_ns).max().unwrap_or(begin_ns);
    let span = (end_ns - begin_ns).max(1) as f64;
    let bins = bins.max(1);
    gpus.into_iter()
        .map(|gpu| {
            let mut trace = PowerTrace { gpu, ..PowerTrace::default() };
            let (mut last_t, mut last_e) = (begin_ns, 0.0);
            let mine: Vec<&SeriesPoint> = points.iter().filter(|p| p.gpu_index == gpu).collect();
            for (i, p) in mine.iter().enumerate() {
                let bin = |t: i64| (((t - begin_ns) as f64 / span) * bins as f64).floor() as i64;
                let closes_bin = mine.get(i + 1).is_none_or(|next| bin(next.t_ns) != bin(p.t_ns));
                if closes_bin && p.t_ns > last_t {
                    let watts = (p.energy_mj - last_e) / 1000.0 / ((p.t_ns - last_t) as f64 / 1e9);
                    trace.t_s.push(((p.t_ns - begin_ns) as f64 / 1e9) as f32);
                    trace.watts.push(watts as f32);
                    (last_t, last_e) = (p.t_ns, p.energy_mj);
                }
            }
            trace
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn point(t_s: f64, gpu: u32, energy_j: f64) -> SeriesPoint {
        SeriesPoint {
            t_ns: (t_s * 1e9) as i64,
            gpu_index: gpu,
            power_mw: None,
            sm_clock_mhz: None,
            util_pct: None,
            energy_mj: energy_j * 1000.0,
        }
    }

    #[test]
    fn bins_hold_the_mean_power_and_add_up_to_the_metered_energy() {
        // GPU 0: 100 W for 10 s then 300 W for 10 s, a reading a second; GPU 3: 50 W.
        let mut points = Vec::new();
        for s in 1..=20 {
            let e0 = if s <= 10 { 100.0 * s as f64 } else { 1000.0 + 300.0 * (s - 10) as f64 };
            points.push(point(s as f64, 0, e0));
            points.push(point(s as f64, 3, 50.0 * s as f64));
        }
        let traces = power_traces(&points, 0, 4);
        assert_eq!(traces.len(), 2);
        let t0 = &traces[0];
        assert_eq!(t0.gpu, 0);
        assert!(t0.watts.len() <= 5, "{t0:?}");
        assert!((t0.energy_j() - 4000.0).abs() < 1e-3, "{}", t0.energy_j());
        assert!(
            (t0.watts[0] - 100.0).abs() < 1e-3 && (t0.watts.last().unwrap() - 300.0).abs() < 1e-3,
            "{t0:?}"
        );
        assert!((traces[1].energy_j() - 1000.0).abs() < 1e-3);
        assert!(traces[1].watts.iter().all(|w| (w - 50.0).abs() < 1e-3));
        // More bins than readings: one bin per reading.
        assert_eq!(power_traces(&points, 0, 1000)[0].watts.len(), 20);
        assert!(power_traces(&[], 0, 10).is_empty());
    }
}
