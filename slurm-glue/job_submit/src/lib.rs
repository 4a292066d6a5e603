//! `job_submit_wattson.so`: wattson's job_submit plugin, loaded by slurmctld. FFI only; the
//! decision is `wattson_slurm::submit::decide`.
//!
//! Validates energy hints again (API submissions bypass sbatch's SPANK plugin), applies the
//! site policy from `wattson.toml` (path in slurmctld's `WATTSON_CONFIG`, else
//! `/etc/wattson/wattson.toml`), records the decision in the job's AdminComment, and turns
//! `--energy-defer` into a later begin time when the tariff has a cheaper hour. Under a
//! `[budget]`, holds each new job for `wattson ctld` to release. No network I/O; panics are
//! caught and the job is accepted as if wattson were absent.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::path::PathBuf;
use std::sync::Mutex;

use wattson_slurm::gpu_freq;
use wattson_slurm::shards::{GpuRequest, Kept};
use wattson_slurm::submit::{self, CachedConfig, Share};
use wattson_slurm::sys::{self, job_desc_msg_t};
use wattson_slurm_ffi::{error, guard, info};

wattson_slurm_ffi::plugin_identity!(
    "wattson GPU energy decisions",
    "job_submit/wattson",
    follows_micro = "job_submit_wattson.so"
);

const SLURM_SUCCESS: c_int = sys::SLURM_SUCCESS as c_int;
const SLURM_ERROR: c_int = sys::SLURM_ERROR;

unsafe extern "C" {
    fn slurm_xstrdup(s: *const c_char) -> *mut c_char;
    fn slurm_xfree(p: *mut *mut c_void);
    fn slurm_env_array_overwrite(
        array: *mut *mut *mut c_char,
        name: *const c_char,
        value: *const c_char,
    ) -> c_int;
}

static CONFIG: Mutex<Option<CachedConfig>> = Mutex::new(None);

fn config_path() -> PathBuf {
    std::env::var_os("WATTSON_CONFIG").map(PathBuf::from).unwrap_or_else(wattson_config::locate::path)
}

/// Called when slurmctld loads the plugin.
#[unsafe(no_mangle)]
pub extern "C" fn init() -> c_int {
    guard("init", SLURM_SUCCESS, || {
        let (cached, problem) = CachedConfig::load(&config_path());
        if let Some(problem) = problem {
            error(&format!("job_submit/wattson: {problem}"));
        }
        *CONFIG.lock().unwrap_or_else(|p| p.into_inner()) = Some(cached);
        SLURM_SUCCESS
    })
}

/// Called when slurmctld unloads the plugin.
#[unsafe(no_mangle)]
pub extern "C" fn fini() -> c_int {
    SLURM_SUCCESS
}

/// Replaces a Slurm-owned string with a copy of `value` made by Slurm's allocator.
///
/// # Safety
/// `slot` must point at a string field Slurm owns (NULL or allocated by Slurm).
unsafe fn set_string(slot: *mut *mut c_char, value: &str) {
    let value = CString::new(value.replace('\0', " ")).unwrap_or_default();
    // SAFETY: per the contract, the old value was allocated by Slurm and may be freed by it.
    unsafe {
        if !(*slot).is_null() {
            slurm_xfree(slot.cast());
        }
        *slot = slurm_xstrdup(value.as_ptr());
    }
}

/// Frees a string field of Slurm's and sets it to NULL.
///
/// # Safety
/// `slot` must point to a field of a Slurm structure holding NULL or a string Slurm allocated.
unsafe fn clear_string(slot: *mut *mut c_char) {
    // SAFETY: per the contract; xfree sets the field to NULL, as does the line after it.
    unsafe {
        if !(*slot).is_null() {
            slurm_xfree(slot.cast());
        }
        *slot = std::ptr::null_mut();
    }
}

/// Sets `name=value` in the job's SPANK environment (what the nodes' SPANK options read) with
/// Slurm's own function, and keeps the array's count in step.
///
/// # Safety
/// `job` must be the job description slurmctld passed (its SPANK environment NULL or a
/// NULL-terminated array allocated by Slurm).
unsafe fn set_spank_env(job: &mut job_desc_msg_t, name: &str, value: &str) {
    let (Ok(name), Ok(value)) = (CString::new(name), CString::new(value)) else { return };
    // SAFETY: per the contract; Slurm reallocates the array and NULL-terminates it.
    unsafe {
        slurm_env_array_overwrite(&mut job.spank_job_env, name.as_ptr(), value.as_ptr());
        let mut n = 0;
        while !(*job.spank_job_env.add(n)).is_null() {
            n += 1;
        }
        job.spank_job_env_size = n as u32;
    }
}

/// A Slurm string field as text; `None` when NULL.
///
/// # Safety
/// `p` must be NULL or a NUL-terminated string.
unsafe fn text(p: *const c_char) -> Option<String> {
    // SAFETY: per the contract.
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// Slurm's default partition (slurmctld's `default_part_name`), for a job that names none;
/// `None` where slurmctld does not export it (the job then has no partition's default).
fn default_partition() -> Option<String> {
    // SAFETY: dlsym in the global scope with a NUL-terminated name.
    let slot = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"default_part_name".as_ptr()) };
    if slot.is_null() {
        return None;
    }
    // SAFETY: slurmctld's `char *default_part_name` (NULL or a NUL-terminated string), which
    // changes only under the partition write lock; slurmctld calls job_submit holding its read
    // lock.
    unsafe { text(*slot.cast::<*const c_char>()) }
}

/// `NAME=value` strings of a Slurm string array.
///
/// # Safety
/// `array` must hold `len` valid NUL-terminated strings (or be NULL).
unsafe fn strings<'a>(array: *mut *mut c_char, len: u32) -> Vec<&'a str> {
    if array.is_null() {
        return Vec::new();
    }
    (0..len as usize)
        // SAFETY: per the contract.
        .filter_map(|i| unsafe { (*array.add(i)).as_ref() }.map(|p| unsafe { CStr::from_ptr(p) }))
        .filter_map(|s| s.to_str().ok())
        .collect()
}

/// Slurm's job_submit hook: accept (possibly deferred, with the decision recorded) or refuse.
///
/// # Safety
/// Called by slurmctld with a valid job description and a valid (or NULL) message slot.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn job_submit(
    job_desc: *mut job_desc_msg_t,
    submit_uid: u32,
    err_msg: *mut *mut c_char,
) -> c_int {
    guard("job_submit", SLURM_SUCCESS, || {
        // SAFETY: slurmctld passes a valid, exclusively borrowed job description.
        let Some(job) = (unsafe { job_desc.as_mut() }) else { return SLURM_SUCCESS };
        // The job's --gpu-freq for its nodes (cleared when it set none: the variable is ours).
        // SAFETY: Slurm's NUL-terminated tres_freq, or NULL.
        let tres_freq = (!job.tres_freq.is_null())
            .then(|| unsafe { CStr::from_ptr(job.tres_freq) }.to_string_lossy().into_owned());
        let gpu_freq = tres_freq.as_deref().and_then(gpu_freq::from_tres_freq).unwrap_or_default();
        // SAFETY: Slurm's own array and count, grown by Slurm's allocator.
        unsafe { set_spank_env(job, gpu_freq::GPU_FREQ_VAR, &gpu_freq) };
        // SAFETY: Slurm's arrays with their element counts.
        let spank_env = unsafe { strings(job.spank_job_env, job.spank_job_env_size) };
        let job_env = unsafe { strings(job.environment, job.env_size) };
        #[cfg(feature = "test-hooks")]
        if !job.name.is_null() {
            // SAFETY: Slurm's NUL-terminated job name.
            wattson_slurm_ffi::test_panic_trigger(&unsafe { CStr::from_ptr(job.name) }.to_string_lossy());
        }

        let mut guard_config = CONFIG.lock().unwrap_or_else(|p| p.into_inner());
        let cached = guard_config.get_or_insert_with(|| CachedConfig::load(&config_path()).0);
        let (config, models, problem) = cached.get();
        if let Some(problem) = problem {
            error(&format!("job_submit/wattson: {problem}"));
        }
        let uid = if job.user_id == sys::NO_VAL { submit_uid } else { job.user_id };
        let user = perf_user_named(&config.policy.perf_users, uid).unwrap_or_else(|| uid.to_string());
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs() as i64)
            .unwrap_or(0);
        // SAFETY: Slurm's NUL-terminated account name, or NULL when none was given.
        let account = (!job.account.is_null())
            .then(|| unsafe { CStr::from_ptr(job.account) }.to_string_lossy().into_owned());
        // The job's partitions (else Slurm's default one) and GPU request, for GPU sharing.
        // SAFETY: Slurm's NUL-terminated strings, or NULL.
        let partition = unsafe { text(job.partition) }.or_else(default_partition).unwrap_or_default();
        let fields = [
            job.tres_per_node,
            job.tres_per_job,
            job.tres_per_task,
            job.tres_per_socket,
            job.cpus_per_tres,
            job.mem_per_tres,
            job.tres_bind,
            job.tres_freq,
        ];
        // SAFETY: as above; copied, since the rewrite frees the originals.
        let fields: Vec<Option<String>> = fields.iter().map(|p| unsafe { text(*p) }).collect();
        let shape = submit::JobShape {
            partitions: partition.split(',').map(str::trim).filter(|p| !p.is_empty()).collect(),
            gpus: GpuRequest {
                tres_per_node: fields[0].as_deref(),
                tres_per_job: fields[1].as_deref(),
                tres_per_task: fields[2].as_deref(),
                others: fields[3..].iter().map(Option::as_deref).collect(),
                min_nodes: job.min_nodes,
                max_nodes: job.max_nodes,
                num_tasks: job.num_tasks,
            },
            one_task_per_sharing: wattson_slurm::GRES_ONE_TASK_PER_SHARING.is_some(),
        };
        let decided =
            submit::decide(spank_env, job_env, uid, &user, account.as_deref(), &shape, now, config, models);
        match decided {
            Ok(decision) => {
                let mut admin_comment = decision.admin_comment;
                match &decision.share {
                    Share::Shards(rewrite) => {
                        if share_holds(config, job.priority != sys::NO_VAL) {
                            // Held (JobHeldAdmin) until `wattson ctld` decides where it runs:
                            // on a GPU of its own, or beside the job the co-location model picks.
                            job.priority = 0;
                            admin_comment.push_str(&format!(",{}", wattson_config::ctld::SHARE_HELD_MARK));
                        }
                        // SAFETY: Slurm-owned string fields, freed and set with Slurm's allocator.
                        unsafe {
                            if rewrite.tres_per_node.is_empty() {
                                clear_string(&mut job.tres_per_node);
                            } else {
                                set_string(&mut job.tres_per_node, &rewrite.tres_per_node);
                            }
                        }
                        if let (Some(per_task), Some(flag)) =
                            (&rewrite.tres_per_task, wattson_slurm::GRES_ONE_TASK_PER_SHARING)
                        {
                            // SAFETY: as above.
                            unsafe { set_string(&mut job.tres_per_task, per_task) };
                            job.bitflags |= flag;
                        }
                        if rewrite.clear_tres_per_job {
                            // SAFETY: as above.
                            unsafe { clear_string(&mut job.tres_per_job) };
                        }
                    }
                    // Nothing to enact, nothing to say: the site rewrites none, or no GPU.
                    Share::Kept(Kept::SiteRewritesNothing | Kept::NoGpu) | Share::No => {}
                    Share::Kept(kept) => info(&format!(
                        "job_submit/wattson: a job of uid {uid} opted in to GPU sharing keeps its GPU request: {kept}"
                    )),
                }
                // Whether the job asks for part of a GPU (shards, MPS), for its nodes' prolog.
                // SAFETY: Slurm's NUL-terminated TRES lists (as rewritten), or NULL.
                let asked =
                    unsafe { [text(job.tres_per_node), text(job.tres_per_task), text(job.tres_per_job)] };
                let asked: Vec<Option<&str>> = asked.iter().map(Option::as_deref).collect();
                let shares = wattson_slurm::sharing::spank_value(&asked);
                // SAFETY: Slurm's own array and count, grown by Slurm's allocator.
                unsafe { set_spank_env(job, wattson_slurm::sharing::SHARES_GPUS_VAR, shares) };
                for (name, value) in &decision.spank_options {
                    // SAFETY: Slurm's own array and count, grown by Slurm's allocator.
                    unsafe { set_spank_env(job, name, value) };
                }
                // The nodes' prolog never sees the job name (`SLURM_JOB_NAME` is not in its
                // environment); the SPANK environment reaches it, so the default tag
                // (`user:jobname`) can learn.
                if !job.name.is_null() {
                    // SAFETY: Slurm's NUL-terminated job name; its own array, grown by Slurm.
                    let name = unsafe { CStr::from_ptr(job.name) }.to_string_lossy().into_owned();
                    unsafe { set_spank_env(job, submit::JOB_NAME_VAR, &name) };
                }
                if budget_holds(config, job.priority != sys::NO_VAL) {
                    // Held (JobHeldAdmin) until `wattson ctld` finds it room under the budget.
                    job.priority = 0;
                    admin_comment.push_str(&format!(",{}", wattson_config::budget::HELD_MARK));
                }
                // SAFETY: Slurm-owned string fields of the job description.
                unsafe { set_string(&mut job.admin_comment, &admin_comment) };
                if let Some(begin) = decision.begin_time_s
                    && begin > job.begin_time
                {
                    job.begin_time = begin;
                }
                if let (Some(message), false) = (decision.message, err_msg.is_null()) {
                    // SAFETY: slurmctld passes a valid out-pointer for the message.
                    unsafe { set_string(err_msg, &message) };
                }
                SLURM_SUCCESS
            }
            Err(reason) => {
                if !err_msg.is_null() {
                    // SAFETY: as above.
                    unsafe { set_string(err_msg, &format!("wattson: {reason}")) };
                }
                SLURM_ERROR
            }
        }
    })
}

/// Whether a new job waits for the controller's release under `[budget]`
/// ([`wattson_config::budget::BudgetConfig::holds`]). A budget with a silent controller holds
/// nothing, and says so.
fn budget_holds(config: &wattson_config::Config, own_priority: bool) -> bool {
    config.budget.power_w.is_some() && controller_holds(config, "[budget] is set", own_priority)
}

/// Whether an opted-in job given shards waits for the controller's co-location decision
/// (`[ctld] share_pairs` or `share_learn`). With a silent controller it is not held, and Slurm pairs it with
/// any shard job it finds room beside; the log says so.
fn share_holds(config: &wattson_config::Config, own_priority: bool) -> bool {
    config.ctld.decides_sharing()
        && controller_holds(config, "[ctld] share_pairs or share_learn is set", own_priority)
}

/// Whether a job that asked for no priority of its own (an administrator's, `--hold`) is held
/// for the controller: only while it is live, judged by the age of its state file (one
/// `stat`). Otherwise logs why it is not (`what` is the setting that asked for the hold).
fn controller_holds(config: &wattson_config::Config, what: &str, own_priority: bool) -> bool {
    if own_priority {
        return false;
    }
    let age = std::fs::metadata(&config.ctld.state_file)
        .and_then(|m| m.modified())
        .ok()
        .and_then(|t| std::time::SystemTime::now().duration_since(t).ok());
    let live = wattson_config::budget::controller_live(age, config.ctld.interval);
    if !live {
        error(&format!(
            "job_submit/wattson: {what} but wattson ctld's {} is {}: the job is not held (fail open)",
            config.ctld.state_file.display(),
            age.map_or("missing".to_string(), |a| format!("{} s old", a.as_secs()))
        ));
    }
    live
}

/// Slurm's job_modify hook (`scontrol update`): nothing to decide; accept.
#[unsafe(no_mangle)]
pub extern "C" fn job_modify(
    _job_desc: *mut job_desc_msg_t,
    _job_ptr: *mut c_void,
    _submit_uid: u32,
    _err_msg: *mut *mut c_char,
) -> c_int {
    SLURM_SUCCESS
}

/// `perf_users` resolved to uids, redone only when the list changes: user-database lookups
/// may go over the network (LDAP), which the submit path must not do per job.
static PERF_UIDS: Mutex<PerfUids> = Mutex::new((Vec::new(), Vec::new()));

/// The `perf_users` list as configured, and the uid of each name that resolved.
type PerfUids = (Vec<String>, Vec<(u32, String)>);

/// The `perf_users` entry that names `uid`, if any.
fn perf_user_named(perf_users: &[String], uid: u32) -> Option<String> {
    let mut cache = PERF_UIDS.lock().unwrap_or_else(|p| p.into_inner());
    if cache.0 != perf_users {
        let resolved = perf_users
            .iter()
            .filter_map(|name| wattson_protocol::access::uid_of(name).map(|uid| (uid, name.clone())))
            .collect();
        *cache = (perf_users.to_vec(), resolved);
    }
    cache.1.iter().find(|(u, _)| *u == uid).map(|(_, name)| name.clone())
}
