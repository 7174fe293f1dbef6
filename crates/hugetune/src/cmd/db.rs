use crate::Ctx;
use anyhow::Result;
use hugetune_report::table;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
}

#[derive(clap::Subcommand)]
enum Action {
    /// List profiles, runs and calibrations
    Ls,
    /// Show one entry as JSON: `db show profile 3`, `db show run 7`, `db show calibration 1`
    Show { kind: String, id: i64 },
}

pub fn run(ctx: &Ctx, a: Args) -> Result<i32> {
    let db = ctx.db()?;
    match a.action {
        Action::Ls => {
            let rows: Vec<Vec<String>> = db
                .list()?
                .into_iter()
                .map(|l| vec![l.table, l.id.to_string(), l.created, l.what])
                .collect();
            println!("{}", table(&["kind", "id", "created", "what"], &rows));
            println!("({})", db.path().display());
        }
        Action::Show { kind, id } => {
            println!("{}", serde_json::to_string_pretty(&db.show(&kind, id)?)?)
        }
    }
    Ok(0)
}
