//! `hugetune report`: a profile's predictions, its runs' measurements and ranking
//! experiments, as a terminal summary, JSON, or a self-contained HTML page with
//! plots. Reads the database only.

use crate::cmd::rank::RankReport;
use crate::report::view::{Compared, ComparedSet, Report};
use crate::stages;
use crate::Ctx;
use anyhow::{bail, Context, Result};
use hugetune_store::db::Db;
use hugetune_store::query::{DirectiveRow, ProfileRow, RunRow};
use std::ffi::OsString;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    /// The profile to report (with its directives and runs)
    #[arg(long, value_name = "ID", conflicts_with_all = ["run", "command"])]
    profile: Option<i64>,
    /// The run to report (with the profile it applied)
    #[arg(long, value_name = "ID", conflicts_with = "command")]
    run: Option<i64>,
    /// `hugetune rank --json` output (one report, or one per line): adds its
    /// predicted vs measured times per mapping
    #[arg(long, value_name = "FILE")]
    rank: Option<PathBuf>,
    /// Write a self-contained HTML page with plots to FILE
    #[arg(long, value_name = "FILE")]
    html: Option<PathBuf>,
    /// Print everything the page shows as JSON
    #[arg(long)]
    json: bool,
    /// A command: report the newest profile of the program it runs
    #[arg(last = true)]
    command: Vec<OsString>,
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    let mut report = if a.profile.is_some() || a.run.is_some() || !a.command.is_empty() {
        from_db(&open_existing(&ctx.db_path)?, &a)?
    } else if a.rank.is_some() {
        let mut r = Report::assemble(None, &[], &[]);
        r.title = "hugetune report: ranking experiment".into();
        r
    } else {
        bail!("say what to report: --profile ID, --run ID, -- CMD ARGS, or --rank FILE");
    };
    if let Some(path) = &a.rank {
        report.compared.extend(rank_sets(path)?);
    }
    if let Some(path) = &a.html {
        std::fs::write(path, report.html())
            .with_context(|| format!("writing {}", path.display()))?;
        stages::note(format!("wrote {}", path.display()));
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else if a.html.is_none() {
        print!("{}", report.terminal());
    }
    Ok(0)
}

/// The database, which a report never creates.
fn open_existing(path: &Path) -> Result<Db> {
    if !Db::exists(path) {
        bail!(
            "no database at {} (profiles and runs are stored there by `hugetune optimize`, `analyze` and `validate`)",
            path.display()
        );
    }
    Db::open(path)
}

fn from_db(db: &Db, a: &Args) -> Result<Report> {
    let (profile, runs): (Option<ProfileRow>, Vec<RunRow>) = if let Some(id) = a.run {
        let run = db
            .run(id)?
            .with_context(|| format!("no run with id {id} in {}", db.path().display()))?;
        let profile = match run.profile_id {
            Some(p) => db.profile(p)?,
            None => None,
        };
        (profile, vec![run])
    } else {
        let id = match a.profile {
            Some(id) => id,
            None => newest_profile(db, &a.command)?,
        };
        let profile = db
            .profile(id)?
            .with_context(|| format!("no profile with id {id} in {}", db.path().display()))?;
        let runs = db.runs_of_profile(id)?;
        (Some(profile), runs)
    };
    let directives: Vec<DirectiveRow> = match &profile {
        Some(p) => db.directive_rows(p.id)?,
        None => vec![],
    };
    let mut r = Report::assemble(profile.as_ref(), &directives, &runs);
    if profile.is_none() {
        r.notes.push(format!(
            "run {} has no stored profile (it was removed, or the run had none): no predictions",
            runs[0].id
        ));
    }
    Ok(r)
}

/// The newest profile of the program `argv` runs (as `stages::stored_predictions`
/// resolves it: path and build-id).
fn newest_profile(db: &Db, argv: &[OsString]) -> Result<i64> {
    let program = stages::program_of(argv)?;
    let bid = program.build_id.as_deref();
    let id = match db.find_program(&program.path, bid)? {
        Some(p) => db.newest_profile_id(p)?,
        None => None,
    };
    id.with_context(|| {
        format!(
            "no profile of {}{} in {}: run `hugetune optimize -- {}` first",
            program.path,
            bid.map_or(String::new(), |b| format!(" (build-id {b})")),
            db.path().display(),
            stages::display_cmd(argv)
        )
    })
}

/// The ranking experiments in `path`: one JSON report, or one per line (as
/// `experiments/ranking.py` collects them).
fn rank_sets(path: &Path) -> Result<Vec<ComparedSet>> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    let reports: Vec<RankReport> = match serde_json::from_str::<RankReport>(&text) {
        Ok(r) => vec![r],
        Err(_) => text
            .lines()
            .enumerate()
            .filter(|(_, l)| !l.trim().is_empty())
            .map(|(i, l)| {
                serde_json::from_str(l).with_context(|| {
                    format!(
                        "{} line {} is not `hugetune rank --json` output",
                        path.display(),
                        i + 1
                    )
                })
            })
            .collect::<Result<_>>()?,
    };
    if reports.is_empty() {
        bail!("{} holds no ranking experiment", path.display());
    }
    Ok(reports.iter().map(rank_set).collect())
}

fn rank_set(r: &RankReport) -> ComparedSet {
    ComparedSet {
        source: format!("rank: {}", r.name),
        mappings: r
            .mappings
            .iter()
            .map(|m| {
                // measured_speedup is the all-small median over this mapping's.
                let baseline = m.measured_median_s * m.measured_speedup;
                Compared::new(
                    m.label.clone(),
                    baseline,
                    m.predicted_speedup,
                    m.measured_median_s,
                )
            })
            .collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LINE: &str = r#"{"name": "w", "command": ["x"], "runs": 5, "refs": 10, "significance_passes": true, "tlb_misses_per_s": 1.0, "faults_per_s": 1.0, "mappings": [{"label": "all-small", "predicted_saving_ms": 0.0, "predicted_pmb": 0.0, "predicted_speedup": 1.0, "measured_median_s": 0.2, "measured_min_s": 0.2, "measured_max_s": 0.3, "measured_pmb": 0.0, "measured_speedup": 1.0, "huge_bytes": 0, "walks": 1, "sim_walks": null}, {"label": "heap-large:hugetlb", "predicted_saving_ms": 90.0, "predicted_pmb": 100.0, "predicted_speedup": 2.0, "measured_median_s": 0.08, "measured_min_s": 0.08, "measured_max_s": 0.09, "measured_pmb": 100.0, "measured_speedup": 2.5, "huge_bytes": 1, "walks": 1, "sim_walks": 1}], "ranking_error": 1.0, "best_agrees": true, "geometry": "g", "cost_source": "c"}"#;

    #[test]
    fn rank_files_one_report_or_lines() {
        let d = tempfile::tempdir().unwrap();
        let one = d.path().join("one.json");
        std::fs::write(&one, LINE).unwrap();
        let sets = rank_sets(&one).unwrap();
        assert_eq!(sets.len(), 1);
        assert_eq!(sets[0].source, "rank: w");
        let hl = &sets[0].mappings[1];
        assert!((hl.baseline_s - 0.2).abs() < 1e-12);
        assert!((hl.predicted_s - 0.1).abs() < 1e-12);
        assert!((hl.measured_s - 0.08).abs() < 1e-12);
        let lines = d.path().join("many.jsonl");
        std::fs::write(&lines, format!("{LINE}\n\n{LINE}\n")).unwrap();
        assert_eq!(rank_sets(&lines).unwrap().len(), 2);
        let bad = d.path().join("bad.jsonl");
        std::fs::write(&bad, format!("{LINE}\n{{\"name\": 1}}\n")).unwrap();
        let e = format!("{:#}", rank_sets(&bad).unwrap_err());
        assert!(
            e.contains("line 2 is not `hugetune rank --json` output"),
            "{e}"
        );
        let empty = d.path().join("empty");
        std::fs::write(&empty, "\n").unwrap();
        assert!(format!("{:#}", rank_sets(&empty).unwrap_err()).contains("no ranking"));
    }

    /// The repository's own ranking results parse.
    #[test]
    fn the_recorded_experiments_parse() {
        let p =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../../experiments/results/ranking.jsonl");
        let sets = rank_sets(&p).unwrap();
        assert!(sets.len() >= 10);
        assert!(sets.iter().all(|s| s.mappings.len() >= 2));
    }
}
