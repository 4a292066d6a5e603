//! The controller-to-node link on a real Slurm lab (its munged): what the link answers whom,
//! that nothing it gives a user authenticates to slurmctld, and that floods of silent or
//! garbage connections neither starve the controller nor multiply the daemon's threads.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use wattson_harness::slurm_lab::{self, SlurmLab};

use super::ctld::lab;

/// The link serves only credentials MUNGE vouches for, from root or SlurmUser, once each:
/// another user's request, a replayed one and garbage are refused, unsealed, and nothing is
/// done. Root's answer is sealed for root alone and names the request it answers, so no one
/// else obtains a credential of root's from the link.
#[test]
fn the_link_refuses_other_users_replays_and_garbage() {
    let (lab, _power, daemons) = lab("");
    let munge = lab.dir().join("run/munge.sock");
    let port = link_port(&lab);
    let seal = |uid: &str, payload: &str| seal(&munge, uid, payload);
    let ask = move |line: &str| ask(port, line);
    let unmunge_as = |uid: &str, answer: &str| {
        munge_as(&munge, uid, "unmunge").args(["-m", "/dev/null"]).stdin_bytes(answer)
    };
    let sealed = |answer: &str| answer.starts_with("MUNGE:");
    let pace = "{\"op\":\"job_pace\",\"job\":1,\"pace\":\"full\"}";
    let idle = "{\"op\":\"confirm_idle\"}";

    let cred = seal("0", idle);
    let answer = ask(&cred);
    assert!(sealed(&answer), "{answer}");
    let opened = unmunge_as("0", &answer);
    assert!(opened.contains("\"idle\"") && opened.contains(wattson_link::REPLY_TAG), "{opened}");
    let hash = Command::new("sha256sum").stdin_bytes(cred.trim());
    let hash = hash.split_whitespace().next().unwrap();
    assert!(opened.contains(&format!("\"request\":\"{hash}\"")), "the request's hash: {opened}");
    // Root's answer opens for root only: munged refuses it to anyone else.
    let stolen = unmunge_as("65534", &ask(&seal("0", idle)));
    assert!(stolen.to_lowercase().contains("unauthorized"), "{stolen}");
    let replay = ask(&cred);
    assert!(!sealed(&replay) && replay.contains("permission_denied"), "{replay}");
    assert!(replay.to_lowercase().contains("replay"), "{replay}");
    let nobody = ask(&seal("65534", pace));
    assert!(!sealed(&nobody) && nobody.contains("permission_denied"), "{nobody}");
    let garbage = ask("MUNGE:not-a-credential:");
    assert!(!sealed(&garbage) && garbage.contains("permission_denied"), "{garbage}");
    assert!(daemons[0].log().contains("link: request refused"), "{}", daemons[0].log());

    // A flood of garbage credentials queues for the link's one MUNGE thread: it does not start
    // a thread per connection (the daemon's threads counted all along; 2 spare for the
    // sampler's own).
    let pid = daemons[0].pid();
    let threads = move || std::fs::read_dir(format!("/proc/{pid}/task")).map_or(0, |t| t.count());
    let before = threads();
    let flooding = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
    let most = {
        let flooding = flooding.clone();
        std::thread::spawn(move || {
            let mut most = 0;
            while flooding.load(std::sync::atomic::Ordering::Relaxed) {
                most = most.max(threads());
                std::thread::sleep(Duration::from_millis(5));
            }
            most
        })
    };
    let garbage: Vec<_> =
        (0..200).map(|_| std::thread::spawn(move || ask("MUNGE:not-a-credential:"))).collect();
    for sender in garbage {
        assert!(sender.join().unwrap().contains("permission_denied"));
    }
    flooding.store(false, std::sync::atomic::Ordering::Relaxed);
    let most = most.join().unwrap();
    let allowed = before + 2;
    assert!(most <= allowed, "{before} threads before the flood, {most} during it (at most {allowed})");

    // Hundreds of silent connections at once, renewed as the daemon drops them, do not keep
    // the controller's requests from their answers within its timeout.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut held = std::collections::VecDeque::new();
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                if let Ok(s) = std::net::TcpStream::connect(("127.0.0.2", port)) {
                    held.push_back(s);
                }
                if held.len() > 400 {
                    held.pop_front();
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    std::thread::sleep(Duration::from_secs(2));
    let link = wattson_link::Munge::new(Some(&munge)).unwrap();
    let target = std::net::SocketAddr::from(([127, 0, 0, 2], port));
    let timeout = wattson_config::link::LinkConfig::default().timeout;
    let answered = (0..8)
        .filter(|_| {
            let request = wattson_protocol::Request::ConfirmIdle {};
            wattson_link::call(&link, target, &request, timeout).is_ok()
        })
        .count();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    flood.join().unwrap();
    assert_eq!(answered, 8, "the controller's requests answered beside the silent connections");
    lab.stop();
}

/// Runs `program` (`munge`, `unmunge`) as `uid` against the lab's munged.
fn munge_as(munge: &Path, uid: &str, program: &str) -> Command {
    let mut command = Command::new("setpriv");
    command.args([&format!("--reuid={uid}"), &format!("--regid={uid}"), "--clear-groups", program, "-S"]);
    command.arg(munge);
    command
}

/// A credential sealed by `uid` with `payload`.
fn seal(munge: &Path, uid: &str, payload: &str) -> String {
    let out = munge_as(munge, uid, "munge").args(["-s", payload]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap()
}

/// One line to the link at 127.0.0.2:`port`, and its one-line answer.
fn ask(port: u16, line: &str) -> String {
    use std::io::{BufRead, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.2", port)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.write_all(line.trim_end().as_bytes()).unwrap();
    s.write_all(b"\n").unwrap();
    let mut answer = String::new();
    std::io::BufReader::new(s).read_line(&mut answer).unwrap();
    answer
}

/// A library that makes a Slurm client send `WATTSON_STOLEN_CREDENTIAL` as its MUNGE
/// credential instead of sealing its own (`LD_PRELOAD`): what a user could do with any
/// credential they obtained.
fn credential_shim(dir: &Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let source = dir.join("stolen.c");
    std::fs::write(
        &source,
        "#include <stdlib.h>\n#include <string.h>\n\
         int munge_encode(char **cred, void *ctx, const void *buf, int len) {\n\
         (void)ctx; (void)buf; (void)len;\n\
         const char *c = getenv(\"WATTSON_STOLEN_CREDENTIAL\");\n\
         *cred = strdup(c ? c : \"\");\n  return 0;\n}\n",
    )
    .unwrap();
    let shim = dir.join("stolen.so");
    let out = Command::new("cc").args(["-shared", "-fPIC", "-o"]).arg(&shim).arg(&source).output().unwrap();
    assert!(out.status.success(), "cc: {}", String::from_utf8_lossy(&out.stderr));
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&shim, std::fs::Permissions::from_mode(0o755)).unwrap();
    shim
}

/// Whatever the link answers a user (a request they sealed, garbage, a replay of root's), sent
/// to slurmctld as that user's credential, authenticates nobody: slurmctld refuses it and
/// changes nothing. The same route carries credentials: one the user sealed reaches slurmctld
/// as the user, and one root sealed drains a node (so a credential of root's handed to a user
/// would be root's power over Slurm).
#[test]
fn nothing_the_link_gives_a_user_authenticates_to_slurmctld() {
    let (lab, _power, _daemons) = lab("");
    let munge = lab.dir().join("run/munge.sock");
    let port = link_port(&lab);
    let scratch = tempfile::tempdir().unwrap();
    let shim = credential_shim(scratch.path());
    let nobody = 65534;
    let drain_with = |credential: &str| {
        let mut scontrol = lab.command_as("scontrol", nobody, nobody);
        scontrol.args(["update", "NodeName=n1", "State=DRAIN", "Reason=stolen"]);
        scontrol.env("LD_PRELOAD", &shim).env("WATTSON_STOLEN_CREDENTIAL", credential.trim());
        let out = slurm_lab::run_with_timeout(&mut scontrol, Duration::from_secs(30)).unwrap();
        assert!(!out.status.success(), "slurmctld took the update");
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    // What slurmctld says to a user it authenticated but will not let drain a node.
    let authenticated =
        |err: &str| err.contains("Invalid user id") || err.contains("Access/permission denied");
    let idle = "{\"op\":\"confirm_idle\"}";
    let root_cred = seal(&munge, "0", idle);
    let _ = ask(port, &root_cred);
    let answers = [
        ask(port, &seal(&munge, &nobody.to_string(), idle)),
        ask(port, "MUNGE:not-a-credential:"),
        ask(port, &root_cred),
    ];
    for answer in &answers {
        assert!(!answer.starts_with("MUNGE:"), "the link gave a user a credential: {answer}");
        // Refused before slurmctld knows any user: the connection is closed on the credential.
        let err = drain_with(answer);
        assert!(!authenticated(&err), "{answer} -> {err}");
    }
    assert!(!lab.node_state("n1").to_lowercase().contains("drain"), "{}", lab.node_state("n1"));
    // The route carries credentials: one the user sealed reaches slurmctld as the user; one
    // root sealed (with no payload, as Slurm's own) is taken as root's, and the node drains.
    // That is what a root-sealed credential in a user's hands is worth.
    let own = drain_with(&seal(&munge, &nobody.to_string(), ""));
    assert!(authenticated(&own), "{own}");
    let mut scontrol = lab.command_as("scontrol", nobody, nobody);
    scontrol.args(["update", "NodeName=n1", "State=DRAIN", "Reason=stolen"]);
    scontrol.env("LD_PRELOAD", &shim).env("WATTSON_STOLEN_CREDENTIAL", seal(&munge, "0", "").trim());
    let out = slurm_lab::run_with_timeout(&mut scontrol, Duration::from_secs(30)).unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(lab.node_state("n1").to_lowercase().contains("drain"), "{}", lab.node_state("n1"));
    lab.stop();
}

/// The link port in the lab's wattson.toml.
fn link_port(lab: &SlurmLab) -> u16 {
    std::fs::read_to_string(lab.dir().join("etc/wattson.toml"))
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("port = ").map(|p| p.parse::<u16>().unwrap()))
        .unwrap()
}

/// Feeds `input` to a command and returns its standard output.
trait StdinBytes {
    fn stdin_bytes(&mut self, input: &str) -> String;
}

impl StdinBytes for Command {
    fn stdin_bytes(&mut self, input: &str) -> String {
        use std::io::Write;
        let mut child =
            self.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))
    }
}
