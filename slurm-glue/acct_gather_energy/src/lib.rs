//! `acct_gather_energy_wattson.so`: Slurm's energy accounting fed by wattsond
//! (`AcctGatherEnergyType=acct_gather_energy/wattson`). FFI only; the logic is
//! `wattson_slurm::energy`.
//!
//! In slurmd it reports the node's GPU energy and power (`scontrol show node`: CurrentWatts,
//! AveWatts); in each slurmstepd its job's energy on the node as wattsond meters it, in the
//! scope `[energy] scope` sets (GPU; GPU plus its share of CPU and DRAM; its share of the node), so
//! `sstat` shows it growing and `sacct` shows the job's total (the extern step's, with
//! `PrologFlags=Contain`). Loaded in slurmctld too, where it does nothing. wattsond's config
//! path comes from `WATTSON_CONFIG` in slurmd's environment, else `/etc/wattson/wattson.toml`.
//! Fails open: with wattsond down the figures stay where they were (zero at first) and Slurm's
//! log says why; a poll waits at most `POLL_TIMEOUT`. The plugin takes no `acct_gather.conf`
//! options, so it needs none of Slurm's internal (unpublished) types.

use std::ffi::{c_int, c_void};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Instant;

use wattson_slurm::energy::{self, Energy, Meter, POLL_TIMEOUT, Process, Start};
use wattson_slurm::node::PluginArgs;
use wattson_slurm::sys::{self, acct_energy_type, acct_gather_energy_t};
use wattson_slurm_ffi::{error, guard};

wattson_slurm_ffi::plugin_identity!(
    "wattson GPU energy via wattsond",
    "acct_gather_energy/wattson",
    follows_micro = "acct_gather_energy_wattson.so"
);

const SLURM_SUCCESS: c_int = sys::SLURM_SUCCESS as c_int;
const SLURM_ERROR: c_int = sys::SLURM_ERROR;

/// What the plugin meters in this process, settled at the first call (slurmstepd names its
/// step in its command line only once it runs).
struct State {
    process: Process,
    args: PluginArgs,
    meter: Meter,
    /// Whether the step's own record has answered (then only it is read).
    step_seen: bool,
}

static STATE: Mutex<Option<State>> = Mutex::new(None);

fn with_state<T>(f: impl FnOnce(&mut State) -> T) -> T {
    let mut slot = STATE.lock().unwrap_or_else(|p| p.into_inner());
    let state = slot.get_or_insert_with(|| {
        let process = Process::current();
        let start = match process {
            Process::Step { is_extern: true, .. } => Start::Zero,
            _ => Start::FirstReading,
        };
        let config = std::env::var_os("WATTSON_CONFIG")
            .map(PathBuf::from)
            .unwrap_or_else(wattson_config::locate::path);
        let args = PluginArgs::new(config, Some(POLL_TIMEOUT));
        State { process, args, meter: Meter::new(start), step_seen: false }
    });
    f(state)
}

/// Asks wattsond for this process's figures (unless waiting out a failure).
fn poll(state: &mut State) {
    let unix_s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    let (process, args) = (&state.process, &state.args);
    let step_seen = state.step_seen;
    let mut step_appeared = false;
    let read = || match process {
        Process::Slurmd => energy::node_energy(args),
        Process::Step { job, is_extern: true, .. } => energy::job_energy(args, *job, ""),
        // The step's own record once it has one; until then the job's, from this first poll.
        Process::Step { job, step, .. } => match energy::job_energy(args, *job, step)? {
            // The first answer of the step's record: counted from zero, read again below.
            Some(_) if !step_seen => {
                step_appeared = true;
                Ok(None)
            }
            Some(reading) => Ok(Some(reading)),
            None if step_seen => Ok(None),
            None => energy::job_energy(args, *job, ""),
        },
        Process::Other => Ok(None),
    };
    let mut why = state.meter.poll(Instant::now(), unix_s, read);
    if step_appeared {
        state.step_seen = true;
        state.meter.restart(Start::Zero);
        let Process::Step { job, step, .. } = &state.process else { return };
        let args = &state.args;
        why = state.meter.poll(Instant::now(), unix_s, || energy::job_energy(args, *job, step));
    }
    if let Some(why) = why {
        error(&format!("acct_gather_energy/wattson: {why}"));
    }
}

/// Writes `energy` into Slurm's record.
///
/// # Safety
/// `out` must point at a writable `acct_gather_energy_t`.
unsafe fn fill(out: *mut acct_gather_energy_t, energy: Energy) {
    // SAFETY: per the contract.
    let out = unsafe { &mut *out };
    out.consumed_energy = energy.consumed_j;
    out.base_consumed_energy = energy.increment_j;
    out.previous_consumed_energy = energy.previous_j;
    out.current_watts = energy.current_w;
    out.ave_watts = energy.ave_w;
    out.poll_time = energy.poll_time as sys::time_t;
}

/// Called when Slurm loads the plugin.
#[unsafe(no_mangle)]
pub extern "C" fn init() -> c_int {
    SLURM_SUCCESS
}

/// Called when Slurm unloads the plugin.
#[unsafe(no_mangle)]
pub extern "C" fn fini() -> c_int {
    SLURM_SUCCESS
}

/// slurmd, every `AcctGatherNodeFreq` seconds: read the node's GPUs.
#[unsafe(no_mangle)]
pub extern "C" fn acct_gather_energy_p_update_node_energy() -> c_int {
    guard("update_node_energy", SLURM_SUCCESS, || {
        with_state(poll);
        SLURM_SUCCESS
    })
}

/// Slurm asks for figures: `data` points at what `data_type` names (one sensor: this node's
/// GPUs, or this step's job on them).
///
/// # Safety
/// Called by Slurm with `data` as its plugin interface defines for `data_type`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn acct_gather_energy_p_get_data(
    data_type: acct_energy_type,
    data: *mut c_void,
) -> c_int {
    if data.is_null() {
        return SLURM_ERROR;
    }
    guard("get_data", SLURM_ERROR, || {
        with_state(|state| {
            match data_type {
                sys::ENERGY_DATA_NODE_ENERGY_UP | sys::ENERGY_DATA_JOULES_TASK => {
                    poll(state);
                    // SAFETY: these types carry an acct_gather_energy_t (an array of one sensor).
                    unsafe { fill(data.cast(), state.meter.energy()) }
                }
                sys::ENERGY_DATA_NODE_ENERGY | sys::ENERGY_DATA_STRUCT => {
                    // SAFETY: as above.
                    unsafe { fill(data.cast(), state.meter.energy()) }
                }
                // SAFETY: LAST_POLL carries a time_t, SENSOR_CNT a uint16_t.
                sys::ENERGY_DATA_LAST_POLL => unsafe {
                    *data.cast::<sys::time_t>() = state.meter.energy().poll_time as sys::time_t
                },
                sys::ENERGY_DATA_SENSOR_CNT => unsafe { *data.cast::<u16>() = 1 },
                other => {
                    error(&format!("acct_gather_energy/wattson: get_data: unknown type {other}"));
                    return SLURM_ERROR;
                }
            }
            SLURM_SUCCESS
        })
    })
}

/// Slurm hands data over: a reconfiguration, a profiling tick (polls), the step record (not
/// needed: the step is read from the command line).
#[unsafe(no_mangle)]
pub extern "C" fn acct_gather_energy_p_set_data(data_type: acct_energy_type, _data: *mut c_void) -> c_int {
    guard("set_data", SLURM_ERROR, || match data_type {
        sys::ENERGY_DATA_RECONFIG | sys::ENERGY_DATA_STEP_PTR => SLURM_SUCCESS,
        sys::ENERGY_DATA_PROFILE => {
            with_state(poll);
            SLURM_SUCCESS
        }
        other => {
            error(&format!("acct_gather_energy/wattson: set_data: unknown type {other}"));
            SLURM_ERROR
        }
    })
}

/// `acct_gather.conf` options: none.
#[unsafe(no_mangle)]
pub extern "C" fn acct_gather_energy_p_conf_options(_options: *mut c_void, _count: *mut c_int) {}

/// `acct_gather.conf` values parsed: none to take.
#[unsafe(no_mangle)]
pub extern "C" fn acct_gather_energy_p_conf_set(_context: c_int, _table: *mut c_void) {}

/// `scontrol show config` lines: none.
#[unsafe(no_mangle)]
pub extern "C" fn acct_gather_energy_p_conf_values(_list: *mut c_void) {}
