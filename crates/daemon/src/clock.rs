//! Time as the daemon sees it: wall time for what is recorded, monotonic time for how long
//! things take. A seam, so the state machine's tests run on time they control.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::{Duration, Instant};

/// A source of wall and monotonic time.
pub trait Clock: Send + Sync {
    /// Nanoseconds since the Unix epoch (records: job begin and end, journal entries).
    fn wall_ns(&self) -> i64;
    /// Time since an arbitrary fixed origin that never goes back (durations and deadlines).
    fn monotonic(&self) -> Duration;
}

/// The system's clocks.
#[derive(Debug)]
pub struct SystemClock {
    origin: Instant,
}

impl SystemClock {
    /// The system clock, shared.
    pub fn shared() -> Arc<dyn Clock> {
        Arc::new(SystemClock { origin: Instant::now() })
    }
}

impl Clock for SystemClock {
    fn wall_ns(&self) -> i64 {
        wattson_types::now_ns()
    }

    fn monotonic(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// A clock that moves only when told to (tests). Its wall time can also be stepped on its
/// own, as an administrator or NTP would, without moving the monotonic time.
#[derive(Debug, Default)]
pub struct ManualClock {
    mono_ns: AtomicI64,
    wall_offset_ns: AtomicI64,
}

impl ManualClock {
    /// A clock at `wall_ns`.
    pub fn at(wall_ns: i64) -> Arc<ManualClock> {
        Arc::new(ManualClock { mono_ns: AtomicI64::new(wall_ns), wall_offset_ns: AtomicI64::new(0) })
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.mono_ns.fetch_add(by.as_nanos() as i64, Ordering::SeqCst);
    }

    /// Steps the wall time alone by `by_ns` (negative: back).
    pub fn step_wall(&self, by_ns: i64) {
        self.wall_offset_ns.fetch_add(by_ns, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn wall_ns(&self) -> i64 {
        self.mono_ns.load(Ordering::SeqCst) + self.wall_offset_ns.load(Ordering::SeqCst)
    }

    fn monotonic(&self) -> Duration {
        Duration::from_nanos(self.mono_ns.load(Ordering::SeqCst).max(0) as u64)
    }
}
