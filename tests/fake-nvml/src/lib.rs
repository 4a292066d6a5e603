//! A simulated `libnvidia-ml.so` for wattson's tests and demo.
//!
//! Built as a cdylib (`libfake_nvml.so`), it exports the NVML symbols that
//! nvml-wrapper 0.13 uses; load it with
//! `Nvml::builder().lib_path(path).init()` after pointing the environment
//! variable [`DIR_ENV`] (`WATTSON_FAKE_NVML_DIR`) at a directory made with
//! [`Sim::create`].  The rlib side ([`Sim`]) drives loads, injects faults and
//! reads the exact ground truth, from any process, while the library runs.
//!
//! A GPU is ideal (its counter exact at every read, its power reading the instant's draw)
//! unless its configuration asks it to behave as real ones do ([`RealismConfig`]: a counter
//! that steps, averaged power readings, heat, settling); either way the physical truth is the
//! exact integral of the power it drew ([`Sim::truth_energy_mj`]).
//!
//! Files in the directory: `config.toml` (the GPUs), `state.json` (live
//! state, shared and persistent), `state.lock` (flock), and
//! `history-<index>.log` (`t_ns power_mw [reset]` per power change).

mod config;
mod curve;
mod ffi;
pub mod mig;
mod realism;
pub mod state;
#[cfg(test)]
mod tests;

pub use config::{CONFIG_FILE, Config, GpuConfig, GpuSpec};
pub use curve::{CurvePoint, MeasuredCurve, Noise, TruePoint};
pub use ffi::DIR_ENV;
pub use mig::MigInstance;
pub use realism::{Physics, Realism, RealismConfig};
pub use state::{
    Fault, GpuState, LOCK_FILE, ProcessLoad, STATE_FILE, Workload, check_privilege, history_path, now_ns,
    operating_point,
};

use std::io;
use std::path::{Path, PathBuf};

/// File name cargo gives the cdylib.
pub const LIBRARY_FILE: &str = "libfake_nvml.so";

/// Handle on a fake driver directory; cheap, holds no open files.
#[derive(Clone, Debug)]
pub struct Sim {
    dir: PathBuf,
}

fn bad_input(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.to_string())
}

impl Sim {
    /// Creates (or re-creates) a driver directory: writes `config.toml` and fresh state and history.
    pub fn create(dir: &Path, config: &Config) -> io::Result<Sim> {
        let absolute = std::path::absolute(dir)?;
        let mut config = config.clone();
        for (index, gpu) in config.gpu.iter_mut().enumerate() {
            gpu.uuid.get_or_insert_with(|| config::uuid_in(&absolute, index));
        }
        let text = config.to_toml();
        Config::from_toml(&text)?;
        std::fs::create_dir_all(dir)?;
        {
            let _lock = state::lock_dir(dir)?;
            let tmp = dir.join(format!("{CONFIG_FILE}.tmp.{}", std::process::id()));
            std::fs::write(&tmp, text)?;
            std::fs::rename(&tmp, dir.join(CONFIG_FILE))?;
            match std::fs::remove_file(dir.join(STATE_FILE)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        let sim = Sim::open(dir);
        // Creates state.json and truncates every history file.
        state::with_state(dir, |_, _, _| ())?;
        Ok(sim)
    }

    /// Renumbers the GPUs for the next driver load: NVML index `i` names the GPU at place
    /// `order[i]` of the configuration (every other call of this type keeps naming GPUs by
    /// that place). Load it with the daemon stopped, as a reboot would.
    pub fn set_order(&self, order: &[u32]) -> io::Result<()> {
        let _lock = state::lock_dir(&self.dir)?;
        let mut config = Config::load(&self.dir)?;
        config.order = Some(order.to_vec());
        let text = config.to_toml();
        Config::from_toml(&text)?;
        let tmp = self.dir.join(format!("{CONFIG_FILE}.tmp.{}", std::process::id()));
        std::fs::write(&tmp, text)?;
        std::fs::rename(&tmp, self.dir.join(CONFIG_FILE))
    }

    /// A handle on an existing directory (nothing is checked until the first call).
    pub fn open(dir: &Path) -> Sim {
        Sim { dir: dir.to_path_buf() }
    }

    /// The driver directory (set `WATTSON_FAKE_NVML_DIR` to this).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn with_gpu<T>(&self, gpu: u32, f: impl FnOnce(&mut GpuState) -> T) -> io::Result<T> {
        state::with_state(&self.dir, |_, st, _| st.gpus.get_mut(gpu as usize).map(f))?
            .ok_or_else(|| bad_input("no such gpu"))
    }

    /// Sets GPU `gpu`'s load (0.0..=1.0) now; power changes at this instant.
    pub fn set_load(&self, gpu: u32, load: f64) -> io::Result<()> {
        if !(0.0..=1.0).contains(&load) {
            return Err(bad_input("load must be within 0.0..=1.0"));
        }
        self.with_gpu(gpu, |g| g.load = load)
    }

    /// Brings realistic GPU `gpu` to the temperature its present draw holds it at, as if it
    /// had run so for many minutes (a busy node's GPU, not one just out of idle); an ideal GPU
    /// is left as it is. The draw moves with the leakage at this instant.
    pub fn warm(&self, gpu: u32) -> io::Result<()> {
        state::with_state(&self.dir, |cfg, st, _| {
            let spec = cfg.spec(gpu as usize).map_err(|e| bad_input(&e))?;
            let g = st.gpus.get_mut(gpu as usize).ok_or_else(|| bad_input("no such gpu"))?;
            settle_heat(&spec, g);
            Ok(())
        })?
    }

    /// Sets the processes on GPU `gpu` and each one's SM utilisation (percent, at most 100),
    /// as the driver reports them per process from now on.
    pub fn set_processes(&self, gpu: u32, processes: &[ProcessLoad]) -> io::Result<()> {
        if processes.iter().any(|p| p.sm_pct > 100) {
            return Err(bad_input("SM utilisation must be within 0..=100"));
        }
        self.with_gpu(gpu, |g| g.processes = processes.to_vec())
    }

    /// Whether GPU `gpu`'s driver gives per-process utilisation (false: the call answers
    /// `NVML_ERROR_NOT_SUPPORTED`, as on drivers and GPUs without it).
    pub fn set_process_utilization(&self, gpu: u32, supported: bool) -> io::Result<()> {
        self.with_gpu(gpu, |g| g.process_utilization = supported)
    }

    /// Starts (or, with `None`, removes) the workload on GPU `gpu` now; its progress then
    /// follows [`Workload::rate`] at the GPU's effective clock while the load is above zero
    /// (unless a measured curve is set: [`Sim::set_curve`]).
    pub fn set_workload(&self, gpu: u32, workload: Option<Workload>) -> io::Result<()> {
        if let Some(w) = workload
            && !(w.t0_s >= 0.0
                && w.d_s_mhz >= 0.0
                && w.t0_s + w.d_s_mhz > 0.0
                && (w.t0_s + w.d_s_mhz).is_finite())
        {
            return Err(bad_input("workload times must be finite, >= 0 and not both 0"));
        }
        self.with_gpu(gpu, |g| g.workload = workload)
    }

    /// Makes the work on GPU `gpu` follow a measured curve from now (or, with `None`, the
    /// built-in law again): while the load is above zero its speed and power are the curve's
    /// at the current power limit (speed with the curve's noise), see [`MeasuredCurve`].
    pub fn set_curve(&self, gpu: u32, curve: Option<MeasuredCurve>) -> io::Result<()> {
        self.with_gpu(gpu, |g| g.curve = curve)
    }

    /// The truth of the work on GPU `gpu` at the setting it runs at now: the noise-free time
    /// per unit and power of its measured curve at the current power limit, as the GPU runs
    /// it now (a realistic GPU hot, which makes it slower under a cap and draw more) (`None`
    /// without a curve).
    pub fn true_point(&self, gpu: u32) -> io::Result<Option<TruePoint>> {
        self.with_gpu(gpu, |g| truth(g))
    }

    /// The truth of the work on GPU `gpu` held at power limit `limit_w` at its present load
    /// until its heat has settled (a realistic GPU's temperature where the draw at that limit
    /// holds it; an ideal GPU's curve point), whatever the GPU runs at now, which is left as
    /// it is. Independent of when it is asked: what a long job at that limit runs at.
    pub fn steady_point(&self, gpu: u32, limit_w: f64) -> io::Result<Option<TruePoint>> {
        state::with_state(&self.dir, |cfg, st, _| {
            let spec = cfg.spec(gpu as usize).map_err(|e| bad_input(&e))?;
            let mut g = st.gpus.get(gpu as usize).ok_or_else(|| bad_input("no such gpu"))?.clone();
            g.power_limit_mw = (limit_w * 1000.0).round() as u32;
            if let Some(r) = &spec.realism {
                let counter = g.counter_mj;
                let (limit, clock) = (g.power_limit_mw, state::target_clock(&g));
                g.physics = Some(Physics::fresh(r, spec.idle_w, counter, limit, clock));
            }
            g.refresh(&spec);
            settle_heat(&spec, &mut g);
            Ok(truth(&g))
        })?
    }

    /// Sets GPU `gpu`'s power limit (mW) now, as an administrator's `nvidia-smi -pl` would.
    pub fn set_power_limit(&self, gpu: u32, mw: u32) -> io::Result<()> {
        let config = Config::load(&self.dir)?;
        let spec = config.spec(gpu as usize).map_err(|e| bad_input(&e))?;
        self.with_gpu(gpu, |g| state::set_power_limit(&spec, g, mw))?
            .map_err(|_| bad_input("power limit outside the GPU's range"))
    }

    /// The place in the configuration of the GPU with this UUID.
    pub fn place_of(&self, uuid: &str) -> io::Result<u32> {
        let config = Config::load(&self.dir)?;
        (0..config.gpu.len())
            .find(|&i| config.spec(i).is_ok_and(|s| s.uuid == uuid))
            .map(|i| i as u32)
            .ok_or_else(|| bad_input("no GPU has this UUID"))
    }

    /// The MIG instances of GPU `gpu` (its place in the configuration), in MIG index order;
    /// none when MIG is off.
    pub fn mig_instances(&self, gpu: u32) -> io::Result<Vec<MigInstance>> {
        Ok(mig::instances(&Config::load(&self.dir)?, gpu as usize))
    }

    /// Units of work GPU `gpu`'s workloads have completed up to now.
    pub fn work_done(&self, gpu: u32) -> io::Result<f64> {
        self.with_gpu(gpu, |g| g.work_units)
    }

    /// Units of work GPU `gpu`'s workloads have completed, with the instant (CLOCK_REALTIME
    /// ns) they were counted at: a progress writer can stamp the value with it exactly.
    pub fn work_done_at(&self, gpu: u32) -> io::Result<(i64, f64)> {
        state::with_state(&self.dir, |_, st, now| st.gpus.get(gpu as usize).map(|g| (now, g.work_units)))?
            .ok_or_else(|| bad_input("no such gpu"))
    }

    /// Injects a fault into GPU `gpu` now (`CounterReset` is one-shot).
    pub fn set_fault(&self, gpu: u32, fault: Fault) -> io::Result<()> {
        self.with_gpu(gpu, |g| g.set_fault(fault))
    }

    /// Clears a fault of GPU `gpu` (no-op for `CounterReset`).
    pub fn clear_fault(&self, gpu: u32, fault: Fault) -> io::Result<()> {
        self.with_gpu(gpu, |g| g.clear_fault(fault))
    }

    /// GPU `gpu`'s state advanced to now: power, counter, clocks, limit, load, faults.
    pub fn gpu_state(&self, gpu: u32) -> io::Result<GpuState> {
        self.with_gpu(gpu, |g| g.clone())
    }

    /// CLOCK_REALTIME (ns) of the most recent energy-counter read by any process: called right
    /// after such a read, it is the exact instant that read was taken at.
    pub fn last_access_ns(&self) -> io::Result<i64> {
        state::last_counter_read_ns(&self.dir)?
            .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, "no counter read yet"))
    }

    /// The exact instants (CLOCK_REALTIME ns) at which GPU `gpu`'s energy counter was read
    /// and returned the value `counter_mj`, in order. Lets a test learn exactly when a reading
    /// that a caller recorded was taken, whatever the caller's own clock said.
    pub fn counter_read_instants(&self, gpu: u32, counter_mj: u64) -> io::Result<Vec<i64>> {
        state::counter_read_instants(&self.dir, gpu as usize, counter_mj)
    }

    /// Exact true energy (mJ) GPU `gpu` consumed over the wall-clock interval [from_ns, to_ns]
    /// (CLOCK_REALTIME ns); independent of the counter and its resets.  Errors if the interval
    /// starts before the directory was created.
    pub fn truth_energy_mj(&self, gpu: u32, from_ns: i64, to_ns: i64) -> io::Result<f64> {
        state::truth_energy_mj(&self.dir, gpu as usize, from_ns, to_ns)
    }
}

/// Finds `libfake_nvml.so` built in the same cargo profile directory as `exe`
/// (looks beside it, in `deps/`, and in the parent when `exe` is itself in `deps/`); the
/// newest one wins, since cargo refreshes `deps/` on every build but the copy beside the
/// binaries only when the library itself is a build target.
pub fn library_path_next_to(exe: &Path) -> Option<PathBuf> {
    library_named_next_to(exe, LIBRARY_FILE)
}

/// [`library_path_next_to`] for a library of another file name (another fake library built
/// from this repository, e.g. `libfake_amdsmi.so`).
pub fn library_named_next_to(exe: &Path, file: &str) -> Option<PathBuf> {
    let parent = exe.parent()?;
    let mut candidates = vec![parent.join(file), parent.join("deps").join(file)];
    if let Some(profile) = parent.parent() {
        candidates.push(profile.join(file));
    }
    candidates
        .into_iter()
        .filter_map(|p| Some((std::fs::metadata(&p).ok().filter(|m| m.is_file())?.modified().ok()?, p)))
        .max_by_key(|(modified, _)| *modified)
        .map(|(_, p)| p)
}

/// Brings realistic GPU `g` to the temperature its draw holds it at (temperature and draw
/// hold each other: iterated to their fixed point); an ideal GPU is left as it is.
fn settle_heat(spec: &GpuSpec, g: &mut GpuState) {
    let Some(r) = spec.realism.as_ref() else { return };
    for _ in 0..64 {
        let power = g.power_mw;
        let Some(p) = g.physics.as_mut() else { return };
        p.temp_c = r.heat(p.temp_c, power, u64::MAX);
        p.leakage = r.leakage(spec.idle_w, p.temp_c);
        g.refresh(spec);
    }
}

/// The noise-free time per unit and power of GPU `g`'s measured curve at the limit in effect,
/// lowered by its heat (`None` without a curve).
fn truth(g: &GpuState) -> Option<TruePoint> {
    let c = g.curve.as_ref()?;
    let at = c.at(state::work_limit_w(g));
    let leakage = g.physics.as_ref().map_or(1.0, |p| p.leakage);
    Some(TruePoint {
        limit_w: f64::from(g.power_limit_mw) / 1000.0,
        time_s: at.time_s,
        power_w: at.power_w * leakage,
    })
}
