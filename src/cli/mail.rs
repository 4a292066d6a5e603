//! `wattson-mail`: Slurm's `MailProg`, which adds the job's energy summary to the mail Slurm
//! sends when a job ends or fails, and hands every mail on to the site's mailer
//! (`[mail] program`).
//!
//! Slurm runs `MailProg -s SUBJECT RECIPIENT` on the controller for each `--mail-type` event.
//! The job's summary reaches Slurm's accounting only after the job, when `wattson ctld` has
//! gathered every node's part, so an end-of-job mail is sent from a detached process that waits
//! for it (`[mail] wait`) and goes without it when it does not come: Slurm is never held up,
//! and no mail is lost. Other mails go to the mailer at once, untouched.
//!
//! Waiting costs Slurm's accounting a `sacct` call per look: a waiting mail looks after 3 s,
//! then twice as long each time, at most a minute apart, and at most [`MAX_WAITING`] mails
//! wait at once; more go at once, saying where the summary will be. A job that asked Slurm
//! for no GPU (no `gpu`, `shard` or `mps` GRES) has no wattson record: its mail goes at once,
//! untouched.

use std::io::{Read, Write};
use std::path::Path;
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

use wattson_config::Config;

/// The first pause of an end-of-job mail before it looks for the job's summary again.
const POLL: Duration = Duration::from_secs(3);
/// The longest pause between two looks.
const MAX_POLL: Duration = Duration::from_secs(60);
/// The most end-of-job mails that wait for their summaries at once (those of the user Slurm
/// runs `MailProg` as); a thousand jobs ending together put a few dozen `sacct` calls a minute
/// on slurmdbd, not hundreds a second.
pub const MAX_WAITING: usize = 32;
/// The name a waiting mail's process goes by (`/proc/PID/comm`), by which they are counted.
const WAITING_NAME: &str = "wattson-mailw";
/// The most of a mail's body read from Slurm.
const MAX_BODY: u64 = 64 << 10;
/// The longest the mailer may take.
const MAILER_TIMEOUT: Duration = Duration::from_secs(60);

/// What Slurm said a mail is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailEvent {
    /// The job.
    pub job: u32,
    /// The job has ended (Slurm's `Ended` and `Failed` mails).
    pub ended: bool,
}

/// The job and the kind of mail, from Slurm's environment (`SLURM_JOB_ID`,
/// `SLURM_JOB_MAIL_TYPE`) where it sets them, else from the subject it writes
/// (`Slurm Job_id=12 Name=x Ended, Run time 00:00:03, COMPLETED, ExitCode 0`).
pub fn event(args: &[String], job_id: Option<&str>, mail_type: Option<&str>) -> Option<MailEvent> {
    let subject = args.iter().position(|a| a == "-s").and_then(|i| args.get(i + 1)).map(String::as_str);
    let from_subject = || {
        let rest = subject?.split("Job_id=").nth(1)?;
        rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
    };
    let job = job_id.and_then(|j| j.parse().ok()).or_else(from_subject)?;
    let ended = match mail_type {
        Some(kind) => matches!(kind, "Ended" | "Failed"),
        None => subject.is_some_and(|s| s.contains(" Ended,") || s.contains(" Failed,")),
    };
    Some(MailEvent { job, ended })
}

/// Runs `wattson-mail` with Slurm's arguments.
pub fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let config = match std::env::var_os("WATTSON_CONFIG") {
        Some(path) => Config::load(std::path::Path::new(&path)),
        None => Config::load_or_default(None),
    };
    // A bad configuration must not cost the user their mail: the defaults send it.
    let config = config.unwrap_or_else(|e| {
        eprintln!("wattson-mail: {e}; mailing with the defaults");
        Config::default()
    });
    let event = event(
        &args,
        std::env::var("SLURM_JOB_ID").ok().as_deref(),
        std::env::var("SLURM_JOB_MAIL_TYPE").ok().as_deref(),
    );
    let mut body = Vec::new();
    let _ = std::io::stdin().take(MAX_BODY).read_to_end(&mut body);
    if let Some(MailEvent { job, ended: true }) = event {
        let waiting = processes_named(Path::new("/proc"), nix::unistd::getuid().as_raw(), WAITING_NAME);
        if waiting >= MAX_WAITING {
            body.extend_from_slice(too_many(job, waiting).as_bytes());
        } else {
            if detach() {
                return ExitCode::SUCCESS;
            }
            if !asked_no_gpu(job, config.ctld.command_timeout) {
                let _ = nix::sys::prctl::set_name(&std::ffi::CString::new(WAITING_NAME).expect("no NUL"));
                body.extend_from_slice(summary_part(&config, job).as_bytes());
            }
        }
    }
    match send(&config.mail.program, &args, &body) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("wattson-mail: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Forks a detached child that goes on, in a session of its own and without the standard
/// streams Slurm gave; `true` in the parent, which returns to Slurm at once. Without a fork the
/// mail is sent from this process.
fn detach() -> bool {
    use nix::unistd::{ForkResult, fork, setsid};
    // SAFETY: no thread has been started yet; the child only goes on with this program.
    match unsafe { fork() } {
        Ok(ForkResult::Parent { .. }) => true,
        Ok(ForkResult::Child) => {
            let _ = setsid();
            // Slurm may read the program's output until it closes: the child keeps none of it.
            if let Ok(null) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/null") {
                let _ = nix::unistd::dup2_stdin(&null);
                let _ = nix::unistd::dup2_stdout(&null);
                let _ = nix::unistd::dup2_stderr(&null);
            }
            false
        }
        Err(_) => false,
    }
}

/// The text added to an end-of-job mail: the job's summary once Slurm's accounting has it, else
/// why there is none.
fn summary_part(config: &Config, job: u32) -> String {
    let deadline = Instant::now() + config.mail.wait;
    let mut look = 0;
    loop {
        let written = wattson_sacct::comment::from_accounting(job, config.ctld.command_timeout);
        if let Ok(Some(_)) = written {
            return match super::job_summary::text(config, job, false) {
                Ok(text) => format!("\nGPU energy (wattson):\n{text}"),
                Err(e) => format!("\nwattson: no energy summary: {e}\n"),
            };
        }
        if Instant::now() >= deadline {
            return format!(
                "\nwattson: the job's energy summary was not in Slurm's accounting within {}; \
                 later, `wattson job-summary {job}` shows it.\n",
                humantime::format_duration(config.mail.wait)
            );
        }
        std::thread::sleep(pause(look).min(deadline.saturating_duration_since(Instant::now())));
        look += 1;
    }
}

/// Whether slurmctld says `job` asked for no GPU (`scontrol show job`, which knows a job for
/// `MinJobAge` after its end); `false` where it cannot say.
fn asked_no_gpu(job: u32, timeout: Duration) -> bool {
    let mut scontrol = Command::new("scontrol");
    scontrol.args(["show", "job", "-o", &job.to_string()]);
    wattson_deadline::run(&mut scontrol, timeout).is_ok_and(|text| {
        text.lines().any(|line| line.starts_with(&format!("JobId={job} "))) && !requests_gpus(&text)
    })
}

/// Whether `scontrol show job -o` text asks for GPUs or parts of one: a `gpu`, `shard` or
/// `mps` GRES in any of its `TresPer*` requests or its `TRES`. A user's job name or command
/// that looks like one only makes the mail wait, as it would for any GPU job.
pub fn requests_gpus(text: &str) -> bool {
    text.split_whitespace().filter_map(|token| token.split_once('=')).any(|(key, value)| {
        (key.starts_with("TresPer") || key == "TRES")
            && value.split(',').any(|part| {
                ["gres/gpu", "gres:gpu", "gres/shard", "gres:shard", "gres/mps", "gres:mps"]
                    .iter()
                    .any(|kind| part.starts_with(kind))
            })
    })
}

/// The pause after look `look` (from 0) for a job's summary: `POLL`, doubling, at most
/// `MAX_POLL`.
pub fn pause(look: u32) -> Duration {
    POLL.saturating_mul(1 << look.min(16)).min(MAX_POLL)
}

/// User `uid`'s processes named `name` in `proc` (a `/proc`): with `WAITING_NAME`, the
/// end-of-job mails waiting for their summaries.
pub fn processes_named(proc: &Path, uid: u32, name: &str) -> usize {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(proc) else { return 0 };
    entries
        .filter_map(Result::ok)
        .filter(|e| e.file_name().to_str().is_some_and(|n| n.bytes().all(|b| b.is_ascii_digit())))
        .filter(|e| e.metadata().is_ok_and(|m| m.uid() == uid))
        .filter(|e| std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim_end() == name))
        .count()
}

/// The text added to an end-of-job mail that does not wait: `waiting` others already do.
fn too_many(job: u32, waiting: usize) -> String {
    format!(
        "\nwattson: {waiting} other mails are waiting for their jobs' energy summaries, so this one \
         goes without; once written, `wattson job-summary {job}` shows it.\n"
    )
}

/// Hands `body` to the mailer with Slurm's `args`, waiting at most [`MAILER_TIMEOUT`].
fn send(program: &[String], args: &[String], body: &[u8]) -> Result<(), String> {
    let (mailer, fixed) = program.split_first().ok_or("no mailer configured")?;
    let mut child = Command::new(mailer)
        .args(fixed)
        .args(args)
        .stdin(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{mailer}: {e}"))?;
    if let Some(mut stdin) = child.stdin.take() {
        let _ = stdin.write_all(body);
    }
    let deadline = Instant::now() + MAILER_TIMEOUT;
    loop {
        match child.try_wait().map_err(|e| format!("{mailer}: {e}"))? {
            Some(status) if status.success() => return Ok(()),
            Some(status) => return Err(format!("{mailer}: {status}")),
            None if Instant::now() >= deadline => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(format!("{mailer}: still running after {MAILER_TIMEOUT:?}, killed"));
            }
            None => std::thread::sleep(Duration::from_millis(50)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(subject: &str) -> Vec<String> {
        vec!["-s".into(), subject.into(), "alice".into()]
    }

    #[test]
    fn the_job_and_the_kind_of_mail_from_slurms_environment_or_subject() {
        let ended = args("Slurm Job_id=12 Name=train Ended, Run time 00:00:03, COMPLETED, ExitCode 0");
        assert_eq!(event(&ended, None, None), Some(MailEvent { job: 12, ended: true }));
        let failed = args("Slurm Job_id=7 Name=x Failed, Run time 00:01:00, FAILED, ExitCode 1");
        assert_eq!(event(&failed, None, None), Some(MailEvent { job: 7, ended: true }));
        let began = args("Slurm Job_id=12 Name=train Began, Queued time 00:00:01");
        assert_eq!(event(&began, None, None), Some(MailEvent { job: 12, ended: false }));
        // The environment wins over the subject.
        assert_eq!(event(&began, Some("40"), Some("Ended")), Some(MailEvent { job: 40, ended: true }));
        assert_eq!(event(&ended, Some("40"), Some("Began")), Some(MailEvent { job: 40, ended: false }));
        // A job named to look like an ended mail does not fool the environment.
        let tricky = args("Slurm Job_id=5 Name=x Ended, Began, Queued time 00:00:01");
        assert_eq!(event(&tricky, None, Some("Began")), Some(MailEvent { job: 5, ended: false }));
        assert_eq!(event(&args("hello"), None, None), None);
        assert_eq!(event(&[], None, None), None);
    }

    #[test]
    fn a_job_asks_for_gpus_by_any_of_slurms_request_forms() {
        let job = |fields: &str| format!("JobId=7 JobName=x UserId=bob(1001) {fields} NodeList=n1\n");
        for asked in [
            "TresPerNode=gres:gpu:1",
            "TresPerNode=gres/gpu:h100:2",
            "TresPerJob=gres:gpu:4",
            "TresPerTask=cpu:1,gres/shard:2",
            "TresPerSocket=gres/mps:50",
            "TRES=cpu=1,mem=1G,node=1,billing=1,gres/gpu=1",
        ] {
            assert!(requests_gpus(&job(asked)), "{asked}");
        }
        for none in ["TRES=cpu=2,mem=4G,node=1,billing=2", "TresPerTask=cpu:4", "Comment=gres/gpu:1"] {
            assert!(!requests_gpus(&job(none)), "{none}");
        }
    }

    #[test]
    fn a_waiting_mail_looks_less_and_less_often() {
        let pauses: Vec<u64> = (0..8).map(|look| pause(look).as_secs()).collect();
        assert_eq!(pauses, [3, 6, 12, 24, 48, 60, 60, 60]);
        assert_eq!(pause(u32::MAX), MAX_POLL);
        // Five minutes of waiting: 9 looks, not the 100 of a look every 3 s.
        let mut waited = Duration::ZERO;
        let looks = (0..).take_while(|&look| {
            waited += pause(look);
            waited < Duration::from_secs(300)
        });
        assert_eq!(looks.count() + 1, 9);
    }

    /// Waiting mails are counted by their process name, only the user's own (here a name of
    /// this test's own, so that no other process counts).
    #[test]
    fn waiting_mails_are_counted_by_name_and_owner() {
        let dir = tempfile::tempdir().unwrap();
        let name = format!("wmtest{}", std::process::id() % 1_000_000);
        let waiting = dir.path().join(&name);
        std::fs::copy("/bin/sleep", &waiting).unwrap();
        let mut children: Vec<_> =
            (0..3).map(|_| Command::new(&waiting).arg("30").spawn().unwrap()).collect();
        // Not a mail: another program of this user.
        children.push(Command::new("/bin/sleep").arg("30").spawn().unwrap());
        // A spawned child's exec may still be under way when spawn returns (the kernel lets a
        // vfork parent go before it names the new program): wait until each one has its name.
        let started = std::time::Instant::now();
        for child in &children[..3] {
            let comm = format!("/proc/{}/comm", child.id());
            while std::fs::read_to_string(&comm).map_or(true, |c| c.trim_end() != name) {
                assert!(started.elapsed() < Duration::from_secs(10), "{comm} never read {name}");
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        let uid = nix::unistd::getuid().as_raw();
        let counted = processes_named(Path::new("/proc"), uid, &name);
        let other_user = processes_named(Path::new("/proc"), uid + 1, &name);
        for child in &mut children {
            let _ = child.kill();
            let _ = child.wait();
        }
        assert_eq!(counted, 3);
        assert_eq!(other_user, 0);
        assert!(too_many(7, 32).contains("wattson job-summary 7"));
    }

    #[test]
    fn the_mailer_gets_slurms_arguments_and_the_body_and_its_failure_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let out = dir.path().join("mail.txt");
        let argv = vec![
            "/bin/sh".to_string(),
            "-c".into(),
            format!("{{ echo \"$@\"; cat; }} > {}", out.display()),
            "sh".into(),
        ];
        send(&argv, &args("subject"), b"body\n").unwrap();
        assert_eq!(std::fs::read_to_string(&out).unwrap(), "-s subject alice\nbody\n");
        let e = send(&["/bin/false".to_string()], &args("s"), b"").unwrap_err();
        assert!(e.contains("/bin/false") && e.contains("exit status: 1"), "{e}");
        assert!(
            send(&["/nonexistent/mail".to_string()], &[], b"").unwrap_err().contains("/nonexistent/mail")
        );
    }
}
