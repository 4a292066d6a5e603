//! `sacct`-style reports for `wattson acct`: columns, the fixed-width table, `-p`/`-P`
//! parsable output, and JSON. Pure: the caller passes the records and `now`.
//!
//! Table layout as sacct's (Slurm `src/common/print_fields.c`): every field is padded to its
//! column width and followed by one space (so lines end with a space), right-aligned except
//! JobID (left), the header likewise, then a line of `-` per column; a value wider than its
//! column keeps its first `width - 1` characters and ends in `+`. (sacct does not truncate
//! its integer columns; wattson truncates every column the same way.) Empty values print blank.

pub mod parts;
pub mod plot;
pub mod time;
pub mod totals;
pub mod units;

use std::collections::BTreeMap;

use chrono::{Local, SecondsFormat, TimeZone, Utc};
use serde_json::{Value, json};
use strum::{EnumString, IntoStaticStr, VariantArray};

pub use time::{TIME_FORMS, format_time, parse_time};
use wattson_sacct::SlurmState;
use wattson_types::energy::MeterEvent;
use wattson_types::job::{JobRecord, JobState};

/// A report column. Names (see [`Column::name`]) are matched case-insensitively; the variants
/// are in the order `--helpformat` lists them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, EnumString, IntoStaticStr, VariantArray)]
#[strum(ascii_case_insensitive)]
pub enum Column {
    /// `42`, `42.batch`, `42.0`.
    #[strum(serialize = "JobID")]
    JobId,
    /// Job name.
    JobName,
    /// User name (the uid when the name is unknown).
    User,
    /// Numeric uid.
    #[strum(serialize = "UID")]
    Uid,
    /// Node the record was taken on.
    NodeList,
    /// Number of GPUs.
    #[strum(serialize = "NGPUs")]
    NGpus,
    /// GPU indices, e.g. `0,1`.
    #[strum(serialize = "GPUs")]
    Gpus,
    /// Begin time.
    Start,
    /// End time; `Unknown` while running.
    End,
    /// `[D-]HH:MM:SS` up to the end, or up to now while running.
    Elapsed,
    /// `RUNNING` or `COMPLETED`.
    State,
    /// Total GPU energy, formatted like sacct's ConsumedEnergy.
    #[strum(serialize = "GPUEnergy")]
    GpuEnergy,
    /// Total GPU energy in whole joules, like ConsumedEnergyRaw.
    #[strum(serialize = "GPUEnergyRaw")]
    GpuEnergyRaw,
    /// Mean power per GPU over the elapsed time: energy / elapsed / NGPUs, in W.
    #[strum(serialize = "AvgGPUPower")]
    AvgGpuPower,
    /// Highest power of any one of the job's GPUs, in W.
    #[strum(serialize = "PeakGPUPower")]
    PeakGpuPower,
    /// Mean over the GPUs of each GPU's mean SM clock, in MHz.
    #[strum(serialize = "AvgSMClock")]
    AvgSmClock,
    /// Mean over the GPUs of each GPU's mean utilisation, in percent.
    #[strum(serialize = "GPUUtil")]
    GpuUtil,
    /// `counter`, `power` or `counter+power`.
    Method,
    /// How a GPU shared with other jobs was divided: `sm-share`, `equal`, `sm-share+equal` or
    /// `mig-slices`; empty where the job had its GPUs to itself.
    Split,
    /// The MIG instances the job held, by profile (`3g.40gb,1g.10gb`); empty on whole GPUs.
    #[strum(serialize = "MIG")]
    Mig,
    /// Meter events, e.g. `gpu1:counter-reset,gpu0:lost`.
    Events,
    /// Energy policy that ran (the site's decision, which may differ from the hint).
    Policy,
    /// Workload tag hint.
    Tag,
    /// The GPU-sharing opt-in (`--energy-share`, or the partition's default): `yes`, `no`,
    /// or empty where the job gave none.
    Share,
    /// Power limit the DVFS models settled on (`probing` until then).
    Setting,
    /// Power limits the models measured in this run.
    Probes,
    /// How throughput was measured: `file` (the job's own count) or `sm-activity`.
    Progress,
    /// The model's slowdown at the setting against the highest limit.
    PredSlowdown,
    /// Measured slowdown at the setting against the highest limit.
    Slowdown,
    /// Estimate: energy the settled part would have taken at the highest limit minus what
    /// it took.
    EnergySaved,
    /// Where the row's figures come from: `node` (this node's wattsond), `summary` (the job's
    /// wattson summary in Slurm's accounting) or `slurm` (Slurm's own energy figure, for nodes
    /// that gave no summary).
    Source,
    /// What the job's figure in Slurm covers: `gpu`, `gpu+cpu` or `node` (`[energy] scope`).
    Scope,
    /// The energy of that scope, whole J (`n/a` where a part it needs was not measured).
    EnergyRaw,
    /// The job's share of the CPU packages' RAPL energy, whole J (`n/a`: not measured).
    #[strum(serialize = "CPUEnergyRaw")]
    CpuEnergyRaw,
    /// The job's share of the DRAM's RAPL energy, whole J (`n/a`: not measured).
    #[strum(serialize = "DRAMEnergyRaw")]
    DramEnergyRaw,
    /// The job's share of the node's energy from its BMC, whole J (`n/a`: not measured).
    NodeEnergyRaw,
}

/// Where a row's figures come from.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub enum Source {
    /// This node's wattsond, or its store.
    #[default]
    Node,
    /// The job's wattson summary in Slurm's accounting.
    Summary,
    /// Slurm's own accounting (its energy figure in J, where it has one): the nodes of the job
    /// that gave no summary.
    Slurm(Option<f64>),
}

/// Where each record's figures come from, by (node, job or step id); absent: [`Source::Node`].
pub type Sources = BTreeMap<(String, String), Source>;

/// Where `r`'s figures come from, as `sources` says.
pub fn source_of(sources: &Sources, r: &JobRecord) -> Source {
    sources.get(&(r.node.clone(), r.key.to_string())).copied().unwrap_or_default()
}

impl Source {
    /// `r`'s GPU energy in J: its meters', or Slurm's figure for a row from Slurm.
    pub fn energy_j(self, r: &JobRecord) -> f64 {
        match self {
            Source::Slurm(energy) => energy.unwrap_or(0.0),
            Source::Node | Source::Summary => r.energy_j(),
        }
    }

    /// `node`, `summary` or `slurm`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Node => "node",
            Source::Summary => "summary",
            Source::Slurm(_) => "slurm",
        }
    }
}

/// `wattson acct`'s columns when none are asked for.
pub const DEFAULT_COLUMNS: [Column; 9] = [
    Column::JobId,
    Column::JobName,
    Column::User,
    Column::NGpus,
    Column::Elapsed,
    Column::State,
    Column::GpuEnergy,
    Column::AvgGpuPower,
    Column::Method,
];

impl Column {
    /// Every column, in the order `--helpformat` lists them.
    pub const ALL: &'static [Column] = Column::VARIANTS;

    /// The column's name as printed in headers and accepted by [`Column::parse_list`].
    pub fn name(self) -> &'static str {
        self.into()
    }

    /// Table width, left-aligned. Widths follow sacct's where it has the field
    /// (JobID -12, JobName 10, User 9, UID 6, NodeList 15, Start/End 19, Elapsed/State 10,
    /// ConsumedEnergy 14, ConsumedEnergyRaw 17).
    fn spec(self) -> (usize, bool) {
        match self {
            Column::JobId => (12, true),
            Column::JobName => (10, false),
            Column::User => (9, false),
            Column::Uid => (6, false),
            Column::NodeList => (15, false),
            Column::NGpus => (5, false),
            Column::Gpus => (10, false),
            Column::Start => (19, false),
            Column::End => (19, false),
            Column::Elapsed => (10, false),
            Column::State => (10, false),
            Column::GpuEnergy => (14, false),
            Column::GpuEnergyRaw => (17, false),
            Column::AvgGpuPower => (11, false),
            Column::PeakGpuPower => (12, false),
            Column::AvgSmClock => (10, false),
            Column::GpuUtil => (7, false),
            Column::Method => (13, false),
            Column::Split => (14, false),
            Column::Mig => (16, false),
            Column::Events => (24, false),
            Column::Policy => (10, false),
            Column::Tag => (12, false),
            Column::Share => (5, false),
            Column::Setting => (8, false),
            Column::Probes => (6, false),
            Column::Progress => (11, false),
            Column::PredSlowdown => (12, false),
            Column::Slowdown => (8, false),
            Column::EnergySaved => (14, false),
            Column::Source => (7, false),
            Column::Scope => (7, false),
            Column::EnergyRaw | Column::CpuEnergyRaw | Column::DramEnergyRaw | Column::NodeEnergyRaw => {
                (13, false)
            }
        }
    }

    /// Parses one column name, case-insensitively.
    pub fn parse(s: &str) -> Option<Column> {
        s.trim().parse().ok()
    }

    /// Parses a comma-separated list like `--format JobID,User,GPUEnergy`. The error names
    /// the bad field and lists every allowed one.
    pub fn parse_list(s: &str) -> Result<Vec<Column>, String> {
        let mut out = Vec::new();
        for field in s.split(',').map(str::trim).filter(|f| !f.is_empty()) {
            match Column::parse(field) {
                Some(c) => out.push(c),
                None => {
                    let allowed: Vec<&str> = Column::ALL.iter().map(|c| c.name()).collect();
                    return Err(format!("unknown field {field:?}; allowed fields: {}", allowed.join(", ")));
                }
            }
        }
        if out.is_empty() {
            return Err("no fields given".to_string());
        }
        Ok(out)
    }
}

/// Layout beyond the columns, as sacct's options set it: `-n` (no header), `-o Field%N`
/// (column widths), `--delimiter`, `--units`; and Slurm's own job states where known.
#[derive(Debug, Clone)]
pub struct Style {
    /// Print the header (and, in a table, the line of dashes).
    pub header: bool,
    /// Width of each column where `Field%N` set one, by position.
    pub widths: Vec<Option<Width>>,
    /// Separator of parsable output.
    pub delimiter: String,
    /// Energy in this fixed unit instead of the largest that fits.
    pub unit: Option<units::Unit>,
    /// Slurm's state of each job and step by id (`42`, `42.batch`), from its accounting;
    /// a record with none shows wattson's own (RUNNING or COMPLETED).
    pub slurm_states: BTreeMap<String, SlurmState>,
    /// Where each record's figures come from.
    pub sources: Sources,
}

impl Default for Style {
    fn default() -> Style {
        Style {
            header: true,
            widths: Vec::new(),
            delimiter: "|".to_string(),
            unit: None,
            slurm_states: BTreeMap::new(),
            sources: BTreeMap::new(),
        }
    }
}

impl Style {
    /// Where `r`'s figures come from.
    pub fn source(&self, r: &JobRecord) -> Source {
        source_of(&self.sources, r)
    }

    /// `r`'s GPU energy in J ([`Source::energy_j`]).
    pub fn energy_j(&self, r: &JobRecord) -> f64 {
        self.source(r).energy_j(r)
    }

    /// The job's Slurm state if known, else the record's.
    pub fn state(&self, r: &JobRecord) -> SlurmState {
        self.slurm_states.get(&r.key.to_string()).copied().unwrap_or(match r.state {
            JobState::Running => SlurmState::Running,
            JobState::Completed => SlurmState::Completed,
        })
    }
}

/// A column width set by `-o Field%N` (right-justified, as sacct does) or `Field%-N`
/// (left-justified).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Width {
    /// Characters.
    pub chars: usize,
    /// Left-justified.
    pub left: bool,
}

/// Parses `-o`'s list, `Field`, `Field%N` or `Field%-N`, like `JobID%-20,User,GPUEnergy%8`;
/// the columns, and each one's width if given.
pub fn parse_fields(list: &str) -> Result<(Vec<Column>, Vec<Option<Width>>), String> {
    let mut names = Vec::new();
    let mut widths = Vec::new();
    for field in list.split(',').map(str::trim).filter(|f| !f.is_empty()) {
        let (name, width) = match field.split_once('%') {
            Some((name, n)) => {
                let (left, digits) = match n.strip_prefix('-') {
                    Some(rest) => (true, rest),
                    None => (false, n),
                };
                match digits.parse::<usize>() {
                    Ok(chars) if (1..=1000).contains(&chars) => (name, Some(Width { chars, left })),
                    _ => return Err(format!("{field:?}: the width after % must be a number from 1 to 1000")),
                }
            }
            None => (field, None),
        };
        names.push(name);
        widths.push(width);
    }
    Ok((Column::parse_list(&names.join(","))?, widths))
}

/// Output format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Fixed-width table (sacct's default).
    Table,
    /// `-p`/`--parsable`: `|` after every field, the last included.
    Parsable,
    /// `-P`/`--parsable2`: `|` between fields, none at line end.
    Parsable2,
    /// `--json`: `{"jobs":[...]}` with full, unformatted values.
    Json,
}

/// Renders `records` in local time. `now_ns` is the end of running jobs' elapsed time.
pub fn render(records: &[JobRecord], columns: &[Column], format: Format, now_ns: i64) -> String {
    render_in(records, columns, format, now_ns, &Local)
}

/// [`render`] with Start/End in time zone `tz`.
pub fn render_in<Tz: TimeZone>(
    records: &[JobRecord],
    columns: &[Column],
    format: Format,
    now_ns: i64,
    tz: &Tz,
) -> String
where
    Tz::Offset: std::fmt::Display,
{
    render_styled(records, columns, format, &Style::default(), now_ns, tz)
}

/// [`render_in`] laid out as `style` says.
pub fn render_styled<Tz: TimeZone>(
    records: &[JobRecord],
    columns: &[Column],
    format: Format,
    style: &Style,
    now_ns: i64,
    tz: &Tz,
) -> String
where
    Tz::Offset: std::fmt::Display,
{
    let cell = |r: &JobRecord, c: Column| cell(r, c, style, now_ns, tz);
    let width = |i: usize, c: Column| {
        let (chars, left) = c.spec();
        style.widths.get(i).copied().flatten().unwrap_or(Width { chars, left })
    };
    let mut out = String::new();
    match format {
        Format::Json => {
            let jobs: Vec<Value> = records.iter().map(|r| job_json(r, style, now_ns)).collect();
            out = serde_json::to_string_pretty(&json!({ "jobs": jobs })).unwrap_or_default();
            out.push('\n');
        }
        Format::Parsable | Format::Parsable2 => {
            let trailing = if format == Format::Parsable { style.delimiter.as_str() } else { "" };
            let line = |out: &mut String, cells: Vec<String>| {
                out.push_str(&cells.join(&style.delimiter));
                out.push_str(trailing);
                out.push('\n');
            };
            if style.header {
                line(&mut out, columns.iter().map(|c| c.name().to_string()).collect());
            }
            for r in records {
                line(&mut out, columns.iter().map(|&c| cell(r, c)).collect());
            }
        }
        Format::Table => {
            let row = |out: &mut String, cells: &mut dyn Iterator<Item = (usize, Column, String)>| {
                for (i, c, v) in cells {
                    let w = width(i, c);
                    out.push_str(&fit(&v, w.chars, w.left));
                    out.push(' ');
                }
                out.push('\n');
            };
            let each = || columns.iter().copied().enumerate();
            if style.header {
                row(&mut out, &mut each().map(|(i, c)| (i, c, c.name().to_string())));
                row(&mut out, &mut each().map(|(i, c)| (i, c, "-".repeat(width(i, c).chars))));
            }
            for r in records {
                row(&mut out, &mut each().map(|(i, c)| (i, c, cell(r, c))));
            }
        }
    }
    out
}

/// Pads `v` to `width` characters, or cuts it to `width - 1` characters and a `+`.
fn fit(v: &str, width: usize, left: bool) -> String {
    let n = v.chars().count();
    let v = if n > width {
        v.chars().take(width.saturating_sub(1)).chain(['+']).collect()
    } else {
        v.to_string()
    };
    if left { format!("{v:<width$}") } else { format!("{v:>width$}") }
}

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
fn cell<Tz: TimeZone>(r: &JobRecord, c: Column, style: &Style, now_ns: i64, tz: &Tz) -> String
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
fn job_json(r: &JobRecord, style: &Style, now_ns: i64) -> Value {
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

#[cfg(test)]
mod tests;
