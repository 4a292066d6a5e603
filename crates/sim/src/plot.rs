//! The comparison charts as SVG, written by hand: plain charts (a labelled scatter and a few
//! polylines) need ~150 lines of text output, less than wiring a plotting crate and its font
//! and backend dependencies, and the output is byte-for-byte deterministic. The frame
//! ([`Axes`], [`frame`]) also draws `wattson acct --plot`.

use std::fmt::Write as _;

use super::metrics::Report;
use super::power::BIN_S;

/// Chart width and height, px.
pub const W: f64 = 860.0;
/// Chart height, px.
pub const H: f64 = 520.0;
/// Left margin (the plot area starts here), px.
pub const L: f64 = 80.0;
/// Right margin (room for a legend), px.
pub const R: f64 = 180.0;
/// Top margin, px.
pub const T: f64 = 40.0;
/// Bottom margin, px.
pub const B: f64 = 60.0;
/// Series colours, in order.
pub const COLORS: [&str; 7] = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#7f7f7f", "#9467bd", "#8c564b"];

/// `s` escaped for SVG text.
pub fn esc(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Rounds `range` up to a 1/2/5 step giving about `n` ticks.
fn step(range: f64, n: f64) -> f64 {
    if !(range.is_finite() && range > 0.0) {
        return 1.0;
    }
    let raw = range / n;
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    mag * if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    }
}

/// The data ranges a chart shows.
pub struct Axes {
    /// Lowest x shown.
    pub x0: f64,
    /// Highest x shown.
    pub x1: f64,
    /// Lowest y shown.
    pub y0: f64,
    /// Highest y shown.
    pub y1: f64,
}

impl Axes {
    /// The pixel column of `x`.
    pub fn px(&self, x: f64) -> f64 {
        L + (x - self.x0) / (self.x1 - self.x0) * (W - L - R)
    }
    /// The pixel row of `y`.
    pub fn py(&self, y: f64) -> f64 {
        H - B - (y - self.y0) / (self.y1 - self.y0) * (H - T - B)
    }
}

/// Opens the SVG document in `out` and draws the title, grid, ticks, frame and axis labels.
pub fn frame(out: &mut String, a: &Axes, title: &str, xlabel: &str, ylabel: &str) {
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">"#
    );
    let _ = writeln!(out, r#"<rect width="{W}" height="{H}" fill="white"/>"#);
    let _ = writeln!(
        out,
        r#"<text x="{}" y="24" font-size="15" text-anchor="middle">{}</text>"#,
        W / 2.0,
        esc(title)
    );
    let (sx, sy) = (step(a.x1 - a.x0, 8.0), step(a.y1 - a.y0, 6.0));
    let mut x = (a.x0 / sx).ceil() * sx;
    while x <= a.x1 + 1e-9 {
        let p = a.px(x);
        let _ =
            writeln!(out, r##"<line x1="{p:.1}" y1="{T}" x2="{p:.1}" y2="{:.1}" stroke="#ddd"/>"##, H - B);
        let _ = writeln!(
            out,
            r#"<text x="{p:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            H - B + 16.0,
            fmt(x)
        );
        x += sx;
    }
    let mut y = (a.y0 / sy).ceil() * sy;
    while y <= a.y1 + 1e-9 {
        let p = a.py(y);
        let _ =
            writeln!(out, r##"<line x1="{L}" y1="{p:.1}" x2="{:.1}" y2="{p:.1}" stroke="#ddd"/>"##, W - R);
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"#,
            L - 6.0,
            p + 4.0,
            fmt(y)
        );
        y += sy;
    }
    let _ = writeln!(
        out,
        r#"<rect x="{L}" y="{T}" width="{:.1}" height="{:.1}" fill="none" stroke="black"/>"#,
        W - L - R,
        H - T - B
    );
    let _ = writeln!(
        out,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        (L + W - R) / 2.0,
        H - 18.0,
        esc(xlabel)
    );
    let _ = writeln!(
        out,
        r#"<text x="18" y="{:.1}" text-anchor="middle" transform="rotate(-90 18 {:.1})">{}</text>"#,
        (T + H - B) / 2.0,
        (T + H - B) / 2.0,
        esc(ylabel)
    );
}

fn fmt(v: f64) -> String {
    if v.abs() >= 100.0 || v == v.trunc() { format!("{v:.0}") } else { format!("{v:.2}") }
}

fn padded(lo: f64, hi: f64) -> (f64, f64) {
    let pad = ((hi - lo) * 0.08).max(hi.abs() * 0.02).max(1e-9);
    (lo - pad, hi + pad)
}

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
    // (policy, its swept points, its reported point)
    let mut series: Vec<(&str, Vec<Point>, Point)> = Vec::new();
    for s in &r.summaries {
        let mine: Vec<(f64, f64)> = r
            .sweep
            .iter()
            .filter(|p| p.policy == s.policy)
            .map(|p| (p.wait_mean_s / 3600.0, p.energy_kwh))
            .collect();
        series.push((s.policy.as_str(), mine, (s.wait_mean_s / 3600.0, s.energy_kwh)));
    }
    let all = || series.iter().flat_map(|x| x.1.iter().copied().chain(std::iter::once(x.2)));
    let (x0, x1) = padded(
        all().map(|p| p.0).fold(f64::INFINITY, f64::min),
        all().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max),
    );
    let (y0, y1) = padded(
        all().map(|p| p.1).fold(f64::INFINITY, f64::min),
        all().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max),
    );
    let a = Axes { x0: x0.max(0.0), x1, y0: y0.max(0.0), y1 };
    let mut out = String::new();
    frame(
        &mut out,
        &a,
        &format!("Energy vs mean wait, knob sweeps — {} on {}, {}", r.trace, r.cluster, r.knowledge),
        "mean wait from submission (h)",
        "total energy (kWh)",
    );
    for (i, (name, sweep, (x, y))) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let front = pareto(sweep);
        if front.len() > 1 {
            let pts: Vec<String> =
                front.iter().map(|p| format!("{:.1},{:.1}", a.px(p.0), a.py(p.1))).collect();
            let _ = writeln!(
                out,
                r#"<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{}"/>"#,
                pts.join(" ")
            );
        }
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

/// A frontier chart: energy (kWh) against mean wait (h) for each policy's knob sweep
/// (`series`: name, then each setting's (mean wait h, energy kWh)), every point drawn and each
/// sweep's Pareto front as a line; `title` names the case.
pub fn frontier(title: &str, series: &[(String, Vec<Point>)]) -> String {
    let all = || series.iter().flat_map(|x| x.1.iter().copied());
    let (x0, x1) = padded(
        all().map(|p| p.0).fold(f64::INFINITY, f64::min),
        all().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max),
    );
    let (y0, y1) = padded(
        all().map(|p| p.1).fold(f64::INFINITY, f64::min),
        all().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max),
    );
    let a = Axes { x0: x0.max(0.0), x1, y0: y0.max(0.0), y1 };
    let mut out = String::new();
    frame(&mut out, &a, title, "mean wait from submission (h)", "total energy (kWh)");
    for (i, (name, pts)) in series.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        let front = pareto(pts);
        if front.len() > 1 {
            let line: Vec<String> =
                front.iter().map(|p| format!("{:.1},{:.1}", a.px(p.0), a.py(p.1))).collect();
            let _ = writeln!(
                out,
                r#"<polyline fill="none" stroke="{c}" stroke-width="1.5" points="{}"/>"#,
                line.join(" ")
            );
        }
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

    #[test]
    fn steps_are_one_two_five() {
        assert_eq!(step(10.0, 5.0), 2.0);
        assert_eq!(step(70.0, 7.0), 10.0);
        assert_eq!(step(0.3, 6.0), 0.05);
        assert_eq!(step(0.0, 6.0), 1.0);
    }
}
