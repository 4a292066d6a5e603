use std::io::{BufRead, BufReader};

use super::*;
use wattson_engine::Knob;
use wattson_types::energy::{GpuMeter, GpuReading, MeterEvent, Method};
use wattson_types::job::{EnergyPolicy, Hints, JobState, Progress};
use wattson_types::model_owner::ModelOwner;

const S: i64 = 1_000_000_000;

fn gpu(index: u32, t_ns: i64, counter: u64) -> JobGpu {
    let reading = GpuReading {
        t_ns,
        energy_mj: Some(counter),
        power_mw: Some(300_000),
        sm_clock_mhz: Some(1400),
        util_pct: Some(90),
    };
    JobGpu {
        index,
        uuid: format!("GPU-{index}"),
        name: "NVIDIA H100".into(),
        meter: GpuMeter::begin(reading),
    }
}

fn rec(job_id: u32, step: &str, uid: u32, begin_s: i64, gpus: &[u32]) -> JobRecord {
    JobRecord {
        key: JobKey { job_id, step: step.into() },
        uid,
        user: Some(format!("user{uid}")),
        name: Some("train".into()),
        node: "node01".into(),
        begin_ns: begin_s * S,
        end_ns: None,
        state: JobState::Running,
        hints: Hints {
            policy: Some(EnergyPolicy::Balanced),
            slowdown_pct: Some(5.0),
            tag: Some("bert".into()),
            gpu_freq: None,
            share: None,
        },
        policy: Some(EnergyPolicy::Balanced),
        gpus: gpus.iter().map(|&i| gpu(i, begin_s * S, 1000)).collect(),
        dvfs: None,
        node_share: None,
    }
}

fn tmp() -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("wattson.db");
    (dir, path)
}

#[test]
fn round_trip_with_meters_and_events() {
    let (_d, path) = tmp();
    let mut st = Store::open(&path).unwrap();
    let r = rec(42, "", 1000, 100, &[0, 1]);
    assert_eq!(st.begin_job(&r, Hold::Shared).unwrap(), BeginOutcome::Inserted);
    let mut gpus = r.gpus.clone();
    gpus[0].meter.advance(GpuReading { t_ns: 160 * S, energy_mj: Some(5_000_000), ..Default::default() });
    gpus[1].meter.advance(GpuReading {
        t_ns: 160 * S,
        energy_mj: Some(10),
        power_mw: Some(250_000),
        ..Default::default()
    });
    gpus[1].meter.mark_lost(170 * S);
    let sample = SeriesPoint {
        t_ns: 160 * S,
        gpu_index: 0,
        power_mw: Some(1),
        sm_clock_mhz: None,
        util_pct: Some(3),
        energy_mj: 4.5,
    };
    let skipped =
        st.save_meters_many(&[(r.key.clone(), gpus.clone())], &[(r.key.clone(), sample.clone())]).unwrap();
    assert!(skipped.is_empty());
    let done = st.end_job(&r.key, 200 * S, &gpus).unwrap();
    assert_eq!(done.state, JobState::Completed);
    assert_eq!(done.end_ns, Some(200 * S));
    assert_eq!(done.gpus, gpus);
    assert_eq!(done.gpus[1].meter.method, Method::CounterAndPower);
    assert!(matches!(done.gpus[1].meter.events[0], MeterEvent::CounterReset { .. }));
    assert!(matches!(done.gpus[1].meter.events[1], MeterEvent::GpuLost { .. }));
    drop(st);
    let ro = Store::open_read_only(&path).unwrap();
    let got = ro.query(&AcctQuery::default()).unwrap();
    let expected = JobRecord { end_ns: Some(200 * S), state: JobState::Completed, gpus, ..r };
    assert_eq!(got, vec![expected]);
    assert_eq!(ro.samples(&JobKey::job(42)).unwrap(), vec![sample]);
    // The reader cannot write.
    drop(ro);
    let mut ro = Store::open_read_only(&path).unwrap();
    assert!(ro.begin_job(&rec(43, "", 1, 1, &[0]), Hold::Shared).is_err());
}

#[test]
fn begin_is_idempotent_and_conflicts_are_refused() {
    let (_d, path) = tmp();
    let mut st = Store::open(&path).unwrap();
    let r = rec(7, "0", 1000, 10, &[1, 0]);
    assert_eq!(st.begin_job(&r, Hold::Shared).unwrap(), BeginOutcome::Inserted);
    // Same key, uid and GPUs (other order, other meters): a retry.
    let mut again = rec(7, "0", 1000, 11, &[0, 1]);
    again.name = Some("other".into());
    assert_eq!(st.begin_job(&again, Hold::Shared).unwrap(), BeginOutcome::AlreadyRunning);
    assert!(matches!(
        st.begin_job(&rec(7, "0", 1001, 10, &[0, 1]), Hold::Shared),
        Err(StoreError::Conflict { .. })
    ));
    assert!(matches!(
        st.begin_job(&rec(7, "0", 1000, 10, &[0]), Hold::Shared),
        Err(StoreError::Conflict { .. })
    ));
    let all = st.query(&AcctQuery::default()).unwrap();
    assert_eq!(all.len(), 1);
    assert_eq!(all[0].name.as_deref(), Some("train"));
    // Another step of the same job is a different key.
    assert_eq!(st.begin_job(&rec(7, "batch", 1000, 10, &[0]), Hold::Shared).unwrap(), BeginOutcome::Inserted);
}

#[test]
fn ending_or_updating_a_job_that_is_not_running_fails() {
    let (_d, path) = tmp();
    let mut st = Store::open(&path).unwrap();
    let key = JobKey::job(5);
    assert!(matches!(st.end_job(&key, 1, &[]), Err(StoreError::NotRunning(k)) if k == key));
    assert_eq!(st.save_meters_many(&[(key.clone(), vec![])], &[]).unwrap(), vec![key.clone()]);
    st.begin_job(&rec(5, "", 1, 1, &[0]), Hold::Shared).unwrap();
    st.end_job(&key, 2 * S, &[]).unwrap();
    assert!(matches!(st.end_job(&key, 3 * S, &[]), Err(StoreError::NotRunning(_))));
}

#[test]
fn one_running_row_per_key_but_ids_may_be_reused_after_completion() {
    let (_d, path) = tmp();
    let mut st = Store::open(&path).unwrap();
    st.begin_job(&rec(9, "", 1, 10, &[0]), Hold::Shared).unwrap();
    // The partial unique index itself refuses a second RUNNING row.
    let dup = st.conn.execute(
        "INSERT INTO jobs (job_id, step, uid, node, begin_ns, state) VALUES (9, '', 1, 'n', 0, 'RUNNING')",
        [],
    );
    assert!(dup.is_err());
    st.end_job(&JobKey::job(9), 20 * S, &[]).unwrap();
    assert_eq!(st.begin_job(&rec(9, "", 2, 30, &[3]), Hold::Shared).unwrap(), BeginOutcome::Inserted);
    let both = st.query(&AcctQuery { jobs: vec![JobKey::job(9)], ..Default::default() }).unwrap();
    assert_eq!(
        both.iter().map(|r| (r.uid, r.state)).collect::<Vec<_>>(),
        [(1, JobState::Completed), (2, JobState::Running)]
    );
    assert_eq!(st.running_jobs().unwrap().len(), 1);
    assert_eq!(st.running_jobs().unwrap()[0].uid, 2);
}

#[test]
fn save_meters_many_updates_all_jobs_in_one_tick_and_skips_stale_keys() {
    let (_d, path) = tmp();
    let mut st = Store::open(&path).unwrap();
    let a = rec(1, "", 1, 1, &[0, 1]);
    let b = rec(2, "", 1, 1, &[2]);
    st.begin_job(&a, Hold::Shared).unwrap();
    st.begin_job(&b, Hold::Shared).unwrap();
    let mut ga = a.gpus.clone();
    ga[1].meter.energy_mj = 77.0;
    let mut gb = b.gpus.clone();
    gb[0].meter.energy_mj = 88.0;
    let stale = JobKey::job(3);
    let s = |g| SeriesPoint {
        t_ns: 2 * S,
        gpu_index: g,
        power_mw: None,
        sm_clock_mhz: None,
        util_pct: None,
        energy_mj: 1.0,
    };
    let skipped = st
        .save_meters_many(
            &[(a.key.clone(), ga.clone()), (stale.clone(), vec![]), (b.key.clone(), gb.clone())],
            &[(a.key.clone(), s(0)), (stale.clone(), s(0)), (b.key.clone(), s(2))],
        )
        .unwrap();
    assert_eq!(skipped, vec![stale]);
    let running = st.running_jobs().unwrap();
    assert_eq!(running[0].gpus, ga);
    assert_eq!(running[1].gpus, gb);
    assert_eq!(st.samples(&b.key).unwrap(), vec![s(2)]);
}

#[test]
fn migrates_an_empty_file_and_refuses_a_newer_one() {
    let (_d, path) = tmp();
    std::fs::write(&path, b"").unwrap();
    let st = Store::open(&path).unwrap();
    assert_eq!(schema::version(&st.conn).unwrap(), schema::SCHEMA_VERSION);
    drop(st);
    // Reopening is a no-op.
    Store::open(&path).unwrap();
    // A later migration step applies on top, in order.
    let mut conn = Connection::open(&path).unwrap();
    let newer = schema::SCHEMA_VERSION + 1;
    let steps: Vec<&str> = schema::MIGRATIONS.iter().copied().chain(["CREATE TABLE extra (x)"]).collect();
    schema::migrate_with(&mut conn, &steps).unwrap();
    assert_eq!(schema::version(&conn).unwrap(), newer);
    conn.execute("INSERT INTO extra VALUES (1)", []).unwrap();
    drop(conn);
    for open in [Store::open, Store::open_read_only] {
        match open(&path) {
            Err(StoreError::TooNew { found, supported, .. }) if found == newer && supported == newer - 1 => {}
            other => panic!("expected TooNew, got {other:?}"),
        }
    }
    // Untouched: still the newer version with its data.
    let conn = Connection::open(&path).unwrap();
    assert_eq!(schema::version(&conn).unwrap(), newer);
}

#[test]
fn read_only_open_of_an_uninitialised_file_is_refused() {
    let (_d, path) = tmp();
    assert!(matches!(Store::open_read_only(&path), Err(StoreError::Open { .. })));
    assert!(!path.exists(), "a reader must not create the file");
    std::fs::write(&path, b"").unwrap();
    assert!(matches!(Store::open_read_only(&path), Err(StoreError::NotMigrated { found: 0, .. })));
}

#[test]
fn garbage_file_is_an_error_naming_the_path() {
    let (_d, path) = tmp();
    std::fs::write(&path, vec![0x5a_u8; 8192]).unwrap();
    for open in [Store::open, Store::open_read_only] {
        let err = open(&path).unwrap_err();
        assert!(matches!(err, StoreError::NotADatabase { .. }), "{err:?}");
        assert!(err.to_string().contains(&path.display().to_string()), "{err}");
    }
}

#[test]
fn immutable_fallback_only_without_pending_wal() {
    let (_d, path) = tmp();
    let mut st = Store::open(&path).unwrap();
    st.begin_job(&rec(1, "", 1, 1, &[0]), Hold::Shared).unwrap();
    // While the writer is open, the WAL holds committed frames: no fallback.
    assert!(open_immutable(&path).unwrap().is_none());
    drop(st);
    // Persistent WAL: the files stay, the WAL is empty after the clean close.
    let wal = PathBuf::from(format!("{}-wal", path.display()));
    assert_eq!(std::fs::metadata(&wal).unwrap().len(), 0);
    assert!(PathBuf::from(format!("{}-shm", path.display())).exists());
    let conn = open_immutable(&path).unwrap().expect("fallback allowed with an empty WAL");
    let n: i64 = conn.query_row("SELECT count(*) FROM jobs", [], |r| r.get(0)).unwrap();
    assert_eq!(n, 1);
    // Also without any -wal file.
    drop(conn);
    std::fs::remove_file(&wal).unwrap();
    assert!(open_immutable(&path).unwrap().is_some());
}

#[test]
fn query_filters() {
    let (_d, path) = tmp();
    let mut st = Store::open(&path).unwrap();
    // job 10: [100, 200] uid 1, with steps 10.batch and 10.0
    st.begin_job(&rec(10, "", 1, 100, &[0]), Hold::Shared).unwrap();
    st.begin_job(&rec(10, "batch", 1, 100, &[0]), Hold::Shared).unwrap();
    st.begin_job(&rec(10, "0", 1, 150, &[0]), Hold::Shared).unwrap();
    for step in ["0", "batch", ""] {
        st.end_job(&JobKey { job_id: 10, step: step.into() }, 200 * S, &[]).unwrap();
    }
    // job 11: [300, 400] uid 2; job 12: running since 500, uid 1
    st.begin_job(&rec(11, "", 2, 300, &[1]), Hold::Shared).unwrap();
    st.end_job(&JobKey::job(11), 400 * S, &[]).unwrap();
    st.begin_job(&rec(12, "", 1, 500, &[2]), Hold::Shared).unwrap();

    let ids = |q: AcctQuery| st.query(&q).unwrap().iter().map(|r| r.key.to_string()).collect::<Vec<_>>();
    assert_eq!(ids(AcctQuery::default()), ["10", "10.batch", "10.0", "11", "12"]);
    assert_eq!(
        ids(AcctQuery { jobs: vec![JobKey::job(10)], ..Default::default() }),
        ["10", "10.batch", "10.0"]
    );
    let k = JobKey::parse("10.batch").unwrap();
    assert_eq!(ids(AcctQuery { jobs: vec![k, JobKey::job(11)], ..Default::default() }), ["10.batch", "11"]);
    assert_eq!(ids(AcctQuery { uid: Some(2), ..Default::default() }), ["11"]);
    // Window edges are inclusive: a job ending exactly at start, or beginning exactly at end.
    let w = |s: i64, e: i64| AcctQuery { start_ns: Some(s * S), end_ns: Some(e * S), ..Default::default() };
    assert_eq!(ids(w(200, 300)), ["10", "10.batch", "10.0", "11"]);
    assert_eq!(ids(w(201, 299)), Vec::<String>::new());
    assert_eq!(ids(w(401, 499)), Vec::<String>::new());
    // A running job matches any window after its start.
    assert_eq!(ids(w(10_000, 20_000)), ["12"]);
    assert_eq!(ids(AcctQuery { uid: Some(1), start_ns: Some(201 * S), ..Default::default() }), ["12"]);
    assert_eq!(ids(AcctQuery { end_ns: Some(99 * S), ..Default::default() }), Vec::<String>::new());
    assert_eq!(ids(AcctQuery { limit: Some(2), ..Default::default() }), ["10", "10.batch"]);
    assert_eq!(st.query_full_scan(&w(200, 300)).unwrap().len(), 4);
}

#[test]
fn report_queries_use_the_indexes() {
    let (_d, path) = tmp();
    let st = Store::open(&path).unwrap();
    let q = AcctQuery { uid: Some(1), start_ns: Some(0), end_ns: Some(10), ..Default::default() };
    assert!(st.query_plan(&q).unwrap().contains("jobs_by_uid_begin"), "{}", st.query_plan(&q).unwrap());
    let q = AcctQuery { jobs: vec![JobKey::job(3)], ..Default::default() };
    assert!(st.query_plan(&q).unwrap().contains("jobs_by_job"), "{}", st.query_plan(&q).unwrap());
    let q = AcctQuery { start_ns: Some(0), end_ns: Some(10), ..Default::default() };
    assert!(st.query_plan(&q).unwrap().contains("jobs_by_begin"), "{}", st.query_plan(&q).unwrap());
}

/// `sacct -j` with thousands of ids (a job id names the job and its steps): the keys' `OR` is a
/// balanced tree (a flat chain failed beyond ~1,000 with "Expression tree is too large").
#[test]
fn thousands_of_job_ids_in_one_query() {
    let (_d, path) = tmp();
    let mut st = Store::open(&path).unwrap();
    for job in 1..=30 {
        st.begin_job(&rec(job, "", 7, i64::from(job), &[0]), Hold::Shared).unwrap();
    }
    st.begin_job(&rec(5, "0", 7, 5, &[0]), Hold::Shared).unwrap();
    st.begin_job(&rec(6, "0", 7, 6, &[0]), Hold::Shared).unwrap();
    let mut jobs: Vec<JobKey> = (1..=5000).map(|j| JobKey::job(j * 3)).collect();
    jobs.push(JobKey { job_id: 5, step: "0".into() });
    jobs.extend((0..2000).map(|s| JobKey { job_id: 9999, step: s.to_string() }));
    let found = st.query(&AcctQuery { jobs, ..Default::default() }).unwrap();
    let keys: Vec<String> = found.iter().map(|r| r.key.to_string()).collect();
    assert_eq!(keys, ["3", "5.0", "6", "6.0", "9", "12", "15", "18", "21", "24", "27", "30"]);
}

/// A page corrupted in the middle of the file (the header intact) is found by the quick check.
#[test]
fn a_corrupt_page_is_found_at_open() {
    let (_d, path) = tmp();
    {
        let mut st = Store::open(&path).unwrap();
        for job in 1..=300 {
            st.begin_job(&rec(job, "", 7, i64::from(job), &[0, 1]), Hold::Shared).unwrap();
        }
        assert!(st.is_intact().unwrap());
    }
    let mut bytes = std::fs::read(&path).unwrap();
    assert!(bytes.len() > 16 * 4096, "{} bytes", bytes.len());
    let page = 4096 * 8;
    bytes[page..page + 4096].fill(0xa5);
    std::fs::write(&path, &bytes).unwrap();
    let st = Store::open(&path).unwrap();
    assert!(!st.is_intact().unwrap());
}

const CHILD_ENV: &str = "WATTSON_STORE_DURABILITY_CHILD";

/// Not a test on its own: the child half of `end_job_is_durable_when_it_returns`.
#[test]
fn durability_child() {
    let Some(path) = std::env::var_os(CHILD_ENV) else { return };
    let mut st = Store::open(Path::new(&path)).unwrap();
    let r = rec(77, "", 4242, 1, &[0, 1]);
    st.begin_job(&r, Hold::Shared).unwrap();
    let mut gpus = r.gpus.clone();
    gpus[0].meter.energy_mj = 123_456.0;
    st.end_job(&r.key, 9 * S, &gpus).unwrap();
    println!("ENDED");
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    loop {
        std::thread::sleep(Duration::from_secs(1));
    }
}

#[test]
fn end_job_is_durable_when_it_returns() {
    let (_d, path) = tmp();
    let mut child = std::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "tests::durability_child", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, &path)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap());
    let mut ended = false;
    for line in out.lines() {
        if line.unwrap().ends_with("ENDED") {
            ended = true;
            break;
        }
    }
    child.kill().unwrap(); // SIGKILL: no destructors, no clean close.
    child.wait().unwrap();
    assert!(ended, "child did not report ENDED");
    let ro = Store::open_read_only(&path).unwrap();
    let got = ro.query(&AcctQuery { uid: Some(4242), ..Default::default() }).unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].state, JobState::Completed);
    assert_eq!(got[0].end_ns, Some(9 * S));
    assert_eq!(got[0].gpus[0].meter.energy_mj, 123_456.0);
}

#[test]
fn a_version_1_file_migrates_and_keeps_its_jobs() {
    let (_d, path) = tmp();
    let mut conn = Connection::open(&path).unwrap();
    schema::migrate_with(&mut conn, &schema::MIGRATIONS[..1]).unwrap();
    conn.execute(
        "INSERT INTO jobs (job_id, step, uid, node, begin_ns, end_ns, state) VALUES (7, '', 1000, 'n1', 1, 2, 'COMPLETED')",
        [],
    )
    .unwrap();
    drop(conn);
    let st = Store::open(&path).unwrap();
    assert_eq!(schema::version(&st.conn).unwrap(), schema::SCHEMA_VERSION);
    let jobs = st.query(&AcctQuery::default()).unwrap();
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].key.job_id, 7);
    assert!(st.gpu_changes().unwrap().is_empty(), "v2's journal exists and is empty");
}

#[test]
fn a_version_5_files_models_keep_their_user_as_owner() {
    let (_d, path) = tmp();
    let mut conn = Connection::open(&path).unwrap();
    schema::migrate_with(&mut conn, &schema::MIGRATIONS[..5]).unwrap();
    conn.execute(
        "INSERT INTO models (owner, gpu_type, tag, progress, samples, settings, updated_ns) \
         VALUES (1000, 'H100', 'bert', 'file', '[]', '[700.0]', 1)",
        [],
    )
    .unwrap();
    drop(conn);
    let st = Store::open(&path).unwrap();
    let owner = ModelOwner::User(1000);
    let model = st.model(&owner, "H100", "bert", Progress::File, Knob::PowerLimit).unwrap().expect("kept");
    assert!(st.model(&owner, "H100", "bert", Progress::File, Knob::SmClock).unwrap().is_none());
    assert_eq!((model.owner, model.settings, model.knob), (owner, vec![700.0], Knob::PowerLimit));
    st.conn.execute("UPDATE models SET owner = 'group:x'", []).unwrap();
    assert!(st.models().unwrap_err().to_string().contains("not an owner"));
}

#[test]
fn rows_written_with_the_names_as_strings_read_back_and_unknown_names_are_corrupt() {
    let (_d, path) = tmp();
    let st = Store::open(&path).unwrap();
    st.conn
        .execute(
            "INSERT INTO jobs (job_id, step, uid, node, begin_ns, end_ns, state, hints) VALUES \
             (7, '', 1000, 'n1', 1, 2, 'COMPLETED', '{\"policy\":\"min-energy\",\"slowdown_pct\":5.0}')",
            [],
        )
        .unwrap();
    st.conn
        .execute(
            "INSERT INTO models (owner, gpu_type, tag, progress, knob, samples, settings, updated_ns) \
             VALUES ('uid:1000', 'H100', 'bert', 'sm-activity', 'sm-clock', '[]', '[1980.0]', 1)",
            [],
        )
        .unwrap();
    let jobs = st.query(&AcctQuery::default()).unwrap();
    assert_eq!((jobs[0].state, jobs[0].hints.policy), (JobState::Completed, Some(EnergyPolicy::MinEnergy)));
    assert_eq!(
        (st.models().unwrap()[0].progress, st.models().unwrap()[0].knob),
        (Progress::SmActivity, Knob::SmClock)
    );

    // The schema's CHECK refuses such a state; a file edited by hand may still hold one.
    st.conn.execute_batch("PRAGMA ignore_check_constraints = ON; UPDATE jobs SET state = 'FROZEN'").unwrap();
    let e = st.query(&AcctQuery::default()).unwrap_err().to_string();
    assert!(e.contains("unknown state \"FROZEN\""), "{e}");
    st.conn.execute("UPDATE jobs SET state = 'RUNNING', hints = '{\"policy\":\"fast\"}'", []).unwrap();
    let e = st.query(&AcctQuery::default()).unwrap_err().to_string();
    assert!(e.contains("not one of min-energy, balanced, perf"), "{e}");
    st.conn.execute("UPDATE models SET progress = 'steps'", []).unwrap();
    let e = st.models().unwrap_err().to_string();
    assert!(e.contains("unknown progress \"steps\""), "{e}");
    st.conn.execute("UPDATE models SET progress = 'file', knob = 'voltage'", []).unwrap();
    let e = st.models().unwrap_err().to_string();
    assert!(e.contains("unknown knob \"voltage\""), "{e}");
}

fn measured(tag: &str, updated_ns: i64, samples: usize) -> wattson_engine::Measurements {
    wattson_engine::Measurements {
        owner: ModelOwner::User(1000),
        gpu_type: "NVIDIA H100 80GB HBM3".into(),
        tag: tag.into(),
        progress: Progress::File,
        knob: Knob::PowerLimit,
        samples: (0..samples)
            .map(|i| wattson_engine::Sample::new(700.0 - i as f64, 0.1, 400.0, 1.0))
            .collect(),
        settings: vec![200.0, 700.0],
        updated_ns,
    }
}

#[test]
fn a_merge_takes_only_newer_workloads_and_a_drop_travels_as_a_mark() {
    let (_d, path) = tmp();
    let mut store = Store::open(&path).unwrap();
    store.save_model(&measured("a", 10, 3)).unwrap();
    store.save_model(&measured("b", 10, 3)).unwrap();
    // Newer "a", older "b", unknown "c": two taken.
    let taken =
        store.merge_models(&[measured("a", 20, 5), measured("b", 5, 9), measured("c", 1, 2)]).unwrap();
    assert_eq!(taken, 2);
    let owner = ModelOwner::User(1000);
    let get = |s: &Store, tag: &str| {
        s.model(&owner, "NVIDIA H100 80GB HBM3", tag, Progress::File, Knob::PowerLimit).unwrap().unwrap()
    };
    assert_eq!((get(&store, "a").updated_ns, get(&store, "a").samples.len()), (20, 5));
    assert_eq!((get(&store, "b").updated_ns, get(&store, "b").samples.len()), (10, 3));
    assert_eq!(get(&store, "c").samples.len(), 2);
    // A dropped model stays as a dated mark with no samples, and wins over older copies.
    store.drop_models(&owner, "NVIDIA H100 80GB HBM3", "a", 30).unwrap();
    assert!(get(&store, "a").is_dropped());
    assert_eq!(store.merge_models(&[measured("a", 25, 5)]).unwrap(), 0);
    assert_eq!(store.merge_models(&[measured("a", 40, 1)]).unwrap(), 1, "a later run's measurements win");
    // Merging what is stored changes nothing.
    let all = store.models().unwrap();
    assert_eq!(store.merge_models(&all).unwrap(), 0);
    // The same workload measured on the other knob is another workload: both are kept.
    let clocks = wattson_engine::Measurements { knob: Knob::SmClock, ..measured("b", 1, 3) };
    assert_eq!(store.merge_models(std::slice::from_ref(&clocks)).unwrap(), 1);
    let b_clocks = store.model(&owner, "NVIDIA H100 80GB HBM3", "b", Progress::File, Knob::SmClock).unwrap();
    assert_eq!(b_clocks, Some(clocks));
    assert_eq!(get(&store, "b").updated_ns, 10);
}

#[test]
fn a_jobs_node_share_is_kept_while_it_runs_after_it_ends_and_in_imports() {
    use wattson_types::scope::{EnergyScope, NodeShare};
    let dir = tempfile::tempdir().unwrap();
    let mut st = Store::open(&dir.path().join("w.db")).unwrap();
    let r = rec(42, "", 1000, 100, &[0]);
    st.begin_job(&r, Hold::Shared).unwrap();
    assert_eq!(st.running_jobs().unwrap()[0].node_share, None, "nothing measured yet");
    let share = NodeShare { scope: EnergyScope::GpuCpu, cpu_mj: Some(1500.5), dram_mj: None, node_mj: None };
    let stale = JobKey::job(7);
    st.save_node_shares(&[(r.key.clone(), share), (stale, share)]).unwrap();
    assert_eq!(st.running_jobs().unwrap()[0].node_share, Some(share));
    let done = st.end_job(&r.key, 200 * S, &r.gpus).unwrap();
    assert_eq!(done.node_share, Some(share));
    assert_eq!(done.scoped_energy_mj(), Ok(done.energy_mj() + 1500.5));
    let copy = JobRecord { key: JobKey::job(43), ..done.clone() };
    st.import([copy]).unwrap();
    let got = st.query(&AcctQuery { jobs: vec![JobKey::job(43)], ..AcctQuery::default() }).unwrap();
    assert_eq!(got[0].node_share, Some(share));
}

#[test]
fn how_a_running_record_holds_its_gpus_survives_a_reopen() {
    let (_d, path) = tmp();
    {
        let mut st = Store::open(&path).unwrap();
        st.begin_job(&rec(1, "", 1, 1, &[0]), Hold::Whole).unwrap();
        st.begin_job(&rec(2, "", 1, 1, &[1]), Hold::Shared).unwrap();
        st.begin_job(&rec(3, "", 1, 1, &[2]), Hold::Whole).unwrap();
        st.end_job(&JobKey::job(3), 2 * S, &[]).unwrap();
    }
    let st = Store::open(&path).unwrap();
    assert_eq!(st.running_whole().unwrap(), BTreeSet::from([JobKey::job(1)]));
}
