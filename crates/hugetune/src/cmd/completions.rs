//! `hugetune completions SHELL` and `hugetune manpages DIR`: shell completions
//! and man pages generated from the CLI definition itself (clap_complete,
//! clap_mangen), so they can never disagree with `--help`. Packages and
//! `make install`-style installs write them where the shell and man look.

use anyhow::{Context, Result};
use clap::CommandFactory;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell
    shell: clap_complete::Shell,
}

#[derive(clap::Args)]
pub struct ManpagesArgs {
    /// Directory to write hugetune.1 and one hugetune-COMMAND.1 per command into
    dir: PathBuf,
}

pub fn completions(a: CompletionsArgs) -> Result<i32> {
    let mut cmd = crate::Cli::command();
    // Generated into memory: a closed pipe is then an error (a quiet end), not
    // clap_complete's panic.
    let mut out = Vec::new();
    clap_complete::generate(a.shell, &mut cmd, "hugetune", &mut out);
    std::io::Write::write_all(&mut std::io::stdout(), &out)?;
    Ok(0)
}

/// The pages: the top-level command and every command below it, nested ones
/// too (`hugetune service install` is hugetune-service-install.1, with its options).
pub fn man_pages() -> Result<Vec<(String, Vec<u8>)>> {
    let mut top = crate::Cli::command();
    // Propagates the global options (--db, --tlb, …) into every command, so
    // each page lists them too.
    top.build();
    let mut out = Vec::new();
    let mut page = Vec::new();
    clap_mangen::Man::new(top.clone()).render(&mut page)?;
    out.push(("hugetune.1".to_string(), page));
    add_pages(&top, "hugetune", "hugetune", &mut out)?;
    Ok(out)
}

fn add_pages(
    parent: &clap::Command,
    file_stem: &str,
    bin: &str,
    out: &mut Vec<(String, Vec<u8>)>,
) -> Result<()> {
    // (build() adds a `help` command beside the others: `--help` covers it)
    for sub in parent.get_subcommands().filter(|s| s.get_name() != "help") {
        let name = format!("{file_stem}-{}", sub.get_name());
        let bin_name = format!("{bin} {}", sub.get_name());
        let cmd = sub.clone().name(name.clone()).bin_name(bin_name.clone());
        let mut page = Vec::new();
        clap_mangen::Man::new(cmd).render(&mut page)?;
        out.push((format!("{name}.1"), page));
        add_pages(sub, &name, &bin_name, out)?;
    }
    Ok(())
}

pub fn manpages(a: ManpagesArgs) -> Result<i32> {
    std::fs::create_dir_all(&a.dir).with_context(|| format!("creating {}", a.dir.display()))?;
    let pages = man_pages()?;
    for (name, bytes) in &pages {
        let p = a.dir.join(name);
        std::fs::write(&p, bytes).with_context(|| format!("writing {}", p.display()))?;
    }
    eprintln!(
        "hugetune: wrote {} man pages into {}",
        pages.len(),
        a.dir.display()
    );
    Ok(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_command_has_a_man_page_that_names_its_options() {
        let pages = man_pages().unwrap();
        let top = crate::Cli::command();
        fn count(c: &clap::Command) -> usize {
            c.get_subcommands().map(|s| 1 + count(s)).sum()
        }
        assert_eq!(pages.len(), 1 + count(&top));
        assert!(
            count(&top) > top.get_subcommands().count(),
            "no nested commands?"
        );
        let get = |n: &str| {
            let (_, b) = pages.iter().find(|(name, _)| name == n).unwrap();
            String::from_utf8(b.clone()).unwrap()
        };
        let opt = get("hugetune-optimize.1");
        assert!(opt.starts_with(".ie") || opt.contains(".TH"), "{opt}");
        assert!(opt.contains("hugetune\\-optimize"), "{opt}");
        assert!(opt.contains("\\-\\-min\\-gain"), "{opt}");
        assert!(get("hugetune.1").contains("optimize"));
        // nested commands have their own page, with their options
        let install = get("hugetune-service-install.1");
        assert!(install.contains("\\-\\-dry\\-run"), "{install}");
        // the global options on every page
        assert!(
            opt.contains("\\-\\-db") && install.contains("\\-\\-db"),
            "{opt}"
        );
    }

    #[test]
    fn completions_for_every_shell() {
        for shell in [
            clap_complete::Shell::Bash,
            clap_complete::Shell::Zsh,
            clap_complete::Shell::Fish,
        ] {
            let mut cmd = crate::Cli::command();
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut cmd, "hugetune", &mut out);
            let text = String::from_utf8(out).unwrap();
            assert!(
                text.contains("optimize") && text.contains("min-gain"),
                "{shell}"
            );
        }
    }
}
