//! wattsond as a service: systemd readiness over a real notify socket, Prometheus metrics
//! over HTTP, and a clean stop on SIGTERM that keeps running jobs for the next start.

use wattson_harness::node as common;

use std::os::unix::net::UnixDatagram;
use std::path::Path;
use std::time::Duration;

use common::{Node, assert_exact, http_get};

#[test]
fn readiness_metrics_and_a_clean_stop() {
    let mut node = Node::h100(2);
    let port = node.serve_metrics("jobs = true");
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
    assert!(page.contains("wattson_gpu_power_watts{gpu=\"1\""), "{page}");
    assert!(page.contains("wattson_gpu_energy_joules_total{gpu=\"0\""), "{page}");
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
    let out = std::process::Command::new(wattson_harness::programs::program("wattsond"))
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

/// The shipped unit's settings that a sandbox cannot show by running: a restart keeps the
/// jobs' progress files, a bad configuration does not restart in a loop, there is no reload
/// that reloads nothing, and a stuck daemon is restarted by the watchdog.
fn unit() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/systemd/wattsond.service")).unwrap()
}

/// The values of `key=` lines in the unit.
fn unit_values(key: &str) -> Vec<String> {
    unit().lines().filter_map(|l| l.strip_prefix(&format!("{key}=")).map(str::to_string)).collect()
}

#[test]
fn the_units_settings_match_what_the_daemon_does() {
    assert_eq!(unit_values("RuntimeDirectoryPreserve"), ["yes"], "a restart would delete /run/wattson");
    assert!(unit_values("ExecReload").is_empty(), "wattsond has no reload");
    assert_eq!(unit_values("RestartPreventExitStatus"), ["2"], "wattsond exits 2 on a bad configuration");
    assert_eq!(unit_values("WatchdogSec").len(), 1, "no watchdog");
    // The daemon fits users' connections to its open-files limit: the unit sets one.
    assert_eq!(unit_values("LimitNOFILE"), ["65536"], "no open-files limit for the daemon");

    // Exit status 2 for a bad configuration, as the unit expects.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[daemon]\nsample_interval = 3\n").unwrap();
    let out = std::process::Command::new(wattson_harness::programs::program("wattsond"))
        .arg("-c")
        .arg(&bad)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// wattsond under exactly the unit's capability bounding set (as systemd would start it):
/// a job whose power limit the models choose gets its progress file, owned by the job's user,
/// and the daemon pings the watchdog as it samples.
#[test]
fn the_daemon_works_with_the_units_capabilities() {
    let caps: Vec<String> = unit_values("CapabilityBoundingSet")
        .iter()
        .flat_map(|v| {
            v.split_whitespace().map(|c| c.trim_start_matches("CAP_").to_lowercase()).collect::<Vec<_>>()
        })
        .collect();
    assert!(!caps.is_empty());
    let bounding = format!("-all,{}", caps.iter().map(|c| format!("+{c}")).collect::<Vec<_>>().join(","));
    let wrapper: Vec<String> = ["setpriv", "--bounding-set", &bounding, "--inh-caps=-all", "--"]
        .iter()
        .map(|s| s.to_string())
        .collect();

    let mut node = Node::with_sections(fake_nvml::Config::uniform("H100", 1), "200ms", "", "");
    let notify_path = node.dir.path().join("notify.sock");
    let notify = UnixDatagram::bind(&notify_path).unwrap();
    notify.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    node.start_under(&wrapper, &[("NOTIFY_SOCKET", &notify_path), ("WATCHDOG_USEC", Path::new("30000000"))]);
    let status = std::fs::read_to_string(format!("/proc/{}/status", node.pid())).unwrap();
    let bnd = status.lines().find(|l| l.starts_with("CapBnd")).unwrap();
    assert_ne!(bnd.split_whitespace().nth(1), Some("000001ffffffffff"), "the bounding set was not applied");

    let out = node.wattson(&[
        "job",
        "begin",
        "--job",
        "9",
        "--uid",
        "1000",
        "--gpus",
        "0",
        "--energy",
        "min-energy",
        "--energy-tag",
        "t",
    ]);
    common::assert_ok(&out);
    let progress = node.dir.path().join("progress").join("9");
    let meta =
        std::fs::metadata(&progress).unwrap_or_else(|e| panic!("no progress file ({e}):\n{}", node.log()));
    use std::os::unix::fs::MetadataExt;
    assert_eq!(meta.uid(), 1000, "the progress file is not the job user's");
    assert_eq!(meta.mode() & 0o777, 0o600, "the progress file is readable by other users");

    let mut seen = String::new();
    let mut buf = [0u8; 256];
    while !seen.contains("WATCHDOG=1") {
        let n = notify.recv(&mut buf).expect("wattsond pings the watchdog");
        seen.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    node.end("9");
}

/// The metric families a dcgm-exporter scrape serves with its default counter set (its field
/// names, as its documentation lists them), the per-job label it adds in HPC mode included.
const DCGM_EXPORTER_SCRAPE: &str = "\
# HELP DCGM_FI_DEV_SM_CLOCK SM clock frequency (in MHz).
# TYPE DCGM_FI_DEV_SM_CLOCK gauge
DCGM_FI_DEV_SM_CLOCK{gpu=\"0\",UUID=\"GPU-0\",device=\"nvidia0\",modelName=\"NVIDIA H100\",Hostname=\"n1\",hpc_job=\"77\"} 1980
# TYPE DCGM_FI_DEV_MEM_CLOCK gauge
DCGM_FI_DEV_MEM_CLOCK{gpu=\"0\"} 2619
# TYPE DCGM_FI_DEV_MEMORY_TEMP gauge
DCGM_FI_DEV_MEMORY_TEMP{gpu=\"0\"} 40
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu=\"0\"} 35
# TYPE DCGM_FI_DEV_POWER_USAGE gauge
DCGM_FI_DEV_POWER_USAGE{gpu=\"0\"} 250.5
# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter
DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"0\"} 5000
# TYPE DCGM_FI_DEV_PCIE_REPLAY_COUNTER counter
DCGM_FI_DEV_PCIE_REPLAY_COUNTER{gpu=\"0\"} 0
# TYPE DCGM_FI_DEV_GPU_UTIL gauge
DCGM_FI_DEV_GPU_UTIL{gpu=\"0\"} 97
# TYPE DCGM_FI_DEV_MEM_COPY_UTIL gauge
DCGM_FI_DEV_MEM_COPY_UTIL{gpu=\"0\"} 10
# TYPE DCGM_FI_DEV_ENC_UTIL gauge
DCGM_FI_DEV_ENC_UTIL{gpu=\"0\"} 0
# TYPE DCGM_FI_DEV_DEC_UTIL gauge
DCGM_FI_DEV_DEC_UTIL{gpu=\"0\"} 0
# TYPE DCGM_FI_DEV_XID_ERRORS gauge
DCGM_FI_DEV_XID_ERRORS{gpu=\"0\"} 0
# TYPE DCGM_FI_DEV_FB_FREE gauge
DCGM_FI_DEV_FB_FREE{gpu=\"0\"} 80000
# TYPE DCGM_FI_DEV_FB_USED gauge
DCGM_FI_DEV_FB_USED{gpu=\"0\"} 1000
# TYPE DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL counter
DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL{gpu=\"0\"} 0
# TYPE DCGM_FI_DEV_VGPU_LICENSE_STATUS gauge
DCGM_FI_DEV_VGPU_LICENSE_STATUS{gpu=\"0\"} 0
# TYPE DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS counter
DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS{gpu=\"0\"} 0
# TYPE DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS counter
DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS{gpu=\"0\"} 0
# TYPE DCGM_FI_DEV_ROW_REMAP_FAILURE gauge
DCGM_FI_DEV_ROW_REMAP_FAILURE{gpu=\"0\"} 0
# TYPE DCGM_FI_PROF_GR_ENGINE_ACTIVE gauge
DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu=\"0\"} 0.9
# TYPE DCGM_FI_PROF_PIPE_TENSOR_ACTIVE gauge
DCGM_FI_PROF_PIPE_TENSOR_ACTIVE{gpu=\"0\"} 0.4
# TYPE DCGM_FI_PROF_DRAM_ACTIVE gauge
DCGM_FI_PROF_DRAM_ACTIVE{gpu=\"0\"} 0.3
# TYPE DCGM_FI_PROF_PCIE_TX_BYTES gauge
DCGM_FI_PROF_PCIE_TX_BYTES{gpu=\"0\"} 1000
# TYPE DCGM_FI_PROF_PCIE_RX_BYTES gauge
DCGM_FI_PROF_PCIE_RX_BYTES{gpu=\"0\"} 1000
";

/// Metric family names of a Prometheus text page: from `# TYPE` lines, and from samples
/// (counters' `_total` samples counted under their family name too).
fn families(page: &str) -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for line in page.lines() {
        let name = match line.strip_prefix("# TYPE ") {
            Some(rest) => rest.split(' ').next(),
            None if line.starts_with('#') || line.trim().is_empty() => None,
            None => line.split(['{', ' ']).next(),
        };
        if let Some(name) = name.filter(|n| n.chars().next().is_some_and(|c| c.is_ascii_alphabetic())) {
            names.insert(name.to_string());
            if let Some(family) = name.strip_suffix("_total") {
                names.insert(family.to_string());
            }
        }
    }
    names
}

#[test]
fn metrics_share_no_name_with_dcgm_exporter_and_energy_is_a_counter() {
    let mut node = Node::h100(2);
    let port = node.serve_metrics("jobs = true");
    node.start();
    node.sim.set_load(0, 0.7).unwrap();
    node.begin("91", 1000, "0");
    std::thread::sleep(Duration::from_millis(1500));
    let page = http_get(port, "/metrics");
    let body = page.split("\r\n\r\n").nth(1).expect("an HTTP body");
    let ours = families(body);
    let theirs = families(DCGM_EXPORTER_SCRAPE);
    assert!(theirs.len() >= 24 && ours.len() >= 6, "{theirs:?} {ours:?}");
    let shared: Vec<&String> = ours.intersection(&theirs).collect();
    assert!(shared.is_empty(), "names served by both: {shared:?}\n{body}");
    assert!(ours.iter().all(|n| n.starts_with("wattson_")), "{ours:?}");
    assert!(body.contains("# TYPE wattson_gpu_energy_joules counter"), "{body}");
    assert!(body.contains("wattson_gpu_energy_joules_total{gpu=\"0\""), "{body}");
    assert!(body.contains("# TYPE wattson_gpu_power_watts gauge"), "{body}");
    assert!(body.lines().any(|l| l.starts_with("wattson_job_gpu_energy_joules{job=\"91\"")), "{body}");
    node.end("91");
}
