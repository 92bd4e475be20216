//! Conformance suite of the queue-aware emulator (issue 3).
//!
//! Written from `spanner-queues.md` (the platform reference: its examples and its [C]onfirmed
//! rules) and the behaviour list, not from the emulator's code: when a test here fails,
//! the reference decides whether the test or the emulator is wrong. Where the reference marks a
//! behaviour [I]nferred or [?]unknown, the test says so and asserts only what the emulator
//! documents as its choice, so the assertion is easy to change.
//!
//! Every test gets its own database from `spanner_queues_testing` (the official
//! emulator runs one read-write transaction per database at a time), so the tests run
//! concurrently. Conformance tests never skip: no backend is a failure.
//!
//! Run: `cargo test -p spanner-queues-emulator --test conformance`. The tests mostly wait on
//! the emulator, so more test threads than cores shorten the run a lot
//! (`-- --test-threads 8`: about 25 s instead of about 60 s on 2 cores); the longest test is
//! the soak test (about 35 s).
//!
//! `fidelity` is the exception to the harness: a property test that compares the front with the
//! official emulator behind it, on a local stack of its own (see its docs).
//!
//! `cross_language` runs `python_client.py` with Python's official client. If `$PYTHON` (default
//! `python3`) lacks it, the test installs it with pip into a virtual environment under the
//! target directory; where that is impossible it fails with the fix under
//! `SPANNER_QUEUES_REQUIRE_EMULATOR=1` and skips with a notice otherwise.

mod support;

mod ack;
mod admission;
mod batch_write;
mod cross_language;
mod ddl;
mod fidelity;
mod fidelity_gen;
mod keyed_delete;
mod keywords;
mod limits;
mod passthrough;
mod pg_interval;
mod postgres;
mod python;
mod receive;
mod renew;
mod send;
mod soak;
