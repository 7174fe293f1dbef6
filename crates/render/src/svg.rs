//! Standalone SVG charts (line, scatter, grouped bars) with axes, ticks, labels and
//! a legend: no JavaScript, no fonts or files fetched, every text escaped. Used by
//! the HTML reports (`html::Page::svg`).
//!
//! Points that cannot be drawn (NaN, infinite, or ≤ 0 on a log axis) are skipped;
//! an empty chart still renders its frame and title.

use std::fmt::Write;

/// One named set of points. For `ChartKind::Bar`, x is the category index (0, 1, …).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Spread whiskers `(x, low, high)` drawn in the series' colour (the range
    /// of repeated measurements around a median); for bars x is the category.
    pub spread: Vec<(f64, f64, f64)>,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            spread: Vec::new(),
        }
    }

    /// The same series with spread whiskers.
    pub fn with_spread(mut self, spread: Vec<(f64, f64, f64)>) -> Series {
        self.spread = spread;
        self
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ChartKind {
    #[default]
    Line,
    Scatter,
    Bar,
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Chart {
    pub title: String,
    pub x_label: String,
    pub y_label: String,
    pub kind: ChartKind,
    pub series: Vec<Series>,
    pub x_log: bool,
    pub y_log: bool,
    /// Bar charts: labels of the categories 0, 1, … (x values); empty: the indices.
    pub x_categories: Vec<String>,
}

/// Escapes text for XML/HTML content and attribute values (control characters
/// other than newline and tab, which XML 1.0 forbids, are dropped).
pub fn escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c if (c as u32) < 0x20 && c != '\n' && c != '\t' => {}
            c => o.push(c),
        }
    }
    o
}

const PALETTE: [&str; 10] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
    "#bcbd22", "#17becf",
];

/// The colour of series `i`: ten well-separated colours, then hues by the golden angle.
pub fn colour(i: usize) -> String {
    if i < PALETTE.len() {
        PALETTE[i].to_string()
    } else {
        let hue = (i as f64 * 137.507_764) % 360.0;
        format!("hsl({hue:.0},65%,45%)")
    }
}

/// One axis: data range → pixel range, linear or log10.
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    p0: f64,
    p1: f64,
}

impl Axis {
    fn t(&self, v: f64) -> f64 {
        let (a, b, v) = if self.log {
            (self.lo.log10(), self.hi.log10(), v.log10())
        } else {
            (self.lo, self.hi, v)
        };
        let f = if b > a { (v - a) / (b - a) } else { 0.5 };
        let p = self.p0 + f * (self.p1 - self.p0);
        if p.is_finite() {
            p
        } else {
            self.p0
        }
    }

    fn ticks(&self) -> Vec<f64> {
        if self.log {
            let (a, b) = (self.lo.log10().floor(), self.hi.log10().ceil());
            if !(a.is_finite() && b.is_finite()) {
                return Vec::new();
            }
            let (a, b) = (a as i32, b as i32);
            let step = ((b - a) / 8).max(1);
            (a..=b)
                .step_by(step as usize)
                .map(|e| 10f64.powi(e))
                .filter(|v| *v >= self.lo * 0.999_999 && *v <= self.hi * 1.000_001)
                .collect()
        } else {
            let step = nice_step((self.hi - self.lo) / 6.0);
            let mut v = (self.lo / step).ceil() * step;
            let mut out = Vec::new();
            while v.is_finite() && v <= self.hi + step * 1e-9 && out.len() < 50 {
                out.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
                let next = v + step;
                if next == v {
                    break;
                }
                v = next;
            }
            out
        }
    }
}

/// A round axis step (1, 2 or 5 times a power of ten) at least `raw`.
pub fn nice_step(raw: f64) -> f64 {
    if !(raw.is_finite() && raw > 0.0) {
        return 1.0;
    }
    let mag = 10f64.powf(raw.log10().floor());
    let f = raw / mag;
    let n = if f <= 1.0 {
        1.0
    } else if f <= 2.0 {
        2.0
    } else if f <= 5.0 {
        5.0
    } else {
        10.0
    };
    n * mag
}

/// A short tick label: 15000 → "15k", 0.25 → "0.25", 1e-5 → "1e-5".
pub fn tick_label(v: f64) -> String {
    let a = v.abs();
    if a == 0.0 {
        "0".into()
    } else if a >= 1e9 {
        trim(format!("{:.2}", v / 1e9)) + "G"
    } else if a >= 1e6 {
        trim(format!("{:.2}", v / 1e6)) + "M"
    } else if a >= 1e4 {
        trim(format!("{:.2}", v / 1e3)) + "k"
    } else if a >= 1e-3 {
        trim(format!("{v:.3}"))
    } else {
        format!("{v:.0e}")
    }
}

fn trim(s: String) -> String {
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

fn range(vals: impl Iterator<Item = f64>, log: bool, include_zero: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in vals {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if include_zero && !log {
        lo = lo.min(0.0);
        hi = hi.max(0.0);
    }
    if !lo.is_finite() || !hi.is_finite() {
        return if log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        if hi <= lo {
            return (lo / 10.0, hi * 10.0);
        }
        (
            10f64.powf(lo.log10().floor()),
            10f64.powf(hi.log10().ceil()),
        )
    } else {
        if hi <= lo {
            let d = if lo == 0.0 { 1.0 } else { lo.abs() * 0.1 };
            return (lo - d, hi + d);
        }
        let step = nice_step((hi - lo) / 6.0);
        let (a, b) = ((lo / step).floor() * step, (hi / step).ceil() * step);
        if a.is_finite() && b.is_finite() {
            (a, b)
        } else {
            (lo, hi)
        }
    }
}

fn usable(v: f64, log: bool) -> bool {
    // 1e300 bounds keep the pixel arithmetic finite.
    v.is_finite() && v.abs() < 1e300 && (!log || v > 0.0)
}

/// Renders `chart` as a standalone `<svg>` element of `width` × `height` pixels
/// (at least 200 × 120).
pub fn render(chart: &Chart, width: u32, height: u32) -> String {
    let (w, h) = (width.max(200) as f64, height.max(120) as f64);
    let bar = chart.kind == ChartKind::Bar;
    let x_log = chart.x_log && !bar;
    let legend_w = if chart.series.len() > 1 || chart.series.iter().any(|s| !s.name.is_empty()) {
        let longest = chart
            .series
            .iter()
            .map(|s| s.name.chars().count())
            .max()
            .unwrap_or(0)
            .min(28);
        30.0 + 7.0 * longest as f64
    } else {
        0.0
    };
    let (left, right, top, bottom) = (64.0, 16.0 + legend_w, 32.0, 48.0);
    // Points kept, per series.
    let kept: Vec<Vec<(f64, f64)>> = chart
        .series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .copied()
                .filter(|&(x, y)| usable(x, x_log) && usable(y, chart.y_log))
                .collect()
        })
        .collect();
    let ncat = if bar {
        let max_x = kept
            .iter()
            .flatten()
            .map(|p| p.0)
            .filter(|x| *x >= 0.0 && *x < 100_000.0)
            .fold(-1.0f64, f64::max);
        (max_x.floor() as i64 + 1).max(chart.x_categories.len() as i64) as usize
    } else {
        0
    };
    let xa = if bar {
        Axis {
            lo: -0.5,
            hi: ncat.max(1) as f64 - 0.5,
            log: false,
            p0: left,
            p1: w - right,
        }
    } else {
        let (lo, hi) = range(kept.iter().flatten().map(|p| p.0), x_log, false);
        Axis {
            lo,
            hi,
            log: x_log,
            p0: left,
            p1: w - right,
        }
    };
    let whiskers: Vec<Vec<(f64, f64, f64)>> = chart
        .series
        .iter()
        .map(|s| {
            s.spread
                .iter()
                .copied()
                .filter(|&(x, lo, hi)| {
                    usable(x, x_log) && usable(lo, chart.y_log) && usable(hi, chart.y_log)
                })
                .collect()
        })
        .collect();
    let (ylo, yhi) = range(
        kept.iter()
            .flatten()
            .map(|p| p.1)
            .chain(whiskers.iter().flatten().flat_map(|w| [w.1, w.2])),
        chart.y_log,
        bar,
    );
    let ya = Axis {
        lo: ylo,
        hi: yhi,
        log: chart.y_log,
        p0: h - bottom,
        p1: top,
    };

    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = write!(s, "<title>{}</title>", escape(&chart.title));
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="20" text-anchor="middle" font-size="14" font-weight="bold">{}</text>"#,
        w / 2.0,
        escape(&chart.title)
    );
    // Grid, ticks and tick labels.
    for v in ya.ticks() {
        let y = ya.t(v);
        let _ = write!(
            s,
            r##"<line class="grid" x1="{left}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e4e4e4"/><line x1="{:.1}" y1="{y:.1}" x2="{left}" y2="{y:.1}" stroke="#000"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            w - right,
            left - 4.0,
            left - 6.0,
            y + 4.0,
            escape(&tick_label(v))
        );
    }
    if bar {
        let every = (ncat / 24).max(1);
        for i in (0..ncat).step_by(every) {
            let x = xa.t(i as f64);
            let label = chart
                .x_categories
                .get(i)
                .cloned()
                .unwrap_or_else(|| i.to_string());
            let _ = write!(
                s,
                r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#000"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                h - bottom,
                h - bottom + 4.0,
                h - bottom + 16.0,
                escape(&label)
            );
        }
    } else {
        for v in xa.ticks() {
            let x = xa.t(v);
            let _ = write!(
                s,
                r##"<line class="grid" x1="{x:.1}" y1="{top}" x2="{x:.1}" y2="{:.1}" stroke="#e4e4e4"/><line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#000"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
                h - bottom,
                h - bottom,
                h - bottom + 4.0,
                h - bottom + 16.0,
                escape(&tick_label(v))
            );
        }
    }
    // Axes and axis labels.
    let _ = write!(
        s,
        r##"<path class="axis" d="M{left},{top} L{left},{:.1} L{:.1},{:.1}" fill="none" stroke="#000"/>"##,
        h - bottom,
        w - right,
        h - bottom
    );
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
        (left + w - right) / 2.0,
        h - 10.0,
        escape(&chart.x_label)
    );
    let _ = write!(
        s,
        r#"<text transform="translate(14,{:.1}) rotate(-90)" text-anchor="middle">{}</text>"#,
        (top + h - bottom) / 2.0,
        escape(&chart.y_label)
    );
    // Data.
    let nser = chart.series.len().max(1);
    for (i, pts) in kept.iter().enumerate() {
        let c = colour(i);
        match chart.kind {
            ChartKind::Line => {
                if pts.is_empty() {
                    continue;
                }
                let d: Vec<String> = pts
                    .iter()
                    .map(|&(x, y)| format!("{:.1},{:.1}", xa.t(x), ya.t(y)))
                    .collect();
                let _ = write!(
                    s,
                    r#"<polyline class="series" points="{}" fill="none" stroke="{c}" stroke-width="1.8"/>"#,
                    d.join(" ")
                );
            }
            ChartKind::Scatter => {
                for &(x, y) in pts {
                    let _ = write!(
                        s,
                        r#"<circle class="point" cx="{:.1}" cy="{:.1}" r="2.5" fill="{c}"/>"#,
                        xa.t(x),
                        ya.t(y)
                    );
                }
            }
            ChartKind::Bar => {
                let slot = (xa.p1 - xa.p0) / ncat.max(1) as f64;
                let bw = slot * 0.8 / nser as f64;
                let base = if chart.y_log { ya.p0 } else { ya.t(0.0) };
                for &(x, y) in pts {
                    if !(x >= 0.0 && (x as usize) < ncat) {
                        continue;
                    }
                    let x0 = xa.t(x.floor()) - slot * 0.4 + bw * i as f64;
                    let yv = ya.t(y);
                    let (y0, hh) = if yv < base {
                        (yv, base - yv)
                    } else {
                        (base, yv - base)
                    };
                    let _ = write!(
                        s,
                        r#"<rect class="bar" x="{x0:.1}" y="{y0:.1}" width="{:.1}" height="{hh:.1}" fill="{c}"><title>{}: {}</title></rect>"#,
                        bw.max(0.5),
                        escape(&chart.series[i].name),
                        escape(&tick_label(y))
                    );
                }
            }
        }
    }
    // Spread whiskers.
    for (i, ws) in whiskers.iter().enumerate() {
        let c = colour(i);
        for &(x, lo, hi) in ws {
            let px = if bar {
                if !(x >= 0.0 && (x as usize) < ncat) {
                    continue;
                }
                let slot = (xa.p1 - xa.p0) / ncat.max(1) as f64;
                let bw = slot * 0.8 / nser as f64;
                xa.t(x.floor()) - slot * 0.4 + bw * (i as f64 + 0.5)
            } else {
                xa.t(x)
            };
            let (y0, y1) = (ya.t(lo), ya.t(hi));
            let _ = write!(
                s,
                r#"<path class="spread" d="M{:.1},{y0:.1} L{:.1},{y0:.1} M{px:.1},{y0:.1} L{px:.1},{y1:.1} M{:.1},{y1:.1} L{:.1},{y1:.1}" stroke="{}" stroke-width="1.2" fill="none"/>"#,
                px - 3.0,
                px + 3.0,
                px - 3.0,
                px + 3.0,
                if bar { "#333".to_string() } else { c.clone() }
            );
        }
    }
    // Legend.
    if legend_w > 0.0 {
        let lx = w - right + 12.0;
        for (i, se) in chart.series.iter().enumerate() {
            let ly = top + 6.0 + 16.0 * i as f64;
            let _ = write!(
                s,
                r#"<rect class="legend-swatch" x="{lx:.1}" y="{:.1}" width="12" height="10" fill="{}"/><text x="{:.1}" y="{ly:.1}" dominant-baseline="middle">{}</text>"#,
                ly - 5.0,
                colour(i),
                lx + 16.0,
                escape(&se.name)
            );
        }
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chart(kind: ChartKind, series: Vec<Series>) -> Chart {
        Chart {
            title: "t".into(),
            x_label: "x".into(),
            y_label: "y".into(),
            kind,
            series,
            ..Default::default()
        }
    }

    #[test]
    fn one_polyline_per_line_series() {
        let c = chart(
            ChartKind::Line,
            vec![
                Series::new("a", vec![(0.0, 1.0), (1.0, 2.0)]),
                Series::new("b", vec![(0.0, 3.0), (2.0, 1.0)]),
                Series::new("c", vec![(5.0, 5.0)]),
            ],
        );
        let s = render(&c, 640, 360);
        assert_eq!(s.matches("<polyline").count(), 3);
        assert!(s.starts_with("<svg") && s.ends_with("</svg>"));
        // Distinct colours, and a legend entry per series.
        assert!(s.contains(&colour(0)) && s.contains(&colour(1)) && s.contains(&colour(2)));
        assert_eq!(s.matches("legend-swatch").count(), 3);
        assert!(s.contains(">x</text>") && s.contains(">y</text>"));
    }

    #[test]
    fn one_rect_per_bar() {
        let mut c = chart(
            ChartKind::Bar,
            vec![
                Series::new("free", vec![(0.0, 4.0), (1.0, 2.0), (2.0, 0.0)]),
                Series::new("used", vec![(0.0, 1.0), (1.0, 7.0), (2.0, 3.0)]),
            ],
        );
        c.x_categories = vec!["Unmovable".into(), "Movable".into(), "Reclaimable".into()];
        let s = render(&c, 640, 360);
        assert_eq!(s.matches(r#"class="bar""#).count(), 6);
        assert!(s.contains(">Reclaimable</text>"));
    }

    #[test]
    fn scatter_draws_points() {
        let c = chart(
            ChartKind::Scatter,
            vec![Series::new("p", vec![(1.0, 1.0), (2.0, 4.0), (3.0, 9.0)])],
        );
        assert_eq!(render(&c, 300, 200).matches("<circle").count(), 3);
    }

    #[test]
    fn colours_are_distinct() {
        let c: Vec<String> = (0..40).map(colour).collect();
        for i in 0..c.len() {
            for j in 0..i {
                assert_ne!(c[i], c[j], "{i} {j}");
            }
        }
    }

    #[test]
    fn text_is_escaped() {
        let mut c = chart(
            ChartKind::Line,
            vec![Series::new("<b>&\"x'", vec![(0.0, 1.0), (1.0, 1.0)])],
        );
        c.title = "a < b & c > d".into();
        let s = render(&c, 400, 300);
        assert!(s.contains("a &lt; b &amp; c &gt; d"));
        assert!(s.contains("&lt;b&gt;&amp;&quot;x&#39;"));
        assert!(!s.contains("<b>"));
    }

    #[test]
    fn log_axes_use_decades_and_skip_nonpositive() {
        let mut c = chart(
            ChartKind::Line,
            vec![Series::new(
                "s",
                vec![
                    (1.0, 10.0),
                    (10.0, 1000.0),
                    (100.0, 1e5),
                    (0.0, 5.0),
                    (5.0, -1.0),
                ],
            )],
        );
        c.x_log = true;
        c.y_log = true;
        let s = render(&c, 500, 300);
        for label in [">1<", ">10<", ">100<", ">1000<", ">100k<"] {
            assert!(s.contains(label), "missing tick {label}");
        }
        // The two unplottable points are dropped: three remain in the polyline.
        let pts = s
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        assert_eq!(pts.split(' ').count(), 3);
        assert!(!s.contains("NaN") && !s.contains("inf"));
    }

    #[test]
    fn empty_and_nan_inputs_do_not_panic() {
        for kind in [ChartKind::Line, ChartKind::Scatter, ChartKind::Bar] {
            for log in [false, true] {
                let mut c = chart(kind, vec![]);
                c.y_log = log;
                c.x_log = log;
                let s = render(&c, 0, 0);
                assert!(s.ends_with("</svg>"));
                c.series = vec![
                    Series::new("nan", vec![(f64::NAN, 1.0), (1.0, f64::INFINITY)]),
                    Series::new("one", vec![(3.0, 3.0)]),
                    Series::new("empty", vec![]),
                    Series::new("huge", vec![(1e299, -1e299), (-1e18, 0.0), (f64::MAX, 1.0)]),
                ];
                let s = render(&c, 320, 200);
                assert!(!s.contains("NaN") && !s.contains("inf"), "{s}");
            }
        }
    }

    #[test]
    fn spread_whiskers_are_drawn_and_widen_the_axis() {
        for kind in [ChartKind::Line, ChartKind::Bar] {
            let c = chart(
                kind,
                vec![
                    Series::new("a", vec![(0.0, 2.0), (1.0, 3.0)]).with_spread(vec![
                        (0.0, 1.5, 2.5),
                        (1.0, 2.0, 9.0),
                        (f64::NAN, 1.0, 2.0),
                    ]),
                    Series::new("b", vec![(0.0, 1.0)]),
                ],
            );
            let s = render(&c, 400, 300);
            assert_eq!(s.matches("class=\"spread\"").count(), 2, "{s}");
            assert!(
                s.contains(">9<") || s.contains(">8<") || s.contains(">10<"),
                "the axis reaches the whisker: {s}"
            );
            assert!(!s.contains("NaN"));
        }
    }

    #[test]
    fn tick_labels_are_short() {
        assert_eq!(tick_label(1500.0), "1500");
        assert_eq!(tick_label(15000.0), "15k");
        assert_eq!(tick_label(2.5e6), "2.5M");
        assert_eq!(tick_label(0.25), "0.25");
        assert_eq!(tick_label(0.0), "0");
    }
}
