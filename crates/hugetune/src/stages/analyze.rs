//! Stage 2, analyze: a profile bundle through the model (every mapping of
//! categories to page sizes predicted), stored as directives; calibration turned
//! into the cost model; what validated runs teach the store.
//!
//! Complete streams are analysed exactly, or sampled by the analysis itself
//! (`--rate`); streams the QEMU plugin sampled (pages and 2 MB regions,
//! docs/model.md §3.1) are analysed from the sample, every count scaled and every
//! prediction with its error bar. Two passes over the stream as recorded
//! (categories and the regions referenced, then the model for every mapping at
//! once): never a pass per mapping.

use super::{analysis_options, note, program_of, strings, Validation};
use anyhow::{bail, Context, Result};
use hugetune_capture::ab::Verdict;
use hugetune_capture::inputs::inputs_from_log;
use hugetune_format::alloclog::AllocLog;
use hugetune_format::profile::{self, ProfileMeta};
use hugetune_format::refstream::{Event, RefReader, SamplingKind};
use hugetune_host::calibrate::Calibration;
use hugetune_host::machine::Machine;
use hugetune_model::analysis::AnalysisResult;
use hugetune_model::categorize::Categorizer;
use hugetune_model::category::Category;
use hugetune_model::cost::CostModel;
use hugetune_model::mrc::PageSizeMrcs;
use hugetune_model::page::Backing;
use hugetune_model::plan::{self, Availability, PlanDecision, Policy, ProgramTraits};
use hugetune_model::rank::{self, Prediction, PredictionError, PredictionInterval, Significance};
use hugetune_model::sampled::{realized_ratio, Sampling, PAGE_SALT, PAGE_SHIFT, REGION_SHIFT};
use hugetune_model::stream::AnalysisOptions;
use hugetune_model::stream::{
    analyze_stream_sampled, present_categories, StreamItem, StreamSampling, StreamSpec,
    StreamSummary,
};
use hugetune_model::tlb::TlbGeometry;
use hugetune_store::db::{Db, NewDirective, NewProfile, PlanSource};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::ffi::OsString;
use std::path::Path;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Analysis {
    pub meta: ProfileMeta,
    pub stream: StreamSummary,
    pub result: AnalysisResult,
    pub predictions: Vec<Prediction>,
    pub significance: Significance,
    pub cost: CostModel,
    pub threshold: u64,
    /// Top allocation sites by requested bytes: (module, offset, category, bytes, count).
    pub sites: Vec<SiteSummary>,
    /// Whether the profiled program forks (it keeps the planner off private hugetlb).
    pub program: ProgramTraits,
    /// Miss-ratio curves of the whole stream per page size: (size, [(entries, ratio)]).
    #[serde(default)]
    pub mrc: Vec<(String, Vec<(u64, f64)>)>,
    /// Sampled streams: the error bar of every prediction (docs/model.md §3.1);
    /// empty when the counts are exact.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub errors: Vec<PredictionError>,
    /// Every prediction's interval from the calibration's spread and the
    /// sampling (docs/model.md §4.1); empty with the default costs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub intervals: Vec<PredictionInterval>,
    /// DAMON bundles: the frequency estimate the predictions come from (not a
    /// TLB model; its walks and faults are lower bounds; damon_plan.rs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frequency: Option<hugetune_model::frequency::FrequencyResult>,
    /// What the profile's own allocation log shows for a shared pool of
    /// heap-large blocks at `threshold` (plans made later from the stored
    /// profile weigh it, `plan::choose_pool_stored`); None without blocks of a
    /// 2 MB page or more.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pool: Option<hugetune_model::pool::PoolProfile>,
}

/// How `analyze` treats the stream's sampling.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SampleOptions {
    /// Exact counts or nothing: a complete stream, analysed whole.
    pub exact: bool,
    /// Sample at this rate: a complete stream (the analysis samples it as the
    /// plugin would), or a fixed-rate one further down.
    pub rate: Option<f64>,
    /// The hash seed of that sampling (a complete stream's).
    pub seed: u64,
    /// A sampled stream: analyse at most about this many of its references, at
    /// the highest threshold that keeps no more (`optimize`'s budget).
    pub max_refs: Option<u64>,
    /// The native run time the predictions are taken over, instead of the
    /// profile's own native run (`analyze --native-time`: one timed on a quiet
    /// machine; the walk overlap, docs/model.md §4, is estimated from it too).
    pub native_s: Option<f64>,
}

/// Log-linear buckets of a sample key (the smallest of a reference's page and
/// region hashes): 16 per power of two, exact below 16.
fn key_bucket(k: u64) -> usize {
    if k < 16 {
        return k as usize;
    }
    let e = 63 - k.leading_zeros() as usize;
    16 + (e - 4) * 16 + ((k >> (e - 4)) & 15) as usize
}

/// The smallest key of bucket `b` (`key_bucket`'s inverse at its lower edge).
fn bucket_floor(b: usize) -> u64 {
    if b < 16 {
        return b as u64;
    }
    let e = (b - 16) / 16 + 4;
    (16 + ((b - 16) % 16) as u64) << (e - 4)
}

/// The highest threshold (≤ `t`) under which at most `budget` references of
/// the key histogram `hist` are kept: the floor of the first bucket where the
/// count passes it.
fn budget_threshold(hist: &[u64], t: u64, budget: u64) -> u64 {
    let mut kept = 0u64;
    for (b, &n) in hist.iter().enumerate() {
        if kept + n > budget {
            return bucket_floor(b).clamp(1, t);
        }
        kept += n;
    }
    t
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SiteSummary {
    pub module: String,
    pub offset: String,
    pub category: Category,
    pub bytes: u64,
    pub allocations: u64,
}

/// Every mapping's prediction, sampling error and interval, per-site mappings
/// named by their modules (for labels and `site` directives); the errors and
/// intervals were computed under the model's labels, so they are relabelled
/// alike.
pub(super) fn named_predictions(
    result: &AnalysisResult,
    cost: &CostModel,
    native_s: f64,
    modules: &[String],
) -> (
    Vec<Prediction>,
    Vec<PredictionError>,
    Vec<PredictionInterval>,
) {
    let mut predictions = rank::predictions(result, cost, native_s);
    let mut errors = rank::sampling_errors(result, cost, native_s);
    let mut intervals = rank::prediction_intervals(result, cost, native_s, &errors);
    for p in predictions.iter_mut().filter(|p| !p.sites.is_empty()) {
        for s in &mut p.sites {
            s.module = modules
                .get(s.site.module as usize)
                .cloned()
                .unwrap_or_default();
        }
        p.label = rank::site_label(&p.sites);
    }
    let named = |label: &mut String| {
        if let Some(p) = predictions
            .iter()
            .find(|p| !p.sites.is_empty() && *label == unnamed_site_label(p))
        {
            *label = p.label.clone();
        }
    };
    errors.iter_mut().for_each(|e| named(&mut e.label));
    intervals.iter_mut().for_each(|i| named(&mut i.label));
    (predictions, errors, intervals)
}

pub(super) fn sites(cat: &Categorizer, modules: &[String]) -> Vec<SiteSummary> {
    let mut acc: Vec<SiteSummary> = Vec::new();
    for o in cat.objects() {
        let Some(s) = o.site else { continue };
        if o.via.is_none() {
            continue;
        }
        let module = modules.get(s.module as usize).cloned().unwrap_or_default();
        let offset = format!("{:#x}", s.offset);
        match acc
            .iter_mut()
            .find(|x| x.module == module && x.offset == offset && x.category == o.category)
        {
            Some(x) => {
                x.bytes += o.len;
                x.allocations += 1;
            }
            None => acc.push(SiteSummary {
                module,
                offset,
                category: o.category,
                bytes: o.len,
                allocations: 1,
            }),
        }
    }
    acc.sort_by_key(|s| std::cmp::Reverse(s.bytes));
    acc.truncate(10);
    acc
}

/// What the program's own `MADV_HUGEPAGE` means for the predictions
/// (`ObjectInfo::self_thp`), when it advised any object.
fn self_advice_note(cat: &Categorizer) -> Option<String> {
    let advised: Vec<_> = cat.objects().iter().filter(|o| o.self_thp).collect();
    let largest = advised.iter().map(|o| o.len).max()?;
    let bytes: u64 = advised.iter().map(|o| o.len).sum();
    let thp = hugetune_host::machine::thp_mode(Path::new(hugetune_host::machine::THP_SYSFS));
    let effect = if thp == Some(hugetune_model::plan::ThpMode::Never) {
        "THP is `never` on this machine, so the advice does nothing here; the predictions assume a \
         machine where it takes effect (`madvise` or `always`)"
    } else {
        "they are on 2 MB pages without hugetune, and every prediction counts them so (the \
         baseline is not all 4 KB; planning their category gains only what hugetlb or a \
         different size adds)"
    };
    Some(format!(
        "the program advises MADV_HUGEPAGE itself on {} object(s), {} in all (largest {}): {effect}",
        advised.len(),
        hugetune_render::bytes(bytes),
        hugetune_render::bytes(largest)
    ))
}

/// Which mTHP sizes were evaluated and why, or why none was, when the kernel
/// has some (issue 23: not silently). `evaluated`: the folio shifts analysed.
fn mthp_note(evaluated: &[u8]) -> Option<String> {
    let root = Path::new(hugetune_host::machine::THP_SYSFS);
    let listed: Vec<(u64, String)> = hugetune_host::machine::mthp_sizes(root)
        .into_iter()
        .filter(|(kb, _)| (16..2048).contains(kb) && kb.is_power_of_two())
        .collect();
    if listed.is_empty() {
        return None;
    }
    let sizes: Vec<String> = listed
        .iter()
        .map(|(kb, v)| format!("{kb} kB {v}"))
        .collect();
    if evaluated.is_empty() {
        if !hugetune_host::machine::thp_settable(root).is_empty() {
            return Some(format!(
                "mTHP sizes not evaluated: no size's control lets MADV_HUGEPAGE use it ({}); \
                 `hugetune optimize --mthp 64k,1m` (or `rank --mthp`) evaluates and plans them, \
                 setting the controls system-wide for its runs only (PMD THP off while they \
                 last) and restoring them",
                sizes.join(", ")
            ));
        }
        return Some(format!(
            "mTHP sizes not evaluated: no size's control lets MADV_HUGEPAGE use it ({}) and \
             hugetune cannot set one for a run (that needs root); `echo madvise > \
             {}/hugepages-64kB/enabled` (as root) lets hugetune predict and plan that size",
            sizes.join(", "),
            root.display()
        ));
    }
    let usable = hugetune_host::machine::mthp_usable(root);
    let names: Vec<String> = evaluated
        .iter()
        .map(|&s| {
            let n = hugetune_model::page::size_name(1 << s);
            if usable.contains(&s) {
                n
            } else {
                format!("{n} (set to madvise for a plan's runs only)")
            }
        })
        .collect();
    Some(format!(
        "mTHP sizes evaluated: {} of those the kernel offers ({}): the sizes the TLB coalesces, \
         64 kB and the largest below 2 MB",
        names.join(", "),
        sizes.join(", ")
    ))
}

/// Runs the model over a bundle, with the mappings this machine offers.
pub fn analyze(path: &Path, geometry: &TlbGeometry, cost: &CostModel) -> Result<Analysis> {
    analyze_with(path, geometry, cost, &analysis_options(false, geometry))
}

/// `analyze` with explicit mapping options (sizes evaluated, simulation).
pub fn analyze_with(
    path: &Path,
    geometry: &TlbGeometry,
    cost: &CostModel,
    opts: &AnalysisOptions,
) -> Result<Analysis> {
    analyze_sampled(path, geometry, cost, opts, &SampleOptions::default())
}

/// The sampling a stream with header `h` was recorded with, as the analysis
/// reads it (`None`: complete), after `so`; an error for what cannot be analysed.
fn stream_sampling(
    path: &Path,
    h: &hugetune_format::refstream::StreamHeader,
    so: &SampleOptions,
) -> Result<Option<StreamSampling>> {
    let rate_ok = |r: f64| {
        if !(r > 0.0 && r <= 1.0) {
            bail!("--rate {r} is not in (0, 1]");
        }
        Ok(())
    };
    match h.sampling {
        // Analysed by time_sampled.rs before this is asked.
        SamplingKind::Time => bail!(
            "bundle {}: its references are time-sampled (source {})",
            path.display(),
            h.source
        ),
        SamplingKind::Complete => match so.rate {
            Some(r) if so.exact => bail!("--exact and --rate {r} exclude each other"),
            Some(r) => {
                rate_ok(r)?;
                Ok((r < 1.0).then(|| StreamSampling {
                    regions: Sampling::with_rate(so.seed, r),
                    kind: "analysis",
                    realized: 1.0,
                }))
            }
            None => Ok(None),
        },
        SamplingKind::SpatialRate | SamplingKind::SpatialSize => {
            if so.exact {
                bail!(
                    "bundle {}: its references are sampled ({:?}); exact counts need a complete stream — record again without --rate/--max-pages",
                    path.display(),
                    h.sampling
                );
            }
            let (Some(seed), Some(m), Some(t)) = (h.seed, h.modulus, h.threshold) else {
                bail!(
                    "bundle {}: the stream's sampling parameters are missing",
                    path.display()
                );
            };
            if h.page_shift != Some(PAGE_SHIFT)
                || h.region_shift != Some(REGION_SHIFT)
                || h.page_seed != Some(seed ^ PAGE_SALT)
            {
                bail!(
                    "bundle {}: its references are sampled on {} only (recorded by an older hugetune's plugin); the model needs 4 KB pages and 2 MB regions sampled together (docs/model.md §3.1) — record it again",
                    path.display(),
                    h.page_shift.map_or("unknown units".into(), |s| format!("{} KB pages", (1u64 << s) >> 10))
                );
            }
            let Some(mut regions) = Sampling::new(seed, m, t) else {
                bail!("bundle {}: threshold {t} of modulus {m}", path.display());
            };
            if let Some(r) = so.rate {
                rate_ok(r)?;
                if h.sampling == SamplingKind::SpatialSize {
                    bail!("--rate: a fixed-size sample (--max-pages) cannot be sampled further");
                }
                let t2 = ((r * m as f64).round() as u64).clamp(1, m);
                if t2 > t {
                    bail!(
                        "--rate {r}: the stream was sampled at {} already",
                        t as f64 / m as f64
                    );
                }
                regions.threshold = t2;
            }
            Ok(Some(StreamSampling {
                regions,
                kind: if h.sampling == SamplingKind::SpatialRate {
                    "spatial-rate"
                } else {
                    "spatial-size"
                },
                realized: 1.0,
            }))
        }
    }
}

/// [`analyze_with`] of a sampled or complete stream as `so` says.
pub fn analyze_sampled(
    path: &Path,
    geometry: &TlbGeometry,
    cost: &CostModel,
    opts: &AnalysisOptions,
    so: &SampleOptions,
) -> Result<Analysis> {
    let b = profile::read(path)?;
    if b.refs.is_none() {
        return super::analyze_damon(path, b, geometry, cost);
    }
    let mut launch = None;
    for x in &b.extra {
        if x.name == "launch" {
            let v = hugetune_capture::launcher::launch_section(&x.data)?;
            note(hugetune_capture::launcher::describe_launch(&v));
            launch = Some(v);
            continue;
        }
        note(format!(
            "bundle section '{}' ({}) is kept for other tools; the model does not use it",
            x.name,
            hugetune_render::bytes(x.data.len() as u64)
        ));
    }
    let Some(refs) = &b.refs else {
        bail!(
            "bundle {}: no reference stream (record with --refs qemu or --refs valgrind)",
            path.display()
        );
    };
    let mut sampling = {
        let r = RefReader::new(&refs[..]).context("reading the reference stream")?;
        if r.header().sampling == SamplingKind::Time {
            return super::time_sampled::analyze(path, b, geometry, cost, opts, so);
        }
        stream_sampling(path, r.header(), so)?
    };
    if sampling.is_some() && opts.simulate {
        bail!(
            "bundle {}: the set-associative simulation needs every reference; the stream is sampled",
            path.display()
        );
    }
    let log = AllocLog::parse(&b.alloc_log, path)?;
    let inputs = inputs_from_log(&log);
    let spec = StreamSpec {
        space: inputs.space.clone(),
        events: inputs.events.clone(),
        threshold: inputs.threshold,
        markers: inputs.markers,
    };
    let stream_error: RefCell<Option<std::io::Error>> = RefCell::new(None);
    // Two passes over the stream (categories and miss-ratio curves, then the
    // model), counted in millions of references — in thousands for a stream
    // under 10 M (a sampled one), whose bar would not move otherwise.
    let (unit, unit_name) = if b.meta.refs < 10_000_000 {
        (1_000u64, "K refs")
    } else {
        (1_000_000, "M refs")
    };
    let bar =
        crate::progress::Progress::bar("analyzing", 2 * b.meta.refs.div_ceil(unit), unit_name);
    // References left until the bar's next unit (a countdown: no division
    // per reference).
    let done = std::cell::Cell::new(unit);
    // END's totals (regions referenced, references seen) and the final
    // threshold, once a pass has read the stream.
    type Ends = (Option<u64>, Option<u64>, Option<u64>);
    let ends: RefCell<Option<Ends>> = RefCell::new(None);
    let items = || -> Result<_> {
        let mut r = RefReader::new(&refs[..]).context("reading the reference stream")?;
        let err = &stream_error;
        let (bar, done, ends) = (&bar, &done, &ends);
        // The thread of the references given so far, and a reference held
        // back behind the THREAD item that announces its new thread.
        let mut thread = None;
        let mut held = None;
        Ok(std::iter::from_fn(move || {
            if let Some(item) = held.take() {
                return Some(item);
            }
            match r.next_event() {
                Ok(Some(Event::Ref(x))) => {
                    let left = done.get() - 1;
                    if left == 0 {
                        bar.inc(1);
                        done.set(unit);
                    } else {
                        done.set(left);
                    }
                    let item = if x.write {
                        StreamItem::Write(x.addr)
                    } else {
                        StreamItem::Ref(x.addr)
                    };
                    if thread != Some(x.thread) {
                        thread = Some(x.thread);
                        held = Some(item);
                        return Some(StreamItem::Thread(x.thread));
                    }
                    Some(item)
                }
                Ok(Some(Event::Threshold(t))) => Some(StreamItem::Threshold(t)),
                Ok(None) => {
                    *ends.borrow_mut() = Some((
                        r.totals().and_then(|t| t.regions_seen),
                        r.threshold(),
                        r.totals().map(|t| t.refs_seen),
                    ));
                    None
                }
                Err(e) => {
                    *err.borrow_mut() = Some(e);
                    None
                }
            }
        }))
    };
    fn addrs(it: impl Iterator<Item = StreamItem>) -> impl Iterator<Item = u64> {
        it.filter_map(|i| match i {
            StreamItem::Ref(a) | StreamItem::Write(a) => Some(a),
            StreamItem::Threshold(_) | StreamItem::Thread(_) => None,
        })
    }
    // The first pass: the categories present, the largest sites, and the 2 MB
    // regions the program references (for the realized rate of the region
    // sample: the capture counted them all, the stream holds the sampled ones).
    let (mbase, mspan) = spec.markers;
    let mut regions = std::collections::HashSet::new();
    let mut last_region = u64::MAX;
    // With a reference budget: how many references each sample key keeps (a
    // reference is kept at threshold T iff its key is below T).
    let keyed = sampling
        .as_ref()
        .filter(|_| so.max_refs.is_some())
        .map(|s| s.regions);
    let mut keys = vec![0u64; if keyed.is_some() { 16 * 64 } else { 0 }];
    // The region part of the previous reference's key (its region's and the
    // one before's hashes): most references stay in their predecessor's region.
    let mut region_key = (u64::MAX, 0u64);
    let first = addrs(items()?).inspect(|&a| {
        let g = a >> REGION_SHIFT;
        let program = a.wrapping_sub(mbase) >= mspan;
        if g != last_region && program {
            last_region = g;
            regions.insert(g);
        }
        if let (Some(s), true) = (&keyed, program) {
            if region_key.0 != g {
                region_key = (g, s.region_hash(g).min(s.region_hash(g.wrapping_sub(1))));
            }
            let k = s.page_hash(a >> PAGE_SHIFT).min(region_key.1);
            keys[key_bucket(k)] += 1;
        }
    });
    let (present, _, top) = present_categories(&spec, first);
    // Valgrind runs the threads one at a time and lackey names none: its
    // stream is one thread, whatever the program ran.
    let (cpus, cpus_source) = if b.meta.ref_source.starts_with("valgrind") {
        note("valgrind's stream does not say which thread made each reference: one TLB for all of them (`record --refs qemu` gives each thread its core's TLBs)");
        (0, String::new())
    } else {
        run_cpus(b.meta.affinity.as_deref())
    };
    let alongside = launch
        .as_ref()
        .and_then(|l| hugetune_capture::launcher::alongside(l, cpus));
    if let Some(a) = &alongside {
        note(format!(
            "{} processes of the program ran at once, each with page tables of its own: the caches a walk reads hold them all ({:.2}x this one's), so walks are costed at that size (docs/model.md §4, \"Processes side by side\")",
            a.processes, a.page_tables
        ));
    }
    let opts = &AnalysisOptions {
        sites: top,
        cpus,
        cpus_source,
        jvm: inputs.traits().jvm,
        alongside,
        ..opts.clone()
    };
    if let Some(e) = stream_error.take() {
        bail!(
            "bundle {}: the reference stream is corrupt: {e}",
            path.display()
        );
    }
    if let Some(s) = sampling.as_mut() {
        let (counted, final_t, _) = ends.borrow().unwrap_or((None, None, None));
        let mut at_end = s.regions;
        if s.kind == "spatial-size" {
            at_end.threshold = final_t.unwrap_or(at_end.threshold).min(at_end.threshold);
            // Thresholds only fall, so the stream holds every reference to the
            // pages and regions under the final one since the start: the second
            // pass reads it as a fixed-rate sample at that threshold (exact
            // SHARDS, and the references of pages that left are skipped before
            // the engines instead of counted and evicted).
            s.regions = at_end;
        }
        if let Some(budget) = so.max_refs {
            let t = budget_threshold(&keys, at_end.threshold, budget);
            if t < at_end.threshold {
                note(format!(
                    "analysing {:.1} M of the stream's references: the sample at R = {:.5} (from {:.5}) to stay within the budget of {:.1} M",
                    keys[..key_bucket(t)].iter().sum::<u64>() as f64 / 1e6,
                    t as f64 / at_end.modulus as f64,
                    at_end.rate(),
                    budget as f64 / 1e6
                ));
                at_end.threshold = t;
                s.regions = at_end;
            }
        }
        let sampled = regions
            .iter()
            .filter(|&&g| at_end.region_sampled(g))
            .count() as u64;
        // A complete stream sampled here: every region is in it.
        let all = if s.kind == "analysis" {
            Some(regions.len() as u64)
        } else {
            counted
        };
        if let Some(all) = all {
            s.realized = realized_ratio(sampled, all, at_end.rate());
        }
    }
    drop(regions);
    // The second pass: every mapping at once, and the curves per page size.
    let mut mrcs = match &sampling {
        None => PageSizeMrcs::new(),
        Some(s) => {
            let mut m = PageSizeMrcs::sampled(s.regions);
            m.set_realized(s.realized);
            m
        }
    };
    let second = items()?.inspect(|i| match *i {
        StreamItem::Ref(a) | StreamItem::Write(a) if a.wrapping_sub(mbase) >= mspan => mrcs.feed(a),
        StreamItem::Ref(_) | StreamItem::Write(_) | StreamItem::Thread(_) => {}
        StreamItem::Threshold(t) => mrcs.set_threshold(t),
    });
    let (result, mut stream, cat) =
        analyze_stream_sampled(&spec, geometry, &present, opts, sampling, second);
    // SHARDS_adj for the totals: the references of the program are known (all
    // the capture saw but the marker loads; every one of them for a stream the
    // analysis sampled), the sample gives their shares by category. The miss and
    // fault counts, which the predictions use, are the sample's own estimates.
    if let Some(s) = &sampling {
        let known = match s.kind {
            "analysis" => Some(stream.sampled_refs + stream.out_of_sample),
            _ => ends
                .borrow()
                .and_then(|e| e.2)
                .map(|seen| seen.saturating_sub(stream.markers + stream.excluded)),
        };
        let sum: u64 = stream.refs_per_category.iter().sum();
        if let Some(n) = known.filter(|&n| n > 0 && sum > 0) {
            let f = n as f64 / sum as f64;
            for c in &mut stream.refs_per_category {
                *c = (*c as f64 * f).round() as u64;
            }
            stream.refs = n;
        }
    }
    if let Some(e) = stream_error.take() {
        bail!(
            "bundle {}: the reference stream is corrupt: {e}",
            path.display()
        );
    }
    if stream.refs == 0 {
        if let Some(s) = &sampling {
            bail!(
                "bundle {}: no program references in the sample ({} at R = {}); sample at a higher rate",
                path.display(),
                s.kind,
                s.regions.rate()
            );
        }
        bail!(
            "bundle {}: no program references in the stream",
            path.display()
        );
    }
    if let Some(n) = self_advice_note(&cat) {
        note(n);
    }
    let mut result = result;
    if let Some(c) = result.cores.take() {
        let n = &b.meta.native;
        let c = c.with_native_run(n.user_s + n.sys_s, n.wall_s);
        note(c.describe());
        result.cores = Some(c);
    }
    if let Some(n) = mthp_note(&opts.mthp) {
        note(n);
    }
    let mut meta = b.meta;
    if let Some(t) = so.native_s {
        meta.native.wall_s = t;
    }
    let native_s = meta.native.wall_s;
    let (predictions, errors, intervals) =
        named_predictions(&result, cost, native_s, &inputs.modules);
    let significance = rank::significance(&result, native_s);
    let pool = heap_large_pool(&log, inputs.threshold);
    Ok(Analysis {
        pool,
        sites: sites(&cat, &inputs.modules),
        meta,
        stream,
        result,
        predictions,
        significance,
        cost: cost.clone(),
        threshold: inputs.threshold,
        program: inputs.traits(),
        frequency: None,
        mrc: mrcs
            .curves()
            .into_iter()
            .map(|(n, v)| (n.to_string(), v))
            .collect(),
        errors,
        intervals,
    })
}

/// The CPUs the profiled run could use and where that came from: the bundle's
/// affinity, else this machine's CPUs (bundles recorded before the affinity
/// was kept).
pub(crate) fn run_cpus(affinity: Option<&[u32]>) -> (usize, String) {
    match affinity.filter(|a| !a.is_empty()) {
        Some(a) => (cpu_count(a), format!("affinity {}", cpu_list(a))),
        None => {
            let n = std::thread::available_parallelism().map_or(1, |n| n.get());
            (
                n,
                format!("round-robin over this machine's {n} CPUs: the bundle has no affinity"),
            )
        }
    }
}

/// Distinct CPUs in a list.
fn cpu_count(cpus: &[u32]) -> usize {
    let mut v = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    v.len()
}

/// CPU numbers as the kernel lists them: `0-3,6`.
pub(crate) fn cpu_list(cpus: &[u32]) -> String {
    let mut v = cpus.to_vec();
    v.sort_unstable();
    v.dedup();
    let mut out: Vec<String> = Vec::new();
    let mut i = 0;
    while i < v.len() {
        let mut j = i;
        while j + 1 < v.len() && v[j + 1] == v[j] + 1 {
            j += 1;
        }
        out.push(if j == i {
            v[i].to_string()
        } else {
            format!("{}-{}", v[i], v[j])
        });
        i = j + 1;
    }
    out.join(",")
}

/// A site prediction's label before its modules are named.
pub(super) fn unnamed_site_label(p: &Prediction) -> String {
    let sites: Vec<_> = p
        .sites
        .iter()
        .map(|s| rank::PlannedSite {
            module: String::new(),
            ..s.clone()
        })
        .collect();
    rank::site_label(&sites)
}

/// The shared pool's profile of heap-large blocks at `threshold` in one
/// allocation log (None without such blocks).
pub fn heap_large_pool(
    log: &AllocLog,
    threshold: u64,
) -> Option<hugetune_model::pool::PoolProfile> {
    let scope = hugetune_model::pool::PoolScope {
        heap_large: true,
        threshold,
        ..Default::default()
    };
    let p = hugetune_model::pool::profile(&[super::plan::pool_trace(log)], &scope);
    (p.blocks > 0).then_some(p)
}

/// Stores a profile's analysis in the database; returns (profile id, program id, machine id).
pub fn store_analysis(
    db: &mut Db,
    a: &Analysis,
    bundle: Option<&Path>,
    machine: &Machine,
) -> Result<(i64, i64, i64)> {
    store_analysis_from(db, a, bundle, machine, None)
}

/// `store_analysis`, for a re-analysis of the profile `origin` (fleet.rs).
pub fn store_analysis_from(
    db: &Db,
    a: &Analysis,
    bundle: Option<&Path>,
    machine: &Machine,
    origin: Option<i64>,
) -> Result<(i64, i64, i64)> {
    let m = machine_id(db, machine)?;
    let program = db.upsert_program(&a.meta.program.path, a.meta.program.build_id.as_deref())?;
    let summary = serde_json::json!({
        "refs": a.stream.refs,
        "refs_per_category": category_map(&a.stream.refs_per_category),
        "native_s": a.meta.native.wall_s,
        "native_minor_faults": a.meta.native.minor_faults,
        "significance": a.significance,
        "heap_large_peak_pages": a.result.heap_large_peak_pages,
        "threshold": a.threshold,
        "ref_source": a.meta.ref_source,
        "tlb": a.result.geometry,
        "cost": a.cost,
        "program": a.program,
        "mrc": a.mrc.iter().map(|(n, v)| (n.clone(), serde_json::json!(v))).collect::<serde_json::Map<_, _>>(),
        "sampling": a.result.sampling,
        "cores": a.result.cores,
        "errors": a.errors,
        "intervals": a.intervals,
        "pool_heap_large": a.pool,
    });
    let directives: Vec<NewDirective> = a
        .predictions
        .iter()
        .map(|p| NewDirective {
            // The label names the mapping with its backings: unique per profile,
            // what validations and runs refer to.
            mapping: p.label.clone(),
            assignments: serde_json::to_value(&p.assignments).unwrap_or_default(),
            base: p.base,
            saving_ns: p.saving_ns,
            pmb: p.pmb,
            predicted_speedup: p.predicted_speedup,
            hugetlb_pages: p.hugetlb_pages,
            thp_pages: p.thp_pages,
            details: serde_json::to_value(p).unwrap_or_default(),
            confidence: 1.0,
            validations: 0,
            lost: false,
        })
        .collect();
    let args = a.meta.command.clone();
    let id = db.store_profile(&NewProfile {
        program_id: program,
        machine_id: Some(m),
        args: &args,
        bundle,
        summary: &summary,
        directives: &directives,
        origin_id: origin,
    })?;
    Ok((id, program, m))
}

/// This host's row in the database (its id: `--host-id`, else the machine id),
/// registered with its description and so its machine class.
pub fn machine_id(db: &Db, m: &Machine) -> Result<i64> {
    Ok(db.register_host(&super::host_spec(m)?)?.machine_id)
}

/// The newest calibration of this machine (`hugetune calibrate`), checked: a
/// stored one the cost model could not use is an error, not a silent default.
/// The cost model for this machine: its latest `hugetune calibrate`, else the
/// defaults measured on the reference machine. Figures the calibration lacks (a
/// size it could not measure) keep their defaults.
pub fn cost_model(db: &Db, machine: &Machine) -> Result<CostModel> {
    Ok(cost_from_stored(stored_calibration(db, machine)?.as_ref()))
}

/// The cost model of a stored calibration, or the defaults with a note.
fn cost_from_stored(c: Option<&Calibration>) -> CostModel {
    match c {
        Some(c) => cost_from_calibration(c),
        None => {
            note("no calibration of this machine in the database: using the default costs (run `hugetune calibrate`)");
            CostModel::default()
        }
    }
}

/// `cost_model` from the database at `path`, without creating one that does not exist.
pub fn cost_model_at(path: &Path, machine: &Machine) -> Result<CostModel> {
    Ok(costs_at(path, machine)?.0)
}

/// `cost_model_at` and the calibration it was made from, from one read.
fn costs_at(path: &Path, machine: &Machine) -> Result<(CostModel, Option<Calibration>)> {
    if !Db::exists(path) {
        return Ok((CostModel::default(), None));
    }
    let cal = stored_calibration(&Db::open(path)?, machine)?;
    Ok((cost_from_stored(cal.as_ref()), cal))
}

pub fn cost_from_calibration(c: &Calibration) -> CostModel {
    let mut m = CostModel {
        l2_hit_ns: c.l2_hit_ns,
        ..CostModel::default()
    };
    for (i, curve) in c.walk_curve.iter().enumerate() {
        if !curve.is_empty() {
            m.walk_curve[i] = curve.clone();
        }
    }
    for (name, ns) in &c.fault_ns {
        if let Ok(b) = name.parse::<Backing>() {
            m.fault_ns.retain(|(x, _)| *x != b);
            m.fault_ns.push((b, *ns));
        }
    }
    if let Some(o) = &c.overlap {
        m.memory_ns = o.memory_ns;
        m.walk_concurrency = o.walk_concurrency;
        m.independent_ns_per_walk = o.independent_ns_per_walk;
        m.dirty_ratio = o.dirty_ratio;
    }
    m.source = format!("hugetune calibrate, {} ({})", c.created, c.machine);
    m.spread = cost_spread(c, &m).map(Box::new);
    m
}

/// `m` (made from `c`) with the faults of memory the host may have taken
/// back: where free page reporting hands freed 2 MB blocks to the host between
/// runs (`kernel_state::free_page_reporting`), some of a run's 4 KB and THP
/// faults land on memory the host must back again, at calibrate's cold figure
/// (its first pass of each fault measurement), the others on warm memory. How
/// many varies from run to run (two validations of the same Go program an hour
/// apart measured 1.11x and 1.43x, docs/model.md §4, "Host state"), so each
/// such figure is the mean of its warm and cold ones, and its spread runs from
/// the warm figure's fastest repetition to the cold figure: the interval holds
/// none to all of them cold. hugetlb pages stay warm: the pool holds them
/// between runs. `None` when `c` has no cold figure for any such backing (a
/// calibration stored before it measured them).
pub fn cold_fault_costs(c: &Calibration, m: &CostModel) -> Option<CostModel> {
    let mut out = m.clone();
    let mut moved = Vec::new();
    for f in c.figures.iter().filter(|f| f.kind == "fault") {
        let (Some(cold), Ok(b)) = (f.cold_ns, f.what.parse::<Backing>()) else {
            continue;
        };
        let warm = out.fault(b);
        if b.uses_pool() || !cold.is_finite() || cold <= warm {
            continue;
        }
        let mean = (warm + cold) / 2.0;
        out.fault_ns.retain(|(x, _)| *x != b);
        out.fault_ns.push((b, mean));
        if let Some(sp) = out.spread.as_deref_mut() {
            for (_, v) in sp.fault_ns[1].iter_mut().filter(|(x, _)| *x == b) {
                *v = v.max(cold);
            }
        }
        moved.push(format!(
            "{b} {} warm, {} cold",
            hugetune_render::ns(warm),
            hugetune_render::ns(cold)
        ));
    }
    if moved.is_empty() {
        return None;
    }
    out.source = format!(
        "{}; faults on memory the host may have taken back: between warm and cold ({})",
        m.source,
        moved.join("; ")
    );
    Some(out)
}

/// The cost model for runs on this machine as they happen now: this machine's
/// (`cost_model_at`), with `cold_fault_costs` where free page reporting is on
/// (`reporting`: what `kernel_state::free_page_reporting` said) and the
/// calibration has the cold figures; says which in a note.
pub fn cost_model_for_runs(
    path: &Path,
    machine: &Machine,
    reporting: Option<&str>,
) -> Result<CostModel> {
    let (cost, cal) = costs_at(path, machine)?;
    let Some(why) = reporting else {
        return Ok(cost);
    };
    match cal.as_ref().and_then(|c| cold_fault_costs(c, &cost)) {
        Some(cold) => {
            note(format!(
                "this VM hands free memory back to its host ({why}): a share of the runs' 4 KB and THP faults land on memory it took back, which varies from run to run; each is priced halfway between calibrate's warm and cold figures, and the interval spans all warm to all cold (hugetlb pool pages stay warm; docs/model.md §4, \"Host state\")"
            ));
            Ok(cold)
        }
        None => {
            note(format!(
                "this VM hands free memory back to its host ({why}): its runs' 4 KB and THP faults may cost several times the figures used (no calibration with cold fault figures: `hugetune calibrate`)"
            ));
            Ok(cost)
        }
    }
}

/// A walk concurrency that leaves no translation cost to see: the far end of
/// the overlap's spread where a repetition of the independent loads saved
/// nothing on 2 MB pages.
const ALL_HIDDEN: f64 = 1e9;

/// The ends of every figure of `c` over its repetitions, on the cost model
/// `m` made from it (docs/model.md §4.1). A figure without repetitions (one
/// extrapolated from a smaller page size takes that size's ends; one not
/// measured, a default) has both ends at its value. `None` when no figure has
/// a spread (calibrations stored before figures carried one).
fn cost_spread(c: &Calibration, m: &CostModel) -> Option<hugetune_model::cost::CostSpread> {
    const LEAF: [&str; 3] = ["4k", "2m", "1g"];
    // The figure of this kind for leaf `i`, else for the nearest smaller leaf
    // (what an extrapolated figure copies).
    let ends = |kind: &str, leaf: usize, pt: Option<f64>| -> Option<[f64; 2]> {
        (0..=leaf).rev().find_map(|i| {
            c.figures
                .iter()
                .filter(|f| f.kind == kind && f.what == LEAF[i] && f.pt_bytes == pt)
                .find_map(|f| f.ns)
                .map(|r| [r.min.max(0.0), r.max.max(0.0)])
        })
    };
    let mut any = false;
    let mut pick = |e: Option<[f64; 2]>, v: f64, end: usize| match e {
        Some(e) if e[0] <= v && v <= e[1] => {
            any |= e[0] < e[1];
            e[end]
        }
        _ => v,
    };
    let mut l2_hit_ns = [[0.0; 3]; 2];
    let mut walk_curve: [[Vec<(f64, f64)>; 3]; 2] = Default::default();
    let mut fault_ns: [Vec<(Backing, f64)>; 2] = Default::default();
    for end in 0..2 {
        for leaf in 0..3 {
            l2_hit_ns[end][leaf] = pick(ends("l2-hit", leaf, None), m.l2_hit_ns[leaf], end);
            walk_curve[end][leaf] = m.walk_curve[leaf]
                .iter()
                .map(|&(x, y)| (x, pick(ends("walk", leaf, Some(x)), y, end)))
                .collect();
        }
        fault_ns[end] = m
            .fault_ns
            .iter()
            .map(|&(b, v)| {
                let e = c
                    .figures
                    .iter()
                    .filter(|f| f.kind == "fault" && f.what == b.name())
                    .find_map(|f| f.ns)
                    .map(|r| [r.min.max(0.0), r.max]);
                (b, pick(e, v, end))
            })
            .collect();
    }
    // More hidden walks where the loads saved less: O scales as the inverse of
    // their saving per walk (`OverlapEnds`). A repetition that saved nothing
    // says the walks may hide entirely: that end hides them all.
    let walk_concurrency = match &c.overlap {
        Some(o) if o.independent_walk.median > 0.0 => {
            let r = o.independent_walk;
            let at = |saved: f64| (m.walk_concurrency * r.median / saved).clamp(1.0, ALL_HIDDEN);
            any |= r.min < r.max;
            [
                at(r.max.max(r.median)),
                if r.min > 0.0 {
                    at(r.min.min(r.median))
                } else {
                    ALL_HIDDEN
                },
            ]
        }
        _ => [m.walk_concurrency; 2],
    };
    any.then_some(hugetune_model::cost::CostSpread {
        l2_hit_ns,
        walk_curve,
        fault_ns,
        walk_concurrency,
    })
}

pub fn stored_calibration(db: &Db, machine: &Machine) -> Result<Option<Calibration>> {
    let id = machine_id(db, machine)?;
    let Some(v) = db.latest_calibration(id)? else {
        return Ok(None);
    };
    Calibration::from_json(v).map(Some).with_context(|| {
        format!(
            "the stored calibration of this machine in {}",
            db.path().display()
        )
    })
}

pub fn category_map(v: &[u64; 5]) -> serde_json::Value {
    let mut m = serde_json::Map::new();
    for c in Category::ALL {
        m.insert(c.name().into(), v[c.index()].into());
    }
    serde_json::Value::Object(m)
}

/// What the database holds about a program: the predictions of the profile
/// that serves this input, and what validations taught about them.
pub struct Stored {
    pub program_id: i64,
    pub profile_id: i64,
    /// The profile was taken with the same arguments (else a training input serves).
    pub same_input: bool,
    pub predictions: Vec<Prediction>,
    pub significance: Significance,
    pub native_s: f64,
    pub threshold: u64,
    pub program: ProgramTraits,
    /// Labels of plans that lost a validation (any profile of the program).
    pub lost: Vec<String>,
    /// Confidence per label, where validations moved it.
    pub confidence: Vec<(String, f64)>,
    /// The profile's heap-large blocks for a shared pool (`Analysis::pool`).
    pub pool: Option<hugetune_model::pool::PoolProfile>,
    /// The costs the profile was analysed with (the pool is weighed with them).
    pub cost: CostModel,
}

impl Stored {
    /// The planner's policy for this program.
    pub fn policy(&self, min_gain: f64) -> Policy {
        Policy {
            min_gain,
            lost: self.lost.clone(),
            confidence: self.confidence.clone(),
        }
    }

    /// Plans for what the machine offers in `avail`.
    pub fn choose(&self, avail: &Availability, min_gain: f64) -> PlanDecision {
        let mut d = plan::choose_with(
            &self.predictions,
            &self.significance,
            avail,
            &self.program,
            self.native_s,
            &self.policy(min_gain),
        );
        super::jvm::plan(
            &mut d,
            &self.program,
            &self.significance,
            &self.predictions,
            avail,
            &self.lost,
            min_gain * self.native_s * 1e9,
        );
        // The shared pool against per-allocation pages, from the profile's own
        // allocations: only for the input it saw (another input's blocks say
        // nothing of this one's; optimize sizes one from a record-mode run).
        let heap_large_2m = d
            .assignments
            .contains(&(Category::HeapLarge, Backing::Hugetlb2m));
        let said = d.reasons.len();
        match &self.pool {
            Some(p) if self.same_input => plan::choose_pool_stored(
                &mut d,
                p,
                &self.cost,
                avail,
                self.native_s,
                min_gain,
            ),
            Some(_) if heap_large_2m && d.sites.is_empty() => d.reasons.push(
                "no shared pool weighed: the stored profile's blocks are another input's (`hugetune optimize` sizes one from this input)".into(),
            ),
            _ => {}
        }
        // The decision's own reason stays last (what `plan` shows without
        // --explain).
        if d.reasons.len() == said + 1 && said > 0 {
            let r = d.reasons.pop().expect("one more than before");
            d.reasons.insert(said - 1, r);
        }
        if !self.same_input {
            d.reasons.insert(
                0,
                format!(
                    "profile #{} was taken with other arguments: its ranking serves this input (seed 001 §5.3.3)",
                    self.profile_id
                ),
            );
        }
        d
    }
}

/// The directives of the profile that serves the input `argv` runs (the same
/// arguments if profiled, else the program's newest profile), as predictions.
pub fn stored_predictions(db: &Db, argv: &[OsString]) -> Result<Option<Stored>> {
    let program = program_of(argv)?;
    let program_id = db.upsert_program(&program.path, program.build_id.as_deref())?;
    // This host's class's analysis; for a class new to the program, the stored
    // profile analyzed again with this host's geometry (fleet.rs).
    let sp = match db.plan_source(program_id, &strings(argv))? {
        PlanSource::Class(sp) => sp,
        PlanSource::Foreign(other) => match super::reanalyze(db, &other)? {
            Some(sp) => sp,
            None => return Ok(None),
        },
        PlanSource::None => return Ok(None),
    };
    let (profile_id, summary) = (sp.id, sp.summary);
    let directives = db.directives(profile_id)?;
    let confidence = directives
        .iter()
        .filter(|d| d.validations > 0)
        .map(|d| (d.mapping.clone(), d.confidence))
        .collect();
    let predictions: Vec<Prediction> = directives
        .into_iter()
        .map(|d| {
            serde_json::from_value(d.details)
                .context("a stored directive is not readable by this hugetune")
        })
        .collect::<Result<_>>()?;
    let significance: Significance = serde_json::from_value(summary["significance"].clone())
        .context("stored profile has no significance test")?;
    // Profiles stored before fork detection existed read as not forking.
    let program = match &summary["program"] {
        serde_json::Value::Null => ProgramTraits::default(),
        v => serde_json::from_value(v.clone())
            .context("the stored profile's program traits are not readable by this hugetune")?,
    };
    Ok(Some(Stored {
        program_id,
        profile_id,
        same_input: sp.same_input,
        predictions,
        significance,
        native_s: summary["native_s"].as_f64().unwrap_or(0.0),
        threshold: summary["threshold"].as_u64().unwrap_or(128 * 1024),
        program,
        lost: db.lost_mappings(program_id)?,
        confidence,
        // Profiles stored before these were kept have none: no pool weighed,
        // the default costs.
        pool: serde_json::from_value(summary["pool_heap_large"].clone()).unwrap_or(None),
        cost: serde_json::from_value(summary["cost"].clone()).unwrap_or_default(),
    }))
}

/// Teaches the database what a validation of `decision` measured: the applied
/// directive's confidence moves toward the agreement of predicted and measured
/// gain, and a measured loss bars the plan from automatic use. Returns the new
/// confidence, or None when the plan was no stored directive (a per-site
/// combination, or nothing applied).
pub fn learn_from(
    db: &Db,
    profile_id: i64,
    decision: &PlanDecision,
    v: &Validation,
) -> Result<Option<f64>> {
    let Some(p) = &decision.prediction else {
        return Ok(None);
    };
    if db
        .directives(profile_id)?
        .iter()
        .all(|d| d.mapping != p.label)
    {
        return Ok(None);
    }
    let lost = matches!(v.verdict, Verdict::Loss | Verdict::Broke);
    let agreement = if v.verdict == Verdict::Broke {
        0.0
    } else {
        v.agreement(p.predicted_speedup)
    };
    let c = db.record_validation(profile_id, &p.label, agreement, lost)?;
    if lost {
        note(format!(
            "{} {}: it will not be applied again automatically",
            p.label,
            if v.verdict == Verdict::Broke {
                "broke the program"
            } else {
                "measured a loss"
            }
        ));
    }
    Ok(Some(c))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where the host takes freed memory back, 4 KB and THP faults cost the
    /// mean of their warm and cold figures, their spread reaching the cold
    /// one; hugetlb stays warm (the pool holds its pages); a calibration
    /// without cold figures gives no such model.
    #[test]
    fn cold_faults_for_memory_the_host_took_back() {
        let rep = |median: f64, min: f64, max: f64| serde_json::json!({"median": median, "min": min, "max": max, "reps": 9});
        let fault = |what: &str, ns: f64, cold: Option<f64>| {
            serde_json::json!({"kind": "fault", "what": what, "pt_bytes": null,
                "ns": rep(ns, ns * 0.9, ns * 1.1), "cold_ns": cold, "source": "test"})
        };
        let mut cal = serde_json::json!({
            "l2_hit_ns": [6.0, 28.0, 28.0],
            "walk_curve": [[[131072.0, 33.0]], [[32768.0, 110.0]], [[32768.0, 110.0]]],
            "fault_ns": [["4k", 4000.0], ["thp-2m", 400000.0], ["hugetlb-2m", 300000.0]],
            "sources": [], "machine": "test", "created": "2026-12-07T00:00:00Z",
            "figures": [
                fault("4k", 4000.0, Some(5000.0)),
                fault("thp-2m", 400000.0, Some(4000000.0)),
                fault("hugetlb-2m", 300000.0, Some(3000000.0)),
            ]
        });
        let c: Calibration = serde_json::from_value(cal.clone()).unwrap();
        let warm = cost_from_calibration(&c);
        let cold = cold_fault_costs(&c, &warm).expect("cold figures");
        assert_eq!(cold.fault(Backing::Base4k), 4500.0);
        assert_eq!(cold.fault(Backing::Thp2m), 2200000.0);
        assert_eq!(
            cold.fault(Backing::Hugetlb2m),
            300000.0,
            "the pool's pages stay warm"
        );
        assert!(
            cold.source
                .contains("4k 4.0 µs warm, 5.0 µs cold; thp-2m 400.0 µs warm, 4.00 ms cold"),
            "{}",
            cold.source
        );
        let s = cold.spread.as_deref().unwrap();
        let end = |e: usize, b: Backing| s.fault_ns[e].iter().find(|x| x.0 == b).unwrap().1;
        assert_eq!(
            end(0, Backing::Thp2m),
            360000.0,
            "all warm: the warm figure's fastest"
        );
        assert_eq!(end(1, Backing::Thp2m), 4000000.0, "all cold");
        assert_eq!(end(1, Backing::Base4k), 5000.0);
        assert_eq!(end(1, Backing::Hugetlb2m), 330000.0);
        cold.validate().unwrap();
        // No cold figure (an older calibration): none.
        for f in cal["figures"].as_array_mut().unwrap() {
            f["cold_ns"] = serde_json::Value::Null;
        }
        let c: Calibration = serde_json::from_value(cal).unwrap();
        assert!(cold_fault_costs(&c, &cost_from_calibration(&c)).is_none());
    }

    /// The cost model's spread comes from the calibration's figures: each
    /// curve point, L2-hit and fault cost at its fastest and slowest
    /// repetition (never below 0), an extrapolated leaf at the ends of the
    /// one it copies, the overlap's concurrency at the loads' two savings;
    /// figures without repetitions, and calibrations without any, give none.
    #[test]
    fn the_cost_spread_is_each_figure_between_its_repetitions() {
        let rep = |median: f64, min: f64, max: f64| serde_json::json!({"median": median, "min": min, "max": max, "reps": 9});
        let fig = |kind: &str, what: &str, pt: Option<f64>, ns: Option<serde_json::Value>| {
            serde_json::json!({"kind": kind, "what": what, "pt_bytes": pt, "ns": ns,
                "cold_ns": null, "source": "test"})
        };
        let mut cal = serde_json::json!({
            "l2_hit_ns": [6.0, 28.0, 28.0],
            "walk_curve": [[[131072.0, 33.0], [524288.0, 128.0]], [[32768.0, 110.0]], [[32768.0, 110.0]]],
            "fault_ns": [["4k", 3700.0], ["thp-2m", 254000.0]],
            "sources": [], "machine": "test", "created": "2026-12-07T00:00:00Z",
            "figures": [
                fig("l2-hit", "4k", None, Some(rep(6.0, 5.7, 6.2))),
                fig("l2-hit", "2m", None, Some(rep(28.0, 26.0, 34.0))),
                fig("l2-hit", "1g", None, None),
                fig("walk", "4k", Some(131072.0), Some(rep(33.0, -6.0, 52.0))),
                fig("walk", "4k", Some(524288.0), Some(rep(128.0, 40.0, 152.0))),
                fig("walk", "2m", Some(32768.0), Some(rep(110.0, 44.0, 157.0))),
                fig("walk", "1g", None, None),
                fig("fault", "4k", None, Some(rep(3700.0, 3500.0, 3900.0))),
                fig("fault", "thp-2m", None, Some(rep(254000.0, 225000.0, 276000.0))),
            ],
            "overlap": {"memory_ns": 208.7, "walk_concurrency": 19.6,
                "independent_ns_per_walk": 30.4, "dependent_walk": rep(190.0, 154.0, 318.0),
                "independent_walk": rep(9.0, 4.5, 36.0), "pt_bytes": 524288.0}
        });
        let c: Calibration = serde_json::from_value(cal.clone()).unwrap();
        let m = cost_from_calibration(&c);
        m.validate().unwrap();
        let s = m.spread.as_deref().expect("a spread");
        assert_eq!(s.l2_hit_ns, [[5.7, 26.0, 26.0], [6.2, 34.0, 34.0]]);
        assert_eq!(s.walk_curve[0][0], vec![(131072.0, 0.0), (524288.0, 40.0)]);
        assert_eq!(
            s.walk_curve[1][0],
            vec![(131072.0, 52.0), (524288.0, 152.0)]
        );
        assert_eq!(s.walk_curve[0][2], vec![(32768.0, 44.0)]);
        assert_eq!(s.walk_curve[1][1], vec![(32768.0, 157.0)]);
        let fault = |end: usize, b: Backing| s.fault_ns[end].iter().find(|x| x.0 == b).unwrap().1;
        assert_eq!(fault(0, Backing::Base4k), 3500.0);
        assert_eq!(fault(1, Backing::Thp2m), 276000.0);
        // A default the calibration did not measure: both ends at its value.
        assert_eq!(fault(0, Backing::Hugetlb2m), fault(1, Backing::Hugetlb2m));
        // O = 19.6 at the loads' median saving of 9 ns; 4× that saving hides
        // 4× fewer, half of it twice as many.
        assert!(
            (s.walk_concurrency[0] - 4.9).abs() < 1e-9,
            "{:?}",
            s.walk_concurrency
        );
        assert!(
            (s.walk_concurrency[1] - 39.2).abs() < 1e-9,
            "{:?}",
            s.walk_concurrency
        );
        // A repetition that saved nothing: the far end hides every walk.
        cal["overlap"]["independent_walk"] = rep(9.0, -1.0, 9.0);
        let c: Calibration = serde_json::from_value(cal.clone()).unwrap();
        let m = cost_from_calibration(&c);
        m.validate().unwrap();
        let w = m.spread.unwrap().walk_concurrency;
        assert!((w[0] - 19.6).abs() < 1e-9 && w[1] == ALL_HIDDEN, "{w:?}");
        // No figure with repetitions: no spread.
        cal["figures"] = serde_json::json!([]);
        cal["overlap"] = serde_json::Value::Null;
        let c: Calibration = serde_json::from_value(cal).unwrap();
        assert!(cost_from_calibration(&c).spread.is_none());
    }

    /// The bundle's affinity decides the CPUs (counted once each); without
    /// one, this machine's, and the placement says so.
    #[test]
    fn run_cpus_come_from_the_affinity_else_this_machine() {
        assert_eq!(cpu_list(&[3, 0, 1, 2, 6, 8, 9, 1]), "0-3,6,8-9");
        assert_eq!(cpu_list(&[5]), "5");
        assert_eq!(run_cpus(Some(&[0, 1])), (2, "affinity 0-1".to_string()));
        assert_eq!(run_cpus(Some(&[4, 4])), (1, "affinity 4".to_string()));
        let here = std::thread::available_parallelism().map_or(1, |n| n.get());
        for none in [None, Some(&[][..])] {
            let (n, how) = run_cpus(none);
            assert_eq!(n, here);
            assert!(how.contains("no affinity"), "{how}");
        }
    }

    #[test]
    fn key_buckets_are_ordered_and_their_floors_invert_them() {
        let mut last = 0;
        for k in 0..100_000u64 {
            assert!(key_bucket(k) >= last, "{k}");
            last = key_bucket(k);
        }
        for k in (0..100_000u64).chain([(1 << 24) - 1, 1 << 24, u64::MAX]) {
            let b = key_bucket(k);
            assert!(b < 16 * 64, "{k}");
            assert!(bucket_floor(b) <= k, "{k}: floor {}", bucket_floor(b));
            assert_eq!(key_bucket(bucket_floor(b)), b, "{k}");
            // A bucket is at most 1/16 of its floor wide: thresholds are fine.
            assert!(k - bucket_floor(b) <= bucket_floor(b) / 16 + 1, "{k}");
        }
    }

    #[test]
    fn the_budget_threshold_keeps_no_more_than_the_budget() {
        // Keys uniform in [0, 2^20), one reference each.
        let mut hist = vec![0u64; 16 * 64];
        for k in 0..1u64 << 20 {
            hist[key_bucket(k)] += 1;
        }
        for budget in [1u64, 100, 1000, 65_536, 500_000, 1 << 20, 1 << 22] {
            let t = budget_threshold(&hist, 1 << 20, budget);
            let kept = t.min(1 << 20); // keys below t
            assert!(kept <= budget.max(1), "budget {budget}: t {t}");
            // Within a bucket's width of the budget (1/16), or all of them.
            assert!(
                kept as f64 >= budget.min(1 << 20) as f64 * 15.0 / 16.0 - 16.0,
                "budget {budget}: only {kept}"
            );
        }
        // Never above the stream's own threshold, never 0.
        assert_eq!(budget_threshold(&hist, 1000, 1 << 30), 1000);
        assert_eq!(budget_threshold(&hist, 1 << 20, 0), 1);
    }
}
