//! `spank_wattson.so`: wattson's SPANK plugin. FFI only; the logic is in `wattson_slurm`.
//!
//! - sbatch/srun/salloc: registers `--energy`, `--energy-slowdown`, `--energy-tag`,
//!   `--energy-defer` and refuses bad values with one line (the job is not queued).
//! - slurmd (job prolog/epilog, as root): tells the node's wattsond that the job began or ended.
//! - slurmstepd (as root, at each step's start and exit): tells wattsond that the step began or
//!   ended, so each step (`42.batch`, `42.0`) has its own record.
//! - slurmstepd (user init): puts the decision in the job's environment.
//!
//! - loaded by a Slurm of another release series than the one it was built for: Slurm
//!   refuses it (jobs run without it where plugstack.conf says `optional`); as it is mapped
//!   it logs one line naming both releases.
//!
//! Every entry point catches panics and fails open: if wattson is down or confused, the job
//! runs as it would without it, and a log line says why.

use std::ffi::{CStr, CString, c_char, c_int, c_long, c_void};
use std::sync::Mutex;
use std::sync::atomic::{AtomicPtr, Ordering};

use wattson_slurm::gpu_freq;
use wattson_slurm::hints::{OPTIONS, SubmitHints};
use wattson_slurm::node::{self, NodeJob, PluginArgs, gpus_from_env};
use wattson_slurm::release;
use wattson_slurm::sharing;
use wattson_slurm::steps;
use wattson_slurm::sys::{self, spank_option, spank_t};
use wattson_slurm_ffi::{error, guard, info};

wattson_slurm_ffi::plugin_identity!("wattson", "spank");
#[unsafe(no_mangle)]
pub static spank_plugin_version: u32 = 1;

/// The registered option table (leaked: it lives as long as the process, as Slurm requires).
static TABLE: AtomicPtr<spank_option> = AtomicPtr::new(std::ptr::null_mut());
/// Hints given on this command line (local context).
static HINTS: Mutex<Option<SubmitHints>> = Mutex::new(None);

/// The plugin's arguments from plugstack.conf, which Slurm passes to every callback.
fn args(ac: c_int, av: *mut *mut c_char) -> PluginArgs {
    PluginArgs::parse(arguments(ac, av)).unwrap_or_else(|e| {
        error(&format!("wattson: {e}; using defaults"));
        PluginArgs::default()
    })
}

/// Slurm's `argc/argv` as strings.
fn arguments<'a>(ac: c_int, av: *mut *mut c_char) -> Vec<&'a str> {
    if av.is_null() {
        return Vec::new();
    }
    (0..ac.max(0) as usize)
        // SAFETY: Slurm passes `ac` valid NUL-terminated strings in `av`.
        .filter_map(|i| unsafe { (*av.add(i)).as_ref() }.map(|p| unsafe { CStr::from_ptr(p) }))
        .filter_map(|s| s.to_str().ok())
        .collect()
}

fn option_table() -> *mut spank_option {
    let existing = TABLE.load(Ordering::Acquire);
    if !existing.is_null() {
        return existing;
    }
    let leak = |s: &str| CString::new(s).unwrap_or_default().into_raw();
    let table: Vec<spank_option> = OPTIONS
        .iter()
        .enumerate()
        .map(|(i, o)| spank_option {
            name: leak(o.name),
            arginfo: leak(o.arginfo),
            usage: leak(o.usage),
            has_arg: 1,
            val: i as c_int,
            cb: Some(on_option),
        })
        .collect();
    let table = Box::leak(table.into_boxed_slice()).as_mut_ptr();
    TABLE.store(table, Ordering::Release);
    table
}

/// Runs when the dynamic loader maps the plugin, before Slurm reads its `plugin_version`:
/// Slurm refuses a SPANK plugin of another release series with a line naming only the
/// plugin's version, so this says which Slurm runs and what to install, in one line.
#[used]
#[unsafe(link_section = ".init_array")]
static CHECK_RELEASE_AT_LOAD: extern "C" fn() = check_release_at_load;

extern "C" fn check_release_at_load() {
    // Never unwinds into the loader; outside a Slurm process (no libslurm) it does nothing.
    let _ = std::panic::catch_unwind(|| {
        // SAFETY: dlsym in the global scope with a NUL-terminated name.
        let version = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"slurm_api_version".as_ptr()) };
        if version.is_null() {
            return;
        }
        // SAFETY: libslurm's `long slurm_api_version(void)`.
        let version = unsafe { std::mem::transmute::<*mut c_void, extern "C" fn() -> c_long>(version) };
        let running_api = release::api_of(version() as u32);
        if let Err(mismatch) = release::check(&wattson_slurm::slurm_version(), running_api) {
            wattson_slurm_ffi::error_at_load(&mismatch.to_string());
        }
    });
}

/// Called by Slurm in every context: parses the arguments and registers the options.
///
/// # Safety
/// Called by Slurm with its own valid handle and arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_init(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    guard("slurm_spank_init", 0, || {
        let _ = args(ac, av); // reports bad arguments once, where sbatch shows them
        let table = option_table();
        for (i, spec) in OPTIONS.iter().enumerate() {
            // SAFETY: `table` holds OPTIONS.len() leaked, initialised entries.
            let rc = unsafe { sys::spank_option_register(sp, table.add(i)) };
            if rc != sys::ESPANK_SUCCESS {
                error(&format!("wattson: cannot register --{} (error {rc})", spec.name));
            }
        }
        0
    })
}

/// Option callback: validates each value where the user typed it. Non-zero refuses the job.
extern "C" fn on_option(val: c_int, optarg: *const c_char, remote: c_int) -> c_int {
    guard("option callback", 0, || {
        let Some(spec) = OPTIONS.get(val as usize) else { return 0 };
        let value = if optarg.is_null() {
            ""
        } else {
            // SAFETY: Slurm passes the option's NUL-terminated argument.
            unsafe { CStr::from_ptr(optarg) }.to_str().unwrap_or("")
        };
        let mut hints = HINTS.lock().unwrap_or_else(|p| p.into_inner());
        match hints.get_or_insert_with(SubmitHints::default).set(spec.name, value) {
            Ok(()) => 0,
            // On the node the value was accepted at submission; never fail a job there.
            Err(_) if remote != 0 => 0,
            Err(message) => {
                error(&message);
                -1
            }
        }
    })
}

/// slurmd, as root, when the job is allocated: register it with the node's wattsond.
///
/// # Safety
/// Called by Slurm with its own valid handle and arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_job_prolog(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    guard("slurm_spank_job_prolog", 0, || {
        let args = args(ac, av);
        #[cfg(feature = "test-hooks")]
        if args.test_panic.as_deref() == Some("job_prolog") {
            panic!("test panic in job_prolog (plugin argument test_panic)");
        }
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        let mut hints = job_hints(sp).hints;
        // Set by job_submit from the job's --gpu-freq: wattson then stands aside.
        hints.gpu_freq = gpu_freq::from_prolog_env(env(gpu_freq::GPU_FREQ_VAR).as_deref());
        let job = NodeJob {
            job_id: item_u32(sp, sys::S_JOB_ID).unwrap_or(0),
            uid: item_u32(sp, sys::S_JOB_UID).unwrap_or(u32::MAX),
            user: env("SLURM_JOB_USER"),
            name: env("SLURM_JOB_NAME").or_else(|| env(wattson_slurm::submit::JOB_NAME_VAR)),
            account: env("SLURM_JOB_ACCOUNT"),
            gpus: gpus_from_env(env("SLURM_JOB_GPUS"), env("CUDA_VISIBLE_DEVICES")).unwrap_or_default(),
            hints,
            shares_gpus: sharing::from_prolog_env(|name| std::env::var(name).ok()),
        };
        let id = job.job_id;
        match node::begin(&args, job) {
            Ok(line) => info(&line),
            Err(e) => error(&format!("wattson: job {id}: not accounted: {e}")),
        }
        0
    })
}

/// slurmd, as root, when the job ends: close its record and restore its GPUs.
///
/// # Safety
/// Called by Slurm with its own valid handle and arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_job_epilog(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    guard("slurm_spank_job_epilog", 0, || {
        let Some(id) = item_u32(sp, sys::S_JOB_ID) else { return 0 };
        let has_gpus = ["SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"]
            .iter()
            .any(|v| std::env::var(v).is_ok_and(|s| !s.is_empty()));
        // A job without GPUs has a record where the scope counts the node's CPUs or the node.
        let recorded = || args(ac, av).load().is_ok_and(|c| node::records_cpu_only_jobs(&c));
        if has_gpus || recorded() {
            match node::end(&args(ac, av), id) {
                Ok(line) => info(&line),
                Err(e) => error(&format!("wattson: job {id}: end not recorded: {e}")),
            }
        }
        0
    })
}

/// slurmstepd, as the user, before tasks start: tell the job what it got.
///
/// # Safety
/// Called by Slurm with its own valid handle and arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_user_init(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    guard("slurm_spank_user_init", 0, || {
        let Some(id) = item_u32(sp, sys::S_JOB_ID) else { return 0 };
        match node::job_env(&args(ac, av), id) {
            Ok(Some(vars)) => {
                for (name, value) in vars {
                    let (name, value) =
                        (CString::new(name).unwrap_or_default(), CString::new(value).unwrap_or_default());
                    // SAFETY: valid handle from Slurm and NUL-terminated strings.
                    unsafe { sys::spank_setenv(sp, name.as_ptr(), value.as_ptr(), 1) };
                }
            }
            // A job without GPUs on this node is not known to wattsond: nothing to say.
            Ok(None) => {}
            Err(e) => error(&format!("wattson: job {id}: no energy decision in the environment: {e}")),
        }
        0
    })
}

/// The step this slurmstepd runs, where the plugin runs in a step (remote context) of a job
/// with GPUs on this node; `None` elsewhere, and for the extern step (the job's own record).
fn gpu_step(sp: spank_t) -> Option<steps::JobKey> {
    // SAFETY: no arguments; valid in every context.
    if unsafe { sys::spank_context() } != sys::S_CTX_REMOTE {
        return None;
    }
    let has_gpus = ["SLURM_STEP_GPUS", "SLURM_JOB_GPUS", "CUDA_VISIBLE_DEVICES"]
        .iter()
        .any(|v| step_env(sp, v).is_some());
    if !has_gpus {
        return None;
    }
    steps::step_key(item_u32(sp, sys::S_JOB_ID)?, item_u32(sp, sys::S_JOB_STEPID)?)
}

/// A variable of the step's environment, `None` when unset or empty.
fn step_env(sp: spank_t, name: &str) -> Option<String> {
    let name = CString::new(name).ok()?;
    let mut buf = vec![0 as c_char; 4096];
    // SAFETY: valid handle, NUL-terminated name, and a buffer of the length given.
    let rc = unsafe { sys::spank_getenv(sp, name.as_ptr(), buf.as_mut_ptr(), buf.len() as c_int) };
    if rc != sys::ESPANK_SUCCESS {
        return None;
    }
    // SAFETY: on success Slurm wrote a NUL-terminated string into `buf`.
    let value = unsafe { CStr::from_ptr(buf.as_ptr()) }.to_string_lossy().into_owned();
    (!value.is_empty()).then_some(value)
}

/// slurmstepd, as root, as a step starts (before its tasks): register the step.
///
/// # Safety
/// Called by Slurm with its own valid handle and arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_init_post_opt(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    guard("slurm_spank_init_post_opt", 0, || {
        let Some(step) = gpu_step(sp) else { return 0 };
        let uid = item_u32(sp, sys::S_JOB_UID).unwrap_or(u32::MAX);
        // Slurm's numbers of the step's GPUs; none given: the job's GPUs here.
        let slurm = step_env(sp, "SLURM_STEP_GPUS").or_else(|| step_env(sp, "SLURM_JOB_GPUS"));
        let gpus = gpus_from_env(slurm, step_env(sp, "CUDA_VISIBLE_DEVICES")).unwrap_or_default();
        match steps::begin(&args(ac, av), step.clone(), uid, &gpus) {
            Ok(Some(line)) => info(&line),
            Ok(None) => {}
            Err(e) => error(&format!("wattson: step {step}: not accounted: {e}")),
        }
        0
    })
}

/// slurmstepd, as root, as a step exits: close the step's record.
///
/// # Safety
/// Called by Slurm with its own valid handle and arguments.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn slurm_spank_exit(sp: spank_t, ac: c_int, av: *mut *mut c_char) -> c_int {
    guard("slurm_spank_exit", 0, || {
        let Some(step) = gpu_step(sp) else { return 0 };
        match steps::end(&args(ac, av), step.clone()) {
            Ok(Some(line)) => info(&line),
            Ok(None) => {}
            Err(e) => error(&format!("wattson: step {step}: end not recorded: {e}")),
        }
        0
    })
}

/// The job's hints as Slurm forwarded its options.
fn job_hints(sp: spank_t) -> SubmitHints {
    let table = option_table();
    let mut hints = SubmitHints::default();
    for (i, spec) in OPTIONS.iter().enumerate() {
        let mut value: *mut c_char = std::ptr::null_mut();
        // SAFETY: valid handle; `table.add(i)` is a registered option; Slurm owns `value`.
        let rc = unsafe { sys::spank_option_getopt(sp, table.add(i), &mut value) };
        if rc == sys::ESPANK_SUCCESS && !value.is_null() {
            // SAFETY: Slurm returned a NUL-terminated string.
            let text = unsafe { CStr::from_ptr(value) }.to_string_lossy();
            if let Err(e) = hints.set(spec.name, &text) {
                error(&format!("wattson: ignoring {e}"));
            }
        }
    }
    hints
}

fn item_u32(sp: spank_t, item: sys::spank_item) -> Option<u32> {
    let mut value: u32 = 0;
    // SAFETY: S_JOB_ID and S_JOB_UID write one uint32_t/uid_t (both 32 bits) through the pointer.
    let rc = unsafe { sys::spank_get_item(sp, item, &mut value as *mut u32) };
    (rc == sys::ESPANK_SUCCESS).then_some(value)
}
