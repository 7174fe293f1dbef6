//! Reference capture with Valgrind lackey (`--trace-mem=yes`), the source every
//! machine has. Lackey's text trace is streamed through a pipe and converted on the
//! fly into the compact binary reference stream; the text never touches the disk.

use anyhow::{bail, Context, Result};
use hugetune_format::refstream::{RefWriter, StreamHeader};
use std::ffi::OsString;
use std::fs::File;
use std::io::{BufRead, BufReader};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

pub struct LackeyRun {
    pub status: ExitStatus,
    /// Data references written (loads, stores; a modify counts once).
    pub refs: u64,
    pub instructions: u64,
    pub elapsed: Duration,
    /// Valgrind's own messages (lines starting with `==`), for diagnostics.
    pub messages: Vec<String>,
}

/// Parses one lackey line. Returns `Some((addr, is_write))` for data accesses.
pub fn parse_line(line: &[u8]) -> Option<(u64, bool)> {
    if line.len() < 4 || line[0] != b' ' || line[2] != b' ' {
        return None;
    }
    let write = match line[1] {
        b'L' => false,
        b'S' | b'M' => true,
        _ => return None,
    };
    let mut addr: u64 = 0;
    let mut digits = 0;
    for &c in &line[3..] {
        let v = match c {
            b'0'..=b'9' => c - b'0',
            b'a'..=b'f' => c - b'a' + 10,
            b'A'..=b'F' => c - b'A' + 10,
            b',' => break,
            _ => return None,
        };
        if digits == 16 {
            return None;
        }
        addr = addr << 4 | v as u64;
        digits += 1;
    }
    (digits > 0).then_some((addr, write))
}

fn pipe() -> Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0i32; 2];
    // SAFETY: pipe2 writes two descriptors into the array on success.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error()).context("pipe2");
    }
    // SAFETY: both descriptors were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

pub fn valgrind_available() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Runs `argv` under lackey with `env` added, writing the reference stream to
/// `out`. `progress` is called now and then with (references, elapsed).
pub fn capture(
    argv: &[OsString],
    env: &[(String, String)],
    out: &Path,
    stdout: Stdio,
    mut progress: impl FnMut(u64, Duration),
) -> Result<LackeyRun> {
    if argv.is_empty() {
        bail!("no command to profile");
    }
    if !valgrind_available() {
        bail!("valgrind is not installed; hugetune needs it to capture references here (apt install valgrind)");
    }
    const LOG_FD: i32 = 3;
    let (rd, wr) = pipe()?;
    let mut cmd = Command::new("valgrind");
    cmd.args([
        "--tool=lackey",
        "--trace-mem=yes",
        "--basic-counts=no",
        "--trace-children=no",
        // A forked child would write its trace into the same pipe, interleaved.
        "--child-silent-after-fork=yes",
    ])
    .arg(format!("--log-fd={LOG_FD}"))
    .arg("--")
    .args(argv)
    .envs(env.iter().map(|(k, v)| (k, v)))
    .stdin(Stdio::null())
    .stdout(stdout)
    .stderr(Stdio::inherit());
    let wr_raw = {
        use std::os::fd::AsRawFd;
        wr.as_raw_fd()
    };
    // SAFETY: dup2 is async-signal-safe; the new descriptor has no CLOEXEC flag,
    // so valgrind inherits the pipe as its log descriptor.
    unsafe {
        cmd.pre_exec(move || {
            if libc::dup2(wr_raw, LOG_FD) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let start = Instant::now();
    let mut child = cmd.spawn().context("starting valgrind")?;
    drop(wr);
    let file = File::create(out).with_context(|| format!("creating {}", out.display()))?;
    let mut writer = RefWriter::new(file, &StreamHeader::complete("valgrind-lackey"))?;
    let mut reader = BufReader::with_capacity(1 << 20, File::from(rd));
    let mut line = Vec::with_capacity(128);
    let mut instructions = 0u64;
    let mut messages = Vec::new();
    let mut next_report = 1u64 << 20;
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line)? == 0 {
            break;
        }
        if let Some((addr, w)) = parse_line(&line) {
            writer.push(addr, w)?;
            if writer.count() >= next_report {
                next_report += 1 << 20;
                progress(writer.count(), start.elapsed());
            }
        } else if line.first() == Some(&b'I') {
            instructions += 1;
        } else if line.starts_with(b"==") && messages.len() < 200 {
            messages.push(String::from_utf8_lossy(&line).trim_end().to_string());
        }
    }
    let refs = writer.count();
    writer.finish(refs)?;
    let status = child.wait()?;
    Ok(LackeyRun {
        status,
        refs,
        instructions,
        elapsed: start.elapsed(),
        messages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_lackey_lines() {
        assert_eq!(
            parse_line(b" L 1fff000678,8\n"),
            Some((0x1fff000678, false))
        );
        assert_eq!(parse_line(b" S 04010f0,4"), Some((0x4010f0, true)));
        assert_eq!(parse_line(b" M ffffffffffffffff,8"), Some((u64::MAX, true)));
        assert_eq!(parse_line(b"I  0401ab70,3"), None);
        assert_eq!(parse_line(b"==2678== Command: ./lk"), None);
        assert_eq!(parse_line(b" L zz,8"), None);
        assert_eq!(parse_line(b" L 11111111111111111,8"), None);
        assert_eq!(parse_line(b" L ,8"), None);
    }
}
