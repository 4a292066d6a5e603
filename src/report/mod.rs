//! `sacct`-style reports for `wattson acct`: columns, the fixed-width table, `-p`/`-P`
//! parsable output, and JSON. Pure: the caller passes the records and `now`.
//!
//! Table layout as sacct's (Slurm `src/common/print_fields.c`): every field is padded to its
//! column width and followed by one space (so lines end with a space), right-aligned except
//! JobID (left), the header likewise, then a line of `-` per column; a value wider than its
//! column keeps its first `width - 1` characters and ends in `+`. (sacct does not truncate
//! its integer columns; wattson truncates every column the same way.) Empty values print blank.

mod cells;
pub mod parts;
pub mod plot;
pub mod time;
pub mod totals;
pub mod units;

use std::collections::BTreeMap;

use chrono::{Local, TimeZone};
use serde_json::{Value, json};
use strum::{EnumString, IntoStaticStr, VariantArray};

use cells::{cell, job_json};
pub use time::{TIME_FORMS, format_time, parse_time};
use wattson_sacct::SlurmState;
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

#[cfg(test)]
mod tests;
