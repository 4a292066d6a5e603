//! Which unprivileged connections the socket serves now, which wait, which it refuses.
//!
//! Each user may have [`CONNECTIONS_PER_USER`] connections served at once and all users
//! together [`USER_CONNECTIONS`]. Beyond that a connection waits, unread, until one of its
//! user's connections ends: a client that asks too often is slowed down, not refused into a
//! retry loop that would burn the node's CPU. Only beyond [`WAITING_PER_USER`] waiting
//! connections (or [`WAITING`] in all) is a connection refused. So one user holds at most
//! `CONNECTIONS_PER_USER + WAITING_PER_USER` of the daemon's file descriptors.
//!
//! Owned by the accept loop; nothing here is shared.

use std::collections::{HashMap, VecDeque};

/// Most connections of one unprivileged user served at once.
pub const CONNECTIONS_PER_USER: usize = 16;

/// Most connections of all unprivileged users served at once.
pub const USER_CONNECTIONS: usize = 256;

/// Most connections of one user waiting to be served.
pub const WAITING_PER_USER: usize = 64;

/// Most connections of all users waiting to be served.
pub const WAITING: usize = 1024;

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
    served: HashMap<u32, usize>,
    served_total: usize,
    waiting: HashMap<u32, VecDeque<S>>,
    waiting_total: usize,
}

impl<S> Default for Admission<S> {
    fn default() -> Self {
        Admission { served: HashMap::new(), served_total: 0, waiting: HashMap::new(), waiting_total: 0 }
    }
}

impl<S> Admission<S> {
    /// Decides for a new connection of `uid`.
    pub fn admit(&mut self, uid: u32, conn: S) -> Admit<S> {
        let served = self.served.get(&uid).copied().unwrap_or(0);
        if served < CONNECTIONS_PER_USER && self.served_total < USER_CONNECTIONS {
            self.take(uid);
            return Admit::Now(conn);
        }
        let queue = self.waiting.entry(uid).or_default();
        if queue.len() >= WAITING_PER_USER || self.waiting_total >= WAITING {
            let why =
                format!("uid {uid} has {served} connections served and {} waiting; retry later", queue.len());
            if queue.is_empty() {
                self.waiting.remove(&uid);
            }
            return Admit::Refused(conn, why);
        }
        queue.push_back(conn);
        self.waiting_total += 1;
        Admit::Parked
    }

    /// A served connection of `uid` ended; returns the waiting connection to serve in its place
    /// (the same user's first, else any user's that now fits).
    pub fn release(&mut self, uid: u32) -> Option<(u32, S)> {
        if let Some(n) = self.served.get_mut(&uid) {
            *n -= 1;
            self.served_total -= 1;
            if *n == 0 {
                self.served.remove(&uid);
            }
        }
        let fits = |served: &HashMap<u32, usize>, u: u32| {
            served.get(&u).copied().unwrap_or(0) < CONNECTIONS_PER_USER
        };
        let next = if self.waiting.contains_key(&uid) && fits(&self.served, uid) {
            Some(uid)
        } else {
            self.waiting.keys().copied().find(|&u| fits(&self.served, u))
        }?;
        if self.served_total >= USER_CONNECTIONS {
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
        *self.served.entry(uid).or_default() += 1;
        self.served_total += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_beyond_the_limit_waits_then_is_refused() {
        let mut a = Admission::default();
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
    fn the_total_limit_holds_across_users() {
        let mut a = Admission::default();
        for uid in 0..(USER_CONNECTIONS / CONNECTIONS_PER_USER) as u32 {
            for i in 0..CONNECTIONS_PER_USER {
                assert!(matches!(a.admit(uid, i), Admit::Now(_)));
            }
        }
        assert!(matches!(a.admit(5000, 1), Admit::Parked), "over the total: waits");
        // User 0 ends one; user 0 has nothing waiting, so user 5000's connection goes in.
        assert_eq!(a.release(0), Some((5000, 1)));
        // A release of a uid with nothing served changes nothing.
        assert_eq!(a.release(42), None);
        assert_eq!(a.served_total, USER_CONNECTIONS);
    }
}
