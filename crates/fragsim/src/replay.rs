//! Replay of a recorded page allocator stream (`hugetune frag --record`).
//!
//! ```text
//! # hugetune-pagealloc v1
//! # zone node=<n> name=<Normal|DMA32|...> start_pfn=<u64> spanned=<u64> present=<u64> managed=<u64>
//! <t_ns> A <pfn> <order> <migratetype>     (0 Unmovable, 1 Movable, 2 Reclaimable)
//! <t_ns> F <pfn> <order>
//! ```
//! The stream is demand: the simulator places every allocation by its own
//! policy; a recorded free of a pfn frees the simulated block allocated for
//! the recorded allocation that returned that pfn.

use crate::metrics::Summary;
use crate::sim::{Handle, Req, Sim};
use crate::workload::{Recorder, RunOpts};
use crate::zone::ZoneSpec;
use crate::{Mt, MAX_ORDER};
use std::collections::HashMap;
use std::io::{BufRead, Read};
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Event {
    Alloc { t: u64, pfn: u64, order: u8, mt: Mt },
    Free { t: u64, pfn: u64, order: u8 },
}

#[derive(Clone, Debug, Default, PartialEq)]
pub struct Recording {
    pub zones: Vec<ZoneSpec>,
    pub events: Vec<Event>,
}

/// A malformed line, with its 1-based number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub msg: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.msg)
    }
}

impl std::error::Error for ParseError {}

pub const MAGIC: &str = "# hugetune-pagealloc v1";

fn num(field: Option<&str>, what: &str) -> Result<u64, String> {
    let f = field.ok_or_else(|| format!("missing {what}"))?;
    f.parse::<u64>()
        .map_err(|_| format!("{what} {f:?} is not a number"))
}

fn parse_zone(rest: &str) -> Result<ZoneSpec, String> {
    let mut z = ZoneSpec::normal(0);
    let mut seen = 0u32;
    for kv in rest.split_whitespace() {
        let (k, v) = kv
            .split_once('=')
            .ok_or_else(|| format!("zone field {kv:?} is not key=value"))?;
        let n = || {
            v.parse::<u64>()
                .map_err(|_| format!("zone {k}={v:?} is not a number"))
        };
        match k {
            "node" => {
                z.node = n()?
                    .try_into()
                    .map_err(|_| format!("zone node {v} too large"))?
            }
            "name" => z.name = v.to_string(),
            "start_pfn" => z.start_pfn = n()?,
            "spanned" => z.spanned = n()?,
            "present" => z.present = n()?,
            "managed" => z.managed = n()?,
            _ => continue,
        }
        seen |= match k {
            "node" => 1,
            "name" => 2,
            "start_pfn" => 4,
            "spanned" => 8,
            "present" => 16,
            _ => 32,
        };
    }
    if seen != 63 {
        return Err("zone line needs node, name, start_pfn, spanned, present and managed".into());
    }
    if z.managed > z.present || z.present > z.spanned {
        return Err(format!(
            "zone {}: managed ≤ present ≤ spanned does not hold",
            z.name
        ));
    }
    if z.spanned > 1 << 31 {
        return Err(format!(
            "zone {}: {} pages is more than the simulator handles (2^31)",
            z.name, z.spanned
        ));
    }
    Ok(z)
}

fn parse_event(line: &str) -> Result<Event, String> {
    let mut it = line.split_whitespace();
    let t = num(it.next(), "time")?;
    let kind = it.next().ok_or("missing event kind (A or F)")?;
    let pfn = num(it.next(), "pfn")?;
    let order = num(it.next(), "order")?;
    if order > MAX_ORDER as u64 {
        return Err(format!("order {order} above {MAX_ORDER}"));
    }
    let order = order as u8;
    let ev = match kind {
        "A" => {
            let m = num(it.next(), "migratetype")?;
            let mt = match m {
                0 => Mt::Unmovable,
                1 => Mt::Movable,
                2 => Mt::Reclaimable,
                _ => return Err(format!("migratetype {m} is not 0, 1 or 2")),
            };
            Event::Alloc { t, pfn, order, mt }
        }
        "F" => Event::Free { t, pfn, order },
        k => return Err(format!("event kind {k:?} is not A or F")),
    };
    if it.next().is_some() {
        return Err("extra fields".into());
    }
    Ok(ev)
}

/// Parses a whole recording.
pub fn parse<R: BufRead>(r: R) -> Result<Recording, ParseError> {
    let mut rec = Recording::default();
    let mut magic = false;
    for (i, line) in r.lines().enumerate() {
        let n = i + 1;
        let line = line.map_err(|e| ParseError {
            line: n,
            msg: format!("unreadable: {e}"),
        })?;
        let l = line.trim();
        if l.is_empty() {
            continue;
        }
        if let Some(c) = l.strip_prefix('#') {
            if l == MAGIC {
                magic = true;
            } else if let Some(rest) = c.trim_start().strip_prefix("zone ") {
                rec.zones
                    .push(parse_zone(rest).map_err(|msg| ParseError { line: n, msg })?);
            }
            continue;
        }
        if !magic {
            return Err(ParseError {
                line: n,
                msg: format!("data before the {MAGIC:?} header"),
            });
        }
        rec.events
            .push(parse_event(l).map_err(|msg| ParseError { line: n, msg })?);
    }
    if !magic {
        return Err(ParseError {
            line: 1,
            msg: format!("not a recording: no {MAGIC:?} header"),
        });
    }
    Ok(rec)
}

/// Reads a recording file; `.zst` files are decompressed.
pub fn read_file(path: &Path) -> Result<Recording, Box<dyn std::error::Error + Send + Sync>> {
    let f = std::fs::File::open(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let rd: Box<dyn Read> = if path.extension().is_some_and(|e| e == "zst") {
        Box::new(zstd::Decoder::new(f).map_err(|e| format!("{}: {e}", path.display()))?)
    } else {
        Box::new(f)
    };
    parse(std::io::BufReader::new(rd)).map_err(|e| format!("{}: {e}", path.display()).into())
}

/// Replays `rec`'s demand. Frees of pfns not allocated during the recording
/// are counted in `ignored_frees` (frees of allocations the simulator failed
/// to place are dropped silently; the failures are in `stats.alloc_fail`); frees whose order differs from the
/// recorded allocation's still free that allocation and are counted in
/// `unmatched_frees`. An allocation at a pfn that is still live in the map
/// (its free was not recorded) first frees the old block.
pub fn run_replay(rec: &Recording, opts: &RunOpts) -> Summary {
    let mut sim = Sim::new(&opts.zones, &opts.sim);
    let mut map: HashMap<u64, (Handle, u8)> = HashMap::new();
    // Recorded allocations the simulator could not place: their frees are
    // neither ignored nor unmatched.
    let mut failed: std::collections::HashSet<u64> = Default::default();
    let total = rec.events.len() as u64;
    let mut recd = Recorder::new(total / opts.samples.max(1));
    let (mut ignored, mut unmatched, mut events) = (0u64, 0u64, 0u64);
    for ev in &rec.events {
        match *ev {
            Event::Alloc { pfn, order, mt, .. } => {
                if let Some((h, _)) = map.remove(&pfn) {
                    sim.free(h);
                }
                failed.remove(&pfn);
                match sim.alloc(Req::new(order, mt)) {
                    Some(h) => {
                        map.insert(pfn, (h, order));
                    }
                    None => {
                        failed.insert(pfn);
                    }
                }
            }
            Event::Free { pfn, order, .. } => match map.remove(&pfn) {
                Some((h, o)) => {
                    if o != order {
                        unmatched += 1;
                    }
                    sim.free(h);
                }
                None => {
                    if !failed.remove(&pfn) {
                        ignored += 1;
                    }
                }
            },
        }
        events += 1;
        recd.tick(&sim, events, "replay");
    }
    recd.force(&sim, events, "replay");
    let end = crate::metrics::Sample::take(&sim, events, "end");
    let (after_compaction, final_compaction) = if opts.final_compaction {
        let (s0, m0) = (
            sim.stats.migrate_scanned + sim.stats.free_scanned,
            sim.stats.migrated,
        );
        sim.compact_all();
        (
            Some(crate::metrics::Sample::take(&sim, events, "compacted")),
            Some((
                sim.stats.migrate_scanned + sim.stats.free_scanned - s0,
                sim.stats.migrated - m0,
            )),
        )
    } else {
        (None, None)
    };
    Summary {
        policy: sim.policy_kind().name().to_string(),
        workload: "replay".into(),
        seed: opts.sim.seed,
        pages: sim.managed_pages(),
        events,
        end,
        after_compaction,
        final_compaction,
        passes: Vec::new(),
        stats: sim.stats.clone(),
        series: recd.series,
        ignored_frees: ignored,
        unmatched_frees: unmatched,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Result<Recording, ParseError> {
        parse(s.as_bytes())
    }

    #[test]
    fn parses_the_format() {
        let r = p("# hugetune-pagealloc v1\n# zone node=0 name=DMA32 start_pfn=4096 spanned=1044480 present=1044480 managed=1000000\n# a comment\n\n10 A 4097 0 1\n20 F 4097 0\n30 A 8192 3 2\n").unwrap();
        assert_eq!(r.zones.len(), 1);
        assert_eq!(r.zones[0].name, "DMA32");
        assert_eq!(r.zones[0].managed, 1000000);
        assert_eq!(
            r.events,
            vec![
                Event::Alloc {
                    t: 10,
                    pfn: 4097,
                    order: 0,
                    mt: Mt::Movable
                },
                Event::Free {
                    t: 20,
                    pfn: 4097,
                    order: 0
                },
                Event::Alloc {
                    t: 30,
                    pfn: 8192,
                    order: 3,
                    mt: Mt::Reclaimable
                },
            ]
        );
    }

    #[test]
    fn errors_name_the_line() {
        let h = "# hugetune-pagealloc v1\n";
        assert_eq!(p(&format!("{h}1 A 2 3\n")).unwrap_err().line, 2);
        assert!(p(&format!("{h}1 A 2 3\n"))
            .unwrap_err()
            .msg
            .contains("migratetype"));
        assert!(p(&format!("{h}1 A 2 11 0\n"))
            .unwrap_err()
            .msg
            .contains("order 11"));
        assert!(p(&format!("{h}1 A 2 1 4\n"))
            .unwrap_err()
            .msg
            .contains("migratetype 4"));
        assert!(p(&format!("{h}1 X 2 1\n"))
            .unwrap_err()
            .msg
            .contains("A or F"));
        assert!(p(&format!("{h}\n\nx A 2 1 0\n")).unwrap_err().line == 4);
        assert!(p(&format!("{h}1 F 2 1 9\n"))
            .unwrap_err()
            .msg
            .contains("extra"));
        assert!(p(&format!("{h}# zone node=0 name=N\n"))
            .unwrap_err()
            .msg
            .contains("zone line"));
        assert!(p("1 A 2 1 0\n").unwrap_err().msg.contains("header"));
        assert!(p("").unwrap_err().msg.contains("header"));
    }

    #[test]
    fn zstd_files_are_read() {
        let dir = std::env::temp_dir().join(format!("fragsim-replay-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let text = "# hugetune-pagealloc v1\n1 A 0 0 0\n2 F 0 0\n";
        let path = dir.join("r.zst");
        std::fs::write(&path, zstd::encode_all(text.as_bytes(), 3).unwrap()).unwrap();
        assert_eq!(read_file(&path).unwrap().events.len(), 2);
        let plain = dir.join("r.txt");
        std::fs::write(&plain, text).unwrap();
        assert_eq!(read_file(&plain).unwrap(), read_file(&path).unwrap());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
