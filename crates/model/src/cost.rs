//! The cost model (seed 001 eq. 2), in nanoseconds rather than cycles: this
//! machine class (VMs without a PMU) cannot count cycles, but it can time.
//!
//! MissTime(M) = Σ L1-miss/L2-hit × c_l2_hit(size) + Σ walks × c_walk(size)
//!             + Σ faults × c_fault(backing)
//!
//! The defaults were measured on the reference machine (AMD EPYC Zen 5 KVM guest,
//! kernel 6.18); `docs/model.md` gives the experiments. `hugetune calibrate`
//! replaces them with this machine's figures.

use crate::page::{Backing, PageSize};
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CostModel {
    /// Extra time of an access that misses the L1 DTLB and hits the L2, per size.
    pub l2_hit_ns: [f64; 2],
    /// Extra time of a page walk (L2 DTLB miss), per size.
    pub walk_ns: [f64; 2],
    /// Time of a first-touch fault, per backing (4k, thp-2m, hugetlb-2m).
    pub fault_ns: [f64; 3],
    /// Where the constants come from.
    pub source: String,
}

impl Default for CostModel {
    fn default() -> Self {
        CostModel {
            // Pointer chase, one line per page: 1.1 ns (in L1 DTLB) vs 3.0 ns (L2 hit).
            l2_hit_ns: [2.0, 2.0],
            // Chase over 1 GiB: 260 ns/access with 4 KB pages, 180 ns with 2 MB.
            // 2 MB walks with cached page-directory entries: ~15 ns.
            walk_ns: [80.0, 15.0],
            // First touch of 1 GiB: 3.5 us per 4 KB fault, 209 us per THP fault
            // (allocation + zeroing), 105 us per hugetlb fault (zeroing).
            fault_ns: [3_500.0, 209_000.0, 105_000.0],
            source: "defaults measured on an AMD EPYC (Zen 5) KVM guest, see docs/model.md".into(),
        }
    }
}

fn backing_index(b: Backing) -> usize {
    match b {
        Backing::Base4k => 0,
        Backing::Thp2m => 1,
        Backing::Hugetlb2m => 2,
    }
}

impl CostModel {
    pub fn fault(&self, b: Backing) -> f64 {
        self.fault_ns[backing_index(b)]
    }
    pub fn l2_hit(&self, s: PageSize) -> f64 {
        self.l2_hit_ns[s.index()]
    }
    pub fn walk(&self, s: PageSize) -> f64 {
        self.walk_ns[s.index()]
    }

    /// Checks that every constant is finite and non-negative.
    pub fn validate(&self) -> Result<(), String> {
        let all = self
            .l2_hit_ns
            .iter()
            .chain(&self.walk_ns)
            .chain(&self.fault_ns);
        if all.clone().any(|v| !v.is_finite() || *v < 0.0) {
            return Err("cost model constants must be finite and non-negative".into());
        }
        Ok(())
    }
}
