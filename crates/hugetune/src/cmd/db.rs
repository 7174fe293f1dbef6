//! `hugetune db`: list, show, remove, export and import database entries, and
//! sync a host's own database with a fleet's PostgreSQL store.
//!
//! Invariants: only `import` and `sync` create a database file; the others read
//! one that exists (a server is asked when opened).

use crate::Ctx;
use anyhow::{bail, Context, Result};
use hugetune_render::table;
use hugetune_store::db::{hide_password, is_url, Db};
use hugetune_store::exchange::ImportCounts;
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// List profiles, runs and calibrations
    Ls {
        /// Print the list as JSON
        #[arg(long)]
        json: bool,
    },
    /// Show one entry as JSON: `db show profile 3`, `db show run 7`, `db show calibration 1`
    Show {
        /// program, profile, run or calibration
        kind: String,
        /// Its id (`db ls`)
        id: i64,
    },
    /// Remove an entry: `db rm run 7`; a program or profile takes its directives and runs along
    Rm {
        /// program, profile, run or calibration
        kind: String,
        /// Its id (`db ls`)
        id: i64,
    },
    /// Write the whole database as one JSON document (to a file, or standard output)
    Export {
        /// Write to FILE instead of standard output
        #[arg(short, long, value_name = "FILE")]
        output: Option<PathBuf>,
    },
    /// Merge an export into this database (entries already present are skipped)
    Import {
        /// A `db export` document
        file: PathBuf,
    },
    /// Push this database's history to a fleet's PostgreSQL store and pull what this
    /// host's machine class learned there; running it again changes nothing
    Sync {
        /// The fleet store: postgresql://user@host:port/dbname
        #[arg(long, value_name = "URL")]
        to: String,
        /// Print the counts as JSON
        #[arg(long)]
        json: bool,
    },
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    // Only an import or a sync creates a database; the rest read one that exists.
    if !matches!(a.action, Action::Import { .. } | Action::Sync { .. }) && !Db::exists(&ctx.db_path)
    {
        if let Action::Ls { json } = a.action {
            if json {
                println!("[]");
            } else {
                println!("(no database yet at {})", ctx.db_path.display());
            }
            return Ok(0);
        }
        anyhow::bail!(
            "no database at {} (profiles and runs are stored there by `hugetune optimize`, `analyze` and `validate`)",
            ctx.db_path.display()
        );
    }
    let mut db = ctx.db()?;
    match a.action {
        Action::Ls { json } => {
            let l = db.list()?;
            if json {
                println!("{}", serde_json::to_string(&l)?);
                return Ok(0);
            }
            let rows: Vec<Vec<String>> = l
                .into_iter()
                .map(|l| vec![l.table, l.id.to_string(), l.created, l.what])
                .collect();
            println!("{}", table(&["kind", "id", "created", "what"], &rows));
            println!("({})", db.path().display());
        }
        Action::Show { kind, id } => {
            println!("{}", serde_json::to_string_pretty(&db.show(&kind, id)?)?)
        }
        Action::Rm { kind, id } => {
            let bundles = db.bundles_removed_with(&kind, id)?;
            db.remove(&kind, id)?;
            eprintln!("hugetune: removed {kind} {id}");
            // Bundles hugetune keeps itself (optimize's) go with their profile;
            // those written with `record -o` are the user's files.
            let own = crate::cmd::optimize::profiles_dir();
            for b in bundles {
                if b.parent() == Some(own.as_path()) {
                    match std::fs::remove_file(&b) {
                        Ok(()) => eprintln!("hugetune: removed its bundle {}", b.display()),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => eprintln!("hugetune: could not remove {}: {e}", b.display()),
                    }
                } else if b.exists() {
                    eprintln!(
                        "hugetune: kept its bundle {} (not hugetune's own)",
                        b.display()
                    );
                }
            }
        }
        Action::Export { output } => {
            let text = serde_json::to_string_pretty(&db.export()?)?;
            match output {
                Some(f) => std::fs::write(&f, text + "\n")
                    .with_context(|| format!("writing {}", f.display()))?,
                None => println!("{text}"),
            }
        }
        Action::Import { file } => {
            let text = std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))?;
            let doc: serde_json::Value = serde_json::from_str(&text)
                .with_context(|| format!("{} is not JSON", file.display()))?;
            let c = db
                .import(&doc)
                .with_context(|| format!("importing {}", file.display()))?;
            for ((t, added), (_, skipped)) in c.added.iter().zip(&c.skipped) {
                eprintln!("hugetune: {t}: {added} added, {skipped} already present");
            }
        }
        Action::Sync { to, json } => {
            if !is_url(&to) {
                bail!("--to {to}: give the fleet store as postgresql://user@host:port/dbname");
            }
            let mut fleet = Db::open(&hide_password(Path::new(&to)))?;
            let r = hugetune_store::sync::sync(&mut db, &mut fleet)?;
            if json {
                println!("{}", serde_json::to_string(&r)?);
                return Ok(0);
            }
            let counts = |c: &ImportCounts| {
                c.added
                    .iter()
                    .filter(|(_, n)| *n > 0)
                    .map(|(t, n)| format!("{n} {t}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let or_nothing = |s: String| {
                if s.is_empty() {
                    "nothing new".to_string()
                } else {
                    s
                }
            };
            let mut pushed = counts(&r.pushed);
            if r.bundles > 0 {
                pushed = [pushed, format!("{} profile bundles", r.bundles)]
                    .into_iter()
                    .filter(|s| !s.is_empty())
                    .collect::<Vec<_>>()
                    .join(", ");
            }
            eprintln!(
                "hugetune: pushed to {}: {}",
                fleet.path().display(),
                or_nothing(pushed)
            );
            match &r.class {
                Some(class) => eprintln!(
                    "hugetune: pulled for this host's class ({class}): {}",
                    or_nothing(counts(&r.pulled))
                ),
                None => eprintln!("hugetune: nothing pulled: this host has no machine class"),
            }
        }
    }
    Ok(0)
}
