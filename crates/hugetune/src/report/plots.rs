//! The report's four plots, built on `svg`: PMB against huge pages needed (seed 001
//! fig. 3), miss-ratio curves per page size, predicted against measured time per
//! mapping (fig. 4), and a strip plot of the A/B runs, which `svg::Chart` has no
//! kind for (categories of points with a median mark), drawn here directly.
//!
//! Invariants: every plot marks the recommended plan (class `chosen`: a ringed
//! point, a heavier curve, a shaded row or column, each labelled) wherever the
//! plan appears in it; no legend lists mappings one by one (the PMB plot groups
//! them by page size and by one or several categories, at most eight entries);
//! the same page size has the same colour in every plot.

use super::view::{label_parts, ComparedSet, Knee, MappingView, MrcCurve, RunView};
use hugetune_render::svg::{
    self, colour, escape, text_width, tick_label, Chart, ChartKind, LegendItem, Mark, Marker,
    Series, FONT,
};
use std::fmt::Write;

const W: u32 = 760;
const H: u32 = 380;

/// How far above the straight line (in the unit square) a knee must be: below
/// it the benefit grows about in proportion to the pages and no mapping stands out.
pub const KNEE_MIN_LIFT: f64 = 0.05;

/// The mappings no cheaper one beats (cheapest first), among those that need
/// huge pages and have a finite PMB.
fn frontier(mappings: &[MappingView]) -> Vec<&MappingView> {
    let mut pts: Vec<&MappingView> = mappings.iter().filter(|m| m.pmb.is_finite()).collect();
    pts.sort_by(|a, b| {
        a.huge_pages()
            .cmp(&b.huge_pages())
            .then(b.pmb.total_cmp(&a.pmb))
    });
    let mut frontier: Vec<&MappingView> = Vec::new();
    for m in pts {
        if m.huge_pages() > 0 && m.pmb > frontier.last().map_or(0.0, |f| f.pmb) {
            frontier.push(m);
        }
    }
    frontier
}

/// The knee of the PMB-against-pages frontier: among the mappings no cheaper one
/// beats, the one farthest above the straight line from no pages (0 %) to the
/// best (both axes scaled to 1), as Kneedle does. `None` with fewer than two
/// frontier mappings that need pages, no benefit at all, or no point at least
/// `KNEE_MIN_LIFT` above the line.
pub fn knee(mappings: &[MappingView]) -> Option<Knee> {
    let frontier = frontier(mappings);
    let last = frontier.last()?;
    let (xmax, ymax) = (last.huge_pages() as f64, last.pmb);
    if frontier.len() < 2 || ymax <= 0.0 {
        return None;
    }
    let lift = |m: &MappingView| m.pmb / ymax - m.huge_pages() as f64 / xmax;
    let best = frontier
        .iter()
        .max_by(|a, b| lift(a).total_cmp(&lift(b)))
        .copied()?;
    if lift(best) < KNEE_MIN_LIFT {
        return None;
    }
    Some(Knee {
        mapping: best.label.clone(),
        huge_pages: best.huge_pages(),
        pmb: best.pmb,
    })
}

/// The PMB plot's colours: the largest page a mapping uses, which is also what
/// it asks of the machine (1 GB pages reserved early, a 2 MB pool, or nothing
/// reserved for THP).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum PageGroup {
    Hugetlb1g,
    Hugetlb2m,
    Thp,
    Small,
}

impl PageGroup {
    pub fn name(self) -> &'static str {
        match self {
            PageGroup::Hugetlb1g => "uses 1 GB hugetlb",
            PageGroup::Hugetlb2m => "uses 2 MB hugetlb",
            PageGroup::Thp => "THP only",
            PageGroup::Small => "no huge pages",
        }
    }

    /// 2 MB is orange and 1 GB green here as on the miss-ratio plot.
    pub fn colour(self) -> &'static str {
        match self {
            PageGroup::Hugetlb1g => "#2ca02c",
            PageGroup::Hugetlb2m => "#ff7f0e",
            PageGroup::Thp => "#9467bd",
            PageGroup::Small => "#7f7f7f",
        }
    }
}

/// A mapping's page group: from the backings its label names, else from the
/// pages it needs.
pub fn page_group(m: &MappingView) -> PageGroup {
    let from_label = label_parts(&m.label)
        .iter()
        .filter_map(|(_, b)| match *b {
            "hugetlb" | "hugetlb-2m" => Some(PageGroup::Hugetlb2m),
            "hugetlb-1g" => Some(PageGroup::Hugetlb1g),
            b if b.starts_with("thp") => Some(PageGroup::Thp),
            _ => None,
        })
        .min();
    let from_pages = [
        (m.hugetlb_1g_pages, PageGroup::Hugetlb1g),
        (m.hugetlb_pages, PageGroup::Hugetlb2m),
        (m.thp_pages, PageGroup::Thp),
    ]
    .into_iter()
    .find(|(n, _)| *n > 0)
    .map(|(_, g)| g);
    from_label.or(from_pages).unwrap_or(PageGroup::Small)
}

/// Whether the PMB plot's page axis is logarithmic, and then how many mappings
/// (those without huge pages, at 0 %) it cannot draw: (drawn, left out).
pub fn pmb_drawn(mappings: &[MappingView]) -> (usize, usize) {
    let zero = mappings.iter().filter(|m| m.huge_pages() == 0).count();
    if pmb_x_log(mappings) {
        (mappings.len() - zero, zero)
    } else {
        (mappings.len(), 0)
    }
}

fn pmb_x_log(mappings: &[MappingView]) -> bool {
    svg::spans_decades(mappings.iter().map(|m| m.huge_pages() as f64))
}

/// Seed 001 fig. 3: a point per mapping, coloured by page size and shaped by
/// one or several categories (so the legend stays short: names are tooltips
/// and the table's), the frontier dashed, the knee and the plan ringed and
/// labelled. The page axis is logarithmic where the pages span decades.
pub fn pmb_chart(mappings: &[MappingView], knee: Option<&Knee>, plan: Option<&str>) -> String {
    let x_log = pmb_x_log(mappings);
    // The legend lists what is drawn: a log axis cannot draw 0 pages.
    let drawn: Vec<MappingView> = mappings
        .iter()
        .filter(|m| !x_log || m.huge_pages() > 0)
        .cloned()
        .collect();
    let mappings = &drawn[..];
    let mut groups: Vec<(PageGroup, bool)> = Vec::new();
    for m in mappings {
        let k = (page_group(m), m.base);
        if !groups.contains(&k) {
            groups.push(k);
        }
    }
    groups.sort();
    let shape = |base: bool| {
        if base {
            Marker::Circle
        } else {
            Marker::Diamond
        }
    };
    let mut series: Vec<Series> = Vec::new();
    let front: Vec<(f64, f64)> = frontier(mappings)
        .iter()
        .map(|m| (m.huge_pages() as f64, m.pmb))
        .collect();
    if front.len() > 1 {
        series.push(
            Series::new("frontier", front)
                .as_line()
                .dashed()
                .colour("#555")
                .no_legend(),
        );
    }
    for &(g, base) in &groups {
        let ms: Vec<&MappingView> = mappings
            .iter()
            .filter(|m| (page_group(m), m.base) == (g, base))
            .collect();
        series.push(
            Series::new(
                g.name(),
                ms.iter().map(|m| (m.huge_pages() as f64, m.pmb)).collect(),
            )
            .as_points()
            .colour(g.colour())
            .marker(shape(base))
            .tips(
                ms.iter()
                    .map(|m| {
                        format!(
                            "{}: {:.1}% of the maximal benefit, {} huge pages",
                            m.label,
                            m.pmb,
                            m.huge_pages()
                        )
                    })
                    .collect(),
            )
            .no_legend(),
        );
    }
    let mut legend: Vec<LegendItem> = Vec::new();
    let mut seen = Vec::new();
    for &(g, _) in &groups {
        if !seen.contains(&g) {
            seen.push(g);
            legend.push(LegendItem {
                label: g.name().into(),
                colour: g.colour().into(),
                marker: Some(Marker::Circle),
                ..Default::default()
            });
        }
    }
    for (base, name) in [(true, "one category"), (false, "several categories")] {
        if groups.iter().any(|g| g.1 == base) {
            legend.push(LegendItem {
                label: name.into(),
                colour: "#666".into(),
                marker: Some(shape(base)),
                ..Default::default()
            });
        }
    }
    if series.first().is_some_and(|s| s.name == "frontier") {
        legend.push(LegendItem {
            label: "best for its pages".into(),
            colour: "#555".into(),
            line: true,
            dashed: true,
            ..Default::default()
        });
    }
    let mut marks = Vec::new();
    let chosen = plan.and_then(|l| mappings.iter().find(|m| m.label == l));
    let knee_is_plan = knee.is_some_and(|k| chosen.is_some_and(|m| m.label == k.mapping));
    if let Some(k) = knee.filter(|_| !knee_is_plan) {
        marks.push(Mark::Point {
            x: k.huge_pages as f64,
            y: k.pmb,
            label: format!("knee: {}", k.mapping),
            class: "knee".into(),
        });
    }
    if let Some(m) = chosen {
        marks.push(Mark::Point {
            x: m.huge_pages() as f64,
            y: m.pmb,
            label: format!(
                "plan{}: {}",
                if knee_is_plan { " (the knee)" } else { "" },
                m.label
            ),
            class: if knee_is_plan {
                "chosen knee".into()
            } else {
                "chosen".into()
            },
        });
    }
    svg::render(
        &Chart {
            title: "PMB against huge pages needed".into(),
            x_label: format!(
                "huge pages needed (2 MB hugetlb + 1 GB hugetlb + THP folios){}",
                if x_log { ", log scale" } else { "" }
            ),
            y_label: "% of maximal benefit".into(),
            kind: ChartKind::Scatter,
            series,
            x_log,
            y_range: Some((0.0, 100.0)),
            marks,
            legend,
            ..Default::default()
        },
        W,
        H,
    )
}

/// The MRC page sizes ("4k", "2m", "1g") a plan's backings use.
pub fn plan_page_sizes(label: &str) -> Vec<&'static str> {
    let mut v: Vec<&'static str> = label_parts(label)
        .iter()
        .filter_map(|(_, b)| match *b {
            "hugetlb" | "hugetlb-2m" | "thp" | "thp-2m" => Some("2m"),
            "hugetlb-1g" => Some("1g"),
            _ => None,
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

fn size_name(s: &str) -> String {
    match s {
        "4k" => "4 KB pages".into(),
        "2m" => "2 MB pages".into(),
        "1g" => "1 GB pages".into(),
        other => format!("{other} pages"),
    }
}

fn size_colour(s: &str, i: usize) -> String {
    match s {
        "4k" => "#1f77b4".into(),
        "2m" => "#ff7f0e".into(),
        "1g" => "#2ca02c".into(),
        _ => colour(i + 3),
    }
}

/// Miss ratio against TLB entries, a curve per page size; the y axis is
/// logarithmic where the ratios span decades (else the 2 MB and 1 GB curves
/// vanish under the 4 KB one); the plan's page sizes drawn heavier and named.
pub fn mrc_chart(curves: &[MrcCurve], plan: Option<&str>) -> String {
    let sizes = plan.map(plan_page_sizes).unwrap_or_default();
    let y_log = svg::spans_decades(curves.iter().flat_map(|c| c.points.iter().map(|p| p.1)));
    svg::render(
        &Chart {
            title: "Miss ratio against TLB entries".into(),
            x_label: "TLB entries (log scale)".into(),
            y_label: format!("miss ratio{}", if y_log { " (log scale)" } else { "" }),
            kind: ChartKind::Line,
            series: curves
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    let chosen = sizes.contains(&c.page_size.as_str());
                    let name = size_name(&c.page_size);
                    Series::new(
                        if chosen {
                            format!("{name}: the plan's")
                        } else {
                            name
                        },
                        c.points.clone(),
                    )
                    .colour(size_colour(&c.page_size, i))
                    .chosen(chosen)
                })
                .collect(),
            x_log: true,
            y_log,
            ..Default::default()
        },
        W,
        H,
    )
}

/// Whether a compared row (`label` or `label (run N)`) is the plan's.
pub fn is_plan(row: &str, plan: &str) -> bool {
    row == plan
        || row
            .strip_prefix(plan)
            .is_some_and(|rest| rest.starts_with(" (run "))
}

/// Seed 001 fig. 4: per mapping, the predicted and the measured time, as
/// horizontal bars so that whole labels fit on the left; the plan's row shaded.
pub fn compared_chart(set: &ComparedSet, plan: Option<&str>) -> String {
    let pts = |f: fn(&super::view::Compared) -> f64| {
        set.mappings
            .iter()
            .enumerate()
            .map(|(i, c)| (i as f64, f(c)))
            .collect::<Vec<_>>()
    };
    let marks = set
        .mappings
        .iter()
        .enumerate()
        .filter(|(_, c)| plan.is_some_and(|p| is_plan(&c.label, p)))
        .map(|(i, _)| Mark::Category {
            index: i,
            label: "plan".into(),
            class: "chosen".into(),
        })
        .collect();
    svg::render(
        &Chart {
            title: format!("Predicted and measured time per mapping ({})", set.source),
            x_label: "mapping".into(),
            y_label: "time (s)".into(),
            kind: ChartKind::HBar,
            series: vec![
                Series::new("predicted", pts(|c| c.predicted_s)),
                Series::new("measured", pts(|c| c.measured_s)),
            ],
            x_categories: set.mappings.iter().map(|c| c.label.clone()).collect(),
            marks,
            ..Default::default()
        },
        W,
        0,
    )
}

/// Runs drawn at most: the newest ones (the table lists them all).
pub const MAX_RUNS_DRAWN: usize = 20;

/// Strip plot: per run, a column of baseline times and one of optimized times
/// (points spread sideways so equal times stay visible), each with its median as
/// a bar across the column; the runs of the plan shaded and labelled.
pub fn runs_chart(runs: &[RunView], plan: Option<&str>) -> String {
    let runs = &runs[runs.len().saturating_sub(MAX_RUNS_DRAWN)..];
    let (w, h) = (W as f64, H as f64);
    let all = runs
        .iter()
        .flat_map(|r| r.baseline_s.iter().chain(&r.optimized_s))
        .copied()
        .filter(|v| v.is_finite());
    let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
    for v in all {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    if hi <= lo {
        (lo, hi) = (lo - 0.5 * lo.abs().max(1e-3), hi + 0.5 * hi.abs().max(1e-3));
    }
    let step = svg::nice_step((hi - lo) / 6.0);
    let (lo, hi) = ((lo / step).floor() * step, (hi / step).ceil() * step);
    let mut tick_labels = Vec::new();
    let mut v = lo;
    while v <= hi + step * 1e-9 && tick_labels.len() < 50 {
        tick_labels.push((v, tick_label(v)));
        v += step;
    }
    let tick_w = tick_labels
        .iter()
        .map(|(_, l)| text_width(l, 11.0, false))
        .fold(0.0, f64::max);
    let legend_w = 12.0 + 20.0 + text_width("optimized", 11.0, false) + 4.0;
    // The top margin holds the plan's label above its band, clear of the points.
    let (left, right, top, bottom) = (30.0 + tick_w + 8.0, 12.0 + legend_w, 46.0, 48.0);
    let y = |v: f64| top + (hi - v) / (hi - lo) * (h - top - bottom);
    let slot = (w - left - right) / (2 * runs.len().max(1)) as f64;

    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="{FONT}" font-size="11"><title>A/B run times</title><text x="{:.1}" y="20" text-anchor="middle" font-size="14" font-weight="bold">A/B run times</text>"#,
        w / 2.0
    );
    // The plan's runs: a band behind their two columns, labelled above.
    for (i, r) in runs.iter().enumerate() {
        if plan.is_some() && r.label.as_deref() == plan {
            let x0 = left + slot * (2 * i) as f64;
            let _ = write!(
                s,
                r##"<rect class="chosen" x="{x0:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="#fff3c4"/><text class="chosen" x="{:.1}" y="{:.1}" text-anchor="middle" font-weight="bold">{}</text>"##,
                top - 18.0,
                2.0 * slot,
                h - bottom - top + 18.0,
                x0 + slot,
                top - 5.0,
                if 2.0 * slot >= text_width("plan", 11.0, true) + 4.0 {
                    "plan"
                } else {
                    "P"
                }
            );
        }
    }
    for (v, label) in &tick_labels {
        let _ = write!(
            s,
            r##"<line class="grid" x1="{left:.1}" y1="{py:.1}" x2="{x2:.1}" y2="{py:.1}" stroke="#e4e4e4"/><text x="{tx:.1}" y="{ty:.1}" text-anchor="end">{label}</text>"##,
            py = y(*v),
            x2 = w - right,
            tx = left - 6.0,
            ty = y(*v) + 4.0,
            label = escape(label)
        );
    }
    let _ = write!(
        s,
        r##"<path class="axis" d="M{left:.1},{top} L{left:.1},{b:.1} L{r:.1},{b:.1}" fill="none" stroke="#000"/><text transform="translate(16,{m:.1}) rotate(-90)" text-anchor="middle">time (s)</text><text x="{cx:.1}" y="{ly:.1}" text-anchor="middle">run</text>"##,
        b = h - bottom,
        r = w - right,
        m = (top + h - bottom) / 2.0,
        cx = (left + w - right) / 2.0,
        ly = h - 10.0
    );
    // Run ids under their columns: every n-th where they would touch.
    let id_w = runs
        .iter()
        .map(|r| text_width(&r.id.to_string(), 11.0, false))
        .fold(0.0, f64::max);
    let every = ((id_w + 4.0) / (2.0 * slot)).ceil().max(1.0) as usize;
    for (i, r) in runs.iter().enumerate() {
        for (k, times) in [&r.baseline_s, &r.optimized_s].into_iter().enumerate() {
            let x0 = left + slot * (2 * i + k) as f64;
            let c = colour(k);
            let n = times.len();
            for (j, &t) in times.iter().enumerate().filter(|(_, t)| t.is_finite()) {
                // Spread over the middle half of the slot, in run order.
                let dx = if n > 1 {
                    slot * (0.25 + 0.5 * j as f64 / (n - 1) as f64)
                } else {
                    slot * 0.5
                };
                let _ = write!(
                    s,
                    r#"<circle class="mark point" cx="{:.1}" cy="{:.1}" r="3" fill="{c}" fill-opacity="0.75"><title>run {} {}: {}</title></circle>"#,
                    x0 + dx,
                    y(t),
                    r.id,
                    if k == 0 { "baseline" } else { "optimized" },
                    escape(&hugetune_render::secs(t))
                );
            }
            if let Some(m) = hugetune_model::stats::median_finite(times) {
                let _ = write!(
                    s,
                    r#"<line class="mark median" x1="{:.1}" y1="{my:.1}" x2="{:.1}" y2="{my:.1}" stroke="{c}" stroke-width="2.5"/>"#,
                    x0 + slot * 0.15,
                    x0 + slot * 0.85,
                    my = y(m)
                );
            }
        }
        if i % every == 0 {
            let _ = write!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                left + slot * (2 * i + 1) as f64,
                h - bottom + 16.0,
                r.id
            );
        }
    }
    let lx = w - right + 12.0;
    for (k, name) in ["baseline", "optimized"].into_iter().enumerate() {
        let ly = top + 6.0 + 16.0 * k as f64;
        let _ = write!(
            s,
            r#"<g class="legend-entry"><rect x="{lx:.1}" y="{:.1}" width="14" height="10" fill="{}"/><text x="{:.1}" y="{:.1}">{name}</text></g>"#,
            ly - 5.0,
            colour(k),
            lx + 20.0,
            ly + 4.0
        );
    }
    s.push_str("</svg>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::view::tests::sample;
    use crate::report::view::Compared;

    fn mapping(label: &str, pmb: f64, pages: u64) -> MappingView {
        MappingView {
            mapping: label.into(),
            label: label.into(),
            base: true,
            pmb,
            predicted_speedup: 1.0,
            saving_ms: 0.0,
            hugetlb_pages: pages,
            hugetlb_1g_pages: 0,
            thp_pages: 0,
            confidence: 1.0,
            validations: 0,
            hosts: 0,
            spread: None,
            lost: false,
            measured_speedup: None,
            verdict: None,
            run_id: None,
        }
    }

    #[test]
    fn knee_is_the_cheap_bulk_of_the_benefit() {
        let ms = [
            mapping("all-small", 0.0, 0),
            mapping("a", 80.0, 10),
            mapping("b", 90.0, 500),
            mapping("c", 100.0, 1000),
            mapping("dominated", 50.0, 600),
        ];
        assert_eq!(knee(&ms).unwrap().mapping, "a");
        // One mapping with pages: no curve, no knee; no benefit: no knee.
        assert!(knee(&ms[..2]).is_none());
        assert!(knee(&[mapping("x", 0.0, 5), mapping("y", 0.0, 9)]).is_none());
        // Benefit in proportion to pages: no knee.
        assert!(knee(&[mapping("x", 50.0, 50), mapping("y", 100.0, 100)]).is_none());
        assert!(knee(&[]).is_none());
    }

    #[test]
    fn page_groups_come_from_the_label_or_the_pages() {
        let g = |l: &str| page_group(&mapping(l, 1.0, 1));
        assert_eq!(g("heap-large:hugetlb"), PageGroup::Hugetlb2m);
        assert_eq!(g("heap-large:hugetlb-1g"), PageGroup::Hugetlb1g);
        assert_eq!(g("static:thp heap-small:thp-64k"), PageGroup::Thp);
        // The largest page decides.
        assert_eq!(g("static:thp heap-large:hugetlb"), PageGroup::Hugetlb2m);
        assert_eq!(
            g("static:hugetlb heap-large:hugetlb-1g"),
            PageGroup::Hugetlb1g
        );
        assert_eq!(g("static:4k heap-large:hugetlb"), PageGroup::Hugetlb2m);
        // No backing in the label: the pages decide.
        assert_eq!(g("heap-large"), PageGroup::Hugetlb2m);
        assert_eq!(page_group(&mapping("all-small", 0.0, 0)), PageGroup::Small);
        assert_eq!(
            plan_page_sizes("static:thp heap-large:hugetlb-1g"),
            ["1g", "2m"]
        );
        assert!(plan_page_sizes("heap-small:thp-64k").is_empty());
    }

    /// The user's case: two dozen mappings, three page sizes, combined ones.
    fn many() -> Vec<MappingView> {
        let mut v = vec![mapping("all-small", 0.0, 0)];
        let backings = ["hugetlb", "thp", "hugetlb-1g"];
        let cats = ["static", "heap-small", "heap-large"];
        for (i, c) in cats.iter().enumerate() {
            for (j, b) in backings.iter().enumerate() {
                let mut m = mapping(&format!("{c}:{b}"), 5.0 + 30.0 * i as f64 + j as f64, 0);
                match j {
                    0 => m.hugetlb_pages = 2 + 300 * i as u64,
                    1 => m.thp_pages = 2 + 300 * i as u64,
                    _ => m.hugetlb_1g_pages = 1 + i as u64,
                }
                v.push(m);
            }
        }
        for k in 0..14u64 {
            let mut m = mapping(
                &format!(
                    "static:thp heap-small:thp heap-large:{}",
                    backings[(k % 3) as usize]
                ),
                60.0 + 2.5 * k as f64,
                100 + 90 * k,
            );
            m.base = false;
            v.push(m);
        }
        v
    }

    #[test]
    fn pmb_plot_groups_its_legend_and_marks_the_plan_and_the_knee() {
        let ms = many();
        assert!(ms.len() >= 24);
        let k = knee(&ms);
        let s = pmb_chart(&ms, k.as_ref(), Some("heap-large:hugetlb"));
        // Every mapping with huge pages is a point (the log axis cannot draw 0).
        assert!(pmb_x_log(&ms));
        assert_eq!(pmb_drawn(&ms), (ms.len() - 1, 1));
        assert_eq!(s.matches(r#"class="mark point"#).count(), ms.len() - 1);
        // The legend names page sizes and shapes, not mappings.
        let entries = s.matches("legend-entry").count();
        assert!((3..=svg::MAX_LEGEND).contains(&entries), "{entries}");
        assert!(!s.contains("<tspan x=\"0.0\">static:thp heap-small"));
        for name in [
            "uses 2 MB hugetlb",
            "uses 1 GB hugetlb",
            "THP only",
            "several categories",
        ] {
            assert!(s.contains(&format!(">{name}</tspan>")), "{name}");
        }
        // The plan is ringed and labelled; the knee too where it is elsewhere.
        assert!(s.contains(r#"<circle class="chosen""#));
        assert!(s.contains(">plan: heap-large:hugetlb</tspan>"), "{s}");
        let k = k.unwrap();
        assert_ne!(k.mapping, "heap-large:hugetlb");
        assert!(s.contains(r#"<circle class="knee""#));
        assert!(s.contains(&format!(">knee: {}</tspan>", k.mapping)));
        // The frontier is drawn; the axis reaches 100 %.
        assert!(s.contains("stroke-dasharray") && s.contains(">100<"));
        // Names are kept whole for hovering.
        assert!(s.contains("<title>static:thp heap-small:thp heap-large:hugetlb-1g: "));
    }

    #[test]
    fn pmb_plot_of_the_sample_names_a_plan_that_is_the_knee_once() {
        let r = sample();
        let s = pmb_chart(&r.mappings, r.knee.as_ref(), r.plan.label.as_deref());
        assert_eq!(r.plan.label.as_deref(), Some("heap-large:label"));
        assert!(s.contains(r#"<circle class="chosen knee""#));
        assert!(!s.contains(r#"<circle class="knee""#));
        assert!(s.contains(">plan (the knee): heap-large:label</tspan>"));
        // Pages 3..610 span two decades: all-small (0 pages) is left out.
        assert_eq!(
            s.matches(r#"class="mark point"#).count(),
            r.mappings.len() - 1
        );
    }

    #[test]
    fn mrc_plot_is_log_where_ratios_span_decades_and_names_the_plans_size() {
        let curves = [
            MrcCurve {
                page_size: "4k".into(),
                points: vec![(1.0, 0.9), (64.0, 0.6), (4096.0, 0.1)],
            },
            MrcCurve {
                page_size: "2m".into(),
                points: vec![(1.0, 0.5), (64.0, 0.001), (4096.0, 0.0)],
            },
        ];
        let s = mrc_chart(&curves, Some("heap-large:hugetlb"));
        assert_eq!(s.matches("<polyline").count(), 2);
        assert!(s.contains("miss ratio (log scale)"));
        // Decade ticks reach down to the 2 MB curve's 0.001.
        assert!(s.contains(">0.001<") && s.contains(">1<"), "{s}");
        assert!(s.contains(r#"class="mark series chosen""#));
        assert!(
            s.contains(">2 MB pages: the plan&#39;s</tspan>") || s.contains("2 MB pages: the plan")
        );
        assert!(s.contains(">4 KB pages</tspan>"));
        // Ratios within one decade stay linear.
        let flat = [MrcCurve {
            page_size: "4k".into(),
            points: vec![(1.0, 0.9), (10.0, 0.5)],
        }];
        assert!(!mrc_chart(&flat, None).contains("log scale)</tspan></text></g>"));
    }

    #[test]
    fn compared_plot_has_two_whole_bars_per_mapping_and_shades_the_plan() {
        let set = ComparedSet {
            source: "rank: w".into(),
            mappings: vec![
                Compared::new("all-small".into(), 2.0, 1.0, 2.0),
                Compared::new(
                    "static:thp heap-small:thp heap-large:hugetlb (run 4)".into(),
                    2.0,
                    1.6,
                    1.1,
                ),
            ],
        };
        let plan = "static:thp heap-small:thp heap-large:hugetlb";
        let s = compared_chart(&set, Some(plan));
        assert_eq!(s.matches(r#"class="mark bar""#).count(), 2);
        assert_eq!(s.matches(r#"class="mark bar chosen""#).count(), 2);
        assert!(!s.contains('…'), "labels are whole: {s}");
        assert!(s.contains("heap-large:hugetlb (run"), "{s}");
        assert!(is_plan("x:thp (run 3)", "x:thp") && !is_plan("x:thp y:thp", "x:thp"));
        assert!(!compared_chart(&set, None).contains("chosen"));
    }

    #[test]
    fn strip_plot_has_every_time_and_the_medians() {
        let r = sample();
        let s = runs_chart(&r.runs, r.plan.label.as_deref());
        assert_eq!(s.matches(r#"class="mark point""#).count(), 12);
        assert_eq!(s.matches(r#"class="mark median""#).count(), 4);
        assert!(s.starts_with("<svg") && s.ends_with("</svg>"));
        assert!(!s.contains("NaN") && !s.contains("inf"));
        // Run 20 applied the plan: its columns are shaded and labelled.
        assert_eq!(s.matches(r#"<rect class="chosen""#).count(), 1);
        assert!(s.contains(">plan</text>"));
        // No runs, one time, equal times: still a well-formed plot.
        for runs in [vec![], vec![r.runs[0].clone()]] {
            let mut runs = runs;
            for x in &mut runs {
                x.baseline_s = vec![1.0];
                x.optimized_s = vec![1.0, f64::NAN];
            }
            let s = runs_chart(&runs, None);
            assert!(s.ends_with("</svg>") && !s.contains("NaN"), "{s}");
        }
    }
}
