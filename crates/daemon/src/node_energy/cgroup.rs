//! Each job's CPU time from its Slurm cgroup, the weight by which the node's CPU, DRAM and
//! whole-node energy is divided among jobs running at once (`[energy] split = "cpu-time"`).
//!
//! Slurm's `task/cgroup` and `proctrack/cgroup` put every process of a job into one cgroup per
//! job: on cgroup v1 `cpuacct/slurm/uid_<uid>/job_<id>` (its `cpuacct.usage`, ns), on v2
//! `system.slice/slurmstepd.scope/job_<id>` (its `cpu.stat`'s `usage_usec`). A node of several
//! slurmd's (`--enable-multiple-slurmd`) names its tree after the node (`slurm_<node>`,
//! `<node>_slurmstepd.scope`). The paths are built from numbers and a checked node name only;
//! the files are opened without following links and without blocking, and read up to a small
//! limit: a job's cgroup may be its user's to change.

use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

/// Most bytes read of a cgroup's CPU file (`cpu.stat` is a few lines).
const MAX_READ: u64 = 4096;

/// Where Slurm's job cgroups hold a job's CPU time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// cgroup v1: `<base>/uid_<uid>/job_<id>/cpuacct.usage`, ns.
    V1,
    /// cgroup v2: `<base>/job_<id>/cpu.stat`, `usage_usec`.
    V2,
}

/// The job cgroups of Slurm on this node, under a cgroup filesystem's root.
#[derive(Debug, Clone)]
pub struct JobCgroups {
    /// Each place Slurm may keep its job cgroups, in the order they are tried.
    bases: Vec<(Layout, PathBuf)>,
}

impl JobCgroups {
    /// Slurm's job cgroups under `root` (`/sys/fs/cgroup`), for node `node` (its tree on a
    /// node of several slurmd's; a name that could leave the tree is not used).
    pub fn new(root: &Path, node: &str) -> JobCgroups {
        let mut bases = Vec::new();
        let node = safe_name(node);
        for controller in ["cpuacct", "cpu,cpuacct"] {
            bases.push((Layout::V1, root.join(controller).join("slurm")));
            if let Some(node) = node {
                bases.push((Layout::V1, root.join(controller).join(format!("slurm_{node}"))));
            }
        }
        for parent in [root.join("system.slice"), root.to_path_buf()] {
            bases.push((Layout::V2, parent.join("slurmstepd.scope")));
            if let Some(node) = node {
                bases.push((Layout::V2, parent.join(format!("{node}_slurmstepd.scope"))));
            }
        }
        JobCgroups { bases }
    }

    /// Job `job_id`'s CPU time so far (ns), from the first of Slurm's trees that has its
    /// cgroup; `None` where none has it (not made yet, gone, or no cgroups here) or its file
    /// cannot be read as a CPU time.
    pub fn cpu_ns(&self, uid: u32, job_id: u32) -> Option<u64> {
        self.bases.iter().find_map(|(layout, base)| match layout {
            Layout::V1 => {
                let path =
                    base.join(format!("uid_{uid}")).join(format!("job_{job_id}")).join("cpuacct.usage");
                read_small(&path)?.trim().parse().ok()
            }
            Layout::V2 => {
                let path = base.join(format!("job_{job_id}")).join("cpu.stat");
                usage_usec(&read_small(&path)?)?.checked_mul(1000)
            }
        })
    }

    /// The tree where Slurm keeps its job cgroups on this node, if one exists yet (Slurm
    /// makes it with the first job, or at slurmd's start).
    pub fn found(&self) -> Option<(Layout, &Path)> {
        self.bases.iter().find(|(_, base)| base.is_dir()).map(|(layout, base)| (*layout, base.as_path()))
    }
}

/// `usage_usec` of a cgroup v2 `cpu.stat`.
fn usage_usec(stat: &str) -> Option<u64> {
    stat.lines().find_map(|line| line.strip_prefix("usage_usec ")).and_then(|v| v.trim().parse().ok())
}

/// A node name fit to be part of a directory's name: letters, digits, `.`, `_`, `-`, not
/// starting with a dot.
fn safe_name(node: &str) -> Option<&str> {
    let fits = !node.is_empty()
        && node.len() <= 64
        && !node.starts_with('.')
        && node.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'));
    fits.then_some(node)
}

/// Reads a regular file of at most [`MAX_READ`] bytes without following a link at its end or
/// waiting on it (a FIFO put in its place is refused, not waited on).
fn read_small(path: &Path) -> Option<String> {
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path)
        .ok()?;
    if !file.metadata().ok()?.file_type().is_file() {
        return None;
    }
    let mut text = String::new();
    file.take(MAX_READ).read_to_string(&mut text).ok()?;
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn a_jobs_cpu_time_is_read_from_slurms_v1_tree() {
        let root = tempfile::tempdir().unwrap();
        let cgroups = JobCgroups::new(root.path(), "n1");
        assert_eq!(cgroups.found(), None);
        assert_eq!(cgroups.cpu_ns(1000, 42), None, "no cgroup yet");
        write(&root.path().join("cpuacct/slurm/uid_1000/job_42/cpuacct.usage"), "1234567890\n");
        assert_eq!(cgroups.cpu_ns(1000, 42), Some(1_234_567_890));
        assert_eq!(cgroups.cpu_ns(1001, 42), None, "another user's job 42 is not this one");
        assert_eq!(cgroups.found(), Some((Layout::V1, root.path().join("cpuacct/slurm").as_path())));
        // Where cpu and cpuacct are mounted together, and on a node of several slurmd's.
        write(&root.path().join("cpu,cpuacct/slurm/uid_0/job_7/cpuacct.usage"), "5\n");
        assert_eq!(cgroups.cpu_ns(0, 7), Some(5));
        write(&root.path().join("cpuacct/slurm_n1/uid_0/job_8/cpuacct.usage"), "6\n");
        assert_eq!(cgroups.cpu_ns(0, 8), Some(6));
        assert_eq!(JobCgroups::new(root.path(), "n2").cpu_ns(0, 8), None, "another node's tree");
        write(&root.path().join("cpuacct/slurm/uid_0/job_9/cpuacct.usage"), "not a number\n");
        assert_eq!(cgroups.cpu_ns(0, 9), None);
    }

    #[test]
    fn a_jobs_cpu_time_is_read_from_slurms_v2_tree() {
        let root = tempfile::tempdir().unwrap();
        let cgroups = JobCgroups::new(root.path(), "gpu01");
        let stat = "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\nnr_periods 0\n";
        write(&root.path().join("system.slice/slurmstepd.scope/job_42/cpu.stat"), stat);
        assert_eq!(cgroups.cpu_ns(1000, 42), Some(2_500_000_000), "µs to ns; the uid is not in v2's path");
        assert_eq!(cgroups.found().map(|(l, _)| l), Some(Layout::V2));
        // slurmd outside systemd, and a node of several slurmd's.
        write(&root.path().join("slurmstepd.scope/job_43/cpu.stat"), "usage_usec 7\n");
        assert_eq!(cgroups.cpu_ns(0, 43), Some(7000));
        write(&root.path().join("system.slice/gpu01_slurmstepd.scope/job_44/cpu.stat"), "usage_usec 8\n");
        assert_eq!(cgroups.cpu_ns(0, 44), Some(8000));
        write(&root.path().join("system.slice/slurmstepd.scope/job_45/cpu.stat"), "user_usec 8\n");
        assert_eq!(cgroups.cpu_ns(0, 45), None, "no usage_usec: not a CPU time");
    }

    #[test]
    fn hostile_names_links_and_fifos_are_not_read() {
        let root = tempfile::tempdir().unwrap();
        let secret = root.path().join("secret");
        std::fs::write(&secret, "99\n").unwrap();
        // A node name that would leave the tree is not used for the per-node trees.
        for node in ["../..", "", ".hidden", "a/b", "n1;rm"] {
            assert!(safe_name(node).is_none(), "{node:?}");
        }
        let cgroups = JobCgroups::new(root.path(), "../x");
        assert!(
            cgroups.bases.iter().all(|(_, b)| !b.to_string_lossy().contains("..")),
            "{:?}",
            cgroups.bases
        );
        // A link in place of the file is not followed.
        let job = root.path().join("cpuacct/slurm/uid_0/job_1");
        std::fs::create_dir_all(&job).unwrap();
        std::os::unix::fs::symlink(&secret, job.join("cpuacct.usage")).unwrap();
        assert_eq!(cgroups.cpu_ns(0, 1), None);
        // A FIFO is refused at once, not waited on.
        let job = root.path().join("cpuacct/slurm/uid_0/job_2");
        std::fs::create_dir_all(&job).unwrap();
        let fifo = std::ffi::CString::new(job.join("cpuacct.usage").to_str().unwrap()).unwrap();
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let started = std::time::Instant::now();
        assert_eq!(cgroups.cpu_ns(0, 2), None);
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
        // A huge file is read only up to the limit (and so is no number).
        write(&root.path().join("cpuacct/slurm/uid_0/job_3/cpuacct.usage"), &"1".repeat(10_000));
        assert_eq!(cgroups.cpu_ns(0, 3), None);
    }
}
