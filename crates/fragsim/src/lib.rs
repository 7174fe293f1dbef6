//! fragsim: a buddy allocator simulator with Linux migratetypes, pageblocks,
//! watermarks, reclaim, compaction and pluggable fallback policies (seed 003,
//! REF-fragmentation §2, §5-§8).
//!
//! Pure computation except [`replay::read_file`], which reads a recorded
//! `hugetune-pagealloc v1` stream. Every run is deterministic for a seed.

pub mod metrics;
pub mod policy;
pub mod replay;
pub mod rng;
pub mod sim;
pub mod workload;
pub mod zone;

pub use metrics::{Sample, Summary};
pub use policy::{Policy, PolicyKind};
pub use sim::{AllocMode, Handle, Req, Sim, SimConfig, Stats};
pub use zone::{Zone, ZoneSpec};

/// Largest buddy order (`MAX_PAGE_ORDER`; v4.5 `MAX_ORDER - 1`): 4 MB blocks.
pub const MAX_ORDER: u8 = 10;
pub const NR_ORDERS: usize = MAX_ORDER as usize + 1;
/// `pageblock_order` on x86-64: 2 MB pageblocks.
pub const PB_ORDER: u8 = 9;
pub const PB_PAGES: u32 = 1 << PB_ORDER;
/// `PAGE_ALLOC_COSTLY_ORDER`.
pub const COSTLY_ORDER: u8 = 3;

/// Migratetypes: the three the kernel's gfp flags produce, plus Illuminator's
/// MIXED (composite) type. HIGHATOMIC, CMA and ISOLATE are not simulated.
#[derive(
    Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Debug, serde::Serialize, serde::Deserialize,
)]
#[repr(u8)]
pub enum Mt {
    Unmovable = 0,
    Movable = 1,
    Reclaimable = 2,
    Mixed = 3,
}

pub const NR_MT: usize = 4;

impl Mt {
    pub const ALL: [Mt; NR_MT] = [Mt::Unmovable, Mt::Movable, Mt::Reclaimable, Mt::Mixed];

    pub fn from_u8(v: u8) -> Mt {
        match v {
            0 => Mt::Unmovable,
            1 => Mt::Movable,
            2 => Mt::Reclaimable,
            _ => Mt::Mixed,
        }
    }

    /// Kernel (wired) memory: cannot be migrated.
    pub fn is_kernel(self) -> bool {
        matches!(self, Mt::Unmovable | Mt::Reclaimable)
    }

    pub fn name(self) -> &'static str {
        match self {
            Mt::Unmovable => "Unmovable",
            Mt::Movable => "Movable",
            Mt::Reclaimable => "Reclaimable",
            Mt::Mixed => "Mixed",
        }
    }
}

/// `fallbacks[]` of mm/page_alloc.c (v4.5 and today, REF §5.2).
pub fn fallbacks(mt: Mt) -> [Mt; 2] {
    match mt {
        Mt::Unmovable => [Mt::Reclaimable, Mt::Movable],
        Mt::Movable => [Mt::Reclaimable, Mt::Unmovable],
        Mt::Reclaimable => [Mt::Unmovable, Mt::Movable],
        Mt::Mixed => [Mt::Movable, Mt::Unmovable],
    }
}
