//! Physics of the simulated GPUs and their persistence in `state.json`.
//!
//! All state lives in files so that several processes (the daemon that loads
//! the fake library, the test that drives loads) see one driver, and so that
//! the energy counter survives process restarts.  Every access goes through
//! [`with_state`]: flock, load, advance to now, change, save, unlock.

use crate::config::{Config, GpuSpec};
use crate::curve::MeasuredCurve;
use crate::realism::Physics;
use nvml_wrapper_sys::bindings::*;
use serde::{Deserialize, Serialize};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// File holding the persistent state (JSON).
pub const STATE_FILE: &str = "state.json";
/// File that is `flock`ed around every state access.
pub const LOCK_FILE: &str = "state.lock";
/// mW·ns per mJ.
const MW_NS_PER_MJ: u128 = 1_000_000_000;

/// An NVML return code (`nvmlReturn_t`).
pub type Code = nvmlReturn_t;

/// A fault that can be injected into one GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum Fault {
    /// The GPU fell off the bus: every device call returns `NVML_ERROR_GPU_IS_LOST`.
    Lost,
    /// The energy counter query returns `NVML_ERROR_NOT_SUPPORTED`.
    CounterUnsupported,
    /// One-shot: the energy counter restarts from 0 now (driver reload).
    CounterReset,
    /// The GPU stops answering: every device call blocks until the fault is cleared (a wedged
    /// driver or a GPU stuck in a reset).
    Hang,
}

/// Live state of one GPU, as stored in `state.json` and returned by `Sim::gpu_state`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuState {
    /// Load in [0, 1].
    pub load: f64,
    /// Current power limit, mW.
    pub power_limit_mw: u32,
    /// Application (default) SM clock, MHz.
    pub app_clock_mhz: u32,
    /// Locked SM clock range (min, max), MHz, if set.
    pub locked_clocks_mhz: Option<(u32, u32)>,
    /// `Fault::Lost` is active.
    pub lost: bool,
    /// `Fault::CounterUnsupported` is active.
    pub counter_unsupported: bool,
    /// `Fault::Hang` is active.
    #[serde(default)]
    pub hung: bool,
    /// Energy counter, mJ (what `nvmlDeviceGetTotalEnergyConsumption` reports).
    pub counter_mj: u64,
    /// Sub-mJ remainder of the counter, in mW·ns (always < 1e9).
    pub counter_rem_mw_ns: u64,
    /// How many `Fault::CounterReset`s happened.
    pub counter_resets: u32,
    /// Current true power draw, mW (derived).
    pub power_mw: u32,
    /// Current effective SM clock, MHz (derived; lowered when the power cap binds).
    pub sm_clock_mhz: u32,
    /// The workload running on the GPU, whose progress follows a model hidden from wattson.
    #[serde(default)]
    pub workload: Option<Workload>,
    /// Units of work the workload has completed (exact integral of its rate).
    #[serde(default)]
    pub work_units: f64,
    /// The processes using the GPU and each one's SM utilisation, as the driver reports it per
    /// process (`nvmlDeviceGetProcessUtilization`).
    #[serde(default)]
    pub processes: Vec<ProcessLoad>,
    /// Whether the driver gives per-process utilisation (false: the call is not supported).
    #[serde(default = "yes")]
    pub process_utilization: bool,
    /// A measured curve the running work follows instead of [`Workload`] and the preset's
    /// power law, while the load is above zero.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub curve: Option<MeasuredCurve>,
    /// Heat, settling and the counter's last step, on a GPU that behaves as real ones do.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub physics: Option<Physics>,
}

fn yes() -> bool {
    true
}

/// One process on a simulated GPU and its SM utilisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessLoad {
    /// Process id.
    pub pid: u32,
    /// SM utilisation of the process, percent.
    pub sm_pct: u32,
}

/// A workload's hidden speed law: one unit of work takes `t0_s + d_s_mhz / f` seconds at
/// effective SM clock `f` MHz (a clock-independent part, e.g. memory-bound, and a clock-bound
/// part). It progresses only while the GPU's load is above zero.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Workload {
    /// Clock-independent seconds per unit.
    pub t0_s: f64,
    /// Clock-bound work per unit, s·MHz.
    pub d_s_mhz: f64,
}

impl Workload {
    /// Units per second at effective SM clock `f_mhz`.
    pub fn rate(&self, f_mhz: f64) -> f64 {
        if f_mhz > 0.0 { 1.0 / (self.t0_s + self.d_s_mhz / f_mhz) } else { 0.0 }
    }
}

/// State of the whole fake driver.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct State {
    /// CLOCK_REALTIME (ns) up to which the counters have been advanced.
    pub t_ns: i64,
    /// Per-GPU state, in index order.
    pub gpus: Vec<GpuState>,
}

/// Current CLOCK_REALTIME in ns since the Unix epoch.
pub fn now_ns() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_nanos() as i64).unwrap_or(0)
}

/// Power (W) of the load curve at load `load` and SM clock `f` MHz, before capping.
pub fn curve_w(spec: &GpuSpec, load: f64, f: f64) -> f64 {
    spec.idle_w + load * (spec.b * f + spec.c * f * f * f)
}

/// SM clock the GPU runs at before power capping: the locked max, else the application clock.
pub fn target_clock(gs: &GpuState) -> u32 {
    gs.locked_clocks_mhz.map_or(gs.app_clock_mhz, |(_, max)| max)
}

/// The clock `f` in [0, f_hi] at which the curve reaches `limit_w` (bisection).
pub fn solve_capped_clock(spec: &GpuSpec, load: f64, limit_w: f64, f_hi: f64) -> f64 {
    let (mut lo, mut hi) = (0.0, f_hi);
    for _ in 0..100 {
        let mid = 0.5 * (lo + hi);
        if curve_w(spec, load, mid) > limit_w {
            hi = mid;
        } else {
            lo = mid;
        }
    }
    lo
}

/// The settings in effect and the draw's factor: (power limit mW, target SM clock MHz,
/// leakage). On an ideal GPU the set ones and 1; on a realistic one they settle and heat.
fn in_effect(gs: &GpuState) -> (u32, u32, f64) {
    match &gs.physics {
        Some(p) => (p.limit_mw, p.clock_mhz, p.leakage),
        None => (gs.power_limit_mw, target_clock(gs), 1.0),
    }
}

/// The power limit (W) the work runs against: the one in effect, lowered by the leakage
/// factor (a hotter GPU reaches the cap at less work).
pub fn work_limit_w(gs: &GpuState) -> f64 {
    let (limit_mw, _, leakage) = in_effect(gs);
    f64::from(limit_mw) / 1000.0 / leakage
}

/// (power mW, effective SM clock MHz) for a GPU in state `gs`.
///
/// With a measured curve, the power is idle plus the load's share of the curve's power above
/// idle at the current limit, and the clock the one the curve's speed implies (the target clock
/// times the time per unit at the curve's top limit over the time at the current one). On a
/// realistic GPU the settings are those in effect and the draw is scaled by the leakage.
pub fn operating_point(spec: &GpuSpec, gs: &GpuState) -> (u32, u32) {
    let (limit_mw, target, leakage) = in_effect(gs);
    let limit_w = work_limit_w(gs);
    let mw = |w: f64| ((w * leakage).max(0.0) * 1000.0).round() as u32;
    if gs.load <= 0.0 {
        let idle_clock = gs.locked_clocks_mhz.map_or(spec.min_clock(), |(min, _)| min);
        return (mw(spec.idle_w.min(limit_w)), idle_clock);
    }
    if let Some(curve) = &gs.curve {
        let at = curve.at(limit_w);
        let p = spec.idle_w + gs.load * (at.power_w - spec.idle_w);
        let f = f64::from(target) * (curve.top().time_s / at.time_s).min(1.0);
        return (mw(p), (f.round() as u32).max(1));
    }
    let f = f64::from(target);
    let p = curve_w(spec, gs.load, f);
    if p <= limit_w {
        (mw(p), target)
    } else {
        let fc = solve_capped_clock(spec, gs.load, limit_w, f);
        (limit_mw.min(mw(limit_w)), (fc.round() as u32).max(1))
    }
}

impl GpuState {
    /// State of GPU `index` right after a driver load.
    pub fn fresh(spec: &GpuSpec, index: usize) -> GpuState {
        let mut gs = GpuState {
            load: 0.0,
            power_limit_mw: spec.limit_default_mw,
            app_clock_mhz: spec.max_clock(),
            locked_clocks_mhz: None,
            lost: false,
            hung: false,
            counter_unsupported: false,
            counter_mj: 1_000_000_000 * (index as u64 + 1),
            counter_rem_mw_ns: 0,
            counter_resets: 0,
            power_mw: 0,
            sm_clock_mhz: 0,
            workload: None,
            work_units: 0.0,
            processes: Vec::new(),
            process_utilization: true,
            curve: None,
            physics: None,
        };
        gs.physics = spec
            .realism
            .as_ref()
            .map(|r| Physics::fresh(r, spec.idle_w, gs.counter_mj, gs.power_limit_mw, target_clock(&gs)));
        gs.refresh(spec);
        gs
    }

    /// What a read of the energy counter returns now: the counter, or on a realistic GPU its
    /// value at its last step.
    pub fn counter_read(&self) -> u64 {
        self.physics.as_ref().map_or(self.counter_mj, |p| p.served_mj)
    }

    /// What a power reading returns at `now`, mW: the draw, or on a realistic GPU the mean of
    /// its sampled windows.
    pub fn power_reading(&self, spec: &GpuSpec, now: i64) -> u32 {
        match (&spec.realism, &self.physics) {
            (Some(r), Some(p)) => r.power_reading(&p.recent, now).unwrap_or(self.power_mw),
            _ => self.power_mw,
        }
    }

    /// Runs the GPU from `from` to `to` (CLOCK_REALTIME ns): integrates, and on a realistic
    /// GPU ticks at each counter step on the way (heat, settling, the counter's step). Returns
    /// the draw's changes `(t_ns, mW)` at those ticks.
    pub fn run(&mut self, spec: &GpuSpec, from: i64, to: i64) -> Vec<(i64, u32)> {
        let mut changes = Vec::new();
        let Some(r) = spec.realism else {
            if to > from {
                self.integrate(from, (to - from) as u64);
            }
            return changes;
        };
        let mut t = from;
        while t < to {
            let tick = r.next_tick(t);
            let until = tick.min(to);
            let dt = (until - t) as u64;
            self.integrate(t, dt);
            let power = self.power_mw;
            let set = (self.power_limit_mw, target_clock(self));
            let counter = self.counter_mj;
            let physics =
                self.physics.get_or_insert_with(|| Physics::fresh(&r, spec.idle_w, counter, set.0, set.1));
            physics.temp_c = r.heat(physics.temp_c, power, dt);
            if until == tick {
                physics.served_mj = counter;
                physics.leakage = r.leakage(spec.idle_w, physics.temp_c);
                physics.settle(&r, tick, set.0, set.1);
                self.refresh(spec);
                if self.power_mw != power {
                    changes.push((tick, self.power_mw));
                }
                let p = self.power_mw;
                if let Some(physics) = &mut self.physics {
                    physics.record(&r, tick, p);
                }
            }
            t = until;
        }
        changes
    }

    /// Recomputes the derived power and clock.
    pub fn refresh(&mut self, spec: &GpuSpec) {
        (self.power_mw, self.sm_clock_mhz) = operating_point(spec, self);
    }

    /// Integrates the current power over the `dt_ns` from `from_ns` (CLOCK_REALTIME) into the
    /// counter, exactly, and the work done over it (a measured curve's noise is by instant).
    pub fn integrate(&mut self, from_ns: i64, dt_ns: u64) {
        let total = u128::from(self.counter_rem_mw_ns) + u128::from(self.power_mw) * u128::from(dt_ns);
        self.counter_mj = self.counter_mj.wrapping_add((total / MW_NS_PER_MJ) as u64);
        self.counter_rem_mw_ns = (total % MW_NS_PER_MJ) as u64;
        if self.load <= 0.0 {
            return;
        }
        if let Some(curve) = &self.curve {
            self.work_units += curve.work(work_limit_w(self), from_ns, dt_ns);
        } else if let Some(w) = self.workload {
            self.work_units += w.rate(f64::from(self.sm_clock_mhz)) * dt_ns as f64 / 1e9;
        }
    }

    /// Applies a fault (set) at the current instant.
    pub fn set_fault(&mut self, fault: Fault) {
        match fault {
            Fault::Lost => self.lost = true,
            Fault::Hang => self.hung = true,
            Fault::CounterUnsupported => self.counter_unsupported = true,
            Fault::CounterReset => {
                self.counter_mj = 0;
                self.counter_rem_mw_ns = 0;
                self.counter_resets += 1;
                if let Some(p) = &mut self.physics {
                    p.served_mj = 0;
                }
            }
        }
    }

    /// Clears a fault; clearing `CounterReset` does nothing (it is one-shot).
    pub fn clear_fault(&mut self, fault: Fault) {
        match fault {
            Fault::Lost => self.lost = false,
            Fault::Hang => self.hung = false,
            Fault::CounterUnsupported => self.counter_unsupported = false,
            Fault::CounterReset => {}
        }
    }
}

/// Settings may only be changed by a privileged effective uid (`NVML_ERROR_NO_PERMISSION` otherwise).
pub fn check_privilege(euid: u32, privileged_uids: &[u32]) -> Result<(), Code> {
    if privileged_uids.contains(&euid) { Ok(()) } else { Err(nvmlReturn_enum_NVML_ERROR_NO_PERMISSION) }
}

const INVALID: Code = nvmlReturn_enum_NVML_ERROR_INVALID_ARGUMENT;

/// Sets the power limit (mW) after checking it lies in [min, max].
pub fn set_power_limit(spec: &GpuSpec, gs: &mut GpuState, mw: u32) -> Result<(), Code> {
    if mw < spec.limit_min_mw || mw > spec.limit_max_mw {
        return Err(INVALID);
    }
    gs.power_limit_mw = mw;
    Ok(())
}

/// Locks the SM clock to [min, max]; both must be supported clocks and min <= max.
pub fn set_locked_clocks(spec: &GpuSpec, gs: &mut GpuState, min: u32, max: u32) -> Result<(), Code> {
    if min > max || !spec.sm_clocks_mhz.contains(&min) || !spec.sm_clocks_mhz.contains(&max) {
        return Err(INVALID);
    }
    gs.locked_clocks_mhz = Some((min, max));
    Ok(())
}

/// Sets the application clocks; the memory clock must be the supported one, the SM clock listed.
pub fn set_app_clocks(spec: &GpuSpec, gs: &mut GpuState, mem: u32, gfx: u32) -> Result<(), Code> {
    if mem != spec.mem_clock_mhz || !spec.sm_clocks_mhz.contains(&gfx) {
        return Err(INVALID);
    }
    gs.app_clock_mhz = gfx;
    Ok(())
}

impl State {
    /// Fresh driver state for `cfg` at time `now`.
    pub fn fresh(cfg: &Config, now: i64) -> Result<State, String> {
        let gpus = (0..cfg.gpu.len())
            .map(|i| Ok(GpuState::fresh(&cfg.spec(i)?, i)))
            .collect::<Result<_, String>>()?;
        Ok(State { t_ns: now, gpus })
    }

    /// Runs every GPU up to `now` (time never runs backwards); returns each GPU's changes of
    /// draw on the way (see [`GpuState::run`]).
    pub fn advance(&mut self, specs: &[GpuSpec], now: i64) -> Vec<Vec<(i64, u32)>> {
        let from = self.t_ns;
        let changes = self.gpus.iter_mut().zip(specs).map(|(g, spec)| g.run(spec, from, now)).collect();
        self.t_ns = self.t_ns.max(now);
        changes
    }
}

/// Path of the log of energy-counter reads of GPU `index` (`t_ns counter_mj` per line).
pub fn reads_path(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("reads-{index}.log"))
}

/// Appends one energy-counter read: the instant it was taken and the value served.
pub fn log_counter_read(dir: &Path, index: usize, t_ns: i64, counter_mj: u64) -> io::Result<()> {
    let mut f = OpenOptions::new().create(true).append(true).open(reads_path(dir, index))?;
    f.write_all(format!("{t_ns} {counter_mj}\n").as_bytes())
}

/// The instants at which GPU `index` served the counter value `counter_mj`, in order.
pub fn counter_read_instants(dir: &Path, index: usize, counter_mj: u64) -> io::Result<Vec<i64>> {
    let text = match fs::read_to_string(reads_path(dir, index)) {
        Ok(text) => text,
        Err(e) if e.kind() == io::ErrorKind::NotFound => String::new(),
        Err(e) => return Err(e),
    };
    Ok(text
        .lines()
        .filter_map(|l| l.split_once(' '))
        .filter(|(_, v)| v.parse::<u64>().ok() == Some(counter_mj))
        .filter_map(|(t, _)| t.parse().ok())
        .collect())
}

/// Path of the ground-truth power history of GPU `index`.
pub fn history_path(dir: &Path, index: usize) -> PathBuf {
    dir.join(format!("history-{index}.log"))
}

fn append_history(dir: &Path, index: usize, line: &str, truncate: bool) -> io::Result<()> {
    let mut f = OpenOptions::new()
        .create(true)
        .append(!truncate)
        .write(true)
        .truncate(truncate)
        .open(history_path(dir, index))?;
    f.write_all(line.as_bytes())
}

/// An exclusive `flock` on `state.lock`, released on drop.
pub struct DirLock {
    _file: File,
}

/// Takes the exclusive lock of a fake driver directory (blocking).
pub fn lock_dir(dir: &Path) -> io::Result<DirLock> {
    let file = OpenOptions::new().create(true).truncate(false).write(true).open(dir.join(LOCK_FILE))?;
    loop {
        // SAFETY: flock on a file descriptor we own.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } == 0 {
            return Ok(DirLock { _file: file });
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Err(err);
        }
    }
}

fn invalid_data(e: impl ToString) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e.to_string())
}

fn save(dir: &Path, state: &State) -> io::Result<()> {
    let tmp = dir.join(format!("{STATE_FILE}.tmp.{}", std::process::id()));
    fs::write(&tmp, serde_json::to_vec(state).map_err(invalid_data)?)?;
    fs::rename(&tmp, dir.join(STATE_FILE))
}

/// Runs `f` on the locked, advanced state of `dir` and saves the result.
///
/// `f` receives the config, the state (advanced to `now`) and `now`.  Power
/// changes and counter resets are appended to the history files, stamped
/// `now`, before the new state is saved.
pub fn with_state<R>(dir: &Path, f: impl FnOnce(&Config, &mut State, i64) -> R) -> io::Result<R> {
    let _lock = lock_dir(dir)?;
    let cfg = Config::load(dir)?;
    let specs =
        (0..cfg.gpu.len()).map(|i| cfg.spec(i)).collect::<Result<Vec<_>, _>>().map_err(invalid_data)?;
    let now = now_ns();
    let mut state = match fs::read(dir.join(STATE_FILE)) {
        Ok(bytes) => serde_json::from_slice::<State>(&bytes).map_err(invalid_data)?,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let st = State::fresh(&cfg, now).map_err(invalid_data)?;
            for (i, g) in st.gpus.iter().enumerate() {
                append_history(dir, i, &format!("{} {}\n", st.t_ns, g.power_mw), true)?;
            }
            st
        }
        Err(e) => return Err(e),
    };
    let physics_before: Vec<Option<Physics>> = state.gpus.iter().map(|g| g.physics.clone()).collect();
    let changes = state.advance(&specs, now);
    for (i, changes) in changes.iter().enumerate() {
        for (t, p) in changes {
            append_history(dir, i, &format!("{t} {p}\n"), false)?;
        }
    }
    // GPUs added to the config after the state was created start fresh now.
    while state.gpus.len() < specs.len() {
        let i = state.gpus.len();
        state.gpus.push(GpuState::fresh(&specs[i], i));
        append_history(dir, i, &format!("{now} {}\n", state.gpus[i].power_mw), true)?;
    }
    state.gpus.truncate(specs.len());
    let before: Vec<(u32, u32, (u32, u32))> = state
        .gpus
        .iter()
        .map(|g| (g.power_mw, g.counter_resets, (g.power_limit_mw, target_clock(g))))
        .collect();
    let advanced = state.clone();
    let result = f(&cfg, &mut state, now);
    for (i, g) in state.gpus.iter_mut().enumerate() {
        let set = (g.power_limit_mw, target_clock(g));
        if let (Some(r), Some(p)) = (&specs[i].realism, &mut g.physics) {
            // A new setting settles from what is in effect, from the next step on.
            if set != before[i].2 {
                p.settling = Some((now, p.limit_mw, p.clock_mhz));
            }
            if p.recent.is_empty() {
                p.record(r, now, g.power_mw);
            }
        }
        g.refresh(&specs[i]);
        if let (Some(r), Some(p)) = (&specs[i].realism, &mut g.physics) {
            p.record(r, now, g.power_mw);
        }
        let (p0, r0, _) = before[i];
        if g.counter_resets != r0 {
            append_history(dir, i, &format!("{} {} reset\n", state.t_ns, g.power_mw), false)?;
        } else if g.power_mw != p0 {
            append_history(dir, i, &format!("{} {}\n", state.t_ns, g.power_mw), false)?;
        }
    }
    // A call that changed nothing but time need not be saved: advancing is exact integer
    // arithmetic, so the next call advances the saved state to the same counter. A realistic
    // GPU that ticked must be: its ticks wrote history and moved its heat.
    let ticked = state.gpus.iter().zip(&physics_before).any(|(g, before)| g.physics != *before);
    if state != advanced || ticked || !dir.join(STATE_FILE).exists() {
        save(dir, &state)?;
    }
    Ok(result)
}

/// The latest instant any GPU's energy counter was read (from the read logs), if any.
pub fn last_counter_read_ns(dir: &Path) -> io::Result<Option<i64>> {
    let _lock = lock_dir(dir)?;
    let mut latest = None;
    for entry in fs::read_dir(dir)? {
        let path = entry?.path();
        let is_log = path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("reads-"));
        if is_log {
            let text = fs::read_to_string(&path)?;
            let last = text.lines().filter_map(|l| l.split_once(' ')?.0.parse::<i64>().ok()).max();
            latest = latest.max(last);
        }
    }
    Ok(latest)
}

/// Exact integral (mJ) of GPU `index`'s true power over [from_ns, to_ns], from its history file.
pub fn truth_energy_mj(dir: &Path, index: usize, from_ns: i64, to_ns: i64) -> io::Result<f64> {
    integrate_history(&history(dir, index)?, from_ns, to_ns)
}

/// GPU `index`'s true power history, `(t_ns, mW)` at each change, in time order.
pub fn history(dir: &Path, index: usize) -> io::Result<Vec<(i64, u64)>> {
    let text = {
        let _lock = lock_dir(dir)?;
        fs::read_to_string(history_path(dir, index))?
    };
    let mut points = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut it = line.split_whitespace();
        let t: i64 =
            it.next().and_then(|x| x.parse().ok()).ok_or_else(|| invalid_data("bad history line"))?;
        let p: u64 =
            it.next().and_then(|x| x.parse().ok()).ok_or_else(|| invalid_data("bad history line"))?;
        // A process killed after writing history but before saving the state leaves lines that
        // the next call writes again from the saved instant: the later lines supersede.
        while points.last().is_some_and(|&(last, _)| last >= t) {
            points.pop();
        }
        points.push((t, p));
    }
    Ok(points)
}

/// Integrates a piecewise-constant power history `(t_ns, mW)` over [from, to], in mJ.
pub fn integrate_history(points: &[(i64, u64)], from: i64, to: i64) -> io::Result<f64> {
    if to < from {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "interval ends before it starts"));
    }
    match points.first() {
        Some(&(t0, _)) if t0 <= from => {}
        _ => return Err(io::Error::new(io::ErrorKind::InvalidInput, "interval starts before the history")),
    }
    let mut total_mw_ns: u128 = 0;
    for (k, &(t, p)) in points.iter().enumerate() {
        let end = points.get(k + 1).map_or(i64::MAX, |n| n.0);
        let (a, b) = (t.max(from), end.min(to));
        if b > a {
            total_mw_ns += u128::from(p) * (b - a) as u128;
        }
    }
    Ok(total_mw_ns as f64 / MW_NS_PER_MJ as f64)
}
