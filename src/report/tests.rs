use chrono::Utc;

use super::*;
use wattson_types::energy::{GpuMeter, GpuReading, MeterEvent, Method};
use wattson_types::job::{EnergyPolicy, Hints, JobGpu, JobKey, JobState};

const S: i64 = 1_000_000_000;

fn gpu(index: u32, energy_j: f64, peak_w: u32, method: Method) -> JobGpu {
    let mut meter = GpuMeter::begin(GpuReading { t_ns: 0, ..Default::default() });
    meter.energy_mj = energy_j * 1000.0;
    meter.peak_power_mw = peak_w * 1000;
    meter.method = method;
    meter.clock_sum_mhz = 1400 * 10;
    meter.clock_samples = 10;
    meter.util_sum_pct = 50 * 10;
    meter.util_samples = 10;
    JobGpu { index, uuid: format!("GPU-{index}"), name: "H100".into(), meter }
}

fn job(id: &str, name: &str, energy_j: f64) -> JobRecord {
    JobRecord {
        key: JobKey::parse(id).unwrap(),
        uid: 1000,
        user: Some("alice".into()),
        name: Some(name.into()),
        node: "gpu01".into(),
        begin_ns: 0,
        end_ns: Some(3600 * S),
        state: JobState::Completed,
        hints: Hints {
            policy: Some(EnergyPolicy::MinEnergy),
            slowdown_pct: None,
            tag: Some("bert".into()),
            gpu_freq: None,
            share: None,
        },
        policy: Some(EnergyPolicy::MinEnergy),
        gpus: vec![gpu(0, energy_j, 300, Method::Counter)],
        dvfs: None,
        node_share: None,
    }
}

fn cols(s: &str) -> Vec<Column> {
    Column::parse_list(s).unwrap()
}

#[test]
fn table_looks_like_sacct() {
    let recs = [job("42", "train", 1_500_000.0), job("42.batch", "a-very-long-name", 999.0)];
    let out = render_in(&recs, &cols("JobID,JobName,GPUEnergy,State"), Format::Table, 0, &Utc);
    let expected = "\
JobID           JobName      GPUEnergy      State \n\
------------ ---------- -------------- ---------- \n\
42                train          1.50M  COMPLETED \n\
42.batch     a-very-lo+            999  COMPLETED \n";
    assert_eq!(out, expected);
}

#[test]
fn parsable_p_has_a_trailing_bar_and_capital_p_does_not() {
    let recs = [job("7", "x", 1000.0)];
    let c = cols("jobid,GPUENERGY,gpuenergyraw");
    assert_eq!(
        render_in(&recs, &c, Format::Parsable, 0, &Utc),
        "JobID|GPUEnergy|GPUEnergyRaw|\n7|1K|1000|\n"
    );
    assert_eq!(render_in(&recs, &c, Format::Parsable2, 0, &Utc), "JobID|GPUEnergy|GPUEnergyRaw\n7|1K|1000\n");
    // Parsable output never truncates.
    let long = [job("8", "a-very-long-name", 0.0)];
    assert_eq!(render_in(&long, &cols("JobName"), Format::Parsable2, 0, &Utc), "JobName\na-very-long-name\n");
}

#[test]
fn derived_columns() {
    let mut r = job("9", "t", 0.0);
    let mut g1 = gpu(1, 360_000.0, 450, Method::Power);
    g1.meter.events.push(MeterEvent::CounterReset { t_ns: 5, estimated_gap_mj: 1.0 });
    g1.meter.events.push(MeterEvent::GpuLost { t_ns: 6 });
    g1.meter.clock_sum_mhz = 1200 * 10;
    g1.meter.util_sum_pct = 100 * 10;
    r.gpus = vec![gpu(0, 360_000.0, 300, Method::Counter), g1];
    // 720 kJ over 3600 s on 2 GPUs: 100 W per GPU.
    let c = cols(
        "NGPUs,GPUs,AvgGPUPower,PeakGPUPower,AvgSMClock,GPUUtil,Method,Events,Policy,Tag,User,UID,NodeList",
    );
    assert_eq!(
        render_in(&[r], &c, Format::Parsable2, 0, &Utc).lines().nth(1).unwrap(),
        "2|0,1|100W|450W|1300MHz|75%|counter+power|gpu1:counter-reset,gpu1:lost|min-energy|bert|alice|1000|gpu01"
    );
}

#[test]
fn the_share_hint_shows_yes_no_or_nothing() {
    let rows: Vec<JobRecord> = [Some(true), Some(false), None]
        .into_iter()
        .enumerate()
        .map(|(i, share)| {
            let mut r = job(&i.to_string(), "t", 0.0);
            r.hints.share = share;
            r
        })
        .collect();
    let out = render_in(&rows, &cols("JobID,Share"), Format::Parsable2, 0, &Utc);
    assert_eq!(out, "JobID|Share\n0|yes\n1|no\n2|\n");
    let json: serde_json::Value =
        serde_json::from_str(&render_in(&rows[..1], &DEFAULT_COLUMNS, Format::Json, 0, &Utc)).unwrap();
    assert_eq!(json["jobs"][0]["hints"]["share"], true);
}

#[test]
fn running_jobs_count_to_now_and_end_is_unknown() {
    let mut r = job("5", "t", 0.0);
    r.end_ns = None;
    r.state = JobState::Running;
    r.begin_ns = 1_700_000_000 * S;
    let now = r.begin_ns + (86_400 + 3600 + 60 + 1) * S;
    let out = render_in(&[r], &cols("Start,End,Elapsed,State"), Format::Parsable2, now, &Utc);
    assert_eq!(out.lines().nth(1).unwrap(), "2023-11-14T22:13:20|Unknown|1-01:01:01|RUNNING");
}

#[test]
fn json_has_full_values() {
    let mut r = job("42.0", "t", 1234.5678);
    r.gpus.push(gpu(3, 1000.0, 200, Method::Counter));
    let out = render_in(&[r], &DEFAULT_COLUMNS, Format::Json, 0, &Utc);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let j = &v["jobs"][0];
    assert_eq!(j["job_id"], 42);
    assert_eq!(j["step"], "0");
    assert!((j["energy_j"].as_f64().unwrap() - 2234.5678).abs() < 1e-9);
    assert_eq!(j["start"], "1970-01-01T00:00:00Z");
    assert_eq!(j["end"], "1970-01-01T01:00:00Z");
    assert_eq!(j["end_ns"], 3600 * S);
    assert_eq!(j["method"], "counter");
    assert_eq!(j["gpus"][1]["index"], 3);
    assert_eq!(j["gpus"][1]["peak_power_w"], 200.0);
    assert_eq!(j["hints"]["policy"], "min-energy");
}

#[test]
fn default_columns_header() {
    let out = render_in(&[], &DEFAULT_COLUMNS, Format::Parsable2, 0, &Utc);
    assert_eq!(out, "JobID|JobName|User|NGPUs|Elapsed|State|GPUEnergy|AvgGPUPower|Method\n");
}

#[test]
fn bad_column_list_names_the_field_and_lists_all() {
    let err = Column::parse_list("JobID,Bogus,User").unwrap_err();
    assert_eq!(
        err,
        "unknown field \"Bogus\"; allowed fields: JobID, JobName, User, UID, NodeList, NGPUs, GPUs, Start, End, \
         Elapsed, State, GPUEnergy, GPUEnergyRaw, AvgGPUPower, PeakGPUPower, AvgSMClock, GPUUtil, Method, Split, MIG, \
         Events, Policy, Tag, Share, Setting, Probes, Progress, PredSlowdown, Slowdown, EnergySaved, Source, Scope, \
         EnergyRaw, CPUEnergyRaw, DRAMEnergyRaw, NodeEnergyRaw"
    );
    assert!(Column::parse_list("").is_err());
    assert_eq!(cols(" jobid , gpuutil "), [Column::JobId, Column::GpuUtil]);
}

#[test]
fn sacct_layout_options_noheader_widths_delimiter_units() {
    let recs = vec![job("7", "train", 1500.0)];
    // %N right-justifies (JobID too), %-N left-justifies, as sacct's print_fields does.
    let (c, widths) = parse_fields("JobID%4,GPUEnergy%9,JobName%-7").unwrap();
    let style = Style { header: false, widths, ..Style::default() };
    assert_eq!(render_styled(&recs, &c, Format::Table, &style, 0, &Utc), "   7     1.50K train   \n");
    let style = Style { delimiter: ";".into(), unit: Some(units::Unit::K), ..Style::default() };
    let c = cols("JobID,JobName,GPUEnergy");
    assert_eq!(
        render_styled(&recs, &c, Format::Parsable, &style, 0, &Utc),
        "JobID;JobName;GPUEnergy;\n7;train;1.50K;\n"
    );
    let style = Style { unit: Some(units::Unit::M), header: false, ..Style::default() };
    assert_eq!(render_styled(&recs, &c, Format::Parsable2, &style, 0, &Utc), "7|train|0.00M\n");
    for bad in ["JobID%0", "JobID%x", "JobID%-", "JobID%--3", "JobID%1001"] {
        assert!(parse_fields(bad).is_err(), "{bad}");
    }
    assert_eq!(units::energy_in(3_000_000, units::Unit::M), "3M");
    assert!(units::Unit::parse("X").is_err());
}

#[test]
fn state_is_slurms_where_known_else_the_records() {
    let mut running = job("8", "eval", 10.0);
    running.state = JobState::Running;
    let recs = vec![job("7", "train", 1500.0), running, job("9", "x", 1.0)];
    let mut style = Style { header: false, ..Style::default() };
    style.slurm_states.insert("7".into(), SlurmState::Timeout);
    let c = cols("JobID,State");
    assert_eq!(
        render_styled(&recs, &c, Format::Parsable2, &style, 0, &Utc),
        "7|TIMEOUT\n8|RUNNING\n9|COMPLETED\n"
    );
    let json = render_styled(&recs[..1], &c, Format::Json, &style, 0, &Utc);
    assert!(
        json.contains("\"state\": \"TIMEOUT\"") && json.contains("\"record_state\": \"COMPLETED\""),
        "{json}"
    );
}

#[test]
fn each_part_of_the_energy_and_the_scope_are_shown_and_a_part_not_measured_says_so() {
    use wattson_types::scope::{EnergyScope, NodeShare};
    let share = NodeShare {
        scope: EnergyScope::GpuCpu,
        cpu_mj: Some(400_400.0),
        dram_mj: Some(49_600.0),
        node_mj: None,
    };
    let measured = JobRecord { node_share: Some(share), ..job("7", "train", 1500.0) };
    let node = JobRecord {
        node_share: Some(NodeShare { scope: EnergyScope::Node, ..share }),
        ..job("8", "train", 1500.0)
    };
    let old = job("9", "train", 1500.0);
    let c = cols("JobID,Scope,GPUEnergyRaw,CPUEnergyRaw,DRAMEnergyRaw,NodeEnergyRaw,EnergyRaw");
    assert_eq!(
        render_in(&[measured.clone(), node, old], &c, Format::Parsable2, 0, &Utc),
        "JobID|Scope|GPUEnergyRaw|CPUEnergyRaw|DRAMEnergyRaw|NodeEnergyRaw|EnergyRaw\n\
         7|gpu+cpu|1500|400|50|n/a|1950\n\
         8|node|1500|400|50|n/a|n/a\n\
         9|gpu|1500|n/a|n/a|n/a|1500\n"
    );
    let json: serde_json::Value =
        serde_json::from_str(&render_in(&[measured], &c, Format::Json, 0, &Utc)).unwrap();
    let parts = &json["jobs"][0]["energy_parts"];
    assert_eq!(parts["scope"], "gpu+cpu");
    assert_eq!((parts["cpu_energy_j"].as_f64(), parts["node_energy_j"].as_f64()), (Some(400.4), None));
    assert!((parts["scope_energy_j"].as_f64().unwrap() - 1950.0).abs() < 1e-6, "{parts}");
}
