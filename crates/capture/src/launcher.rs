//! Launchers (`bash -c`, `env`, `nice`, `numactl`, `taskset`, `timeout`,
//! `mpirun`, `srun`, …): which commands are one, what program they will start
//! (from their arguments, before the run: the program's identity for a stored
//! plan), and what the runtime library's follow log says really ran
//! (docs/launchers.md).
//!
//! Invariant: the list of launcher names is the runtime library's
//! (`runtime/src/follow.c`), and `HUGETUNE_LAUNCHERS` (colon-separated
//! basenames) extends both the same way; a name is compared after symlinks
//! (`/bin/sh` is `dash`, `mpirun` is `orterun`).

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::io::Read;
use std::path::{Path, PathBuf};

/// The runtime library's list (follow.c's LAUNCHERS).
pub const KNOWN: &[&str] = &[
    "bash",
    "sh",
    "dash",
    "zsh",
    "ksh",
    "mksh",
    "env",
    "nice",
    "nohup",
    "ionice",
    "chrt",
    "taskset",
    "numactl",
    "timeout",
    "stdbuf",
    "setarch",
    "time",
    "mpirun",
    "mpiexec",
    "orterun",
    "orted",
    "prterun",
    "prted",
    "prte",
    "mpiexec.hydra",
    "hydra_pmi_proxy",
    "srun",
    "slurmstepd",
];

/// Whether an executable's basename is a launcher's.
pub fn is_launcher_name(name: &str) -> bool {
    KNOWN.contains(&name)
        || std::env::var("HUGETUNE_LAUNCHERS")
            .is_ok_and(|v| v.split(':').any(|x| !x.is_empty() && x == name))
}

fn base(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// The interpreter of a `#!` script (resolved), if `path` is one.
fn interpreter(path: &Path) -> Option<PathBuf> {
    let mut head = [0u8; 256];
    let n = std::fs::File::open(path).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let line = &line[..line.iter().position(|&c| c == b'\n').unwrap_or(line.len())];
    let text = String::from_utf8_lossy(line);
    let interp = text.split_whitespace().next()?;
    std::fs::canonicalize(interp).ok()
}

/// `argv`'s executable when it is a launcher (or a script run by one), resolved.
pub fn launcher_of(argv: &[OsString]) -> Option<PathBuf> {
    let p = crate::elf::resolve_program(argv.first()?)?;
    if is_launcher_name(&base(&p)) {
        return Some(p);
    }
    let i = interpreter(&p)?;
    is_launcher_name(&base(&i)).then_some(p)
}

/// Words of a shell-like string: split on whitespace, with single and double
/// quotes; the flag is set when a quote is left open (the words then run to the
/// end). `--profile-cmd` and the `-c` strings of shells are read with it.
pub fn shell_words(s: &str) -> (Vec<String>, bool) {
    let mut words = Vec::new();
    let mut cur = String::new();
    let (mut quote, mut in_word) = (None, false);
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
                    words.push(std::mem::take(&mut cur));
                    in_word = false;
                }
            }
            (None, c) => {
                cur.push(c);
                in_word = true;
            }
        }
    }
    if in_word {
        words.push(cur);
    }
    (words, quote.is_some())
}

/// Shell words of a `-c` string up to the first command separator, with
/// leading variable assignments and `exec` dropped: the command it runs first.
fn first_shell_command(s: &str) -> Vec<OsString> {
    let cut = s.find([';', '&', '|', '\n', '(', ')']).unwrap_or(s.len());
    let (words, _) = shell_words(&s[..cut]);
    let skip = words
        .iter()
        .take_while(|w| {
            w.as_str() == "exec"
                || w.split_once('=').is_some_and(|(k, _)| {
                    !k.is_empty() && k.chars().all(|c| c.is_alphanumeric() || c == '_')
                })
        })
        .count();
    let words: Vec<OsString> = words.into_iter().skip(skip).map(OsString::from).collect();
    // The shell runs its builtins itself (`test`, `exit`, `cd`, ...): no program
    // is exec'd first, even where a binary of the same name exists.
    if words
        .first()
        .is_some_and(|w| SHELL_BUILTINS.contains(&w.to_string_lossy().as_ref()))
    {
        return Vec::new();
    }
    words
}

/// POSIX special and regular builtins, and bash's common ones: the first word of
/// a `-c` string that the shell runs without an exec.
const SHELL_BUILTINS: &[&str] = &[
    ":", ".", "[", "alias", "bg", "break", "builtin", "cd", "command", "continue", "declare",
    "echo", "eval", "exit", "export", "false", "fg", "getopts", "hash", "jobs", "kill", "let",
    "local", "printf", "pwd", "read", "readonly", "return", "set", "shift", "source", "test",
    "times", "trap", "true", "type", "typeset", "ulimit", "umask", "unalias", "unset", "wait",
];

/// The arguments after a launcher's options: options in `with_arg` take the
/// next argument (unless written `--opt=value`), `positional` more arguments
/// (a mask, a duration) come before the command.
fn after_options<'a>(
    args: &'a [OsString],
    with_arg: &[&str],
    with_two: &[&str],
    positional: usize,
) -> &'a [OsString] {
    let mut i = 0;
    while i < args.len() {
        let a = args[i].to_string_lossy();
        if a == "--" {
            i += 1;
            break;
        }
        if !a.starts_with('-') || a == "-" {
            break;
        }
        let name = a.split_once('=').map_or(a.as_ref(), |(n, _)| n);
        if with_two.contains(&name) {
            i += 3;
        } else if with_arg.contains(&name) && !a.contains('=') {
            i += 2;
        } else {
            i += 1;
        }
    }
    let rest = &args[i.min(args.len())..];
    &rest[positional.min(rest.len())..]
}

/// What one launcher invocation runs, from its arguments; `None` where they do
/// not say (a shell running a script file, an option this parser does not know).
fn unwrap_once(name: &str, argv: &[OsString]) -> Option<Vec<OsString>> {
    let args = &argv[1..];
    let rest: &[OsString] = match name {
        "bash" | "sh" | "dash" | "zsh" | "ksh" | "mksh" => {
            let c = args.iter().position(|a| {
                let s = a.to_string_lossy();
                s.starts_with('-') && !s.starts_with("--") && s.contains('c')
            })?;
            let cmd = first_shell_command(&args.get(c + 1)?.to_string_lossy());
            return (!cmd.is_empty()).then_some(cmd);
        }
        "env" => {
            let r = after_options(args, &["-u", "--unset", "-C", "--chdir", "-S"], &[], 0);
            let k = r
                .iter()
                .take_while(|a| a.to_string_lossy().contains('='))
                .count();
            &r[k..]
        }
        "nice" => after_options(args, &["-n", "--adjustment"], &[], 0),
        "nohup" | "time" => after_options(args, &["-f", "--format", "-o", "--output"], &[], 0),
        "stdbuf" => after_options(args, &["-i", "-o", "-e"], &[], 0),
        "ionice" => after_options(args, &["-c", "-n", "--class", "--classdata"], &[], 0),
        "chrt" => after_options(args, &[], &[], 1),
        "setarch" => after_options(&args[1.min(args.len())..], &[], &[], 0),
        "taskset" => after_options(args, &[], &[], 1),
        "numactl" => after_options(
            args,
            &[
                "-N",
                "-m",
                "-C",
                "-i",
                "-p",
                "-P",
                "-b",
                "--cpunodebind",
                "--membind",
                "--physcpubind",
                "--interleave",
                "--preferred",
                "--preferred-many",
            ],
            &[],
            0,
        ),
        "timeout" => after_options(args, &["-s", "--signal", "-k", "--kill-after"], &[], 1),
        "mpirun" | "mpiexec" | "orterun" | "prterun" | "mpiexec.hydra" => after_options(
            args,
            &[
                "-np",
                "-n",
                "--np",
                "-c",
                "-N",
                "--n",
                "-H",
                "-host",
                "--host",
                "-hostfile",
                "--hostfile",
                "-machinefile",
                "--machinefile",
                "--map-by",
                "-map-by",
                "--rank-by",
                "--bind-to",
                "-bind-to",
                "-x",
                "--prefix",
                "-wdir",
                "--wdir",
                "-wd",
                "--npernode",
                "-npernode",
                "-ppn",
                "--ppn",
                "-f",
                "-genv",
                "-env",
                "--output-filename",
                "--timeout",
                "--report-bindings-file",
                "--app",
                "-s",
                "--preload-files",
                "--path",
                "--personality",
            ],
            &["--mca", "-mca", "--gmca", "-gmca", "-genv", "-env"],
            0,
        ),
        "srun" => after_options(
            args,
            &[
                "-n", "-N", "-c", "-p", "-t", "-J", "-w", "-x", "-o", "-e", "-i", "-A", "-q", "-d",
                "-m", "-G", "-B",
            ],
            &[],
            0,
        ),
        _ => return None,
    };
    (!rest.is_empty()).then(|| rest.to_vec())
}

/// The command a launcher command line will run, unwrapped through nested
/// launchers (`mpirun -np 2 numactl -N 0 ./app` → `./app`); the command itself
/// when it is no launcher; `None` where the arguments do not say.
pub fn guess_program(argv: &[OsString]) -> Option<Vec<OsString>> {
    let mut cur = argv.to_vec();
    for _ in 0..16 {
        let Some(p) = crate::elf::resolve_program(cur.first()?) else {
            return Some(cur);
        };
        let name = base(&p);
        if !is_launcher_name(&name) {
            return Some(cur);
        }
        cur = unwrap_once(&name, &cur)?;
    }
    None
}

/// One line of the runtime library's follow log (formats.md §1.1).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct FollowEvent {
    pub pid: u32,
    pub ppid: u32,
    /// `launcher`, `program`, `exec`, `error`.
    pub event: String,
    #[serde(default)]
    pub path: Option<String>,
    #[serde(default)]
    pub argv: Vec<String>,
    #[serde(default)]
    pub why: Option<String>,
}

/// Reads a follow log (absent: no event). A line that is not an event is an
/// error: the library writes whole lines only.
pub fn read_follow_log(path: &Path) -> Result<Vec<FollowEvent>> {
    let text = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(vec![]),
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    text.lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            serde_json::from_str(l)
                .with_context(|| format!("{}: not a follow event: {l}", path.display()))
        })
        .collect()
}

/// What a followed run shows: the launchers, the program's processes, and the
/// errors that make it unfollowable (as one message).
#[derive(Debug, Clone, Serialize, Deserialize, Default)]
pub struct Followed {
    pub launchers: Vec<FollowEvent>,
    pub programs: Vec<FollowEvent>,
    /// Execs made by launchers (the cost of following: each is one process
    /// start the library looked at).
    pub execs: usize,
}

/// Checks a followed run's events: the launcher must have loaded the library,
/// nothing may have been unfollowable, and some program must have been
/// reached. `what` is the command as typed.
pub fn check_followed(events: &[FollowEvent], what: &str) -> Result<Followed> {
    let errors: Vec<String> = events
        .iter()
        .filter(|e| e.event == "error")
        .map(|e| {
            format!(
                "{}: {}",
                e.path.as_deref().unwrap_or("?"),
                e.why.as_deref().unwrap_or("cannot be followed")
            )
        })
        .collect();
    if !errors.is_empty() {
        bail!(
            "`{what}` starts a program hugetune cannot follow:\n  {}\n(run the program directly, or keep the runtime library's environment and a dynamically linked launcher; docs/launchers.md)",
            errors.join("\n  ")
        );
    }
    let launchers: Vec<FollowEvent> = events
        .iter()
        .filter(|e| e.event == "launcher")
        .cloned()
        .collect();
    if launchers.is_empty() {
        bail!(
            "the launcher of `{what}` never loaded the runtime library (statically linked, setuid, or it cleared its environment), so the program it starts cannot be followed"
        );
    }
    let programs: Vec<FollowEvent> = events
        .iter()
        .filter(|e| e.event == "program")
        .cloned()
        .collect();
    if programs.is_empty() {
        let started: Vec<String> = launchers
            .iter()
            .filter_map(|e| e.path.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        bail!(
            "`{what}` ran no program hugetune could follow: only launchers ran ({}); the program was never started with exec, or the launcher is static",
            started.join(", ")
        );
    }
    Ok(Followed {
        launchers,
        programs,
        execs: events.iter().filter(|e| e.event == "exec").count(),
    })
}

/// A bundle's `launch` section (formats.md §7), decoded once for
/// [`describe_launch`] and [`alongside`]. Its fields are read leniently (a
/// missing or mistyped one reads as absent); only bytes that are not zstd or
/// not JSON are an error.
pub fn launch_section(zstd_json: &[u8]) -> Result<serde_json::Value> {
    serde_json::from_slice(&zstd::decode_all(zstd_json).context("the launch section is not zstd")?)
        .context("the launch section is not JSON")
}

/// One line about a launch section: what was followed, every process of the
/// program with its references, and which one the model analyses.
pub fn describe_launch(v: &serde_json::Value) -> String {
    let ranks = v["ranks"].as_array().cloned().unwrap_or_default();
    let program = v["program"].as_str().unwrap_or("?");
    let mine: Vec<&serde_json::Value> = ranks.iter().filter(|r| r["path"] == program).collect();
    let per: Vec<String> = mine
        .iter()
        .map(|r| {
            format!(
                "pid {} {:.2} M{}",
                r["pid"],
                r["refs_seen"].as_f64().unwrap_or(0.0) / 1e6,
                if r["analysed"] == true {
                    " (analysed)"
                } else {
                    ""
                }
            )
        })
        .collect();
    let launchers: Vec<String> = v["launchers"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|l| l.as_str())
        .map(|l| l.rsplit('/').next().unwrap_or(l).to_string())
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut line = format!(
        "followed {} into `{program}`: {} process(es), references {}; the plan, per category and site, applies to every one",
        launchers.join(", "),
        mine.len(),
        per.join(", ")
    );
    let refs: Vec<f64> = mine
        .iter()
        .map(|r| r["refs_seen"].as_f64().unwrap_or(0.0))
        .collect();
    let (lo, hi) = refs
        .iter()
        .fold((f64::MAX, 0.0f64), |(a, b), &x| (a.min(x), b.max(x)));
    if mine.len() > 1 && hi > 2.0 * lo {
        line.push_str(" (the processes differ by more than 2x: the model is the busiest one's)");
    }
    let others = ranks.len() - mine.len();
    if others > 0 {
        line.push_str(&format!(
            "; {others} other program process(es) ran too and are not analysed"
        ));
    }
    line
}

/// The program's processes that ran alongside the analysed one, from a
/// launch section (docs/model.md §4, "Processes side by side"): those of the
/// same executable whose streams grew at the same time as its for at least
/// half of the shorter one's span (spans widened by half a second at the
/// start: a progress file is first written a quarter second in and polled
/// every quarter second), the largest by pages first, at most `cpus` in all
/// (0: no limit). `None` when it ran alone or the section predates the spans.
pub fn alongside(
    v: &serde_json::Value,
    cpus: usize,
) -> Option<hugetune_model::analysis::Alongside> {
    let program = v["program"].as_str().unwrap_or("");
    let ranks = v["ranks"].as_array().cloned().unwrap_or_default();
    let span = |r: &serde_json::Value| -> Option<(f64, f64)> {
        let a = r["active_s"].as_array()?;
        let (s, e) = (a.first()?.as_f64()?, a.get(1)?.as_f64()?);
        (s.is_finite() && e.is_finite() && e >= s).then_some((s - 0.5, e))
    };
    let pages = |r: &serde_json::Value| r["pages"].as_u64().unwrap_or(0);
    let me = ranks
        .iter()
        .find(|r| r["analysed"] == true && r["path"] == program)?;
    let ((s0, e0), mine) = (span(me)?, pages(me));
    if mine == 0 {
        return None;
    }
    let mut others: Vec<u64> = ranks
        .iter()
        .filter(|r| r["path"] == program && r["analysed"] != true)
        .filter_map(|r| {
            let (s, e) = span(r)?;
            let both = (e.min(e0) - s.max(s0)).max(0.0);
            (both >= 0.5 * (e - s).min(e0 - s0) && pages(r) > 0).then_some(pages(r))
        })
        .collect();
    others.sort_unstable_by(|a, b| b.cmp(a));
    if cpus > 0 {
        others.truncate(cpus - 1);
    }
    if others.is_empty() {
        return None;
    }
    Some(hugetune_model::analysis::Alongside {
        processes: 1 + others.len() as u64,
        page_tables: (mine + others.iter().sum::<u64>()) as f64 / mine as f64,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &[&str]) -> Vec<OsString> {
        s.iter().map(OsString::from).collect()
    }

    #[test]
    fn launchers_are_unwrapped_to_the_program() {
        let g = |s: &[&str]| guess_program(&v(s)).map(|x| x[0].to_string_lossy().into_owned());
        assert_eq!(
            g(&["bash", "-c", "./app 1 2; true"]).as_deref(),
            Some("./app")
        );
        assert_eq!(
            g(&["sh", "-ec", "FOO=1 exec ./app x && echo"]).as_deref(),
            Some("./app")
        );
        assert_eq!(
            g(&["env", "-u", "X", "A=b", "./app"]).as_deref(),
            Some("./app")
        );
        assert_eq!(g(&["nice", "-n", "5", "./app"]).as_deref(), Some("./app"));
        assert_eq!(
            g(&["taskset", "-c", "0", "./app"]).as_deref(),
            Some("./app")
        );
        assert_eq!(g(&["taskset", "0x1", "./app"]).as_deref(), Some("./app"));
        assert_eq!(
            g(&["timeout", "-s", "KILL", "60", "./app"]).as_deref(),
            Some("./app")
        );
        assert_eq!(
            g(&[
                "mpirun",
                "--allow-run-as-root",
                "--mca",
                "btl",
                "self",
                "-np",
                "2",
                "./app"
            ])
            .as_deref(),
            Some("./app")
        );
        assert_eq!(
            g(&[
                "env",
                "nice",
                "--adjustment=3",
                "taskset",
                "-c",
                "0",
                "./app"
            ])
            .as_deref(),
            Some("./app")
        );
        assert_eq!(g(&["./app", "bash"]).as_deref(), Some("./app"));
        // A shell running a script file: its arguments do not say.
        assert_eq!(g(&["bash", "script.sh"]), None);
        assert_eq!(g(&["nice"]), None);
    }

    #[test]
    fn follow_events_are_checked() {
        let ev = |kind: &str, path: &str, why: Option<&str>| FollowEvent {
            pid: 1,
            ppid: 0,
            event: kind.into(),
            path: Some(path.into()),
            argv: vec![],
            why: why.map(str::to_string),
        };
        let e = check_followed(&[], "bash -c x").unwrap_err().to_string();
        assert!(e.contains("never loaded the runtime library"), "{e}");
        let e = check_followed(&[ev("launcher", "/usr/bin/bash", None)], "bash -c x")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("ran no program") && e.contains("/usr/bin/bash"),
            "{e}"
        );
        let e = check_followed(
            &[
                ev("launcher", "/usr/bin/env", None),
                ev("error", "/usr/bin/x", Some("statically linked")),
            ],
            "env x",
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("cannot follow") && e.contains("statically linked"),
            "{e}"
        );
        let f = check_followed(
            &[
                ev("launcher", "/usr/bin/bash", None),
                ev("exec", "/a", None),
                ev("program", "/a", None),
            ],
            "bash -c /a",
        )
        .unwrap();
        assert_eq!((f.programs.len(), f.execs), (1, 1));
    }

    #[test]
    fn ranks_alongside_are_those_whose_streams_grew_at_once() {
        let section = |ranks: serde_json::Value| {
            let v = serde_json::json!({"program": "/a", "ranks": ranks});
            launch_section(&zstd::encode_all(&serde_json::to_vec(&v).unwrap()[..], 3).unwrap())
                .unwrap()
        };
        let rank = |path: &str, pages: u64, span: Option<[f64; 2]>, analysed: bool| {
            let mut r =
                serde_json::json!({"pid": 1, "path": path, "pages": pages, "analysed": analysed});
            if let Some(s) = span {
                r["active_s"] = serde_json::json!(s);
            }
            r
        };
        let me = rank("/a", 1000, Some([1.0, 9.0]), true);
        // Two ranks side by side, the other slightly smaller.
        let a = alongside(
            &section(serde_json::json!([
                me,
                rank("/a", 900, Some([1.25, 9.5]), false)
            ])),
            2,
        )
        .unwrap();
        assert_eq!(a.processes, 2);
        assert!((a.page_tables - 1.9).abs() < 1e-9, "{a:?}");
        // One after the other (`bash -c "./a; ./a"`): alone.
        let seq = section(serde_json::json!([
            me,
            rank("/a", 1000, Some([9.5, 18.0]), false)
        ]));
        assert_eq!(alongside(&seq, 2), None);
        // A short rank inside the analysed one's span counts (half of the
        // shorter span), another program's process does not, nor a rank
        // without a span (a section written before spans were kept).
        let mixed = section(serde_json::json!([
            me,
            rank("/a", 500, Some([4.0, 4.5]), false),
            rank("/b", 5000, Some([1.0, 9.0]), false),
            rank("/a", 700, None, false),
        ]));
        let m = alongside(&mixed, 8).unwrap();
        assert_eq!(m.processes, 2);
        assert!((m.page_tables - 1.5).abs() < 1e-9, "{m:?}");
        // More ranks than CPUs: the largest share the caches at once.
        let many = section(serde_json::json!([
            me,
            rank("/a", 1000, Some([1.0, 9.0]), false),
            rank("/a", 2000, Some([1.0, 9.0]), false),
            rank("/a", 3000, Some([1.0, 9.0]), false),
        ]));
        let m = alongside(&many, 2).unwrap();
        assert_eq!((m.processes, m.page_tables), (2, 4.0));
        let m = alongside(&many, 0).unwrap();
        assert_eq!((m.processes, m.page_tables), (4, 7.0));
        // The analysed rank without a span or pages, or not there at all: alone.
        let no_span = section(serde_json::json!([
            rank("/a", 1000, None, true),
            rank("/a", 1000, Some([1.0, 9.0]), false)
        ]));
        assert_eq!(alongside(&no_span, 2), None);
        let no_pages = section(serde_json::json!([
            rank("/a", 0, Some([1.0, 9.0]), true),
            rank("/a", 1000, Some([1.0, 9.0]), false)
        ]));
        assert_eq!(alongside(&no_pages, 2), None);
        assert_eq!(alongside(&section(serde_json::json!([])), 2), None);
        // Hostile input: an error that names the section, never a panic.
        for bad in [&b"not zstd"[..], &zstd::encode_all(&b"{"[..], 3).unwrap()] {
            let e = launch_section(bad).unwrap_err().to_string();
            assert!(e.contains("launch section"), "{e}");
        }
        // Valid JSON of the wrong shape reads as a program that ran alone.
        for odd in [serde_json::json!([1, 2]), serde_json::json!({"ranks": "x"})] {
            assert_eq!(alongside(&odd, 2), None);
            assert!(describe_launch(&odd).contains("0 process(es)"));
        }
        let bad_span = section(serde_json::json!([
            rank("/a", 1000, Some([9.0, 1.0]), true),
            rank("/a", 1000, Some([1.0, 9.0]), false)
        ]));
        assert_eq!(alongside(&bad_span, 2), None);
    }
}
