//! Example producers and workers for `spanner-queues`.
//!
//! Run the demo (a worker on an embedded emulator, no cloud account needed):
//!
//! ```text
//! cargo run -p spanner-queues-examples --bin demo
//! ```

/// The README's code blocks, compiled as doctests (the ones that need a database are
/// `no_run`). The "Testing your queue code" block is `testing/tests/readme_example.rs`, which
/// runs as a test of its own.
#[cfg(doctest)]
#[doc = include_str!("../../README.md")]
struct ReadmeDoctests;
