//! What a report asks the store for.

use crate::job::JobKey;

/// Which records the store's query returns; every filter is optional (`Default` = all).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AcctQuery {
    /// Jobs to match; empty = any. A key with an empty step matches the job and all its steps.
    pub jobs: Vec<JobKey>,
    /// Owner to match.
    pub uid: Option<u32>,
    /// Window start (ns): like `sacct -S`, matches records still running at or after it.
    pub start_ns: Option<i64>,
    /// Window end (ns): like `sacct -E`, matches records that began at or before it.
    pub end_ns: Option<i64>,
    /// At most this many records (the first ones in result order).
    pub limit: Option<usize>,
}
