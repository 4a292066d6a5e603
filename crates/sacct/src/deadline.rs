//! Running a program with a deadline: its output read while it runs (a full pipe never stalls
//! it), killed once the deadline passes.

use std::io::Read;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Most output kept from one command, per stream.
const MAX_OUTPUT: u64 = 64 << 20;

/// Why a command gave no usable answer.
#[derive(Debug, thiserror::Error)]
pub enum CommandError {
    /// It could not be started.
    #[error("cannot run {program}: {error}")]
    Start {
        /// The program.
        program: String,
        /// Why.
        error: std::io::Error,
    },
    /// It ran past its deadline and was killed.
    #[error("{program} did not finish within {timeout:?} and was killed")]
    Timeout {
        /// The program.
        program: String,
        /// The deadline.
        timeout: Duration,
    },
    /// It failed.
    #[error("{program} failed ({status}): {stderr}")]
    Failed {
        /// The program.
        program: String,
        /// Its exit status.
        status: ExitStatus,
        /// What it said.
        stderr: String,
    },
}

/// Runs `command` to completion within `timeout`; its standard output when it succeeds.
pub fn run(command: &mut Command, timeout: Duration) -> Result<String, CommandError> {
    let program = command.get_program().to_string_lossy().into_owned();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|error| CommandError::Start { program: program.clone(), error })?;
    let reader = |stream: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(stream) = stream {
                let _ = stream.take(MAX_OUTPUT).read_to_end(&mut text);
            }
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let out = reader(child.stdout.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
    let err = reader(child.stderr.take().map(|s| Box::new(s) as Box<dyn Read + Send>));
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < timeout => std::thread::sleep(Duration::from_millis(2)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(CommandError::Timeout { program, timeout });
            }
        }
    };
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    if status.success() {
        Ok(stdout)
    } else {
        Err(CommandError::Failed { program, status, stderr: stderr.trim().to_string() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn output_failure_and_deadline() {
        let ok = run(Command::new("/bin/echo").arg("hi"), Duration::from_secs(5)).unwrap();
        assert_eq!(ok, "hi\n");
        let failed = run(&mut Command::new("/bin/false"), Duration::from_secs(5)).unwrap_err();
        assert!(matches!(failed, CommandError::Failed { .. }), "{failed}");
        let started = Instant::now();
        let slow = run(Command::new("/bin/sleep").arg("30"), Duration::from_millis(200)).unwrap_err();
        assert!(matches!(slow, CommandError::Timeout { .. }), "{slow}");
        assert!(started.elapsed() < Duration::from_secs(5), "killed at the deadline");
    }
}
