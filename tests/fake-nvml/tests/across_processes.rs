//! The fake driver's state is shared between processes and survives `kill -9`: a child
//! process (this test binary re-executed) loads the library and hammers the counter while
//! the parent drives load and finally kills it.

use fake_nvml::{Config, DIR_ENV, Sim, library_path_next_to, now_ns};
use nvml_wrapper::Nvml;
use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

const CHILD_ENV: &str = "FAKE_NVML_CHILD_READER";

/// In the child: answer each line on stdin with GPU 0's counter, until stdin closes.
#[test]
fn child_reader() {
    if std::env::var_os(CHILD_ENV).is_none() {
        return;
    }
    let lib = library_path_next_to(&std::env::current_exe().unwrap()).unwrap();
    let nvml = Nvml::builder().lib_path(lib.as_os_str()).init().unwrap();
    let dev = nvml.device_by_index(0).unwrap();
    // Write to the real stdout: the harness may capture `println!` even under --nocapture.
    let mut out = std::io::stdout();
    for _ in std::io::stdin().lines() {
        writeln!(out, "COUNTER {}", dev.total_energy_consumption().unwrap()).unwrap();
        out.flush().unwrap();
    }
}

#[test]
fn shared_and_survives_kill_9() {
    let dir = std::env::temp_dir().join(format!("fake-nvml-xproc-{}-{}", std::process::id(), now_ns()));
    let sim = Sim::create(&dir, &Config::uniform("V100", 1)).unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child_reader", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, "1")
        .env(DIR_ENV, sim.dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut stdin = child.stdin.take().unwrap();
    let mut next = || {
        writeln!(stdin).unwrap();
        loop {
            let line = lines.next().expect("child output").unwrap();
            // libtest prints "test child_reader ... " without a newline before our first line.
            if let Some((_, v)) = line.split_once("COUNTER ") {
                return v.trim().parse::<u64>().unwrap();
            }
        }
    };
    let first = next();
    sim.set_load(0, 1.0).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // The child sees the load the parent set: readings climb at ~290 W.
    let a = next();
    std::thread::sleep(Duration::from_millis(100));
    let b = next();
    assert!(a >= first && b > a + 20_000, "{first} {a} {b}");
    // kill -9, possibly while it holds the lock or is mid-save: the state stays usable.
    child.kill().unwrap();
    child.wait().unwrap();
    let after = sim.gpu_state(0).unwrap();
    assert!(after.counter_mj >= b);
    assert_eq!(after.power_mw, 290_000);
    std::fs::remove_dir_all(&dir).unwrap();
}
