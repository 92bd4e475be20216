//! Shared helpers for the spanner-queues integration tests.
//!
//! The tests live in `tests/integration/` and run against whatever backend
//! `spanner_queues_emulator::harness` provides (emulator in a container, emulator processes, an
//! existing `SPANNER_EMULATOR_HOST`, or a real instance named by `SPANNER_QUEUES_TEST_INSTANCE`).

pub use spanner_queues_emulator::harness::{self, TestDatabase};

/// Gets a fresh database or skips the test (returning from it) with the harness's printed
/// reason. With `SPANNER_QUEUES_REQUIRE_EMULATOR=1` a missing backend fails the test instead.
#[macro_export]
macro_rules! db_or_skip {
    () => {
        match $crate::harness::database().await {
            Some(db) => db,
            None => return,
        }
    };
    ($ddl:expr) => {
        match $crate::harness::database_with_ddl($ddl).await {
            Some(db) => db,
            None => return,
        }
    };
}
