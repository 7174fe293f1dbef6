//! Standalone SVG charts (line, scatter, vertical and horizontal grouped bars)
//! with axes, ticks, labels, a legend and annotations (a ringed point, a rule, a
//! shaded category): no JavaScript, no fonts or files fetched, every text escaped.
//! Used by the HTML reports (`html::Page::svg`).
//!
//! Layout invariants (checked in a browser by `crates/hugetune/tests/report.rs`):
//! - no text is cut: margins are sized from each text's estimated width
//!   (`text_width`, Arial metrics plus a margin for wider sans-serif faces), and
//!   titles, axis labels, legend entries and category labels wrap at spaces
//!   instead of being shortened;
//! - a legend has at most `MAX_LEGEND` entries (the rest are counted in the last);
//! - every data element carries the class `mark` (and `point`, `series`, `bar`,
//!   `spread`), the chosen plan's marks `chosen`, legend entries `legend-entry`.
//!
//! Points that cannot be drawn (NaN, infinite, or ≤ 0 on a log axis) are skipped;
//! an empty chart still renders its frame and title. Nothing here panics on data.

use std::fmt::Write;

/// The font every chart asks for: faces with Arial's metrics first, which
/// `text_width` estimates.
pub const FONT: &str = "Arial, Helvetica, 'Liberation Sans', sans-serif";

/// Most entries a legend shows; a legend of more series ends in "+N more".
pub const MAX_LEGEND: usize = 8;

/// Point markers, to tell groups apart without relying on colour alone.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Marker {
    #[default]
    Circle,
    Diamond,
    Square,
    Triangle,
}

/// One named set of points. For `ChartKind::Bar` and `HBar`, x is the category
/// index (0, 1, …).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Series {
    pub name: String,
    pub points: Vec<(f64, f64)>,
    /// Spread whiskers `(x, low, high)` drawn in the series' colour (the range
    /// of repeated measurements around a median); for bars x is the category.
    pub spread: Vec<(f64, f64, f64)>,
    /// A fixed CSS colour; `None`: the palette's colour for the series' index.
    pub colour: Option<String>,
    pub marker: Marker,
    /// Drawn as a line (`Some(true)`) or as points (`Some(false)`); `None`: as
    /// the chart's kind says.
    pub line: Option<bool>,
    pub dashed: bool,
    /// The chosen plan's series: drawn heavier, with the class `chosen`.
    pub chosen: bool,
    /// Tooltip text per point (SVG `<title>`); points without one get the name.
    pub tips: Vec<String>,
    /// Left out of the automatic legend (e.g. covered by `Chart::legend`).
    pub no_legend: bool,
}

impl Series {
    pub fn new(name: impl Into<String>, points: Vec<(f64, f64)>) -> Series {
        Series {
            name: name.into(),
            points,
            ..Default::default()
        }
    }

    /// The same series with spread whiskers.
    pub fn with_spread(mut self, spread: Vec<(f64, f64, f64)>) -> Series {
        self.spread = spread;
        self
    }

    pub fn colour(mut self, c: impl Into<String>) -> Series {
        self.colour = Some(c.into());
        self
    }

    pub fn marker(mut self, m: Marker) -> Series {
        self.marker = m;
        self
    }

    pub fn as_line(mut self) -> Series {
        self.line = Some(true);
        self
    }

    pub fn as_points(mut self) -> Series {
        self.line = Some(false);
        self
    }

    pub fn dashed(mut self) -> Series {
        self.dashed = true;
        self
    }

    pub fn chosen(mut self, yes: bool) -> Series {
        self.chosen = yes;
        self
    }

    pub fn tips(mut self, tips: Vec<String>) -> Series {
        self.tips = tips;
        self
    }

    pub fn no_legend(mut self) -> Series {
        self.no_legend = true;
        self
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ChartKind {
    #[default]
    Line,
    Scatter,
    /// Vertical grouped bars, one group per category along x.
    Bar,
    /// Horizontal grouped bars, one row per category, its label on the left
    /// (long labels wrap); the chart is as tall as its rows need.
    HBar,
}

/// One legend entry drawn as given (`Chart::legend`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LegendItem {
    pub label: String,
    pub colour: String,
    /// A marker swatch; `None`: a rectangle, or a line where `line`.
    pub marker: Option<Marker>,
    pub line: bool,
    pub dashed: bool,
}

/// An annotation drawn over the data; `class` names it for readers and tests
/// (`chosen` for the plan, `knee` for the knee).
#[derive(Clone, Debug, PartialEq)]
pub enum Mark {
    /// A ring around the point (x, y), its label placed beside it where it
    /// covers neither another label nor the legend.
    Point {
        x: f64,
        y: f64,
        label: String,
        class: String,
    },
    /// A dashed vertical rule at x across the plot, labelled at its top.
    Rule {
        x: f64,
        label: String,
        class: String,
    },
    /// Bar charts: a band behind category `index`, labelled beside its label.
    Category {
        index: usize,
        label: String,
        class: String,
    },
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
    /// A y range the axis covers whatever the data (e.g. 0..100 for a percentage).
    pub y_range: Option<(f64, f64)>,
    pub marks: Vec<Mark>,
    /// The legend; empty: one entry per named series (at most `MAX_LEGEND`).
    pub legend: Vec<LegendItem>,
}

/// Whether positive values span at least two decades: then a log axis shows
/// the small ones, which a linear axis squeezes against zero.
pub fn spans_decades(vals: impl IntoIterator<Item = f64>) -> bool {
    let (mut lo, mut hi) = (f64::INFINITY, 0.0f64);
    for v in vals.into_iter().filter(|v| v.is_finite() && *v > 0.0) {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    lo.is_finite() && hi / lo >= 100.0
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

/// Advance widths of ASCII 32..=126 in Arial (and Liberation Sans), in 1/100 em,
/// as Chromium measures them; regular, then bold.
const ARIAL: [u8; 95] = [
    28, 28, 36, 56, 56, 89, 67, 19, 33, 33, 39, 58, 28, 33, 28, 28, 56, 56, 56, 56, 56, 56, 56, 56,
    56, 56, 28, 28, 58, 58, 58, 56, 102, 67, 67, 72, 72, 67, 61, 78, 72, 28, 50, 67, 56, 83, 72,
    78, 67, 78, 72, 67, 61, 72, 67, 94, 67, 67, 61, 28, 28, 28, 47, 56, 33, 56, 56, 50, 56, 56, 28,
    56, 56, 22, 22, 50, 22, 83, 56, 56, 56, 56, 33, 50, 28, 56, 50, 72, 50, 50, 50, 33, 26, 33, 58,
];
const ARIAL_BOLD: [u8; 95] = [
    28, 33, 47, 56, 56, 89, 72, 24, 33, 33, 39, 58, 28, 33, 28, 28, 56, 56, 56, 56, 56, 56, 56, 56,
    56, 56, 33, 33, 58, 58, 58, 61, 98, 72, 72, 72, 72, 67, 61, 78, 72, 28, 56, 72, 61, 83, 72, 78,
    67, 78, 72, 67, 61, 72, 67, 94, 67, 67, 61, 33, 28, 33, 58, 56, 33, 56, 61, 56, 61, 56, 33, 61,
    61, 28, 28, 56, 28, 89, 61, 61, 61, 61, 39, 56, 33, 61, 56, 78, 56, 56, 50, 39, 28, 39, 58,
];

/// Estimated width in pixels of `s` at `px`: Arial's advances plus 12 %, so
/// that a viewer whose sans-serif is wider (DejaVu Sans) still sees it whole;
/// anything outside ASCII counts as 0.9 em.
pub fn text_width(s: &str, px: f64, bold: bool) -> f64 {
    let t = if bold { &ARIAL_BOLD } else { &ARIAL };
    let em: f64 = s
        .chars()
        .map(|c| match c as u32 {
            n @ 32..=126 => t[(n - 32) as usize] as f64 / 100.0,
            _ => 0.9,
        })
        .sum();
    em * px * 1.12
}

/// `s` broken at spaces into lines of at most `max_w` pixels (a single word
/// longer than that keeps its own line). Never empty.
pub fn wrap(s: &str, max_w: f64, px: f64, bold: bool) -> Vec<String> {
    let mut lines: Vec<String> = Vec::new();
    let mut cur = String::new();
    for word in s.split(' ').filter(|w| !w.is_empty()) {
        let cand = if cur.is_empty() {
            word.to_string()
        } else {
            format!("{cur} {word}")
        };
        if cur.is_empty() || text_width(&cand, px, bold) <= max_w {
            cur = cand;
        } else {
            lines.push(std::mem::take(&mut cur));
            cur = word.to_string();
        }
    }
    lines.push(cur);
    lines
}

fn widest(lines: &[String], px: f64, bold: bool) -> f64 {
    lines
        .iter()
        .map(|l| text_width(l, px, bold))
        .fold(0.0, f64::max)
}

/// The label of category slot i: its name, else its number.
fn category_label(chart: &Chart, i: usize) -> String {
    chart
        .x_categories
        .get(i)
        .cloned()
        .unwrap_or_else(|| i.to_string())
}

/// The `<svg>` element's opening (size, font, the chart's title for tooltips
/// and screen readers) and the drawn title line (`title`: already fitted).
fn svg_open(s: &mut String, w: f64, h: f64, chart_title: &str, title: &[String]) {
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="{FONT}" font-size="11"><title>{}</title>"#,
        escape(chart_title)
    );
    s.push_str(&text_el(
        w / 2.0,
        20.0,
        title,
        "middle",
        14.0,
        r#" font-weight="bold""#,
    ));
}

/// A text element of one or more lines; `y` is the first line's baseline.
fn text_el(x: f64, y: f64, lines: &[String], anchor: &str, px: f64, attrs: &str) -> String {
    let mut s =
        format!(r#"<text x="{x:.1}" y="{y:.1}" text-anchor="{anchor}" font-size="{px}"{attrs}>"#);
    for (i, l) in lines.iter().enumerate() {
        if i == 0 {
            s.push_str(&format!(r#"<tspan x="{x:.1}">{}</tspan>"#, escape(l)));
        } else {
            s.push_str(&format!(
                r#"<tspan x="{x:.1}" dy="{:.1}">{}</tspan>"#,
                px * 1.2,
                escape(l)
            ));
        }
    }
    s.push_str("</text>");
    s
}

/// A pixel rectangle (x0, y0, x1, y1).
#[derive(Clone, Copy, Debug)]
struct Rect(f64, f64, f64, f64);

impl Rect {
    fn overlap(&self, o: &Rect) -> bool {
        self.0 < o.2 && o.0 < self.2 && self.1 < o.3 && o.1 < self.3
    }
    fn inside(&self, o: &Rect) -> bool {
        self.0 >= o.0 && self.2 <= o.2 && self.1 >= o.1 && self.3 <= o.3
    }
    fn contains(&self, (x, y): (f64, f64)) -> bool {
        x >= self.0 && x <= self.2 && y >= self.1 && y <= self.3
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
        ticks(self.lo, self.hi, self.log)
    }
}

fn ticks(lo: f64, hi: f64, log: bool) -> Vec<f64> {
    if log {
        let (a, b) = (lo.log10().floor(), hi.log10().ceil());
        if !(a.is_finite() && b.is_finite()) {
            return Vec::new();
        }
        let (a, b) = (a as i32, b as i32);
        let step = ((b - a) / 8).max(1);
        (a..=b)
            .step_by(step as usize)
            .map(|e| 10f64.powi(e))
            .filter(|v| *v >= lo * 0.999_999 && *v <= hi * 1.000_001)
            .collect()
    } else {
        let step = nice_step((hi - lo) / 6.0);
        let mut v = (lo / step).ceil() * step;
        let mut out = Vec::new();
        while v.is_finite() && v <= hi + step * 1e-9 && out.len() < 50 {
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

/// A marker of radius `r` at (x, y); `attrs` adds class, fill, stroke.
fn marker_svg(m: Marker, x: f64, y: f64, r: f64, attrs: &str) -> String {
    match m {
        Marker::Circle => format!(r#"<circle cx="{x:.1}" cy="{y:.1}" r="{r:.1}"{attrs}"#),
        Marker::Square => {
            let a = r * 0.9;
            format!(
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}"{attrs}"#,
                x - a,
                y - a,
                2.0 * a,
                2.0 * a
            )
        }
        Marker::Diamond => {
            let a = r * 1.25;
            format!(
                r#"<path d="M{x:.1},{:.1} L{:.1},{y:.1} L{x:.1},{:.1} L{:.1},{y:.1} Z"{attrs}"#,
                y - a,
                x + a,
                y + a,
                x - a
            )
        }
        Marker::Triangle => {
            let a = r * 1.25;
            format!(
                r#"<path d="M{x:.1},{:.1} L{:.1},{:.1} L{:.1},{:.1} Z"{attrs}"#,
                y - a,
                x + a,
                y + a * 0.8,
                x - a,
                y + a * 0.8
            )
        }
    }
}

/// A laid-out legend: entries with their wrapped labels.
struct Legend {
    items: Vec<(LegendItem, Vec<String>)>,
    w: f64,
    h: f64,
}

const LEGEND_PX: f64 = 11.0;
const LINE_H: f64 = 13.2;

fn legend(chart: &Chart, w: f64) -> Legend {
    let mut items: Vec<LegendItem> = if chart.legend.is_empty() {
        chart
            .series
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.no_legend && !s.name.is_empty())
            .map(|(i, s)| {
                let line = s.line.unwrap_or(chart.kind == ChartKind::Line);
                LegendItem {
                    label: s.name.clone(),
                    colour: s.colour.clone().unwrap_or_else(|| colour(i)),
                    marker: (!line && chart.kind == ChartKind::Scatter).then_some(s.marker),
                    line: line && chart.kind != ChartKind::Bar && chart.kind != ChartKind::HBar,
                    dashed: s.dashed,
                }
            })
            .collect()
    } else {
        chart.legend.clone()
    };
    if items.len() > MAX_LEGEND {
        let more = items.len() - (MAX_LEGEND - 1);
        items.truncate(MAX_LEGEND - 1);
        items.push(LegendItem {
            label: format!("+{more} more (see the table)"),
            colour: "none".into(),
            ..Default::default()
        });
    }
    // A legend takes at most about a third of the chart; longer labels wrap.
    let cap = (w * 0.3).max(90.0);
    let items: Vec<(LegendItem, Vec<String>)> = items
        .into_iter()
        .map(|it| {
            let lines = wrap(&it.label, cap - 20.0, LEGEND_PX, false);
            (it, lines)
        })
        .collect();
    if items.is_empty() {
        return Legend {
            items,
            w: 0.0,
            h: 0.0,
        };
    }
    let text_w = items
        .iter()
        .map(|(_, l)| widest(l, LEGEND_PX, false))
        .fold(0.0, f64::max);
    let h = items
        .iter()
        .map(|(_, l)| l.len() as f64 * LINE_H + 5.0)
        .sum();
    Legend {
        items,
        w: 12.0 + 20.0 + text_w + 4.0,
        h,
    }
}

fn draw_legend(s: &mut String, lg: &Legend, x: f64, top: f64) {
    let mut y = top + 4.0;
    for (it, lines) in &lg.items {
        let cy = y + 5.0;
        let swatch = if it.colour == "none" {
            String::new()
        } else if it.line {
            format!(
                r#"<line x1="{:.1}" y1="{cy:.1}" x2="{:.1}" y2="{cy:.1}" stroke="{}" stroke-width="2.5"{}/>"#,
                x,
                x + 14.0,
                it.colour,
                if it.dashed {
                    r#" stroke-dasharray="4 3""#
                } else {
                    ""
                }
            )
        } else if let Some(m) = it.marker {
            marker_svg(
                m,
                x + 7.0,
                cy,
                4.5,
                &format!(
                    r#" fill="{}" stroke="white" stroke-width="0.8"/>"#,
                    it.colour
                ),
            )
        } else {
            format!(
                r#"<rect x="{x:.1}" y="{:.1}" width="14" height="10" fill="{}"/>"#,
                cy - 5.0,
                it.colour
            )
        };
        let _ = write!(
            s,
            r#"<g class="legend-entry">{swatch}{}</g>"#,
            text_el(x + 20.0, cy + 4.0, lines, "start", LEGEND_PX, "")
        );
        y += lines.len() as f64 * LINE_H + 5.0;
    }
}

/// Where label boxes may go: the plot, minus what is already placed.
struct Placer {
    area: Rect,
    taken: Vec<Rect>,
    points: Vec<(f64, f64)>,
}

impl Placer {
    /// The best of `cands` (top-left corners of a `w` × `h` box): inside the
    /// area, over no placed box, over the fewest data points; then taken.
    fn place(&mut self, cands: &[(f64, f64)], w: f64, h: f64) -> (f64, f64) {
        let score = |&(x, y): &(f64, f64)| {
            let r = Rect(x, y, x + w, y + h);
            let mut sc = 0.0;
            if !r.inside(&self.area) {
                sc += 10_000.0;
            }
            sc += 1000.0 * self.taken.iter().filter(|t| t.overlap(&r)).count() as f64;
            sc + self.points.iter().filter(|p| r.contains(**p)).count() as f64
        };
        let best = cands
            .iter()
            .copied()
            .min_by(|a, b| score(a).total_cmp(&score(b)))
            .unwrap_or((self.area.0, self.area.1));
        self.taken
            .push(Rect(best.0, best.1, best.0 + w, best.1 + h));
        best
    }
}

/// Renders `chart` as a standalone `<svg>` element of `width` × `height` pixels
/// (at least 200 × 120; a horizontal bar chart is as tall as its rows need).
pub fn render(chart: &Chart, width: u32, height: u32) -> String {
    if chart.kind == ChartKind::HBar {
        return render_hbar(chart, width);
    }
    let (w, h) = (width.max(200) as f64, height.max(120) as f64);
    let bar = chart.kind == ChartKind::Bar;
    let x_log = chart.x_log && !bar;
    let lg = legend(chart, w);
    let title = wrap(&chart.title, w - 16.0, 14.0, true);
    let top = 16.0 + 17.0 * title.len() as f64;
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
    let forced = chart
        .y_range
        .map(|(a, b)| vec![a, b])
        .unwrap_or_default()
        .into_iter()
        .filter(|v| usable(*v, chart.y_log));
    let (ylo, yhi) = range(
        kept.iter()
            .flatten()
            .map(|p| p.1)
            .chain(whiskers.iter().flatten().flat_map(|w| [w.1, w.2]))
            .chain(forced),
        chart.y_log,
        bar,
    );
    // Bars grow from the axis: on a log axis the smallest bar needs a decade
    // below it, or a count of 1 draws as nothing.
    let ylo = if bar && chart.y_log && kept.iter().flatten().any(|p| p.1 <= ylo * 1.000_001) {
        ylo / 10.0
    } else {
        ylo
    };
    let yticks = ticks(ylo, yhi, chart.y_log);
    let tick_w = yticks
        .iter()
        .map(|v| text_width(&tick_label(*v), 11.0, false))
        .fold(0.0, f64::max);
    let ncat = if bar {
        let max_x = kept
            .iter()
            .flatten()
            .map(|p| p.0)
            .filter(|x| *x >= 0.0 && *x < 100_000.0)
            .fold(-1.0f64, f64::max);
        (max_x.floor() as i64 + 1).max(chart.x_categories.len().min(100_000) as i64) as usize
    } else {
        0
    };
    let right = 12.0 + lg.w;
    let ylab_lines_guess = 1.0;
    let left = 10.0 + LINE_H * ylab_lines_guess + 6.0 + tick_w + 8.0;
    let plot_w = (w - left - right).max(40.0);
    // Category labels wrap within their slot; the x label within the plot.
    let every = if bar { (ncat / 24).max(1) } else { 1 };
    let slot = plot_w / ncat.max(1) as f64;
    let cat_lines: Vec<Vec<String>> = (0..ncat)
        .map(|i| {
            let label = category_label(chart, i);
            wrap(&label, slot * every as f64 - 4.0, 11.0, false)
        })
        .collect();
    let cat_rows = cat_lines.iter().map(Vec::len).max().unwrap_or(1) as f64;
    let xlab = wrap(&chart.x_label, plot_w, 11.0, false);
    let bottom = 8.0 + LINE_H * cat_rows + 6.0 + LINE_H * xlab.len() as f64 + 4.0;
    let plot_h = (h - top - bottom).max(30.0);
    let ylab = wrap(&chart.y_label, plot_h, 11.0, false);
    // A y label of several lines takes more of the left margin.
    let left = left + LINE_H * (ylab.len() as f64 - ylab_lines_guess);
    let h = h.max(top + bottom + 30.0);
    let w = w.max(left + right + 40.0);
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
    let ya = Axis {
        lo: ylo,
        hi: yhi,
        log: chart.y_log,
        p0: h - bottom,
        p1: top,
    };

    let mut s = String::new();
    svg_open(&mut s, w, h, &chart.title, &title);
    // Category bands go behind everything.
    let slot_px = (xa.p1 - xa.p0) / ncat.max(1) as f64;
    for m in &chart.marks {
        if let Mark::Category { index, class, .. } = m {
            if bar && *index < ncat {
                let x = xa.t(*index as f64);
                let _ = write!(
                    s,
                    r##"<rect class="{}" x="{:.1}" y="{top:.1}" width="{slot_px:.1}" height="{:.1}" fill="#fff3c4"/>"##,
                    escape(class),
                    x - slot_px / 2.0,
                    h - bottom - top
                );
            }
        }
    }
    // Grid, ticks and tick labels.
    for v in &yticks {
        let y = ya.t(*v);
        let _ = write!(
            s,
            r##"<line class="grid" x1="{left:.1}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#e4e4e4"/><line x1="{:.1}" y1="{y:.1}" x2="{left:.1}" y2="{y:.1}" stroke="#000"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            w - right,
            left - 4.0,
            left - 6.0,
            y + 4.0,
            escape(&tick_label(*v))
        );
    }
    if bar {
        for i in (0..ncat).step_by(every) {
            let x = xa.t(i as f64);
            let _ = write!(
                s,
                r##"<line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#000"/>"##,
                h - bottom,
                h - bottom + 4.0,
            );
            s.push_str(&text_el(
                x,
                h - bottom + 16.0,
                &cat_lines[i],
                "middle",
                11.0,
                "",
            ));
        }
    } else {
        for v in xa.ticks() {
            let x = xa.t(v);
            let _ = write!(
                s,
                r##"<line class="grid" x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{:.1}" stroke="#e4e4e4"/><line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#000"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
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
        r##"<path class="axis" d="M{left:.1},{top:.1} L{left:.1},{:.1} L{:.1},{:.1}" fill="none" stroke="#000"/>"##,
        h - bottom,
        w - right,
        h - bottom
    );
    s.push_str(&text_el(
        (left + w - right) / 2.0,
        h - bottom + 16.0 + LINE_H * cat_rows + 4.0,
        &xlab,
        "middle",
        11.0,
        "",
    ));
    let _ = write!(
        s,
        r#"<g transform="translate(18,{:.1}) rotate(-90)">{}</g>"#,
        (top + h - bottom) / 2.0,
        text_el(0.0, 0.0, &ylab, "middle", 11.0, "")
    );
    // Data.
    let nser = chart.series.len().max(1);
    let mut drawn_points: Vec<(f64, f64)> = Vec::new();
    for (i, pts) in kept.iter().enumerate() {
        let se = &chart.series[i];
        let c = se.colour.clone().unwrap_or_else(|| colour(i));
        let chosen = if se.chosen { " chosen" } else { "" };
        let line = se.line.unwrap_or(chart.kind == ChartKind::Line) && !bar;
        if bar {
            let bw = slot_px * 0.8 / nser as f64;
            let base = if chart.y_log { ya.p0 } else { ya.t(0.0) };
            for &(x, y) in pts {
                if !(x >= 0.0 && (x as usize) < ncat) {
                    continue;
                }
                let x0 = xa.t(x.floor()) - slot_px * 0.4 + bw * i as f64;
                let yv = ya.t(y);
                let (y0, hh) = if yv < base {
                    (yv, base - yv)
                } else {
                    (base, yv - base)
                };
                let _ = write!(
                    s,
                    r#"<rect class="mark bar{chosen}" x="{x0:.1}" y="{y0:.1}" width="{:.1}" height="{hh:.1}" fill="{c}"><title>{}: {}</title></rect>"#,
                    bw.max(0.5),
                    escape(&se.name),
                    escape(&tick_label(y))
                );
            }
        } else if line {
            if pts.is_empty() {
                continue;
            }
            let d: Vec<String> = pts
                .iter()
                .map(|&(x, y)| format!("{:.1},{:.1}", xa.t(x), ya.t(y)))
                .collect();
            let _ = write!(
                s,
                r#"<polyline class="mark series{chosen}" points="{}" fill="none" stroke="{c}" stroke-width="{}"{}><title>{}</title></polyline>"#,
                d.join(" "),
                if se.chosen { 3.5 } else { 1.8 },
                if se.dashed {
                    r#" stroke-dasharray="5 4""#
                } else {
                    ""
                },
                escape(&se.name)
            );
        } else {
            for (j, &(x, y)) in pts.iter().enumerate() {
                let (px, py) = (xa.t(x), ya.t(y));
                drawn_points.push((px, py));
                let tip = se.tips.get(j).unwrap_or(&se.name);
                let attrs = format!(
                    r#" class="mark point{chosen}" fill="{c}" fill-opacity="0.8" stroke="white" stroke-width="0.8"><title>{}</title>{}"#,
                    escape(tip),
                    match se.marker {
                        Marker::Circle => "</circle>",
                        Marker::Square => "</rect>",
                        _ => "</path>",
                    }
                );
                s.push_str(&marker_svg(se.marker, px, py, 4.0, &attrs));
            }
        }
    }
    // Spread whiskers.
    for (i, ws) in whiskers.iter().enumerate() {
        let c = chart.series[i].colour.clone().unwrap_or_else(|| colour(i));
        for &(x, lo, hi) in ws {
            let px = if bar {
                if !(x >= 0.0 && (x as usize) < ncat) {
                    continue;
                }
                let bw = slot_px * 0.8 / nser as f64;
                xa.t(x.floor()) - slot_px * 0.4 + bw * (i as f64 + 0.5)
            } else {
                xa.t(x)
            };
            let (y0, y1) = (ya.t(lo), ya.t(hi));
            let _ = write!(
                s,
                r#"<path class="mark spread" d="M{:.1},{y0:.1} L{:.1},{y0:.1} M{px:.1},{y0:.1} L{px:.1},{y1:.1} M{:.1},{y1:.1} L{:.1},{y1:.1}" stroke="{}" stroke-width="1.2" fill="none"/>"#,
                px - 3.0,
                px + 3.0,
                px - 3.0,
                px + 3.0,
                if bar { "#333".to_string() } else { c.clone() }
            );
        }
    }
    // Annotations: labels go where they fit inside the plot.
    let mut placer = Placer {
        area: Rect(left + 2.0, top, w - right - 2.0, h - bottom - 2.0),
        taken: Vec::new(),
        points: drawn_points,
    };
    for m in &chart.marks {
        match m {
            Mark::Point { x, y, label, class } => {
                if !(usable(*x, x_log) && usable(*y, chart.y_log)) {
                    continue;
                }
                let (px, py) = (xa.t(*x), ya.t(*y));
                let lines = wrap(label, (plot_w * 0.45).max(80.0), 11.0, true);
                let (lw, lh) = (widest(&lines, 11.0, true), LINE_H * lines.len() as f64);
                let d = 11.0;
                let cands = [
                    (px + d, py - lh / 2.0),
                    (px - d - lw, py - lh / 2.0),
                    (px + d * 0.7, py - d * 0.7 - lh),
                    (px - d * 0.7 - lw, py - d * 0.7 - lh),
                    (px + d * 0.7, py + d * 0.7),
                    (px - d * 0.7 - lw, py + d * 0.7),
                    (px - lw / 2.0, py - d - lh),
                    (px - lw / 2.0, py + d),
                    (px + d, py - lh - 24.0),
                    (px - d - lw, py - lh - 24.0),
                    (px + d, py + 24.0),
                    (px - d - lw, py + 24.0),
                ];
                let (lx, ly) = placer.place(&cands, lw, lh);
                // A leader from the ring to the label's nearest side.
                let (ax, ay) = (px.clamp(lx, lx + lw), py.clamp(ly, ly + lh));
                let cls = escape(class);
                let _ = write!(
                    s,
                    r##"<circle class="{cls}" cx="{px:.1}" cy="{py:.1}" r="8" fill="none" stroke="#111" stroke-width="2"/><line class="{cls}" x1="{px:.1}" y1="{py:.1}" x2="{ax:.1}" y2="{ay:.1}" stroke="#111" stroke-width="0.8"/><rect x="{lx:.1}" y="{ly:.1}" width="{lw:.1}" height="{lh:.1}" fill="white" fill-opacity="0.85"/>{}"##,
                    text_el(
                        lx,
                        ly + 10.5,
                        &lines,
                        "start",
                        11.0,
                        &format!(r#" class="{cls}" font-weight="bold""#)
                    )
                );
            }
            Mark::Rule { x, label, class } => {
                if !usable(*x, x_log) {
                    continue;
                }
                let px = xa.t(*x);
                let lines = wrap(label, (plot_w * 0.45).max(80.0), 11.0, true);
                let (lw, lh) = (widest(&lines, 11.0, true), LINE_H * lines.len() as f64);
                let (lx, ly) = placer.place(
                    &[
                        (px + 4.0, top + 2.0),
                        (px - 4.0 - lw, top + 2.0),
                        (px + 4.0, top + 4.0 + lh),
                        (px - 4.0 - lw, top + 4.0 + lh),
                    ],
                    lw,
                    lh,
                );
                let cls = escape(class);
                let _ = write!(
                    s,
                    r##"<line class="{cls}" x1="{px:.1}" y1="{top:.1}" x2="{px:.1}" y2="{:.1}" stroke="#111" stroke-width="1.5" stroke-dasharray="6 4"/>{}"##,
                    h - bottom,
                    text_el(
                        lx,
                        ly + 10.5,
                        &lines,
                        "start",
                        11.0,
                        &format!(r#" class="{cls}" font-weight="bold""#)
                    )
                );
            }
            Mark::Category {
                index,
                label,
                class,
            } => {
                if !(bar && *index < ncat) || label.is_empty() {
                    continue;
                }
                let px = xa.t(*index as f64);
                let lines = wrap(label, slot_px - 4.0, 11.0, true);
                let (lw, lh) = (widest(&lines, 11.0, true), LINE_H * lines.len() as f64);
                let (lx, ly) = placer.place(&[(px - lw / 2.0, top + 2.0)], lw, lh);
                let _ = write!(
                    s,
                    "{}",
                    text_el(
                        lx + lw / 2.0,
                        ly + 10.5,
                        &lines,
                        "middle",
                        11.0,
                        &format!(r#" class="{}" font-weight="bold""#, escape(class))
                    )
                );
            }
        }
    }
    draw_legend(&mut s, &lg, w - right + 12.0, top);
    s.push_str("</svg>");
    s
}

/// Horizontal grouped bars: a row per category with its label on the left
/// (wrapped to at most 40 % of the width), values along x from zero.
fn render_hbar(chart: &Chart, width: u32) -> String {
    let w = width.max(200) as f64;
    let lg = legend(chart, w);
    let title = wrap(&chart.title, w - 16.0, 14.0, true);
    let top = 16.0 + 17.0 * title.len() as f64 + 4.0;
    let kept: Vec<Vec<(f64, f64)>> = chart
        .series
        .iter()
        .map(|s| {
            s.points
                .iter()
                .copied()
                .filter(|&(x, y)| usable(x, false) && usable(y, chart.y_log))
                .collect()
        })
        .collect();
    let max_x = kept
        .iter()
        .flatten()
        .map(|p| p.0)
        .filter(|x| *x >= 0.0 && *x < 10_000.0)
        .fold(-1.0f64, f64::max);
    let ncat = (max_x.floor() as i64 + 1).max(chart.x_categories.len().min(10_000) as i64) as usize;
    let chosen: Vec<(usize, &str, &str)> = chart
        .marks
        .iter()
        .filter_map(|m| match m {
            Mark::Category {
                index,
                label,
                class,
            } => Some((*index, label.as_str(), class.as_str())),
            _ => None,
        })
        .collect();
    let cap = w * 0.4;
    let labels: Vec<Vec<String>> = (0..ncat)
        .map(|i| {
            let name = category_label(chart, i);
            let mut lines = wrap(&name, cap, 11.0, false);
            if let Some((_, l, _)) = chosen.iter().find(|c| c.0 == i) {
                if !l.is_empty() {
                    lines.insert(0, l.to_string());
                }
            }
            lines
        })
        .collect();
    let label_w = labels
        .iter()
        .map(|l| widest(l, 11.0, true))
        .fold(0.0, f64::max);
    let nser = chart.series.len().max(1);
    let bar_h = 11.0;
    let row_h: Vec<f64> = labels
        .iter()
        .map(|l| (nser as f64 * bar_h + 10.0).max(l.len() as f64 * LINE_H + 8.0))
        .collect();
    let plot_h: f64 = row_h.iter().sum::<f64>().max(30.0);
    let left = 10.0 + label_w + 10.0;
    let right = 12.0 + lg.w;
    let plot_w = (w - left - right).max(40.0);
    let xlab = wrap(&chart.y_label, plot_w, 11.0, false);
    let bottom = 8.0 + LINE_H + 6.0 + LINE_H * xlab.len() as f64 + 4.0;
    let h = (top + plot_h + bottom).max(120.0).max(top + lg.h + 8.0);
    let w = w.max(left + right + 40.0);
    let (lo, hi) = range(kept.iter().flatten().map(|p| p.1), chart.y_log, true);
    let va = Axis {
        lo,
        hi,
        log: chart.y_log,
        p0: left,
        p1: w - right,
    };
    let mut s = String::new();
    svg_open(&mut s, w, h, &chart.title, &title);
    let row_top: Vec<f64> = row_h
        .iter()
        .scan(top, |y, rh| {
            let t = *y;
            *y += rh;
            Some(t)
        })
        .collect();
    for (i, class) in chosen.iter().filter(|c| c.0 < ncat).map(|c| (c.0, c.2)) {
        let _ = write!(
            s,
            r##"<rect class="{}" x="4" y="{:.1}" width="{:.1}" height="{:.1}" fill="#fff3c4"/>"##,
            escape(class),
            row_top[i],
            w - right - 4.0,
            row_h[i]
        );
    }
    for v in va.ticks() {
        let x = va.t(v);
        let _ = write!(
            s,
            r##"<line class="grid" x1="{x:.1}" y1="{top:.1}" x2="{x:.1}" y2="{:.1}" stroke="#e4e4e4"/><line x1="{x:.1}" y1="{:.1}" x2="{x:.1}" y2="{:.1}" stroke="#000"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            top + plot_h,
            top + plot_h,
            top + plot_h + 4.0,
            top + plot_h + 16.0,
            escape(&tick_label(v))
        );
    }
    for (i, lines) in labels.iter().enumerate() {
        let is_chosen = chosen.iter().any(|c| c.0 == i);
        let block = LINE_H * lines.len() as f64;
        let y = row_top[i] + (row_h[i] - block) / 2.0 + 10.0;
        let attrs = if is_chosen {
            r#" font-weight="bold" class="chosen""#
        } else {
            ""
        };
        s.push_str(&text_el(left - 8.0, y, lines, "end", 11.0, attrs));
    }
    let base = if chart.y_log { va.p0 } else { va.t(0.0) };
    for (k, pts) in kept.iter().enumerate() {
        let se = &chart.series[k];
        let c = se.colour.clone().unwrap_or_else(|| colour(k));
        for &(x, v) in pts {
            if !(x >= 0.0 && (x as usize) < ncat) {
                continue;
            }
            let i = x as usize;
            let y0 = row_top[i] + (row_h[i] - nser as f64 * bar_h) / 2.0 + bar_h * k as f64;
            let xv = va.t(v);
            let (x0, bw) = if xv < base {
                (xv, base - xv)
            } else {
                (base, xv - base)
            };
            let _ = write!(
                s,
                r#"<rect class="mark bar{}" x="{x0:.1}" y="{y0:.1}" width="{:.1}" height="{:.1}" fill="{c}"><title>{}: {}</title></rect>"#,
                if chosen.iter().any(|c| c.0 == i) {
                    " chosen"
                } else {
                    ""
                },
                bw.max(0.5),
                bar_h - 1.0,
                escape(&se.name),
                escape(&tick_label(v))
            );
        }
    }
    let _ = write!(
        s,
        r##"<path class="axis" d="M{left:.1},{top:.1} L{left:.1},{:.1} L{:.1},{:.1}" fill="none" stroke="#000"/>"##,
        top + plot_h,
        w - right,
        top + plot_h
    );
    s.push_str(&text_el(
        (left + w - right) / 2.0,
        top + plot_h + 16.0 + LINE_H + 4.0,
        &xlab,
        "middle",
        11.0,
        "",
    ));
    draw_legend(&mut s, &lg, w - right + 12.0, top);
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

    /// The text of every `<tspan>` (each line of each text element).
    fn lines(s: &str) -> Vec<String> {
        s.split("<tspan")
            .skip(1)
            .filter_map(|t| Some(t.split_once('>')?.1.split_once("</tspan>")?.0.to_string()))
            .collect()
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
        assert_eq!(s.matches("legend-entry").count(), 3);
        let l = lines(&s);
        assert!(l.contains(&"x".to_string()) && l.contains(&"y".to_string()));
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
        assert_eq!(s.matches(r#"class="mark bar""#).count(), 6);
        assert!(lines(&s).contains(&"Reclaimable".to_string()));
    }

    #[test]
    fn scatter_draws_points_with_their_markers_and_tips() {
        let c = chart(
            ChartKind::Scatter,
            vec![
                Series::new("p", vec![(1.0, 1.0), (2.0, 4.0), (3.0, 9.0)])
                    .tips(vec!["one".into(), "two".into()]),
                Series::new("q", vec![(1.5, 2.0)]).marker(Marker::Diamond),
            ],
        );
        let s = render(&c, 300, 200);
        assert_eq!(
            s.matches(r#"<circle cx"#).count(),
            4,
            "three points and a legend marker"
        );
        assert_eq!(s.matches(r#"class="mark point""#).count(), 4);
        assert!(s.contains("<title>two</title>") && s.contains("<title>p</title>"));
        assert!(s.contains("<path d=\"M") && s.contains("<title>q</title></path>"));
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
        c.marks = vec![Mark::Point {
            x: 0.0,
            y: 1.0,
            label: "<i>".into(),
            class: "k\"".into(),
        }];
        let s = render(&c, 400, 300);
        assert!(s.contains("a &lt; b &amp; c &gt; d"));
        assert!(s.contains("&lt;b&gt;&amp;&quot;x&#39;"));
        assert!(s.contains("&lt;i&gt;") && s.contains("k&quot;"));
        assert!(!s.contains("<b>") && !s.contains("<i>"));
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
    fn log_bars_of_the_smallest_value_still_show() {
        let mut c = chart(
            ChartKind::Bar,
            vec![Series::new("n", vec![(0.0, 1.0), (1.0, 10_000.0)])],
        );
        c.y_log = true;
        let s = render(&c, 400, 300);
        let heights: Vec<f64> = s
            .split(r#"class="mark bar""#)
            .skip(1)
            .filter_map(|r| r.split("height=\"").nth(1)?.split('"').next()?.parse().ok())
            .collect();
        assert_eq!(heights.len(), 2);
        assert!(heights[0] > 5.0, "{heights:?}");
    }

    #[test]
    fn decades_are_detected() {
        assert!(spans_decades([0.9, 0.01, 1e-4, 0.0]));
        assert!(!spans_decades([90.0, 100.0, 95.0]));
        assert!(!spans_decades([0.0, f64::NAN, -5.0]));
        assert!(!spans_decades([]));
    }

    #[test]
    fn empty_and_nan_inputs_do_not_panic() {
        for kind in [
            ChartKind::Line,
            ChartKind::Scatter,
            ChartKind::Bar,
            ChartKind::HBar,
        ] {
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
                c.marks = vec![
                    Mark::Point {
                        x: f64::NAN,
                        y: 1.0,
                        label: "p".into(),
                        class: "chosen".into(),
                    },
                    Mark::Rule {
                        x: f64::INFINITY,
                        label: String::new(),
                        class: "r".into(),
                    },
                    Mark::Category {
                        index: usize::MAX,
                        label: "c".into(),
                        class: "chosen".into(),
                    },
                ];
                c.y_range = Some((f64::NAN, 1e308));
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
            assert_eq!(s.matches("class=\"mark spread\"").count(), 2, "{s}");
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

    #[test]
    fn widths_and_wrapping() {
        // Wider letters are wider; bold is not narrower.
        assert!(text_width("MMMM", 11.0, false) > text_width("iiii", 11.0, false) * 2.0);
        assert!(text_width("heap", 11.0, true) >= text_width("heap", 11.0, false));
        assert_eq!(text_width("", 11.0, false), 0.0);
        let l = wrap(
            "static:thp heap-small:thp heap-large:hugetlb",
            120.0,
            11.0,
            false,
        );
        assert_eq!(l.len(), 3, "{l:?}");
        assert!(l.iter().all(|x| text_width(x, 11.0, false) <= 120.0));
        // A word longer than the line keeps its own line, whole.
        assert_eq!(wrap("a verylongwordindeed b", 30.0, 11.0, false).len(), 3);
        assert_eq!(wrap("", 50.0, 11.0, false), vec![String::new()]);
    }

    #[test]
    fn a_long_legend_is_cut_to_its_maximum_and_says_so() {
        let series: Vec<Series> = (0..24)
            .map(|i| Series::new(format!("mapping number {i}"), vec![(i as f64, 1.0)]))
            .collect();
        let s = render(&chart(ChartKind::Scatter, series), 760, 380);
        assert_eq!(s.matches("legend-entry").count(), MAX_LEGEND);
        assert!(s.contains("+17 more"), "{s}");
    }

    #[test]
    fn long_texts_wrap_instead_of_being_cut() {
        let long = "static:thp heap-small:thp heap-large:hugetlb-1g heap-large:thp";
        let mut c = chart(
            ChartKind::Scatter,
            vec![Series::new(long, vec![(1.0, 1.0), (2.0, 2.0)])],
        );
        c.title = format!("{long} {long}");
        let s = render(&c, 400, 300);
        let l = lines(&s);
        assert!(!s.contains('…'));
        // Every word of the name is drawn, in a legend narrower than the chart.
        for word in long.split(' ') {
            assert!(l.iter().any(|x| x.contains(word)), "{word}: {l:?}");
        }
        for x in &l {
            assert!(text_width(x, 14.0, true) <= 400.0, "{x}");
        }
    }

    #[test]
    fn marks_are_drawn_with_their_class_and_label() {
        let mut c = chart(
            ChartKind::Scatter,
            vec![Series::new(
                "p",
                vec![(1.0, 10.0), (100.0, 90.0), (1000.0, 95.0)],
            )],
        );
        c.x_log = true;
        c.y_range = Some((0.0, 100.0));
        c.marks = vec![
            Mark::Point {
                x: 100.0,
                y: 90.0,
                label: "plan: heap-large".into(),
                class: "chosen".into(),
            },
            Mark::Point {
                x: 100.0,
                y: 90.0,
                label: "knee".into(),
                class: "knee".into(),
            },
            Mark::Rule {
                x: 10.0,
                label: "recommended".into(),
                class: "rule".into(),
            },
        ];
        let s = render(&c, 600, 300);
        assert_eq!(s.matches(r#"<circle class="chosen""#).count(), 1);
        assert_eq!(s.matches(r#"<circle class="knee""#).count(), 1);
        assert!(s.contains(r#"<line class="rule""#));
        let l = lines(&s);
        for want in ["plan: heap-large", "knee", "recommended"] {
            assert!(l.contains(&want.to_string()), "{want}");
        }
        // The forced range reaches 0 and 100 whatever the data.
        assert!(s.contains(">0<") && s.contains(">100<"), "{s}");
        // Two labels of one point are placed apart.
        let boxes: Vec<(f64, f64)> = s
            .split("<rect x=\"")
            .skip(1)
            .filter_map(|r| {
                let x: f64 = r.split('"').next()?.parse().ok()?;
                let y: f64 = r.split("y=\"").nth(1)?.split('"').next()?.parse().ok()?;
                Some((x, y))
            })
            .collect();
        assert!(boxes.len() >= 2);
        assert_ne!(boxes[0], boxes[1]);
    }

    #[test]
    fn horizontal_bars_have_a_row_per_category_and_mark_the_chosen_one() {
        let mut c = chart(
            ChartKind::HBar,
            vec![
                Series::new("predicted", vec![(0.0, 2.0), (1.0, 1.1)]),
                Series::new("measured", vec![(0.0, 2.0), (1.0, 1.2)]),
            ],
        );
        c.x_categories = vec![
            "all-small".into(),
            "static:thp heap-small:thp heap-large:hugetlb (run 20)".into(),
        ];
        c.marks = vec![Mark::Category {
            index: 1,
            label: "plan".into(),
            class: "chosen".into(),
        }];
        let s = render(&c, 700, 0);
        assert_eq!(s.matches(r#"class="mark bar""#).count(), 2);
        assert_eq!(s.matches(r#"class="mark bar chosen""#).count(), 2);
        assert!(s.contains(r#"<rect class="chosen""#));
        let l = lines(&s);
        assert!(l.contains(&"plan".to_string()));
        assert!(l.iter().any(|x| x.contains("heap-large:hugetlb")), "{l:?}");
        assert!(!s.contains('…'));
    }
}
