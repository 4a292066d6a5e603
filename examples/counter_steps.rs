//! Read-only check of a node's GPUs against the fake driver's realistic model
//! (`tests/fake-nvml/src/realism.rs`): how often each energy counter steps, and how the power
//! readings compare with the power the counter gives over the same time. It changes no setting.
//!
//! ```text
//! cargo run --release --example counter_steps -- [--library PATH] [--seconds N]
//! ```
//!
//! Per GPU it prints the steps seen while polling the counter every millisecond, the median,
//! lowest and highest time between steps, and the mean of the power readings (one every 100 ms)
//! against the counter's mean power over the same span. Run it under load (any GPU job) to see
//! the sampled power readings part from the counter.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use wattson_gpu::{GpuBackend, NvmlBackend};

struct Args {
    library: Option<PathBuf>,
    seconds: f64,
}

fn args() -> Result<Args, String> {
    let mut args = Args { library: None, seconds: 3.0 };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        match arg.as_str() {
            "--library" => args.library = Some(it.next().ok_or("--library needs a path")?.into()),
            "--seconds" => {
                let v = it.next().ok_or("--seconds needs a number")?;
                args.seconds = v.parse().map_err(|_| format!("--seconds: not a number: {v}"))?;
                if !(0.5..=600.0).contains(&args.seconds) {
                    return Err("--seconds must be within 0.5 to 600".into());
                }
            }
            "-h" | "--help" => {
                println!("usage: counter_steps [--library PATH] [--seconds N (default 3)]");
                std::process::exit(0);
            }
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(args)
}

/// What one GPU showed.
struct Seen {
    /// Instants (ns) at which the counter was seen to change (midpoint of the reads around it).
    steps: Vec<i64>,
    /// First and last reading: (ns, mJ).
    span: Option<((i64, u64), (i64, u64))>,
    /// Power readings, mW.
    powers: Vec<u32>,
}

fn watch(backend: &NvmlBackend, index: u32, seconds: f64) -> Result<Seen, String> {
    let mut seen = Seen { steps: Vec::new(), span: None, powers: Vec::new() };
    let start = Instant::now();
    let mut last_power = Instant::now() - Duration::from_secs(1);
    let mut last: Option<(i64, u64)> = None;
    let mut first: Option<(i64, u64)> = None;
    while start.elapsed().as_secs_f64() < seconds {
        let (t, counter) = backend.read_counter(index).map_err(|e| e.to_string())?;
        let counter = counter.ok_or("this GPU has no energy counter")?;
        if let Some((t0, c0)) = last
            && counter != c0
        {
            seen.steps.push(t0 + (t - t0) / 2);
        }
        first.get_or_insert((t, counter));
        last = Some((t, counter));
        if last_power.elapsed() >= Duration::from_millis(100) {
            last_power = Instant::now();
            if let Some(mw) = backend.read(index).map_err(|e| e.to_string())?.power_mw {
                seen.powers.push(mw);
            }
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    seen.span = first.zip(last);
    Ok(seen)
}

fn main() {
    let args = args().unwrap_or_else(|e| {
        eprintln!("counter_steps: {e}");
        std::process::exit(2);
    });
    let backend = NvmlBackend::open(args.library.as_deref()).unwrap_or_else(|e| {
        eprintln!("counter_steps: {e}");
        std::process::exit(1);
    });
    println!("GPU  steps  median_step_ms  min_ms  max_ms  counter_mean_w  readings_mean_w");
    for info in backend.devices() {
        let seen = match watch(&backend, info.index, args.seconds) {
            Ok(seen) => seen,
            Err(e) => {
                println!("{:>3}  {e}", info.index);
                continue;
            }
        };
        let mut gaps: Vec<f64> = seen.steps.windows(2).map(|w| (w[1] - w[0]) as f64 / 1e6).collect();
        gaps.sort_by(f64::total_cmp);
        let median = gaps.get(gaps.len() / 2).copied().unwrap_or(f64::NAN);
        let counter_w = seen
            .span
            .map_or(f64::NAN, |((t0, c0), (t1, c1))| (c1 - c0) as f64 / ((t1 - t0) as f64 / 1e9) / 1000.0);
        let readings_w =
            seen.powers.iter().map(|&p| f64::from(p)).sum::<f64>() / seen.powers.len().max(1) as f64 / 1000.0;
        println!(
            "{:>3}  {:>5}  {median:>14.1}  {:>6.1}  {:>6.1}  {counter_w:>14.1}  {readings_w:>15.1}",
            info.index,
            seen.steps.len(),
            gaps.first().copied().unwrap_or(f64::NAN),
            gaps.last().copied().unwrap_or(f64::NAN),
        );
    }
}
