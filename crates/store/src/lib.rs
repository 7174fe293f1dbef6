//! The database only: machine classes, hosts, programs, profiles, directives,
//! runs, validations and calibrations — embedded SQLite by default, a
//! PostgreSQL server for fleets (`postgresql://…`) — their queries, export,
//! import and sync. The profile bundle a `profiles` row names is
//! `hugetune_format::profile`'s.
//!
//! Invariants: the same `Db` methods and the same schema on both engines;
//! every multi-row write is one transaction; the schema is created and
//! migrated on open; nothing here runs processes or reads /proc (the host
//! describes itself through `Db::set_host_source`).

pub mod backend;
pub mod db;
pub mod exchange;
pub mod identity;
pub mod query;
pub(crate) mod schema;
pub mod sync;

#[cfg(test)]
#[path = "../tests/support/pg.rs"]
mod pg_support;

/// Unit tests that run on both engines: `engine_tests!{ fn name(fresh) { … } }`
/// makes `name::sqlite` and `name::postgres`, where `fresh()` gives a new,
/// empty database of that engine each time it is called.
#[cfg(test)]
pub(crate) mod testing {
    use crate::db::Db;

    pub struct Fresh {
        dir: tempfile::TempDir,
        postgres: bool,
        n: u32,
    }

    impl Fresh {
        pub fn new(postgres: bool) -> Fresh {
            Fresh {
                dir: tempfile::tempdir().unwrap(),
                postgres,
                n: 0,
            }
        }

        /// A new, empty database.
        pub fn db(&mut self) -> Db {
            self.n += 1;
            if self.postgres {
                Db::connect(&crate::pg_support::fresh_database()).unwrap()
            } else {
                Db::open(&self.dir.path().join(format!("h{}.db", self.n))).unwrap()
            }
        }
    }

    macro_rules! engine_tests {
        ($(fn $name:ident($fresh:ident) $body:block)*) => {$(
            mod $name {
                #[allow(unused_imports)]
                use super::*;
                fn body($fresh: &mut dyn FnMut() -> $crate::db::Db) $body
                #[test]
                fn sqlite() {
                    let mut f = $crate::testing::Fresh::new(false);
                    body(&mut || f.db());
                }
                #[test]
                fn postgres() {
                    let mut f = $crate::testing::Fresh::new(true);
                    body(&mut || f.db());
                }
            }
        )*};
    }
    pub(crate) use engine_tests;
}
