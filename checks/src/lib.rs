//! Checks of the workspace's own shape, run as this crate's tests: `tests/layers.rs` reads every
//! member's sources (parsed with `syn`) and fails on an import cycle or a module that uses a higher
//! layer. Its only dependencies are `syn` and `proc-macro2`, so
//! `cargo test -p spanner-queues-workspace-checks` runs in seconds.
