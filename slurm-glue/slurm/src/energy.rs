//! What the `acct_gather_energy/wattson` plugin does, apart from the FFI: in slurmd, the node's
//! GPU energy (its GPUs' counters, summed); in each slurmstepd, the energy wattsond meters in
//! the configured scope (`[energy] scope`: wattsond answers in it): the job's, counted from the
//! job's begin, for the extern step (which spans the allocation, so Slurm's job row gets the
//! job's whole energy), and the step's own record for the others (the SPANK plugin registers
//! each step), or, until the step has a record, the job's from the step's first poll. Every call
//! is bounded by [`POLL_TIMEOUT`]; a wattsond that lets a poll time out is
//! left alone for [`RETRY_AFTER`] (one that is simply down fails at once and is asked again at
//! the next poll, so a restart loses no step's final figures). Figures never go backwards and
//! stay where they were while wattsond cannot answer.

use std::time::{Duration, Instant};

use wattson_protocol::{ClientError, ErrorCode, Reply, Request};

use crate::node::PluginArgs;

/// The longest one poll waits for wattsond.
pub const POLL_TIMEOUT: Duration = Duration::from_secs(2);
/// After a poll that timed out, how long the plugin keeps its last figures before asking again.
pub const RETRY_AFTER: Duration = Duration::from_secs(30);

/// The Slurm process the plugin is loaded in, as its command line says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Process {
    /// slurmd: reports the node's GPU energy.
    Slurmd,
    /// A slurmstepd (`slurmstepd: [<job>.<step>]`): reports the step's GPU energy.
    Step {
        /// Slurm job id.
        job: u32,
        /// The step as sacct names it (`0`, `batch`, `extern`).
        step: String,
        /// The extern step, which spans the job's whole allocation.
        is_extern: bool,
    },
    /// slurmctld or anything else: the plugin does nothing there.
    Other,
}

impl Process {
    /// Reads `/proc/self/cmdline` (NUL-separated arguments).
    pub fn from_cmdline(cmdline: &[u8]) -> Process {
        let text = String::from_utf8_lossy(cmdline);
        let argv0 = text.split('\0').next().unwrap_or("");
        if let Some(rest) = argv0.strip_prefix("slurmstepd: [") {
            let inner = rest.split(']').next().unwrap_or("");
            return match inner.split_once('.') {
                Some((job, step)) => match job.parse() {
                    Ok(job) => Process::Step { job, step: step.to_string(), is_extern: step == "extern" },
                    Err(_) => Process::Other,
                },
                None => Process::Other,
            };
        }
        match argv0.rsplit('/').next() {
            Some("slurmd") => Process::Slurmd,
            _ => Process::Other,
        }
    }

    /// This process's.
    pub fn current() -> Process {
        std::fs::read("/proc/self/cmdline").map(|c| Process::from_cmdline(&c)).unwrap_or(Process::Other)
    }
}

/// What wattsond says at one poll: energy (mJ, cumulative; a job's in its scope) and its GPUs'
/// power now (mW).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Reading {
    /// Cumulative energy: a job's since its begin, or the node's GPU counters summed.
    pub energy_mj: u64,
    /// Power at the reading.
    pub power_mw: u64,
}

/// Why a poll got no figures.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PollError {
    /// What went wrong, for the log.
    pub message: String,
    /// The poll waited its whole timeout (wattsond hung): asking again would stall again.
    pub timed_out: bool,
}

impl From<String> for PollError {
    fn from(message: String) -> PollError {
        PollError { message, timed_out: false }
    }
}

impl From<ClientError> for PollError {
    fn from(e: ClientError) -> PollError {
        PollError { timed_out: matches!(e, ClientError::Timeout(_)), message: e.to_string() }
    }
}

/// One energy record as Slurm keeps it (`acct_gather_energy_t`): joules, watts, Unix seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Energy {
    /// Energy since the meter's start.
    pub consumed_j: u64,
    /// Energy since the previous poll.
    pub increment_j: u64,
    /// `consumed_j` at the previous poll.
    pub previous_j: u64,
    /// Power at the last reading.
    pub current_w: u32,
    /// Mean power since the meter's first poll.
    pub ave_w: u32,
    /// When the figures were last read (0: never).
    pub poll_time: i64,
}

/// Where a meter counts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Start {
    /// From zero of the reading itself (a job's energy since its begin).
    Zero,
    /// From the first reading (a step's share of its job, or the node since slurmd started).
    FirstReading,
}

/// Turns wattsond's readings into Slurm's record, never backwards, with the retry pause.
#[derive(Debug, Clone)]
pub struct Meter {
    start: Start,
    baseline_mj: Option<u64>,
    first_poll: Option<i64>,
    energy: Energy,
    retry_at: Option<Instant>,
    failing: bool,
}

impl Meter {
    /// Counts from `start` of the next reading on, never going below the figures so far (a
    /// step's meter moving from its job's energy to the step's own record).
    pub fn restart(&mut self, start: Start) {
        self.start = start;
        self.baseline_mj = None;
    }

    /// A meter counting from `start`.
    pub fn new(start: Start) -> Meter {
        Meter {
            start,
            baseline_mj: None,
            first_poll: None,
            energy: Energy::default(),
            retry_at: None,
            failing: false,
        }
    }

    /// The figures as of the last good poll.
    pub fn energy(&self) -> Energy {
        self.energy
    }

    /// Polls with `read` unless a timeout is still being waited out; returns the log line for a
    /// failure (one per outage). `Ok(None)` from `read` means nothing to meter yet (the job has
    /// no record on this node): the figures stay.
    pub fn poll(
        &mut self,
        now: Instant,
        unix_s: i64,
        read: impl FnOnce() -> Result<Option<Reading>, PollError>,
    ) -> Option<String> {
        if self.retry_at.is_some_and(|at| now < at) {
            return None;
        }
        self.retry_at = None;
        match read() {
            Ok(reading) => {
                self.failing = false;
                if let Some(reading) = reading {
                    self.observe(reading, unix_s);
                }
                None
            }
            Err(e) => {
                let pause = if e.timed_out {
                    self.retry_at = Some(now + RETRY_AFTER);
                    format!("next try in {}s", RETRY_AFTER.as_secs())
                } else {
                    "next try at the next poll".to_string()
                };
                let first = !std::mem::replace(&mut self.failing, true);
                first.then(|| format!("{}; figures kept, {pause}", e.message))
            }
        }
    }

    fn observe(&mut self, reading: Reading, unix_s: i64) {
        let baseline = *self.baseline_mj.get_or_insert(match self.start {
            Start::Zero => 0,
            Start::FirstReading => reading.energy_mj,
        });
        let first = *self.first_poll.get_or_insert(unix_s);
        let previous = self.energy.consumed_j;
        let consumed = (reading.energy_mj.saturating_sub(baseline) / 1000).max(previous);
        let elapsed = (unix_s - first).max(0) as u64;
        let current_w = u32::try_from(reading.power_mw / 1000).unwrap_or(u32::MAX);
        self.energy = Energy {
            consumed_j: consumed,
            increment_j: consumed - previous,
            previous_j: previous,
            current_w,
            ave_w: consumed.checked_div(elapsed).map_or(current_w, |w| u32::try_from(w).unwrap_or(u32::MAX)),
            poll_time: unix_s,
        };
    }
}

/// The GPU energy of a job (`step` empty) or step on this node from wattsond; `None` when it
/// has no record running here.
pub fn job_energy(args: &PluginArgs, job: u32, step: &str) -> Result<Option<Reading>, PollError> {
    match args.call_with(&args.load()?, &Request::JobEnergy { job, step: step.to_string() }) {
        Ok(Reply::JobEnergy { energy_mj, power_mw, .. }) => Ok(Some(Reading { energy_mj, power_mw })),
        Ok(other) => Err(format!("unexpected reply {other:?}").into()),
        Err(ClientError::Refused(e)) if e.code == ErrorCode::NotRunning => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// The node's GPU energy: every GPU's counter (mJ) and power, summed, from wattsond's status.
pub fn node_energy(args: &PluginArgs) -> Result<Option<Reading>, PollError> {
    match args.call_with(&args.load()?, &Request::Status {}) {
        Ok(Reply::Status { gpus, .. }) => {
            let readings = gpus.iter().filter_map(|g| g.reading.as_ref());
            let (energy_mj, power_mw) = readings.fold((0u64, 0u64), |(e, p), r| {
                (e + r.energy_mj.unwrap_or(0), p + u64::from(r.power_mw.unwrap_or(0)))
            });
            Ok(Some(Reading { energy_mj, power_mw }))
        }
        Ok(other) => Err(format!("unexpected reply {other:?}").into()),
        Err(e) => Err(e.into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_process_is_read_from_its_command_line() {
        assert_eq!(
            Process::from_cmdline(b"slurmstepd: [61.extern]\0\0\0"),
            Process::Step { job: 61, step: "extern".into(), is_extern: true }
        );
        assert_eq!(
            Process::from_cmdline(b"slurmstepd: [7.batch]"),
            Process::Step { job: 7, step: "batch".into(), is_extern: false }
        );
        assert_eq!(
            Process::from_cmdline(b"slurmstepd: [7.0]"),
            Process::Step { job: 7, step: "0".into(), is_extern: false }
        );
        assert_eq!(Process::from_cmdline(b"/usr/sbin/slurmd\0-D\0-N\0n1\0"), Process::Slurmd);
        assert_eq!(Process::from_cmdline(b"slurmd"), Process::Slurmd);
        for other in [&b"/usr/sbin/slurmctld\0-D"[..], b"slurmstepd: [x.0]", b"slurmstepd: [12]", b""] {
            assert_eq!(Process::from_cmdline(other), Process::Other, "{other:?}");
        }
    }

    fn reading(energy_mj: u64, power_mw: u64) -> Result<Option<Reading>, PollError> {
        Ok(Some(Reading { energy_mj, power_mw }))
    }

    fn failure(timed_out: bool) -> Result<Option<Reading>, PollError> {
        Err(PollError { message: "wattsond is not reachable".into(), timed_out })
    }

    #[test]
    fn a_step_counts_from_its_first_poll_and_the_extern_step_from_the_jobs_begin() {
        let t = Instant::now();
        let mut step = Meter::new(Start::FirstReading);
        let mut whole = Meter::new(Start::Zero);
        for m in [&mut step, &mut whole] {
            assert_eq!(m.poll(t, 100, || reading(50_000, 300_000)), None);
        }
        assert_eq!((step.energy().consumed_j, whole.energy().consumed_j), (0, 50));
        step.poll(t, 110, || reading(3_050_999, 300_000));
        assert_eq!(
            step.energy(),
            Energy {
                consumed_j: 3000,
                increment_j: 3000,
                previous_j: 0,
                current_w: 300,
                ave_w: 300,
                poll_time: 110
            }
        );
        step.poll(t, 120, || reading(4_050_000, 250_000));
        assert_eq!(
            step.energy(),
            Energy {
                consumed_j: 4000,
                increment_j: 1000,
                previous_j: 3000,
                current_w: 250,
                ave_w: 200,
                poll_time: 120
            }
        );
    }

    #[test]
    fn a_failed_poll_keeps_the_figures_and_a_timed_out_one_pauses_the_polls() {
        let t = Instant::now();
        let mut m = Meter::new(Start::Zero);
        m.poll(t, 100, || reading(10_000, 1_000));
        // wattsond down: one log line per outage, asked again at every poll.
        let logged = m.poll(t, 101, || failure(false)).unwrap();
        assert!(logged.contains("not reachable") && logged.contains("next poll"), "{logged}");
        assert_eq!(m.poll(t, 102, || failure(false)), None);
        assert_eq!(m.energy().consumed_j, 10);
        m.poll(t, 103, || reading(12_000, 1_000));
        assert_eq!(m.energy().consumed_j, 12);
        // wattsond hung: within the pause it is not asked; after it, it is.
        let logged = m.poll(t, 104, || failure(true)).unwrap();
        assert!(logged.contains("30s"), "{logged}");
        assert_eq!(m.poll(t + Duration::from_secs(5), 105, || panic!("asked during the pause")), None);
        m.poll(t + RETRY_AFTER, 134, || reading(20_000, 1_000));
        assert_eq!(m.energy().consumed_j, 20);
        // A reading lower than the last (a restarted counter) never takes the total back.
        m.poll(t + RETRY_AFTER, 135, || reading(5_000, 1_000));
        assert_eq!((m.energy().consumed_j, m.energy().increment_j), (20, 0));
        // A job not (yet) known here leaves the figures as they are.
        m.poll(t + RETRY_AFTER, 136, || Ok(None));
        assert_eq!(m.energy().consumed_j, 20);
    }
}
