//! Checks of the workspace's own shape, run as this crate's tests: `tests/layers.rs` reads every
//! member's sources and fails on an import cycle or a module that uses a higher layer. The crate
//! has no dependencies, so `cargo test -p spanner-queues-workspace-checks` runs in seconds.
