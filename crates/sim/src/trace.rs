//! Job traces: the ITP trace as published by ElasticFlow and a generic CSV for `sacct` exports.
//!
//! ITP columns: `job_id, submission_time, num_iteration, model_name, deadline, batch_size,
//! num_gpu, duration`. Generic columns: `submit, gpus, duration[, tag]` (seconds, GPUs,
//! seconds at full speed, a workload tag). The format is taken from the header unless forced.
//! Either layout may add the optional columns `time_limit` (the limit the user asked Slurm for,
//! s), `gpu_types` (the GPU types the job accepts, `;`-separated) and `gpu_fraction` (the share
//! of one GPU a 1-GPU job asks for, on shared GPUs), `slowdown_pct` (the slowdown bound the
//! user gave, %) and `defer_s` (the deferral window the user asked for, s); an empty cell means
//! "not given" (a hint not given is drawn from the cluster file's `[hints]`). A generic trace may
//! name its jobs in a `job_id` column. Other columns (`wattson trace export` adds `user`,
//! `partition`, `gpu_type`, `energy_policy`) are not read.
//! Errors read `file:line: what is wrong, what is allowed`.

use super::SimError;

/// Which layout a trace file has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceFormat {
    /// Decide from the header.
    Auto,
    /// ElasticFlow's ITP layout.
    Itp,
    /// `submit,gpus,duration[,tag]`.
    Generic,
}

/// One job of a trace.
#[derive(Debug, Clone, PartialEq)]
pub struct TraceJob {
    /// Job name from the trace (or its line number).
    pub id: String,
    /// Submission time (s since the trace's origin).
    pub submit: f64,
    /// GPUs asked for.
    pub gpus: u32,
    /// Run time at full clocks (s).
    pub duration: f64,
    /// Workload tag (ITP model name), empty when unknown.
    pub tag: String,
    /// Batch size, when the trace gives one.
    pub batch: Option<u32>,
    /// Time limit the user asked for (s), when the trace gives one.
    pub time_limit: Option<f64>,
    /// GPU types the job accepts (empty: any).
    pub gpu_types: Vec<String>,
    /// Share of one GPU the job asks for (1: whole GPUs; below 1 only for 1-GPU jobs).
    pub gpu_fraction: f64,
    /// Slowdown bound the user gave (fraction), when the trace gives one.
    pub bound: Option<f64>,
    /// Deferral window the user asked for (s), when the trace gives one.
    pub defer_window: Option<f64>,
}

const ITP: [&str; 8] = [
    "job_id",
    "submission_time",
    "num_iteration",
    "model_name",
    "deadline",
    "batch_size",
    "num_gpu",
    "duration",
];

/// Parses a trace; jobs come back sorted by submission time (ties keep file order).
pub fn parse(text: &str, name: &str, format: TraceFormat) -> Result<Vec<TraceJob>, SimError> {
    let mut rdr =
        csv::ReaderBuilder::new().has_headers(true).trim(csv::Trim::All).from_reader(text.as_bytes());
    let header: Vec<String> = rdr
        .headers()
        .map_err(|e| SimError::Input(format!("{name}:1: cannot read the header: {e}")))?
        .iter()
        .map(str::to_ascii_lowercase)
        .collect();
    let is_itp = ITP.iter().all(|c| header.iter().any(|h| h == c));
    let col = |c: &str| header.iter().position(|h| h == c);
    let generic = (col("submit"), col("gpus"), col("duration"));
    let format = match format {
        TraceFormat::Auto if is_itp => TraceFormat::Itp,
        TraceFormat::Auto if generic.0.is_some() && generic.1.is_some() && generic.2.is_some() => {
            TraceFormat::Generic
        }
        TraceFormat::Auto => {
            return Err(SimError::Input(format!(
                "{name}:1: unknown header {:?}: expected the ITP columns ({}) or submit,gpus,duration[,tag]",
                header.join(","),
                ITP.join(",")
            )));
        }
        f => f,
    };
    let (i_id, i_submit, i_gpus, i_dur, i_tag, i_batch) = match format {
        TraceFormat::Itp => {
            if !is_itp {
                return Err(SimError::Input(format!(
                    "{name}:1: not an ITP header; expected {}",
                    ITP.join(",")
                )));
            }
            (
                col("job_id"),
                col("submission_time"),
                col("num_gpu"),
                col("duration"),
                col("model_name"),
                col("batch_size"),
            )
        }
        _ => match generic {
            (Some(s), Some(g), Some(d)) => (col("job_id"), Some(s), Some(g), Some(d), col("tag"), None),
            _ => {
                return Err(SimError::Input(format!(
                    "{name}:1: a generic trace needs the columns submit,gpus,duration[,tag]"
                )));
            }
        },
    };
    let (Some(i_submit), Some(i_gpus), Some(i_dur)) = (i_submit, i_gpus, i_dur) else {
        return Err(SimError::Input(format!("{name}:1: missing a required column")));
    };
    let (i_limit, i_types, i_frac) = (col("time_limit"), col("gpu_types"), col("gpu_fraction"));
    let (i_slowdown, i_defer) = (col("slowdown_pct"), col("defer_s"));
    let mut jobs = Vec::new();
    for (k, rec) in rdr.records().enumerate() {
        let line = rec.as_ref().ok().and_then(|r| r.position()).map_or(k as u64 + 2, |p| p.line());
        let rec = rec.map_err(|e| SimError::Input(format!("{name}:{line}: {e}")))?;
        let field = |i: usize, what: &str| -> Result<&str, SimError> {
            rec.get(i).ok_or_else(|| SimError::Input(format!("{name}:{line}: missing field {what}")))
        };
        let num = |i: usize, what: &str| -> Result<f64, SimError> {
            let s = field(i, what)?;
            s.parse::<f64>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(|| SimError::Input(format!("{name}:{line}: {what} = {s:?} is not a number")))
        };
        let submit = num(i_submit, "submit time")?;
        if submit < 0.0 {
            return Err(SimError::Input(format!("{name}:{line}: submit time {submit} is negative")));
        }
        let gpus_f = num(i_gpus, "gpus")?;
        if !(gpus_f >= 1.0 && gpus_f.fract() == 0.0 && gpus_f <= 65_536.0) {
            return Err(SimError::Input(format!(
                "{name}:{line}: gpus = {gpus_f}: allowed a whole number from 1 to 65536"
            )));
        }
        let duration = num(i_dur, "duration")?;
        if duration <= 0.0 {
            return Err(SimError::Input(format!("{name}:{line}: duration = {duration}: must be > 0")));
        }
        let tag = i_tag.and_then(|i| rec.get(i)).unwrap_or("").to_string();
        let batch = i_batch.and_then(|i| rec.get(i)).and_then(|s| s.parse::<u32>().ok());
        let id = i_id
            .and_then(|i| rec.get(i))
            .filter(|s| !s.is_empty())
            .map_or_else(|| format!("line{line}"), str::to_string);
        let cell = |i: Option<usize>| i.and_then(|i| rec.get(i)).filter(|s| !s.is_empty());
        let at = format!("{name}:{line}");
        let time_limit = cell(i_limit).map(|s| time_limit(s, &at)).transpose()?;
        let gpu_types = cell(i_types).map(|s| gpu_types(s, &at)).transpose()?.unwrap_or_default();
        let gpu_fraction = cell(i_frac).map(|s| gpu_fraction(s, gpus_f, &at)).transpose()?.unwrap_or(1.0);
        let bound = cell(i_slowdown).map(|s| slowdown(s, &at)).transpose()?;
        let defer_window = cell(i_defer).map(|s| defer(s, &at)).transpose()?;
        jobs.push(TraceJob {
            id,
            submit,
            gpus: gpus_f as u32,
            duration,
            tag,
            batch,
            time_limit,
            gpu_types,
            gpu_fraction,
            bound,
            defer_window,
        });
    }
    if jobs.is_empty() {
        return Err(SimError::Input(format!("{name}: the trace has no jobs")));
    }
    jobs.sort_by(|a, b| a.submit.total_cmp(&b.submit));
    Ok(jobs)
}

/// A `time_limit` cell: seconds, finite and above 0.
fn time_limit(s: &str, at: &str) -> Result<f64, SimError> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v > 0.0 => Ok(v),
        _ => Err(SimError::Input(format!(
            "{at}: time_limit = {s:?}: allowed a number of seconds above 0, or an empty cell for none"
        ))),
    }
}

/// A `slowdown_pct` cell: a percentage from 0 to 1000 (as `--energy-slowdown`), as a fraction.
fn slowdown(s: &str, at: &str) -> Result<f64, SimError> {
    s.parse::<f64>()
        .ok()
        .and_then(|v| wattson_types::job::check_slowdown_pct(v).ok())
        .map(|v| v / 100.0)
        .ok_or_else(|| {
            SimError::Input(format!(
                "{at}: slowdown_pct = {s:?}: allowed a percentage from 0 to 1000, or an empty cell for a drawn bound"
            ))
        })
}

/// A `defer_s` cell: a window of seconds, 0 or more.
fn defer(s: &str, at: &str) -> Result<f64, SimError> {
    match s.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        _ => Err(SimError::Input(format!(
            "{at}: defer_s = {s:?}: allowed a number of seconds, 0 or more, or an empty cell for a drawn window"
        ))),
    }
}

/// A `gpu_types` cell: GPU type names (letters, digits, `-`, `_`) separated by `;`.
fn gpu_types(s: &str, at: &str) -> Result<Vec<String>, SimError> {
    let names: Vec<String> = s.split(';').map(|n| n.trim().to_string()).collect();
    let ok =
        |n: &String| !n.is_empty() && n.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if names.iter().all(ok) {
        Ok(names)
    } else {
        Err(SimError::Input(format!(
            "{at}: gpu_types = {s:?}: allowed GPU type names (letters, digits, - and _) separated by ';', \
             or an empty cell for any type"
        )))
    }
}

/// A `gpu_fraction` cell: a share of one GPU in (0, 1]; below 1 only for a 1-GPU job.
fn gpu_fraction(s: &str, gpus: f64, at: &str) -> Result<f64, SimError> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v <= 1.0 && (v == 1.0 || gpus == 1.0) => Ok(v),
        Ok(v) if v > 0.0 && v < 1.0 => Err(SimError::Input(format!(
            "{at}: gpu_fraction = {s:?} on a job of {gpus} GPUs: a share below 1 is allowed only for 1-GPU jobs"
        ))),
        _ => Err(SimError::Input(format!(
            "{at}: gpu_fraction = {s:?}: allowed a number above 0 and at most 1, or an empty cell for 1"
        ))),
    }
}

/// The ITP traces' load-matched sizes, `(trace file, nodes)`: each trace on the nodes of 8 GPUs
/// that its mean load fills to ~77% and to ~50% (one size where those coincide at the fewest
/// nodes its largest job fits), the cases of the `rightsize` and `cells` examples.
pub const ITP_LOAD_MATCHED: [(&str, u32); 18] = [
    ("cluster01.csv", 8),
    ("cluster02.csv", 14),
    ("cluster02.csv", 22),
    ("cluster03.csv", 23),
    ("cluster03.csv", 35),
    ("cluster04.csv", 80),
    ("cluster04.csv", 123),
    ("cluster05.csv", 2),
    ("cluster05.csv", 3),
    ("cluster06.csv", 15),
    ("cluster06.csv", 22),
    ("cluster07.csv", 42),
    ("cluster07.csv", 64),
    ("cluster08.csv", 11),
    ("cluster08.csv", 17),
    ("cluster09.csv", 6),
    ("cluster09.csv", 8),
    ("cluster10.csv", 2),
];

/// The traces issue 52 also runs on 80 nodes: every ITP trace but cluster04, whose 80 nodes is
/// its ~77% size.
const ON_80_NODES: [&str; 9] = [
    "cluster01.csv",
    "cluster02.csv",
    "cluster03.csv",
    "cluster05.csv",
    "cluster06.csv",
    "cluster07.csv",
    "cluster08.csv",
    "cluster09.csv",
    "cluster10.csv",
];

/// Issue 52's 27 cells, `(trace file, nodes)`: the load-matched sizes ([`ITP_LOAD_MATCHED`]),
/// then the other traces on 80 nodes; the cases of the `cells` and `resolution` examples.
pub fn itp_cells() -> Vec<(&'static str, u32)> {
    ITP_LOAD_MATCHED.iter().copied().chain(ON_80_NODES.map(|t| (t, 80))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn itp_and_generic_are_detected_and_sorted() {
        let itp = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration\n\
                   b,20,1,bert,99,64,8,100\na,10,1,gpt2,99,128,1,50\n";
        let j = parse(itp, "t.csv", TraceFormat::Auto).unwrap();
        assert_eq!(j.len(), 2);
        assert_eq!((j[0].id.as_str(), j[0].gpus, j[0].tag.as_str(), j[0].batch), ("a", 1, "gpt2", Some(128)));
        let generic = "submit,gpus,duration\n5,2,30\n";
        let j = parse(generic, "g.csv", TraceFormat::Auto).unwrap();
        assert_eq!((j[0].submit, j[0].gpus, j[0].duration, j[0].tag.as_str()), (5.0, 2, 30.0, ""));
        assert_eq!(j[0].id, "line2");
    }

    #[test]
    fn bad_rows_name_file_and_line() {
        let e = parse("submit,gpus,duration\n1,2,3\n4,x,6\n", "g.csv", TraceFormat::Auto).unwrap_err();
        assert_eq!(e.to_string(), "g.csv:3: gpus = \"x\" is not a number");
        let e = parse("submit,gpus,duration\n1,0,3\n", "g.csv", TraceFormat::Generic).unwrap_err();
        assert!(e.to_string().starts_with("g.csv:2: gpus = 0"), "{e}");
        let e = parse("submit,gpus,duration\n1,1,-3\n", "g.csv", TraceFormat::Generic).unwrap_err();
        assert!(e.to_string().starts_with("g.csv:2: duration"), "{e}");
        let e = parse("a,b\n1,2\n", "g.csv", TraceFormat::Auto).unwrap_err();
        assert!(e.to_string().starts_with("g.csv:1: unknown header"), "{e}");
        let e = parse("submit,gpus,duration\n", "g.csv", TraceFormat::Auto).unwrap_err();
        assert!(e.to_string().contains("no jobs"), "{e}");
        let e = parse("submit,gpus,duration\n1,2\n", "g.csv", TraceFormat::Auto).unwrap_err();
        assert!(e.to_string().starts_with("g.csv:2:"), "{e}");
    }

    #[test]
    fn hint_columns_and_job_ids_are_read_and_bad_hints_named() {
        let text = "job_id,submit,gpus,duration,slowdown_pct,defer_s,user\n\
                    4711,0,1,60,12.5,7200,u1f\n,5,2,60,,,u2e\n";
        let j = parse(text, "h.csv", TraceFormat::Auto).unwrap();
        assert_eq!((j[0].id.as_str(), j[0].bound, j[0].defer_window), ("4711", Some(0.125), Some(7200.0)));
        assert_eq!((j[1].id.as_str(), j[1].bound, j[1].defer_window), ("line3", None, None));
        let head = "submit,gpus,duration,slowdown_pct,defer_s\n";
        for (row, want) in [
            ("0,1,60,-1,", "b.csv:2: slowdown_pct = \"-1\": allowed a percentage from 0 to 1000"),
            ("0,1,60,1001,", "b.csv:2: slowdown_pct = \"1001\""),
            ("0,1,60,,-5", "b.csv:2: defer_s = \"-5\": allowed a number of seconds, 0 or more"),
            ("0,1,60,,6h", "b.csv:2: defer_s = \"6h\""),
        ] {
            let e = parse(&format!("{head}{row}\n"), "b.csv", TraceFormat::Auto).unwrap_err().to_string();
            assert!(e.starts_with(want), "{row}: {e}");
        }
    }

    #[test]
    fn optional_columns_parse_and_bad_cells_name_file_line_and_what_is_allowed() {
        let head = "submit,gpus,duration,time_limit,gpu_types,gpu_fraction\n";
        let ok = format!("{head}0,1,60,3600,V100;A40,0.5\n5,2,60,,,\n");
        let j = parse(&ok, "g.csv", TraceFormat::Auto).unwrap();
        assert_eq!(
            (j[0].time_limit, j[0].gpu_types.clone(), j[0].gpu_fraction),
            (Some(3600.0), vec!["V100".to_string(), "A40".to_string()], 0.5)
        );
        assert_eq!((j[1].time_limit, j[1].gpu_types.is_empty(), j[1].gpu_fraction), (None, true, 1.0));
        let itp = "job_id,submission_time,num_iteration,model_name,deadline,batch_size,num_gpu,duration,time_limit\n\
                   a,10,1,gpt2,99,128,1,50,14400\n";
        assert_eq!(parse(itp, "i.csv", TraceFormat::Auto).unwrap()[0].time_limit, Some(14400.0));
        let bad = |row: &str| {
            parse(&format!("{head}0,1,60,3600,,\n{row}\n"), "g.csv", TraceFormat::Auto)
                .unwrap_err()
                .to_string()
        };
        for (row, want) in [
            ("1,1,60,-5,,", "g.csv:3: time_limit = \"-5\": allowed a number of seconds above 0"),
            ("1,1,60,soon,,", "g.csv:3: time_limit = \"soon\": allowed"),
            ("1,1,60,inf,,", "g.csv:3: time_limit = \"inf\""),
            ("1,1,60,,V100;;A40,", "g.csv:3: gpu_types = \"V100;;A40\": allowed GPU type names"),
            ("1,1,60,,V 100,", "g.csv:3: gpu_types = \"V 100\""),
            ("1,1,60,,,0", "g.csv:3: gpu_fraction = \"0\": allowed a number above 0 and at most 1"),
            ("1,1,60,,,1.5", "g.csv:3: gpu_fraction = \"1.5\""),
            ("1,1,60,,,half", "g.csv:3: gpu_fraction = \"half\""),
            (
                "1,2,60,,,0.5",
                "g.csv:3: gpu_fraction = \"0.5\" on a job of 2 GPUs: a share below 1 is allowed only for 1-GPU jobs",
            ),
        ] {
            let e = bad(row);
            assert!(e.starts_with(want), "{row}: {e}");
        }
    }
}
