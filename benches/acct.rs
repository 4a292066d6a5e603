//! `wattson acct` latency over 1,000,000 completed jobs.
//!
//! Run: `cargo bench --bench acct` (set `WATTSON_BENCH_JOBS` for a smaller store).
//!
//! Builds once, and caches in `<target>/bench-data/`, a store of a year of completed jobs from
//! 500 users with 1 to 8 GPUs each (counter meters, a few power-only GPUs and counter resets),
//! keyed by schema and generator version. Then times, with a small runner (warm-up, then
//! repeated runs; median and min reported):
//!   (a) one user's month: `AcctQuery { uid, start_ns, end_ns }`;
//!   (b) one job id;
//!   (c) (a) forced through a full table scan (`jobs NOT INDEXED`), the baseline;
//! and `report::render` of (a)'s rows as a table.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use wattson::report::{self, DEFAULT_COLUMNS, Format};
use wattson_store::{AcctQuery, Store, schema::SCHEMA_VERSION};
use wattson_types::energy::{GpuMeter, GpuReading};
use wattson_types::job::{EnergyPolicy, Hints, JobGpu, JobKey, JobRecord, JobState};

/// Bump when the generated data changes.
const GENERATOR_VERSION: u32 = 1;
const USERS: u32 = 500;
const S: i64 = 1_000_000_000;
const DAY: i64 = 86_400 * S;
/// 2024-01-01T00:00:00Z.
const YEAR_START: i64 = 1_704_067_200 * S;

/// splitmix64: deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Job `i` of `n`: arrivals spread evenly over the year, log-uniform durations of 1 min to 2 days.
fn job(i: u64, n: u64, rng: &mut Rng) -> JobRecord {
    let begin_ns = YEAR_START + (i as i64) * (365 * DAY / n as i64) + rng.below(60) as i64 * S;
    let dur_s = (60f64.ln() + rng.unit() * ((2.0 * 86_400.0f64).ln() - 60f64.ln())).exp();
    let end_ns = begin_ns + (dur_s * 1e9) as i64;
    let uid = 10_000 + rng.below(u64::from(USERS)) as u32;
    let ngpus = [1, 1, 1, 2, 2, 4, 4, 8][rng.below(8) as usize];
    let first = rng.below(9 - ngpus);
    let gpus = (0..ngpus)
        .map(|k| {
            let index = (first + k) as u32;
            let watts = 80.0 + rng.unit() * 620.0;
            let has_counter = rng.below(50) != 0;
            let c0 = rng.below(1 << 40);
            let reading = |t_ns: i64, counter: Option<u64>, w: f64| GpuReading {
                t_ns,
                energy_mj: counter,
                power_mw: Some((w * 1000.0) as u32),
                sm_clock_mhz: Some(1100 + (w as u32)),
                util_pct: Some((w / 7.0) as u32),
            };
            let mut meter = GpuMeter::begin(reading(begin_ns, has_counter.then_some(c0), watts));
            let mid = begin_ns + (end_ns - begin_ns) / 2;
            let half_mj = (watts * dur_s / 2.0 * 1000.0) as u64;
            if has_counter && rng.below(1000) == 0 {
                meter.advance(reading(mid, Some(half_mj / 3), watts)); // counter reset
            } else {
                meter.advance(reading(mid, has_counter.then_some(c0 + half_mj), watts * 1.1));
            }
            let last = meter.last.energy_mj;
            meter.advance(reading(end_ns, last.map(|c| c + half_mj), watts));
            JobGpu {
                index,
                uuid: format!("GPU-{uid:05}-{index}"),
                name: "NVIDIA H100 80GB HBM3".into(),
                meter,
            }
        })
        .collect();
    let policy = [EnergyPolicy::MinEnergy, EnergyPolicy::Balanced, EnergyPolicy::Perf][rng.below(3) as usize];
    JobRecord {
        key: JobKey::job(1_000 + i as u32),
        uid,
        user: Some(format!("user{uid}")),
        name: Some(format!("train-{}", rng.below(100))),
        node: format!("gpu{:03}", rng.below(64)),
        begin_ns,
        end_ns: Some(end_ns),
        state: JobState::Completed,
        hints: Hints { policy: Some(policy), slowdown_pct: None, tag: None, gpu_freq: None, share: None },
        policy: Some(policy),
        gpus,
        dvfs: None,
        node_share: None,
    }
}

fn data_path(n: u64) -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|| "target".into());
    target.join("bench-data").join(format!("acct-schema{SCHEMA_VERSION}-gen{GENERATOR_VERSION}-{n}.sqlite"))
}

fn build(n: u64) -> PathBuf {
    let path = data_path(n);
    if path.exists() {
        println!("using cached store {}", path.display());
        return path;
    }
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let tmp = path.with_extension("building");
    for ext in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", tmp.display()));
    }
    let t = Instant::now();
    let mut store = Store::open(&tmp).unwrap();
    let mut rng = Rng(42);
    let written = store.import((0..n).map(|i| job(i, n, &mut rng))).unwrap();
    drop(store);
    for ext in ["-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{ext}", tmp.display()));
    }
    std::fs::rename(&tmp, &path).unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    println!(
        "generated {written} jobs in {:.1} s ({} MiB) -> {}",
        t.elapsed().as_secs_f64(),
        size >> 20,
        path.display()
    );
    path
}

/// Runs `f` after a warm-up until 2 s or 200 runs; returns (median, min, last result).
fn time<T>(mut f: impl FnMut() -> T) -> (Duration, Duration, T) {
    for _ in 0..3 {
        std::hint::black_box(f());
    }
    let mut times = Vec::new();
    let start = Instant::now();
    let mut last;
    loop {
        let t = Instant::now();
        last = std::hint::black_box(f());
        times.push(t.elapsed());
        if times.len() >= 200 || (start.elapsed() > Duration::from_secs(2) && times.len() >= 5) {
            break;
        }
    }
    times.sort();
    (times[times.len() / 2], times[0], last)
}

fn ms(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64() * 1e3)
}

fn main() {
    // `cargo test --benches` runs bench targets with `--test`: skip the heavy work there.
    if std::env::args().any(|a| a == "--test") {
        return;
    }
    let n: u64 = std::env::var("WATTSON_BENCH_JOBS").ok().and_then(|s| s.parse().ok()).unwrap_or(1_000_000);
    let store = Store::open_read_only(&build(n)).unwrap();
    let month = AcctQuery {
        uid: Some(10_250),
        start_ns: Some(YEAR_START + 180 * DAY),
        end_ns: Some(YEAR_START + 210 * DAY),
        ..Default::default()
    };
    let one = AcctQuery { jobs: vec![JobKey::job(1_000 + (n / 2) as u32)], ..Default::default() };
    let (a_med, a_min, rows) = time(|| store.query(&month).unwrap());
    let (b_med, b_min, job_rows) = time(|| store.query(&one).unwrap());
    let (c_med, c_min, scan_rows) = time(|| store.query_full_scan(&month).unwrap());
    assert_eq!(rows, scan_rows, "index and scan disagree");
    let now = YEAR_START + 400 * DAY;
    let (r_med, r_min, text) = time(|| report::render(&rows, &DEFAULT_COLUMNS, Format::Table, now));
    println!();
    println!("{n} jobs; plan of (a): {}", store.query_plan(&month).unwrap().replace('\n', "; "));
    println!("{:<44} {:>6} {:>12} {:>12}", "query", "rows", "median ms", "min ms");
    println!(
        "{:<44} {:>6} {:>12} {:>12}",
        "(a) one user's month (indexed)",
        rows.len(),
        ms(a_med),
        ms(a_min)
    );
    println!("{:<44} {:>6} {:>12} {:>12}", "(b) one job id (indexed)", job_rows.len(), ms(b_med), ms(b_min));
    println!(
        "{:<44} {:>6} {:>12} {:>12}",
        "(c) (a) as a full table scan",
        scan_rows.len(),
        ms(c_med),
        ms(c_min)
    );
    println!(
        "{:<44} {:>6} {:>12} {:>12}",
        "render (a)'s rows as a table",
        text.lines().count(),
        ms(r_med),
        ms(r_min)
    );
    println!(
        "ratio a/c (median): {:.5}  (c is {:.0}x slower)",
        a_med.as_secs_f64() / c_med.as_secs_f64(),
        c_med.as_secs_f64() / a_med.as_secs_f64()
    );
}
