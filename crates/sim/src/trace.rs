//! Job traces: the ITP trace as published by ElasticFlow and a generic CSV for `sacct` exports.
//!
//! ITP columns: `job_id, submission_time, num_iteration, model_name, deadline, batch_size,
//! num_gpu, duration`. Generic columns: `submit, gpus, duration[, tag]` (seconds, GPUs,
//! seconds at full speed, a workload tag). The format is taken from the header unless forced.
//! Errors read `file:line: what is wrong`.

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
            (Some(s), Some(g), Some(d)) => (None, Some(s), Some(g), Some(d), col("tag"), None),
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
        let id = i_id.and_then(|i| rec.get(i)).map_or_else(|| format!("line{line}"), str::to_string);
        jobs.push(TraceJob { id, submit, gpus: gpus_f as u32, duration, tag, batch });
    }
    if jobs.is_empty() {
        return Err(SimError::Input(format!("{name}: the trace has no jobs")));
    }
    jobs.sort_by(|a, b| a.submit.total_cmp(&b.submit));
    Ok(jobs)
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
}
