//! SVG charts written by hand, shared by the simulator's comparison plots and `wattson acct
//! --plot`: plain charts (a labelled scatter and a few polylines) need ~150 lines of text
//! output, less than wiring a plotting crate and its font and backend dependencies, and the
//! output is byte-for-byte deterministic. [`frame`] draws a chart's title, grid, ticks and
//! axes on [`Axes`]; callers add their marks.

use std::fmt::Write as _;

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

impl Axes {
    /// The ranges that show every point of `points` with a margin ([`padded`]), neither
    /// below zero.
    pub fn around_nonnegative(points: impl Iterator<Item = (f64, f64)> + Clone) -> Axes {
        let (x0, x1) = padded(
            points.clone().map(|p| p.0).fold(f64::INFINITY, f64::min),
            points.clone().map(|p| p.0).fold(f64::NEG_INFINITY, f64::max),
        );
        let (y0, y1) = padded(
            points.clone().map(|p| p.1).fold(f64::INFINITY, f64::min),
            points.map(|p| p.1).fold(f64::NEG_INFINITY, f64::max),
        );
        Axes { x0: x0.max(0.0), x1, y0: y0.max(0.0), y1 }
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

/// A tick label: whole numbers plain, others to two decimals.
pub fn fmt(v: f64) -> String {
    if v.abs() >= 100.0 || v == v.trunc() { format!("{v:.0}") } else { format!("{v:.2}") }
}

/// `lo..hi` widened a little on both sides, so points do not sit on the frame.
pub fn padded(lo: f64, hi: f64) -> (f64, f64) {
    let pad = ((hi - lo) * 0.08).max(hi.abs() * 0.02).max(1e-9);
    (lo - pad, hi + pad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn axes_around_points_show_them_all_and_never_go_below_zero() {
        let a = Axes::around_nonnegative([(1.0, 10.0), (3.0, 30.0)].into_iter());
        assert!(a.x0 < 1.0 && a.x1 > 3.0 && a.y0 < 10.0 && a.y1 > 30.0);
        let b = Axes::around_nonnegative([(0.0, 0.0), (2.0, 5.0)].into_iter());
        assert_eq!((b.x0, b.y0), (0.0, 0.0));
    }

    #[test]
    fn steps_are_one_two_five() {
        assert_eq!(step(10.0, 5.0), 2.0);
        assert_eq!(step(70.0, 7.0), 10.0);
        assert_eq!(step(0.3, 6.0), 0.05);
        assert_eq!(step(0.0, 6.0), 1.0);
    }
}
