//! Rendering, and nothing else: aligned terminal tables and human units (here),
//! standalone SVG charts (`svg`) and self-contained HTML pages (`html`), shared by
//! the commands, the bench suites and `frag`.
//!
//! Invariants: no database, no file or process I/O (callers write what these
//! functions return), no knowledge of hugetune's data model — so a /proc reader
//! such as `frag` links it without SQLite. `hugetune report`'s own content (what
//! a profile predicted, what its runs measured) lives in the CLI crate
//! (`crates/hugetune/src/report/`).

pub mod html;
pub mod svg;

use comfy_table::{presets, Cell, CellAlignment, ContentArrangement, Table};

/// A plain, aligned table; numeric-looking cells are right-aligned.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut t = Table::new();
    t.load_preset(presets::NOTHING)
        .set_content_arrangement(ContentArrangement::Disabled);
    t.set_header(headers.iter().map(Cell::new));
    for r in rows {
        t.add_row(r.iter().map(|c| {
            let numeric = c
                .chars()
                .next()
                .is_some_and(|ch| ch.is_ascii_digit() || ch == '-' || ch == '+')
                && c.chars().any(|ch| ch.is_ascii_digit());
            Cell::new(c).set_alignment(if numeric {
                CellAlignment::Right
            } else {
                CellAlignment::Left
            })
        }));
    }
    t.to_string()
        .lines()
        .map(|l| l.trim_end())
        .collect::<Vec<_>>()
        .join("\n")
}

/// 1536 → "1.5 KiB", 1073741824 → "1.0 GiB".
pub fn bytes(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// Seconds with a sensible number of digits.
pub fn secs(s: f64) -> String {
    if s >= 100.0 {
        format!("{s:.0} s")
    } else if s >= 1.0 {
        format!("{s:.2} s")
    } else {
        format!("{:.1} ms", s * 1e3)
    }
}

/// Nanoseconds with a unit that suits the size: 85.3 → "85.3 ns",
/// 4400 → "4.4 µs", 4150000 → "4.15 ms".
pub fn ns(v: f64) -> String {
    if v >= 1e6 {
        format!("{:.2} ms", v / 1e6)
    } else if v >= 1e3 {
        format!("{:.1} µs", v / 1e3)
    } else {
        format!("{v:.1} ns")
    }
}

/// Large counts with SI suffixes: 1234567 → "1.23 M".
pub fn count(n: f64) -> String {
    let a = n.abs();
    if a >= 1e9 {
        format!("{:.2} G", n / 1e9)
    } else if a >= 1e6 {
        format!("{:.2} M", n / 1e6)
    } else if a >= 1e4 {
        format!("{:.1} K", n / 1e3)
    } else {
        format!("{n:.0}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(1 << 30), "1.0 GiB");
        assert_eq!(secs(0.0123), "12.3 ms");
        assert_eq!(secs(4.567), "4.57 s");
        assert_eq!(count(1_234_567.0), "1.23 M");
        assert_eq!(count(12.0), "12");
        assert_eq!(ns(85.34), "85.3 ns");
        assert_eq!(ns(4400.0), "4.4 µs");
        assert_eq!(ns(4_150_000.0), "4.15 ms");
    }

    #[test]
    fn tables_align() {
        let t = table(
            &["mapping", "speedup"],
            &[
                vec!["all-small".into(), "1.00x".into()],
                vec!["heap-large".into(), "1.42x".into()],
            ],
        );
        let lines: Vec<&str> = t.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[2].contains("heap-large") && lines[2].ends_with("1.42x"));
    }
}
