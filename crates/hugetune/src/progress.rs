//! Progress bars and spinners for the long steps (record, analyze, the sizing
//! run, validation rounds, bench suites), drawn with indicatif on stderr.
//!
//! Invariants: nothing is drawn unless stderr is a terminal (logs, pipes and
//! the tests' captured output get only the `hugetune:` lines), and
//! `HUGETUNE_PROGRESS=0` turns them off on a terminal too. At most one bar is
//! active at a time; `stages::note` prints through it (the bar is lifted for
//! the line and redrawn below it), so a message never lands inside a bar. A
//! bar is cleared when its step ends (dropped), also on error.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

/// The active bar and its number (bars have no identity of their own).
static ACTIVE: Mutex<Option<(u64, ProgressBar)>> = Mutex::new(None);
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Whether bars are drawn: stderr is a terminal and HUGETUNE_PROGRESS is not 0.
pub fn enabled() -> bool {
    std::io::stderr().is_terminal()
        && std::env::var_os("HUGETUNE_PROGRESS").is_none_or(|v| v != "0")
}

/// One step's bar (or spinner); cleared when dropped.
pub struct Progress {
    bar: ProgressBar,
    id: u64,
}

impl Progress {
    fn start(bar: ProgressBar) -> Progress {
        let id = NEXT_ID.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut a) = ACTIVE.lock() {
            // A step inside a step (the sizing run within optimize) replaces
            // the outer bar while it lasts; the outer one is simply not drawn.
            if let Some((_, old)) = a.replace((id, bar.clone())) {
                old.finish_and_clear();
            }
        }
        Progress { bar, id }
    }

    fn target() -> ProgressDrawTarget {
        if enabled() {
            ProgressDrawTarget::stderr_with_hz(8)
        } else {
            ProgressDrawTarget::hidden()
        }
    }

    /// A bar for `len` units of work (`unit`: "runs", "M refs", ...).
    pub fn bar(what: &str, len: u64, unit: &str) -> Progress {
        let bar = ProgressBar::with_draw_target(Some(len), Self::target());
        bar.set_style(
            ProgressStyle::with_template(&format!(
                "  {{prefix}} [{{bar:30}}] {{pos}}/{{len}} {unit} {{msg}} ({{elapsed}}, {{eta}} left)"
            ))
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> "),
        );
        bar.set_prefix(what.to_string());
        bar.tick(); // drawn at once, also when the step ends before its first unit
        Self::start(bar)
    }

    /// A spinner for work of unknown length; `set_message` says how far it got.
    pub fn spinner(what: &str) -> Progress {
        let bar = ProgressBar::with_draw_target(None, Self::target());
        bar.set_style(
            ProgressStyle::with_template("  {spinner} {prefix} {msg} ({elapsed})")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.set_prefix(what.to_string());
        if enabled() {
            bar.enable_steady_tick(Duration::from_millis(200));
        }
        Self::start(bar)
    }

    pub fn set_position(&self, pos: u64) {
        self.bar.set_position(pos);
    }

    pub fn inc(&self, n: u64) {
        self.bar.inc(n);
    }

    pub fn set_message(&self, msg: impl Into<String>) {
        self.bar.set_message(msg.into());
    }

    /// Whether this bar is drawn.
    #[cfg(test)]
    pub fn visible(&self) -> bool {
        !self.bar.is_hidden()
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.bar.finish_and_clear();
        if let Ok(mut a) = ACTIVE.lock() {
            if a.as_ref().is_some_and(|(id, _)| *id == self.id) {
                *a = None;
            }
        }
    }
}

/// Prints a line on stderr above the active bar, if any.
pub fn println(line: &str) {
    let active = ACTIVE
        .lock()
        .ok()
        .and_then(|a| a.as_ref().map(|(_, b)| b.clone()));
    match active {
        Some(b) if !b.is_hidden() && !b.is_finished() => b.suspend(|| eprintln!("{line}")),
        _ => eprintln!("{line}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // One test: ACTIVE is global and the harness runs tests in parallel.
    #[test]
    fn bars_are_hidden_off_a_terminal_nest_and_clear_themselves() {
        let outer = Progress::spinner("optimize");
        let inner = Progress::bar("runs", 4, "runs");
        assert_eq!(ACTIVE.lock().unwrap().as_ref().unwrap().0, inner.id);
        if !std::io::stderr().is_terminal() {
            // cargo test captures stderr through a pipe: never drawn.
            assert!(!inner.visible() && !outer.visible());
        }
        inner.inc(3);
        println("a note while a bar is active");
        drop(inner);
        assert!(ACTIVE.lock().unwrap().is_none());
        drop(outer);
        assert!(ACTIVE.lock().unwrap().is_none());
    }
}
