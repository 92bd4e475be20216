//! A queue-aware front for the Cloud Spanner emulator.
//!
//! The official Cloud Spanner emulator cannot parse `CREATE QUEUE` and rejects the
//! `Mutation.Send` / `Mutation.Ack` operations. This crate puts a gRPC and REST front before it
//! that speaks Spanner queues: queue DDL, sends and acks (mutations and DML), the
//! `RECEIVE_<Queue>` and `RENEWLEASE_<Queue>` table-valued functions, with leases. Everything
//! else is forwarded untouched. See `emulator/README.md` for what is emulated and every known
//! difference from Cloud Spanner.
//!
//! - [`LocalEmulator`] starts the official emulator's processes and the front in-process.
//! - The `spanner-queues-emulator` binary does the same from the command line (and is what the
//!   container image runs).
//!
//! For tests, the `spanner-queues-testing` crate hands each test a fresh database on this
//! emulator (in a container or as child processes), an existing `SPANNER_EMULATOR_HOST`, or a
//! real Cloud Spanner instance.

pub mod backend;
mod ddl;
pub mod front;
mod interval;
mod local;
mod reaper;
mod sql;

pub use local::{LocalEmulator, LocalEmulatorError, LocalEmulatorOptions};

/// Identifies the sources this crate was built from. The container image carries it as the label
/// `spanner-queues.build-id`, so the harness can tell a stale image from a current one.
pub const BUILD_ID: &str = env!("SPANNER_QUEUES_EMULATOR_BUILD_ID");

/// The script that builds this emulator's container image (`docker/build-image.sh` in this
/// crate's sources). Set `SPANNER_QUEUES_FRONT_BIN` to the front binary to package.
pub const IMAGE_BUILD_SCRIPT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/docker/build-image.sh");

/// Formats an error and its chain of sources on one line (`outer: cause: root cause`).
pub fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
