//! GPUs that several jobs hold at once (Slurm's `gres/shard`, `gres/mps`, oversubscribed
//! partitions): every record on a GPU is advanced with the same reading, and the GPU's energy
//! over the interval is divided among the jobs on it (a job's steps get their job's part).
//!
//! The weights are each job's processes' SM utilisation from the driver's per-process figures,
//! else equal ([`wattson_types::apportion`]). A process counts only for a job of its own user (its
//! real uid is the job's owner), so a user can move energy only among their own jobs: for the
//! job named by its Slurm cgroup (`.../slurmstepd.scope/job_<id>/...` under `system.slice` or
//! the root, `/slurm/uid_<n>/job_<id>/...`), else by its environment's `SLURM_JOB_ID`, else for
//! all its user's jobs on the GPU in equal parts. A process of a user with no job on the GPU
//! counts for nobody: its part of the GPU's energy is given to no job and counted apart as the
//! GPU's unattributed energy ([`Advanced::unattributed_mj`]).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

use wattson_gpu::{GpuBackend, GpuError};
use wattson_types::apportion::{self, Split};
use wattson_types::energy::{GpuMeter, GpuReading};
use wattson_types::job::{JobKey, JobRecord};

/// Most bytes read of a process's `environ` or `cgroup` file.
const PROC_READ_LIMIT: u64 = 256 * 1024;

/// What advancing a GPU's records left to no job.
#[derive(Debug, Default, PartialEq)]
pub(crate) struct Advanced {
    /// The GPU's energy over the interval that processes of no job on it used (mJ).
    pub unattributed_mj: f64,
    /// Those processes.
    pub unattributed_pids: Vec<u32>,
}

/// Advances every record on GPU `index` with one reading of it (`Err`: the GPU did not
/// answer), dividing the GPU's energy among the jobs on it when there are several. The jobs
/// that may share it (not in `exclusive`) also gain their SM activity ([`SmActivity`]).
pub(crate) fn advance_gpu(
    running: &mut BTreeMap<JobKey, JobRecord>,
    exclusive: &BTreeSet<u32>,
    backend: &dyn GpuBackend,
    index: u32,
    reading: &Result<GpuReading, GpuError>,
    now: i64,
) -> Advanced {
    let reading = match reading {
        Ok(reading) => *reading,
        Err(_) => {
            for gpu in running.values_mut().flat_map(|r| r.gpus.iter_mut()).filter(|g| g.index == index) {
                gpu.meter.mark_lost(now);
            }
            return Advanced::default();
        }
    };
    let jobs: Vec<(u32, u32)> = jobs_on(running, index).into_iter().collect();
    let shared = jobs.len() > 1;
    // The first record's last reading and its interval to this one: the records on a GPU are
    // advanced together, so the driver's samples since then and the GPU's energy over it.
    let Some((since_ns, interval)) = running
        .values()
        .flat_map(|r| r.gpus.iter())
        .find(|g| g.index == index)
        .map(|g| (g.meter.last.t_ns, g.meter.interval_to(&reading)))
    else {
        return Advanced::default();
    };
    // A GPU in MIG mode is divided by its jobs' instances' compute slices; the driver gives
    // no per-process figures there.
    let mig = mig_weights_on(running, index, &jobs);
    let sm = if mig.is_none() && (shared || jobs.iter().any(|(job, _)| !exclusive.contains(job))) {
        sm_by_job(backend, index, u64::try_from(since_ns / 1000).unwrap_or(0), &jobs)
    } else {
        None
    };
    for record in running.values_mut().filter(|r| !exclusive.contains(&r.key.job_id)) {
        let Some(k) = jobs.iter().position(|&(job, _)| job == record.key.job_id) else { continue };
        let Some(pct) = sm.as_ref().map(|sm| sm.jobs[k].pct) else { continue };
        for gpu in record.gpus.iter_mut().filter(|g| g.index == index) {
            note_activity(&mut gpu.meter, &reading, shared, pct);
        }
    }
    if !shared {
        for gpu in running.values_mut().flat_map(|r| r.gpus.iter_mut()).filter(|g| g.index == index) {
            gpu.meter.advance(reading);
        }
        return Advanced::default();
    }
    let Some(interval) = interval else { return Advanced::default() };
    // The jobs' weights, then the unattributed processes' where there are any: the last part
    // of the GPU's energy is then no job's.
    let mut sums: Vec<Option<u64>> = match &sm {
        Some(sm) => sm.jobs.iter().map(|s| Some(s.sum)).collect(),
        None => vec![None; jobs.len()],
    };
    let nobody = sm.as_ref().filter(|sm| sm.nobody > 0);
    if let Some(sm) = nobody {
        sums.push(Some(sm.nobody));
    }
    let (weights, split) = match mig {
        Some(weights) => (weights, Split::MigSlices),
        None => apportion::weights(&sums),
    };
    let exact = interval.counter_mj.map(|mj| apportion::divide_exact(mj, &weights));
    let approx = apportion::divide(interval.mj, &weights);
    let advanced = match nobody {
        Some(sm) => Advanced {
            unattributed_mj: exact.as_ref().map_or(approx[jobs.len()], |parts| parts[jobs.len()] as f64),
            unattributed_pids: sm.nobody_pids.clone(),
        },
        None => Advanced::default(),
    };
    for record in running.values_mut() {
        let Some(k) = jobs.iter().position(|&(job, _)| job == record.key.job_id) else { continue };
        for gpu in record.gpus.iter_mut().filter(|g| g.index == index) {
            let Some(own) = gpu.meter.interval_to(&reading) else { continue };
            // A record whose last reading differs from the others' (resumed after a restart)
            // takes its job's weight of its own interval.
            let part = if own == interval {
                exact.as_ref().map_or(approx[k], |parts| parts[k] as f64)
            } else {
                apportion::divide(own.mj, &weights)[k]
            };
            gpu.meter.advance_by(reading, &own, part);
            gpu.meter.split = Some(gpu.meter.split.map_or(split, |s| Split::combine(s, split)));
        }
    }
    advanced
}

/// The jobs whose end was lost, to close as a job that holds whole GPUs (`job_id`) begins on
/// GPUs `indices`: the other jobs there that hold whole GPUs too (`exclusive`), since Slurm
/// gives such a GPU to one job at a time. Jobs that share their GPUs keep their records.
pub(crate) fn lost_ends(
    running: &BTreeMap<JobKey, JobRecord>,
    exclusive: &BTreeSet<u32>,
    job_id: u32,
    indices: &[u32],
) -> Vec<JobKey> {
    let jobs: BTreeSet<u32> = indices
        .iter()
        .flat_map(|&i| jobs_on(running, i))
        .map(|(job, _)| job)
        .filter(|job| *job != job_id && exclusive.contains(job))
        .collect();
    jobs.into_iter().map(JobKey::job).filter(|key| running.contains_key(key)).collect()
}

/// The weights of `jobs` (those on GPU `index`, in order) by the compute slices of the MIG
/// instances each holds there ([`apportion::mig_weights`]; a job's record of the whole job,
/// else its first step's); `None` unless every one holds some.
fn mig_weights_on(
    running: &BTreeMap<JobKey, JobRecord>,
    index: u32,
    jobs: &[(u32, u32)],
) -> Option<Vec<u64>> {
    let held: Vec<&[wattson_types::gpu::MigInstance]> = jobs
        .iter()
        .map(|&(job, _)| {
            running
                .values()
                .filter(|r| r.key.job_id == job)
                .flat_map(|r| r.gpus.iter())
                .find(|g| g.index == index)
                .map_or(&[][..], |g| &g.meter.mig[..])
        })
        .collect();
    apportion::mig_weights(&held)
}

/// The jobs (id, owner uid) with a record on GPU `index`.
pub(crate) fn jobs_on(running: &BTreeMap<JobKey, JobRecord>, index: u32) -> BTreeSet<(u32, u32)> {
    running
        .values()
        .filter(|r| r.gpus.iter().any(|g| g.index == index))
        .map(|r| (r.key.job_id, r.uid))
        .collect()
}

/// One job's SM utilisation on a GPU over an interval, from its processes' samples.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct JobSm {
    /// Every sample's SM %, summed (the weight its energy share is divided by).
    sum: u64,
    /// Each process's mean SM %, summed: the job's share of the SMs, in percent.
    pct: f64,
}

/// The SM utilisation on a GPU over an interval, by job.
#[derive(Debug, Default, PartialEq)]
struct SmByJob {
    /// Each job's (in the order of the jobs on the GPU).
    jobs: Vec<JobSm>,
    /// Every sample's SM % of the processes of no job on the GPU, summed.
    nobody: u64,
    /// Those processes.
    nobody_pids: Vec<u32>,
}

/// The SM utilisation on the GPU since `since_us`, by job; `None` where the driver gives no
/// per-process figures.
fn sm_by_job(backend: &dyn GpuBackend, index: u32, since_us: u64, jobs: &[(u32, u32)]) -> Option<SmByJob> {
    let samples = backend.process_utilization(index, since_us).ok()?;
    // Per process: the sum of its samples and how many.
    let mut by_pid: BTreeMap<u32, (u64, u32)> = BTreeMap::new();
    for (pid, sm) in samples {
        let entry = by_pid.entry(pid).or_default();
        entry.0 += u64::from(sm.min(100));
        entry.1 += 1;
    }
    let mut out = SmByJob { jobs: vec![JobSm::default(); jobs.len()], ..SmByJob::default() };
    for (pid, (sum, n)) in by_pid {
        let owners = jobs_of_process(pid, jobs);
        if owners.is_empty() {
            out.nobody += sum;
            out.nobody_pids.push(pid);
            continue;
        }
        // Several jobs of the process's user: equal parts, the odd units to the first.
        let each = sum / owners.len() as u64;
        for (i, &k) in owners.iter().enumerate() {
            out.jobs[k].sum += if i == 0 { sum - each * (owners.len() as u64 - 1) } else { each };
            out.jobs[k].pct += sum as f64 / f64::from(n) / owners.len() as f64;
        }
    }
    Some(out)
}

/// Adds a job's SM activity over the interval from its meter's last reading to `reading`:
/// `pct` percent of the SMs at the reading's clock, alone or beside another job (`shared`).
/// An interval in which its processes left the SMs idle says nothing of its pace.
fn note_activity(meter: &mut GpuMeter, reading: &GpuReading, shared: bool, pct: f64) {
    let secs = (reading.t_ns - meter.last.t_ns) as f64 / 1e9;
    let clock = f64::from(reading.sm_clock_mhz.unwrap_or(0));
    if secs > 0.0 && pct > 0.0 && clock > 0.0 {
        meter.sm.get_or_insert_default().add(shared, secs, pct.min(100.0) / 100.0 * clock * secs);
    }
}

/// Which of `jobs` (id, owner uid) process `pid` works for, by their places in `jobs`: one job,
/// several of its user's (their parts equal), or none (a process of no job's owner, or gone).
fn jobs_of_process(pid: u32, jobs: &[(u32, u32)]) -> Vec<usize> {
    jobs_of_process_in(&std::path::Path::new("/proc").join(pid.to_string()), jobs)
}

/// [`jobs_of_process`] for the process whose `/proc` directory is `proc_dir`.
fn jobs_of_process_in(proc_dir: &std::path::Path, jobs: &[(u32, u32)]) -> Vec<usize> {
    let Some(uid) = read_limited(&proc_dir.join("status")).and_then(|text| real_uid(&text)) else {
        return Vec::new();
    };
    let own: Vec<usize> = (0..jobs.len()).filter(|&k| jobs[k].1 == uid).collect();
    if own.is_empty() {
        return own;
    }
    // A job the process names (its Slurm cgroup first) counts only if it is its user's.
    let named = [
        read_limited(&proc_dir.join("cgroup")).and_then(|text| cgroup_job(&text)),
        read_limited(&proc_dir.join("environ")).and_then(|text| environ_job(&text)),
    ];
    match named.into_iter().flatten().find_map(|job| own.iter().find(|&&k| jobs[k].0 == job)) {
        Some(&k) => vec![k],
        None => own,
    }
}

fn read_limited(path: &std::path::Path) -> Option<String> {
    let mut text = Vec::new();
    std::fs::File::open(path).ok()?.take(PROC_READ_LIMIT).read_to_end(&mut text).ok()?;
    Some(String::from_utf8_lossy(&text).into_owned())
}

/// The job of a Slurm cgroup path in `/proc/<pid>/cgroup`: a `job_<id>` directory in Slurm's
/// own tree (`/system.slice/slurmstepd.scope/job_42/...` or `/slurmstepd.scope/job_42/...` on
/// cgroup v2, `/slurm/uid_1000/job_42/...` on v1; a node of several slurmd's prefixes the scope
/// or `slurm` with its name). A `job_<id>` anywhere else (a container's, a CI runner's, or one a
/// user made in a cgroup tree delegated to them) is not Slurm's.
fn cgroup_job(text: &str) -> Option<u32> {
    text.lines().filter_map(|line| line.splitn(3, ':').nth(2)).find_map(|path| {
        let parts: Vec<&str> = path.split('/').skip(1).collect();
        let job = match parts.as_slice() {
            ["system.slice", scope, job, ..] | [scope, job, ..] if scope.ends_with("slurmstepd.scope") => job,
            [slurm, uid, job, ..]
                if (*slurm == "slurm" || slurm.starts_with("slurm_"))
                    && uid.strip_prefix("uid_").is_some_and(|uid| uid.parse::<u32>().is_ok()) =>
            {
                job
            }
            _ => return None,
        };
        job.strip_prefix("job_")?.parse().ok()
    })
}

/// `SLURM_JOB_ID` in a NUL-separated environment.
fn environ_job(text: &str) -> Option<u32> {
    text.split('\0').find_map(|var| var.strip_prefix("SLURM_JOB_ID=")?.parse().ok())
}

/// The real uid in `/proc/<pid>/status`.
fn real_uid(text: &str) -> Option<u32> {
    text.lines().find_map(|line| line.strip_prefix("Uid:")?.split_whitespace().next()?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;
    use wattson_gpu::{GpuInfo, GpuSettings};
    use wattson_types::job::{JobGpu, JobState};

    /// A backend that is never called for readings: the tests hand them in.
    struct NoGpus;

    impl GpuBackend for NoGpus {
        fn devices(&self) -> &[GpuInfo] {
            &[]
        }
        fn read(&self, _: u32) -> Result<GpuReading, GpuError> {
            Err(GpuError::NotSupported)
        }
        fn settings(&self, _: u32) -> Result<GpuSettings, GpuError> {
            Err(GpuError::NotSupported)
        }
        fn compute_processes(&self, _: u32) -> Result<Vec<u32>, GpuError> {
            Ok(Vec::new())
        }
        fn set_power_limit(&self, _: u32, _: u32) -> Result<(), GpuError> {
            Ok(())
        }
        fn set_locked_clocks(&self, _: u32, _: u32, _: u32) -> Result<(), GpuError> {
            Ok(())
        }
        fn reset_locked_clocks(&self, _: u32) -> Result<(), GpuError> {
            Ok(())
        }
    }

    fn reading(t_ns: i64, energy_mj: u64) -> GpuReading {
        GpuReading { t_ns, energy_mj: Some(energy_mj), ..GpuReading::default() }
    }

    fn record(key: JobKey, last: GpuReading) -> JobRecord {
        JobRecord {
            key,
            uid: 0,
            user: None,
            name: None,
            node: "n1".into(),
            begin_ns: last.t_ns,
            end_ns: None,
            state: JobState::Running,
            hints: Default::default(),
            policy: None,
            gpus: vec![JobGpu {
                index: 0,
                uuid: String::new(),
                name: String::new(),
                meter: GpuMeter::begin(last),
            }],
            dvfs: None,
            node_share: None,
        }
    }

    #[test]
    fn each_record_of_a_lone_job_advances_by_its_own_last_reading() {
        // Job 7's record read the GPU last at 200 s, its step's at 100 s (resumed after a
        // restart): a reading taken at 150 s is late for the one, new for the other.
        let s = 1_000_000_000;
        let step = JobKey { job_id: 7, step: "0".into() };
        let mut running = BTreeMap::from([
            (JobKey::job(7), record(JobKey::job(7), reading(200 * s, 20_000))),
            (step.clone(), record(step.clone(), reading(100 * s, 10_000))),
        ]);
        advance_gpu(&mut running, &BTreeSet::from([7]), &NoGpus, 0, &Ok(reading(150 * s, 15_000)), 150 * s);
        assert_eq!(running[&JobKey::job(7)].gpus[0].meter.last.t_ns, 200 * s, "a late reading is ignored");
        let meter = &running[&step].gpus[0].meter;
        assert_eq!((meter.last.t_ns, meter.energy_mj), (150 * s, 5_000.0));
    }

    #[test]
    fn processes_are_placed_by_their_slurm_cgroup_or_environment() {
        let v2 = "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n";
        assert_eq!(cgroup_job(v2), Some(4242));
        assert_eq!(cgroup_job("0::/slurmstepd.scope/job_5/step_0\n"), Some(5), "slurmd outside systemd");
        let v1 = "12:devices:/slurm/uid_1000/job_17/step_batch\n4:cpu:/\n";
        assert_eq!(cgroup_job(v1), Some(17));
        assert_eq!(cgroup_job("3:cpuset:/slurm_node7/uid_0/job_18/step_0\n"), Some(18));
        assert_eq!(cgroup_job("0::/user.slice/job_x\n"), None);
        assert_eq!(environ_job("A=1\0SLURM_JOB_ID=99\0B=2"), Some(99));
        assert_eq!(environ_job("SLURM_JOB_IDX=5"), None);
        assert_eq!(real_uid("Name:\tx\nUid:\t1000\t1000\t1000\t1000\n"), Some(1000));
    }

    #[test]
    fn a_job_directory_outside_slurms_cgroups_is_not_a_job() {
        assert_eq!(cgroup_job("0::/runner/job_12345/build\n"), None);
        assert_eq!(cgroup_job("4:memory:/process_api/job_9\n0::/\n"), None);
        let many = "0::/system.slice/node7_slurmstepd.scope/job_31/step_batch/user/task_0\n";
        assert_eq!(cgroup_job(many), Some(31), "a node of several slurmd's names its scope");
        // A user's delegated tree (systemd `Delegate=yes`) may hold any name the user likes.
        let delegated =
            "0::/user.slice/user-1001.slice/user@1001.service/app.slice/slurmstepd.scope/job_40\n";
        assert_eq!(cgroup_job(delegated), None);
        assert_eq!(cgroup_job("0::/user.slice/uid_1001/job_40\n"), None);
        assert_eq!(cgroup_job("5:pids:/user.slice/slurm/uid_1001/job_40\n"), None);
    }

    /// A `/proc/<pid>` directory with the files the daemon reads.
    fn fake_proc(cgroup: &str, uid: u32, environ: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("cgroup"), cgroup).unwrap();
        std::fs::write(dir.path().join("status"), format!("Name:\tx\nUid:\t{uid}\t{uid}\t{uid}\t{uid}\n"))
            .unwrap();
        std::fs::write(dir.path().join("environ"), environ).unwrap();
        dir
    }

    #[test]
    fn a_process_claims_a_job_by_its_environment_only_as_the_jobs_owner() {
        let outside = "0::/user.slice/user-1000.slice/session-3.scope\n";
        let proc = fake_proc(outside, 1000, "HOME=/x\0SLURM_JOB_ID=77\0");
        assert_eq!(jobs_of_process_in(proc.path(), &[(76, 1000), (77, 1000)]), vec![1]);
        assert_eq!(jobs_of_process_in(proc.path(), &[(77, 1001)]), Vec::<usize>::new(), "another user's job");
        // Slurm's cgroup outranks the environment, whoever wrote it.
        let inside = "0::/system.slice/slurmstepd.scope/job_76/step_0/user/task_0\n";
        let proc = fake_proc(inside, 1000, "SLURM_JOB_ID=77\0");
        assert_eq!(jobs_of_process_in(proc.path(), &[(76, 1000), (77, 1000)]), vec![0]);
    }

    #[test]
    fn a_process_counts_for_its_own_users_jobs_whatever_job_it_names() {
        let honest = (40, 1000);
        let cheat = (41, 1001);
        let outside = "0::/user.slice/user-1001.slice/session-3.scope\n";
        // Naming the other user's job, or none, a process still works for its own user's job.
        for environ in ["SLURM_JOB_ID=40\0", "HOME=/x\0"] {
            let proc = fake_proc(outside, 1001, environ);
            assert_eq!(jobs_of_process_in(proc.path(), &[honest, cheat]), vec![1], "{environ:?}");
        }
        // So does one in a cgroup named like Slurm's in the user's delegated tree, or in Slurm's
        // own tree under another user's job.
        for cgroup in [
            "0::/user.slice/user-1001.slice/user@1001.service/app.slice/slurmstepd.scope/job_40\n",
            "0::/system.slice/slurmstepd.scope/job_40/step_0\n",
        ] {
            let proc = fake_proc(cgroup, 1001, "SLURM_JOB_ID=40\0");
            assert_eq!(jobs_of_process_in(proc.path(), &[honest, cheat]), vec![1], "{cgroup}");
        }
        // A process of a user with two jobs on the GPU that names neither counts for both.
        let proc = fake_proc(outside, 1001, "");
        assert_eq!(jobs_of_process_in(proc.path(), &[honest, cheat, (42, 1001)]), vec![1, 2]);
        // A process of a user with no job on the GPU counts for nobody.
        let proc = fake_proc(outside, 1002, "SLURM_JOB_ID=40\0");
        assert_eq!(jobs_of_process_in(proc.path(), &[honest, cheat]), Vec::<usize>::new());
    }

    #[test]
    fn a_live_process_is_read_from_proc_and_a_gone_one_is_nobodys() {
        let mut child =
            std::process::Command::new("sleep").arg("30").env("SLURM_JOB_ID", "77").spawn().unwrap();
        let dir = std::path::Path::new("/proc").join(child.id().to_string());
        // SAFETY: getuid has no preconditions.
        let me = unsafe { libc::getuid() };
        assert_eq!(read_limited(&dir.join("status")).and_then(|t| real_uid(&t)), Some(me));
        // The parent resumes while exec is still setting up the new environment, which reads
        // empty for that moment.
        let mut environ = None;
        for _ in 0..200 {
            environ = read_limited(&dir.join("environ")).and_then(|t| environ_job(&t));
            if environ.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(environ, Some(77));
        let pid = child.id();
        let _ = child.kill();
        let _ = child.wait();
        assert_eq!(jobs_of_process(pid, &[(77, me)]), Vec::<usize>::new(), "a process that is gone");
    }
}
