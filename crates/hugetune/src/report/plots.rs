//! The report's four plots, built on `svg`: PMB against huge pages needed (seed 001
//! fig. 3), miss-ratio curves per page size, predicted against measured time per
//! mapping (fig. 4), and a strip plot of the A/B runs, which `svg::Chart` has no
//! kind for (categories of points with a median mark), drawn here directly.

use super::view::{ComparedSet, Knee, MappingView, MrcCurve, RunView};
use hugetune_render::svg::{self, colour, escape, tick_label, Chart, ChartKind, Series};
use std::fmt::Write;

const W: u32 = 760;
const H: u32 = 380;

/// How far above the straight line (in the unit square) a knee must be: below
/// it the benefit grows about in proportion to the pages and no mapping stands out.
pub const KNEE_MIN_LIFT: f64 = 0.05;

/// The knee of the PMB-against-pages frontier: among the mappings no cheaper one
/// beats, the one farthest above the straight line from no pages (0 %) to the
/// best (both axes scaled to 1), as Kneedle does. `None` with fewer than two
/// frontier mappings that need pages, no benefit at all, or no point at least
/// `KNEE_MIN_LIFT` above the line.
pub fn knee(mappings: &[MappingView]) -> Option<Knee> {
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

/// Seed 001 fig. 3: one point per mapping (a series each, so the legend names
/// it), and the knee marked by a point of its own.
pub fn pmb_chart(mappings: &[MappingView], knee: Option<&Knee>) -> String {
    let mut series: Vec<Series> = mappings
        .iter()
        .map(|m| Series::new(m.label.clone(), vec![(m.huge_pages() as f64, m.pmb)]))
        .collect();
    if let Some(k) = knee {
        series.push(Series::new(
            format!("knee: {}", k.mapping),
            vec![(k.huge_pages as f64, k.pmb)],
        ));
    }
    svg::render(
        &Chart {
            title: "PMB against huge pages needed".into(),
            x_label: "huge pages needed (hugetlb 2 MB + 1 GB + THP)".into(),
            y_label: "% of maximal benefit".into(),
            kind: ChartKind::Scatter,
            series,
            ..Default::default()
        },
        W,
        H,
    )
}

fn size_name(s: &str) -> String {
    match s {
        "4k" => "4 KB pages".into(),
        "2m" => "2 MB pages".into(),
        "1g" => "1 GB pages".into(),
        other => format!("{other} pages"),
    }
}

pub fn mrc_chart(curves: &[MrcCurve]) -> String {
    svg::render(
        &Chart {
            title: "Miss ratio against TLB entries".into(),
            x_label: "TLB entries (log)".into(),
            y_label: "miss ratio".into(),
            kind: ChartKind::Line,
            series: curves
                .iter()
                .map(|c| Series::new(size_name(&c.page_size), c.points.clone()))
                .collect(),
            x_log: true,
            ..Default::default()
        },
        W,
        H,
    )
}

/// Bar labels are drawn on one line under each group: long ones are cut (the
/// table under the plot has them whole).
fn short(label: &str) -> String {
    const MAX: usize = 18;
    if label.chars().count() <= MAX {
        label.to_string()
    } else {
        label.chars().take(MAX - 1).collect::<String>() + "…"
    }
}

/// Seed 001 fig. 4: per mapping, the predicted and the measured time.
pub fn compared_chart(set: &ComparedSet) -> String {
    let pts = |f: fn(&super::view::Compared) -> f64| {
        set.mappings
            .iter()
            .enumerate()
            .map(|(i, c)| (i as f64, f(c)))
            .collect::<Vec<_>>()
    };
    svg::render(
        &Chart {
            title: format!("Predicted and measured time per mapping ({})", set.source),
            x_label: "mapping".into(),
            y_label: "time (s)".into(),
            kind: ChartKind::Bar,
            series: vec![
                Series::new("predicted", pts(|c| c.predicted_s)),
                Series::new("measured", pts(|c| c.measured_s)),
            ],
            x_categories: set.mappings.iter().map(|c| short(&c.label)).collect(),
            ..Default::default()
        },
        W,
        H,
    )
}

/// Runs drawn at most: the newest ones (the table lists them all).
pub const MAX_RUNS_DRAWN: usize = 20;

/// Strip plot: per run, a column of baseline times and one of optimized times
/// (points spread sideways so equal times stay visible), each with its median as
/// a bar across the column.
pub fn runs_chart(runs: &[RunView]) -> String {
    let runs = &runs[runs.len().saturating_sub(MAX_RUNS_DRAWN)..];
    let (w, h) = (W as f64, H as f64);
    let (left, right, top, bottom) = (64.0, 120.0, 32.0, 48.0);
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
    let step = hugetune_render::svg::nice_step((hi - lo) / 6.0);
    let (lo, hi) = ((lo / step).floor() * step, (hi / step).ceil() * step);
    let y = |v: f64| top + (hi - v) / (hi - lo) * (h - top - bottom);
    let slot = (w - left - right) / (2 * runs.len().max(1)) as f64;

    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11"><title>A/B run times</title><text x="{:.1}" y="20" text-anchor="middle" font-size="14" font-weight="bold">A/B run times</text>"#,
        w / 2.0
    );
    let mut v = lo;
    while v <= hi + step * 1e-9 {
        let _ = write!(
            s,
            r##"<line class="grid" x1="{left}" y1="{py:.1}" x2="{x2:.1}" y2="{py:.1}" stroke="#e4e4e4"/><text x="{tx:.1}" y="{ty:.1}" text-anchor="end">{label}</text>"##,
            py = y(v),
            x2 = w - right,
            tx = left - 6.0,
            ty = y(v) + 4.0,
            label = escape(&tick_label(v))
        );
        v += step;
    }
    let _ = write!(
        s,
        r##"<path class="axis" d="M{left},{top} L{left},{b:.1} L{r:.1},{b:.1}" fill="none" stroke="#000"/><text transform="translate(14,{m:.1}) rotate(-90)" text-anchor="middle">time (s)</text><text x="{cx:.1}" y="{ly:.1}" text-anchor="middle">run</text>"##,
        b = h - bottom,
        r = w - right,
        m = (top + h - bottom) / 2.0,
        cx = (left + w - right) / 2.0,
        ly = h - 10.0
    );
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
                    r#"<circle class="point" cx="{:.1}" cy="{:.1}" r="3" fill="{c}" fill-opacity="0.75"><title>run {} {}: {}</title></circle>"#,
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
                    r#"<line class="median" x1="{:.1}" y1="{my:.1}" x2="{:.1}" y2="{my:.1}" stroke="{c}" stroke-width="2.5"/>"#,
                    x0 + slot * 0.15,
                    x0 + slot * 0.85,
                    my = y(m)
                );
            }
        }
        let _ = write!(
            s,
            r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
            left + slot * (2 * i + 1) as f64,
            h - bottom + 16.0,
            r.id
        );
    }
    let lx = w - right + 12.0;
    for (k, name) in ["baseline", "optimized"].into_iter().enumerate() {
        let ly = top + 6.0 + 16.0 * k as f64;
        let _ = write!(
            s,
            r#"<rect class="legend-swatch" x="{lx:.1}" y="{:.1}" width="12" height="10" fill="{}"/><text x="{:.1}" y="{ly:.1}" dominant-baseline="middle">{name}</text>"#,
            ly - 5.0,
            colour(k),
            lx + 16.0
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
    fn pmb_plot_has_a_point_per_mapping_and_the_knee() {
        let r = sample();
        let s = pmb_chart(&r.mappings, r.knee.as_ref());
        assert_eq!(s.matches(r#"class="point""#).count(), r.mappings.len() + 1);
        assert!(s.contains("knee: heap-large:label"));
    }

    #[test]
    fn mrc_plot_has_a_line_per_page_size() {
        let r = sample();
        let s = mrc_chart(r.mrc.as_ref().unwrap());
        assert_eq!(s.matches("<polyline").count(), 2);
        assert!(s.contains("4 KB pages") && s.contains("2 MB pages"));
    }

    #[test]
    fn compared_plot_has_two_bars_per_mapping() {
        let set = ComparedSet {
            source: "rank: w".into(),
            mappings: vec![
                Compared::new("all-small".into(), 2.0, 1.0, 2.0),
                Compared::new(
                    "static:thp heap-small:thp heap-large:hugetlb".into(),
                    2.0,
                    1.6,
                    1.1,
                ),
            ],
        };
        let s = compared_chart(&set);
        assert_eq!(s.matches(r#"class="bar""#).count(), 4);
        assert!(s.contains(">static:thp heap-s…</text>"), "{s}");
    }

    #[test]
    fn strip_plot_has_every_time_and_the_medians() {
        let r = sample();
        let s = runs_chart(&r.runs);
        assert_eq!(s.matches(r#"class="point""#).count(), 12);
        assert_eq!(s.matches(r#"class="median""#).count(), 4);
        assert!(s.starts_with("<svg") && s.ends_with("</svg>"));
        assert!(!s.contains("NaN") && !s.contains("inf"));
        // No runs, one time, equal times: still a well-formed plot.
        for runs in [vec![], vec![r.runs[0].clone()]] {
            let mut runs = runs;
            for x in &mut runs {
                x.baseline_s = vec![1.0];
                x.optimized_s = vec![1.0, f64::NAN];
            }
            let s = runs_chart(&runs);
            assert!(s.ends_with("</svg>") && !s.contains("NaN"), "{s}");
        }
    }
}
