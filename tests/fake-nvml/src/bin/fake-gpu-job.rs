//! `fake-gpu-job`: the body of a job on simulated GPUs, standing in for a GPU program. It
//! makes each of its GPUs run a measured curve at full load until the work is done (at the
//! speed the GPUs' power limits allow, so a slowed GPU takes longer), then leaves them idle.
//! A SIGTERM or SIGINT (Slurm ending the job) leaves them idle at once.
//!
//! Usage: `fake-gpu-job --dir DRIVER_DIR --gpus 0,3 --work UNITS --curve LIMIT_W:TIME_S:POWER_W[,...]`
//! (`TIME_S`: seconds per unit of work at that power limit).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fake_nvml::{CurvePoint, MeasuredCurve, Noise, Sim};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::Relaxed);
}

struct Args {
    dir: String,
    gpus: Vec<u32>,
    work: f64,
    curve: MeasuredCurve,
}

fn parse(mut args: impl Iterator<Item = String>) -> Result<Args, String> {
    let (mut dir, mut gpus, mut work, mut curve) = (None, None, None, None);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or_else(|| format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--dir" => dir = Some(value),
            "--gpus" => {
                let list: Result<Vec<u32>, _> = value.split(',').map(str::parse).collect();
                gpus = Some(list.map_err(|e| format!("--gpus {value}: {e}"))?);
            }
            "--work" => work = Some(value.parse::<f64>().map_err(|e| format!("--work {value}: {e}"))?),
            "--curve" => {
                let points = value
                    .split(',')
                    .map(|p| {
                        let n: Vec<f64> = p.split(':').filter_map(|x| x.parse().ok()).collect();
                        match n[..] {
                            [limit_w, time_s, power_w] => Ok(CurvePoint { limit_w, time_s, power_w }),
                            _ => Err(format!("--curve point {p}: expected LIMIT_W:TIME_S:POWER_W")),
                        }
                    })
                    .collect::<Result<Vec<_>, String>>()?;
                curve = Some(MeasuredCurve::new(points, Noise::NONE)?);
            }
            _ => return Err(format!("unknown argument {flag}")),
        }
    }
    let missing = |what: &str| format!("{what} is required");
    Ok(Args {
        dir: dir.ok_or_else(|| missing("--dir"))?,
        gpus: gpus.ok_or_else(|| missing("--gpus"))?,
        work: work.filter(|w| w.is_finite() && *w >= 0.0).ok_or_else(|| missing("--work (>= 0)"))?,
        curve: curve.ok_or_else(|| missing("--curve"))?,
    })
}

fn run(args: Args) -> std::io::Result<()> {
    let sim = Sim::open(std::path::Path::new(&args.dir));
    let start = sim.work_done(args.gpus[0])?;
    for &g in &args.gpus {
        sim.set_curve(g, Some(args.curve.clone()))?;
        sim.set_load(g, 1.0)?;
    }
    // Sleeps until the work should be done at the speed the GPU's limit gives now (at most a
    // second, so a changed limit is followed), then looks again.
    while !STOP.load(Ordering::Relaxed) {
        let left = args.work - (sim.work_done(args.gpus[0])? - start);
        if left <= 0.0 {
            break;
        }
        let limit_w = f64::from(sim.gpu_state(args.gpus[0])?.power_limit_mw) / 1000.0;
        let eta = left * args.curve.at(limit_w).time_s;
        std::thread::sleep(Duration::from_secs_f64(eta.clamp(0.005, 1.0)));
    }
    for &g in &args.gpus {
        sim.set_load(g, 0.0)?;
        sim.set_curve(g, None)?;
    }
    Ok(())
}

fn main() {
    // SAFETY: the handler only stores to an atomic, which is async-signal-safe.
    unsafe {
        libc::signal(libc::SIGTERM, on_signal as *const () as libc::sighandler_t);
        libc::signal(libc::SIGINT, on_signal as *const () as libc::sighandler_t);
    }
    let args = match parse(std::env::args().skip(1)) {
        Ok(a) if !a.gpus.is_empty() => a,
        Ok(_) => {
            eprintln!("fake-gpu-job: --gpus names no GPU");
            std::process::exit(2);
        }
        Err(e) => {
            eprintln!("fake-gpu-job: {e}");
            std::process::exit(2);
        }
    };
    if let Err(e) = run(args) {
        eprintln!("fake-gpu-job: {e}");
        std::process::exit(1);
    }
}
