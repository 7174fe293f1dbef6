//! Synthetic workloads: a kernel-build-like mix and a stress-highalloc-like
//! test (REF §2.8, §8.1), and the sampling runner shared with replay.

use crate::metrics::{Pass, Sample, Summary};
use crate::rng::Rng;
use crate::sim::{AllocMode, Handle, Req, Sim, SimConfig};
use crate::zone::ZoneSpec;
use crate::{Mt, PB_ORDER, PB_PAGES};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// A kernel build: `jobs` compiler processes at a time, each with anonymous
/// memory, page tables, a kernel stack and task slab, reading sources into
/// the page cache and creating dentries/inodes; slab pages outlive the
/// processes that caused them and a few are pinned for good. Means of
/// exponential distributions unless said otherwise.
#[derive(Clone, Debug, serde::Serialize)]
pub struct KbuildParams {
    /// Allocation + free events of the build phase.
    pub events: u64,
    /// Concurrent compiler processes (`make -jN`).
    pub jobs: u32,
    /// Anonymous pages per process (16 MB).
    pub anon_pages: f64,
    /// Source and header pages each process reads (2.4 MB): uniform over the
    /// tree; a page not in the page cache is allocated (movable, on the LRU).
    pub cache_pages: f64,
    /// Size of the source tree, as a share of memory (distinct file pages).
    pub tree: f64,
    /// Object files written per build, as a share of memory (page cache,
    /// freed by the `make clean` between builds).
    pub objects: f64,
    /// Successive builds.
    pub builds: u32,
    /// Unmovable slab allocations per process (orders 0/1/2/3 at 50/20/10/20 %).
    pub slab_allocs: f64,
    /// Reclaimable slab allocations per process (dentries, inodes; orders 0/1/3 at 40/20/40 %).
    pub reclaimable_allocs: f64,
    /// Reclaimable slab allocations (dentry, inode) per page-cache miss of
    /// the tree (orders 0/1/3 at 40/20/40 %): one per ~30 file pages. At most
    /// one per tree page is live: a file's dentry and inode exist once.
    pub file_slab: f64,
    /// Share of reclaimable slab pages that reclaim cannot free because
    /// live objects hold them (slab internal fragmentation): kept off the
    /// LRU. The process slab ones are freed after a slab lifetime; the tree's
    /// stay while the tree exists (bounded by its size).
    pub slab_held: f64,
    /// Unmovable slab lifetime, in process lifetimes.
    pub slab_life: f64,
    /// Share of unmovable slab allocations never freed (pinned).
    pub pinned: f64,
    /// Anonymous memory as order-9 THP attempts (THP `always`), falling back to 4 KB.
    pub thp: bool,
}

impl KbuildParams {
    pub fn new(events: u64) -> KbuildParams {
        KbuildParams {
            events,
            jobs: 8,
            anon_pages: 4096.0,
            cache_pages: 600.0,
            tree: 1.0,
            objects: 0.3,
            builds: 2,
            slab_allocs: 8.0,
            reclaimable_allocs: 10.0,
            file_slab: 0.03,
            slab_held: 0.3,
            slab_life: 3.0,
            pinned: 0.05,
            thp: false,
        }
    }

    /// Caps the per-process anonymous memory so that the processes together
    /// use at most a quarter of `pages` (small simulated memories).
    pub fn fit(mut self, pages: u64) -> KbuildParams {
        self.anon_pages = self
            .anon_pages
            .min(pages as f64 / (4.0 * self.jobs.max(1) as f64));
        self
    }

    /// Events of one process, on average (allocations and frees).
    fn job_events(&self) -> f64 {
        2.0 * (self.anon_pages + self.slab_allocs + self.anon_pages / 512.0 + 1.0)
            + self.cache_pages
            + self.reclaimable_allocs
    }
}

#[derive(Default)]
struct Job {
    anon_left: u64,
    cache_left: u64,
    obj_left: u64,
    slab_left: u64,
    recl_left: u64,
    anon_done: u64,
    owned: Vec<Handle>,
}

/// The build as a resumable event source.
pub struct Kbuild {
    pub p: KbuildParams,
    rng: Rng,
    jobs: Vec<Job>,
    /// The source tree's pages: cached or not.
    tree: Vec<Option<Handle>>,
    /// The dentry/inode slab page of a tree page, if any.
    tree_slab: Vec<Option<Handle>>,
    /// Object file pages of the current build.
    objects: Vec<Handle>,
    obj_per_job: f64,
    build: u32,
    timed: BinaryHeap<Reverse<(u64, u32, Handle)>>,
    seq: u32,
    pub events: u64,
    pub ooms: u64,
}

fn pick_order(rng: &mut Rng, table: &[(u8, f64)]) -> u8 {
    let mut x = rng.f64();
    for &(o, p) in table {
        if x < p {
            return o;
        }
        x -= p;
    }
    table[table.len() - 1].0
}

impl Kbuild {
    /// The build on a memory of `pages` pages.
    pub fn new(p: KbuildParams, seed: u64, pages: u64) -> Kbuild {
        let per_build = p.events as f64 / p.builds.max(1) as f64;
        let jobs_per_build = (per_build / p.job_events()).max(1.0);
        Kbuild {
            jobs: (0..p.jobs).map(|_| Job::default()).collect(),
            tree: vec![None; ((pages as f64 * p.tree) as usize).max(1)],
            tree_slab: vec![None; ((pages as f64 * p.tree) as usize).max(1)],
            objects: Vec::new(),
            obj_per_job: pages as f64 * p.objects / jobs_per_build,
            build: 0,
            p,
            rng: Rng::new(seed),
            timed: BinaryHeap::new(),
            seq: 0,
            events: 0,
            ooms: 0,
        }
    }

    fn alloc(&mut self, sim: &mut Sim, req: Req) -> Option<Handle> {
        self.events += 1;
        let h = sim.alloc(req);
        if h.is_none() {
            self.ooms += 1;
        }
        h
    }

    fn free(&mut self, sim: &mut Sim, h: Handle) {
        // Reclaimed pages are already gone; the process just drops them.
        if sim.free(h) {
            self.events += 1;
        }
    }

    fn start_job(&mut self, sim: &mut Sim, j: usize) {
        let p = &self.p;
        let job = Job {
            anon_left: self.rng.exp(p.anon_pages),
            cache_left: self.rng.exp(p.cache_pages),
            obj_left: self.rng.exp(self.obj_per_job.max(1.0)),
            slab_left: self.rng.exp(p.slab_allocs),
            recl_left: self.rng.exp(p.reclaimable_allocs),
            anon_done: 0,
            owned: Vec::new(),
        };
        self.jobs[j] = job;
        // fork: kernel stack (16 KB) and the first page-table pages.
        for (o, n) in [(2u8, 1), (0u8, 3)] {
            for _ in 0..n {
                if let Some(h) = self.alloc(sim, Req::new(o, Mt::Unmovable)) {
                    self.jobs[j].owned.push(h);
                }
            }
        }
    }

    fn end_job(&mut self, sim: &mut Sim, j: usize) {
        for h in std::mem::take(&mut self.jobs[j].owned) {
            self.free(sim, h);
        }
    }

    /// One step: `make clean` between builds, expired slab pages are freed,
    /// then one process acts.
    pub fn step(&mut self, sim: &mut Sim) {
        let builds = self.p.builds.max(1) as u64;
        if self.build + 1 < builds as u32
            && self.events >= (self.build as u64 + 1) * self.p.events / builds
        {
            self.build += 1;
            for h in std::mem::take(&mut self.objects) {
                self.free(sim, h);
            }
        }
        while let Some(&Reverse((t, _, h))) = self.timed.peek() {
            if t > self.events {
                break;
            }
            self.timed.pop();
            self.free(sim, h);
        }
        let j = self.rng.below(self.jobs.len() as u64) as usize;
        let (anon, cache, slab, recl) = {
            let job = &self.jobs[j];
            (
                job.anon_left,
                job.cache_left + job.obj_left,
                job.slab_left,
                job.recl_left,
            )
        };
        let left = anon + cache + slab + recl;
        if left == 0 {
            self.end_job(sim, j);
            self.start_job(sim, j);
            return;
        }
        let mut x = self.rng.below(left);
        if x < anon {
            self.jobs[j].anon_left -= 1;
            let thp = self.p.thp
                && self.jobs[j].anon_left >= PB_PAGES as u64
                && self.jobs[j].anon_done.is_multiple_of(PB_PAGES as u64);
            let h = if thp {
                match self.alloc(sim, Req::new(PB_ORDER, Mt::Movable).mode(AllocMode::Thp)) {
                    Some(h) => {
                        self.jobs[j].anon_left -= PB_PAGES as u64 - 1;
                        self.jobs[j].anon_done += PB_PAGES as u64 - 1;
                        Some(h)
                    }
                    None => self.alloc(sim, Req::new(0, Mt::Movable)),
                }
            } else {
                self.alloc(sim, Req::new(0, Mt::Movable))
            };
            if let Some(h) = h {
                self.jobs[j].owned.push(h);
            }
            self.jobs[j].anon_done += 1;
            // A page-table page per 2 MB of anonymous memory.
            if self.jobs[j].anon_done.is_multiple_of(PB_PAGES as u64) {
                if let Some(h) = self.alloc(sim, Req::new(0, Mt::Unmovable)) {
                    self.jobs[j].owned.push(h);
                }
            }
            return;
        }
        x -= anon;
        if x < cache {
            if self.jobs[j].obj_left > 0
                && (self.jobs[j].cache_left == 0 || self.rng.below(cache) < self.jobs[j].obj_left)
            {
                self.jobs[j].obj_left -= 1;
                if let Some(h) = self.alloc(sim, Req::new(0, Mt::Movable).lru()) {
                    self.objects.push(h);
                }
                return;
            }
            self.jobs[j].cache_left -= 1;
            let i = self.rng.below(self.tree.len() as u64) as usize;
            if !self.tree[i].is_some_and(|h| sim.is_live(h)) {
                self.tree[i] = self.alloc(sim, Req::new(0, Mt::Movable).lru());
                if !self.tree_slab[i].is_some_and(|h| sim.is_live(h))
                    && self.rng.chance(self.p.file_slab)
                {
                    self.tree_slab[i] = self.reclaimable_slab(sim, false);
                }
            }
            return;
        }
        x -= cache;
        if x < slab {
            self.jobs[j].slab_left -= 1;
            let o = pick_order(&mut self.rng, &[(0, 0.5), (1, 0.2), (2, 0.1), (3, 0.2)]);
            if let Some(h) = self.alloc(sim, Req::new(o, Mt::Unmovable)) {
                if !self.rng.chance(self.p.pinned) {
                    self.expire(h);
                }
            }
            return;
        }
        self.jobs[j].recl_left -= 1;
        self.reclaimable_slab(sim, true);
    }

    /// Frees `h` after a slab lifetime.
    fn expire(&mut self, h: Handle) {
        let life = (self.p.slab_life * self.p.job_events() * self.p.jobs as f64).max(1.0);
        let t = self.events + self.rng.exp(life);
        self.seq = self.seq.wrapping_add(1);
        self.timed.push(Reverse((t, self.seq, h)));
    }

    /// A dentry/inode slab page: on the LRU, or held by live objects (until
    /// a slab lifetime has passed when `expires`, else for good).
    fn reclaimable_slab(&mut self, sim: &mut Sim, expires: bool) -> Option<Handle> {
        let o = pick_order(&mut self.rng, &[(0, 0.4), (1, 0.2), (3, 0.4)]);
        let r = Req::new(o, Mt::Reclaimable);
        if self.rng.chance(self.p.slab_held) {
            let h = self.alloc(sim, r)?;
            if expires {
                self.expire(h);
            }
            Some(h)
        } else {
            self.alloc(sim, r.lru())
        }
    }

    /// The build ends: every process exits (slab and page cache stay).
    pub fn finish(&mut self, sim: &mut Sim) {
        for j in 0..self.jobs.len() {
            self.end_job(sim, j);
            self.jobs[j] = Job::default();
        }
    }
}

/// Samples the metrics every `every` events.
pub struct Recorder {
    pub every: u64,
    next: u64,
    pub series: Vec<Sample>,
}

impl Recorder {
    pub fn new(every: u64) -> Recorder {
        Recorder {
            every: every.max(1),
            next: 0,
            series: Vec::new(),
        }
    }
    pub fn tick(&mut self, sim: &Sim, events: u64, phase: &str) {
        if events >= self.next {
            self.series.push(Sample::take(sim, events, phase));
            self.next = events + self.every;
        }
    }
    pub fn force(&mut self, sim: &Sim, events: u64, phase: &str) {
        self.series.push(Sample::take(sim, events, phase));
        self.next = events + self.every;
    }
}

/// Options shared by every workload run.
#[derive(Clone, Debug)]
pub struct RunOpts {
    pub sim: SimConfig,
    pub zones: Vec<ZoneSpec>,
    /// Samples per run (about).
    pub samples: u64,
    /// Run a full compaction at the end and measure again.
    pub final_compaction: bool,
}

fn finish(
    sim: &mut Sim,
    workload: &str,
    events: u64,
    rec: Recorder,
    opts: &RunOpts,
    passes: Vec<Pass>,
) -> Summary {
    let end = Sample::take(sim, events, "end");
    let (after_compaction, final_compaction) = if opts.final_compaction {
        let (s0, m0) = (
            sim.stats.migrate_scanned + sim.stats.free_scanned,
            sim.stats.migrated,
        );
        sim.compact_all();
        let s = Sample::take(sim, events, "compacted");
        (
            Some(s),
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
        workload: workload.to_string(),
        seed: opts.sim.seed,
        pages: sim.managed_pages(),
        events,
        end,
        after_compaction,
        final_compaction,
        passes,
        stats: sim.stats.clone(),
        series: rec.series,
        ignored_frees: 0,
        unmatched_frees: 0,
    }
}

/// The kernel-build workload: `p.events` events, then every process exits.
pub fn run_kbuild(p: &KbuildParams, opts: &RunOpts) -> Summary {
    let mut sim = Sim::new(&opts.zones, &opts.sim);
    let mut kb = Kbuild::new(p.clone(), opts.sim.seed, sim.managed_pages());
    let mut rec = Recorder::new(p.events / opts.samples.max(1));
    while kb.events < p.events {
        kb.step(&mut sim);
        rec.tick(&sim, kb.events, "build");
    }
    kb.finish(&mut sim);
    rec.force(&sim, kb.events, "build");
    let ev = kb.events;
    finish(&mut sim, "kbuild", ev, rec, opts, Vec::new())
}

/// stress-highalloc: fragment with the build, then three passes that each
/// try to allocate `percent` of memory as 2 MB blocks, holding what they
/// get until the pass ends: under load (`gap` build events between
/// attempts), after load (every process has exited), at rest (page cache
/// and reclaimable slab dropped).
#[derive(Clone, Debug, serde::Serialize)]
pub struct HighallocParams {
    pub build: KbuildParams,
    pub percent: f64,
    pub gap: u64,
    #[serde(skip)]
    pub mode: AllocMode,
}

impl HighallocParams {
    pub fn new(events: u64) -> HighallocParams {
        HighallocParams {
            // MemTotal/400 MB kernel trees are built at once: their sources
            // exceed memory, so the page cache is under constant reclaim.
            build: KbuildParams {
                tree: 2.0,
                builds: 1,
                ..KbuildParams::new(events)
            },
            percent: 95.0,
            gap: 500,
            mode: AllocMode::Normal,
        }
    }
}

pub fn run_highalloc(p: &HighallocParams, opts: &RunOpts) -> Summary {
    let mut sim = Sim::new(&opts.zones, &opts.sim);
    let mut kb = Kbuild::new(p.build.clone(), opts.sim.seed, sim.managed_pages());
    let n = ((sim.managed_pages() as f64 * p.percent / 100.0) / PB_PAGES as f64) as u64;
    let total = p.build.events + n * p.gap;
    let mut rec = Recorder::new(total / opts.samples.max(1));
    while kb.events < p.build.events {
        kb.step(&mut sim);
        rec.tick(&sim, kb.events, "build");
    }
    let mut passes = Vec::new();
    for (i, name) in ["under load", "after load", "at rest"]
        .into_iter()
        .enumerate()
    {
        if i == 1 {
            kb.finish(&mut sim);
        }
        if i == 2 {
            sim.drop_caches();
        }
        rec.force(&sim, kb.events, name);
        let (s0, m0) = (
            sim.stats.migrate_scanned + sim.stats.free_scanned,
            sim.stats.migrated,
        );
        let mut held = Vec::new();
        for _ in 0..n {
            if i == 0 {
                for _ in 0..p.gap {
                    kb.step(&mut sim);
                }
            }
            kb.events += 1;
            if let Some(h) = sim.alloc(Req::new(PB_ORDER, Mt::Movable).mode(p.mode)) {
                held.push(h);
            }
            rec.tick(&sim, kb.events, name);
        }
        passes.push(Pass {
            name: name.to_string(),
            attempts: n,
            success: held.len() as u64,
            scanned: sim.stats.migrate_scanned + sim.stats.free_scanned - s0,
            migrated: sim.stats.migrated - m0,
        });
        rec.force(&sim, kb.events, name);
        for h in held {
            kb.events += 1;
            sim.free(h);
        }
    }
    let ev = kb.events;
    finish(&mut sim, "highalloc", ev, rec, opts, passes)
}
