//! A recording session: the program under the runtime library (record mode, with
//! markers) and a reference source, in a scratch directory.

use crate::alloclog::AllocLog;
use crate::lackey::{self, LackeyRun};
use crate::launch::{record_env, RecordEnv};
use anyhow::{bail, Context, Result};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

pub struct Recorded {
    pub refs_path: PathBuf,
    pub log_path: PathBuf,
    pub log: AllocLog,
    pub lackey: LackeyRun,
    pub summary: Option<serde_json::Value>,
}

/// The allocation log of the process the session started (the one whose parent is
/// the session's own child, valgrind, or the first log when only one exists).
fn main_log(dir: &Path) -> Result<(PathBuf, AllocLog)> {
    let mut logs = Vec::new();
    for e in std::fs::read_dir(dir)?.flatten() {
        let n = e.file_name().to_string_lossy().into_owned();
        if n.starts_with("alloc.") && n.ends_with(".log") {
            logs.push(e.path());
        }
    }
    logs.sort();
    let mut parsed = Vec::new();
    for p in logs {
        match AllocLog::read(&p) {
            Ok(l) => parsed.push((p, l)),
            Err(e) => eprintln!("hugetune: ignoring unreadable log: {e:#}"),
        }
    }
    // The profiled process is the one that is not a child of another logged one;
    // if it exec'd (a launcher such as valgrind's, or `sh -c`, becoming the program)
    // each image wrote its own log: the program is the last image.
    let pids: Vec<u32> = parsed.iter().map(|(_, l)| l.header.pid).collect();
    let root = parsed
        .iter()
        .find(|(_, l)| !pids.contains(&l.header.ppid))
        .map(|(_, l)| (l.header.pid, l.header.ppid));
    let idx = root.and_then(|(pid, ppid)| {
        parsed
            .iter()
            .enumerate()
            .filter(|(_, (_, l))| l.header.pid == pid && l.header.ppid == ppid)
            .max_by_key(|(_, (_, l))| l.header.exec_gen)
            .map(|(i, _)| i)
    });
    match idx {
        Some(i) => Ok(parsed.swap_remove(i)),
        None => bail!(
            "the runtime library wrote no allocation log in {} (was the program statically linked, or did it exec something setuid?)",
            dir.display()
        ),
    }
}

pub fn record_with_lackey(
    lib: &Path,
    argv: &[OsString],
    dir: &Path,
    show_output: bool,
    progress: impl FnMut(u64, Duration),
) -> Result<Recorded> {
    let log_pattern = dir.join("alloc.%p.log");
    let summary_pattern = dir.join("summary.%p.json");
    let env = record_env(&RecordEnv {
        lib,
        log: Some(&log_pattern),
        summary: Some(&summary_pattern),
        markers: true,
    });
    let refs_path = dir.join("refs.zst");
    let stdout = if show_output {
        Stdio::inherit()
    } else {
        Stdio::null()
    };
    let run = lackey::capture(argv, &env, &refs_path, stdout, progress)?;
    if run.status.code() != Some(0) {
        let tail = run
            .messages
            .iter()
            .rev()
            .take(8)
            .rev()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n");
        bail!(
            "the profiled command failed under valgrind ({}); valgrind said:\n{tail}",
            run.status
        );
    }
    let (log_path, log) = main_log(dir).context("reading the allocation log")?;
    if log.header.marker_span == 0 {
        bail!("the allocation log has no markers: references cannot be aligned with allocations");
    }
    // The image's summary: `%p` is `<pid>.x<g>` for an exec'd image (formats.md §1).
    let pid_part = match log.header.exec_gen {
        0 => log.header.pid.to_string(),
        g => format!("{}.x{g}", log.header.pid),
    };
    let summary = std::fs::read_to_string(dir.join(format!("summary.{pid_part}.json")))
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok());
    Ok(Recorded {
        refs_path,
        log_path,
        log,
        lackey: run,
        summary,
    })
}
