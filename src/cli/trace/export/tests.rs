use super::*;

use wattson_sacct::summary::{JobSummary, admin_comment};
use wattson_types::job::{EnergyPolicy, Hints as JobHints, JobKey, JobRecord, JobState};
use wattson_types::summary::NodeSummary;

const SALT: &[u8] = b"a site's secret salt";

/// sacct 22.05's lines in [`FIELDS`] order: jobs, steps, two never started (one pending, one
/// cancelled while pending: Start = End, nothing allocated), one running, one without GPUs,
/// one of 0 s. Times as `SLURM_TIME_FORMAT=standard` prints them.
const SACCT: &str = "\
101|2026-11-30T10:00:00|2026-11-30T10:00:05|2026-11-30T11:00:05|02:00:00|billing=1,cpu=1,gres/gpu=2,mem=1000M,node=1|billing=2,cpu=2,gres/gpu:v100=2,gres/gpu=2,mem=1000M,node=1|gpu|alice|COMPLETED|wattson:policy=min-energy,slowdown=10%,defer=7200|
101.batch|2026-11-30T10:00:05|2026-11-30T10:00:05|2026-11-30T11:00:05||||||COMPLETED||
101.extern|2026-11-30T10:00:05|2026-11-30T10:00:05|2026-11-30T11:00:05||||||COMPLETED||
100|2026-11-30T09:59:00|2026-11-30T10:30:00|2026-11-30T10:40:00|1-00:00:00|billing=1,cpu=1,gres/gpu:v100=1,gres/gpu=1,node=1|billing=1,cpu=1,gres/gpu:v100=1,gres/gpu=1,node=1|debug|bob|TIMEOUT||
102|2026-11-30T10:01:00|Unknown|Unknown|01:00:00|billing=1,cpu=1,gres/gpu=1,node=1||gpu|alice|PENDING||
107|2026-11-30T10:01:30|2026-11-30T10:01:40|2026-11-30T10:01:40|00:01:00|billing=4,cpu=1,gres/gpu=4,node=1||gpu|alice|CANCELLED by 0||
103|2026-11-30T10:02:00|2026-11-30T10:02:10|Unknown|UNLIMITED|billing=1,cpu=1,gres/gpu=1,node=1|billing=1,cpu=1,gres/gpu=1,node=1|gpu|carol|RUNNING||
104|2026-11-30T10:03:00|2026-11-30T10:03:01|2026-11-30T10:13:01|10:00|billing=1,cpu=1,node=1|billing=1,cpu=1,mem=100M,node=1|cpu|dave|COMPLETED||
105|2026-11-30T10:04:00|2026-11-30T10:04:00|2026-11-30T10:04:00|10:00|billing=1,cpu=1,gres/gpu=1,node=1|billing=1,cpu=1,gres/gpu=1,node=1|gpu|dave|FAILED||
106|2026-11-30T10:05:00|2026-11-30T12:05:00|2026-11-30T12:35:00|Partition_Limit|billing=4,gres/gpu=4|billing=4,gres/gpu:v100=4,gres/gpu=4|gpu|bob|CANCELLED by 0|wattson:policy=perf,power=100%,deferred=2026-11-30T12:00:00Z|
";

fn cells(csv: &str) -> Vec<Vec<String>> {
    csv.lines().skip(1).map(|l| l.split(',').map(str::to_string).collect()).collect()
}

#[test]
fn jobs_become_rows_by_submission_and_the_rest_is_counted() {
    let e = export(SACCT, "s.txt", SALT).unwrap();
    assert_eq!(e.csv.lines().next(), Some(HEADER));
    assert_eq!(e.jobs, 3);
    let want = Skipped { steps: 2, never_started: 2, running: 1, no_gpus: 1, zero_length: 1 };
    assert_eq!(e.skipped, want);
    assert_eq!(e.origin.map(|o| o.to_string()).as_deref(), Some("2026-11-30 09:59:00"));
    let rows = cells(&e.csv);
    // job_id,submit,gpus,duration,time_limit,gpu_types,gpu_type,partition,user,energy_policy,slowdown_pct,defer_s,tag
    // 100: submitted first (time 0), asked for a v100, ran 10 min of its day; no wattson note.
    assert_eq!(rows[0][..8], ["100", "0", "1", "600", "86400", "v100", "v100", "debug"]);
    assert_eq!(rows[0][9..], ["", "", "", ""]);
    // 101: 60 s later, 2 GPUs of any type (it ran on v100s), an hour of a 2 h limit, 10% and 2 h.
    assert_eq!(rows[1][..8], ["101", "60", "2", "3600", "7200", "", "v100", "gpu"]);
    assert_eq!(rows[1][9..], ["min-energy", "10", "7200", ""]);
    // 106: deferred by job_submit to 12:00 without the window recorded: at least 6900 s asked.
    assert_eq!(rows[2][..8], ["106", "360", "4", "1800", "", "", "v100", "gpu"]);
    assert_eq!(rows[2][9..], ["perf", "0", "6900", ""]);
}

#[test]
fn users_are_hashed_with_the_salt_and_never_written() {
    let e = export(SACCT, "s.txt", SALT).unwrap();
    for name in ["alice", "bob", "carol", "dave"] {
        assert!(!e.csv.contains(name), "{name} in\n{}", e.csv);
    }
    let rows = cells(&e.csv);
    // bob's two jobs share one hash; alice's differs; another salt gives other hashes.
    assert_eq!(rows[0][8], rows[2][8]);
    assert_ne!(rows[0][8], rows[1][8]);
    assert_eq!(rows[0][8].len(), 24);
    let other = export(SACCT, "s.txt", b"another site's salt!").unwrap();
    assert_ne!(cells(&other.csv)[0][8], rows[0][8]);
    // HMAC-SHA256 (RFC 4231, test case 2: key "Jefe"), first 12 bytes.
    assert_eq!(user_hash(b"Jefe", "what do ya want for nothing?"), "5bdcc146bf60754e6a042426");
}

#[test]
fn the_simulator_reads_the_export_with_its_hints() {
    let e = export(SACCT, "s.txt", SALT).unwrap();
    let jobs = wattson_sim::trace::parse(&e.csv, "export.csv", wattson_sim::TraceFormat::Auto).unwrap();
    /// A job as the simulator read it: id, submit, GPUs, duration, limit, bound, window.
    type Read<'a> = (&'a str, f64, u32, f64, Option<f64>, Option<f64>, Option<f64>);
    let got: Vec<Read> = jobs
        .iter()
        .map(|j| (j.id.as_str(), j.submit, j.gpus, j.duration, j.time_limit, j.bound, j.defer_window))
        .collect();
    assert_eq!(
        got,
        [
            ("100", 0.0, 1, 600.0, Some(86400.0), None, None),
            ("101", 60.0, 2, 3600.0, Some(7200.0), Some(0.1), Some(7200.0)),
            ("106", 360.0, 4, 1800.0, None, Some(0.0), Some(6900.0)),
        ]
    );
    assert_eq!(jobs[0].gpu_types, ["v100"]);
}

#[test]
fn the_summary_s_hints_come_before_the_note_s() {
    let record = JobRecord {
        key: JobKey { job_id: 7, step: String::new() },
        uid: 1000,
        user: Some("erin".into()),
        name: None,
        node: "n1".into(),
        begin_ns: 0,
        end_ns: Some(1),
        state: JobState::Completed,
        hints: JobHints {
            policy: Some(EnergyPolicy::MinEnergy),
            slowdown_pct: Some(20.0),
            tag: Some("Bert-Large".into()),
            ..JobHints::default()
        },
        policy: Some(EnergyPolicy::MinEnergy),
        gpus: Vec::new(),
        dvfs: None,
        node_share: None,
    };
    let summary = JobSummary {
        job: 7,
        written: 1,
        nodes: vec![NodeSummary { node: "n1".into(), records: vec![record], ..NodeSummary::default() }],
        ..JobSummary::default()
    };
    // sacctmgr lower-cases what it sets: the note as it reads back after the summary is written.
    let comment =
        admin_comment("wattson:policy=min-energy,defer=3600", &summary).unwrap().to_ascii_lowercase();
    let line = format!(
        "7|2026-12-01T00:00:00|2026-12-01T00:30:00|2026-12-01T01:30:00|04:00:00|gres/gpu=1|gres/gpu=1|gpu|erin|COMPLETED|{comment}|\n"
    );
    let e = export(&line, "s.txt", SALT).unwrap();
    assert_eq!(cells(&e.csv)[0][9..], ["min-energy", "20", "3600", "Bert-Large"]);
    assert!(e.warnings.is_empty(), "{:?}", e.warnings);
    // An unreadable summary is said, with its line; the note's hints stand.
    let broken = line.replace(";ws1:", ";ws1:!!").replacen("7|", "8|", 1);
    let e = export(&format!("{line}{broken}"), "s.txt", SALT).unwrap();
    assert_eq!(e.warnings.len(), 1);
    assert!(e.warnings[0].starts_with("s.txt:2: unreadable wattson summary"), "{:?}", e.warnings);
    assert_eq!(cells(&e.csv)[1][9..], ["min-energy", "0", "3600", ""]);
}

#[test]
fn bad_lines_are_errors_naming_each_line() {
    let good = SACCT.lines().next().unwrap();
    let bad = [
        "200|2026-11-30|2026-11-30T10:00:05|2026-11-30T11:00:05|02:00:00|gres/gpu=1|gres/gpu=1|gpu|alice|COMPLETED||",
        "201|2026-11-30T10:00:00|2026-11-30T10:00:05|2026-11-30T11:00:05|2 hours|gres/gpu=1|gres/gpu=1|gpu|alice|COMPLETED||",
        "202|2026-11-30T10:00:00|2026-11-30T10:00:05|2026-11-30T11:00:05|02:00:00|gres/gpu=1|gres/gpu=two|gpu|alice|COMPLETED||",
        "203|2026-11-30T10:00:00|2026-11-30T10:00:05",
        "204|2026-11-30T10:00:00|2026-11-30T12:00:05|2026-11-30T11:00:05|02:00:00|gres/gpu=1|gres/gpu=1|gpu|alice|COMPLETED||",
    ];
    let text = format!("{good}\n{}\n", bad.join("\n"));
    let e = export(&text, "s.txt", SALT).unwrap_err();
    let lines: Vec<&str> = e.lines().collect();
    assert_eq!(lines.len(), 5, "{e}");
    assert!(lines[0].starts_with("s.txt:2: Submit = \"2026-11-30\": allowed YYYY-MM-DDTHH:MM:SS"), "{e}");
    assert!(lines[1].starts_with("s.txt:3: Timelimit = \"2 hours\": allowed [D-]HH:MM:SS"), "{e}");
    assert!(lines[2].starts_with("s.txt:4: AllocTRES = \"gres/gpu=two\": gres/gpu = \"two\""), "{e}");
    assert!(lines[3].starts_with("s.txt:5: 3 fields; expected 12"), "{e}");
    assert!(lines[4].starts_with("s.txt:6: End 2026-11-30T11:00:05 is before Start"), "{e}");
}

#[test]
fn time_limits_in_every_form_slurm_prints() {
    let at = "s.txt:1";
    for (text, want) in [
        ("00:30:00", Some(1800)),
        ("1-00:00:00", Some(86_400)),
        ("2-12:30:15", Some(2 * 86_400 + 12 * 3600 + 30 * 60 + 15)),
        ("1-06", Some(86_400 + 6 * 3600)),
        ("1-06:30", Some(86_400 + 6 * 3600 + 1800)),
        ("45", Some(2700)),
        ("45:30", Some(2730)),
        ("UNLIMITED", None),
        ("Partition_Limit", None),
        ("", None),
    ] {
        assert_eq!(time_limit(text, at), Ok(want), "{text}");
    }
    for text in ["-1", "1-2:3:4:5", "1:-2:00", "soon"] {
        assert!(time_limit(text, at).is_err(), "{text}");
    }
}

#[test]
fn gpus_and_their_types_from_tres() {
    let g = |t: &str| gpus(t, "AllocTRES", "s:1").unwrap();
    assert_eq!(g("billing=2,cpu=2,gres/gpu:a100=2,gres/gpu=2,mem=1G,node=1"), (2, vec!["a100".to_string()]));
    assert_eq!(g("gres/gpu:a100=1,gres/gpu:v100=2"), (3, vec!["a100".to_string(), "v100".to_string()]));
    assert_eq!(g("cpu=1,gres/gpumem=4000,gres/gpuutil=50,gres/shard=2"), (0, vec![]));
    assert_eq!(g(""), (0, vec![]));
}

#[test]
fn cells_with_commas_or_quotes_are_quoted() {
    assert_eq!(quoted("plain"), "plain");
    assert_eq!(quoted("a,b"), "\"a,b\"");
    assert_eq!(quoted("say \"hi\""), "\"say \"\"hi\"\"\"");
}

/// What Slurm 22.05's sacct printed for the Slurm lab's jobs (`tests/slurm/trace_export.rs`):
/// a 2-GPU job with `--energy-slowdown=10`, a typed 1-GPU job with `--energy-defer=2h`, a
/// 4-GPU job, a job without GPUs, and their batch steps.
const LAB_22_05: &str = include_str!("sacct-22.05.txt");

#[test]
fn the_labs_real_sacct_output_reads_as_recorded() {
    let e = export(LAB_22_05, "lab.txt", SALT).unwrap();
    assert_eq!(e.skipped, Skipped { steps: 4, no_gpus: 1, ..Skipped::default() });
    let rows = cells(&e.csv);
    // Read off the file: all submitted at 12:01:43; 46-49, 46-47 and 49-51 ran.
    assert_eq!(rows[0][..8], ["36341000", "0", "2", "3", "300", "", "v100", "lab"]);
    assert_eq!(rows[0][9..], ["min-energy", "10", "0", ""]);
    assert_eq!(rows[1][..8], ["36341001", "0", "1", "1", "600", "v100", "v100", "lab"]);
    assert_eq!(rows[1][9..], ["balanced", "0", "7200", ""]);
    assert_eq!(rows[2][..8], ["36341002", "0", "4", "2", "180", "", "v100", "lab"]);
    assert_eq!(rows[2][9..], ["balanced", "0", "0", ""]);
    assert_eq!(rows.len(), 3);
}
