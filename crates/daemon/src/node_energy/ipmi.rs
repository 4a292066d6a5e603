//! The whole node's power from the BMC: `ipmitool dcmi power reading` (or the configured
//! command), run with a deadline, its instantaneous readings integrated. The command runs on a
//! thread of its own ([`Bmc`]), so a slow or hung BMC never holds the GPUs' sampling: each
//! sample takes the total of the latest reading finished.

use std::process::Command;
use std::time::Duration;

/// The instantaneous power in a DCMI power reading, W. A reading whose state is not
/// `activated` (the BMC measures nothing) is an error, as is one without the line.
pub fn parse(text: &str) -> Result<f64, String> {
    let field = |label: &str| {
        text.lines().find_map(|l| {
            let (key, value) = l.split_once(':')?;
            (key.trim().eq_ignore_ascii_case(label)).then(|| value.trim().to_string())
        })
    };
    if let Some(state) = field("Power reading state is")
        && !state.eq_ignore_ascii_case("activated")
    {
        return Err(format!("the BMC's power reading is {state}"));
    }
    let value = field("Instantaneous power reading").ok_or("no instantaneous power reading in the output")?;
    let watts = value
        .strip_suffix("Watts")
        .map(str::trim)
        .and_then(|n| n.parse::<f64>().ok())
        .filter(|w| w.is_finite() && *w >= 0.0)
        .ok_or_else(|| format!("unreadable power reading {value:?}"))?;
    Ok(watts)
}

/// Runs `argv` with the shared deadline runner (its process group killed whole at the
/// deadline, nothing it leaves behind waited for); its output if it exits with 0 in time.
pub fn run(argv: &[String], timeout: Duration) -> Result<String, String> {
    let (program, args) = argv.split_first().ok_or("no command")?;
    wattson_deadline::run(Command::new(program).args(args), timeout).map_err(|e| e.to_string())
}

/// The node's energy, integrated from its power readings.
#[derive(Debug)]
pub struct Ipmi {
    argv: Vec<String>,
    timeout: Duration,
    last: Option<(i64, f64)>,
    total_mj: f64,
    failing: bool,
}

impl Ipmi {
    /// A meter reading with `argv`; fails when the first reading does (no DCMI here).
    pub fn open(argv: Vec<String>, timeout: Duration, t_ns: i64) -> Result<Ipmi, String> {
        let watts = parse(&run(&argv, timeout)?)?;
        Ok(Ipmi { argv, timeout, last: Some((t_ns, watts)), total_mj: 0.0, failing: false })
    }

    /// Takes a reading at `t_ns` and returns the energy since the meter began, mJ. A failed
    /// reading adds nothing now (it is logged once per outage); the next good one bridges the
    /// gap from the last.
    pub fn read(&mut self, t_ns: i64) -> f64 {
        match run(&self.argv, self.timeout).and_then(|text| parse(&text)) {
            Ok(watts) => {
                self.failing = false;
                self.add(t_ns, watts);
            }
            Err(e) => {
                if !std::mem::replace(&mut self.failing, true) {
                    tracing::warn!(error = %e, "no DCMI power reading; the next one bridges the gap");
                }
            }
        }
        self.total_mj
    }

    /// Adds the energy from the last reading to one of `watts` at `t_ns` (the mean of the
    /// two readings over the time between them).
    fn add(&mut self, t_ns: i64, watts: f64) {
        if let Some((t0, w0)) = self.last
            && t_ns > t0
        {
            self.total_mj += (w0 + watts) / 2.0 * (t_ns - t0) as f64 / 1e6;
        }
        self.last = Some((t_ns, watts));
    }
}

/// An [`Ipmi`] meter owned by a thread of its own, asked for readings by message.
#[derive(Debug)]
pub struct Bmc {
    /// Asks for a reading; holds at most one not yet taken.
    ask: std::sync::mpsc::SyncSender<()>,
    /// The meter's total after its latest reading, mJ.
    total: tokio::sync::watch::Receiver<f64>,
}

impl Bmc {
    /// Moves `meter` to a thread of its own, which ends with the returned handle.
    pub fn spawn(mut meter: Ipmi) -> Result<Bmc, String> {
        let (ask, asks) = std::sync::mpsc::sync_channel::<()>(1);
        let (done, total) = tokio::sync::watch::channel(meter.total_mj);
        std::thread::Builder::new()
            .name("wattsond-bmc".into())
            .spawn(move || {
                for () in asks {
                    if done.send(meter.read(wattson_types::now_ns())).is_err() {
                        break;
                    }
                }
            })
            .map_err(|e| format!("cannot start the BMC's reader thread: {e}"))?;
        Ok(Bmc { ask, total })
    }

    /// The node's energy since the meter began as of the latest reading finished (mJ), never
    /// waiting; asks for a new reading unless one is already asked for.
    pub fn total(&mut self) -> f64 {
        let _ = self.ask.try_send(());
        *self.total.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const READING: &str = "
    Instantaneous power reading:                   412 Watts
    Minimum during sampling period:                 90 Watts
    Maximum during sampling period:                640 Watts
    Average power reading over sample period:      400 Watts
    IPM timestamp:                           Thu Nov 26 10:00:00 2026
    Sampling period:                         00000001 Seconds.
    Power reading state is:                  activated
";

    #[test]
    fn a_dcmi_reading_is_parsed_and_a_deactivated_or_odd_one_refused() {
        assert_eq!(parse(READING), Ok(412.0));
        let off = READING.replace("state is:                  activated", "state is: deactivated");
        assert!(parse(&off).unwrap_err().contains("deactivated"));
        assert!(parse("Get DCMI power reading failed\n").unwrap_err().contains("no instantaneous"));
        let odd = READING.replace("412 Watts", "-3 Watts");
        assert!(parse(&odd).unwrap_err().contains("unreadable"));
        let odd = READING.replace("412 Watts", "lots");
        assert!(parse(&odd).unwrap_err().contains("unreadable"));
    }

    #[test]
    fn readings_are_integrated_between_samples() {
        let mut m = Ipmi {
            argv: Vec::new(),
            timeout: Duration::from_secs(1),
            last: Some((0, 400.0)),
            total_mj: 0.0,
            failing: false,
        };
        m.add(1_000_000_000, 600.0);
        assert_eq!(m.total_mj, 500_000.0, "500 W for 1 s");
        m.add(1_000_000_000, 900.0);
        m.add(3_000_000_000, 900.0);
        assert_eq!(m.total_mj, 2_300_000.0);
    }

    #[test]
    fn the_command_runs_within_its_deadline() {
        let argv = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(run(&argv(&["/bin/echo", "x"]), Duration::from_secs(5)), Ok("x\n".to_string()));
        assert!(run(&argv(&["/bin/false"]), Duration::from_secs(5)).unwrap_err().contains("failed"));
        let slow = run(&argv(&["/bin/sleep", "30"]), Duration::from_millis(200)).unwrap_err();
        assert!(slow.contains("killed"), "{slow}");
        assert!(run(&argv(&[]), Duration::from_secs(1)).unwrap_err().contains("no command"));
    }
}
