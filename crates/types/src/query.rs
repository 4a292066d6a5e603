//! What a report asks for: which recorded jobs, as `sacct`'s `-j`, `-u`, `-S`, `-E`. The same
//! query goes over the daemon's socket and to the store.

use serde::{Deserialize, Serialize};

use crate::job::JobKey;

/// Which records to return; every filter is optional (`Default` = all).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AcctQuery {
    /// Jobs to match; empty = any. A key with an empty step matches the job and all its steps.
    #[serde(default)]
    pub jobs: Vec<JobKey>,
    /// Owner to match.
    #[serde(default)]
    pub uid: Option<u32>,
    /// Window start (ns): like `sacct -S`, matches records still running at or after it.
    #[serde(default)]
    pub start_ns: Option<i64>,
    /// Window end (ns): like `sacct -E`, matches records that began at or before it.
    #[serde(default)]
    pub end_ns: Option<i64>,
    /// At most this many records (the first ones in result order); the store's own bound,
    /// never taken from the socket.
    #[serde(skip)]
    pub limit: Option<usize>,
}
