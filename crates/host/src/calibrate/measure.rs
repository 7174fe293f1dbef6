//! The measuring part of calibrate: mapped buffers of each backing, the pointer
//! chase, CPU pinning, hugetlb pools reserved through `kernel_state`, and the
//! interleaved session that turns the plans of `super` into figures (the walk
//! footprints and the overlap in rounds, pooled, when `--spread` asks), with
//! the 4 KB walks and the overlap on fresh memory in forked children.
//!
//! Invariants: every buffer is unmapped on drop (a child's, by its `_exit`); a
//! child only measures and reports through its pipe, and is waited for before
//! its figures are used; pools change only under the
//! kernel-state lock and are restored, and so is free page reporting, held off
//! for the whole run as for the runs predictions are checked against; nothing
//! here decides what a figure means
//! (that is `super`'s arithmetic).

use super::*;
/// An anonymous mapping of `len` bytes at `base` (aligned for its backing).
struct Region {
    map: *mut u8,
    map_len: usize,
    base: *mut u8,
    len: usize,
    backing: BufferBacking,
}

impl Region {
    fn map(len: u64, backing: BufferBacking) -> Result<Region> {
        let len = usize::try_from(len).context("mapping too large")?;
        let (extra, flags) = match backing {
            BufferBacking::Base4k => (0, 0),
            BufferBacking::Thp { kb } => ((kb as usize) << 10, 0),
            BufferBacking::Hugetlb2m => (0, libc::MAP_HUGETLB | libc::MAP_HUGE_2MB),
            BufferBacking::Hugetlb1g => (0, libc::MAP_HUGETLB | libc::MAP_HUGE_1GB),
        };
        let map_len = len + extra;
        // SAFETY: a fresh anonymous private mapping; the result is checked.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | flags,
                -1,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            if let Some(kb) = backing.pool_kb() {
                let p = machine::pool(kb);
                bail!(
                    "mapping {} of {}: {e} (pool: {} free of {})",
                    bytes_text(len as u64),
                    backing.name(),
                    p.as_ref().map_or(0, |p| p.free),
                    p.as_ref().map_or(0, |p| p.nr)
                );
            }
            bail!("mapping {}: {e}", bytes_text(len as u64));
        }
        let map = map as *mut u8;
        let base = if extra > 0 {
            // SAFETY: the aligned start lies within the mapping (extra ≥ alignment).
            unsafe { map.add((extra - (map as usize % extra)) % extra) }
        } else {
            map
        };
        let r = Region {
            map,
            map_len,
            base,
            len,
            backing,
        };
        let advice = match backing {
            BufferBacking::Base4k => Some(libc::MADV_NOHUGEPAGE),
            BufferBacking::Thp { .. } => Some(libc::MADV_HUGEPAGE),
            _ => None,
        };
        if let Some(a) = advice {
            // SAFETY: the range lies within our mapping.
            if unsafe { libc::madvise(r.base as *mut libc::c_void, len, a) } != 0 {
                bail!("madvise: {}", std::io::Error::last_os_error());
            }
        }
        Ok(r)
    }

    fn usage(&self) -> RangeUsage {
        let text = std::fs::read_to_string("/proc/self/smaps").unwrap_or_default();
        let s = self.base as u64;
        smaps_range(&text, s, s + self.len as u64)
    }

    /// Checks that the touched memory really has the backing asked for.
    fn verify(&self, touched: u64) -> Result<()> {
        let u = self.usage();
        let ok = match self.backing {
            BufferBacking::Base4k => u.anon_huge == 0 && u.hugetlb == 0,
            BufferBacking::Thp { kb: 2048 } => u.anon_huge as f64 >= 0.99 * touched as f64,
            BufferBacking::Thp { .. } => true,
            BufferBacking::Hugetlb2m | BufferBacking::Hugetlb1g => u.hugetlb >= touched,
        };
        if !ok {
            bail!(
                "{} of {} did not get its pages: {} resident, {} THP, {} hugetlb",
                bytes_text(self.len as u64),
                self.backing.name(),
                bytes_text(u.rss),
                bytes_text(u.anon_huge),
                bytes_text(u.hugetlb)
            );
        }
        Ok(())
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: the mapping is ours and nothing refers into it any more.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
    }
}

/// One backing's fault passes: the plan, the cold pass, the warm passes (touch
/// and unmap) and the warm passes' unmap alone, ns per fault.
type FaultPasses = (FaultPlan, Option<f64>, Vec<f64>, Vec<f64>);

/// A chase ready to run: the cycle built in its own mapping.
struct ChaseBuf {
    region: Region,
    at: usize,
    /// The independent loads' generator state.
    x: u64,
}

impl ChaseBuf {
    fn build(c: &Chase, seed: u64) -> Result<ChaseBuf> {
        let region = Region::map(c.bytes(), c.backing)?;
        let base = region.base;
        let write = |from: u64, to: u64| {
            // SAFETY: node offsets lie within the mapping, 8-byte aligned.
            unsafe {
                *(base.add(c.node_offset(from) as usize) as *mut usize) = c.node_offset(to) as usize
            };
        };
        let mut order = chase_order(c.nodes(), seed);
        let first = order.next().context("a chase needs nodes")?;
        let mut prev = first;
        for x in order {
            write(prev, x);
            prev = x;
        }
        write(prev, first);
        // Both layouts touch every page.
        region.verify(c.bytes()).with_context(|| c.label())?;
        Ok(ChaseBuf {
            region,
            at: c.node_offset(first) as usize,
            x: seed | 1,
        })
    }

    /// The same cycle in a mapping of another backing: a node chase of the same size
    /// is laid out identically whatever its pages, so a sequential copy replaces the
    /// random writes of building it again, and both chases visit the same nodes in
    /// the same order (the same data-cache misses).
    fn copy_of(c: &Chase, from: &ChaseBuf) -> Result<ChaseBuf> {
        if c.layout != ChaseLayout::Nodes || c.bytes() as usize != from.region.len {
            bail!("only a node chase of the same size can be copied");
        }
        let region = Region::map(c.bytes(), c.backing)?;
        // SAFETY: two distinct mappings of `len` bytes each.
        unsafe { std::ptr::copy_nonoverlapping(from.region.base, region.base, region.len) };
        region.verify(c.bytes()).with_context(|| c.label())?;
        Ok(ChaseBuf {
            region,
            at: from.at,
            x: from.x,
        })
    }

    /// Runs `warm` untimed steps, then `steps` timed ones; ns per timed step.
    fn run(&mut self, warm: u64, steps: u64) -> f64 {
        self.at = chase(self.region.base, self.at, warm);
        let t = Instant::now();
        self.at = chase(self.region.base, self.at, steps);
        t.elapsed().as_nanos() as f64 / steps.max(1) as f64
    }

    /// Independent random accesses over the whole buffer, loads or (`write`)
    /// read-modify-writes: `warm` untimed, then `steps` timed; ns per timed
    /// access.
    fn independent(&mut self, write: bool, warm: u64, steps: u64) -> f64 {
        // The largest power of two of nodes the mapping holds.
        let bits = (self.region.len as u64 / NODE).max(2).ilog2();
        let run = if write { rmw } else { loads };
        self.x = run(self.region.base, bits, self.x, warm);
        let t = Instant::now();
        self.x = run(self.region.base, bits, self.x, steps);
        t.elapsed().as_nanos() as f64 / steps.max(1) as f64
    }
}

/// The independent accesses' next node: a 64-bit LCG held in registers, its top
/// `bits` bits (1..=63) the node. Returns (state, node).
#[inline(always)]
fn next_node(x: u64, bits: u32) -> (u64, u64) {
    let x = x
        .wrapping_mul(6_364_136_223_846_793_005)
        .wrapping_add(1_442_695_040_888_963_407);
    (x, x >> (64 - bits))
}

/// Loads of random nodes whose addresses come from a generator held in
/// registers, not from the load before: the core runs as many at once as it
/// can, and so overlaps their walks. Returns the generator's state.
#[inline(never)]
fn loads(base: *mut u8, bits: u32, mut x: u64, steps: u64) -> u64 {
    let bits = bits.clamp(1, 63);
    let mut sum = 0u64;
    for _ in 0..steps {
        let node;
        (x, node) = next_node(x, bits);
        // SAFETY: node < 2^bits, at most the mapping's nodes; 8-byte aligned.
        let v = unsafe { std::ptr::read_volatile(base.add((node * NODE) as usize) as *const u64) };
        sum = sum.wrapping_add(v);
    }
    std::hint::black_box(sum);
    x
}

/// [`loads`] that write each line back: a read-modify-write of the node's
/// second word (the first is the chase's link, which stays as built).
#[inline(never)]
fn rmw(base: *mut u8, bits: u32, mut x: u64, steps: u64) -> u64 {
    let bits = bits.clamp(1, 63);
    for _ in 0..steps {
        let node;
        (x, node) = next_node(x, bits);
        // SAFETY: node < 2^bits, at most the mapping's nodes (64 bytes each);
        // the word at +8 lies within the node, 8-byte aligned, and holds no link.
        unsafe {
            let p = base.add((node * NODE) as usize + 8) as *mut u64;
            std::ptr::write_volatile(p, std::ptr::read_volatile(p).wrapping_add(1));
        }
    }
    x
}

/// The dependent loads: each node holds the offset of the next. On x86-64 the loop
/// is written out (one load, a decrement and a branch per step), so what is timed
/// does not depend on the optimization level the binary was built with.
#[cfg(target_arch = "x86_64")]
fn chase(base: *const u8, mut at: usize, steps: u64) -> usize {
    if steps == 0 {
        return at;
    }
    // SAFETY: every stored offset is a node of the mapping `base` starts; the loop
    // only reads memory and runs `steps` (> 0) times.
    unsafe {
        std::arch::asm!(
            "2:",
            "mov {at}, qword ptr [{base} + {at}]",
            "dec {n}",
            "jnz 2b",
            base = in(reg) base,
            at = inout(reg) at,
            n = inout(reg) steps => _,
            options(nostack, readonly),
        );
    }
    at
}

#[cfg(not(target_arch = "x86_64"))]
#[inline(never)]
fn chase(base: *const u8, mut at: usize, steps: u64) -> usize {
    for _ in 0..steps {
        // SAFETY: every stored offset is a node of the mapping `base` starts.
        at = unsafe { *(base.add(at) as *const usize) };
    }
    std::hint::black_box(at)
}

/// Runs `f` in a forked child process and returns the figures it returned. The
/// child does only what a measurement does (maps memory, touches it, loads,
/// stores, reads the clock), writes its figures or its error to a pipe and
/// ends with `_exit`, so nothing of this process (buffers, locks, journal) is
/// dropped twice; it inherits the CPU pinning.
fn in_child(f: impl FnOnce() -> Result<Vec<f64>>) -> Result<Vec<f64>> {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("pipe: {}", std::io::Error::last_os_error());
    }
    // SAFETY: the child runs `f` and writes to the pipe, then `_exit`s; glibc
    // keeps malloc usable in a forked child.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        let e = std::io::Error::last_os_error();
        // SAFETY: closing our own descriptors.
        unsafe { (libc::close(fds[0]), libc::close(fds[1])) };
        bail!("fork: {e}");
    }
    if pid == 0 {
        let out = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(Ok(v)) => {
                let mut b = vec![b'O'];
                v.iter().for_each(|x| b.extend(x.to_le_bytes()));
                b
            }
            Ok(Err(e)) => [b"E".as_slice(), format!("{e:#}").as_bytes()].concat(),
            Err(_) => b"Ethe measuring child panicked".to_vec(),
        };
        let mut off = 0;
        while off < out.len() {
            // SAFETY: writing our own buffer to our end of the pipe.
            let n = unsafe { libc::write(fds[1], out[off..].as_ptr().cast(), out.len() - off) };
            if n <= 0 {
                break;
            }
            off += n as usize;
        }
        // SAFETY: ends the child without running anything of the parent's.
        unsafe { libc::_exit(0) };
    }
    // SAFETY: the write end is the child's now; the read end is ours, and the
    // File closes it.
    let mut r = unsafe {
        libc::close(fds[1]);
        std::fs::File::from_raw_fd(fds[0])
    };
    let mut buf = Vec::new();
    let read = r.read_to_end(&mut buf);
    let mut status = 0;
    // SAFETY: waiting for our own child.
    while unsafe { libc::waitpid(pid, &mut status, 0) } < 0
        && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
    {}
    read.context("reading the measuring child's figures")?;
    match buf.split_first() {
        Some((b'O', rest)) if rest.len() % 8 == 0 => Ok(rest
            .chunks_exact(8)
            .map(|c| {
                let mut a = [0u8; 8];
                a.copy_from_slice(c);
                f64::from_le_bytes(a)
            })
            .collect()),
        Some((b'E', rest)) => bail!("{}", String::from_utf8_lossy(rest)),
        _ => {
            bail!("the measuring child process ended without its figures (wait status {status:#x})")
        }
    }
}

/// The largest footprint measured on fresh memory. Beyond it a 4 KB walk's
/// entries are out of the caches wherever the buffer lands (AMD EPYC guest, 2
/// and 4 GiB: 200.6 and 184.5 ns fresh, 200.8 and 189.6 ns in one process), and a
/// child per repetition would cost minutes (the footprint touched twice per
/// repetition: 220 s for the 4 GiB pair).
const FRESH_MAX_BYTES: u64 = 1 << 30;

/// One repetition on memory like a measured program's (`Options::fresh_memory`):
/// the footprint and a quarter touched and freed here, as the measured runs'
/// rounds do before each run, then a child process maps `c`'s buffer as its
/// first, copies the template's cycle into it and runs `f` on it.
fn on_fresh_memory(
    template: &ChaseBuf,
    c: &Chase,
    f: impl FnOnce(&mut ChaseBuf) -> Vec<f64>,
) -> Result<Vec<f64>> {
    machine::warm_memory(c.bytes() * 5 / 4);
    in_child(|| {
        let mut b = ChaseBuf::copy_of(c, template)?;
        Ok(f(&mut b))
    })
}

/// Keeps the measuring thread on one CPU (TLBs and caches are per core) and puts
/// the old affinity back when dropped.
struct Pinned(Option<libc::cpu_set_t>);

fn pin_to_this_cpu() -> Pinned {
    // SAFETY: plain syscalls on our own thread with a properly sized set.
    unsafe {
        let mut old: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut old) != 0 {
            return Pinned(None);
        }
        let cpu = libc::sched_getcpu();
        if cpu < 0 {
            return Pinned(None);
        }
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu as usize, &mut one);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one) != 0 {
            return Pinned(None);
        }
        Pinned(Some(old))
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(old) = &self.0 {
            // SAFETY: restoring the set read before.
            unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), old) };
        }
    }
}

/// CPU time of the whole machine and of this process, in clock ticks: (busy,
/// total, ours). Busy counts steal too (the host running something else).
fn cpu_ticks() -> Option<(u64, u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let f: Vec<u64> = stat
        .lines()
        .next()?
        .split_whitespace()
        .skip(1)
        .filter_map(|v| v.parse().ok())
        .collect();
    if f.len() < 8 {
        return None;
    }
    // user nice system idle iowait irq softirq steal
    let total: u64 = f[..8].iter().sum();
    let busy = total - f[3] - f[4];
    let own = std::fs::read_to_string("/proc/self/stat").ok()?;
    // Fields after the command name (which may hold spaces), from field 3 (state):
    // utime is field 14, stime 15, and the children we waited for 16 and 17:
    // the fresh-memory repetitions run in forked children (`in_child`), and
    // their time is ours, not other work's.
    let rest: Vec<&str> = own.rsplit_once(')')?.1.split_whitespace().collect();
    let field = |n: usize| rest.get(n - 3)?.parse::<u64>().ok();
    Some((
        busy,
        total,
        field(14)? + field(15)? + field(16)? + field(17)?,
    ))
}

/// The share of the machine's CPU time that other work took between two
/// `cpu_ticks` readings.
pub fn others_share(before: (u64, u64, u64), after: (u64, u64, u64)) -> f64 {
    let total = after.1.saturating_sub(before.1).max(1);
    let busy = after.0.saturating_sub(before.0);
    let ours = after.2.saturating_sub(before.2);
    busy.saturating_sub(ours) as f64 / total as f64
}

/// Options for `m` with half of the memory available now as the budget.
pub fn options(quick: bool, m: &Machine) -> Options {
    Options::new(quick, m, machine::mem_available_kb().unwrap_or(0) << 10)
}

fn measurement(config: String, unit: &str, samples: Vec<f64>) -> Result<Measurement> {
    let s = repeated(&samples).with_context(|| config.clone())?;
    Ok(Measurement {
        config,
        unit: unit.into(),
        median: s.median,
        min: s.min,
        max: s.max,
        reps: s.reps,
        samples,
    })
}

/// Pools grown for one phase; dropping them puts the old sizes back.
fn reserve(lock: Option<&KernelStateLock>, needs: &[(u64, u64)]) -> Result<Vec<PoolChange>> {
    let mut out = Vec::new();
    for &(kb, pages) in needs {
        if pages == 0 {
            continue;
        }
        let Some(lock) = lock else {
            bail!("reserving hugetlb pages needs root");
        };
        let c = kernel_state::reserve_hugetlb_holding(lock, kb, pages)?;
        if c.added() < pages {
            bail!(
                "the kernel gave {} of {pages} more {} pages (memory too fragmented?)",
                c.added(),
                kb_text(kb)
            );
        }
        out.push(c);
    }
    Ok(out)
}

/// The measuring session: options, the lock, what has been measured so far.
struct Session<'a> {
    o: &'a Options,
    lock: Option<KernelStateLock>,
    raw: Vec<Measurement>,
    progress: &'a mut dyn FnMut(&str),
    seed: u64,
}

/// A page size's walk footprints and notes, or why they cannot be measured.
type PlannedWalks = std::result::Result<(Vec<Pair>, Vec<String>), String>;

/// The outcome of a chase pair: per-repetition differences A − B.
struct PairRun {
    pair: Pair,
    diffs: Vec<f64>,
}

impl Session<'_> {
    fn run_pair(&mut self, pair: &Pair, steps: u64) -> Result<PairRun> {
        match self.try_pair(pair, steps) {
            Err(e) if pair.fallback.is_some() => {
                (self.progress)(&format!("  {e:#}; comparing with a smaller footprint"));
                let fb = Pair {
                    a: pair.a.clone(),
                    b: pair.fallback.clone().unwrap_or_else(|| pair.b.clone()),
                    fallback: None,
                };
                self.try_pair(&fb, steps)
            }
            r => r,
        }
    }

    fn try_pair(&mut self, pair: &Pair, steps: u64) -> Result<PairRun> {
        let _pools = reserve(self.lock.as_ref(), &pool_needs(pair))?;
        self.seed = self.seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        if self.fresh(pair) {
            return self.fresh_pair(pair, steps);
        }
        let mut a = ChaseBuf::build(&pair.a, self.seed)?;
        let mut b = if pair.a.layout == ChaseLayout::Nodes && pair.a.bytes() == pair.b.bytes() {
            ChaseBuf::copy_of(&pair.b, &a)?
        } else {
            ChaseBuf::build(&pair.b, self.seed ^ 0x5555)?
        };
        let warm = steps / 4;
        let (mut ta, mut tb) = (Vec::new(), Vec::new());
        for r in 0..self.o.reps {
            // Alternate which goes first, so neither always follows the other.
            if r % 2 == 0 {
                ta.push(a.run(warm, steps));
                tb.push(b.run(warm, steps));
            } else {
                tb.push(b.run(warm, steps));
                ta.push(a.run(warm, steps));
            }
        }
        drop((a, b));
        self.pair_run(pair, ta, tb)
    }

    /// A pair's timings recorded, and their differences per repetition.
    fn pair_run(&mut self, pair: &Pair, ta: Vec<f64>, tb: Vec<f64>) -> Result<PairRun> {
        let diffs = ta.iter().zip(&tb).map(|(x, y)| x - y).collect();
        self.raw.push(measurement(pair.a.label(), "ns/step", ta)?);
        self.raw.push(measurement(pair.b.label(), "ns/step", tb)?);
        Ok(PairRun {
            pair: pair.clone(),
            diffs,
        })
    }

    /// Whether `pair` is measured on fresh memory: 4 KB walks of a node chase
    /// against a buffer of the same size (the pairs a fresh copy can serve), up
    /// to `FRESH_MAX_BYTES`, when the options ask for it.
    fn fresh(&self, pair: &Pair) -> bool {
        self.o.fresh_memory
            && pair.a.bytes() <= FRESH_MAX_BYTES
            && pair.a.leaf == 0
            && pair.a.layout == ChaseLayout::Nodes
            && pair.b.layout == ChaseLayout::Nodes
            && pair.a.bytes() == pair.b.bytes()
    }

    /// [`Self::try_pair`] with every repetition of either side on fresh memory
    /// in its own child process (`on_fresh_memory`), the two sides alternating
    /// which goes first: each repetition is a new draw of where the buffer
    /// lands, as each measured run of a program is.
    fn fresh_pair(&mut self, pair: &Pair, steps: u64) -> Result<PairRun> {
        let template = ChaseBuf::build(&pair.a, self.seed)?;
        let warm = steps / 4;
        let (mut ta, mut tb) = (Vec::new(), Vec::new());
        for r in 0..self.o.reps {
            for k in 0..2 {
                let (side, out) = if (k + r) % 2 == 0 {
                    (&pair.a, &mut ta)
                } else {
                    (&pair.b, &mut tb)
                };
                let v = on_fresh_memory(&template, side, |b| vec![b.run(warm, steps)])?;
                out.push(v.first().copied().context("no figure from the child")?);
            }
        }
        drop(template);
        self.pair_run(pair, ta, tb)
    }

    /// The walk overlap's ends (`super::overlap_ends`): the chase, the
    /// independent loads and the same loads writing back, on the plan's 4 KB
    /// and 2 MB buffers, all six interleaved in every repetition, in an order
    /// rotated each time. One round of them (`--spread` pools several): the
    /// timings are added to `t` (chase A, chase B, loads A, loads B, writes A,
    /// writes B).
    fn overlap_round(&mut self, pair: &Pair, t: &mut [Vec<f64>; 6]) -> Result<()> {
        let _pools = reserve(self.lock.as_ref(), &pool_needs(pair))?;
        self.seed = self.seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let (steps, warm) = (self.o.steps, self.o.steps / 4);
        if self.fresh(pair) {
            // Per repetition, each side in a child on fresh memory, its three
            // timings in an order rotated each time.
            let template = ChaseBuf::build(&pair.a, self.seed)?;
            for r in 0..self.o.reps {
                for k in 0..2 {
                    let side = (k + r) % 2;
                    let c = if side == 0 { &pair.a } else { &pair.b };
                    let v = on_fresh_memory(&template, c, |b| {
                        let mut v = [0.0; 3];
                        for j in 0..3 {
                            let i = (j + r) % 3;
                            v[i] = match i {
                                0 => b.run(warm, steps),
                                1 => b.independent(false, warm, steps),
                                _ => b.independent(true, warm, steps),
                            };
                        }
                        v.to_vec()
                    })?;
                    if v.len() != 3 {
                        bail!("{} figures from the child, not 3", v.len());
                    }
                    for (i, x) in v.into_iter().enumerate() {
                        t[2 * i + side].push(x);
                    }
                }
            }
            return Ok(());
        }
        let mut a = ChaseBuf::build(&pair.a, self.seed)?;
        let mut b = ChaseBuf::copy_of(&pair.b, &a)?;
        for r in 0..self.o.reps {
            for k in 0..6 {
                let i = (k + r) % 6;
                let v = match i {
                    0 => a.run(warm, steps),
                    1 => b.run(warm, steps),
                    2 => a.independent(false, warm, steps),
                    3 => b.independent(false, warm, steps),
                    4 => a.independent(true, warm, steps),
                    _ => b.independent(true, warm, steps),
                };
                t[i].push(v);
            }
        }
        drop((a, b));
        Ok(())
    }

    /// One round of the walk overlap (`overlap_round`), said on the progress
    /// line; a later round's failure keeps the rounds before it, a first
    /// round's failure is the overlap's.
    fn overlap_step(
        &mut self,
        pair: &Pair,
        t: &mut std::result::Result<[Vec<f64>; 6], String>,
        done: &mut usize,
        round: usize,
    ) {
        let Ok(times) = t else {
            return;
        };
        (self.progress)(&format!(
            "walk overlap: the chase and independent loads, {} on 4 KB vs {} pages{}",
            bytes_text(pair.a.bytes()),
            pair.b.backing.name(),
            if self.o.spread_s > 0.0 {
                format!(" (round {round})")
            } else {
                String::new()
            }
        ));
        let before = times.clone();
        match self.overlap_round(pair, times) {
            Ok(()) => *done += 1,
            Err(e) if *done > 0 => {
                *times = before;
                (self.progress)(&format!("  walk overlap round {round}: {e:#}"));
            }
            Err(e) => *t = Err(format!("{e:#}")),
        }
    }

    /// The ends from every round's timings (their raw figures recorded).
    fn overlap(
        &mut self,
        pair: &Pair,
        t: &[Vec<f64>; 6],
        l2_hit_ns: [f64; 3],
    ) -> Result<OverlapEnds> {
        // In `t`'s order: the chase, the loads, the writes, each on A then B.
        let mut names = vec![
            format!("overlap: {}", pair.a.label()),
            format!("overlap: {}", pair.b.label()),
        ];
        for what in ["independent loads", "independent read-modify-writes"] {
            for c in [&pair.a, &pair.b] {
                names.push(format!(
                    "overlap: {what} {} on {}",
                    bytes_text(c.bytes()),
                    c.backing.name()
                ));
            }
        }
        for (name, v) in names.into_iter().zip(t) {
            self.raw.push(measurement(name, "ns/step", v.clone())?);
        }
        overlap_ends(
            (&t[0], &t[1]),
            (&t[2], &t[3]),
            Some((&t[4], &t[5])),
            fractions(pair.a.leaf, pair.a.pages, &self.o.tlb),
            fractions(pair.b.leaf, pair.b.pages, &self.o.tlb),
            [l2_hit_ns[pair.a.leaf], l2_hit_ns[pair.b.leaf]],
            (8 * pair.a.pages) as f64,
        )
    }

    /// One pass of `p`: the first touch of every fault unit and the unmap of
    /// the mapping, each in ns per fault. A program pays both within its run
    /// (at `munmap`, `free` or exit), per page (docs/model.md §4, "A fault's
    /// cost is its page's life").
    fn touch(&self, p: &FaultPlan) -> Result<(f64, f64)> {
        let unit = p.backing.fault_bytes();
        let faults = (p.bytes / unit).max(1);
        match p.backing {
            BufferBacking::Thp { kb } if kb < 2048 => {
                // One mapping per folio (every other folio made inaccessible), so the
                // kernel cannot use a larger enabled size.
                let r = Region::map(2 * faults * unit, p.backing)?;
                for i in 0..faults {
                    // SAFETY: the odd folios lie within our mapping.
                    let rc = unsafe {
                        libc::mprotect(
                            r.base.add(((2 * i + 1) * unit) as usize) as *mut libc::c_void,
                            unit as usize,
                            libc::PROT_NONE,
                        )
                    };
                    if rc != 0 {
                        bail!("mprotect: {}", std::io::Error::last_os_error());
                    }
                }
                let stats = Path::new(crate::machine::THP_SYSFS)
                    .join(format!("hugepages-{kb}kB/stats/anon_fault_alloc"));
                let before = crate::procfs::read_u64(&stats);
                let t = Instant::now();
                for i in 0..faults {
                    // SAFETY: the even folios are ours and writable.
                    unsafe { std::ptr::write_volatile(r.base.add((2 * i * unit) as usize), 1u8) };
                }
                let ns = t.elapsed().as_nanos() as f64;
                let t = Instant::now();
                drop(r);
                let unmap = t.elapsed().as_nanos() as f64;
                if let (Some(b), Some(a)) = (before, crate::procfs::read_u64(&stats)) {
                    if a - b.min(a) < faults {
                        bail!(
                            "{}: {} of {faults} faults got a {}-kB folio",
                            p.backing.name(),
                            a - b.min(a),
                            kb
                        );
                    }
                }
                Ok((ns / faults as f64, unmap / faults as f64))
            }
            _ => {
                let r = Region::map(faults * unit, p.backing)?;
                let t = Instant::now();
                for i in 0..faults {
                    // SAFETY: within our writable mapping.
                    unsafe { std::ptr::write_volatile(r.base.add((i * unit) as usize), 1u8) };
                }
                let ns = t.elapsed().as_nanos() as f64;
                r.verify(faults * unit)?;
                let t = Instant::now();
                drop(r);
                let unmap = t.elapsed().as_nanos() as f64;
                Ok((ns / faults as f64, unmap / faults as f64))
            }
        }
    }

    /// Fault figures: a cold pass of every configuration, then the repetitions,
    /// interleaved.
    fn faults(&mut self, figures: &mut Vec<Figure>, fault_ns: &mut Vec<(String, f64)>) {
        let (plans, left) = plan_faults(self.o);
        // Each pool grown by what its backing touches per pass; if the kernel gives
        // fewer pages, fewer are touched, and none leaves the backing out.
        let mut pools = Vec::new();
        let mut failed: Vec<(BufferBacking, String)> = Vec::new();
        let mut active: Vec<FaultPasses> = Vec::new();
        for mut p in plans {
            if let Some(kb) = p.backing.pool_kb() {
                let want = p.bytes / (kb << 10);
                let got = match &self.lock {
                    Some(lock) => kernel_state::reserve_hugetlb_holding(lock, kb, want),
                    None => Err(anyhow::anyhow!("reserving hugetlb pages needs root")),
                };
                match got {
                    Ok(c) if c.added() > 0 => {
                        p.bytes = p.bytes.min(c.added() * (kb << 10));
                        pools.push(c);
                    }
                    Ok(c) => {
                        failed.push((
                            p.backing,
                            format!("the kernel gave none of {want} more {}-kB pages (memory too fragmented?)", kb),
                        ));
                        drop(c);
                        continue;
                    }
                    Err(e) => {
                        failed.push((p.backing, format!("{e:#}")));
                        continue;
                    }
                }
            }
            active.push((p, None, Vec::new(), Vec::new()));
        }
        (self.progress)(&format!(
            "faults: first touch and unmap of {} ({} passes)",
            active
                .iter()
                .map(|(p, ..)| p.backing.name())
                .collect::<Vec<_>>()
                .join(", "),
            self.o.reps + 1
        ));
        for pass in 0..=self.o.reps {
            let n = active.len();
            for k in 0..n {
                let i = (k + pass) % n;
                let (p, cold, warm, unmaps) = &mut active[i];
                if p.bytes == 0 {
                    continue;
                }
                match self.touch(p) {
                    Ok((t, u)) if pass == 0 => *cold = Some(t + u),
                    Ok((t, u)) => {
                        warm.push(t + u);
                        unmaps.push(u);
                    }
                    Err(e) => {
                        failed.push((p.backing, format!("{e:#}")));
                        p.bytes = 0;
                    }
                }
            }
        }
        drop(pools);
        for (p, cold, warm, unmaps) in active {
            if p.bytes == 0 {
                continue;
            }
            let name = p.backing.name();
            let faults = p.bytes / p.backing.fault_bytes();
            let m = match measurement(
                format!("touch {} {name}", bytes_text(p.bytes)),
                "ns/fault",
                warm,
            ) {
                Ok(m) => m,
                Err(e) => {
                    failed.push((p.backing, format!("{e:#}")));
                    continue;
                }
            };
            let s = Repeated {
                median: m.median,
                min: m.min,
                max: m.max,
                reps: m.reps,
            };
            let how = match p.backing {
                BufferBacking::Base4k => "MADV_NOHUGEPAGE".to_string(),
                BufferBacking::Thp { kb: 2048 } => "MADV_HUGEPAGE".to_string(),
                BufferBacking::Thp { kb } => {
                    format!("MADV_HUGEPAGE, one {}-kB mapping per folio", kb)
                }
                _ => "from a reserved pool".to_string(),
            };
            let host = match cold {
                Some(c) if c > 1.5 * s.median => {
                    format!(
                        "; the cold first pass took {:.1}x as long (host memory reclaim)",
                        c / s.median
                    )
                }
                Some(_) => "; the cold first pass was no slower".into(),
                None => String::new(),
            };
            figures.push(Figure {
                kind: "fault".into(),
                what: name.clone(),
                pt_bytes: None,
                ns: Some(s),
                cold_ns: cold,
                source: format!(
                    "first touch and unmap of {} ({how}, {faults} fault{}), median of {} warm passes interleaved with the other backings; the unmap {:.3} µs of it{host}",
                    bytes_text(p.bytes),
                    if faults == 1 { "" } else { "s" },
                    s.reps,
                    hugetune_model::stats::median(&unmaps) / 1e3
                ),
            });
            fault_ns.push((name, s.median));
            self.raw.push(m);
        }
        for (b, why) in failed {
            figures.push(not_measured("fault", &b.name(), why));
        }
        for (name, why) in left {
            figures.push(not_measured("fault", &name, why));
        }
    }
}

/// Hugetlb pages a pair's chases need: (pool kB, pages).
fn pool_needs(pair: &Pair) -> Vec<(u64, u64)> {
    let mut needs: Vec<(u64, u64)> = Vec::new();
    for c in [&pair.a, &pair.b] {
        if let Some((kb, n)) = c.pool_need() {
            match needs.iter_mut().find(|(k, _)| *k == kb) {
                Some(e) => e.1 += n,
                None => needs.push((kb, n)),
            }
        }
    }
    needs
}

fn not_measured(kind: &str, what: &str, why: String) -> Figure {
    Figure {
        kind: kind.into(),
        what: what.into(),
        pt_bytes: None,
        ns: None,
        cold_ns: None,
        source: format!("not measured: {why}"),
    }
}

fn extrapolated(kind: &str, leaf: usize, source: String) -> Figure {
    Figure {
        kind: kind.into(),
        what: LEAF[leaf].into(),
        pt_bytes: None,
        ns: None,
        cold_ns: None,
        source,
    }
}

fn pct(x: f64) -> String {
    format!("{:.0}%", x * 100.0)
}

/// Measures this machine. Holds the kernel-state lock throughout (so no one turns
/// THP off or takes the pools meanwhile; pools are grown and restored under it);
/// without root, the hugetlb figures are left out and the lock is taken if it can be.
pub fn calibrate(
    o: &Options,
    machine: String,
    progress: &mut dyn FnMut(&str),
) -> Result<Calibration> {
    if o.reps < 5 {
        bail!("calibrate needs at least 5 repetitions");
    }
    let lock = match kernel_state::lock_kernel_state() {
        Ok(l) => Some(l),
        Err(e) if !o.root => {
            progress(&format!("not holding the kernel-state lock ({e:#})"));
            None
        }
        Err(e) => return Err(e),
    };
    // Free page reporting held off, as `rank`, `size` and the bench suites hold it
    // for their runs: otherwise memory freed between passes goes back to the host
    // and a warm pass meets it cold (the slowest warm THP pass here: 1.3-3.1 ms
    // without the hold, 0.25-0.29 ms with it; docs/calibrate.md).
    let _reporting = match &lock {
        Some(l) if o.root => {
            let r = kernel_state::hold_page_reporting(l)?;
            if let Some(r) = &r {
                progress(&format!(
                    "free page reporting held off while measuring ({} was {}; restored afterwards)",
                    r.path.display(),
                    r.previous
                ));
            }
            r
        }
        _ => None,
    };
    let ticks_before = cpu_ticks();
    let pin = pin_to_this_cpu();
    let t0 = Instant::now();
    let mut timed = |msg: &str| progress(&format!("[{:5.1} s] {msg}", t0.elapsed().as_secs_f64()));
    let mut s = Session {
        o,
        lock,
        raw: Vec::new(),
        progress: &mut timed,
        seed: 0x2545_F491_4F6C_DD1D,
    };
    let mut figures = Vec::new();
    let mut fault_ns = Vec::new();
    s.faults(&mut figures, &mut fault_ns);

    // L2 hits.
    let mut l2: [Option<Repeated>; 3] = [None; 3];
    for leaf in 0..3 {
        let pair = match plan_l2_hit(leaf, o) {
            Ok(p) => p,
            Err(why) => {
                figures.push(extrapolated("l2-hit", leaf, why));
                continue;
            }
        };
        (s.progress)(&format!(
            "L2 hits, {}: {} vs {} pages",
            LEAF_TEXT[leaf], pair.a.pages, pair.b.pages
        ));
        let fa = fractions(leaf, pair.a.pages, &o.tlb);
        let fb = fractions(leaf, pair.b.pages, &o.tlb);
        let r = s
            .run_pair(&pair, o.l2_steps)
            .and_then(|r| per_l2_hit(&r.diffs, fa, fb));
        match r {
            Ok(v) if v.median > 0.0 => {
                l2[leaf] = Some(v);
                figures.push(Figure {
                    kind: "l2-hit".into(),
                    what: LEAF[leaf].into(),
                    pt_bytes: None,
                    ns: Some(v),
                    cold_ns: None,
                    source: format!(
                        "chase, one line per {} page, {} pages ({} of the steps miss the {}-entry L1 DTLB) vs {}; difference / that share, median of {}",
                        LEAF_TEXT[leaf],
                        pair.a.pages,
                        pct(fa.l2_hit),
                        o.tlb.l1[leaf],
                        pair.b.pages,
                        v.reps
                    ),
                });
            }
            Ok(v) => figures.push(extrapolated(
                "l2-hit",
                leaf,
                format!("measured {:.2} ns, not a cost (noise)", v.median),
            )),
            Err(e) => figures.push(extrapolated("l2-hit", leaf, format!("{e:#}"))),
        }
    }
    // Extrapolate the L2-hit costs not measured from the nearest measured size.
    let mut l2_hit_ns = [0.0; 3];
    for leaf in 0..3 {
        let from = (0..3)
            .filter(|&k| l2[k].is_some())
            .min_by_key(|&k| k.abs_diff(leaf));
        let Some(from) = from else {
            bail!("no L2-hit cost could be measured; see the messages above");
        };
        l2_hit_ns[leaf] = l2[from].map_or(0.0, |v| v.median);
        if from != leaf {
            if let Some(f) = figures
                .iter_mut()
                .find(|f| f.kind == "l2-hit" && f.what == LEAF[leaf])
            {
                f.source = format!(
                    "extrapolated: the {} figure (an L2 DTLB hit costs the same for any page size); not measured: {}",
                    LEAF_TEXT[from], f.source
                );
            }
        }
    }

    // Walks.
    let nested = o
        .hypervisor
        .as_ref()
        .map_or(String::new(), |h| format!(" (under {h}: nested 2-D walks)"));
    let mut walk_curve: [Vec<(f64, f64)>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let mut walk_lines = Vec::new();
    // Each leaf size's footprints, or why it cannot be measured (its curve is
    // then the next smaller size's).
    let mut planned: Vec<PlannedWalks> = Vec::new();
    for leaf in 0..3 {
        let p = plan_walks(leaf, o);
        if let (0, Err(why)) = (leaf, &p) {
            bail!("the 4 KB walk cost cannot be measured: {why}");
        }
        planned.push(p);
    }
    // Round after round over every footprint of every size, and the walk
    // overlap, until the spread has passed (one round without it); each
    // configuration's repetitions are pooled.
    let started = Instant::now();
    let mut pooled: [Vec<Result<PairRun>>; 3] = Default::default();
    let overlap_pair = plan_overlap(o);
    let mut overlap_t: std::result::Result<[Vec<f64>; 6], String> = Ok(Default::default());
    let mut overlap_rounds = 0;
    let mut rounds = 0;
    loop {
        rounds += 1;
        let mut overlap_done = false;
        for (leaf, plan) in planned.iter_mut().enumerate() {
            let Ok((pairs, notes)) = plan else {
                continue;
            };
            for (i, pair) in pairs.iter().enumerate() {
                if pooled[leaf].get(i).is_some_and(|r| r.is_err()) {
                    continue;
                }
                (s.progress)(&format!(
                    "walks, {}: {} vs {}{}",
                    LEAF_TEXT[leaf],
                    pair.a.label(),
                    pair.b.label(),
                    if o.spread_s > 0.0 {
                        format!(
                            " (round {rounds}, {:.0} of {:.0} s)",
                            started.elapsed().as_secs_f64(),
                            o.spread_s
                        )
                    } else {
                        String::new()
                    }
                ));
                let r = s.run_pair(pair, o.steps);
                match (pooled[leaf].get_mut(i), r) {
                    (None, r) => pooled[leaf].push(r),
                    (Some(Ok(p)), Ok(r)) if p.pair == r.pair => p.diffs.extend(r.diffs),
                    // (Another comparison than the first round's, a fallback
                    // taken or not: not pooled with it.)
                    (Some(Ok(_)), Ok(r)) => notes.push(format!(
                        "{} round {rounds}: compared {} with {}, not the first round's pair; not pooled",
                        bytes_text(pair.a.bytes()),
                        r.pair.a.label(),
                        r.pair.b.label()
                    )),
                    // A later round's failure keeps the rounds before it.
                    (Some(Ok(_)), Err(e)) => notes.push(format!(
                        "{} round {rounds}: {e:#}",
                        bytes_text(pair.a.bytes())
                    )),
                    (Some(Err(_)), _) => {}
                }
                // The overlap right after the 4 KB pair of its own footprint, on
                // memory in the same state as that pair's (measured after the
                // largest footprints, its chase walked at twice the pair's cost).
                if let Ok(op) = &overlap_pair {
                    if leaf == 0 && pair.a.bytes() == op.a.bytes() && !overlap_done {
                        s.overlap_step(op, &mut overlap_t, &mut overlap_rounds, rounds);
                        overlap_done = true;
                    }
                }
            }
        }
        if !overlap_done {
            if let Ok(pair) = &overlap_pair {
                s.overlap_step(pair, &mut overlap_t, &mut overlap_rounds, rounds);
            }
        }
        // A spread means two rounds at least, however long the first took.
        if o.spread_s == 0.0 || (rounds >= 2 && started.elapsed().as_secs_f64() >= o.spread_s) {
            break;
        }
    }
    let spread_min = started.elapsed().as_secs_f64() / 60.0;
    let spread_text = if rounds > 1 {
        format!(", {rounds} rounds over {spread_min:.1} min")
    } else {
        String::new()
    };
    for (leaf, (plan, pooled)) in planned.into_iter().zip(pooled).enumerate() {
        let (pairs, mut notes) = match plan {
            Ok(p) => p,
            Err(why) => {
                walk_curve[leaf] = walk_curve[leaf - 1].clone();
                let f = extrapolated(
                    "walk",
                    leaf,
                    format!(
                        "extrapolated: the {} curve at the same page-table bytes (a walk costs what fetching its leaf entry does); not measured: {why}",
                        LEAF_TEXT[leaf - 1]
                    ),
                );
                walk_lines.push(format!("walk {}: {}", LEAF[leaf], f.source));
                figures.push(f);
                continue;
            }
        };
        let mut points = Vec::new();
        let mut measured = Vec::new();
        for (pair, run) in pairs.iter().zip(pooled) {
            let r = run.and_then(|r| {
                let PairRun { pair, diffs } = r;
                let fa = fractions(pair.a.leaf, pair.a.pages, &o.tlb);
                let fb = fractions(pair.b.leaf, pair.b.pages, &o.tlb);
                let v = per_walk(
                    &diffs,
                    fa,
                    fb,
                    [l2_hit_ns[pair.a.leaf], l2_hit_ns[pair.b.leaf]],
                )?;
                Ok((pair, fa, v))
            });
            match r {
                Ok((pair, fa, v)) => {
                    let x = (8 * pair.a.pages) as f64;
                    points.push((x, v));
                    measured.push(format!(
                        "{} vs {} ({} walk) {:.1} ns [{:.1}–{:.1}]",
                        pair.a.label(),
                        pair.b.backing.name(),
                        pct(fa.walk),
                        v.median,
                        v.min,
                        v.max
                    ));
                    figures.push(Figure {
                        kind: "walk".into(),
                        what: LEAF[leaf].into(),
                        pt_bytes: Some(x),
                        ns: Some(v),
                        cold_ns: None,
                        source: format!(
                            "{} vs {}: difference, less the L2-hit difference, / {} of the steps missing the {}-entry L2 DTLB; median of {}{spread_text}{nested}",
                            pair.a.label(),
                            pair.b.label(),
                            pct(fa.walk),
                            o.tlb.l2[leaf],
                            v.reps
                        ),
                    });
                }
                Err(e) => notes.push(format!("{}: {e:#}", bytes_text(pair.a.bytes()))),
            }
        }
        let (c, rejected) = curve(&points);
        notes.extend(rejected);
        if c.is_empty() {
            if leaf == 0 {
                bail!(
                    "no usable 4 KB walk point ({}); rerun on an idle machine",
                    notes.join("; ")
                );
            }
            walk_curve[leaf] = walk_curve[leaf - 1].clone();
            let f = extrapolated(
                "walk",
                leaf,
                format!(
                    "extrapolated: the {} curve at the same page-table bytes; no usable point: {}",
                    LEAF_TEXT[leaf - 1],
                    notes.join("; ")
                ),
            );
            walk_lines.push(format!("walk {}: {}", LEAF[leaf], f.source));
            figures.push(f);
            continue;
        }
        let mut line = format!(
            "walk {}: chase over 64-byte nodes; per walk = (difference per step − the L2-hit difference) / share of steps missing the {}-entry L2 DTLB, medians of {} per round{spread_text}{nested}: {}",
            LEAF[leaf],
            o.tlb.l2[leaf],
            o.reps,
            measured.join("; ")
        );
        if !notes.is_empty() {
            line += &format!("; left out: {}", notes.join("; "));
            figures.push(Figure {
                kind: "walk".into(),
                what: LEAF[leaf].into(),
                pt_bytes: None,
                ns: None,
                cold_ns: None,
                source: format!("left out: {}", notes.join("; ")),
            });
        }
        walk_lines.push(line);
        walk_curve[leaf] = c;
    }

    // The walk overlap's ends, from every round's timings.
    let overlap = match (overlap_pair, overlap_t) {
        (Ok(pair), Ok(t)) => s
            .overlap(&pair, &t, l2_hit_ns)
            .map_err(|e| format!("{e:#}")),
        (Err(why), _) | (_, Err(why)) => Err(why),
    };
    let overlap_spread = if overlap_rounds > 1 {
        format!(" (pooled: {overlap_rounds} rounds over {spread_min:.1} min)")
    } else {
        String::new()
    };
    let overlap_line = match &overlap {
        Ok(e) => format!(
            "walk overlap: over {} of page table, the chase saves {:.1} ns per walk on 2 MB pages [{:.1}–{:.1}] and independent random loads {:.2} ns [{:.2}–{:.2}]: {:.1} walks hidden behind each other at {:.1} ns per walk; the access a walk precedes {:.1} ns (chase time per walk less its walk); medians of {}",
            bytes_text(e.pt_bytes as u64),
            e.dependent_walk.median,
            e.dependent_walk.min,
            e.dependent_walk.max,
            e.independent_walk.median,
            e.independent_walk.min,
            e.independent_walk.max,
            e.walk_concurrency,
            e.independent_ns_per_walk,
            e.memory_ns,
            e.dependent_walk.reps,
        ) + &match &e.rmw_walk {
            Some(w) => format!(
                "; the same loads writing each line back save {:.2} ns [{:.2}–{:.2}], a share of their time {:.0} % smaller (docs/model.md §4, \"Writes\")",
                w.median,
                w.min,
                w.max,
                100.0 * e.dirty_ratio / (1.0 + e.dirty_ratio)
            ),
            None => String::new(),
        } + &overlap_spread,
        Err(why) => format!("walk overlap: not measured (the defaults apply): {why}"),
    };
    drop(pin);

    // One line per figure: L2 hits, walk curves, faults.
    let line = |f: &Figure| format!("{} {}: {}", f.kind, f.what, f.source);
    let mut sources: Vec<String> = figures
        .iter()
        .filter(|f| f.kind == "l2-hit")
        .map(line)
        .collect();
    sources.extend(walk_lines);
    sources.push(overlap_line);
    sources.extend(figures.iter().filter(|f| f.kind == "fault").map(line));
    if let (Some(a), Some(b)) = (ticks_before, cpu_ticks()) {
        let share = others_share(a, b);
        if share > 0.1 {
            let msg = format!(
                "machine busy: other work took {:.0}% of the CPU time while calibrate ran; it shares \
                 the caches, the memory and (SMT) the TLBs, so walk figures come out high and widely \
                 spread: calibrate an idle machine",
                share * 100.0
            );
            (s.progress)(&msg);
            sources.push(msg);
        }
    }
    let cal = Calibration {
        l2_hit_ns,
        walk_curve,
        fault_ns,
        sources,
        machine,
        created: utc_text(std::time::SystemTime::now()),
        tlb: Some(o.tlb.clone()),
        quick: o.quick,
        figures,
        raw: s.raw,
        overlap: overlap.ok(),
        spread_s: o.spread_s,
        fresh_memory: o.fresh_memory,
    };
    cal.validate()
        .context("the measured figures are unusable")?;
    Ok(cal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_share_of_other_work() {
        // 2 cores, 10 s: 2000 ticks; 1200 busy, 1000 of them ours.
        assert!((others_share((0, 0, 0), (1200, 2000, 1000)) - 0.1).abs() < 1e-12);
        assert_eq!(others_share((5, 5, 5), (5, 5, 5)), 0.0);
        assert_eq!(others_share((0, 0, 0), (100, 2000, 300)), 0.0);
        let (busy, total, _) = cpu_ticks().unwrap();
        assert!(busy <= total);
        // Our own time shows up once we spend some.
        let t = std::time::Instant::now();
        let mut x = 0u64;
        while t.elapsed().as_millis() < 50 {
            x = std::hint::black_box(x.wrapping_add(1));
        }
        assert!(cpu_ticks().unwrap().2 > 0);
    }

    #[test]
    fn a_waited_for_childs_time_is_ours() {
        // The fresh-memory repetitions run in forked children: a child that
        // spins for 300 ms must show up in our own ticks, or calibrate calls
        // its own children "other work" (it did: "machine busy: 20 %"). The
        // child spins for 300 ms of its own CPU time, however busy the machine.
        let cpu_ms = || {
            let mut ts = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: writes one timespec we own.
            unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
            ts.tv_sec as u64 * 1000 + ts.tv_nsec as u64 / 1_000_000
        };
        let before = cpu_ticks().unwrap().2;
        in_child(|| {
            let start = cpu_ms();
            let mut x = 0u64;
            while cpu_ms() - start < 300 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            Ok(vec![x as f64])
        })
        .unwrap();
        let after = cpu_ticks().unwrap().2;
        // 300 ms is 30 ticks at USER_HZ 100; allow for the tick's granularity.
        assert!(after - before >= 20, "{before} -> {after}");
    }

    #[test]
    fn a_child_returns_its_figures_or_says_why_not() {
        assert_eq!(
            in_child(|| Ok(vec![1.5, -2.0, 0.0])).unwrap(),
            [1.5, -2.0, 0.0]
        );
        assert_eq!(in_child(|| Ok(Vec::new())).unwrap(), Vec::<f64>::new());
        let e = in_child(|| bail!("mapping 256 MiB: out of memory")).unwrap_err();
        assert_eq!(format!("{e:#}"), "mapping 256 MiB: out of memory");
        let e = in_child(|| panic!("boom")).unwrap_err();
        assert!(format!("{e:#}").contains("panicked"), "{e:#}");
        // A child that ends without a word (killed, or exiting on its own).
        // SAFETY: ends the forked child at once.
        let e = in_child(|| unsafe { libc::_exit(3) }).unwrap_err();
        assert!(format!("{e:#}").contains("wait status 0x300"), "{e:#}");
        // What the child maps stays in the child.
        let e = in_child(|| {
            let c = Chase {
                leaf: 0,
                backing: BufferBacking::Base4k,
                pages: 16,
                layout: ChaseLayout::Nodes,
            };
            let mut b = ChaseBuf::build(&c, 7)?;
            Ok(vec![b.run(100, 1000), b.independent(true, 100, 1000)])
        })
        .unwrap();
        assert!(e.len() == 2 && e.iter().all(|v| *v > 0.0), "{e:?}");
    }

    #[test]
    fn fresh_memory_serves_the_4k_node_pairs_it_asks_for() {
        let m = crate::machine::machine(None).unwrap();
        let mut o = Options::new(true, &m, 64 * GIB);
        let mut noop = |_: &str| {};
        let node = |leaf: usize, backing, pages| Chase {
            leaf,
            backing,
            pages,
            layout: ChaseLayout::Nodes,
        };
        let same = Pair {
            a: node(0, BufferBacking::Base4k, 65_536),
            b: node(1, BufferBacking::Thp { kb: 2048 }, 128),
            fallback: None,
        };
        let smaller = Pair {
            b: node(1, BufferBacking::Thp { kb: 2048 }, 64),
            ..same.clone()
        };
        let two_m = Pair {
            a: node(1, BufferBacking::Thp { kb: 2048 }, 4096),
            b: node(1, BufferBacking::Thp { kb: 2048 }, 4096),
            fallback: None,
        };
        let large = Pair {
            a: node(0, BufferBacking::Base4k, 524_288),
            b: node(1, BufferBacking::Thp { kb: 2048 }, 1024),
            fallback: None,
        };
        let line = Pair {
            a: Chase {
                layout: ChaseLayout::LinePerPage,
                ..same.a.clone()
            },
            ..same.clone()
        };
        for fresh in [true, false] {
            o.fresh_memory = fresh;
            let s = Session {
                o: &o,
                lock: None,
                raw: Vec::new(),
                progress: &mut noop,
                seed: 1,
            };
            assert_eq!(s.fresh(&same), fresh);
            assert!(!s.fresh(&smaller) && !s.fresh(&two_m) && !s.fresh(&line));
            assert!(!s.fresh(&large), "2 GiB: beyond FRESH_MAX_BYTES");
        }
    }

    /// Exercises the multi-size THP path, which runs only where such a size is
    /// enabled. By hand, holding the kernel-state lock and restoring the setting:
    /// `flock /run/lock/hugetune-kernel-state.lock sh -c 'f=/sys/kernel/mm/transparent_hugepage/hugepages-64kB/enabled;
    /// echo inherit > $f; cargo test -p hugetune-host --lib mthp -- --ignored; echo never > $f'`
    #[test]
    #[ignore]
    fn mthp_faults_get_their_folio_size() {
        let m = crate::machine::machine(None).unwrap();
        let o = Options::new(true, &m, GIB);
        let sizes: Vec<u64> = o
            .thp
            .enabled
            .iter()
            .copied()
            .filter(|&k| k < 2048)
            .collect();
        if sizes.is_empty() {
            eprintln!("SKIPPED: no multi-size THP size is enabled");
            return;
        }
        let mut quiet = |_: &str| {};
        let s = Session {
            o: &o,
            lock: None,
            raw: Vec::new(),
            progress: &mut quiet,
            seed: 1,
        };
        for kb in sizes {
            let p = FaultPlan {
                backing: BufferBacking::Thp { kb },
                bytes: 16 * MIB,
            };
            let (ns, unmap) = s.touch(&p).unwrap();
            eprintln!(
                "thp-{}: {ns:.0} ns per fault, {unmap:.0} ns to unmap",
                kb_text(kb)
            );
            assert!(ns > 0.0 && unmap > 0.0);
        }
    }
}
