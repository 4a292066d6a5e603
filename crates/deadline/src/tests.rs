use super::*;

fn sh(script: &str, timeout: Duration) -> Result<String, CommandError> {
    run(Command::new("/bin/sh").args(["-c", script]), timeout)
}

#[test]
fn output_failure_and_deadline() {
    let ok = run(Command::new("/bin/echo").arg("hi"), Duration::from_secs(5)).unwrap();
    assert_eq!(ok, "hi\n");
    let failed = sh("echo why >&2; exit 3", Duration::from_secs(5)).unwrap_err();
    assert!(matches!(&failed, CommandError::Failed { stderr, .. } if stderr == "why"), "{failed}");
    let started = Instant::now();
    let slow = run(Command::new("/bin/sleep").arg("30"), Duration::from_millis(200)).unwrap_err();
    assert!(matches!(slow, CommandError::Timeout { .. }), "{slow}");
    assert!(started.elapsed() < Duration::from_secs(5), "killed at the deadline");
    let missing = run(&mut Command::new("/nonexistent/ipmitool"), Duration::from_secs(1)).unwrap_err();
    assert!(matches!(missing, CommandError::Start { .. }), "{missing}");
}

#[test]
fn more_output_than_a_pipe_holds_never_stalls_the_program() {
    let out =
        sh("head -c 1000000 /dev/zero | tr '\\0' x; head -c 300000 /dev/zero >&2", Duration::from_secs(20));
    assert_eq!(out.unwrap().len(), 1_000_000);
}

/// The pid a script wrote to `file`, once it is there.
fn pid_in(file: &std::path::Path) -> i32 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Ok(text) = std::fs::read_to_string(file)
            && let Ok(pid) = text.trim().parse()
        {
            return pid;
        }
        assert!(Instant::now() < deadline, "no pid in {}", file.display());
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether process `pid` is gone (or a zombie of a parent that has not reaped it).
fn gone(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat) if stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z')) => {
                return true;
            }
            Ok(_) => std::thread::sleep(Duration::from_millis(10)),
        }
    }
    false
}

/// A command that answers, then leaves a child behind holding its output (a BMC tool that
/// forks): the answer comes at once and the child is killed, not waited for. Before, the
/// caller waited for the child's end: a daemon's sampling stopped for its lifetime.
#[test]
fn a_child_left_behind_holding_the_output_is_killed_and_not_waited_for() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("left-behind");
    let script = format!("echo 412 Watts; sleep 60 & echo $! > {}", pid_file.display());
    let started = Instant::now();
    let answer = sh(&script, Duration::from_secs(30)).unwrap();
    assert_eq!(answer, "412 Watts\n");
    assert!(started.elapsed() < Duration::from_secs(10), "waited {:?} for the child", started.elapsed());
    assert!(gone(pid_in(&pid_file)), "the child left behind still runs");
}

/// At the deadline the whole group goes: the program and what it started (a grandchild that
/// hangs with the output closed included).
#[test]
fn at_the_deadline_the_whole_process_group_is_killed() {
    let dir = tempfile::tempdir().unwrap();
    let pid_file = dir.path().join("grandchild");
    let script = format!("sleep 60 >/dev/null 2>&1 & echo $! > {}; sleep 60", pid_file.display());
    let started = Instant::now();
    let slow = sh(&script, Duration::from_millis(500)).unwrap_err();
    assert!(matches!(slow, CommandError::Timeout { .. }), "{slow}");
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(gone(pid_in(&pid_file)), "the grandchild outlived the deadline");
}
