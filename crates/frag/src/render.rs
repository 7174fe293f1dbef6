//! Terminal, JSON and HTML views of a snapshot. The HTML page opens with a
//! verdict card (how many huge pages can be had now, and after compaction),
//! then per zone its tables and plots: the terminal text is for terminals, the
//! page never opens with it.

use crate::index::format_index;
use crate::scan::{BlockState, Scan};
use crate::snapshot::{Snapshot, ZoneReport};
use crate::trace::{ExtfragCounts, RecordSummary};
use crate::trial::TrialResult;
use hugetune_render::html::{Card, Page, Tone};
use hugetune_render::svg::{self, Chart, ChartKind, Series};
use hugetune_render::{bytes, table};
use std::collections::BTreeMap;
use std::fmt::Write;

fn pct(x: Option<f64>) -> String {
    x.map(|v| format!("{:.2}%", v * 100.0))
        .unwrap_or_else(|| "n/a".into())
}

fn zone_title(z: &ZoneReport) -> String {
    format!(
        "Node {}, zone {} (PFN {}.., {} present, {} managed, {} free)",
        z.node,
        z.zone,
        z.start_pfn
            .map(|p| p.to_string())
            .unwrap_or_else(|| "?".into()),
        bytes(z.present * 4096),
        bytes(z.managed * 4096),
        bytes(z.free_pages * 4096)
    )
}

/// The per-order table of one zone.
pub fn order_rows(z: &ZoneReport) -> Vec<Vec<String>> {
    z.orders
        .iter()
        .map(|m| {
            let mut r = vec![
                m.order.to_string(),
                bytes(4096u64 << m.order),
                m.free_blocks.to_string(),
                m.suitable_blocks.to_string(),
                format_index(m.unusable_index),
                format_index(m.fragmentation_index),
            ];
            for t in &z.free_by_type {
                r.push(format!(
                    "{}{}",
                    t.free.get(m.order as usize).copied().unwrap_or(0),
                    if t.capped { "+" } else { "" }
                ));
            }
            r
        })
        .collect()
}

pub fn order_headers(z: &ZoneReport) -> Vec<String> {
    let mut h: Vec<String> = [
        "order",
        "block",
        "free blocks",
        "usable as",
        "unusable idx",
        "frag idx",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for t in &z.free_by_type {
        h.push(t.migratetype.clone());
    }
    h
}

fn counter_rows(s: &Snapshot, delta: Option<&BTreeMap<String, i64>>) -> Vec<Vec<String>> {
    crate::parse::VMSTAT_KEYS
        .iter()
        .filter_map(|k| {
            let v = s.counters.vmstat.get(*k)?;
            let mut r = vec![k.to_string(), v.to_string()];
            if let Some(d) = delta {
                r.push(format!("{:+}", d.get(*k).copied().unwrap_or(0)));
            }
            Some(r)
        })
        .collect()
}

/// The whole terminal report; `delta`: counter changes since the previous one.
pub fn text(s: &Snapshot, delta: Option<&BTreeMap<String, i64>>) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "Huge page availability{}: pageblock order {}, MAX_PAGE_ORDER {}, extfrag_threshold {}",
        s.kernel
            .as_ref()
            .map(|k| format!(" (kernel {k})"))
            .unwrap_or_default(),
        s.pageblock_order,
        s.max_order,
        s.extfrag_threshold
            .map(|t| t.to_string())
            .unwrap_or_else(|| "?".into())
    );
    let t = &s.totals;
    let _ = writeln!(
        o,
        "\n2 MB pages allocatable now: {} (free order>=9 blocks: {}, watermarks and HighAtomic respected)",
        t.allocatable_2m_now, t.free_2m_blocks
    );
    match (t.after_compaction_2m, t.clean_pageblocks, t.gb_ranges_clean) {
        (Some(a), Some(c), Some(g)) => {
            let _ = writeln!(
                o,
                "2 MB pages after perfect compaction: {a} (pageblocks without unmovable pages: {c}; limited by free memory above the low watermark)"
            );
            let _ = writeln!(
                o,
                "1 GB ranges assemblable (aligned, one zone, no unmovable page): {g}, entirely free now: {}",
                t.gb_ranges_free.unwrap_or(0)
            );
            let _ = writeln!(
                o,
                "Tainted pageblocks (unmovable pages among movable ones): {}",
                t.tainted_pageblocks.unwrap_or(0)
            );
        }
        _ => {
            let _ = writeln!(
                o,
                "2 MB after compaction, 1 GB ranges, tainted pageblocks: not scanned (--scan, root)"
            );
        }
    }
    for p in &s.hugetlb_pools {
        let _ = writeln!(
            o,
            "hugetlb {}: {} pages ({} free, {} reserved, {} surplus)",
            bytes(p.page_kb * 1024),
            p.nr,
            p.free,
            p.reserved,
            p.surplus
        );
    }
    for z in &s.zones {
        let _ = writeln!(o, "\n{}", zone_title(z));
        let w = &z.watermarks;
        let _ = writeln!(
            o,
            "  watermarks: min {} low {} high {}{} pages; lowmem reserve for huge pages {}; order-9 fragindex: {:?}",
            w.min,
            w.low,
            w.high,
            w.boost.map(|b| format!(" boost {b}")).unwrap_or_default(),
            w.lowmem_reserve,
            z.order9_verdict
        );
        let n = &z.now_2m;
        let _ = writeln!(
            o,
            "  2 MB now: {} (blocks {}, usable {}, watermark allows {} at low / {} at min)",
            n.allocatable, n.free_blocks, n.usable_blocks, n.by_low_watermark, n.by_min_watermark
        );
        let _ = writeln!(o);
        let h = order_headers(z);
        let hr: Vec<&str> = h.iter().map(|s| s.as_str()).collect();
        for l in table(&hr, &order_rows(z)).lines() {
            let _ = writeln!(o, "  {l}");
        }
        if !z.pageblocks.is_empty() {
            let pb: Vec<String> = s
                .migratetypes
                .iter()
                .filter_map(|m| z.pageblocks.get(m).map(|c| format!("{m} {c}")))
                .collect();
            let _ = writeln!(o, "  pageblocks: {}", pb.join(", "));
        }
        if let Some(m) = &z.mixed_pageblocks {
            let pb: Vec<String> = s
                .migratetypes
                .iter()
                .filter_map(|t| m.get(t).map(|c| format!("{t} {c}")))
                .collect();
            let _ = writeln!(o, "  mixed pageblocks (page_owner): {}", pb.join(", "));
        }
        if let Some(sc) = &z.scan {
            let b = &sc.pageblocks;
            let _ = writeln!(
                o,
                "  scan: pageblocks free {}, clean {}, huge {}, tainted {} ({:.1}%), unmovable {}, partial {}",
                b.free,
                b.clean,
                b.huge,
                b.tainted,
                sc.tainted_fraction * 100.0,
                b.unmovable,
                b.hole
            );
            let _ = writeln!(
                o,
                "        pages free {}, movable {}, THP {}, hugetlb {}, unmovable {}, holes {}; inferred free {} vs nr_free {}",
                sc.pages_free,
                sc.pages_movable,
                sc.pages_thp,
                sc.pages_hugetlb,
                sc.pages_unmovable,
                sc.pages_hole,
                sc.inferred_free_pages,
                z.free_pages
            );
            let _ = writeln!(
                o,
                "        2 MB after compaction {}; 1 GB ranges {} aligned, {} clean, {} free",
                sc.after_compaction_2m, sc.gb_ranges, sc.gb_ranges_clean, sc.gb_ranges_free
            );
        }
    }
    let c = &s.counters;
    let _ = writeln!(
        o,
        "\nTHP fault failure rate: {} (fallback/(alloc+fallback)); without memcg charge failures: {}",
        pct(c.thp_fault_failure_rate),
        pct(c.thp_fragmentation_failure_rate)
    );
    let _ = writeln!(
        o,
        "Compaction: success {} / fail {} of stalls",
        pct(c.compact_success_rate),
        pct(c.compact_fail_rate)
    );
    let rows = counter_rows(s, delta);
    if !rows.is_empty() {
        let h: &[&str] = if delta.is_some() {
            &["counter", "value", "change"]
        } else {
            &["counter", "value"]
        };
        for l in table(h, &rows).lines() {
            let _ = writeln!(o, "  {l}");
        }
    }
    if let Some(i) = &s.scan {
        let _ = writeln!(
            o,
            "\nkpageflags scan: {} PFNs ({}) in {:.3} s ({:.3} s reading, {:.3} s classifying)",
            i.pfns,
            bytes(i.bytes_read),
            i.seconds,
            i.read_seconds,
            i.seconds - i.read_seconds
        );
    }
    for sk in &s.skipped {
        let _ = writeln!(o, "skipped: {sk}");
    }
    o
}

pub fn trial_text(r: &TrialResult) -> String {
    let mut o = format!(
        "--try: asked {} x {} (pool {} -> {}), the kernel gave {} in {:.1} ms; pool restored to {} in {:.1} ms\n",
        r.asked,
        bytes(r.page_kb * 1024),
        r.pool_before,
        r.pool_before + r.asked,
        r.given,
        r.seconds * 1e3,
        r.pool_after,
        r.restore_seconds * 1e3
    );
    if r.counters_delta.is_empty() {
        o.push_str("  no compaction/migration counter moved\n");
    } else {
        for (k, v) in &r.counters_delta {
            let _ = writeln!(o, "  {k} {v:+}");
        }
    }
    o
}

pub fn extfrag_text(c: &ExtfragCounts, migratetypes: &[String]) -> String {
    let mut o = format!(
        "kmem:mm_page_alloc_extfrag over {:.1} s: {} events, {} fragmenting (fallback order < pageblock order), {} changed pageblock ownership; lost {}, unparsed {}\n",
        c.seconds, c.events, c.fragmenting, c.change_ownership, c.lost, c.unparsed
    );
    let rows: Vec<Vec<String>> = c
        .by_migratetype
        .iter()
        .map(|(k, p)| {
            let (a, f) = k.split_once("->").unwrap_or((k, ""));
            let name = |x: &str| {
                x.parse::<i64>()
                    .map(|n| crate::migratetype_name(n, migratetypes))
                    .unwrap_or_else(|_| x.to_string())
            };
            vec![
                name(a),
                name(f),
                p.events.to_string(),
                p.fragmenting.to_string(),
                p.change_ownership.to_string(),
            ]
        })
        .collect();
    if !rows.is_empty() {
        for l in table(
            &[
                "alloc type",
                "fell back to",
                "events",
                "fragmenting",
                "took block",
            ],
            &rows,
        )
        .lines()
        {
            let _ = writeln!(o, "  {l}");
        }
    }
    o
}

pub fn record_text(r: &RecordSummary) -> String {
    format!(
        "recorded {} allocations and {} frees in {:.1} s into {} (failed allocations {}, dropped {})\n",
        r.allocs,
        r.frees,
        r.seconds,
        r.path.display(),
        r.failed,
        r.dropped
    )
}

fn state_colour(s: BlockState) -> &'static str {
    match s {
        BlockState::Free => "#2ca02c",
        BlockState::Clean => "#98df8a",
        BlockState::Huge => "#1f77b4",
        BlockState::Tainted => "#d62728",
        BlockState::Unmovable => "#7f3f00",
        BlockState::Hole => "#dddddd",
    }
}

/// An SVG map of every pageblock, one small square each, coloured by state.
pub fn pageblock_map(scan: &Scan, width: u32) -> String {
    let cell = 4u32;
    let per_row = (width.saturating_sub(20) / cell).max(16) as usize;
    let mut rows_svg = String::new();
    let mut y = 24u32;
    let mut total_rows = 0u32;
    for z in &scan.zones {
        let _ = write!(
            rows_svg,
            r#"<text x="0" y="{}" font-size="11">node {} {} (PFN {}..{})</text>"#,
            y + 9,
            z.node,
            svg::escape(&z.zone),
            z.start_pfn,
            z.end_pfn
        );
        y += 14;
        let states: Vec<BlockState> = z.block_states(scan.pages_per_block).collect();
        for (r, chunk) in states.chunks(per_row).enumerate() {
            // Runs of one state become one rect.
            let mut i = 0;
            while i < chunk.len() {
                let mut j = i + 1;
                while j < chunk.len() && chunk[j] == chunk[i] {
                    j += 1;
                }
                let _ = write!(
                    rows_svg,
                    r#"<rect x="{}" y="{}" width="{}" height="{}" fill="{}"/>"#,
                    i as u32 * cell,
                    y + r as u32 * cell,
                    (j - i) as u32 * cell,
                    cell,
                    state_colour(chunk[i])
                );
                i = j;
            }
            total_rows += 1;
        }
        y += states.len().div_ceil(per_row) as u32 * cell + 8;
    }
    let _ = total_rows;
    let mut legend = String::new();
    for (k, (s, name)) in [
        (BlockState::Free, "free"),
        (BlockState::Clean, "movable only"),
        (BlockState::Huge, "huge page"),
        (BlockState::Tainted, "tainted (mixed)"),
        (BlockState::Unmovable, "unmovable"),
        (BlockState::Hole, "hole/partial"),
    ]
    .iter()
    .enumerate()
    {
        let x = k as u32 * 120;
        let _ = write!(
            legend,
            r#"<rect x="{x}" y="4" width="10" height="10" fill="{}"/><text x="{}" y="13" font-size="11">{name}</text>"#,
            state_colour(*s),
            x + 14
        );
    }
    let w = per_row as u32 * cell;
    format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{}" height="{y}" viewBox="0 0 {} {y}" font-family="sans-serif"><title>pageblock map</title>{legend}{rows_svg}</svg>"#,
        w.max(720),
        w.max(720)
    )
}

/// A self-contained HTML page with the tables and SVG plots.
pub fn html(s: &Snapshot, extra: &[(String, String)]) -> String {
    let mut p = Page::new("hugetune frag: huge page availability");
    p.push_card(card(s));
    for z in &s.zones {
        p.push_heading(&zone_title(z));
        let w = &z.watermarks;
        let n = &z.now_2m;
        p.push_paragraph(&format!(
            "2 MB pages now: {} (free blocks {}, usable {}; the watermarks allow {} at low, {} at \
             min). Watermarks: min {}, low {}, high {}{} pages; order-9 fragmentation index: {:?}.",
            n.allocatable,
            n.free_blocks,
            n.usable_blocks,
            n.by_low_watermark,
            n.by_min_watermark,
            w.min,
            w.low,
            w.high,
            w.boost.map(|b| format!(", boost {b}")).unwrap_or_default(),
            z.order9_verdict
        ));
        let h = order_headers(z);
        p.push_table(&h, &order_rows(z));
        let free = Chart {
            title: format!("Free blocks per order, node {} {}", z.node, z.zone),
            x_label: "order".into(),
            y_label: "free blocks".into(),
            kind: ChartKind::Bar,
            series: if z.free_by_type.is_empty() {
                vec![Series::new(
                    "all types",
                    z.orders
                        .iter()
                        .map(|m| (m.order as f64, m.free_blocks as f64))
                        .collect(),
                )]
            } else {
                z.free_by_type
                    .iter()
                    .map(|t| {
                        Series::new(
                            t.migratetype.clone(),
                            t.free
                                .iter()
                                .enumerate()
                                .map(|(o, &n)| (o as f64, n as f64))
                                .collect(),
                        )
                    })
                    .collect()
            },
            x_categories: z.orders.iter().map(|m| m.order.to_string()).collect(),
            ..Default::default()
        };
        // Thousands of small blocks beside a few large ones: a log axis shows both.
        let y_log = svg::spans_decades(z.orders.iter().map(|m| m.free_blocks as f64));
        let free = Chart {
            y_log,
            y_label: if y_log {
                "free blocks (log scale)".into()
            } else {
                free.y_label.clone()
            },
            ..free
        };
        p.push_svg(svg::render(&free, 760, 300));
    }
    let unusable = Chart {
        title: "Unusable free space index per order".into(),
        x_label: "order".into(),
        y_label: "unusable index (0..1)".into(),
        kind: ChartKind::Line,
        series: s
            .zones
            .iter()
            .map(|z| {
                Series::new(
                    format!("node {} {}", z.node, z.zone),
                    z.orders
                        .iter()
                        .map(|m| (m.order as f64, m.unusable_index as f64 / 1000.0))
                        .collect(),
                )
            })
            .collect(),
        ..Default::default()
    };
    p.push_heading("Unusable free space index");
    p.push_svg(svg::render(&unusable, 760, 320));
    if !s.migratetypes.is_empty() {
        let pb = Chart {
            title: "Pageblocks per migratetype".into(),
            x_label: "zone".into(),
            y_label: "pageblocks".into(),
            kind: ChartKind::Bar,
            series: s
                .migratetypes
                .iter()
                .map(|m| {
                    Series::new(
                        m.clone(),
                        s.zones
                            .iter()
                            .enumerate()
                            .map(|(i, z)| {
                                (i as f64, z.pageblocks.get(m).copied().unwrap_or(0) as f64)
                            })
                            .collect(),
                    )
                })
                .collect(),
            x_categories: s
                .zones
                .iter()
                .map(|z| format!("{}:{}", z.node, z.zone))
                .collect(),
            ..Default::default()
        };
        p.push_heading("Pageblocks per migratetype");
        p.push_svg(svg::render(&pb, 760, 320));
    }
    if let Some(sc) = &s.scan_data {
        p.push_heading("Pageblock map (kpageflags scan)");
        p.push_paragraph(
            "One square per 2 MB pageblock, in PFN order. Tainted: unmovable pages among movable ones; movable only: compaction could free it; huge: already a hugetlb page or a PMD-size THP.",
        );
        p.push_svg(pageblock_map(sc, 1040));
    }
    let rows = counter_rows(s, None);
    if !rows.is_empty() {
        p.push_heading("Counters (/proc/vmstat)");
        p.push_table(&["counter", "value"], &rows);
    }
    for (h, t) in extra {
        p.push_heading(h);
        p.push_preformatted(t);
    }
    p.render()
}

/// The page's verdict: the 2 MB pages to be had now and after compaction, the
/// 1 GB ranges, the pools and how THP faults and compaction fare.
fn card(s: &Snapshot) -> Card {
    let t = &s.totals;
    let c = &s.counters;
    let mut facts = vec![(
        "2 MB pages now".to_string(),
        format!(
            "{} (free order >= {} blocks: {}; watermarks and HighAtomic respected)",
            t.allocatable_2m_now, s.pageblock_order, t.free_2m_blocks
        ),
    )];
    match (t.after_compaction_2m, t.gb_ranges_clean) {
        (Some(a), Some(g)) => {
            facts.push(("After compaction".into(), format!("{a} x 2 MB")));
            facts.push((
                "1 GB ranges".into(),
                format!(
                    "{g} assemblable, {} entirely free now; {} tainted pageblocks",
                    t.gb_ranges_free.unwrap_or(0),
                    t.tainted_pageblocks.unwrap_or(0)
                ),
            ));
        }
        _ => facts.push((
            "After compaction".into(),
            "not scanned (--scan, as root)".into(),
        )),
    }
    for pool in &s.hugetlb_pools {
        facts.push((
            format!("hugetlb {}", bytes(pool.page_kb * 1024)),
            format!(
                "{} pages ({} free, {} reserved, {} surplus)",
                pool.nr, pool.free, pool.reserved, pool.surplus
            ),
        ));
    }
    facts.push((
        "THP fault failures".into(),
        format!(
            "{} (without memcg charge failures: {})",
            pct(c.thp_fault_failure_rate),
            pct(c.thp_fragmentation_failure_rate)
        ),
    ));
    facts.push((
        "Compaction".into(),
        format!(
            "success {} / fail {} of stalls",
            pct(c.compact_success_rate),
            pct(c.compact_fail_rate)
        ),
    ));
    if let Some(k) = &s.kernel {
        facts.push(("Kernel".into(), k.clone()));
    }
    let (headline, tone) = if t.allocatable_2m_now > 0 {
        (
            format!(
                "{} x 2 MB pages ({}) can be had now",
                t.allocatable_2m_now,
                bytes(t.allocatable_2m_now << 21)
            ),
            Tone::Good,
        )
    } else {
        match t.after_compaction_2m {
            Some(a) if a > 0 => (
                format!("No 2 MB page free now; {a} after compaction"),
                Tone::Neutral,
            ),
            _ => ("No 2 MB page can be had now".into(), Tone::Bad),
        }
    };
    Card {
        headline,
        tone,
        facts,
        commands: vec![(
            "Try it for real (allocates N pages, then gives them back; root):".into(),
            "sudo hugetune frag --try N".into(),
        )],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::{build, Texts};

    fn fixture(name: &str) -> Snapshot {
        let d = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(name);
        let r = |f: &str| std::fs::read_to_string(d.join(f)).ok();
        let t = Texts {
            buddyinfo: r("buddyinfo").unwrap(),
            zoneinfo: r("zoneinfo").unwrap(),
            vmstat: r("vmstat").unwrap_or_else(|| "thp_fault_alloc 1\n".into()),
            pagetypeinfo: r("pagetypeinfo"),
            extfrag_threshold: r("extfrag_threshold"),
            ..Default::default()
        };
        build(&t, None).unwrap()
    }

    #[test]
    fn text_report_has_every_zone_and_order() {
        let s = fixture("4.4-numa-cma");
        let t = text(&s, None);
        assert!(t.contains("Node 1, zone Normal"));
        assert!(t.contains("CMA"));
        let order10 = t
            .lines()
            .filter(|l| l.split_whitespace().take(3).eq(["10", "4.0", "MiB"]))
            .count();
        assert_eq!(order10, 4, "{t}");
        assert!(t.contains("not scanned"));
    }

    #[test]
    fn html_is_self_contained() {
        let s = fixture("5.10-nocma-pageowner");
        let h = html(&s, &[("extra".into(), "<x>".into())]);
        assert!(h.starts_with("<!DOCTYPE html>"));
        // It opens with the verdict, not with the terminal text.
        let first = h.split("</h1>\n").nth(1).unwrap();
        assert!(first.starts_with("<section class=\"verdict"), "{first}");
        assert!(first.contains("2 MB pages now"));
        assert!(!h.contains(&text(&s, None)[..40]));
        assert!(h.find("<pre>").unwrap_or(usize::MAX) > h.find("<svg").unwrap());
        assert!(!h.contains("<script"));
        assert!(h.contains("&lt;x&gt;"));
        assert!(h.matches("<svg").count() >= 4);
        let j = serde_json::to_string(&s).unwrap();
        assert!(j.contains("\"allocatable_2m_now\""));
    }

    #[test]
    fn map_draws_runs() {
        let f = vec![0u64; 4096];
        let mut flags = f;
        flags[0] = 1 << crate::scan::kpf::BUDDY;
        let z = crate::scan::analyse_zone(0, "Normal", 0, &flags, 9, 10, 18, None);
        let sc = Scan {
            zones: vec![z],
            pages_per_block: 512,
            pfns_scanned: 4096,
            bytes_read: 4096 * 8,
            seconds: 0.0,
            read_seconds: 0.0,
        };
        let m = pageblock_map(&sc, 800);
        assert!(m.starts_with("<svg") && m.ends_with("</svg>"));
        // 8 blocks: first two free (order-10 buddy = 1024 pages), 6 unmovable: two runs + legend.
        assert_eq!(m.matches("<rect").count(), 2 + 6);
    }
}
