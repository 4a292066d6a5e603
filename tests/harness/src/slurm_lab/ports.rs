//! Loopback ports for a lab's daemons. A port the kernel picks for `bind(0)` comes from its
//! ephemeral range, where it also picks the local ports of outgoing connections, and it is
//! free again once checked: another test process (scripts/test-releases runs two side by
//! side) may be handed it before the daemon binds it, and slurmd then dies with "Address
//! already in use". So a lab's ports come from below that range, each reserved for the life of
//! the process by a lock on a file named after it, which no other process can take.

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::fs::File;
use std::hash::{BuildHasher, RandomState};
use std::net::TcpListener;
use std::sync::Mutex;

/// The ports handed out by this process, each with its locked file (`None`: from the
/// ephemeral range, unreserved).
static GIVEN: Mutex<BTreeMap<u16, Option<File>>> = Mutex::new(BTreeMap::new());

/// The lowest port a lab takes.
const LOWEST: u16 = 10_000;

/// The lowest port of the kernel's ephemeral range (`ip_local_port_range`; 32768 where
/// unreadable).
fn ephemeral_low() -> u16 {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    range.split_whitespace().next().and_then(|p| p.parse().ok()).unwrap_or(32768)
}

/// The lock on port `port`'s file in the temporary directory, where no other process holds
/// it: held until this process exits.
fn reserve(port: u16) -> Option<File> {
    let dir = std::env::temp_dir().join("wattson-lab-ports");
    std::fs::create_dir_all(&dir).ok()?;
    let file =
        File::options().create(true).truncate(false).write(true).open(dir.join(port.to_string())).ok()?;
    file.try_lock().ok()?;
    Some(file)
}

/// A TCP port on 127.0.0.1, free now, below the kernel's ephemeral range, reserved from other
/// processes (`reserve`) and never handed out twice in this one; where that range leaves too
/// few ports below it (under 1,000), a free port of the range. Starts at a random port.
pub fn free_port() -> u16 {
    let low = ephemeral_low();
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    if low >= LOWEST + 1_000 {
        let span = u64::from(low - LOWEST);
        let start = RandomState::new().hash_one(std::process::id()) % span;
        for k in 0..span {
            let port = LOWEST + ((start + k) % span) as u16;
            if given.contains_key(&port) {
                continue;
            }
            let Some(lock) = reserve(port) else { continue };
            if TcpListener::bind(("127.0.0.1", port)).is_ok() {
                given.insert(port, Some(lock));
                return port;
            }
        }
    }
    for _ in 0..100 {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = l.local_addr().expect("local_addr").port();
        if let Entry::Vacant(free) = given.entry(port) {
            free.insert(None);
            return port;
        }
    }
    panic!("slurm_lab: no free port found");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_come_from_below_the_ephemeral_range_and_never_twice() {
        let low = ephemeral_low();
        assert!(low >= LOWEST + 1_000, "this machine's ephemeral range starts at {low}");
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        assert!(ports.iter().all(|&p| (LOWEST..low).contains(&p)), "{ports:?}");
        assert_eq!(ports.iter().collect::<std::collections::BTreeSet<_>>().len(), ports.len(), "{ports:?}");
    }

    #[test]
    fn a_port_handed_out_is_locked_from_other_processes() {
        let port = free_port();
        let path = std::env::temp_dir().join("wattson-lab-ports").join(port.to_string());
        let script = format!("exec 9>>{}; flock -n 9 && echo held", path.display());
        // The lock is this process's: another open file description cannot take it.
        let other = std::process::Command::new("sh").args(["-c", &script]).output().unwrap();
        assert!(String::from_utf8_lossy(&other.stdout).is_empty(), "another process took port {port}'s lock");
        assert!(reserve(port).is_none(), "a second lock in this process");
    }
}
