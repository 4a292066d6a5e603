//! GPU settings: a job's policy is enacted on its GPUs while it runs and undone after, and no
//! GPU stays changed for a job that is gone, whatever happened to the daemon.

use wattson_harness::node as common;

use std::time::Duration;

use common::{Node, assert_ok};
use wattson_gpu::GpuSetting;
use wattson_harness::vendor::Vendor;
use wattson_protocol::{Pace, Reply, Request};
use wattson_store::Store;
use wattson_types::job::{EnergyPolicy, JobKey};

const H100_MAX_MW: u32 = 700_000;

per_vendor!(
    a_jobs_policy_is_applied_while_it_runs_and_undone_after,
    settings_survive_a_daemon_crash_and_are_undone_when_the_job_ends,
    at_start_gpus_changed_for_jobs_that_are_gone_go_back_to_defaults,
    slurm_gpu_numbers_are_minor_numbers_not_nvml_indices,
);

/// The power limit of the site's default shares (`min_energy_power_pct` 60 %,
/// `balanced_power_pct` 85 %) on `vendor`'s GPUs, mW, in whole watts as the daemon sets them
/// (85 % of an MI300X's 750 W is 637 W).
fn share(vendor: Vendor, pct: u32) -> u32 {
    vendor.max_power_mw() * pct / 100 / 1000 * 1000
}

fn limit(node: &Node, gpu: u32) -> u32 {
    node.sim.gpu_state(gpu).unwrap().power_limit_mw
}

fn begin_with(node: &Node, job: &str, gpus: &str, policy: &str) -> String {
    let out = node.wattson(&[
        "job", "begin", "--job", job, "--uid", "1000", "--user", "alice", "--gpus", gpus, "--energy", policy,
    ]);
    assert_ok(&out);
    String::from_utf8_lossy(&out.stdout).to_string()
}

fn a_jobs_policy_is_applied_while_it_runs_and_undone_after(vendor: Vendor) {
    let (max, low) = (vendor.max_power_mw(), share(vendor, 60));
    let capped = format!("GPU 0 power limit {} W", low / 1000);
    let mut node = Node::gpus_of(vendor, 3);
    node.start();
    let said = begin_with(&node, "1", "0,1", "min-energy");
    assert!(said.contains("policy min-energy") && said.contains(&capped), "{said}");
    assert_eq!((limit(&node, 0), limit(&node, 1), limit(&node, 2)), (low, low, max));
    // The capped GPU draws no more than its limit at full load.
    node.sim.set_load(0, 1.0).unwrap();
    assert!(node.sim.gpu_state(0).unwrap().power_mw <= low);

    // The job (and its users, through SPANK) can ask what it got.
    let reply = wattson_protocol::call(
        &node.socket,
        &Request::JobSettings { job: JobKey::job(1) },
        Duration::from_secs(5),
    )
    .unwrap();
    let Reply::Settings { decision, settings, .. } = reply else { panic!("{reply:?}") };
    assert_eq!(decision.policy, EnergyPolicy::MinEnergy);
    assert_eq!(
        settings,
        vec![(0, GpuSetting::PowerLimit { mw: low }), (1, GpuSetting::PowerLimit { mw: low })]
    );

    // A step runs on its job's setting.
    let said = begin_with(&node, "1.0", "0", "min-energy");
    assert!(said.contains(&capped), "{said}");
    let said = begin_with(&node, "2", "2", "perf");
    assert!(said.contains("GPUs at their defaults"), "{said}");
    assert_eq!(limit(&node, 2), max);

    node.end("1");
    assert_eq!((limit(&node, 0), limit(&node, 1)), (max, max));
    node.end("2");
}

fn settings_survive_a_daemon_crash_and_are_undone_when_the_job_ends(vendor: Vendor) {
    let (max, balanced) = (vendor.max_power_mw(), share(vendor, 85));
    let mut node = Node::gpus_of(vendor, 1);
    node.start();
    begin_with(&node, "5", "0", "balanced");
    assert_eq!(limit(&node, 0), balanced);
    node.kill9();
    node.start();
    assert_eq!(limit(&node, 0), balanced, "the job still runs: its setting stays");
    node.end("5");
    assert_eq!(limit(&node, 0), max);
}

fn at_start_gpus_changed_for_jobs_that_are_gone_go_back_to_defaults(vendor: Vendor) {
    let (max, low) = (vendor.max_power_mw(), share(vendor, 60));
    let mut node = Node::gpus_of(vendor, 2);
    node.start();
    begin_with(&node, "8", "1", "min-energy");
    node.kill9();
    // The job's end was recorded but the daemon died before restoring the GPU.
    let mut store = Store::open(&node.store).unwrap();
    let running = store.running_jobs().unwrap();
    store.end_job(&JobKey::job(8), wattson_types::now_ns(), &running[0].gpus).unwrap();
    drop(store);
    assert_eq!(limit(&node, 1), low);
    node.start();
    assert_eq!(limit(&node, 1), max);
    assert!(node.log().contains("GPU back at its defaults"));
}

#[test]
fn a_gpu_that_refuses_the_setting_runs_the_job_at_defaults() {
    let mut config = fake_nvml::Config::uniform("H100", 1);
    config.privileged_uids = vec![]; // as if the daemon ran without root
    let mut node = Node::new(config, "200ms");
    node.start();
    let said = begin_with(&node, "3", "0", "min-energy");
    assert!(said.contains("GPUs at their defaults"), "{said}");
    assert_eq!(limit(&node, 0), H100_MAX_MW);
    assert!(node.log().contains("GPU refused the setting"));
    node.end("3");
    assert_eq!(node.record("3").state, wattson_types::job::JobState::Completed);
}

/// Slurm numbers GPUs by the minor number of `/dev/nvidiaN` (AMD: `/dev/dri/renderD<128+N>`);
/// NVML and ROCm SMI enumerate in PCI order, which can differ. Here the minors run backwards:
/// Slurm's GPU 0 is the library's GPU 3, and that is the GPU the job is metered and capped on.
fn slurm_gpu_numbers_are_minor_numbers_not_nvml_indices(vendor: Vendor) {
    let (max, low) = (vendor.max_power_mw(), share(vendor, 60));
    let mut gpus = vendor.gpus(4);
    for (i, gpu) in gpus.gpu.iter_mut().enumerate() {
        gpu.minor_number = Some(3 - i as u32);
    }
    let mut node = Node::of_vendor(vendor, gpus, "200ms", "enact = \"share\"\n", "");
    node.start();
    begin_with(&node, "1", "0", "min-energy");
    let limits: Vec<u32> = (0..4).map(|g| limit(&node, g)).collect();
    assert_eq!(limits, [max, max, max, low], "capped the wrong GPU");
    node.end("1");
    let record = node.record("1");
    assert_eq!(record.gpus[0].uuid, node.gpu_uuid(3), "metered the wrong GPU: {record:?}");
    let out = node.wattson(&["job", "begin", "--job", "2", "--uid", "1000", "--gpus", "4"]);
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("no such GPU"));
}

/// `acct -o Policy` shows the policy the site decided and the node ran, not the one asked for:
/// a user who may not ask for perf runs the default instead, and a job that asked for nothing
/// ran the default too.
#[test]
fn acct_shows_the_policy_that_ran_not_the_one_asked_for() {
    let mut node = Node::with_sections(
        fake_nvml::Config::uniform("H100", 2),
        "200ms",
        "enact = \"share\"\ndefault = \"min-energy\"\nperf_users = [\"root\"]\n",
        "",
    );
    node.start();
    let said = begin_with(&node, "1", "0", "perf");
    assert!(said.contains("policy min-energy"), "{said}");
    assert_eq!(limit(&node, 0), 420_000, "alice may not run perf here");
    assert_ok(
        &node.wattson(&["job", "begin", "--job", "2", "--uid", "1000", "--user", "alice", "--gpus", "1"]),
    );
    node.end("1");
    node.end("2");
    let out = node.wattson(&["acct", "-j", "1,2", "-P", "-o", "JobID,Policy"]);
    assert_ok(&out);
    let rows: Vec<String> =
        String::from_utf8_lossy(&out.stdout).lines().skip(1).map(str::to_string).collect();
    assert_eq!(rows, ["1|min-energy", "2|min-energy"]);
}

/// `[gpu] read_only`: every job is recorded and no GPU is changed, not even one the site
/// capped by hand before the daemon started (a normal start returns it to its defaults).
#[test]
fn a_read_only_node_records_every_job_and_changes_no_gpu() {
    let policy = "enact = \"share\"\ndefault = \"min-energy\"\n";
    let mut node = Node::with_sections(fake_nvml::Config::uniform("H100", 2), "200ms", policy, "");
    let text = std::fs::read_to_string(&node.config).unwrap();
    std::fs::write(&node.config, text.replacen("[gpu]\n", "[gpu]\nread_only = true\n", 1)).unwrap();
    node.sim.set_power_limit(0, 500_000).unwrap();
    node.start();
    assert_eq!((limit(&node, 0), limit(&node, 1)), (500_000, H100_MAX_MW));
    node.sim.set_load(0, 0.9).unwrap();
    node.sim.set_load(1, 0.5).unwrap();
    let begin = node.begin("1", 1000, "0,1");
    // Without read_only the site's default (min-energy, 60%) would cap both GPUs here.
    assert_eq!((limit(&node, 0), limit(&node, 1)), (500_000, H100_MAX_MW));
    // Nor when the controller paces the job: its table is the defaults alone.
    for pace in [Pace::Level(0), Pace::Saving, Pace::Full] {
        let reply =
            wattson_protocol::call(&node.socket, &Request::JobPace { job: 1, pace }, Duration::from_secs(5))
                .unwrap();
        assert!(matches!(&reply, Reply::Paced { settings, .. } if settings.is_empty()), "{reply:?}");
        assert_eq!((limit(&node, 0), limit(&node, 1)), (500_000, H100_MAX_MW));
    }
    std::thread::sleep(Duration::from_millis(600));
    let end = node.end("1");
    assert_eq!((limit(&node, 0), limit(&node, 1)), (500_000, H100_MAX_MW));
    common::assert_exact(&node, &node.record("1"), begin, end, 0.001);
    // No setting was even tried: none is decided for a job on a read-only node.
    let log = node.log();
    assert!(log.contains("[gpu] read_only") && !log.contains("refused the setting"), "{log}");
}
