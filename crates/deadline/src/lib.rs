//! Running a program with a deadline, as every wattson program runs Slurm's commands, the power
//! actions and the BMC's reading: in a process group of its own, its output read while it runs
//! (a full pipe never stalls it), and the whole group killed at the deadline, so nothing it
//! started outlives it there. Processes it leaves behind that still hold its output when it
//! exits are killed then too: its answer never waits on them. One thread, no helper threads:
//! a run that ends has left nothing of the caller's behind.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

/// Most output kept from one command, per stream; the rest is read and dropped.
pub const MAX_OUTPUT: usize = 64 << 20;

/// How often a run whose output is quiet checks whether the program exited.
const TICK: Duration = Duration::from_millis(5);

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
    /// It ran past its deadline and was killed, with its process group.
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
    let started = Instant::now();
    let mut child = command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|error| CommandError::Start { program: program.clone(), error })?;
    let group = Pid::from_raw(child.id() as i32);
    let mut out = Stream::of(child.stdout.take().map(OwnedFd::from));
    let mut err = Stream::of(child.stderr.take().map(OwnedFd::from));
    let mut exited = false;
    let finished = loop {
        // Not reaped yet: while it is a zombie its process group id cannot be reused, so
        // killing the group kills only what it started.
        if !exited && !matches!(waitid(Id::Pid(group), wait_flags()), Ok(WaitStatus::StillAlive)) {
            exited = true;
            if out.open() || err.open() {
                // It left processes behind that hold its output: they are not its answer.
                let _ = killpg(group, Signal::SIGKILL);
            }
        }
        if exited && !out.open() && !err.open() {
            break true;
        }
        let Some(left) = timeout.checked_sub(started.elapsed()) else {
            break false;
        };
        read_ready(&mut out, &mut err, left.min(TICK));
    };
    if !finished {
        let _ = killpg(group, Signal::SIGKILL);
    }
    let status = child.wait();
    if !finished {
        return Err(CommandError::Timeout { program, timeout });
    }
    let status = status.map_err(|error| CommandError::Start { program: program.clone(), error })?;
    if status.success() {
        Ok(out.text())
    } else {
        Err(CommandError::Failed { program, status, stderr: err.text().trim().to_string() })
    }
}

/// An exited child, left unreaped; a running one is not waited for.
fn wait_flags() -> WaitPidFlag {
    WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT
}

/// One of the child's output streams and what was read from it; no pipe once at its end.
struct Stream {
    pipe: Option<File>,
    bytes: Vec<u8>,
}

impl Stream {
    fn of(pipe: Option<OwnedFd>) -> Stream {
        Stream { pipe: pipe.map(File::from), bytes: Vec::new() }
    }

    fn open(&self) -> bool {
        self.pipe.is_some()
    }

    fn text(&self) -> String {
        String::from_utf8_lossy(&self.bytes).into_owned()
    }

    /// Reads what is there (the poll said so); closes the stream at its end or on an error.
    fn read_some(&mut self) {
        let Some(pipe) = &mut self.pipe else { return };
        let mut chunk = [0u8; 64 * 1024];
        match pipe.read(&mut chunk) {
            Ok(0) => self.pipe = None,
            Ok(n) => {
                let room = MAX_OUTPUT.saturating_sub(self.bytes.len()).min(n);
                self.bytes.extend_from_slice(&chunk[..room]);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => self.pipe = None,
        }
    }
}

/// Waits up to `wait` for output on the open streams and reads what came.
fn read_ready(out: &mut Stream, err: &mut Stream, wait: Duration) {
    let timeout = PollTimeout::try_from(wait).unwrap_or(PollTimeout::ZERO);
    let mut streams: Vec<&mut Stream> = [out, err].into_iter().filter(|s| s.open()).collect();
    if streams.is_empty() {
        std::thread::sleep(wait);
        return;
    }
    let ready: Vec<bool> = {
        let mut fds: Vec<PollFd> = streams
            .iter()
            .filter_map(|s| s.pipe.as_ref())
            .map(|pipe| PollFd::new(pipe.as_fd(), PollFlags::POLLIN))
            .collect();
        if poll(&mut fds, timeout).is_err() {
            return;
        }
        fds.iter().map(|fd| fd.any().unwrap_or(true)).collect()
    };
    for (stream, ready) in streams.iter_mut().zip(ready) {
        if ready {
            stream.read_some();
        }
    }
}

#[cfg(test)]
mod tests;
