//! Example producers and workers for `spanner-queues`.
//!
//! Run the demo (a worker on an embedded emulator, no cloud account needed):
//!
//! ```text
//! cargo run -p spanner-queues-examples --bin demo
//! ```
