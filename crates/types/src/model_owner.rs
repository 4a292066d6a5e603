//! Who owns a learned workload model: the user whose runs measured it or, where the site
//! shares models within Slurm accounts, that account. A model decides only its owner's jobs.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A model's owner, written `uid:1000` or `account:physics` (in the store and the model table).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ModelOwner {
    /// A user, by uid.
    User(u32),
    /// A Slurm account, by name.
    Account(String),
}

impl fmt::Display for ModelOwner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelOwner::User(uid) => write!(f, "uid:{uid}"),
            ModelOwner::Account(name) => write!(f, "account:{name}"),
        }
    }
}

impl FromStr for ModelOwner {
    type Err = String;

    fn from_str(s: &str) -> Result<ModelOwner, String> {
        match s.split_once(':') {
            Some(("uid", uid)) => uid.parse().map(ModelOwner::User).map_err(|_| format!("bad uid in {s:?}")),
            Some(("account", name)) if !name.is_empty() => Ok(ModelOwner::Account(name.to_string())),
            _ => Err(format!("{s:?} is not an owner (uid:N or account:NAME)")),
        }
    }
}

impl Serialize for ModelOwner {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ModelOwner {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ModelOwner, D::Error> {
        String::deserialize(d)?.parse().map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owners_round_trip_as_text() {
        for owner in [ModelOwner::User(1000), ModelOwner::Account("phys:ics".into())] {
            assert_eq!(owner.to_string().parse::<ModelOwner>().unwrap(), owner);
        }
        assert_eq!(ModelOwner::User(7).to_string(), "uid:7");
        for bad in ["7", "uid:x", "account:", "group:a"] {
            assert!(bad.parse::<ModelOwner>().is_err(), "{bad}");
        }
    }
}
