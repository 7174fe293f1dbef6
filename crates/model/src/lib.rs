//! The page size benefit model of hugetune (seed 001, sections 3-5).
//!
//! Pure computation: it takes allocation events, address ranges and a reference
//! stream, and returns numbers. No I/O happens here, so every piece is testable
//! against brute force and benchmarkable on its own.

pub mod analysis;
pub mod categorize;
pub mod category;
pub mod cost;
pub mod frequency;
pub mod mrc;
pub mod page;
pub mod plan;
pub mod pool;
pub mod rank;
pub mod reuse;
pub mod sampled;
pub mod shards;
pub mod sizing;
pub mod stats;
pub mod statstack;
pub mod stream;
pub mod timesampled;
pub mod tlb;

pub use analysis::{analyze, AnalysisInput, AnalysisResult, MappingResult};
pub use category::Category;
pub use page::Backing;
