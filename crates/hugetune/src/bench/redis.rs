//! Redis as a workload (seed 004): a private `redis-server` on 127.0.0.1 and a
//! free port, with its own scratch directory and no persistence; a dataset
//! loaded with pipelined SETs, every key read back with pipelined GETs (each
//! value checked), and, for the fork control, a `BGSAVE` (fork + copy-on-write)
//! that must end with `rdb_last_bgsave_status:ok`. The server runs as every
//! measured server does (capture::runner with a session driver: this module's
//! client as `hugetune bench redis-client --json`); the session stops it when
//! the client is done (SIGTERM, then SIGKILL), also when the suite fails or is
//! interrupted (it is a tracked child).

use anyhow::{bail, Context, Result};
use hugetune_capture::runner::{self, Output, RunSpec};
use hugetune_capture::session::{free_port, with_port, Driver};
use hugetune_host::procfs::RunStats;
use serde::{Deserialize, Serialize};
use std::ffi::OsString;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RedisJob {
    pub keys: u64,
    pub value_bytes: usize,
    /// Commands per pipelined batch.
    pub batch: usize,
    /// Fork control: a BGSAVE after the reads.
    pub bgsave: bool,
}

impl RedisJob {
    /// Bytes of values in the dataset.
    pub fn dataset_bytes(&self) -> u64 {
        self.keys * self.value_bytes as u64
    }
    /// A generous estimate of the server's memory (values, keys, dict entries,
    /// the dict table), for sizing hugetlb pools.
    pub fn memory_estimate(&self) -> u64 {
        self.keys * (self.value_bytes as u64 + 96) + self.keys * 16 + (64 << 20)
    }
}

/// A RESP reply.
#[derive(Debug, Clone, PartialEq)]
pub enum Reply {
    Simple(String),
    Error(String),
    Int(i64),
    Bulk(Option<Vec<u8>>),
    Array(Option<Vec<Reply>>),
}

/// A command in RESP: `*N\r\n` then `$len\r\narg\r\n` per argument.
pub fn encode(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for a in args {
        out.extend_from_slice(format!("${}\r\n", a.len()).as_bytes());
        out.extend_from_slice(a);
        out.extend_from_slice(b"\r\n");
    }
}

fn line(r: &mut impl BufRead) -> Result<String> {
    let mut l = Vec::new();
    r.read_until(b'\n', &mut l).context("reading from redis")?;
    if l.is_empty() {
        bail!("redis closed the connection");
    }
    if !l.ends_with(b"\r\n") {
        bail!(
            "malformed reply line from redis: {:?}",
            String::from_utf8_lossy(&l)
        );
    }
    l.truncate(l.len() - 2);
    String::from_utf8(l).context("reply line is not UTF-8")
}

/// Reads one reply.
pub fn read_reply(r: &mut impl BufRead) -> Result<Reply> {
    let l = line(r)?;
    let (kind, rest) = l.split_at(l.chars().next().map_or(0, |c| c.len_utf8()));
    let num = |s: &str| -> Result<i64> {
        s.parse()
            .with_context(|| format!("bad number in redis reply: {s:?}"))
    };
    Ok(match kind {
        "+" => Reply::Simple(rest.into()),
        "-" => Reply::Error(rest.into()),
        ":" => Reply::Int(num(rest)?),
        "$" => {
            let n = num(rest)?;
            if n < 0 {
                Reply::Bulk(None)
            } else {
                let mut v = vec![0u8; n as usize + 2];
                r.read_exact(&mut v).context("reading a bulk reply")?;
                if &v[n as usize..] != b"\r\n" {
                    bail!("bulk reply not terminated by CRLF");
                }
                v.truncate(n as usize);
                Reply::Bulk(Some(v))
            }
        }
        "*" => {
            let n = num(rest)?;
            if n < 0 {
                Reply::Array(None)
            } else {
                let mut v = Vec::with_capacity(n.min(1024) as usize);
                for _ in 0..n {
                    v.push(read_reply(r)?);
                }
                Reply::Array(Some(v))
            }
        }
        _ => bail!("unknown reply type in {l:?}"),
    })
}

/// `field:value` lines of an INFO reply.
pub fn info_field(info: &str, field: &str) -> Option<String> {
    info.lines().find_map(|l| {
        let (k, v) = l.trim_end_matches('\r').split_once(':')?;
        (k == field).then(|| v.to_string())
    })
}

/// A pipelining client connection (the suites' client and the soak's).
pub struct Conn {
    r: BufReader<TcpStream>,
    w: BufWriter<TcpStream>,
    buf: Vec<u8>,
}

impl Conn {
    pub fn open(port: u16) -> Result<Conn> {
        let s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_read_timeout(Some(Duration::from_secs(300)))?;
        s.set_nodelay(true)?;
        Ok(Conn {
            r: BufReader::with_capacity(1 << 20, s.try_clone()?),
            w: BufWriter::with_capacity(1 << 20, s),
            buf: Vec::new(),
        })
    }
    /// Queues a command (sent at the next flush or call).
    pub fn send(&mut self, args: &[&[u8]]) -> Result<()> {
        self.buf.clear();
        encode(&mut self.buf, args);
        self.w.write_all(&self.buf)?;
        Ok(())
    }
    pub fn flush(&mut self) -> Result<()> {
        self.w.flush()?;
        Ok(())
    }
    pub fn reply(&mut self) -> Result<Reply> {
        read_reply(&mut self.r)
    }
    /// Flushes and reads `n` replies that must all be `+OK`.
    pub fn expect_ok(&mut self, n: u64) -> Result<()> {
        self.flush()?;
        for _ in 0..n {
            match self.reply()? {
                Reply::Simple(s) if s == "OK" => {}
                r => bail!("a pipelined command answered {r:?}"),
            }
        }
        Ok(())
    }
    pub fn call(&mut self, args: &[&[u8]]) -> Result<Reply> {
        self.send(args)?;
        self.w.flush()?;
        read_reply(&mut self.r)
    }
    pub fn info(&mut self, section: &str) -> Result<String> {
        match self.call(&[b"INFO", section.as_bytes()])? {
            Reply::Bulk(Some(b)) => Ok(String::from_utf8_lossy(&b).into_owned()),
            r => bail!("INFO {section}: unexpected reply {r:?}"),
        }
    }
}

/// The value of key `i`: `value_bytes` bytes, the key number in the first 8.
fn value(i: u64, n: usize, buf: &mut Vec<u8>) {
    buf.clear();
    buf.extend_from_slice(&i.to_le_bytes());
    while buf.len() < n {
        buf.push(b'a' + ((buf.len() as u64 + i) % 26) as u8);
    }
    buf.truncate(n);
}

/// What the server's run measured.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RedisOutcome {
    /// (phase, seconds): `load`, `read`, `total` (load + read), `bgsave` and
    /// `all` (load + read + BGSAVE) when a BGSAVE ran.
    pub phases: Vec<(String, f64)>,
    pub used_memory: u64,
    pub used_memory_rss: u64,
    pub keys: u64,
    /// The BGSAVE's fork, in microseconds (`latest_fork_usec`).
    pub fork_usec: Option<u64>,
    /// `rdb_last_bgsave_status` after the BGSAVE (`ok` or `err`); `None` when no
    /// BGSAVE ran (or the server failed before it).
    pub bgsave_status: Option<String>,
    /// Whatever went wrong (the run counts as failed).
    pub error: Option<String>,
    /// The last lines of the server's log.
    pub log_tail: String,
    /// The last lines of its stderr (preloaded libraries speak there).
    pub stderr_tail: String,
}

/// The server's arguments: `port` (a number, or `{port}` for `optimize
/// --driver`), no persistence but the BGSAVE's dump, files in `dir`.
pub fn server_args(port: &str, dir: &Path) -> Vec<std::ffi::OsString> {
    let mut v: Vec<std::ffi::OsString> = [
        "--port",
        port,
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--protected-mode",
        "no",
        "--daemonize",
        "no",
        "--dir",
    ]
    .iter()
    .map(Into::into)
    .collect();
    v.push(dir.into());
    v.push("--dbfilename".into());
    v.push(format!("dump-{port}.rdb").into());
    v.push("--logfile".into());
    v.push(dir.join(format!("redis-{port}.log")).into());
    v
}

/// `hugetune bench redis-client` arguments for `job` (port `{port}`), after the
/// hugetune executable.
pub fn client_args(job: &RedisJob) -> Vec<std::ffi::OsString> {
    let mut v: Vec<std::ffi::OsString> = vec![
        "bench".into(),
        "redis-client".into(),
        "--port".into(),
        hugetune_capture::session::PORT.into(),
        "--keys".into(),
        job.keys.to_string().into(),
        "--value-bytes".into(),
        job.value_bytes.to_string().into(),
        "--batch".into(),
        job.batch.to_string().into(),
    ];
    if job.bgsave {
        v.push("--bgsave".into());
    }
    v
}

fn tail(text: &str, lines: usize) -> String {
    let v: Vec<&str> = text.lines().collect();
    v[v.len().saturating_sub(lines)..].join("\n")
}

/// Runs the job against a fresh server, as every measured server runs: through
/// `capture::runner` with `hugetune bench redis-client --json` as the session's
/// driver (capture::session), which stops the server when the load is done.
/// Returns what the client measured and the server's run (its rusage, its end,
/// the peak huge page usage of it and its BGSAVE child). Failures of the workload
/// itself (a failed BGSAVE, a wrong value, a crash) are reported in the
/// outcome, not as errors; an `Err` means the server could not be run at all.
pub fn run(
    job: &RedisJob,
    server: &Path,
    wrapper: &[String],
    env: &[(String, String)],
    env_remove: &[&str],
    dir: &Path,
) -> Result<(RedisOutcome, RunStats)> {
    let exe = std::env::current_exe().context("finding the hugetune executable")?;
    // A port the kernel gave may be taken before the server binds it: retried.
    let mut last = String::new();
    for _attempt in 0..3 {
        let port = free_port()?;
        let mut argv: Vec<OsString> = wrapper.iter().map(OsString::from).collect();
        argv.push(server.into());
        argv.extend(server_args(&port.to_string(), dir));
        let mut spec = RunSpec::new(argv);
        spec.env = env.to_vec();
        spec.env_remove = env_remove.iter().map(|s| s.to_string()).collect();
        spec.stderr = Output::Capture;
        let mut client = vec![exe.clone().into_os_string()];
        client.extend(with_port(&client_args(job), port));
        client.push("--json".into());
        let mut d = Driver::new(client);
        d.ready_port = Some(port);
        d.ready_timeout = Duration::from_secs(20);
        d.capture_stdout = true;
        spec.driver = Some(d);
        let st = runner::run(&spec)?;
        let log = dir.join(format!("redis-{port}.log"));
        let log_tail = tail(&std::fs::read_to_string(&log).unwrap_or_default(), 8);
        let stderr_tail = tail(&String::from_utf8_lossy(&st.stderr), 40);
        for f in [format!("dump-{port}.rdb"), format!("redis-{port}.log")] {
            let _ = std::fs::remove_file(dir.join(f));
        }
        let never_served = st
            .session_error
            .as_deref()
            .is_some_and(|e| e.contains("before it accepted connections"));
        if never_served && log_tail.contains("Address already in use") {
            last = log_tail;
            continue;
        }
        let mut out = serde_json::from_slice::<RedisOutcome>(&st.driver_stdout).unwrap_or_default();
        out.error = st.session_error.clone();
        if out.error.is_none() && st.exit_code != 0 {
            out.error = Some(format!("redis-server exited with status {}", st.exit_code));
        }
        out.log_tail = log_tail;
        out.stderr_tail = stderr_tail;
        return Ok((out, st));
    }
    bail!("redis-server did not start: {}", last.trim())
}

/// A connection to the server on 127.0.0.1:`port` once it serves: connecting is
/// retried for `connect_for` (a server just started), and a server that loads
/// a dump at start (accepting connections before it serves) is waited for.
pub fn client_conn(port: u16, connect_for: Duration) -> Result<Conn> {
    let t = Instant::now();
    let mut c = loop {
        match Conn::open(port) {
            Ok(c) => break c,
            Err(_) if t.elapsed() < connect_for => std::thread::sleep(Duration::from_millis(50)),
            Err(e) => {
                return Err(e).with_context(|| format!("connecting to redis on 127.0.0.1:{port}"))
            }
        }
    };
    loop {
        match c.call(&[b"PING"])? {
            Reply::Simple(p) if p == "PONG" => break,
            Reply::Error(e)
                if e.starts_with("LOADING") && t.elapsed() < Duration::from_secs(600) =>
            {
                std::thread::sleep(Duration::from_millis(50))
            }
            r => bail!("PING answered {r:?}"),
        }
    }
    Ok(c)
}

/// The suites' client, against a server already running on 127.0.0.1:`port`
/// (the driver of `optimize --driver` and of the bench's own runs): the job's
/// load, read and BGSAVE; an error when any of them fails, the BGSAVE too when
/// `strict_bgsave` (otherwise its status is in the outcome).
pub fn client(job: &RedisJob, port: u16, strict_bgsave: bool) -> Result<RedisOutcome> {
    let mut c = client_conn(port, Duration::ZERO)?;
    let mut out = RedisOutcome::default();
    drive(job, &mut c, &mut out)?;
    if strict_bgsave && job.bgsave && out.bgsave_status.as_deref() != Some("ok") {
        bail!(
            "the BGSAVE failed (rdb_last_bgsave_status: {})",
            out.bgsave_status.as_deref().unwrap_or("unknown")
        );
    }
    Ok(out)
}

fn drive(job: &RedisJob, c: &mut Conn, out: &mut RedisOutcome) -> Result<()> {
    let mut val = Vec::with_capacity(job.value_bytes);
    let key = |i: u64| format!("key:{i:010}");
    // Load.
    let t = Instant::now();
    let mut i = 0u64;
    while i < job.keys {
        let end = (i + job.batch as u64).min(job.keys);
        for k in i..end {
            value(k, job.value_bytes, &mut val);
            c.send(&[b"SET", key(k).as_bytes(), &val])?;
        }
        c.w.flush()?;
        for k in i..end {
            match read_reply(&mut c.r)? {
                Reply::Simple(s) if s == "OK" => {}
                r => bail!("SET {} answered {r:?}", key(k)),
            }
        }
        i = end;
    }
    let load = t.elapsed().as_secs_f64();
    out.phases.push(("load".into(), load));
    // Read every key back.
    let t = Instant::now();
    let mut i = 0u64;
    while i < job.keys {
        let end = (i + job.batch as u64).min(job.keys);
        for k in i..end {
            c.send(&[b"GET", key(k).as_bytes()])?;
        }
        c.w.flush()?;
        for k in i..end {
            match read_reply(&mut c.r)? {
                Reply::Bulk(Some(v))
                    if v.len() == job.value_bytes
                        && v.len() >= 8
                        && u64::from_le_bytes(v[..8].try_into().unwrap_or_default()) == k => {}
                r => bail!(
                    "GET {} returned a wrong value ({})",
                    key(k),
                    match r {
                        Reply::Bulk(Some(v)) => format!("{} bytes", v.len()),
                        other => format!("{other:?}"),
                    }
                ),
            }
        }
        i = end;
    }
    let read = t.elapsed().as_secs_f64();
    out.phases.push(("read".into(), read));
    out.phases.push(("total".into(), load + read));
    let mem = c.info("memory")?;
    out.used_memory = info_field(&mem, "used_memory")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    out.used_memory_rss = info_field(&mem, "used_memory_rss")
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    out.keys = match c.call(&[b"DBSIZE"])? {
        Reply::Int(n) => n.max(0) as u64,
        r => bail!("DBSIZE answered {r:?}"),
    };
    if out.keys != job.keys {
        bail!("DBSIZE is {} after loading {} keys", out.keys, job.keys);
    }
    if job.bgsave {
        let t = Instant::now();
        match c.call(&[b"BGSAVE"])? {
            Reply::Simple(_) => {}
            r => bail!("BGSAVE answered {r:?}"),
        }
        loop {
            let p = c.info("persistence")?;
            if info_field(&p, "rdb_bgsave_in_progress").as_deref() == Some("0") {
                out.bgsave_status = info_field(&p, "rdb_last_bgsave_status");
                break;
            }
            if t.elapsed() > Duration::from_secs(600) {
                bail!("BGSAVE still running after 10 minutes");
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let bg = t.elapsed().as_secs_f64();
        out.phases.push(("bgsave".into(), bg));
        out.phases.push(("all".into(), load + read + bg));
        let st = c.info("stats")?;
        out.fork_usec = info_field(&st, "latest_fork_usec").and_then(|v| v.parse().ok());
        // A failed BGSAVE is the caller's verdict (a failure of the fork
        // control, a finding elsewhere), not an error of the run.
    }
    Ok(())
}

/// `redis-server`, or where to get it.
pub fn server_path() -> std::result::Result<PathBuf, String> {
    super::config::find_program("redis-server").ok_or_else(|| {
        "redis-server is not installed (apt-get install redis-server; scripts/setup.sh does)"
            .to_string()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resp_round_trip() {
        let mut v = Vec::new();
        encode(&mut v, &[b"SET", b"k", b"a\r\nb"]);
        assert_eq!(v, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$4\r\na\r\nb\r\n");
        let mut r = std::io::Cursor::new(
            b"+OK\r\n-ERR bad\r\n:42\r\n$3\r\nabc\r\n$-1\r\n*2\r\n:1\r\n$0\r\n\r\n*-1\r\n".to_vec(),
        );
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Simple("OK".into()));
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Error("ERR bad".into()));
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Int(42));
        assert_eq!(
            read_reply(&mut r).unwrap(),
            Reply::Bulk(Some(b"abc".to_vec()))
        );
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Bulk(None));
        assert_eq!(
            read_reply(&mut r).unwrap(),
            Reply::Array(Some(vec![Reply::Int(1), Reply::Bulk(Some(vec![]))]))
        );
        assert_eq!(read_reply(&mut r).unwrap(), Reply::Array(None));
        assert!(read_reply(&mut r).is_err(), "end of stream");
        for bad in [
            &b"?x\r\n"[..],
            b":x\r\n",
            b"$5\r\nab\r\n",
            b"+OK\n",
            b"$2\r\nabcd",
        ] {
            assert!(
                read_reply(&mut std::io::Cursor::new(bad.to_vec())).is_err(),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn info_fields_and_values() {
        let info = "# Persistence\r\nrdb_bgsave_in_progress:0\r\nrdb_last_bgsave_status:ok\r\n";
        assert_eq!(
            info_field(info, "rdb_last_bgsave_status").as_deref(),
            Some("ok")
        );
        assert_eq!(
            info_field(info, "rdb_bgsave_in_progress").as_deref(),
            Some("0")
        );
        assert_eq!(info_field(info, "missing"), None);
        let mut b = Vec::new();
        value(7, 20, &mut b);
        assert_eq!(b.len(), 20);
        assert_eq!(u64::from_le_bytes(b[..8].try_into().unwrap()), 7);
        let j = RedisJob {
            keys: 1000,
            value_bytes: 500,
            batch: 100,
            bgsave: false,
        };
        assert_eq!(j.dataset_bytes(), 500_000);
        assert!(j.memory_estimate() > j.dataset_bytes());
    }
}
