//! The PostgreSQL server the tests use: `$HUGETUNE_TEST_PG` (scripts/test.sh
//! starts one with `scripts/pg.sh run`), else a throw-away cluster started once
//! per test process with `scripts/pg.sh start --owner PID` (its watchdog stops
//! and removes it when the process ends, however it ends). Each test gets a
//! database of its own in it. Without PostgreSQL installed a test fails, saying
//! to run scripts/setup.sh: it never passes without having run.
//!
//! Shared by the store's unit and integration tests and the CLI's (`#[path]`).

#![allow(dead_code)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

static SERVER: OnceLock<String> = OnceLock::new();

/// The server's URL (its `postgres` database).
pub fn server_url() -> &'static str {
    SERVER.get_or_init(|| {
        if let Some(url) = std::env::var("HUGETUNE_TEST_PG")
            .ok()
            .filter(|u| !u.is_empty())
        {
            return url;
        }
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/pg.sh");
        let out = std::process::Command::new("bash")
            .arg(script)
            .args(["start", "--owner", &std::process::id().to_string()])
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap_or_else(|e| panic!("cannot run {script}: {e}"));
        assert!(
            out.status.success(),
            "no PostgreSQL server for the tests: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .next()
            .expect("pg.sh start printed no URL")
            .to_string()
    })
}

/// `url` with its database name replaced.
pub fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.find('?') {
        Some(q) => (&url[..q], &url[q..]),
        None => (url, ""),
    };
    let after_scheme = base.find("://").map_or(0, |i| i + 3);
    let head = match base[after_scheme..].find('/') {
        Some(slash) => &base[..after_scheme + slash],
        None => base,
    };
    format!("{head}/{name}{query}")
}

/// A new, empty database on the server: its URL.
pub fn fresh_database() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    let server = server_url();
    let name = format!(
        "hugetune_t{}_{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    );
    let mut c = postgres::Client::connect(server, postgres::NoTls)
        .unwrap_or_else(|e| panic!("connecting to the test server {server}: {e}"));
    c.batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap_or_else(|e| panic!("creating database {name}: {e}"));
    with_database(server, &name)
}
