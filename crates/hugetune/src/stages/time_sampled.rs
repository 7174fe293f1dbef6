//! Stage 2, analyze, for a *time-sampled* bundle (perf: PEBS, IBS, SPE):
//! the samples categorized, then every mapping's TLB misses and faults from the
//! independent-reference estimator of `hugetune_model::timesampled`
//! (docs/model.md §3.2), into the same [`Analysis`] as a complete or spatially
//! sampled stream, every prediction with its error bar.
//!
//! Invariants: the stream is read once; a stream without a fixed period (perf's
//! frequency mode) is refused, since its references per sample are unknown.
//! perf's samples almost never hit the runtime library's marker loads, so the
//! allocation events cannot be ordered against the samples: every allocation
//! is applied before the first sample and frees are dropped (the newest object
//! at an address wins; peak huge pages are those of every heap-large object
//! ever allocated, an upper bound for programs that free and reallocate).

use super::{note, sites, Analysis, SampleOptions};
use anyhow::{bail, Context, Result};
use hugetune_capture::inputs::inputs_from_log;
use hugetune_format::alloclog::AllocLog;
use hugetune_format::profile::Bundle;
use hugetune_format::refstream::{Event, RefReader};
use hugetune_model::analysis::{AnalysisResult, Mapping, SamplingSummary};
use hugetune_model::categorize::{AllocOp, Categorizer};
use hugetune_model::category::Category;
use hugetune_model::cost::CostModel;
use hugetune_model::mrc::tlb_capacities;
use hugetune_model::rank;
use hugetune_model::stream::{top_sites, AnalysisOptions, StreamSummary};
use hugetune_model::timesampled::{self, TimeSampledInput};
use hugetune_model::tlb::TlbGeometry;
use std::path::Path;

/// The basis every time-sampled analysis states (docs/model.md §3.2).
pub const BASIS: &str = "time-sampled (perf): TLB misses from the independent reference model (sample counts per page → LRU miss ratio, Che/StatStack); bursts to a page (sequential access) are over-predicted and loops larger than a TLB under-predicted; faults from the allocation sizes (heap-large) and Chao1 estimates of the folios touched (the rest)";

/// [`super::analyze_sampled`] of bundle `b` (at `path`), whose stream is
/// time-sampled.
pub fn analyze(
    path: &Path,
    b: Bundle,
    geometry: &TlbGeometry,
    cost: &CostModel,
    opts: &AnalysisOptions,
    so: &SampleOptions,
) -> Result<Analysis> {
    let refs = b.refs.as_deref().unwrap_or_default();
    let mut r = RefReader::new(refs).context("reading the reference stream")?;
    let h = r.header().clone();
    if so.exact {
        bail!(
            "bundle {}: its references are time-sampled (source {}); exact counts need a complete stream — record with --refs qemu or --refs valgrind",
            path.display(),
            h.source
        );
    }
    if let Some(rate) = so.rate {
        bail!(
            "--rate {rate}: bundle {} is time-sampled (one reference every period); it cannot be sampled further by pages",
            path.display()
        );
    }
    if opts.simulate {
        bail!(
            "bundle {}: the set-associative simulation needs every reference; the stream is time-sampled",
            path.display()
        );
    }
    let Some(period) = h.period.filter(|&p| p > 0) else {
        bail!(
            "bundle {}: its time samples have no fixed period (perf's frequency mode): the references each stands for are unknown — record with a fixed period (hugetune record --refs perf does)",
            path.display()
        );
    };
    let log = AllocLog::parse(&b.alloc_log, path)?;
    let inputs = inputs_from_log(&log);
    // Every allocation before the first sample; frees dropped (module doc).
    let events: Vec<_> = inputs
        .events
        .iter()
        .filter(|e| !matches!(e.op, AllocOp::Free { .. } | AllocOp::Munmap { .. }))
        .cloned()
        .collect();
    let image = |sites: &[hugetune_model::categorize::Site]| {
        let mut cat = Categorizer::new(inputs.space.clone(), inputs.threshold);
        cat.track_sites(sites);
        for e in &events {
            cat.apply(e);
        }
        cat
    };
    let top = top_sites(&image(&[]));
    let mut cat = image(&top);
    let (mbase, mspan) = inputs.markers;
    let mut summary = StreamSummary {
        events: inputs.events.len() as u64,
        events_applied: events.len() as u64,
        ..Default::default()
    };
    let mut samples: Vec<(u32, u64)> = Vec::new();
    let mut threads = std::collections::HashSet::new();
    let t0 = std::time::Instant::now();
    loop {
        match r.next_event() {
            Ok(Some(Event::Ref(x))) => {
                if mspan != 0 && x.addr.wrapping_sub(mbase) < mspan {
                    summary.markers += 1;
                    continue;
                }
                match cat.classify(x.addr) {
                    Some(id) => {
                        threads.insert(x.thread);
                        samples.push((id, x.addr))
                    }
                    None => summary.excluded += 1,
                }
            }
            Ok(Some(Event::Threshold(_))) => {}
            Ok(None) => break,
            Err(e) => bail!(
                "bundle {}: the reference stream is corrupt: {e}",
                path.display()
            ),
        }
    }
    if samples.is_empty() {
        bail!(
            "bundle {}: no program references among its {} time samples",
            path.display(),
            summary.excluded + summary.markers
        );
    }
    let n = samples.len() as u64;
    let mut per_cat = [0u64; 5];
    for &(id, _) in &samples {
        per_cat[cat.object(id).category.index()] += period;
    }
    let present: Vec<Category> = Category::ALL
        .iter()
        .copied()
        .filter(|c| per_cat[c.index()] > 0)
        .collect();
    let opts = AnalysisOptions {
        sites: top.clone(),
        jvm: inputs.traits().jvm,
        ..opts.clone()
    };
    let mappings = Mapping::candidates(&present, opts.gigantic, &opts.mthp, &opts.sites, opts.jvm);
    let segments = inputs.space.static_segments.clone();
    let results = timesampled::analyze(&TimeSampledInput {
        geometry,
        static_segments: &segments,
        objects: cat.objects(),
        mappings,
        samples: &samples,
        period,
        advised: events
            .iter()
            .any(|e| matches!(e.op, AllocOp::Advise { huge: true, .. })),
    });
    let addrs: Vec<u64> = samples.iter().map(|s| s.1).collect();
    let mrc = timesampled::curves(&addrs, period, &tlb_capacities());
    let secs = t0.elapsed().as_secs_f64();
    note(format!(
        "{} time samples (1 in {period} references) analyzed in {secs:.2} s ({:.0} samples/s): {BASIS}",
        n,
        n as f64 / secs.max(1e-9)
    ));
    if threads.len() > 1 {
        note(format!(
            "{} threads in the samples: a time-sampled analysis keeps one TLB for all of them (per-core TLBs need a complete or spatially sampled stream, `--refs qemu`: docs/model.md §3, \"Per-core TLBs\")",
            threads.len()
        ));
    }
    summary.refs = n * period;
    summary.sampled_refs = n;
    summary.refs_per_category = per_cat;
    let result = AnalysisResult {
        refs: n * period,
        mappings: results,
        heap_large_peak_pages: cat.peak_owned_frames(),
        heap_large_peak_pages_1g: cat.peak_owned_pages_1g(),
        static_pages_1g: cat.static_pages_1g(),
        site_peak_pages: top.iter().map(|&s| (s, cat.peak_site_frames(s))).collect(),
        alloc_stats: cat.stats().clone(),
        geometry: geometry.clone(),
        sampling: Some(SamplingSummary {
            kind: "time".into(),
            seed: 0,
            modulus: period,
            threshold: 1,
            rate: 1.0 / period as f64,
            realized: 1.0,
            refs_sampled: n,
            groups: 0,
        }),
        cores: None,
        alongside: None,
    };
    let native_s = b.meta.native.wall_s;
    let (predictions, errors, intervals) =
        super::analyze::named_predictions(&result, cost, native_s, &inputs.modules);
    let significance = rank::significance(&result, native_s);
    Ok(Analysis {
        pool: None,
        sites: sites(&cat, &inputs.modules),
        meta: b.meta,
        stream: summary,
        result,
        predictions,
        significance,
        cost: cost.clone(),
        threshold: inputs.threshold,
        program: inputs.traits(),
        mrc: mrc.into_iter().map(|(n, v)| (n.to_string(), v)).collect(),
        errors,
        intervals,
        frequency: None,
    })
}
