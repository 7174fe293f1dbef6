//! Servers as measured programs: a command that does not end by itself (a server)
//! runs while a *driver* (its client) does the work; when the driver ends, the
//! server is stopped (SIGTERM, then SIGKILL after a grace period) and the run is
//! over. Every place that runs the measured command (the profile under qemu, the
//! sizing run, the timed A/B runs) starts the same driver next to it, so a
//! server is profiled and validated under the load its users give it.
//!
//! The timed quantity of a session is the driver's wall time: the server's start
//! and its shutdown are not the work being compared.

use anyhow::{bail, Context, Result};
use hugetune_host::kernel_state::track_child;
use std::ffi::OsString;
use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The placeholder for the session's TCP port in the server's and the driver's
/// arguments.
pub const PORT: &str = "{port}";

/// A client that drives a server for one run.
#[derive(Debug, Clone, PartialEq)]
pub struct Driver {
    pub argv: Vec<OsString>,
    /// The driver starts once the server accepts connections on 127.0.0.1 at
    /// this port; without one, right after the server starts (then the driver
    /// has to wait for the server itself).
    pub ready_port: Option<u16>,
    /// Longest wait for the port (servers start slowly under qemu).
    pub ready_timeout: Duration,
    /// Time the server gets to exit after SIGTERM before it is killed.
    pub grace: Duration,
    /// Keep what the driver prints on stdout (`DriverOutcome::stdout`, at most
    /// `MAX_DRIVER_STDOUT`); otherwise it goes to /dev/null.
    pub capture_stdout: bool,
}

/// The most of a driver's stdout that is kept (its beginning).
pub const MAX_DRIVER_STDOUT: usize = 16 << 20;

impl Driver {
    pub fn new(argv: Vec<OsString>) -> Self {
        Driver {
            argv,
            ready_port: None,
            ready_timeout: Duration::from_secs(120),
            grace: Duration::from_secs(30),
            capture_stdout: false,
        }
    }
}

/// What happened to the driver and to the server it drove.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DriverOutcome {
    /// The driver's exit status (128 + signal); `None` when it never ran.
    pub exit_code: Option<i32>,
    /// The driver's wall time, seconds.
    pub wall_s: f64,
    /// Why the session failed: the server did not come up, died under load, or
    /// the driver failed (with the end of its stderr).
    pub error: Option<String>,
    /// The server was still running when the driver ended and was told to stop:
    /// its exit by SIGTERM is then the expected end, not a failure.
    pub stopped_server: bool,
    /// What the driver printed on stdout, when `Driver::capture_stdout`.
    pub stdout: Vec<u8>,
}

impl DriverOutcome {
    /// The session's status from the server's own `exit_code` (128 + signal):
    /// the driver's status when it failed, 0 when the server ended as told.
    pub fn status(&self, server_exit_code: i32) -> i32 {
        match self.exit_code {
            Some(c) if c != 0 => c,
            None => {
                if server_exit_code == 0 {
                    1
                } else {
                    server_exit_code
                }
            }
            Some(_) => {
                let told = self.stopped_server
                    && (server_exit_code == 128 + libc::SIGTERM
                        || server_exit_code == 128 + libc::SIGKILL);
                if told {
                    0
                } else {
                    server_exit_code
                }
            }
        }
    }
}

/// A driver running next to a server; `finish` after the server was reaped.
pub struct DriverRun {
    handle: JoinHandle<DriverOutcome>,
}

impl DriverRun {
    pub fn finish(self) -> DriverOutcome {
        self.handle.join().unwrap_or_else(|_| DriverOutcome {
            error: Some("the driver's thread panicked".into()),
            ..Default::default()
        })
    }
}

/// Whether the process `pid` (a child of ours) has exited, without reaping it
/// (also true once it is reaped).
pub fn exited(pid: u32) -> bool {
    // SAFETY: waitid with WNOWAIT on our own child, zeroed out-parameter.
    unsafe {
        let mut info: libc::siginfo_t = std::mem::zeroed();
        let r = libc::waitid(
            libc::P_PID,
            pid as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        );
        r != 0 || info.si_pid() != 0
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: signalling our own child, which is not reaped before the driver's
    // thread ends (the caller reaps it and then joins), so the pid is not reused.
    unsafe { libc::kill(pid as i32, sig) };
}

/// Starts the driver's thread for the server `server_pid` (a child of this
/// process that the caller waits for and reaps). The thread waits for the
/// server to listen, runs the driver, then stops the server.
pub fn start(driver: &Driver, server_pid: u32) -> DriverRun {
    let d = driver.clone();
    let handle = std::thread::spawn(move || {
        let mut out = DriverOutcome::default();
        let stop = |out: &mut DriverOutcome| {
            if !exited(server_pid) {
                out.stopped_server = true;
                signal(server_pid, libc::SIGTERM);
                let t = Instant::now();
                while !exited(server_pid) {
                    if t.elapsed() > d.grace {
                        signal(server_pid, libc::SIGKILL);
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(10));
                }
            }
        };
        if let Some(port) = d.ready_port {
            if let Err(e) = wait_ready(port, server_pid, d.ready_timeout) {
                out.error = Some(format!("{e:#}"));
                stop(&mut out);
                return out;
            }
        }
        match run_driver(&d.argv, d.capture_stdout, server_pid) {
            Ok(Ran {
                code,
                wall,
                tail,
                stdout,
            }) => {
                out.exit_code = Some(code);
                out.wall_s = wall;
                out.stdout = stdout;
                if code != 0 {
                    out.error = Some(format!(
                        "the driver exited with status {code}{}",
                        if tail.trim().is_empty() {
                            String::new()
                        } else {
                            format!("; it said:\n{}", tail.trim_end())
                        }
                    ));
                }
            }
            Err(e) => out.error = Some(format!("{e:#}")),
        }
        if out.error.is_none() && exited(server_pid) {
            out.error = Some("the server exited while the driver ran".into());
        }
        stop(&mut out);
        out
    });
    DriverRun { handle }
}

fn wait_ready(port: u16, server_pid: u32, timeout: Duration) -> Result<()> {
    let addr = SocketAddr::from(([127, 0, 0, 1], port));
    let t = Instant::now();
    loop {
        if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
            return Ok(());
        }
        if exited(server_pid) {
            bail!("the server exited before it accepted connections on port {port}");
        }
        if t.elapsed() > timeout {
            bail!(
                "the server did not accept connections on port {port} within {} s",
                timeout.as_secs()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a driver's run gave.
struct Ran {
    code: i32,
    wall: f64,
    /// The end of its stderr.
    tail: String,
    stdout: Vec<u8>,
}

/// Reads a child's pipe to its end on a thread, keeping at most `limit` bytes.
fn drain(pipe: Option<impl Read + Send + 'static>, limit: usize) -> JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut v = Vec::new();
        if let Some(mut p) = pipe {
            let mut buf = [0u8; 1 << 16];
            loop {
                match p.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        let room = limit.saturating_sub(v.len());
                        v.extend_from_slice(&buf[..n.min(room)]);
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        }
        v
    })
}

/// Runs the driver to its end (killed if the server dies first).
fn run_driver(argv: &[OsString], capture_stdout: bool, server_pid: u32) -> Result<Ran> {
    let Some((prog, args)) = argv.split_first() else {
        bail!("empty driver command")
    };
    let t = Instant::now();
    let mut child = Command::new(prog)
        .args(args)
        .stdin(Stdio::null())
        .stdout(if capture_stdout {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting the driver {}", prog.to_string_lossy()))?;
    let _tracked = track_child(child.id());
    // Kept whole up to a generous bound: the tail is cut from it below.
    let reader = drain(child.stderr.take(), MAX_DRIVER_STDOUT);
    let out_reader = drain(child.stdout.take(), MAX_DRIVER_STDOUT);
    let status = loop {
        if let Some(s) = child.try_wait()? {
            break s;
        }
        if exited(server_pid) {
            // The server is gone: the driver would only wait or fail on its own.
            std::thread::sleep(Duration::from_millis(200));
            if child.try_wait()?.is_none() {
                let _ = child.kill();
            }
            break child.wait()?;
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let wall = t.elapsed().as_secs_f64();
    let stderr = reader.join().unwrap_or_default();
    let stdout = out_reader.join().unwrap_or_default();
    let text = String::from_utf8_lossy(&stderr);
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(10)..].join("\n");
    use std::os::unix::process::ExitStatusExt;
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    Ok(Ran {
        code,
        wall,
        tail,
        stdout,
    })
}

/// A free TCP port on 127.0.0.1 (the kernel's choice; another program may take it
/// before the server binds it, which the session then reports).
pub fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(l.local_addr()?.port())
}

/// `{port}` in each argument replaced by `port`.
pub fn with_port(argv: &[OsString], port: u16) -> Vec<OsString> {
    argv.iter()
        .map(|a| match a.to_str() {
            Some(s) if s.contains(PORT) => OsString::from(s.replace(PORT, &port.to_string())),
            _ => a.clone(),
        })
        .collect()
}

/// Whether any argument names the port placeholder.
pub fn names_port(argv: &[OsString]) -> bool {
    argv.iter()
        .any(|a| a.to_str().is_some_and(|s| s.contains(PORT)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sh(s: &str) -> Vec<OsString> {
        vec!["sh".into(), "-c".into(), s.into()]
    }

    fn spawn(argv: &[OsString]) -> std::process::Child {
        Command::new(&argv[0])
            .args(&argv[1..])
            .stdin(Stdio::null())
            .spawn()
            .unwrap()
    }

    /// A server that waits forever; the driver's end stops it with SIGTERM.
    #[test]
    fn the_driver_runs_then_the_server_is_stopped() {
        let mut server = spawn(&sh("exec sleep 60"));
        let run = start(&Driver::new(sh("sleep 0.2")), server.id());
        let st = server.wait().unwrap();
        let o = run.finish();
        assert_eq!(o.exit_code, Some(0));
        assert!(o.error.is_none(), "{o:?}");
        assert!(o.stopped_server);
        assert!(o.wall_s >= 0.2 && o.wall_s < 5.0, "{o:?}");
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(st.signal(), Some(libc::SIGTERM));
        assert_eq!(o.status(128 + libc::SIGTERM), 0);
    }

    /// A failing driver fails the session with its status and stderr.
    #[test]
    fn a_failing_driver_fails_the_session() {
        let mut server = spawn(&sh("exec sleep 60"));
        let run = start(
            &Driver::new(sh("echo no such key >&2; exit 3")),
            server.id(),
        );
        server.wait().unwrap();
        let o = run.finish();
        assert_eq!(o.exit_code, Some(3));
        assert_eq!(o.status(143), 3);
        assert!(o.error.as_deref().unwrap().contains("no such key"), "{o:?}");
    }

    /// A server that dies under load is a failure, also when it exits 0.
    #[test]
    fn a_server_that_dies_fails_the_session() {
        let mut server = spawn(&sh("sleep 0.2; exit 0"));
        let run = start(&Driver::new(sh("exec sleep 30")), server.id());
        let st = server.wait().unwrap();
        let o = run.finish();
        assert!(!o.stopped_server);
        assert!(o.error.is_some(), "{o:?}");
        assert_ne!(o.status(st.code().unwrap()), 0, "{o:?}");
    }

    /// The driver waits for the port; a server that never listens times out.
    #[test]
    fn the_driver_waits_for_the_port() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        drop(l);
        let mut server = spawn(&sh("exec sleep 60"));
        let mut d = Driver::new(sh("true"));
        d.ready_port = Some(port);
        d.ready_timeout = Duration::from_millis(300);
        let run = start(&d, server.id());
        server.wait().unwrap();
        let o = run.finish();
        assert_eq!(o.exit_code, None);
        assert!(
            o.error.as_deref().unwrap().contains("did not accept"),
            "{o:?}"
        );
        // A listener on the port lets the driver start.
        let l = std::net::TcpListener::bind(("127.0.0.1", 0)).unwrap();
        d.ready_port = Some(l.local_addr().unwrap().port());
        let mut server = spawn(&sh("exec sleep 60"));
        let run = start(&d, server.id());
        server.wait().unwrap();
        assert_eq!(run.finish().exit_code, Some(0));
    }

    #[test]
    fn port_placeholders() {
        let a: Vec<OsString> = vec![
            "srv".into(),
            "--port".into(),
            "{port}".into(),
            "x{port}y".into(),
        ];
        assert!(names_port(&a));
        assert_eq!(
            with_port(&a, 7000),
            vec![
                OsString::from("srv"),
                "--port".into(),
                "7000".into(),
                "x7000y".into()
            ]
        );
        assert!(!names_port(&with_port(&a, 1)));
    }
}
