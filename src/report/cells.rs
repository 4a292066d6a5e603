//! One record's values: the table's cells and the JSON object of `wattson acct --json`.

use chrono::{SecondsFormat, TimeZone, Utc};
use serde_json::{Value, json};
use wattson_types::energy::MeterEvent;
use wattson_types::job::JobRecord;

use super::{Column, Style, format_time, parts, time, units};

/// Mean power per GPU in W over the elapsed time; `None` for no GPUs or no time.
fn avg_power_w(r: &JobRecord, now_ns: i64) -> Option<f64> {
    let secs = r.elapsed_s(now_ns);
    (secs > 0.0 && !r.gpus.is_empty()).then(|| r.energy_j() / secs / r.gpus.len() as f64)
}

fn peak_power_w(r: &JobRecord) -> Option<f64> {
    r.gpus.iter().map(|g| g.meter.peak_power_mw).max().map(|mw| f64::from(mw) / 1000.0)
}

fn mean(values: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let v: Vec<f64> = values.flatten().collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn avg_sm_clock(r: &JobRecord) -> Option<f64> {
    mean(r.gpus.iter().map(|g| g.meter.avg_sm_clock_mhz()))
}

fn avg_util(r: &JobRecord) -> Option<f64> {
    mean(r.gpus.iter().map(|g| g.meter.avg_util_pct()))
}

/// `gpu1:counter-reset,gpu0:lost`, in GPU order then event order.
fn events_text(r: &JobRecord) -> String {
    let all: Vec<String> = r
        .gpus
        .iter()
        .flat_map(|g| {
            // Settings are not meter trouble: `--plot` and `--json` show them.
            let trouble = g.meter.events.iter().filter(|e| !matches!(e, MeterEvent::Setting { .. }));
            trouble.map(move |e| format!("gpu{}:{}", g.index, <&str>::from(e)))
        })
        .collect();
    all.join(",")
}

/// The text of one cell (untruncated).
pub(super) fn cell<Tz: TimeZone>(r: &JobRecord, c: Column, style: &Style, now_ns: i64, tz: &Tz) -> String
where
    Tz::Offset: std::fmt::Display,
{
    let opt = |v: Option<f64>, unit: &str| v.map(|x| format!("{x:.0}{unit}")).unwrap_or_default();
    match c {
        Column::JobId => r.key.to_string(),
        Column::JobName => r.name.clone().unwrap_or_default(),
        Column::User => r.user.clone().unwrap_or_else(|| r.uid.to_string()),
        Column::Uid => r.uid.to_string(),
        Column::NodeList => r.node.clone(),
        Column::NGpus => r.gpus.len().to_string(),
        Column::Gpus => r.gpus.iter().map(|g| g.index.to_string()).collect::<Vec<_>>().join(","),
        Column::Start => format_time(r.begin_ns, tz),
        Column::End => r.end_ns.map(|t| format_time(t, tz)).unwrap_or_else(|| "Unknown".to_string()),
        Column::Elapsed => units::elapsed(time::whole_secs(r.begin_ns, r.end_ns.unwrap_or(now_ns))),
        Column::State => style.state(r).as_str().to_string(),
        Column::GpuEnergy => match style.unit {
            Some(unit) => units::energy_in(units::joules_raw(style.energy_j(r)), unit),
            None => units::energy(units::joules_raw(style.energy_j(r))),
        },
        Column::GpuEnergyRaw => units::joules_raw(style.energy_j(r)).to_string(),
        Column::AvgGpuPower => opt(avg_power_w(r, now_ns), "W"),
        Column::PeakGpuPower => opt(peak_power_w(r), "W"),
        Column::AvgSmClock => opt(avg_sm_clock(r), "MHz"),
        Column::GpuUtil => opt(avg_util(r), "%"),
        Column::Method => r.method().map(|m| m.as_str().to_string()).unwrap_or_default(),
        Column::Split => r.split().map(|s| s.as_str().to_string()).unwrap_or_default(),
        Column::Mig => {
            r.gpus.iter().flat_map(|g| &g.meter.mig).map(|m| m.profile.as_str()).collect::<Vec<_>>().join(",")
        }
        Column::Events => events_text(r),
        // What ran; records from before decisions were recorded show what was asked.
        Column::Policy => r.policy.or(r.hints.policy).map(|p| p.to_string()).unwrap_or_default(),
        Column::Tag => r.hints.tag.clone().unwrap_or_default(),
        Column::Share => {
            r.hints.share.map(|s| wattson_types::job::share_word(s).to_string()).unwrap_or_default()
        }
        Column::Setting => match &r.dvfs {
            Some(d) => {
                d.setting.map(|v| format!("{v:.0}{}", d.knob.unit())).unwrap_or_else(|| "probing".to_string())
            }
            None => String::new(),
        },
        Column::Probes => r.dvfs.as_ref().map(|d| d.probed.len().to_string()).unwrap_or_default(),
        Column::Progress => {
            r.dvfs.as_ref().and_then(|d| d.progress).map(|p| p.as_str().to_string()).unwrap_or_default()
        }
        Column::PredSlowdown => percent(r.dvfs.as_ref().and_then(|d| d.predicted_slowdown)),
        Column::Slowdown => percent(r.dvfs.as_ref().and_then(|d| d.measured_slowdown)),
        Column::EnergySaved => r
            .dvfs
            .as_ref()
            .and_then(|d| d.energy_saved_j)
            .map(|j| {
                let text = units::energy(units::joules_raw(j.abs()));
                if j < 0.0 { format!("-{text}") } else { text }
            })
            .unwrap_or_default(),
        Column::Source => style.source(r).as_str().to_string(),
        Column::Scope => parts::scope(r).to_string(),
        Column::EnergyRaw => parts::cell(r, parts::Part::Scoped),
        Column::CpuEnergyRaw => parts::cell(r, parts::Part::Cpu),
        Column::DramEnergyRaw => parts::cell(r, parts::Part::Dram),
        Column::NodeEnergyRaw => parts::cell(r, parts::Part::Node),
    }
}

/// A fraction as a percentage with one decimal, e.g. `8.7%`; blank when unknown.
fn percent(v: Option<f64>) -> String {
    v.map(|x| format!("{:.1}%", 100.0 * x)).unwrap_or_default()
}

fn rfc3339(ns: i64) -> String {
    Utc.timestamp_nanos(ns).to_rfc3339_opts(SecondsFormat::AutoSi, true)
}

/// One record with full values, for `--json`: `state` is Slurm's where known, `record_state`
/// wattson's own.
pub(super) fn job_json(r: &JobRecord, style: &Style, now_ns: i64) -> Value {
    let gpus: Vec<Value> = r
        .gpus
        .iter()
        .map(|g| {
            let m = &g.meter;
            json!({
                "index": g.index,
                "uuid": g.uuid,
                "name": g.name,
                "energy_j": m.energy_mj / 1000.0,
                "first_reading_ns": m.begin_ns,
                "last_reading_ns": m.last.t_ns,
                "method": m.method.as_str(),
                "split": m.split.map(|s| s.as_str()),
                "mig": m.mig,
                "peak_power_w": f64::from(m.peak_power_mw) / 1000.0,
                "avg_sm_clock_mhz": m.avg_sm_clock_mhz(),
                "avg_util_pct": m.avg_util_pct(),
                "lost": m.lost,
                "events": m.events,
            })
        })
        .collect();
    json!({
        "job_id": r.key.job_id,
        "step": r.key.step,
        "id": r.key.to_string(),
        "name": r.name,
        "uid": r.uid,
        "user": r.user,
        "node": r.node,
        "state": style.state(r).as_str(),
        "source": style.source(r).as_str(),
        "record_state": r.state.as_str(),
        "begin_ns": r.begin_ns,
        "end_ns": r.end_ns,
        "start": rfc3339(r.begin_ns),
        "end": r.end_ns.map(rfc3339),
        "elapsed_s": r.elapsed_s(now_ns),
        "energy_j": style.energy_j(r),
        "avg_gpu_power_w": avg_power_w(r, now_ns),
        "peak_gpu_power_w": peak_power_w(r),
        "avg_sm_clock_mhz": avg_sm_clock(r),
        "gpu_util_pct": avg_util(r),
        "method": r.method().map(|m| m.as_str()),
        "split": r.split().map(|s| s.as_str()),
        "events": events_text(r),
        "hints": r.hints,
        "dvfs": r.dvfs,
        "gpus": gpus,
        "energy_parts": parts::json_fields(r),
    })
}
