//! The parsers and formulas on recorded and hand-made /proc files of several
//! kernels (tests/fixtures/README.md), and arbitrary input never panics.

use frag::index::{self, parse_index};
use frag::parse;
use frag::snapshot::{self, Texts};
use proptest::prelude::*;
use std::path::{Path, PathBuf};

fn dir(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

fn read(d: &Path, f: &str) -> Option<String> {
    std::fs::read_to_string(d.join(f)).ok()
}

const KERNELS: [&str; 3] = ["6.18-live", "4.4-numa-cma", "5.10-nocma-pageowner"];

fn texts(name: &str) -> Texts {
    let d = dir(name);
    Texts {
        buddyinfo: read(&d, "buddyinfo").unwrap(),
        zoneinfo: read(&d, "zoneinfo").unwrap(),
        vmstat: read(&d, "vmstat").unwrap_or_else(|| "thp_fault_alloc 0\n".into()),
        pagetypeinfo: read(&d, "pagetypeinfo"),
        extfrag_threshold: read(&d, "extfrag_threshold"),
        ..Default::default()
    }
}

#[test]
fn every_fixture_parses_consistently() {
    for k in KERNELS {
        let t = texts(k);
        let b = parse::parse_buddyinfo(&t.buddyinfo, "buddyinfo").unwrap();
        let z = parse::parse_zoneinfo(&t.zoneinfo, "zoneinfo").unwrap();
        let p =
            parse::parse_pagetypeinfo(t.pagetypeinfo.as_deref().unwrap(), "pagetypeinfo").unwrap();
        assert_eq!(p.pageblock_order, 9, "{k}");
        assert_eq!(p.pages_per_block, 512, "{k}");
        for bz in &b {
            assert_eq!(bz.free.len(), 11, "{k}");
            let zi = z
                .iter()
                .find(|x| x.node == bz.node && x.name == bz.zone)
                .unwrap_or_else(|| panic!("{k}: zone {} missing from zoneinfo", bz.zone));
            assert!(zi.populated() && zi.start_pfn.is_some(), "{k} {}", bz.zone);
            assert!(zi.min < zi.low && zi.low < zi.high, "{k} {}", bz.zone);
            // buddyinfo = Σ pagetypeinfo rows (unless capped; recorded files were
            // read one after the other on a running machine, so they differ).
            let rows: Vec<_> = p.free_of(bz.node, &bz.zone).collect();
            assert_eq!(rows.len(), p.block_types.len(), "{k} {}", bz.zone);
            if !k.ends_with("-live") && !rows.iter().any(|r| r.capped) {
                for o in 0..11 {
                    let s: u64 = rows.iter().map(|r| r.free[o]).sum();
                    assert_eq!(s, bz.free[o], "{k} {} order {o}", bz.zone);
                }
            }
            assert!(p.blocks_of(bz.node, &bz.zone).is_some(), "{k}");
        }
        let s = snapshot::build(&t, None).unwrap();
        assert_eq!(s.zones.len(), b.len(), "{k}");
        assert!(
            s.totals.free_2m_blocks >= s.totals.allocatable_2m_now,
            "{k}"
        );
    }
}

#[test]
fn column_sets_differ_between_kernels() {
    let cols = |k: &str| {
        parse::parse_pagetypeinfo(texts(k).pagetypeinfo.as_deref().unwrap(), "p")
            .unwrap()
            .block_types
    };
    assert_eq!(
        cols("4.4-numa-cma"),
        [
            "Unmovable",
            "Movable",
            "Reclaimable",
            "HighAtomic",
            "CMA",
            "Isolate"
        ]
    );
    assert_eq!(
        cols("5.10-nocma-pageowner"),
        [
            "Unmovable",
            "Movable",
            "Reclaimable",
            "HighAtomic",
            "Isolate"
        ]
    );
    let p5 = parse::parse_pagetypeinfo(
        texts("5.10-nocma-pageowner")
            .pagetypeinfo
            .as_deref()
            .unwrap(),
        "p",
    )
    .unwrap();
    let mixed = p5.mixed.as_ref().unwrap();
    assert_eq!(mixed[2].counts, vec![220, 1931, 41, 0, 0]);
    assert!(p5.free.iter().any(|r| r.capped));
    let p4 = parse::parse_pagetypeinfo(texts("4.4-numa-cma").pagetypeinfo.as_deref().unwrap(), "p")
        .unwrap();
    assert!(p4.mixed.is_none());
    assert!(p4.free.iter().any(|r| r.free.contains(&123456)));
}

#[test]
fn zoneinfo_variants() {
    let z4 = parse::parse_zoneinfo(&texts("4.4-numa-cma").zoneinfo, "z").unwrap();
    assert_eq!(z4.len(), 4);
    assert_eq!((z4[3].node, z4[3].start_pfn), (1, Some(4456448)));
    assert_eq!(z4[1].protection, vec![0, 0, 13005, 13005]);
    assert_eq!(z4[1].stats["nr_free_cma"], 16 * 1024);
    let z6 = parse::parse_zoneinfo(&texts("6.18-live").zoneinfo, "z").unwrap();
    assert_eq!(z6.len(), 5);
    assert!(!z6[3].populated() && z6[3].name == "Movable");
    assert_eq!(z6[2].start_pfn, Some(1048576));
    assert!(z6[2].promo.is_some() && z6[2].boost.is_some());
    let z5 = parse::parse_zoneinfo(&texts("5.10-nocma-pageowner").zoneinfo, "z").unwrap();
    assert!(z5[2].promo.is_none());
    assert_eq!(z5[2].high, 23834);
}

/// The live machine's debugfs indices, read at the same moment as its buddyinfo.
#[test]
fn indices_match_recorded_debugfs() {
    let d = dir("6.18-live");
    let b = parse::parse_buddyinfo(&read(&d, "buddyinfo").unwrap(), "b").unwrap();
    let un = read(&d, "debugfs_unusable_index").unwrap();
    let ef = read(&d, "debugfs_extfrag_index").unwrap();
    let n = compare_debugfs(&b, &un, &ef).unwrap();
    // Two files × three zones × orders 0..10.
    assert_eq!(n, 2 * 3 * 11);
}

/// Compares our indices with debugfs text; returns the number of values compared.
pub fn compare_debugfs(
    b: &[parse::BuddyZone],
    unusable: &str,
    extfrag: &str,
) -> Result<usize, String> {
    let mut n = 0;
    for (file, text, which) in [
        ("unusable_index", unusable, 0),
        ("extfrag_index", extfrag, 1),
    ] {
        for l in text.lines().filter(|l| !l.trim().is_empty()) {
            let (rest, zone) = l
                .split_once("zone")
                .ok_or_else(|| format!("{file}: bad line {l:?}"))?;
            let node: u32 = rest
                .trim()
                .trim_start_matches("Node")
                .trim()
                .trim_end_matches(',')
                .parse()
                .map_err(|_| format!("{file}: bad node in {l:?}"))?;
            let mut toks = zone.split_whitespace();
            let zname = toks.next().ok_or("no zone")?;
            let bz = b
                .iter()
                .find(|z| z.node == node && z.zone == zname)
                .ok_or_else(|| format!("zone {zname} missing in buddyinfo"))?;
            for (o, tok) in toks.enumerate() {
                let want = parse_index(tok).ok_or_else(|| format!("bad value {tok:?}"))?;
                let info = index::fill_contig_page_info(&bz.free, o as u32);
                let got = if which == 0 {
                    index::unusable_free_index(o as u32, &info)
                } else {
                    index::fragmentation_index(o as u32, &info, 10)
                };
                if got != want {
                    return Err(format!(
                        "{file} node {node} zone {zname} order {o}: kernel {want}, ours {got}"
                    ));
                }
                n += 1;
            }
        }
    }
    Ok(n)
}

fn arbitrary_text() -> impl Strategy<Value = String> {
    prop_oneof![
        ".*",
        "(Node [0-9 ]{0,3}, zone [A-Za-z0-9]{0,6}[ ,a-z]{0,8}( >?[0-9]{1,20}){0,14}\n){0,6}",
        "(Page block order: [0-9x]{0,3}\nPages per block: [0-9]{0,4}\n)?(Free pages count per migrate type at order( [0-9]{1,2}){0,12}\n)?(Node [0-9], zone [A-Z][a-z]{1,5}, type [A-Za-z]{0,8}( >?[0-9]{1,7}){0,12}\n){0,4}(Number of (blocks type|mixed blocks)( [A-Za-z]{1,8}){0,6}\n)?(Node 0, zone [A-Za-z]{1,6}( [0-9]{1,6}){0,7}\n){0,3}",
        "(Node 0, zone [A-Za-z]{1,6}\n(  (pages free|min|low|high|spanned|present|managed|start_pfn:|protection:|pagesets|per-node stats) ?[(),0-9 x]{0,20}\n){0,12}){0,3}",
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn parsers_never_panic(s in arbitrary_text()) {
        let _ = parse::parse_buddyinfo(&s, "b");
        let _ = parse::parse_pagetypeinfo(&s, "p");
        let _ = parse::parse_zoneinfo(&s, "z");
        let _ = parse::parse_vmstat(&s, "v");
        let _ = parse::parse_threshold(&s, "t");
        let _ = frag::trace::parse_line(&s, &["mm_page_alloc", "mm_page_alloc_extfrag"]);
        let t = Texts { buddyinfo: s.clone(), zoneinfo: s.clone(), vmstat: s.clone(),
                        pagetypeinfo: Some(s.clone()), ..Default::default() };
        let _ = snapshot::build(&t, None);
    }

    #[test]
    fn errors_point_inside_the_input(s in arbitrary_text()) {
        let lines = s.lines().count();
        for e in [parse::parse_buddyinfo(&s, "b").err(), parse::parse_pagetypeinfo(&s, "p").err(),
                  parse::parse_zoneinfo(&s, "z").err(), parse::parse_vmstat(&s, "v").err()]
                  .into_iter().flatten() {
            prop_assert!(e.line <= lines, "{e} beyond {lines} lines");
        }
    }

    #[test]
    fn indices_stay_in_range(free in proptest::collection::vec(0u64..1_000_000, 11), order in 0u32..11) {
        let info = index::fill_contig_page_info(&free, order);
        let u = index::unusable_free_index(order, &info);
        prop_assert!((0..=1000).contains(&u));
        let f = index::fragmentation_index(order, &info, 10);
        prop_assert!(f == -1000 || (0..=1000).contains(&f));
    }
}
