//! `wattson acct -j <id> --plot FILE`: each GPU's power over the job, with every setting
//! wattson gave a GPU marked where it happened; SVG, or PNG (the same SVG rasterized with resvg)
//! when the file name ends in `.png`.

use std::fmt::Write as _;

use wattson_chart::{Axes, B, COLORS, H, R, T, W, esc, frame};
use wattson_types::energy::{MeterEvent, SeriesPoint};
use wattson_types::gpu::GpuSetting;
use wattson_types::job::JobRecord;
use wattson_types::summary::NodeSummary;

/// One GPU's power: steps ending at `t_s` (s after the job's begin), each at `watts` since the
/// previous one (from the job's begin for the first).
#[derive(Debug, Clone, PartialEq)]
pub struct Trace {
    /// `node gpuN`.
    pub label: String,
    /// End of each step, s after the job's begin.
    pub t_s: Vec<f64>,
    /// Power over each step, W.
    pub watts: Vec<f64>,
}

/// A setting given to a GPU, at `t_s` (s after the job's begin).
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    /// When.
    pub t_s: f64,
    /// `n1 gpu0: 300 W`, or `... defaults`.
    pub label: String,
}

/// The traces and marks of a job from its summary's nodes, timed from the earliest begin.
pub fn from_summary(nodes: &[NodeSummary]) -> (Vec<Trace>, Vec<Mark>) {
    let t0 = nodes.iter().map(|n| n.begin_ns).min().unwrap_or(0);
    let mut traces = Vec::new();
    let mut marks = Vec::new();
    for node in nodes {
        let offset = (node.begin_ns - t0) as f64 / 1e9;
        for p in &node.power {
            traces.push(Trace {
                label: format!("{} gpu{}", node.node, p.gpu),
                t_s: p.t_s.iter().map(|&t| offset + f64::from(t)).collect(),
                watts: p.watts.iter().map(|&w| f64::from(w)).collect(),
            });
        }
        for record in node.records.iter().filter(|r| r.key.step.is_empty()) {
            marks.extend(setting_marks(record, t0));
        }
    }
    (traces, marks)
}

/// The traces and marks of a job on this node from its series and record.
pub fn from_series(record: &JobRecord, points: &[SeriesPoint]) -> (Vec<Trace>, Vec<Mark>) {
    let t0 = record.begin_ns;
    let traces = record
        .gpus
        .iter()
        .map(|g| {
            // A reading holds until the next one (the last until the job's end).
            let mine: Vec<&SeriesPoint> =
                points.iter().filter(|p| p.gpu_index == g.index && p.power_mw.is_some()).collect();
            let end = record.end_ns.unwrap_or_else(|| mine.last().map_or(t0, |p| p.t_ns));
            let t_s =
                mine.iter().skip(1).map(|p| p.t_ns).chain([end]).map(|t| (t - t0) as f64 / 1e9).collect();
            let watts = mine.iter().map(|p| f64::from(p.power_mw.unwrap_or(0)) / 1000.0).collect();
            Trace { label: format!("{} gpu{}", record.node, g.index), t_s, watts }
        })
        .collect();
    (traces, setting_marks(record, t0))
}

fn setting_marks(record: &JobRecord, t0: i64) -> Vec<Mark> {
    let mut marks = Vec::new();
    for gpu in &record.gpus {
        for event in &gpu.meter.events {
            if let MeterEvent::Setting { t_ns, setting } = event {
                let what = match setting {
                    Some(GpuSetting::PowerLimit { mw }) => format!("{:.0} W", f64::from(*mw) / 1000.0),
                    Some(GpuSetting::LockedClock { mhz }) => format!("{mhz} MHz"),
                    None => "defaults".to_string(),
                };
                let label = format!("{} gpu{}: {what}", record.node, gpu.index);
                marks.push(Mark { t_s: (t_ns - t0) as f64 / 1e9, label });
            }
        }
    }
    marks
}

/// The chart as SVG: a step line per trace, a dashed vertical line per mark.
pub fn svg(title: &str, traces: &[Trace], marks: &[Mark]) -> String {
    let end = traces.iter().flat_map(|t| t.t_s.iter().copied()).chain(marks.iter().map(|m| m.t_s));
    let x1 = end.fold(1.0, f64::max);
    let y1 = traces.iter().flat_map(|t| t.watts.iter().copied()).fold(10.0, f64::max) * 1.1;
    let a = Axes { x0: 0.0, x1, y0: 0.0, y1 };
    let mut out = String::new();
    frame(&mut out, &a, title, "time since the job began (s)", "GPU power (W)");
    for (i, m) in marks.iter().enumerate() {
        let x = a.px(m.t_s.clamp(0.0, x1));
        let _ = writeln!(
            out,
            r##"<line class="mark" x1="{x:.1}" y1="{T}" x2="{x:.1}" y2="{:.1}" stroke="#555" stroke-dasharray="4 3"/>"##,
            H - B
        );
        let y = T + 14.0 + 14.0 * (i % 4) as f64;
        let _ =
            writeln!(out, r#"<text x="{:.1}" y="{y:.1}" font-size="11">{}</text>"#, x + 3.0, esc(&m.label));
    }
    for (i, t) in traces.iter().enumerate() {
        let color = COLORS[i % COLORS.len()];
        let mut points = String::new();
        let mut prev = 0.0;
        for (&end, &w) in t.t_s.iter().zip(&t.watts) {
            let y = a.py(w);
            let _ = write!(points, "{:.1},{y:.1} {:.1},{y:.1} ", a.px(prev), a.px(end));
            prev = end;
        }
        let _ = writeln!(
            out,
            r#"<polyline class="trace" points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
            points.trim_end()
        );
        let y = T + 10.0 + 18.0 * i as f64;
        let _ = writeln!(
            out,
            r#"<line x1="{:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="{color}" stroke-width="2"/><text x="{:.1}" y="{:.1}">{}</text>"#,
            W - R + 10.0,
            W - R + 30.0,
            W - R + 36.0,
            y + 4.0,
            esc(&t.label)
        );
    }
    out.push_str("</svg>\n");
    out
}

/// `svg` rasterized to PNG at its own size, its text in the system's sans-serif font (DejaVu
/// Sans where installed); without any font the PNG has no text, and the caller is told.
pub fn png(svg: &str) -> Result<(Vec<u8>, bool), String> {
    let mut options = resvg::usvg::Options::default();
    let fonts = options.fontdb_mut();
    fonts.load_system_fonts();
    let families: Vec<String> =
        fonts.faces().filter_map(|f| f.families.first().map(|(name, _)| name.clone())).collect();
    let has_text = !families.is_empty();
    if let Some(family) = families.iter().find(|f| f.as_str() == "DejaVu Sans").or(families.first()) {
        fonts.set_sans_serif_family(family.clone());
    }
    let tree =
        resvg::usvg::Tree::from_str(svg, &options).map_err(|e| format!("cannot read the chart: {e}"))?;
    let size = tree.size().to_int_size();
    let mut pixmap = resvg::tiny_skia::Pixmap::new(size.width(), size.height())
        .ok_or_else(|| "cannot allocate the image".to_string())?;
    resvg::render(&tree, resvg::tiny_skia::Transform::identity(), &mut pixmap.as_mut());
    let png = pixmap.encode_png().map_err(|e| format!("cannot encode the PNG: {e}"))?;
    Ok((png, has_text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_trace_and_mark_is_drawn_and_the_png_has_its_size() {
        let traces = vec![
            Trace { label: "n1 gpu0".into(), t_s: vec![10.0, 20.0], watts: vec![600.0, 300.0] },
            Trace { label: "n2 gpu1 <x>".into(), t_s: vec![20.0], watts: vec![100.0] },
        ];
        let marks = vec![Mark { t_s: 10.0, label: "n1 gpu0: 300 W".into() }];
        let text = svg("job 7", &traces, &marks);
        assert_eq!(text.matches("class=\"trace\"").count(), 2);
        assert_eq!(text.matches("class=\"mark\"").count(), 1);
        assert!(text.contains("n2 gpu1 &lt;x&gt;") && text.contains("n1 gpu0: 300 W"), "{text}");
        let (png, _) = png(&text).unwrap();
        assert_eq!(&png[1..4], b"PNG");
        // IHDR: width and height, big-endian, at bytes 16..24.
        let size = |at: usize| u32::from_be_bytes(png[at..at + 4].try_into().unwrap());
        assert_eq!((size(16), size(20)), (W as u32, H as u32));
    }
}
