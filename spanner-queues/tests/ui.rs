//! Compile-time behaviour of `#[derive(QueueMessage)]` (trybuild). The toolchain is pinned in
//! `rust-toolchain.toml`, so the `.stderr` snapshots are stable; regenerate them with
//! `TRYBUILD=overwrite cargo test -p spanner-queues --test ui` after a toolchain bump.
//!
//! The passing cases in `tests/ui/pass/` are test targets of their own (`ui_pass_*` in
//! `Cargo.toml`): each is a program whose `main` asserts what the derive generated.

use std::process::Command;

/// The rustc flags trybuild 1.0 gives the cases' check, which every crate's check shares.
///
/// trybuild checks the dependencies with its base flags (`--cfg trybuild --verbose -A
/// dead_code`) and then the cases with one more (`--diagnostic-width=140`). Rustc flags are part
/// of every crate's fingerprint, so a cold run checked the whole dependency tree twice (about 2
/// of its 5 minutes here). trybuild passes its flags as `--config` values, which
/// `CARGO_ENCODED_RUSTFLAGS` overrides: with the cases' flags set there, both phases share one
/// check of the dependencies. Should a trybuild upgrade change its flags, the snapshots' line
/// wrapping shows it (a failing case, not a silent pass); update this list then.
const CASE_FLAGS: &[&str] = &[
    "--cfg",
    "trybuild",
    "--verbose",
    "-A",
    "dead_code",
    "--diagnostic-width=140",
];

#[test]
fn ui() {
    // Flags already set: by the parent run below (this is its child), or by the caller (for
    // coverage, say), whose flags must win. Either way, run the cases here.
    if std::env::var_os("CARGO_ENCODED_RUSTFLAGS").is_some()
        || std::env::var("RUSTFLAGS").is_ok_and(|f| f.contains("instrument-coverage"))
    {
        cases();
        return;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let status = Command::new(exe)
        .args(["ui", "--exact", "--test-threads", "1"])
        .env("CARGO_ENCODED_RUSTFLAGS", CASE_FLAGS.join("\x1f"))
        .status()
        .expect("run the UI cases in a child process");
    assert!(status.success(), "UI cases failed (see the output above)");
}

fn cases() {
    let t = trybuild::TestCases::new();
    t.compile_fail("tests/ui/fail/*.rs");
    #[cfg(not(feature = "protobuf"))]
    t.compile_fail("tests/ui/fail-no-protobuf/*.rs");
}
