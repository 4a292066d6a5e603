//! wattsond as a service: systemd readiness over a real notify socket, Prometheus metrics
//! over HTTP, and a clean stop on SIGTERM that keeps running jobs for the next start.

mod common;

use std::io::Write;
use std::os::unix::net::UnixDatagram;
use std::time::Duration;

use common::{Node, assert_exact, free_loopback_port, http_get};

#[test]
fn readiness_metrics_and_a_clean_stop() {
    let mut node = Node::h100(2);
    let port = free_loopback_port();
    let mut config = std::fs::OpenOptions::new().append(true).open(&node.config).unwrap();
    writeln!(config, "[metrics]\nlisten = \"127.0.0.1:{port}\"\njobs = true").unwrap();
    let notify_path = node.dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(Duration::from_secs(10))).unwrap();

    node.start_with_env(&[("NOTIFY_SOCKET", &notify_path)]);
    let mut buf = [0u8; 256];
    let n = notify.recv(&mut buf).expect("wattsond notifies systemd");
    assert!(String::from_utf8_lossy(&buf[..n]).contains("READY=1"));

    node.sim.set_load(1, 0.5).unwrap();
    let begin = node.begin("77", 1000, "1");
    std::thread::sleep(Duration::from_millis(500));
    let page = http_get(port, "/metrics");
    assert!(page.starts_with("HTTP/1.1 200"), "{page}");
    assert!(page.contains("DCGM_FI_DEV_POWER_USAGE{gpu=\"1\""), "{page}");
    assert!(page.contains("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"0\""), "{page}");
    assert!(page.contains("wattson_gpu_up{gpu=\"1\""), "{page}");
    let job_line =
        page.lines().find(|l| l.starts_with("wattson_job_gpu_energy_joules{job=\"77\"")).expect("job gauge");
    let joules: f64 = job_line.rsplit(' ').next().unwrap().parse().unwrap();
    assert!(joules > 0.0, "{job_line}");
    assert!(http_get(port, "/other").starts_with("HTTP/1.1 404"));

    // SIGTERM: STOPPING=1, exit 0, socket removed; the job resumes at the next start.
    node.stop();
    let n = notify.recv(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).contains("STOPPING=1"));
    assert!(!node.socket.exists());
    node.start_with_env(&[("NOTIFY_SOCKET", &notify_path)]);
    let end = node.end("77");
    assert_exact(&node, &node.record("77"), begin, end, 0.001);
}

#[test]
fn a_second_daemon_on_the_same_socket_refuses_to_start() {
    let mut node = Node::h100(1);
    node.start();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_wattsond"))
        .arg("-c")
        .arg(&node.config)
        .env(fake_nvml::DIR_ENV, node.sim.dir())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("another wattsond is already listening"),
        "{out:?}"
    );
    common::assert_ok(&node.wattson(&["status"]));
}
