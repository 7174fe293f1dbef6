//! The stages of the pipeline, composed by the commands:
//! record → profile bundle → analyze → directives (DB) → plan → run → validate.

use crate::artifacts::Artifacts;
use crate::profile::{self, ProfileMeta, Program};
use anyhow::{bail, Context, Result};
use hugetune_capture::ab::{self, AbResult, RunCount, Verdict};
use hugetune_capture::alloclog::AllocLog;
use hugetune_host::calibrate::Calibration;
use hugetune_capture::damon::DamonOptions;
use hugetune_capture::elf;
use hugetune_capture::launch::{self, PlanOptions};
use hugetune_host::machine::{self, Machine};
use hugetune_capture::perf;
use hugetune_capture::inputs::inputs_from_log;
use hugetune_capture::qemu::{self, Sampling};
use hugetune_capture::record::{self as rec_mod, Source};
use hugetune_capture::refs::{RefReader, SamplingKind};
use hugetune_capture::runner::{self, Output, RunSpec, RunStats};
use hugetune_capture::session::Driver;
use hugetune_format::summary::Summary;
use hugetune_model::analysis::AnalysisResult;
use hugetune_model::categorize::Categorizer;
use hugetune_model::category::Category;
use hugetune_model::cost::CostModel;
use hugetune_model::mrc::PageSizeMrcs;
use hugetune_model::page::Backing;
use hugetune_model::plan::{self, Availability, PlanDecision, Policy, ProgramTraits, ThpMode};
use hugetune_model::rank::{self, Prediction, Significance};
use hugetune_model::stats;
use hugetune_model::stream::AnalysisOptions;
use hugetune_model::stream::{analyze_stream, present_categories, StreamSpec, StreamSummary};
use hugetune_model::tlb::TlbGeometry;
use hugetune_store::bundle::Section;
use hugetune_store::db::{Db, NewDirective};
use serde::{Deserialize, Serialize};
use std::cell::RefCell;
use std::ffi::OsString;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

/// The smallest predicted saving, as a fraction of the run time, worth huge pages.
pub const DEFAULT_MIN_GAIN: f64 = 0.01;

pub fn display_cmd(argv: &[OsString]) -> String {
    argv.iter()
        .map(|a| {
            let s = a.to_string_lossy();
            if s.is_empty() || s.contains(|c: char| c.is_whitespace() || "'\"$`\\".contains(c)) {
                format!("'{}'", s.replace('\'', "'\\''"))
            } else {
                s.into_owned()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

pub fn strings(argv: &[OsString]) -> Vec<String> {
    argv.iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect()
}

/// Splits a shell-like command string (for `--profile-cmd "CMD ARGS"`): words on
/// whitespace, with single and double quotes.
pub fn split_command(s: &str) -> Result<Vec<OsString>> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_word = false;
    let mut quote: Option<char> = None;
    for c in s.chars() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), c) => cur.push(c),
            (None, '\'' | '"') => {
                quote = Some(c);
                in_word = true;
            }
            (None, c) if c.is_whitespace() => {
                if in_word {
                    out.push(OsString::from(std::mem::take(&mut cur)));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        bail!("unbalanced quote in command '{s}'");
    }
    if in_word {
        out.push(OsString::from(cur));
    }
    if out.is_empty() {
        bail!("empty command");
    }
    Ok(out)
}

pub fn program_of(argv: &[OsString]) -> Result<Program> {
    let first = argv.first().context("empty command")?;
    let path = elf::resolve_program(first)
        .with_context(|| format!("cannot find the program '{}'", first.to_string_lossy()))?;
    let build_id = elf::build_id(&path).unwrap_or(None);
    Ok(Program {
        path: path.display().to_string(),
        build_id,
    })
}

pub fn note(msg: impl AsRef<str>) {
    eprintln!("hugetune: {}", msg.as_ref());
}

// ---------------------------------------------------------------- record

/// Where references come from. `auto` is perf where the PMU samples data
/// addresses, else qemu where `qemu-x86_64` is installed, else valgrind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum RefSource {
    /// perf if the PMU samples data addresses, else qemu if installed, else valgrind
    Auto,
    /// Hardware sampling (Intel PEBS, AMD IBS, ARM SPE) through perf: time-sampled
    Perf,
    /// QEMU user-mode emulation with hugetune's TCG plugin (fast; can sample)
    Qemu,
    /// Valgrind lackey (slow; every reference)
    Valgrind,
    /// DAMON region access frequencies of the process (no references)
    Damon,
}

/// `--refs auto`'s order (the issue's): perf where the PMU samples data addresses,
/// else qemu where installed, else valgrind, which every machine has.
pub fn auto_choice(perf_samples: bool, qemu_installed: bool) -> RefSource {
    if perf_samples {
        RefSource::Perf
    } else if qemu_installed {
        RefSource::Qemu
    } else {
        RefSource::Valgrind
    }
}

/// How `record` captures references.
#[derive(Debug, Clone, PartialEq)]
pub struct RefOptions {
    pub source: RefSource,
    /// SHARDS fixed-rate sampling at this rate (qemu only).
    pub rate: Option<f64>,
    /// SHARDS fixed-size sampling with at most this many pages (qemu only).
    pub max_pages: Option<u64>,
    /// The page hash's seed.
    pub seed: u64,
}

impl RefOptions {
    /// Valgrind lackey, every reference.
    pub fn valgrind() -> Self {
        RefOptions {
            source: RefSource::Valgrind,
            rate: None,
            max_pages: None,
            seed: 0,
        }
    }

    /// Every reference, for the model: `Auto` is QEMU's plugin where
    /// qemu-x86_64 is installed (fast), else valgrind lackey. Sampled and
    /// region sources are refused: the analysis needs the complete stream.
    pub fn complete(source: RefSource) -> Result<Self> {
        let source = match source {
            RefSource::Auto => {
                if qemu::find_qemu().is_some() {
                    RefSource::Qemu
                } else {
                    note(format!(
                        "qemu-x86_64 is not installed: profiling with valgrind lackey (slow); {} for the fast source",
                        qemu::INSTALL_HINT
                    ));
                    RefSource::Valgrind
                }
            }
            s @ (RefSource::Qemu | RefSource::Valgrind) => s,
            RefSource::Perf | RefSource::Damon => bail!(
                "--refs {}: the model needs every reference (qemu or valgrind); perf samples in time and DAMON sees regions",
                if source == RefSource::Perf { "perf" } else { "damon" }
            ),
        };
        Ok(RefOptions {
            source,
            ..Self::valgrind()
        })
    }

    /// The concrete source: `auto` decided, options checked.
    pub fn resolve(&self, art: &Artifacts) -> Result<Source> {
        let sampling = match (self.rate, self.max_pages) {
            (Some(_), Some(_)) => bail!("--rate and --max-pages exclude each other"),
            (Some(r), None) => {
                if !(r > 0.0 && r <= 1.0) {
                    bail!("--rate {r} is not in (0, 1]");
                }
                Sampling::Rate(r)
            }
            (None, Some(0)) => bail!("--max-pages must be at least 1"),
            (None, Some(s)) => Sampling::MaxPages(s),
            (None, None) => Sampling::Complete,
        };
        let sampling_is_qemus = |what: &str| -> Result<()> {
            if sampling != Sampling::Complete {
                bail!("--rate and --max-pages need the qemu source (--refs qemu); {what}");
            }
            Ok(())
        };
        let use_qemu = match self.source {
            RefSource::Valgrind => false,
            RefSource::Qemu => true,
            RefSource::Perf => {
                sampling_is_qemus("perf samples in time, at its own period")?;
                let support = perf::sampling_support();
                let Some(plan) = support.plan else {
                    bail!(
                        "perf cannot sample data addresses here: {}",
                        support.problems.join("; ")
                    );
                };
                return Ok(Source::Perf {
                    plan,
                    opts: perf::RecordOptions::default(),
                });
            }
            RefSource::Damon => {
                sampling_is_qemus("DAMON monitors regions, not references")?;
                return Ok(Source::Damon {
                    opts: DamonOptions::default(),
                });
            }
            RefSource::Auto => {
                let support = perf::sampling_support();
                let has_qemu = qemu::find_qemu().is_some();
                let wants_pages = sampling != Sampling::Complete;
                let choice = auto_choice(support.plan.is_some() && !wants_pages, has_qemu);
                if support.plan.is_none() {
                    note(format!(
                        "no hardware sampling of data addresses ({})",
                        support
                            .problems
                            .first()
                            .map_or("perf unusable", |p| p.as_str())
                    ));
                }
                match (choice, support.plan) {
                    (RefSource::Perf, Some(plan)) => {
                        note("the PMU samples data addresses: recording with perf (time-sampled)");
                        return Ok(Source::Perf {
                            plan,
                            opts: perf::RecordOptions::default(),
                        });
                    }
                    (RefSource::Qemu, _) => true,
                    _ => {
                        note(format!(
                            "qemu-x86_64 is not installed: using valgrind lackey (slow); {} for the fast source",
                            qemu::INSTALL_HINT
                        ));
                        false
                    }
                }
            }
        };
        if !use_qemu {
            sampling_is_qemus("valgrind traces every reference")?;
            return Ok(Source::Valgrind);
        }
        Ok(Source::Qemu {
            qemu: qemu::require_qemu()?,
            plugin: art.qemu_plugin.clone(),
            sampling,
            seed: self.seed,
        })
    }
}

/// Profiles `argv`: references from `refs` with the runtime library in record
/// mode, plus one uninstrumented run for its time and faults. Writes the bundle
/// to `out`.
pub fn record(
    art: &Artifacts,
    argv: &[OsString],
    out: &Path,
    refs: &RefOptions,
    tlb_override: Option<&Path>,
    show_output: bool,
    driver: Option<&Driver>,
) -> Result<ProfileMeta> {
    let program = program_of(argv)?;
    let source = refs.resolve(art)?;
    let dir = tempfile::Builder::new()
        .prefix("hugetune-record.")
        .tempdir()
        .context("creating a scratch directory")?;
    match &source {
        Source::Valgrind => note(format!(
            "profiling `{}` under valgrind lackey (slow: every reference is traced)",
            display_cmd(argv)
        )),
        Source::Perf { plan, .. } => note(format!(
            "profiling `{}` with perf ({:?}; time-sampled: the model cannot analyze this yet)",
            display_cmd(argv),
            plan.mechanism
        )),
        Source::Damon { .. } => note(format!(
            "monitoring `{}` with DAMON (region access frequencies; no references for the model)",
            display_cmd(argv)
        )),
        Source::Qemu { sampling, .. } => note(format!(
            "profiling `{}` under qemu with hugetune's plugin ({})",
            display_cmd(argv),
            match sampling {
                Sampling::Complete => "every reference".to_string(),
                Sampling::Rate(r) => format!("SHARDS fixed-rate, R = {r}"),
                Sampling::MaxPages(s) => format!("SHARDS fixed-size, at most {s} pages"),
            }
        )),
    }
    let tty = std::io::stderr().is_terminal();
    let rec = rec_mod::record(
        &source,
        &art.runtime_lib,
        argv,
        dir.path(),
        show_output,
        driver,
        &mut |seen, _written, pages, t| {
            if tty {
                if pages > 0 {
                    eprint!(
                        "\r  {:.1} M references seen, {} pages sampled, {:.0} s   ",
                        seen as f64 / 1e6,
                        pages,
                        t.as_secs_f64()
                    );
                } else {
                    eprint!(
                        "\r  {:.1} M references, {:.0} s   ",
                        seen as f64 / 1e6,
                        t.as_secs_f64()
                    );
                }
            }
        },
    )?;
    if tty {
        eprintln!();
    }
    let c = &rec.capture;
    if c.source == "damon" {
        note(format!(
            "DAMON monitored the run for {:.1} s; its region snapshots are the bundle's 'damon' section",
            c.elapsed.as_secs_f64()
        ));
    } else if c.instructions > 0 {
        note(format!(
            "captured {:.2} M data references ({:.2} M instructions) in {:.1} s",
            c.refs_written as f64 / 1e6,
            c.instructions as f64 / 1e6,
            c.elapsed.as_secs_f64()
        ));
    } else {
        note(format!(
            "captured {:.2} M of {:.2} M data references ({} pages, {}) in {:.1} s",
            c.refs_written as f64 / 1e6,
            c.refs_seen as f64 / 1e6,
            c.pages,
            c.sampling,
            c.elapsed.as_secs_f64()
        ));
    }
    let native = native_run(argv, driver)?;
    let meta = ProfileMeta {
        format: profile::FORMAT.into(),
        version: profile::META_VERSION,
        created_unix: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        command: strings(argv),
        program,
        ref_source: c.source.into(),
        ref_sampling: c.sampling.into(),
        refs: c.refs_written,
        instructions: c.instructions,
        capture_s: c.elapsed.as_secs_f64(),
        pid: rec.log.header.pid,
        native,
        machine: machine::machine(tlb_override)?,
        runtime_summary: rec.summary.clone(),
        ref_stream: None,
    };
    let log_bytes = std::fs::read(&rec.log_path)?;
    let refs = match &rec.refs_path {
        Some(p) => Some(std::fs::read(p)?),
        None => None,
    };
    let extra = rec
        .extra
        .iter()
        .map(|(name, data)| Section {
            name: name.clone(),
            data: data.clone(),
        })
        .collect();
    profile::write(out, &meta, &log_bytes, refs, extra)
}

/// `: why` a server's session failed, or nothing.
pub fn session_why(r: &RunStats) -> String {
    r.session_error
        .as_deref()
        .map_or(String::new(), |e| format!(": {e}"))
}

/// The uninstrumented time of a command: the median of three runs when it is short
/// (short runs are noisy), one run otherwise.
fn native_run(argv: &[OsString], driver: Option<&Driver>) -> Result<RunStats> {
    let mut spec = RunSpec::new(argv.to_vec());
    spec.stdout = Output::Null;
    spec.driver = driver.cloned();
    let mut runs: Vec<RunStats> = Vec::new();
    while runs.len() < 3 && runs.first().is_none_or(|r| r.wall_s < 2.0) {
        let r = runner::run(&spec).context("running the profiled command natively")?;
        if r.exit_code != 0 {
            bail!(
                "the profiled command exited with status {} when run natively{}",
                r.exit_code,
                session_why(&r)
            );
        }
        runs.push(r);
    }
    runs.sort_by(|a, b| a.wall_s.total_cmp(&b.wall_s));
    Ok(runs.swap_remove(runs.len() / 2))
}

// ---------------------------------------------------------------- analyze

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
    let refs_iter = || -> Result<_> {
        let mut r = RefReader::new(&refs[..]).context("reading the reference stream")?;
        let err = &stream_error;
        Ok(std::iter::from_fn(move || match r.next_ref() {
            Ok(Some((a, _))) => Some(a),
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
    let id = db.insert_profile(program, Some(m), &args, bundle, &summary, &directives)?;
    Ok((id, program, m))
}

pub fn machine_id(db: &Db, m: &Machine) -> Result<i64> {
    let fp = format!("{}|{}|{}", m.hostname, m.cpu.brand, m.kernel);
    db.upsert_machine(
        &fp,
        &m.hostname,
        &m.cpu.brand,
        &m.kernel,
        &serde_json::to_value(m)?,
    )
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
    if !path.exists() {
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
    let Some(sp) = db.profile_for_input(program_id, &strings(argv))? else {
        return Ok(None);
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
    let lost = v.verdict == Verdict::Loss;
    let c = db.record_validation(profile_id, &p.label, v.agreement(p.predicted_speedup), lost)?;
    if lost {
        note(format!(
            "{} measured a loss: it will not be applied again automatically",
            p.label
        ));
    }
    Ok(Some(c))
}

// ---------------------------------------------------------------- plan

pub fn availability_now() -> Availability {
    Availability {
        hugetlb_2m_free: machine::pool(2048).map_or(0, |p| p.available()),
        hugetlb_2m_total: machine::pool(2048).map_or(0, |p| p.nr),
        hugetlb_1g_free: machine::pool(1 << 20).map_or(0, |p| p.available()),
        thp: machine::thp_mode(Path::new(machine::THP_SYSFS)).unwrap_or(ThpMode::Never),
        mthp: machine::mthp_usable(Path::new(machine::THP_SYSFS)),
        // Free 2 MB blocks within the watermarks (/proc/buddyinfo, zoneinfo): no
        // scan, no root; unknown when the files cannot be read.
        thp_2m_allocatable: frag::snapshot::take(&Default::default(), false)
            .ok()
            .map(|s| s.totals.allocatable_2m_now),
    }
}

/// The mappings worth evaluating on this machine: heap-large on 1 GB pages when
/// the kernel has them, on every mTHP size usable now.
pub fn analysis_options(simulate: bool) -> AnalysisOptions {
    AnalysisOptions {
        gigantic: machine::pool(1 << 20).is_some(),
        mthp: machine::mthp_usable(Path::new(machine::THP_SYSFS)),
        simulate,
        sites: vec![],
        threads: 0,
    }
}

/// Peak 2 MB pages the runtime library will hold for heap-large objects when
/// `argv` runs, measured by one record-mode run (no reference tracing). It also
/// warms the machine up before timed runs.
pub fn sizing_run(art: &Artifacts, argv: &[OsString], driver: Option<&Driver>) -> Result<Sizing> {
    let dir = tempfile::Builder::new()
        .prefix("hugetune-size.")
        .tempdir()?;
    let log = dir.path().join("alloc.%p.log");
    let mut spec = RunSpec::new(argv.to_vec());
    spec.env = launch::record_env(&launch::RecordEnv {
        lib: &art.runtime_lib,
        log: Some(&log),
        summary: None,
        markers: false,
    });
    spec.driver = driver.cloned();
    let stats = runner::run(&spec)?;
    if stats.exit_code != 0 {
        bail!(
            "the command exited with status {} in the sizing run{}",
            stats.exit_code,
            session_why(&stats)
        );
    }
    let mut out = Sizing {
        heap_large_pages: 0,
        heap_small_peak_bytes: 0,
        program: ProgramTraits::default(),
    };
    // One log per process and image: children forked by the program add their own
    // peaks (they run at the same time as the parent in the worst case).
    for e in std::fs::read_dir(dir.path())?.flatten() {
        let l = AllocLog::read(&e.path())?;
        let inputs = inputs_from_log(&l);
        let mut c = Categorizer::new(inputs.space, inputs.threshold);
        for ev in &inputs.events {
            c.apply(ev);
        }
        out.heap_large_pages += c.peak_owned_frames();
        out.heap_small_peak_bytes += c.stats()[Category::HeapSmall.index()].peak_live_bytes;
        out.program.forks |= inputs.forks;
        out.program.fork_children += inputs.children.len() as u64;
    }
    Ok(out)
}

/// What the untimed record-mode run of the reference input showed.
pub struct Sizing {
    /// Peak 2 MB pages the runtime library would hold for heap-large blocks.
    pub heap_large_pages: u64,
    /// Peak live bytes of heap-small objects (malloc below the threshold).
    pub heap_small_peak_bytes: u64,
    /// Whether the reference input forks (an input the profile did not see may).
    pub program: ProgramTraits,
}

impl Sizing {
    /// Pool pages the heap-small arena needs on the reference input: its peak
    /// live bytes at the training profile's pages per byte (`training`: its
    /// heap-small peak live bytes and the pages its `heap-small:hugetlb`
    /// prediction needs; the ratio includes the arena's chunk spacing and
    /// per-thread regions), else at one page per 2 MB plus an eighth.
    pub fn heap_small_pages(&self, training: Option<(u64, u64)>) -> u64 {
        if self.heap_small_peak_bytes == 0 {
            return 0;
        }
        let frame = 2.0 * 1024.0 * 1024.0;
        let per_byte = match training {
            Some((bytes, pages)) if bytes > 0 && pages > 0 => {
                (pages as f64 / bytes as f64).max(1.0 / frame)
            }
            _ => 1.125 / frame,
        };
        (self.heap_small_peak_bytes as f64 * per_byte).ceil() as u64
    }
}

/// The training profile's heap-small peak live bytes and the pool pages its
/// `heap-small:hugetlb` prediction needs (for `Sizing::heap_small_pages`).
pub fn heap_small_training(result: &AnalysisResult, preds: &[Prediction]) -> Option<(u64, u64)> {
    let pages = preds
        .iter()
        .find(|p| p.assignments == [(Category::HeapSmall, Backing::Hugetlb2m)])?
        .hugetlb_pages;
    Some((
        result.alloc_stats[Category::HeapSmall.index()].peak_live_bytes,
        pages,
    ))
}

/// Adjusts predictions of a training profile to the pool pages the reference
/// run needs: heap-large's from the sizing run's peak, heap-small's arena pages
/// from `heap_small_pages` (`Sizing::heap_small_pages`).
pub fn with_reference_pages(
    preds: &[Prediction],
    heap_large_pages: u64,
    heap_small_pages: u64,
) -> Vec<Prediction> {
    preds
        .iter()
        .cloned()
        .map(|mut p| {
            let has = |c, b| p.assignments.contains(&(c, b));
            let large_2m = has(Category::HeapLarge, Backing::Hugetlb2m);
            let large_1g = has(Category::HeapLarge, Backing::Hugetlb1g);
            let small = has(Category::HeapSmall, Backing::Hugetlb2m);
            if !(large_2m || large_1g || small) {
                return p;
            }
            let mut pages = 0;
            if large_2m {
                pages += heap_large_pages;
            }
            // On 1 GB pages: whole gigabytes, the rest on 2 MB pages (the
            // library's 1 GB layout), from the reference input's 2 MB count.
            if large_1g {
                p.hugetlb_1g_pages = heap_large_pages / 512;
                pages += heap_large_pages % 512;
            }
            if small {
                pages += heap_small_pages;
            }
            p.hugetlb_pages = pages;
            p
        })
        .collect()
}

// ---------------------------------------------------------------- run / validate

pub struct Applied {
    /// Holds the plan file and the runtime library's summaries.
    pub dir: tempfile::TempDir,
    pub spec: RunSpec,
}

/// The optimized run's spec: the plan file written, the runtime library preloaded.
pub fn applied_spec(
    art: &Artifacts,
    argv: &[OsString],
    assignments: &[(Category, Backing)],
    threshold: u64,
    options: &PlanOptions,
    stdout: Output,
) -> Result<Applied> {
    let dir = tempfile::Builder::new().prefix("hugetune-run.").tempdir()?;
    let plan_file = dir.path().join("plan");
    std::fs::write(
        &plan_file,
        launch::plan_text_with(assignments, threshold, options),
    )?;
    let summary = dir.path().join("summary.%p.json");
    let mut spec = RunSpec::new(argv.to_vec());
    spec.env = launch::apply_env(&art.runtime_lib, &plan_file, Some(&summary), assignments);
    spec.stdout = stdout;
    Ok(Applied { dir, spec })
}

/// Touches and frees `bytes` of anonymous memory (untimed, before a timed run). On a
/// VM that hands free memory back to its host (free page reporting), a process that
/// happens to get memory the host took back pays for it on first touch, several
/// times the fault cost (docs/model.md §4), and which run gets such memory is chance.
/// Freed just before the run, this memory is what the kernel hands out next, so
/// every configuration starts on memory the host backs.
pub fn warm_memory(bytes: u64) {
    // Never more than half of what is available: warming must not push anything out.
    let bytes = bytes.min(machine::mem_available_kb().unwrap_or(0) * 1024 / 2);
    if bytes == 0 {
        return;
    }
    let len = bytes as usize;
    // SAFETY: a fresh private anonymous mapping, written only within its length
    // and unmapped before returning; nothing else refers to it.
    unsafe {
        let p = libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        );
        if p == libc::MAP_FAILED {
            return;
        }
        libc::madvise(p, len, libc::MADV_NOHUGEPAGE);
        let base = p as *mut u8;
        for off in (0..len).step_by(4096) {
            base.add(off).write_volatile(1);
        }
        libc::munmap(p, len);
    }
}

/// Collects (and removes) the runtime library summaries written in `dir`.
pub fn take_summaries(dir: &Path) -> Vec<serde_json::Value> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else {
        return out;
    };
    let mut paths: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| n.to_string_lossy().starts_with("summary."))
        })
        .collect();
    paths.sort();
    for p in paths {
        if let Ok(t) = std::fs::read_to_string(&p) {
            match serde_json::from_str(&t) {
                Ok(v) => out.push(v),
                Err(e) => note(format!(
                    "runtime summary {} is not valid JSON: {e}",
                    p.display()
                )),
            }
        }
        let _ = std::fs::remove_file(&p);
    }
    out
}

/// Huge bytes the runtime library says it backed, summed over processes:
/// hugetlb bytes plus THP bytes verified in smaps.
pub fn summary_huge_bytes(summaries: &[serde_json::Value]) -> u64 {
    summaries
        .iter()
        .filter_map(|s| Summary::from_value(s).ok())
        .map(|s| s.huge_bytes())
        .sum()
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Validation {
    /// Pairs run (each: one baseline, one optimized), as `RunCount` decided.
    pub runs: usize,
    pub run_count: RunCount,
    /// 95 % bootstrap confidence interval of the speedup.
    pub speedup_ci: (f64, f64),
    pub baseline_s: Vec<f64>,
    pub optimized_s: Vec<f64>,
    pub baseline_median_s: f64,
    pub optimized_median_s: f64,
    pub speedup: f64,
    pub verdict: Verdict,
    /// One-sided exact Mann-Whitney p-value for "optimized runs are faster".
    pub p_gain: f64,
    pub baseline_minor_faults: u64,
    pub optimized_minor_faults: u64,
    /// Median over optimized runs of the peak huge memory seen in /proc.
    pub huge_bytes_proc: u64,
    /// Median over optimized runs of what the runtime library reports backed.
    pub huge_bytes_runtime: u64,
    pub baseline_huge_bytes_proc: u64,
    pub runtime_summaries: Vec<serde_json::Value>,
    pub exit_codes_match: bool,
    /// Anonymous folios faulted in per optimized run, per folio size in kB,
    /// from the kernel's per-size counters (Linux 6.9+; empty before): the
    /// proof that mTHP and THP sizes were really used.
    #[serde(default)]
    pub folio_faults_per_run: Vec<(u64, u64)>,
    /// Bytes of the process in large folios, per folio size in kB, at the
    /// largest census of a run (median over optimized runs; pagemap +
    /// kpageflags, root only): mTHP sizes that smaps_rollup does not show.
    #[serde(default)]
    pub folio_bytes: Vec<(u64, u64)>,
}

impl Validation {
    /// How well the measured gain bore out a predicted speedup (see
    /// [`agreement`]).
    pub fn agreement(&self, predicted_speedup: f64) -> f64 {
        agreement(predicted_speedup, self.speedup, self.speedup_ci)
    }
}

/// How well a measured speedup (median, with its 95 % interval) bore out a
/// predicted one, 0..=1. A prediction inside the interval, or a measured gain at
/// least as large as the predicted one, agrees (1): the directive kept its
/// promise, and de-emphasizing it would only favour mappings never validated.
/// A shortfall falls linearly to 0 when the measured gain (fraction of time
/// saved) is short of the predicted one by as much as the predicted gain (at
/// least 2 % of the time).
pub fn agreement(predicted_speedup: f64, measured_speedup: f64, ci: (f64, f64)) -> f64 {
    let (lo, hi) = ci;
    if predicted_speedup >= lo && predicted_speedup <= hi {
        return 1.0;
    }
    let gain = |s: f64| 1.0 - 1.0 / s;
    let (gp, gm) = (gain(predicted_speedup), gain(measured_speedup));
    if gm >= gp {
        return 1.0;
    }
    let a = 1.0 - (gp - gm) / gp.abs().max(0.02);
    if a.is_finite() {
        a.clamp(0.0, 1.0)
    } else {
        0.0
    }
}

pub fn validate(
    art: &Artifacts,
    argv: &[OsString],
    assignments: &[(Category, Backing)],
    threshold: u64,
    options: &PlanOptions,
    count: RunCount,
    driver: Option<&Driver>,
) -> Result<Validation> {
    let mut applied = applied_spec(art, argv, assignments, threshold, options, Output::Null)?;
    applied.spec.driver = driver.cloned();
    // SAFETY: geteuid has no preconditions.
    applied.spec.folio_census = unsafe { libc::geteuid() } == 0;
    let mut baseline = RunSpec::new(argv.to_vec());
    baseline.stdout = Output::Null;
    baseline.driver = driver.cloned();
    let dir = applied.dir.path().to_path_buf();
    if !assignments.is_empty() {
        // Memory first touched since it was given back (freshly reserved hugetlb
        // pages; in VMs with free page reporting, any memory the host reclaimed)
        // is slow once. Pay that outside the timed runs, as the baseline's warm-up
        // (the sizing run) does for 4 KB pages.
        note("warm-up run with the plan applied (not timed)");
        let w = runner::run(&applied.spec)?;
        take_summaries(&dir);
        if w.exit_code != 0 {
            note(format!(
                "warning: the warm-up run exited with status {}{}",
                w.exit_code,
                session_why(&w)
            ));
        }
    }
    let mut per_run_runtime: Vec<u64> = Vec::new();
    // Folio counters just before and after each optimized run.
    let thp_root = Path::new(machine::THP_SYSFS);
    let before = RefCell::new(Vec::new());
    let mut folio_faults: Vec<(u64, u64)> = Vec::new();
    let upto = if count.max > count.min {
        format!("{}..{}", count.min, count.max)
    } else {
        count.max.to_string()
    };
    let r: AbResult = ab::interleaved(
        &baseline,
        &applied.spec,
        count,
        || {
            for (kb, n) in machine::folio_fault_counts(thp_root) {
                let was = before
                    .borrow()
                    .iter()
                    .find(|(k, _)| *k == kb)
                    .map_or(n, |&(_, c)| c);
                match folio_faults.iter_mut().find(|(k, _)| *k == kb) {
                    Some(e) => e.1 += n.saturating_sub(was),
                    None => folio_faults.push((kb, n.saturating_sub(was))),
                }
            }
            let s = take_summaries(&dir);
            per_run_runtime.push(summary_huge_bytes(&s));
            Some(serde_json::Value::Array(s))
        },
        |which, i, s| {
            if which == "baseline" {
                *before.borrow_mut() = machine::folio_fault_counts(thp_root);
            }
            note(format!(
                "{which} run {}/{upto}: {:.3} s, {} minor faults, {} huge",
                i + 1,
                s.wall_s,
                s.minor_faults,
                hugetune_render::bytes(s.peak.huge())
            ))
        },
    )?;
    let runs = r.optimized.len();
    let codes_match = r
        .baseline
        .iter()
        .chain(&r.optimized)
        .all(|s| s.exit_code == r.baseline[0].exit_code);
    if !codes_match {
        note("warning: exit statuses differ between runs");
    }
    // A failed session's time is the time to fail: nothing to compare.
    for (which, runs) in [("baseline", &r.baseline), ("optimized", &r.optimized)] {
        if let Some(e) = runs.iter().find_map(|s| s.session_error.as_deref()) {
            bail!("a {which} run's server session failed: {e}");
        }
    }
    let b: Vec<f64> = r.baseline.iter().map(|s| s.wall_s).collect();
    let o: Vec<f64> = r.optimized.iter().map(|s| s.wall_s).collect();
    let (bm, om) = (stats::median(&b), stats::median(&o));
    Ok(Validation {
        runs,
        run_count: count,
        speedup_ci: stats::speedup_ci(&b, &o),
        folio_bytes: {
            let mut sizes: Vec<u64> = r
                .optimized
                .iter()
                .flat_map(|s| s.peak_folios.iter().map(|&(kb, _)| kb))
                .collect();
            sizes.sort_unstable();
            sizes.dedup();
            sizes
                .into_iter()
                .map(|kb| {
                    let per_run = r.optimized.iter().map(|s| {
                        s.peak_folios
                            .iter()
                            .find(|(k, _)| *k == kb)
                            .map_or(0, |&(_, b)| b)
                    });
                    (kb, stats::median_u64(per_run))
                })
                .collect()
        },
        folio_faults_per_run: folio_faults
            .into_iter()
            .filter(|&(_, n)| n > 0)
            .map(|(kb, n)| (kb, n / runs.max(1) as u64))
            .collect(),
        verdict: ab::verdict(&b, &o),
        p_gain: stats::mann_whitney_p(&o, &b),
        speedup: bm / om,
        baseline_median_s: bm,
        optimized_median_s: om,
        baseline_s: b,
        optimized_s: o,
        baseline_minor_faults: stats::median_u64(r.baseline.iter().map(|s| s.minor_faults)),
        optimized_minor_faults: stats::median_u64(r.optimized.iter().map(|s| s.minor_faults)),
        huge_bytes_proc: stats::median_u64(r.optimized.iter().map(|s| s.peak.huge())),
        huge_bytes_runtime: stats::median_u64(per_run_runtime.into_iter()),
        baseline_huge_bytes_proc: stats::median_u64(r.baseline.iter().map(|s| s.peak.huge())),
        runtime_summaries: r.summaries,
        exit_codes_match: codes_match,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A validation agrees when the prediction lies in the measured interval or
    /// the measured gain is at least the predicted one; a shortfall lowers it in
    /// proportion to the predicted gain.
    #[test]
    fn agreement_penalizes_shortfalls_only() {
        // inside the interval
        assert_eq!(agreement(1.10, 1.12, (1.05, 1.15)), 1.0);
        // measured more than promised (optimize measured 2.13x where 1.05x was predicted)
        assert_eq!(agreement(1.05, 2.13, (1.59, 2.38)), 1.0);
        // measured half the predicted gain: gains 0.5 vs 0.25 -> 0.5
        let a = agreement(2.0, 1.0 / 0.75, (1.30, 1.36));
        assert!((a - 0.5).abs() < 1e-9, "{a}");
        // no gain at all where 1.5x was predicted
        assert_eq!(agreement(1.5, 1.0, (0.98, 1.02)), 0.0);
        // a loss measured
        assert_eq!(agreement(1.2, 0.8, (0.75, 0.85)), 0.0);
        // predicted nothing, measured 1 % more time: short by 1 % of at least 2 %
        let a = agreement(1.0, 1.0 / 1.01, (0.985, 0.995));
        assert!((a - 0.5).abs() < 1e-9, "{a}");
    }

    /// A calibration replaces the figures it has and leaves the others at their
    /// defaults; names it does not know are ignored, not guessed.
    #[test]
    fn calibration_becomes_the_cost_model() {
        let c: Calibration = serde_json::from_value(serde_json::json!({
            "l2_hit_ns": [1.5, 1.6, 1.7],
            "walk_curve": [[[262144.0, 20.0], [1048576.0, 40.0]], [], []],
            "fault_ns": [["4k", 1500.0], ["hugetlb-1g", 46e6], ["thp-3m", 1.0]],
            "sources": [],
            "machine": "test",
            "created": "2026-11-22T00:00:00Z"
        }))
        .unwrap();
        let m = cost_from_calibration(&c);
        m.validate().unwrap();
        let d = CostModel::default();
        assert_eq!(m.l2_hit_ns, [1.5, 1.6, 1.7]);
        assert_eq!(m.walk_curve[0], vec![(262144.0, 20.0), (1048576.0, 40.0)]);
        assert_eq!(
            m.walk_curve[1], d.walk_curve[1],
            "no 2 MB curve: default kept"
        );
        assert_eq!(m.fault(Backing::Base4k), 1500.0);
        assert_eq!(m.fault(Backing::Hugetlb1g), 46e6);
        assert_eq!(m.fault(Backing::Thp2m), d.fault(Backing::Thp2m));
        assert!(m.source.contains("calibrate"));
    }

    /// Pool pages for the reference input: heap-large's from the sizing run,
    /// heap-small's from its peak bytes at the training profile's pages per
    /// byte; both add up in a mapping that has both.
    #[test]
    fn reference_pages_for_heap_large_and_the_heap_small_arena() {
        let pred = |a: Vec<(Category, Backing)>, pages| Prediction {
            mapping: String::new(),
            label: hugetune_model::rank::label(&a),
            base: true,
            assignments: a,
            miss_time_ns: 0.0,
            saving_ns: 1.0,
            pmb: 100.0,
            predicted_seconds: 1.0,
            predicted_speedup: 1.0,
            hugetlb_pages: pages,
            hugetlb_1g_pages: 0,
            thp_pages: 0,
            sites: vec![],
            walks: 0,
            faults: 0,
        };
        use Backing::*;
        use Category::*;
        let preds = vec![
            pred(vec![(HeapSmall, Hugetlb2m)], 6),
            pred(vec![(HeapSmall, Backing::Thp2m)], 0),
            pred(vec![(HeapLarge, Hugetlb2m)], 3),
            pred(vec![(HeapSmall, Hugetlb2m), (HeapLarge, Hugetlb2m)], 9),
            pred(vec![(HeapLarge, Hugetlb1g)], 0),
        ];
        let sizing = Sizing {
            heap_large_pages: 1100,
            heap_small_peak_bytes: 1 << 30,
            program: ProgramTraits::default(),
        };
        // Training: 6 pages for 10 MiB of live objects (0.6 pages per MiB,
        // more than the 0.5 of bare 2 MB frames): 1 GiB needs 615 pages.
        let small = sizing.heap_small_pages(Some((10 << 20, 6)));
        assert_eq!(small, 615);
        // Without a training ratio: 2 MB frames plus an eighth.
        assert_eq!(sizing.heap_small_pages(None), 576);
        assert_eq!(sizing.heap_small_pages(Some((0, 6))), 576);
        // Fewer pages per byte than bare frames is not believed.
        assert_eq!(sizing.heap_small_pages(Some((1 << 30, 1))), 512);
        let r = with_reference_pages(&preds, sizing.heap_large_pages, small);
        let pages: Vec<(u64, u64)> = r
            .iter()
            .map(|p| (p.hugetlb_pages, p.hugetlb_1g_pages))
            .collect();
        assert_eq!(pages, vec![(615, 0), (0, 0), (1100, 0), (1715, 0), (76, 2)]);
        let none = Sizing {
            heap_small_peak_bytes: 0,
            ..sizing
        };
        assert_eq!(none.heap_small_pages(Some((10 << 20, 6))), 0);
    }

    /// optimize's profile: every reference, never a sampled or region source.
    #[test]
    fn complete_refs_are_qemu_or_valgrind() {
        let auto = RefOptions::complete(RefSource::Auto).unwrap().source;
        let want = if qemu::find_qemu().is_some() {
            RefSource::Qemu
        } else {
            RefSource::Valgrind
        };
        assert_eq!(auto, want);
        for s in [RefSource::Qemu, RefSource::Valgrind] {
            let o = RefOptions::complete(s).unwrap();
            assert_eq!((o.source, o.rate, o.max_pages), (s, None, None));
        }
        for s in [RefSource::Perf, RefSource::Damon] {
            let e = RefOptions::complete(s).unwrap_err().to_string();
            assert!(e.contains("every reference"), "{e}");
        }
    }

    #[test]
    fn auto_prefers_perf_then_qemu_then_valgrind() {
        assert_eq!(auto_choice(true, true), RefSource::Perf);
        assert_eq!(auto_choice(true, false), RefSource::Perf);
        assert_eq!(auto_choice(false, true), RefSource::Qemu);
        assert_eq!(auto_choice(false, false), RefSource::Valgrind);
    }
}
