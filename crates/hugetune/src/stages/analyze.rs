//! Stage 2, analyze: a profile bundle through the model (every mapping of
//! categories to page sizes predicted), stored as directives; calibration turned
//! into the cost model; what validated runs teach the store.

use super::{analysis_options, note, program_of, strings, Validation};
use anyhow::{bail, Context, Result};
use hugetune_capture::ab::Verdict;
use hugetune_capture::inputs::inputs_from_log;
use hugetune_format::alloclog::AllocLog;
use hugetune_format::profile::{self, ProfileMeta};
use hugetune_format::refstream::{RefReader, SamplingKind};
use hugetune_host::calibrate::Calibration;
use hugetune_host::machine::Machine;
use hugetune_model::analysis::AnalysisResult;
use hugetune_model::categorize::Categorizer;
use hugetune_model::category::Category;
use hugetune_model::cost::CostModel;
use hugetune_model::mrc::PageSizeMrcs;
use hugetune_model::page::Backing;
use hugetune_model::plan::{self, Availability, PlanDecision, Policy, ProgramTraits};
use hugetune_model::rank::{self, Prediction, Significance};
use hugetune_model::stream::AnalysisOptions;
use hugetune_model::stream::{analyze_stream, present_categories, StreamSpec, StreamSummary};
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
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SiteSummary {
    pub module: String,
    pub offset: String,
    pub category: Category,
    pub bytes: u64,
    pub allocations: u64,
}

fn sites(cat: &Categorizer, modules: &[String]) -> Vec<SiteSummary> {
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

/// Runs the model over a bundle, with the mappings this machine offers.
pub fn analyze(path: &Path, geometry: &TlbGeometry, cost: &CostModel) -> Result<Analysis> {
    analyze_with(path, geometry, cost, &analysis_options(false))
}

/// `analyze` with explicit mapping options (sizes evaluated, simulation).
pub fn analyze_with(
    path: &Path,
    geometry: &TlbGeometry,
    cost: &CostModel,
    opts: &AnalysisOptions,
) -> Result<Analysis> {
    let b = profile::read(path)?;
    for x in &b.extra {
        note(format!(
            "bundle section '{}' ({}) is kept for other tools; the model does not use it",
            x.name,
            hugetune_render::bytes(x.data.len() as u64)
        ));
    }
    let Some(refs) = &b.refs else {
        bail!(
            "bundle {}: it holds DAMON region access frequencies, not memory references; the model needs a reference stream (record with --refs qemu or --refs valgrind)",
            path.display()
        );
    };
    // The model counts what it reads: a spatially sampled stream would give counts
    // and reuse distances R times too small. Until it scales them (SHARDS), say so.
    {
        let r = RefReader::new(&refs[..]).context("reading the reference stream")?;
        let h = r.header();
        if h.sampling == SamplingKind::Time {
            bail!(
                "bundle {}: its references are time-sampled (source {}); reuse distances of time samples need a StatStack-style estimator, which this analysis does not have yet — record with --refs qemu or --refs valgrind",
                path.display(),
                b.meta.ref_source
            );
        }
        if h.sampling != SamplingKind::Complete || b.meta.ref_sampling != "complete" {
            bail!(
                "bundle {}: its references are sampled ({}, source {}); this analysis needs a complete stream and does not yet scale sampled ones (SHARDS) — record again without --rate/--max-pages",
                path.display(),
                b.meta.ref_sampling,
                b.meta.ref_source
            );
        }
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
    // model), counted in millions of references.
    const M: u64 = 1_000_000;
    let bar = crate::progress::Progress::bar("analyzing", 2 * b.meta.refs.div_ceil(M), "M refs");
    let done = std::cell::Cell::new(0u64);
    let refs_iter = || -> Result<_> {
        let mut r = RefReader::new(&refs[..]).context("reading the reference stream")?;
        let err = &stream_error;
        let (bar, done) = (&bar, &done);
        Ok(std::iter::from_fn(move || match r.next_ref() {
            Ok(Some((a, _))) => {
                let n = done.get() + 1;
                done.set(n);
                if n % M == 0 {
                    bar.inc(1);
                }
                Some(a)
            }
            Ok(None) => None,
            Err(e) => {
                *err.borrow_mut() = Some(e);
                None
            }
        }))
    };
    // The first pass also measures the whole stream's miss-ratio curves per page size.
    let mut mrcs = PageSizeMrcs::new();
    let (present, _, top) = present_categories(&spec, refs_iter()?.inspect(|&a| mrcs.feed(a)));
    let opts = &AnalysisOptions {
        sites: top,
        ..opts.clone()
    };
    if let Some(e) = stream_error.take() {
        bail!(
            "bundle {}: the reference stream is corrupt: {e}",
            path.display()
        );
    }
    let (result, stream, cat) = analyze_stream(&spec, geometry, &present, opts, refs_iter()?);
    if let Some(e) = stream_error.take() {
        bail!(
            "bundle {}: the reference stream is corrupt: {e}",
            path.display()
        );
    }
    if stream.refs == 0 {
        bail!(
            "bundle {}: no program references in the stream",
            path.display()
        );
    }
    let native_s = b.meta.native.wall_s;
    let mut predictions = rank::predictions(&result, cost, native_s);
    // Name the modules of per-site mappings, for labels and `site` directives.
    for p in predictions.iter_mut().filter(|p| !p.sites.is_empty()) {
        for s in &mut p.sites {
            s.module = inputs
                .modules
                .get(s.site.module as usize)
                .cloned()
                .unwrap_or_default();
        }
        p.label = rank::site_label(&p.sites);
    }
    let significance = rank::significance(&result, native_s);
    Ok(Analysis {
        sites: sites(&cat, &inputs.modules),
        meta: b.meta,
        stream,
        result,
        predictions,
        significance,
        cost: cost.clone(),
        threshold: inputs.threshold,
        program: ProgramTraits {
            forks: inputs.forks,
            fork_children: inputs.children.len() as u64,
        },
        mrc: mrcs
            .curves()
            .into_iter()
            .map(|(n, v)| (n.to_string(), v))
            .collect(),
    })
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
    let Some(c) = stored_calibration(db, machine)? else {
        note("no calibration of this machine in the database: using the default costs (run `hugetune calibrate`)");
        return Ok(CostModel::default());
    };
    Ok(cost_from_calibration(&c))
}

/// `cost_model` from the database at `path`, without creating one that does not exist.
pub fn cost_model_at(path: &Path, machine: &Machine) -> Result<CostModel> {
    if !Db::exists(path) {
        return Ok(CostModel::default());
    }
    cost_model(&Db::open(path)?, machine)
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
    m.source = format!("hugetune calibrate, {} ({})", c.created, c.machine);
    m
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
