//! The comparison charts as SVG, on the shared chart frame (`wattson-chart`).

use std::fmt::Write as _;

use wattson_chart::{Axes, COLORS, L, R, T, W, esc, fmt, frame, padded};

use super::metrics::Report;
use super::power::BIN_S;

/// Energy (kWh) against mean JCT (h), one labelled point per policy.
pub fn energy_vs_jct(r: &Report) -> String {
    let pts: Vec<(f64, f64, &str)> =
        r.summaries.iter().map(|s| (s.jct_mean_s / 3600.0, s.energy_kwh, s.policy.as_str())).collect();
    let (x0, x1) = padded(
        pts.iter().map(|p| p.0).fold(f64::INFINITY, f64::min),
        pts.iter().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max),
    );
    let (y0, y1) = padded(0.0, pts.iter().map(|p| p.1).fold(0.0, f64::max));
    let a = Axes { x0, x1, y0: y0.max(0.0), y1 };
    let mut out = String::new();
    frame(
        &mut out,
        &a,
        &format!("Energy vs mean JCT — {} on {}, {}", r.trace, r.cluster, r.knowledge),
        "mean JCT (h)",
        "total energy (kWh)",
    );
    for (i, (x, y, name)) in pts.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        labelled_point(&mut out, &a, (*x, *y), c, name);
    }
    out.push_str("</svg>\n");
    out
}

/// A chart point (x, y).
type Point = (f64, f64);

/// The points of `pts` (x, y) not dominated by another (lower or equal in both, lower in
/// one), sorted by x: the Pareto front of a knob sweep.
pub fn pareto(pts: &[(f64, f64)]) -> Vec<(f64, f64)> {
    let mut v: Vec<(f64, f64)> = pts.iter().copied().filter(|p| p.0.is_finite() && p.1.is_finite()).collect();
    v.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.total_cmp(&b.1)));
    let mut out: Vec<(f64, f64)> = Vec::new();
    for p in v {
        if out.last().is_none_or(|l| p.1 < l.1) {
            out.push(p);
        }
    }
    out
}

/// Energy (kWh) against mean wait from submission (h): every policy's reported point, and for the
/// policies with a knob sweep (`SuspendTime`, wattson's knobs with `--sweep`) every swept
/// point with the sweep's Pareto front as a line.
pub fn energy_vs_wait(r: &Report) -> String {
    energy_vs(r, false)
}

/// [`energy_vs_wait`] on the mean imposed wait: each job's wait less the deferral window its
/// user asked for ([`super::waits`]).
pub fn energy_vs_imposed_wait(r: &Report) -> String {
    energy_vs(r, true)
}

fn energy_vs(r: &Report, imposed: bool) -> String {
    // (policy, its swept points, its reported point)
    let mut series: Vec<(&str, Vec<Point>, Point)> = Vec::new();
    for s in &r.summaries {
        let mine: Vec<(f64, f64)> = r
            .sweep
            .iter()
            .filter(|p| p.policy == s.policy)
            .map(|p| (if imposed { p.imposed_wait_mean_s } else { p.wait_mean_s } / 3600.0, p.energy_kwh))
            .collect();
        let wait = if imposed { s.waits.imposed_wait_mean_s } else { s.wait_mean_s };
        series.push((s.policy.as_str(), mine, (wait / 3600.0, s.energy_kwh)));
    }
    let (what, axis) = if imposed {
        ("mean imposed wait", "mean wait less the job's own deferral window (h)")
    } else {
        ("mean wait", "mean wait from submission (h)")
    };
    let a =
        Axes::around_nonnegative(series.iter().flat_map(|x| x.1.iter().copied().chain(std::iter::once(x.2))));
    let mut out = String::new();
    frame(
        &mut out,
        &a,
        &format!("Energy vs {what}, knob sweeps — {} on {}, {}", r.trace, r.cluster, r.knowledge),
        axis,
        "total energy (kWh)",
    );
    for (i, (name, sweep, (x, y))) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        front_line(&mut out, &a, sweep, c);
        for p in sweep {
            let _ = writeln!(
                out,
                r#"<circle cx="{:.1}" cy="{:.1}" r="3" fill="white" stroke="{c}"/>"#,
                a.px(p.0),
                a.py(p.1)
            );
        }
        labelled_point(&mut out, &a, (*x, *y), c, name);
    }
    out.push_str("</svg>\n");
    out
}

/// The Pareto front of `pts` (wait, energy) as a line in `colour`, when it has two points or more.
fn front_line(out: &mut String, a: &Axes, pts: &[Point], colour: &str) {
    let front = pareto(pts);
    if front.len() > 1 {
        let line: Vec<String> = front.iter().map(|p| format!("{:.1},{:.1}", a.px(p.0), a.py(p.1))).collect();
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{}"/>"#,
            line.join(" ")
        );
    }
}

/// A frontier chart: energy (kWh) against mean wait (h) for each policy's knob sweep
/// (`series`: name, then each setting's (mean wait h, energy kWh)), every point drawn and each
/// sweep's Pareto front as a line; `title` names the case.
pub fn frontier(title: &str, series: &[(String, Vec<Point>)]) -> String {
    let a = Axes::around_nonnegative(series.iter().flat_map(|x| x.1.iter().copied()));
    let mut out = String::new();
    frame(&mut out, &a, title, "mean wait from submission (h)", "total energy (kWh)");
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        front_line(&mut out, &a, pts, c);
        for p in pts {
            let _ =
                writeln!(out, r#"<circle cx="{:.1}" cy="{:.1}" r="3.5" fill="{c}"/>"#, a.px(p.0), a.py(p.1));
        }
        let y = T + 16.0 * (i as f64 + 1.0);
        let _ = writeln!(out, r#"<circle cx="{:.1}" cy="{:.1}" r="5" fill="{c}"/>"#, W - R + 14.0, y - 4.0);
        let _ = writeln!(out, r#"<text x="{:.1}" y="{y:.1}">{}</text>"#, W - R + 24.0, esc(name));
    }
    out.push_str("</svg>\n");
    out
}

/// A policy's point, filled in its colour, with its name beside it.
fn labelled_point(out: &mut String, a: &Axes, (x, y): (f64, f64), colour: &str, name: &str) {
    let _ = writeln!(out, r#"<circle cx="{:.1}" cy="{:.1}" r="6" fill="{colour}"/>"#, a.px(x), a.py(y));
    let _ = writeln!(out, r#"<text x="{:.1}" y="{:.1}">{}</text>"#, a.px(x) + 9.0, a.py(y) - 6.0, esc(name));
}

/// Hourly mean cluster power (kW) over time (days), one line per policy.
pub fn power_over_time(r: &Report) -> String {
    let origin = r.power.iter().map(|p| p.origin_s).fold(f64::INFINITY, f64::min);
    let origin = if origin.is_finite() { origin } else { 0.0 };
    let x1 = r
        .power
        .iter()
        .map(|p| (p.origin_s - origin + p.kw.len() as f64 * BIN_S) / 86400.0)
        .fold(1e-9, f64::max);
    let budget_kw = r.budget_w.map(|b| b / 1000.0);
    let y1 =
        r.power.iter().flat_map(|p| p.kw.iter().copied()).fold(budget_kw.unwrap_or(1e-9), f64::max) * 1.05;
    let a = Axes { x0: 0.0, x1, y0: 0.0, y1 };
    let mut out = String::new();
    frame(
        &mut out,
        &a,
        &format!("Cluster power, hourly mean — {} on {}", r.trace, r.cluster),
        "time since first submission (days)",
        "power (kW)",
    );
    if let Some(b) = budget_kw {
        let y = a.py(b);
        let _ = writeln!(
            out,
            r##"<line x1="{L}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="black" stroke-dasharray="6 4"/>"##,
            W - R
        );
        let _ = writeln!(out, r#"<text x="{:.1}" y="{:.1}">budget {}</text>"#, L + 6.0, y - 5.0, fmt(b));
    }
    for (i, p) in r.power.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let mut pts = String::new();
        for (k, kw) in p.kw.iter().enumerate() {
            let d = (p.origin_s - origin + (k as f64 + 0.5) * BIN_S) / 86400.0;
            let _ = write!(pts, "{:.1},{:.1} ", a.px(d), a.py(*kw));
        }
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{c}" stroke-width="1" points="{}"/>"#,
            pts.trim_end()
        );
        let ly = T + 16.0 + 18.0 * i as f64;
        let _ = writeln!(
            out,
            r#"<line x1="{:.1}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{c}" stroke-width="3"/>"#,
            W - R + 10.0,
            W - R + 30.0
        );
        let _ =
            writeln!(out, r#"<text x="{:.1}" y="{:.1}">{}</text>"#, W - R + 36.0, ly + 4.0, esc(&p.policy));
    }
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pareto_keeps_only_undominated_points() {
        let pts = [(3.0, 10.0), (1.0, 20.0), (2.0, 15.0), (2.5, 16.0), (4.0, 10.0), (f64::NAN, 1.0)];
        assert_eq!(pareto(&pts), vec![(1.0, 20.0), (2.0, 15.0), (3.0, 10.0)]);
    }
}
