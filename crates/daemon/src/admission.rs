//! Which unprivileged connections the socket serves now, which wait, which it refuses.
//!
//! Every user has a share of their own: their first [`RESERVED_PER_USER`] connections are
//! served at once, whatever other users hold, so a user who is not flooding the daemon (the
//! SPANK plugin asking, as the job's user, for a job's environment) never waits behind those
//! who are. Beyond it a user may have up to [`CONNECTIONS_PER_USER`] served, out of a pool
//! shared by all users; further connections wait, unread, until a place frees (a client that
//! asks too often is slowed down, not refused into a retry loop that would burn the node's
//! CPU), up to [`WAITING_PER_USER`] per user and a total for all. A freed place goes to the
//! waiting user with the fewest connections served.
//!
//! All users' connections together stay within a budget fitted to the daemon's open-files
//! limit ([`Limits::for_open_files`]), leaving root's calls and the daemon's own files their
//! room. When the budget or the waiting room is full, a user with fewer connections than the
//! heaviest takes the place of one of the heaviest user's waiting connections, which is
//! refused: no set of users can take every other user's share while the budget holds one
//! share per user.
//!
//! Owned by the accept loop; nothing here is shared.

use std::collections::{HashMap, VecDeque};

/// Connections of each user served at once, whatever other users hold.
pub const RESERVED_PER_USER: usize = 2;

/// Most connections of one unprivileged user served at once.
pub const CONNECTIONS_PER_USER: usize = 16;

/// Most connections of one user waiting to be served.
pub const WAITING_PER_USER: usize = 64;

/// Open files kept for the daemon itself: root's and SlurmUser's calls, the store, NVML,
/// `/metrics` scrapes, the controller's link.
pub const DAEMON_FILES: u64 = 512;

/// Most connections of all users together, however high the open-files limit.
pub const MAX_USER_CONNECTIONS: usize = 32_768;

/// The totals for all users together.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Connections of all users, served and waiting.
    pub total: usize,
    /// Connections served beyond each user's reserved ones.
    pub shared: usize,
    /// Connections waiting.
    pub waiting: usize,
}

impl Limits {
    /// The totals for a daemon allowed `open_files` descriptors: [`DAEMON_FILES`] kept aside,
    /// half of the rest for the users' reserved connections, a quarter each for the shared
    /// pool and the waiting room.
    pub fn for_open_files(open_files: u64) -> Limits {
        let total = (open_files.saturating_sub(DAEMON_FILES) as usize).min(MAX_USER_CONNECTIONS);
        Limits { total, shared: total / 4, waiting: total / 4 }
    }
}

/// What to do with a new connection.
#[derive(Debug)]
pub enum Admit<S> {
    /// Serve it now.
    Now(S),
    /// It waits; [`Admission::release`] hands it back when its turn comes.
    Parked,
    /// Refuse it, for this reason.
    Refused(S, String),
}

/// Served and waiting connections by uid.
#[derive(Debug)]
pub struct Admission<S> {
    limits: Limits,
    served: HashMap<u32, usize>,
    served_total: usize,
    /// Served connections beyond each user's reserved ones.
    shared_total: usize,
    waiting: HashMap<u32, VecDeque<S>>,
    waiting_total: usize,
    /// Waiting connections that gave their place to a lighter user: to refuse.
    evicted: Vec<(S, String)>,
}

impl<S> Admission<S> {
    /// No connection yet, within `limits`.
    pub fn new(limits: Limits) -> Admission<S> {
        Admission {
            limits,
            served: HashMap::new(),
            served_total: 0,
            shared_total: 0,
            waiting: HashMap::new(),
            waiting_total: 0,
            evicted: Vec::new(),
        }
    }

    fn served_of(&self, uid: u32) -> usize {
        self.served.get(&uid).copied().unwrap_or(0)
    }

    fn waiting_of(&self, uid: u32) -> usize {
        self.waiting.get(&uid).map_or(0, VecDeque::len)
    }

    /// Decides for a new connection of `uid`.
    pub fn admit(&mut self, uid: u32, conn: S) -> Admit<S> {
        let (served, waiting) = (self.served_of(uid), self.waiting_of(uid));
        let refuse = |conn| {
            Admit::Refused(
                conn,
                format!("uid {uid} has {served} connections served and {waiting} waiting; retry later"),
            )
        };
        if self.served_total + self.waiting_total >= self.limits.total && !self.evict_for(uid) {
            return refuse(conn);
        }
        if served < RESERVED_PER_USER
            || (served < CONNECTIONS_PER_USER && self.shared_total < self.limits.shared)
        {
            self.take(uid);
            return Admit::Now(conn);
        }
        if waiting >= WAITING_PER_USER || (self.waiting_total >= self.limits.waiting && !self.evict_for(uid))
        {
            return refuse(conn);
        }
        self.waiting.entry(uid).or_default().push_back(conn);
        self.waiting_total += 1;
        Admit::Parked
    }

    /// Frees a place for `uid` by evicting the newest waiting connection of the user holding
    /// the most, if that user holds more than `uid` would with this one.
    fn evict_for(&mut self, uid: u32) -> bool {
        let holds = |this: &Self, u: u32| this.served_of(u) + this.waiting_of(u);
        let mine = holds(self, uid) + 1;
        let Some(heaviest) = self.waiting.keys().copied().max_by_key(|&u| holds(self, u)) else {
            return false;
        };
        let theirs = holds(self, heaviest);
        if theirs <= mine {
            return false;
        }
        let queue = self.waiting.get_mut(&heaviest).expect("a waiting user");
        let Some(conn) = queue.pop_back() else { return false };
        if queue.is_empty() {
            self.waiting.remove(&heaviest);
        }
        self.waiting_total -= 1;
        let why = format!("uid {heaviest} holds {theirs} connections; another user's took this one's place");
        self.evicted.push((conn, why));
        true
    }

    /// Waiting connections that lost their place since the last call, with the reason.
    pub fn take_evicted(&mut self) -> Vec<(S, String)> {
        std::mem::take(&mut self.evicted)
    }

    /// A served connection of `uid` ended; returns the waiting connection to serve in its place:
    /// that of the waiting user with the fewest served, if it fits.
    pub fn release(&mut self, uid: u32) -> Option<(u32, S)> {
        if let Some(n) = self.served.get_mut(&uid) {
            if *n > RESERVED_PER_USER {
                self.shared_total -= 1;
            }
            *n -= 1;
            self.served_total -= 1;
            if *n == 0 {
                self.served.remove(&uid);
            }
        }
        let next = self.waiting.keys().copied().min_by_key(|&u| self.served_of(u))?;
        let served = self.served_of(next);
        let fits = served < RESERVED_PER_USER
            || (served < CONNECTIONS_PER_USER && self.shared_total < self.limits.shared);
        if !fits {
            return None;
        }
        let queue = self.waiting.get_mut(&next)?;
        let conn = queue.pop_front()?;
        if queue.is_empty() {
            self.waiting.remove(&next);
        }
        self.waiting_total -= 1;
        self.take(next);
        Some((next, conn))
    }

    fn take(&mut self, uid: u32) {
        let n = self.served.entry(uid).or_default();
        if *n >= RESERVED_PER_USER {
            self.shared_total += 1;
        }
        *n += 1;
        self.served_total += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { total: 1024, shared: 256, waiting: 256 };

    #[test]
    fn a_user_beyond_the_limit_waits_then_is_refused() {
        let mut a = Admission::new(LIMITS);
        for i in 0..CONNECTIONS_PER_USER {
            assert!(matches!(a.admit(1000, i), Admit::Now(_)));
        }
        for i in 0..WAITING_PER_USER {
            assert!(matches!(a.admit(1000, 100 + i), Admit::Parked));
        }
        let Admit::Refused(_, why) = a.admit(1000, 999) else { panic!() };
        assert!(why.contains("16 connections served and 64 waiting"), "{why}");
        // Another user is served meanwhile.
        assert!(matches!(a.admit(2000, 0), Admit::Now(_)));
        // Each end lets the user's first waiting connection in, in order.
        assert_eq!(a.release(1000), Some((1000, 100)));
        assert_eq!(a.release(1000), Some((1000, 101)));
        assert_eq!(a.release(2000), None);
    }

    #[test]
    fn the_open_files_limit_sets_the_totals() {
        assert_eq!(Limits::for_open_files(1024), Limits { total: 512, shared: 128, waiting: 128 });
        assert_eq!(Limits::for_open_files(100).total, 0);
        assert_eq!(Limits::for_open_files(1 << 20).total, MAX_USER_CONNECTIONS);
    }

    /// Sixteen users take the whole shared pool and waiting room: a seventeenth is served at
    /// once, and takes a waiting place from the heaviest user when it needs one.
    #[test]
    fn cooperating_users_cannot_take_another_users_share() {
        let limits = Limits::for_open_files(1024);
        let mut a = Admission::new(limits);
        for i in 0..2000 {
            let _ = a.admit(20_000 + (i % 16) as u32, i);
        }
        assert_eq!(a.shared_total, limits.shared);
        assert_eq!(a.waiting_total, limits.waiting);
        for i in 0..RESERVED_PER_USER {
            assert!(matches!(a.admit(30_000, i), Admit::Now(_)), "the newcomer's own share");
        }
        assert!(matches!(a.admit(30_000, 99), Admit::Parked), "beyond it, it waits like anyone");
        let evicted = a.take_evicted();
        assert_eq!(evicted.len(), 1);
        assert!(evicted[0].1.contains("took this one's place"), "{}", evicted[0].1);
        // A freed place goes to the waiting user with the fewest served: the newcomer.
        assert_eq!(a.release(20_000).map(|(uid, _)| uid), Some(30_000));
        assert!(a.served_total + a.waiting_total <= limits.total);
    }

    #[test]
    fn the_total_holds_and_the_heaviest_gives_way() {
        let limits = Limits { total: 40, shared: 10, waiting: 20 };
        let mut a = Admission::new(limits);
        let mut refused = 0;
        for i in 0..200 {
            if matches!(a.admit(1, i), Admit::Refused(..)) {
                refused += 1;
            }
        }
        assert_eq!(a.served_of(1) + a.waiting_of(1), 12 + 20, "2 reserved + 10 shared, 20 waiting");
        assert_eq!(refused, 200 - 32);
        // Seven more users, two connections each: 46 wanted, 40 held; uid 1 gives way.
        for uid in 2..9 {
            assert!(matches!(a.admit(uid, 0), Admit::Now(_)));
            assert!(matches!(a.admit(uid, 1), Admit::Now(_)));
        }
        assert_eq!(a.served_total + a.waiting_total, limits.total);
        assert_eq!(a.take_evicted().len(), 6, "uid 1's waiting ones made room");
        assert_eq!(a.waiting_of(1), 14);
    }
}
