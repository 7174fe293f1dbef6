//! What the model's integration tests share: a TLB like AMD Zen's (64-entry
//! L1 for every size, a 2 048-entry L2 for 4 KB and 2 MB), fully associative.

use hugetune_model::page::PageSize::{P1g, P2m, P4k};
use hugetune_model::tlb::{TlbArray, TlbGeometry, TlbLevel};

pub fn zen_like() -> TlbGeometry {
    TlbGeometry {
        levels: vec![
            TlbLevel::new("L1", vec![TlbArray::new(&[P4k, P2m, P1g], 64, 0)], None),
            TlbLevel::new("L2", vec![TlbArray::new(&[P4k, P2m], 2048, 0)], None),
        ],
        source: "test".into(),
    }
}
