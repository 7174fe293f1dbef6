//! /proc/PID/maps and /proc/PID/smaps, read strictly: the text of another
//! process's address space decides what is collapsed, so a line that is not what
//! the kernel writes is an error naming the line (never a panic, never a guess).
//! smaps is maps with fields under each mapping; one parser reads both, so the
//! ranges and their figures always come from the same read.
//!
//! Invariants of a parsed mapping: start < end, both 4 KiB-aligned; mappings are
//! in ascending order and do not overlap (as the kernel writes them).

use thiserror::Error;

#[derive(Debug, Error, PartialEq, Eq)]
pub enum MapsError {
    #[error("line {line} of {what}: {why}: {text:?}")]
    Bad {
        what: &'static str,
        line: usize,
        why: &'static str,
        /// The line, cut to 120 characters.
        text: String,
    },
}

/// One mapping, with the smaps figures the applier uses (0 when read from maps).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Vma {
    pub start: u64,
    pub end: u64,
    /// `rwxp`-style permissions, always 4 characters.
    pub perms: String,
    pub offset: u64,
    pub inode: u64,
    /// The path or pseudo-name (`[heap]`, `[anon:NAME]`, …); empty when anonymous.
    pub name: String,
    pub rss: u64,
    /// Anonymous memory mapped by PMD-size THP (smaps `AnonHugePages`).
    pub anon_huge: u64,
    /// File memory mapped by PMD-size pages (smaps `FilePmdMapped`).
    pub file_pmd: u64,
    /// smaps `VmFlags`: `hg` (MADV_HUGEPAGE), `nh` (MADV_NOHUGEPAGE), …
    pub flags: Vec<String>,
}

impl Vma {
    pub fn len(&self) -> u64 {
        self.end - self.start
    }
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
    fn perm(&self, i: usize, c: u8) -> bool {
        self.perms.as_bytes().get(i) == Some(&c)
    }
    pub fn readable(&self) -> bool {
        self.perm(0, b'r')
    }
    pub fn writable(&self) -> bool {
        self.perm(1, b'w')
    }
    pub fn private(&self) -> bool {
        self.perm(3, b'p')
    }
    /// Anonymous: no file and no special name, or a name given with
    /// PR_SET_VMA_ANON_NAME (`[anon:…]`, still anonymous memory).
    pub fn anonymous(&self) -> bool {
        self.inode == 0 && (self.name.is_empty() || self.name.starts_with("[anon:"))
    }
    /// The 2 MiB-aligned interior, the part MADV_COLLAPSE can make huge; None
    /// when it holds no whole huge page.
    pub fn interior(&self) -> Option<(u64, u64)> {
        let s = self.start.checked_add(crate::HUGE - 1)? & !(crate::HUGE - 1);
        let e = self.end & !(crate::HUGE - 1);
        (s < e).then_some((s, e))
    }
}

fn bad(what: &'static str, line: usize, why: &'static str, text: &str) -> MapsError {
    MapsError::Bad {
        what,
        line,
        why,
        text: text.chars().take(120).collect(),
    }
}

/// Parses one header line (`start-end perms offset dev inode [name]`).
fn header(l: &str) -> Result<Vma, &'static str> {
    let mut rest = l;
    let mut field = || -> Result<&str, &'static str> {
        let t = rest.trim_start_matches(' ');
        let end = t.find(' ').unwrap_or(t.len());
        if end == 0 {
            return Err("a field is missing");
        }
        let (f, r) = t.split_at(end);
        rest = r;
        Ok(f)
    };
    let range = field()?;
    let perms = field()?;
    let offset = field()?;
    let dev = field()?;
    let inode = field()?;
    let hex = |s: &str| -> Result<u64, &'static str> {
        if s.is_empty() || s.len() > 16 {
            return Err("an address is not 1 to 16 hex digits");
        }
        u64::from_str_radix(s, 16).map_err(|_| "an address is not hexadecimal")
    };
    let (s, e) = range.split_once('-').ok_or("the range has no '-'")?;
    let (start, end) = (hex(s)?, hex(e)?);
    if start >= end {
        return Err("the range is empty or reversed");
    }
    if start % crate::BASE != 0 || end % crate::BASE != 0 {
        return Err("the range is not page-aligned");
    }
    let p = perms.as_bytes();
    if p.len() != 4
        || !matches!(p[0], b'r' | b'-')
        || !matches!(p[1], b'w' | b'-')
        || !matches!(p[2], b'x' | b'-')
        || !matches!(p[3], b'p' | b's')
    {
        return Err("the permissions are not rwxp-style");
    }
    let offset = hex(offset).map_err(|_| "the offset is not hexadecimal")?;
    match dev.split_once(':') {
        Some((a, b))
            if !a.is_empty()
                && !b.is_empty()
                && a.bytes().chain(b.bytes()).all(|c| c.is_ascii_hexdigit()) => {}
        _ => return Err("the device is not MAJOR:MINOR"),
    }
    let inode: u64 = inode.parse().map_err(|_| "the inode is not a number")?;
    Ok(Vma {
        start,
        end,
        perms: perms.to_string(),
        offset,
        inode,
        name: rest.trim_start_matches(' ').to_string(),
        ..Default::default()
    })
}

/// Parses the text of /proc/PID/maps.
pub fn parse_maps(text: &str) -> Result<Vec<Vma>, MapsError> {
    parse(text, "maps", false)
}

/// Parses the text of /proc/PID/smaps: the mappings with their figures. Field
/// lines the applier does not use are skipped; a figure that is not `N kB`, or a
/// field line before any mapping, is an error.
pub fn parse_smaps(text: &str) -> Result<Vec<Vma>, MapsError> {
    parse(text, "smaps", true)
}

fn parse(text: &str, what: &'static str, fields: bool) -> Result<Vec<Vma>, MapsError> {
    let mut out: Vec<Vma> = Vec::new();
    for (i, l) in text.lines().enumerate() {
        let n = i + 1;
        if l.is_empty() {
            continue;
        }
        // A field line's first word ends with ':' (`Rss:`, `VmFlags:`); a header's
        // first word is the range.
        let first = l.split(' ').next().unwrap_or("");
        if fields && first.ends_with(':') {
            let Some(v) = out.last_mut() else {
                return Err(bad(what, n, "a field comes before any mapping", l));
            };
            let (key, value) = l.split_once(':').unwrap_or((l, ""));
            let kb = || -> Result<u64, MapsError> {
                let t = value.trim();
                let num = t
                    .strip_suffix("kB")
                    .ok_or_else(|| bad(what, n, "a size is not in kB", l))?;
                num.trim()
                    .parse::<u64>()
                    .ok()
                    .and_then(|k| k.checked_mul(1024))
                    .ok_or_else(|| bad(what, n, "a size is not a number of kB", l))
            };
            match key {
                "Rss" => v.rss = kb()?,
                "AnonHugePages" => v.anon_huge = kb()?,
                "FilePmdMapped" => v.file_pmd = kb()?,
                "VmFlags" => v.flags = value.split_whitespace().map(String::from).collect(),
                _ => {}
            }
            continue;
        }
        let v = header(l).map_err(|why| bad(what, n, why, l))?;
        if let Some(prev) = out.last() {
            if v.start < prev.end {
                return Err(bad(
                    what,
                    n,
                    "the mapping overlaps or precedes the one before",
                    l,
                ));
            }
        }
        out.push(v);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MAPS: &str = "\
00400000-00401000 r--p 00000000 fe:01 1311                               /tmp/walk-static
00401000-00498000 r-xp 00001000 fe:01 1311                               /tmp/walk-static
004c5000-004c8000 rw-p 000c4000 fe:01 1311                               /tmp/walk-static
004c8000-004ce000 rw-p 00000000 00:00 0 
01b4f000-01b71000 rw-p 00000000 00:00 0                                  [heap]
7f3c00000000-7f3c20001000 rw-p 00000000 00:00 0 
7f3c30000000-7f3c30400000 rw-p 00000000 00:00 0                          [anon:go heap]
7ffd4a1f0000-7ffd4a211000 rw-p 00000000 00:00 0                          [stack]
7ffd4a3f4000-7ffd4a3f8000 r--p 00000000 00:00 0                          [vvar]
ffffffffff600000-ffffffffff601000 --xp 00000000 00:00 0                  [vsyscall]
";

    #[test]
    fn maps_lines_become_mappings() {
        let v = parse_maps(MAPS).unwrap();
        assert_eq!(v.len(), 10);
        assert_eq!(
            (v[0].start, v[0].end, v[0].inode),
            (0x400000, 0x401000, 1311)
        );
        assert_eq!(v[0].name, "/tmp/walk-static");
        assert_eq!(v[2].offset, 0xc4000);
        assert!(v[3].anonymous() && v[3].writable() && v[3].private());
        assert_eq!(v[3].name, "");
        assert_eq!(v[4].name, "[heap]");
        assert!(!v[4].anonymous());
        assert!(v[6].anonymous(), "a named anonymous mapping is anonymous");
        assert_eq!(v[5].interior(), Some((0x7f3c00000000, 0x7f3c20000000)));
        assert_eq!(v[3].interior(), None);
        assert_eq!(v[9].end, 0xffffffffff601000);
    }

    #[test]
    fn names_keep_their_spaces() {
        let v = parse_maps(
            "7f0000000000-7f0000001000 r--p 00000000 08:01 42  /a dir/lib x.so (deleted)\n",
        )
        .unwrap();
        assert_eq!(v[0].name, "/a dir/lib x.so (deleted)");
    }

    #[test]
    fn smaps_fields_belong_to_their_mapping() {
        let t = "\
7f3c00000000-7f3c20001000 rw-p 00000000 00:00 0 
Size:             524292 kB
Rss:              524292 kB
AnonHugePages:    522240 kB
FilePmdMapped:         0 kB
THPeligible:    1
VmFlags: rd wr mr mw me ac 
7f3c30000000-7f3c30400000 rw-p 00000000 00:00 0 
Rss:                  8 kB
AnonHugePages:         0 kB
VmFlags: rd wr mr mw me ac nh
";
        let v = parse_smaps(t).unwrap();
        assert_eq!(v.len(), 2);
        assert_eq!((v[0].rss, v[0].anon_huge), (524292 << 10, 522240 << 10));
        assert_eq!(v[1].rss, 8 << 10);
        assert!(v[1].flags.iter().any(|f| f == "nh"));
    }

    #[test]
    fn hostile_and_truncated_lines_are_errors_naming_the_line() {
        let cases = [
            (
                "00400000-00401000 r--p 00000000 fe:01",
                "a field is missing",
            ),
            ("00400000 r--p 00000000 fe:01 1 /x", "the range has no '-'"),
            (
                "00401000-00400000 r--p 00000000 fe:01 1 /x",
                "the range is empty or reversed",
            ),
            (
                "00400000-00400000 r--p 00000000 fe:01 1 /x",
                "the range is empty or reversed",
            ),
            (
                "00400001-00401000 r--p 00000000 fe:01 1 /x",
                "the range is not page-aligned",
            ),
            (
                "zz400000-00401000 r--p 00000000 fe:01 1 /x",
                "an address is not hexadecimal",
            ),
            (
                "00400000-11111111111111111000 r--p 0 fe:01 1",
                "an address is not 1 to 16 hex digits",
            ),
            (
                "00400000-00401000 rw 00000000 fe:01 1 /x",
                "the permissions are not rwxp-style",
            ),
            (
                "00400000-00401000 rwxq 00000000 fe:01 1 /x",
                "the permissions are not rwxp-style",
            ),
            (
                "00400000-00401000 rw-p 0000g000 fe:01 1 /x",
                "the offset is not hexadecimal",
            ),
            (
                "00400000-00401000 rw-p 00000000 fe01 1 /x",
                "the device is not MAJOR:MINOR",
            ),
            (
                "00400000-00401000 rw-p 00000000 fe:01 -1 /x",
                "the inode is not a number",
            ),
            ("Rss: 4 kB", "a field is missing"),
            ("", ""),
        ];
        for (line, why) in cases {
            let text = format!("{MAPS}{line}\n");
            match parse_maps(&text) {
                Err(MapsError::Bad {
                    line: n, why: w, ..
                }) => {
                    assert_eq!((n, w), (11, why), "{line:?}")
                }
                Ok(v) => assert!(line.is_empty() && v.len() == 10, "{line:?} was accepted"),
            }
        }
        // Out of order, overlapping.
        let e = parse_maps(
            "00400000-00402000 r--p 0 fe:01 1 /x\n00401000-00403000 r--p 0 fe:01 1 /x\n",
        )
        .unwrap_err();
        assert!(e.to_string().contains("line 2"), "{e}");
        // smaps: a field before any mapping, a figure that is not kB.
        assert!(parse_smaps("Rss: 4 kB\n").is_err());
        assert!(parse_smaps("00400000-00401000 r--p 0 fe:01 1 /x\nRss: 4 MB\n").is_err());
        assert!(
            parse_smaps("00400000-00401000 r--p 0 fe:01 1 /x\nRss: 99999999999999999999 kB\n")
                .is_err()
        );
        // A line cut short by a truncated read.
        assert!(parse_smaps("00400000-00401000 r--p 0 fe:01 1 /x\n7f00").is_err());
    }

    fn check(v: &[Vma]) -> Result<(), proptest::test_runner::TestCaseError> {
        for w in v.windows(2) {
            proptest::prop_assert!(w[0].end <= w[1].start);
        }
        for m in v {
            proptest::prop_assert!(m.start < m.end && m.perms.len() == 4);
            proptest::prop_assert!(m.start % 4096 == 0 && m.end % 4096 == 0);
        }
        Ok(())
    }

    proptest::proptest! {
        /// Any text at all: an error or mappings that keep the invariants, never a panic.
        #[test]
        fn any_text_parses_or_fails_cleanly(s in "\\PC{0,300}") {
            for v in [parse_maps(&s), parse_smaps(&s)].into_iter().flatten() {
                check(&v)?;
            }
        }

        /// Kernel-like lines, one byte of them replaced anywhere: parsed or
        /// refused, the invariants kept either way.
        #[test]
        fn mangled_maps_keep_the_invariants(
            maps in proptest::collection::vec(
                (0u64..1 << 24, 1u64..1 << 12, "[r-][w-][x-][ps]", "[ -~]{0,12}"),
                0..8,
            ),
            at in 0usize..2000,
            byte in proptest::num::u8::ANY,
        ) {
            let mut text = String::new();
            let mut addr = 0u64;
            for (gap, pages, perms, name) in &maps {
                let start = (addr + gap) << 12;
                let end = start + (pages << 12);
                addr = end >> 12;
                text.push_str(&format!("{start:x}-{end:x} {perms} 00000000 00:00 0 {name}\n"));
                text.push_str("Rss:  4 kB\nAnonHugePages: 0 kB\n");
            }
            let mut b = text.into_bytes();
            if !b.is_empty() {
                let i = at % b.len();
                b[i] = byte;
            }
            let text = String::from_utf8_lossy(&b);
            if let Ok(v) = parse_smaps(&text) {
                check(&v)?;
            }
        }

        /// Lines made of plausible pieces, cut anywhere.
        #[test]
        fn cut_lines_never_panic(cut in 0usize..200) {
            let text = &MAPS[..cut.min(MAPS.len())];
            let _ = parse_maps(text);
            let _ = parse_smaps(text);
        }
    }
}
