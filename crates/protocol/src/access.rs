//! Who may ask wattsond what: root and SlurmUser begin and end jobs; a user sees only their own
//! jobs, admins see all. Used by the daemon on every request and by `wattson acct` when it reads
//! the store directly.

use crate::{Error, ErrorCode, Request};

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

/// Who may do what, resolved from the configuration at start.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Uid of Slurm's SlurmUser, if that user exists.
    pub slurm_uid: Option<u32>,
    /// Name of SlurmUser, for messages.
    pub slurm_user: String,
    /// Uids that may read every user's jobs.
    pub admin_uids: Vec<u32>,
}

impl Access {
    /// Resolves user names to uids; returns the names that do not exist here, for the log.
    pub fn resolve(slurm_user: &str, admins: &[String]) -> (Access, Vec<String>) {
        let mut unknown = Vec::new();
        let mut uid = |name: &str| {
            let found = uid_of(name);
            if found.is_none() {
                unknown.push(name.to_string());
            }
            found
        };
        let access = Access {
            slurm_uid: uid(slurm_user),
            slurm_user: slurm_user.to_string(),
            admin_uids: admins.iter().filter_map(|a| uid(a)).collect(),
        };
        (access, unknown)
    }

    /// Whether `uid` is root or SlurmUser.
    pub fn is_privileged(&self, uid: u32) -> bool {
        uid == 0 || Some(uid) == self.slurm_uid
    }

    /// Whether `uid` may see every user's jobs: root, SlurmUser and the configured admins.
    pub fn sees_all(&self, uid: u32) -> bool {
        self.is_privileged(uid) || self.admin_uids.contains(&uid)
    }

    /// Narrows or refuses `request` for the caller `uid`.
    pub fn authorize(&self, uid: u32, request: Request) -> Result<Request, Error> {
        let privileged = self.is_privileged(uid);
        match request {
            Request::JobBegin(_) | Request::JobEnd { .. } if !privileged => Err(denied(format!(
                "permission denied: only root and SlurmUser ({}) may begin or end jobs (you are uid {uid})",
                self.slurm_user
            ))),
            Request::ConfirmIdle {}
            | Request::JobPace { .. }
            | Request::JobLevels { .. }
            | Request::Models {}
            | Request::MergeModels { .. }
            | Request::JobSummary { .. }
                if !privileged =>
            {
                Err(denied(format!(
                    "permission denied: only root and SlurmUser ({}) may ask for the controller's requests (you are uid {uid})",
                    self.slurm_user
                )))
            }
            Request::Acct(mut filter) if !(uid == 0 || self.admin_uids.contains(&uid)) => match filter.uid {
                Some(other) if other != uid => Err(denied(format!(
                    "permission denied: uid {uid} may see only its own jobs, not uid {other}'s"
                ))),
                _ => {
                    filter.uid = Some(uid);
                    Ok(Request::Acct(filter))
                }
            },
            other => Ok(other),
        }
    }
}

fn denied(message: String) -> Error {
    Error::new(ErrorCode::PermissionDenied, message)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::AcctQuery;
    use wattson_types::job::JobKey;

    fn policy() -> Access {
        Access { slurm_uid: Some(64030), slurm_user: "slurm".into(), admin_uids: vec![500] }
    }

    #[test]
    fn only_root_and_slurm_user_begin_and_end_jobs() {
        let end = Request::JobEnd { job: JobKey::job(1) };
        assert!(policy().authorize(0, end.clone()).is_ok());
        assert!(policy().authorize(64030, end.clone()).is_ok());
        let e = policy().authorize(1000, end).unwrap_err();
        assert_eq!(e.code, ErrorCode::PermissionDenied);
        assert!(e.message.contains("permission denied") && e.message.contains("slurm"), "{e}");
        assert!(policy().authorize(1000, Request::Status {}).is_ok());
        let pace = Request::JobPace { job: 1, pace: crate::Pace::Full };
        let merge = Request::MergeModels { models: Vec::new() };
        let summary = Request::JobSummary { job: 1, bins: 10 };
        let levels = Request::JobLevels { job: 1 };
        for controller in [Request::ConfirmIdle {}, pace, levels, Request::Models {}, merge, summary] {
            assert!(policy().authorize(64030, controller.clone()).is_ok());
            assert_eq!(policy().authorize(1000, controller).unwrap_err().code, ErrorCode::PermissionDenied);
        }
    }

    #[test]
    fn users_see_only_their_own_jobs_admins_see_all() {
        let any = Request::Acct(AcctQuery::default());
        assert_eq!(
            policy().authorize(1000, any.clone()).unwrap(),
            Request::Acct(AcctQuery { uid: Some(1000), ..AcctQuery::default() })
        );
        assert_eq!(policy().authorize(500, any.clone()).unwrap(), any);
        assert_eq!(policy().authorize(0, any.clone()).unwrap(), any);
        let other = Request::Acct(AcctQuery { uid: Some(1001), ..AcctQuery::default() });
        assert!(policy().authorize(1000, other.clone()).is_err());
        assert_eq!(policy().authorize(500, other.clone()).unwrap(), other);
    }
}
