//! Data categories (seed 001 §3.3, refined): where a referenced byte lives.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// A data category. `Static`, `HeapSmall` and `HeapLarge` can be mapped to huge
/// pages by the runtime library; `Stack` and `Other` always stay on base pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Category {
    Static,
    HeapSmall,
    HeapLarge,
    Stack,
    Other,
}

impl Category {
    pub const ALL: [Category; 5] = [
        Category::Static,
        Category::HeapSmall,
        Category::HeapLarge,
        Category::Stack,
        Category::Other,
    ];
    /// The categories a mapping can move to huge pages.
    pub const MAPPABLE: [Category; 3] =
        [Category::Static, Category::HeapSmall, Category::HeapLarge];

    pub fn index(self) -> usize {
        self as usize
    }

    pub fn name(self) -> &'static str {
        match self {
            Category::Static => "static",
            Category::HeapSmall => "heap-small",
            Category::HeapLarge => "heap-large",
            Category::Stack => "stack",
            Category::Other => "other",
        }
    }

    pub fn is_mappable(self) -> bool {
        Category::MAPPABLE.contains(&self)
    }
}

impl fmt::Display for Category {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Category {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Category::ALL
            .iter()
            .copied()
            .find(|c| c.name() == s)
            .ok_or_else(|| {
                format!("unknown category '{s}' (expected static, heap-small, heap-large, stack or other)")
            })
    }
}

/// A per-category array, indexed by [`Category::index`].
pub type PerCategory<T> = [T; 5];
