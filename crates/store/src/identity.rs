//! Who is who in a fleet: the host (its id: `--host-id`, else the systemd
//! machine id), the machine class a host belongs to (what the model's
//! predictions depend on: CPU vendor/family/model, TLB geometry, kernel major
//! version, page sizes offered, virtualized or not), and the unique ids that
//! let rows written on many hosts be merged without duplicates.
//!
//! Invariants: a class key is canonical JSON of exactly those fields (sorted
//! keys, no host-specific text such as where the TLB figures came from), so
//! two hosts of the same hardware and kernel line derive the same key whatever
//! their names; a host id is 1..=128 characters of `[A-Za-z0-9._:-]`.

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::sync::OnceLock;

static HOST_ID: OnceLock<String> = OnceLock::new();

/// Checks a host id given by the user.
pub fn check_host_id(id: &str) -> Result<()> {
    if id.is_empty() || id.len() > 128 {
        bail!("a host id has 1 to 128 characters; '{id}' has {}", id.len());
    }
    if let Some(c) = id
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | ':' | '-')))
    {
        bail!("a host id is letters, digits and . _ : - only; '{id}' has {c:?}");
    }
    Ok(())
}

/// Sets this process's host id (`--host-id`), for every database it opens.
/// Only the first call counts (one process is one host).
pub fn set_host_id(id: &str) -> Result<()> {
    check_host_id(id)?;
    let _ = HOST_ID.set(id.to_string());
    Ok(())
}

/// This process's host id: `set_host_id`'s, else `/etc/machine-id` (systemd's,
/// stable across reboots and unique per installation), else D-Bus's copy of
/// it, else `host:` and the host name.
pub fn host_id() -> String {
    HOST_ID.get_or_init(default_host_id).clone()
}

fn default_host_id() -> String {
    for f in ["/etc/machine-id", "/var/lib/dbus/machine-id"] {
        if let Ok(t) = std::fs::read_to_string(f) {
            let t = t.trim();
            if check_host_id(t).is_ok() {
                return t.to_string();
            }
        }
    }
    let name = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
    let name: String = name
        .trim()
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        .take(100)
        .collect();
    format!("host:{}", if name.is_empty() { "unknown" } else { &name })
}

/// A fresh unique id for a row (128 random bits, hex): what makes a run, a
/// profile, a validation or a calibration the same row on every host it is
/// copied to, so merging twice adds nothing.
pub fn new_uid() -> String {
    let mut b = [0u8; 16];
    // SAFETY: getrandom writes at most b.len() bytes into b.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n != b.len() as isize {
        // No getrandom (very old kernels): time, pid and a counter, mixed.
        use std::sync::atomic::{AtomicU64, Ordering};
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64);
        let seed = [
            t,
            std::process::id() as u64,
            COUNTER.fetch_add(1, Ordering::Relaxed),
        ];
        for (i, chunk) in b.chunks_mut(8).enumerate() {
            let mut h = 0xcbf2_9ce4_8422_2325u64 ^ i as u64;
            for s in seed {
                h = (h ^ s).wrapping_mul(0x0100_0000_01b3).rotate_left(29);
            }
            chunk.copy_from_slice(&h.to_le_bytes()[..chunk.len()]);
        }
    }
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// What the model's predictions depend on, and nothing else.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MachineClass {
    pub vendor: String,
    pub family: u64,
    pub model: u64,
    /// The data TLB levels the model uses (`TlbGeometry::levels`).
    pub tlb: Value,
    pub kernel_major: u64,
    /// Page sizes offered, in bytes: the base page, hugetlb pool sizes, mTHP sizes.
    pub page_sizes: Vec<u64>,
    pub virtualized: bool,
}

/// JSON with object keys sorted at every level: one text per value.
pub fn canonical_json(v: &Value) -> String {
    match v {
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            let parts: Vec<String> = keys
                .iter()
                .map(|k| format!("{}:{}", Value::String((*k).clone()), canonical_json(&o[*k])))
                .collect();
            format!("{{{}}}", parts.join(","))
        }
        Value::Array(a) => format!(
            "[{}]",
            a.iter().map(canonical_json).collect::<Vec<_>>().join(",")
        ),
        other => other.to_string(),
    }
}

fn fnv64(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

impl MachineClass {
    /// The class of a machine described as `hugetune machine --json` (and the
    /// `machines.details` column) describes it: `cpu.{vendor,family,model,hypervisor}`,
    /// `tlb.geometry.levels`, `kernel`, `pools[].page_kb`, `mthp[][0]` (kB).
    pub fn from_machine_json(m: &Value) -> Result<MachineClass> {
        let cpu = &m["cpu"];
        let vendor = cpu["vendor"]
            .as_str()
            .context("the machine description has no cpu.vendor")?
            .to_string();
        let family = cpu["family"]
            .as_u64()
            .context("the machine description has no cpu.family")?;
        let model = cpu["model"]
            .as_u64()
            .context("the machine description has no cpu.model")?;
        let tlb = m["tlb"]["geometry"]["levels"].clone();
        if !tlb.is_array() {
            bail!("the machine description has no tlb.geometry.levels");
        }
        let kernel = m["kernel"]
            .as_str()
            .context("the machine description has no kernel")?;
        let kernel_major = kernel
            .split(['.', '-'])
            .next()
            .and_then(|s| s.parse().ok())
            .with_context(|| format!("kernel release '{kernel}' has no major version"))?;
        let mut page_sizes = vec![4096u64];
        for p in m["pools"].as_array().into_iter().flatten() {
            if let Some(kb) = p["page_kb"].as_u64() {
                page_sizes.push(kb * 1024);
            }
        }
        for s in m["mthp"].as_array().into_iter().flatten() {
            if let Some(kb) = s[0].as_u64() {
                page_sizes.push(kb * 1024);
            }
        }
        page_sizes.sort_unstable();
        page_sizes.dedup();
        Ok(MachineClass {
            vendor,
            family,
            model,
            tlb,
            kernel_major,
            page_sizes,
            virtualized: !cpu["hypervisor"].is_null(),
        })
    }

    /// The class's identity in the database: canonical JSON of every field.
    pub fn key(&self) -> String {
        canonical_json(&serde_json::to_value(self).unwrap_or(Value::Null))
    }

    /// A short tag for people (the key's hash): `c-0123abcd`.
    pub fn tag(&self) -> String {
        format!("c-{:08x}", fnv64(&self.key()) >> 32)
    }

    /// One line for people: vendor family/model, kernel, VM, page sizes, tag.
    pub fn summary(&self) -> String {
        let sizes: Vec<String> = self
            .page_sizes
            .iter()
            .map(|&b| match b {
                b if b >= 1 << 30 => format!("{}G", b >> 30),
                b if b >= 1 << 20 => format!("{}M", b >> 20),
                b => format!("{}K", b >> 10),
            })
            .collect();
        format!(
            "{} {}/{} kernel {}.x {} pages {} tlb {}",
            self.vendor,
            self.family,
            self.model,
            self.kernel_major,
            if self.virtualized { "vm" } else { "bare" },
            sizes.join(","),
            self.tag()
        )
    }
}

/// What a host tells the store about itself when it registers (`Db::register_host`).
#[derive(Debug, Clone, PartialEq)]
pub struct HostSpec {
    pub hostname: String,
    pub cpu: String,
    pub kernel: String,
    /// The whole machine description (`hugetune_host::machine::Machine` as JSON):
    /// the class is derived from it.
    pub details: Value,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn machine(kernel: &str, levels: Value, hyper: Value) -> Value {
        json!({
            "hostname": "a", "kernel": kernel,
            "cpu": {"vendor": "GenuineIntel", "family": 6, "model": 85, "brand": "Xeon", "hypervisor": hyper},
            "tlb": {"geometry": {"levels": levels, "source": "cpuid on host a"}},
            "pools": [{"page_kb": 2048, "nr": 3}, {"page_kb": 1048576, "nr": 0}],
            "mthp": [[64, "never"], [2048, "madvise"]],
        })
    }

    #[test]
    fn hosts_of_the_same_hardware_share_a_class() {
        let l =
            json!([{"name": "L1 DTLB", "arrays": [{"sizes": ["4k"], "entries": 64, "ways": 4}]}]);
        let a = MachineClass::from_machine_json(&machine("6.1.0-18-amd64", l.clone(), Value::Null))
            .unwrap();
        let mut other_host = machine("6.1.0-21-amd64", l.clone(), Value::Null);
        other_host["hostname"] = "b".into();
        other_host["tlb"]["geometry"]["source"] = "cpuid on host b".into();
        other_host["pools"][0]["nr"] = 100.into();
        let b = MachineClass::from_machine_json(&other_host).unwrap();
        assert_eq!(a.key(), b.key());
        assert_eq!(a.page_sizes, vec![4096, 64 << 10, 2 << 20, 1 << 30]);
        assert_eq!(a.kernel_major, 6);
        assert!(a
            .summary()
            .starts_with("GenuineIntel 6/85 kernel 6.x bare pages 4K,64K,2M,1G"));
        // Each thing the model depends on makes another class.
        let vm = MachineClass::from_machine_json(&machine("6.1", l.clone(), "KVM".into())).unwrap();
        let k5 = MachineClass::from_machine_json(&machine("5.15.0", l, Value::Null)).unwrap();
        let small = MachineClass::from_machine_json(&machine(
            "6.1",
            json!([{"name": "L1 DTLB", "arrays": [{"sizes": ["4k"], "entries": 32, "ways": 4}]}]),
            Value::Null,
        ))
        .unwrap();
        for c in [&vm, &k5, &small] {
            assert_ne!(c.key(), a.key(), "{c:?}");
        }
        assert_ne!(small.tag(), a.tag());
    }

    #[test]
    fn a_description_without_the_fields_is_an_error_naming_them() {
        let e = MachineClass::from_machine_json(&json!({})).unwrap_err();
        assert!(e.to_string().contains("cpu.vendor"), "{e}");
        let mut m = machine("x", json!([]), Value::Null);
        let e = MachineClass::from_machine_json(&m).unwrap_err();
        assert!(e.to_string().contains("major version"), "{e}");
        m["kernel"] = "6.2".into();
        m["tlb"] = json!({});
        let e = MachineClass::from_machine_json(&m).unwrap_err();
        assert!(e.to_string().contains("tlb.geometry.levels"), "{e}");
    }

    #[test]
    fn canonical_json_sorts_keys_at_every_level() {
        let a = json!({"b": [{"y": 1, "x": 2}], "a": null});
        assert_eq!(canonical_json(&a), r#"{"a":null,"b":[{"x":2,"y":1}]}"#);
    }

    #[test]
    fn host_ids_are_checked_and_uids_unique() {
        assert!(check_host_id("3d1219c7c4c5404aaa1f6d2a48adfda4").is_ok());
        assert!(check_host_id("web-01.dc2:a_b").is_ok());
        for bad in ["", "a b", "x/y", &"a".repeat(129)] {
            assert!(check_host_id(bad).is_err(), "{bad}");
        }
        assert!(check_host_id(&default_host_id()).is_ok());
        let u: std::collections::HashSet<String> = (0..1000).map(|_| new_uid()).collect();
        assert_eq!(u.len(), 1000);
        assert!(u.iter().all(|x| x.len() == 32));
    }
}
