//! Records that cannot be read (their JSON damaged on disk, or by hand) are moved out of
//! `jobs` into `quarantine`, as they were found, so that the daemon starts and every query
//! keeps working: running ones at the start, completed ones when a query meets them
//! ([`Store::query_readable`]); the daemon logs each.

use rusqlite::params;

use super::{Store, StoreError, query};
use crate::AcctQuery;
use crate::query::{Readable, Unreadable};
use wattson_types::job::{JobKey, JobRecord};

/// Records moved to quarantine: which, and why.
pub type Quarantined = Vec<(JobKey, String)>;

impl Store {
    /// The RUNNING records; each that cannot be read is moved to `quarantine` at `now` (in one
    /// commit each) and returned with the reason instead.
    pub fn running_jobs_or_quarantine(
        &mut self,
        now: i64,
    ) -> Result<(Vec<JobRecord>, Quarantined), StoreError> {
        let read = query::running_readable(&self.conn)?;
        for unreadable in &read.unreadable {
            self.quarantine(unreadable.id, &unreadable.reason, now)?;
        }
        Ok((read.records, read.unreadable.into_iter().map(|u| (u.key, u.reason)).collect()))
    }

    /// Moves the record of row `id` (with its GPUs and series) to `quarantine`.
    fn quarantine(&mut self, id: i64, reason: &str, now: i64) -> Result<(), StoreError> {
        let tx = self.conn.transaction()?;
        tx.execute(
            "INSERT INTO quarantine (job_id, step, uid, begin_ns, quarantined_ns, reason, record)
             SELECT job_id, step, uid, begin_ns, ?2, ?3, json_object(
                 'user', user, 'name', name, 'node', node, 'end_ns', end_ns, 'state', state,
                 'hints', hints, 'policy', policy, 'dvfs', dvfs,
                 'gpus', (SELECT json_group_array(json_object('gpu_index', gpu_index, 'uuid', uuid,
                              'name', name, 'energy_mj', energy_mj, 'meter', meter))
                          FROM job_gpus WHERE job = jobs.id))
             FROM jobs WHERE id = ?1",
            params![id, now, reason],
        )?;
        tx.execute("DELETE FROM samples WHERE job = ?1", [id])?;
        tx.execute("DELETE FROM job_gpus WHERE job = ?1", [id])?;
        tx.execute("DELETE FROM jobs WHERE id = ?1", [id])?;
        tx.commit()?;
        Ok(())
    }

    /// Records matching `q` as [`Store::query`] gives them, leaving out those that cannot be
    /// read, which come back apart for [`Store::quarantine_unreadable`].
    pub fn query_readable(&self, q: &AcctQuery) -> Result<Readable, StoreError> {
        query::run_readable(&self.conn, q)
    }

    /// Moves the record a query could not read to `quarantine` at `now` if it still cannot be
    /// read; why, if it did.
    pub fn quarantine_unreadable(
        &mut self,
        row: &Unreadable,
        now: i64,
    ) -> Result<Option<String>, StoreError> {
        match query::read_row(&self.conn, row.id, row.key.clone()) {
            Ok(Ok(_)) | Err(StoreError::Sqlite(rusqlite::Error::QueryReturnedNoRows)) => Ok(None),
            Ok(Err(unreadable)) => {
                self.quarantine(unreadable.id, &unreadable.reason, now)?;
                Ok(Some(unreadable.reason))
            }
            Err(e) => Err(e),
        }
    }

    /// How many records are in quarantine.
    pub fn quarantined(&self) -> Result<usize, StoreError> {
        Ok(self.conn.query_row("SELECT count(*) FROM quarantine", [], |r| r.get::<_, i64>(0))? as usize)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_completed_record_that_cannot_be_read_is_left_out_of_queries_and_quarantined() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("s.db")).unwrap();
        store
            .conn
            .execute_batch(
                "INSERT INTO jobs (id, job_id, step, uid, node, begin_ns, end_ns, state, hints)
                     VALUES (1, 7, '', 1000, 'n1', 1, 2, 'COMPLETED', '{}'),
                            (2, 8, '', 1000, 'n1', 2, 3, 'COMPLETED', '{\"tag\":[oops'),
                            (3, 9, '', 1000, 'n1', 3, 4, 'COMPLETED', '{}');",
            )
            .unwrap();
        let all = AcctQuery::default();
        assert!(store.query(&all).is_err(), "the strict query fails on the damaged record");
        let read = store.query_readable(&all).unwrap();
        let keys: Vec<u32> = read.records.iter().map(|r| r.key.job_id).collect();
        assert_eq!(keys, [7, 9]);
        assert_eq!((read.unreadable.len(), read.unreadable[0].id), (1, 2));
        assert!(read.unreadable[0].reason.contains("job 8: hints"), "{:?}", read.unreadable);
        let damaged = &read.unreadable[0];
        assert!(store.quarantine_unreadable(damaged, 5).unwrap().is_some());
        assert_eq!(store.quarantine_unreadable(damaged, 5).unwrap(), None, "gone from jobs");
        let readable = Unreadable { id: 1, key: JobKey::job(7), reason: String::new() };
        assert_eq!(store.quarantine_unreadable(&readable, 5).unwrap(), None, "a readable record stays");
        assert_eq!(store.quarantined().unwrap(), 1);
        assert_eq!(store.query(&all).unwrap().len(), 2);
    }

    #[test]
    fn a_running_record_with_damaged_json_is_moved_aside_and_the_others_kept() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = Store::open(&dir.path().join("s.db")).unwrap();
        store
            .conn
            .execute_batch(
                "INSERT INTO jobs (id, job_id, step, uid, node, begin_ns, state, hints)
                     VALUES (1, 7, '', 1000, 'n1', 1, 'RUNNING', '{}'),
                            (2, 8, '', 1000, 'n1', 2, 'RUNNING', '{\"tag\":[oops'),
                            (3, 9, '', 1000, 'n1', 3, 'RUNNING', '{}');
                 INSERT INTO job_gpus (job, gpu_index, uuid, name, energy_mj, meter)
                     VALUES (3, 0, 'GPU-0', 'H100', 5.0, 'not json');",
            )
            .unwrap();
        let (records, quarantined) = store.running_jobs_or_quarantine(42).unwrap();
        assert_eq!(records.iter().map(|r| r.key.job_id).collect::<Vec<_>>(), [7]);
        let keys: Vec<u32> = quarantined.iter().map(|(k, _)| k.job_id).collect();
        assert_eq!(keys, [8, 9]);
        assert!(quarantined[1].1.contains("meter"), "{quarantined:?}");
        assert_eq!(store.quarantined().unwrap(), 2);
        let kept: String =
            store.conn.query_row("SELECT record FROM quarantine WHERE job_id = 9", [], |r| r.get(0)).unwrap();
        assert!(kept.contains("not json") && kept.contains("GPU-0"), "{kept}");
        // Every query works again; nothing is left in the job tables of the moved records.
        assert_eq!(store.query(&crate::AcctQuery::default()).unwrap().len(), 1);
        assert_eq!(store.running_jobs().unwrap().len(), 1);
    }

    #[test]
    fn a_version_7_file_migrates_to_an_empty_quarantine_and_keeps_its_jobs() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("s.db");
        let mut conn = rusqlite::Connection::open(&path).unwrap();
        crate::schema::migrate_with(&mut conn, &crate::schema::MIGRATIONS[..7]).unwrap();
        conn.execute(
            "INSERT INTO jobs (job_id, step, uid, node, begin_ns, state) VALUES (7, '', 1000, 'n1', 1, 'RUNNING')",
            [],
        )
        .unwrap();
        drop(conn);
        let mut store = Store::open(&path).unwrap();
        assert_eq!(crate::schema::version(&store.conn).unwrap(), crate::schema::SCHEMA_VERSION);
        assert_eq!(store.quarantined().unwrap(), 0);
        let (records, quarantined) = store.running_jobs_or_quarantine(1).unwrap();
        assert_eq!((records.len(), quarantined.len()), (1, 0));
    }
}
