//! Local user names and uids.

/// The uid of a user given by name or number, from the local user database.
pub fn uid_of(user: &str) -> Option<u32> {
    if let Ok(uid) = user.parse::<u32>() {
        return Some(uid);
    }
    match nix::unistd::User::from_name(user) {
        Ok(Some(u)) => Some(u.uid.as_raw()),
        _ => None,
    }
}
