//! A CPU node's meters for tests, written by the test: a powercap tree of RAPL zones whose
//! counters the test advances (wrapping past their range as the kernel's do), and Slurm's
//! cgroup v1 tree of job CPU times. The test knows the truth of both: it wrote them.

use std::path::{Path, PathBuf};

/// One RAPL zone (`intel-rapl:N` or its `dram` sub-zone): its counter, its range, and what the
/// test made it count (µJ).
pub struct RaplZone {
    dir: PathBuf,
    range_uj: u64,
    counter_uj: u64,
    /// Every µJ the test has made the zone count.
    pub truth_uj: u64,
}

impl RaplZone {
    /// A zone named `name` (`package-0`, `dram`) at `dir`, its counter starting at `counter_uj`
    /// of `range_uj`.
    pub fn new(dir: PathBuf, name: &str, range_uj: u64, counter_uj: u64) -> RaplZone {
        std::fs::create_dir_all(&dir).expect("zone directory");
        std::fs::write(dir.join("name"), format!("{name}\n")).expect("zone name");
        std::fs::write(dir.join("max_energy_range_uj"), format!("{range_uj}\n")).expect("zone range");
        let zone = RaplZone { dir, range_uj, counter_uj, truth_uj: 0 };
        zone.publish();
        zone
    }

    /// Counts `uj` more.
    pub fn advance(&mut self, uj: u64) {
        self.counter_uj = (self.counter_uj + uj) % self.range_uj;
        self.truth_uj += uj;
        self.publish();
    }

    /// Writes the counter whole (a rename: a reader never sees half a number).
    fn publish(&self) {
        let tmp = self.dir.join("energy_uj.new");
        std::fs::write(&tmp, format!("{}\n", self.counter_uj)).expect("write the counter");
        std::fs::rename(&tmp, self.dir.join("energy_uj")).expect("publish the counter");
    }
}

/// A powercap tree with one package (its counter 1 kJ below its range, so it wraps soon) and
/// its DRAM zone: `[package, dram]`.
pub fn rapl(root: &Path) -> [RaplZone; 2] {
    [
        RaplZone::new(root.join("intel-rapl:0"), "package-0", 262_143_328_850, 262_142_328_850),
        RaplZone::new(root.join("intel-rapl:0/intel-rapl:0:0"), "dram", 65_712_999_613, 1_000),
    ]
}

/// Slurm's cgroup v1 tree under a cgroup root: `cpuacct/slurm/uid_<uid>/job_<id>/cpuacct.usage`.
pub struct JobCgroupsV1 {
    root: PathBuf,
}

impl JobCgroupsV1 {
    /// The tree under `root` (made as Slurm makes it, empty).
    pub fn new(root: &Path) -> JobCgroupsV1 {
        std::fs::create_dir_all(root.join("cpuacct/slurm")).expect("cgroup tree");
        JobCgroupsV1 { root: root.to_path_buf() }
    }

    /// Sets job `job`'s CPU time (ns), making its cgroup if need be.
    pub fn set(&self, uid: u32, job: u32, cpu_ns: u64) {
        let dir = self.root.join(format!("cpuacct/slurm/uid_{uid}/job_{job}"));
        std::fs::create_dir_all(&dir).expect("job cgroup");
        let tmp = dir.join("cpuacct.usage.new");
        std::fs::write(&tmp, format!("{cpu_ns}\n")).expect("write the CPU time");
        std::fs::rename(&tmp, dir.join("cpuacct.usage")).expect("publish the CPU time");
    }

    /// Removes job `job`'s cgroup, as Slurm does when the job ends.
    pub fn remove(&self, uid: u32, job: u32) {
        let _ = std::fs::remove_dir_all(self.root.join(format!("cpuacct/slurm/uid_{uid}/job_{job}")));
    }
}
