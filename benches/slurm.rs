//! Latency of what the Slurm plugins do, each against a baseline measured in the same run:
//!
//! - job_submit: `wattson_slurm::submit` over 10,000 submissions (the configuration check,
//!   hint parsing from a realistic job environment, policy, deferral) vs. the configuration's
//!   `stat` alone, which every submission pays anyway.
//! - SPANK: the job prolog's begin and the epilog's end, each a round trip to a real wattsond
//!   on simulated GPUs that commits the record durably, vs. a `status` round trip.
//!
//! Run: `cargo bench --bench slurm`.

use wattson_harness::node as common;

use std::time::{Duration, Instant};

use common::Node;
use wattson_harness::stats::percentile;
use wattson_protocol::Request;
use wattson_slurm::node::{self, NodeJob, PluginArgs};
use wattson_slurm::submit::{self, CachedConfig};

fn percentiles(us: Vec<f64>) -> (f64, f64) {
    (percentile(&us, 0.5), percentile(&us, 0.99))
}

fn time_us(mut f: impl FnMut()) -> f64 {
    let t = Instant::now();
    f();
    t.elapsed().as_secs_f64() * 1e6
}

fn row(what: &str, (p50, p99): (f64, f64)) {
    println!("{what:<46} {p50:>10.1} {p99:>10.1}");
}

fn main() {
    let dir = tempfile::tempdir().unwrap();
    println!("{:<46} {:>10} {:>10}", "operation (µs)", "p50", "p99");

    // job_submit: a job environment like sbatch's (about 40 variables plus the options).
    let config_path = dir.path().join("wattson.toml");
    let tariff: Vec<String> = (0..24).map(|h| if h < 6 { "0.1".into() } else { "0.3".to_string() }).collect();
    std::fs::write(
        &config_path,
        format!("[policy]\nperf_users = [\"0\"]\n[prices]\nhourly_utc = [{}]\n", tariff.join(", ")),
    )
    .unwrap();
    let mut env: Vec<String> = (0..40).map(|i| format!("VAR_{i}=/some/value/{i}")).collect();
    env.push("_SLURM_SPANK_OPTION_wattson_energy=min-energy".into());
    env.push("_SLURM_SPANK_OPTION_wattson_energy_slowdown=10".into());
    env.push("_SLURM_SPANK_OPTION_wattson_energy_defer=6h".into());
    let (mut cached, _) = CachedConfig::load(&config_path);
    let now = 20_000 * 86_400 + 22 * 3600;
    let (mut decide, mut stat) = (Vec::with_capacity(10_000), Vec::with_capacity(10_000));
    for _ in 0..10_000 {
        stat.push(time_us(|| {
            std::hint::black_box(std::fs::metadata(&config_path).and_then(|m| m.modified()).ok());
        }));
        decide.push(time_us(|| {
            let (config, models, _) = cached.get();
            let d = submit::decide(
                env.iter().map(String::as_str),
                env.iter().map(String::as_str),
                1000,
                "1000",
                None,
                &submit::JobShape::default(),
                now,
                config,
                models,
            )
            .unwrap();
            std::hint::black_box(d);
        }));
    }
    let (d, s) = (percentiles(decide), percentiles(stat));
    row("job_submit decision (10,000 submissions)", d);
    row("  baseline: stat of wattson.toml", s);
    println!("  ratio p99: {:.1}x the stat", d.1 / s.1);

    // SPANK round trips against a real daemon.
    let mut daemon = Node::h100(4);
    daemon.start();
    let args = PluginArgs::new(daemon.config.clone(), Some(Duration::from_secs(5)));
    let (mut begin, mut end, mut status) = (Vec::new(), Vec::new(), Vec::new());
    for id in 1..=1000 {
        let job = NodeJob { job_id: id, uid: 1000, gpus: "0,1".into(), ..NodeJob::default() };
        begin.push(time_us(|| {
            node::begin(&args, job.clone()).unwrap();
        }));
        end.push(time_us(|| {
            node::end(&args, id).unwrap();
        }));
        status.push(time_us(|| {
            wattson_protocol::call(&daemon.socket, &Request::Status {}, Duration::from_secs(5)).unwrap();
        }));
    }
    drop(daemon);
    let (b, e, s) = (percentiles(begin), percentiles(end), percentiles(status));
    row("SPANK begin round trip (2 GPUs, durable commit)", b);
    row("SPANK end round trip (2 GPUs, durable commit)", e);
    row("  baseline: status round trip (4 GPUs read)", s);
}
