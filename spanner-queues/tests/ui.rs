//! Compile-time behaviour of `#[derive(QueueMessage)]` (trybuild). The toolchain is pinned in
//! `rust-toolchain.toml`, so the `.stderr` snapshots are stable; regenerate them with
//! `TRYBUILD=overwrite cargo test -p spanner-queues --test ui` after a toolchain bump.
//!
//! The passing cases in `tests/ui/pass/` are test targets of their own (`ui_pass_*` in
//! `Cargo.toml`): each is a program whose `main` asserts what the derive generated.

#[test]
fn ui() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
    #[cfg(not(feature = "protobuf"))]
    t.compile_fail("tests/ui/fail-no-protobuf/*.rs");
}
