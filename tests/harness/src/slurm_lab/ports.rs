//! Loopback ports for a lab's daemons. A port the kernel picks for `bind(0)` comes from its
//! ephemeral range, where it also picks the local ports of outgoing connections: between the
//! check and the daemon's own bind, any client (another lab's `srun`, a munge request) may
//! take it, and slurmd then dies with "Address already in use". So a lab's ports come from
//! below that range, where only a listener that asks for a port by number takes one.

use std::collections::BTreeSet;
use std::hash::{BuildHasher, RandomState};
use std::net::TcpListener;
use std::sync::Mutex;

/// The ports handed out by this process.
static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());

/// The lowest port a lab takes.
const LOWEST: u16 = 10_000;

/// The lowest port of the kernel's ephemeral range (`ip_local_port_range`; 32768 where
/// unreadable).
fn ephemeral_low() -> u16 {
    let range = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range").unwrap_or_default();
    range.split_whitespace().next().and_then(|p| p.parse().ok()).unwrap_or(32768)
}

/// A TCP port on 127.0.0.1, free now, below the kernel's ephemeral range, and never handed
/// out twice in this process; where that range leaves too few ports below it (under 1,000),
/// a free port of the range. Starts at a random port, so that two test processes seldom try
/// the same ones.
pub fn free_port() -> u16 {
    let low = ephemeral_low();
    let mut given = GIVEN.lock().unwrap_or_else(|e| e.into_inner());
    if low >= LOWEST + 1_000 {
        let span = u64::from(low - LOWEST);
        let start = RandomState::new().hash_one(std::process::id()) % span;
        for k in 0..span {
            let port = LOWEST + ((start + k) % span) as u16;
            if !given.contains(&port) && TcpListener::bind(("127.0.0.1", port)).is_ok() {
                given.insert(port);
                return port;
            }
        }
    }
    for _ in 0..100 {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = l.local_addr().expect("local_addr").port();
        if given.insert(port) {
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
        assert_eq!(ports.iter().collect::<BTreeSet<_>>().len(), ports.len(), "{ports:?}");
    }
}
