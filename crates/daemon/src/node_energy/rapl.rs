//! CPU and DRAM energy from RAPL through Linux powercap: each package zone
//! (`intel-rapl:N`, named `package-N`) and its `dram` sub-zone (`intel-rapl:N:M`), read from
//! `energy_uj`, a counter that wraps to zero past `max_energy_range_uj`.

use std::path::{Path, PathBuf};

/// Energy between two readings of a counter that wraps past `range_uj`: the counter counts
/// from 0 up to below `range_uj`, then starts at 0 again. One wrap at most is seen between
/// readings (a package at 400 W takes minutes to go round a typical 262 kJ range); a
/// reading above the range (a counter that is not what it says) counts as a restart.
pub fn delta_uj(prev: u64, now: u64, range_uj: u64) -> u64 {
    if now >= prev {
        now - prev
    } else if prev < range_uj {
        range_uj - prev + now
    } else {
        now
    }
}

/// One zone's counter and what it added up to since the meter began.
#[derive(Debug)]
struct Zone {
    energy: PathBuf,
    range_uj: u64,
    last_uj: Option<u64>,
    total_uj: u128,
}

impl Zone {
    fn open(dir: &Path) -> Result<Zone, String> {
        let range_uj = read_u64(&dir.join("max_energy_range_uj"))?;
        let energy = dir.join("energy_uj");
        let last_uj = Some(read_u64(&energy)?);
        Ok(Zone { energy, range_uj, last_uj, total_uj: 0 })
    }

    /// Reads the counter and adds what it advanced. A failed read adds nothing now: the
    /// next good one covers the gap.
    fn read(&mut self) {
        let Ok(now) = read_u64(&self.energy) else { return };
        if let Some(prev) = self.last_uj {
            self.total_uj += u128::from(delta_uj(prev, now, self.range_uj));
        }
        self.last_uj = Some(now);
    }
}

/// The node's RAPL zones: its CPU packages and their DRAM.
#[derive(Debug)]
pub struct Rapl {
    packages: Vec<Zone>,
    dram: Vec<Zone>,
}

/// What the packages and the DRAM drew since the meter began, mJ (`dram_mj` `None` where
/// the packages have no `dram` zone).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RaplTotals {
    /// Every package's energy, summed.
    pub cpu_mj: f64,
    /// Every DRAM zone's energy, summed.
    pub dram_mj: Option<f64>,
}

impl Rapl {
    /// Finds the zones under `root` (Linux powercap's directory); `Ok(None)` when it has no
    /// package zone (no RAPL here), an error when a zone it has cannot be read.
    pub fn discover(root: &Path) -> Result<Option<Rapl>, String> {
        let mut packages = Vec::new();
        let mut dram = Vec::new();
        for dir in zones(root, "intel-rapl:") {
            if !name_of(&dir).starts_with("package") {
                continue;
            }
            let prefix = format!("{}:", file_name(&dir));
            packages.push(Zone::open(&dir).map_err(|e| format!("{}: {e}", dir.display()))?);
            for sub in zones(&dir, &prefix) {
                if name_of(&sub) == "dram" {
                    dram.push(Zone::open(&sub).map_err(|e| format!("{}: {e}", sub.display()))?);
                }
            }
        }
        Ok((!packages.is_empty()).then_some(Rapl { packages, dram }))
    }

    /// Reads every zone; the totals since [`Rapl::discover`].
    pub fn read(&mut self) -> RaplTotals {
        let sum = |zones: &mut Vec<Zone>| {
            zones.iter_mut().for_each(Zone::read);
            zones.iter().map(|z| z.total_uj).sum::<u128>() as f64 / 1000.0
        };
        let cpu_mj = sum(&mut self.packages);
        let dram_mj = (!self.dram.is_empty()).then(|| sum(&mut self.dram));
        RaplTotals { cpu_mj, dram_mj }
    }

    /// Whether the packages have a DRAM zone.
    pub fn has_dram(&self) -> bool {
        !self.dram.is_empty()
    }

    /// How many package and DRAM zones were found.
    pub fn zones(&self) -> (usize, usize) {
        (self.packages.len(), self.dram.len())
    }
}

/// The entries of `dir` named `prefix` followed by digits only, in order.
fn zones(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut found: Vec<(u32, PathBuf)> = entries
        .flatten()
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let n = name.strip_prefix(prefix)?.parse::<u32>().ok()?;
            Some((n, e.path()))
        })
        .collect();
    found.sort();
    found.into_iter().map(|(_, p)| p).collect()
}

fn file_name(dir: &Path) -> String {
    dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default()
}

fn name_of(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("name")).map(|n| n.trim().to_string()).unwrap_or_default()
}

/// Largest sysfs attribute read.
const MAX_ATTRIBUTE: u64 = 64;

fn read_u64(path: &Path) -> Result<u64, String> {
    use std::io::Read;
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_ATTRIBUTE).read_to_string(&mut text))
        .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    text.trim().parse().map_err(|_| format!("{}: not a counter: {:?}", path.display(), text.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_counter_that_wraps_past_its_range_counts_what_it_advanced() {
        assert_eq!(delta_uj(100, 350, 1000), 250);
        assert_eq!(delta_uj(900, 150, 1000), 250, "wrapped: 100 to the range, 150 after");
        assert_eq!(delta_uj(999, 0, 1000), 1);
        assert_eq!(delta_uj(5, 5, 1000), 0);
        assert_eq!(delta_uj(262_143_328_850 - 10, 20, 262_143_328_850), 30);
        assert_eq!(delta_uj(2000, 7, 1000), 7, "a reading beyond the range is a restart");
    }

    fn zone(dir: &Path, name: &str, range: u64, energy: u64) {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("name"), format!("{name}\n")).unwrap();
        std::fs::write(dir.join("max_energy_range_uj"), format!("{range}\n")).unwrap();
        std::fs::write(dir.join("energy_uj"), format!("{energy}\n")).unwrap();
    }

    #[test]
    fn packages_and_their_dram_are_found_and_read_through_wraps() {
        let root = tempfile::tempdir().unwrap();
        let r = root.path();
        assert!(Rapl::discover(r).unwrap().is_none(), "no zones: no RAPL");
        zone(&r.join("intel-rapl:0"), "package-0", 1_000_000, 990_000);
        zone(&r.join("intel-rapl:0/intel-rapl:0:0"), "dram", 500_000, 10);
        zone(&r.join("intel-rapl:0/intel-rapl:0:1"), "core", 500_000, 10);
        zone(&r.join("intel-rapl:1"), "package-1", 1_000_000, 0);
        zone(&r.join("intel-rapl:2"), "psys", 1_000_000, 0);
        zone(&r.join("intel-rapl-mmio:0"), "package-0", 1_000_000, 0);
        let mut rapl = Rapl::discover(r).unwrap().unwrap();
        assert_eq!(rapl.zones(), (2, 1), "packages 0 and 1, one dram; not core, psys or mmio");
        assert_eq!(rapl.read(), RaplTotals { cpu_mj: 0.0, dram_mj: Some(0.0) });
        // Package 0 wraps (10 000 µJ to the range, 5 000 after); package 1 adds 7 000.
        std::fs::write(r.join("intel-rapl:0/energy_uj"), "5000\n").unwrap();
        std::fs::write(r.join("intel-rapl:1/energy_uj"), "7000\n").unwrap();
        std::fs::write(r.join("intel-rapl:0/intel-rapl:0:0/energy_uj"), "3010\n").unwrap();
        std::fs::write(r.join("intel-rapl:0/intel-rapl:0:1/energy_uj"), "99999\n").unwrap();
        assert_eq!(rapl.read(), RaplTotals { cpu_mj: 22.0, dram_mj: Some(3.0) });
        // An unreadable counter adds nothing until it reads again, then the whole gap.
        std::fs::write(r.join("intel-rapl:1/energy_uj"), "garbage\n").unwrap();
        assert_eq!(rapl.read().cpu_mj, 22.0);
        std::fs::write(r.join("intel-rapl:1/energy_uj"), "9000\n").unwrap();
        assert_eq!(rapl.read().cpu_mj, 24.0);
        // A zone without DRAM reports none, not zero.
        let bare = tempfile::tempdir().unwrap();
        zone(&bare.path().join("intel-rapl:0"), "package-0", 1000, 0);
        assert_eq!(Rapl::discover(bare.path()).unwrap().unwrap().read().dram_mj, None);
        // A package whose counter cannot be read is an error, not zero.
        std::fs::remove_file(r.join("intel-rapl:1/energy_uj")).unwrap();
        assert!(Rapl::discover(r).unwrap_err().contains("intel-rapl:1"));
    }
}
