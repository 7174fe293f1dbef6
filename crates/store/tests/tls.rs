//! TLS to a PostgreSQL store (issue 20): a throw-away cluster of its own
//! (`scripts/pg.sh start --ssl`) with a self-signed certificate this test makes
//! with openssl, reached over TCP. `sslmode` keeps libpq's meanings: require
//! encrypts without checking; verify-ca checks the CA (`sslrootcert`);
//! verify-full the host name as well; a wrong CA is refused with a message
//! that says so.

use hugetune_store::db::Db;
use std::path::Path;
use std::process::Command;

fn openssl_cert(dir: &Path, name: &str, cn: &str) {
    let out = Command::new("openssl")
        .args([
            "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj",
        ])
        .arg(format!("/CN={cn}"))
        .arg("-addext")
        .arg(format!("subjectAltName=DNS:{cn}"))
        .arg("-keyout")
        .arg(dir.join(format!("{name}.key")))
        .arg("-out")
        .arg(dir.join(format!("{name}.crt")))
        .output()
        .expect("openssl is needed for this test (scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Stops the cluster however the test ends.
struct Cluster(String);
impl Drop for Cluster {
    fn drop(&mut self) {
        let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/pg.sh");
        let _ = Command::new("bash")
            .arg(script)
            .args(["stop", &self.0])
            .status();
    }
}

#[test]
fn sslmode_require_verify_ca_and_verify_full_against_a_self_signed_server() {
    let d = tempfile::tempdir().unwrap();
    openssl_cert(d.path(), "server", "localhost");
    openssl_cert(d.path(), "wrong", "localhost");
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/pg.sh");
    let out = Command::new("bash")
        .arg(script)
        .args(["start", "--owner", &std::process::id().to_string(), "--ssl"])
        .arg(d.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "pg.sh start --ssl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    let mut lines = text.lines();
    let url = lines.next().unwrap().to_string();
    let _cluster = Cluster(lines.next().unwrap().to_string());
    assert!(url.contains("@localhost:"), "{url}");
    let ca = d.path().join("server.crt");
    let wrong = d.path().join("wrong.crt");
    let encrypted = |db: &Db| {
        db.query_sql(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .unwrap()[0]
            .bool(0)
            .unwrap()
    };
    // require: encrypted, the self-signed certificate not checked.
    let db = Db::connect(&format!("{url}?sslmode=require")).unwrap();
    assert!(encrypted(&db));
    // verify-full with the CA that signed it: the name matches (localhost).
    let full = format!("{url}?sslmode=verify-full&sslrootcert={}", ca.display());
    assert!(encrypted(&Db::connect(&full).unwrap()));
    // verify-full with another CA: refused, saying why.
    let e = Db::connect(&format!(
        "{url}?sslmode=verify-full&sslrootcert={}",
        wrong.display()
    ))
    .err()
    .expect("a certificate of another CA was accepted");
    let msg = format!("{e:#}");
    assert!(
        msg.contains("TLS certificate was refused") && msg.contains("sslrootcert"),
        "{msg}"
    );
    // By address, the name does not match: verify-full refuses, verify-ca accepts.
    let by_ip = url.replace("@localhost:", "@127.0.0.1:");
    assert!(Db::connect(&format!(
        "{by_ip}?sslmode=verify-full&sslrootcert={}",
        ca.display()
    ))
    .is_err());
    assert!(encrypted(
        &Db::connect(&format!(
            "{by_ip}?sslmode=verify-ca&sslrootcert={}",
            ca.display()
        ))
        .unwrap()
    ));
    // disable: the server takes TCP with TLS only.
    assert!(Db::connect(&format!("{url}?sslmode=disable")).is_err());
}
