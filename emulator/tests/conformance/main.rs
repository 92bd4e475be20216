//! Conformance suite of the queue-aware emulator (issue 3).
//!
//! Written from `spanner-queues.md` (the platform reference: its examples and its [C]onfirmed
//! rules) and the behaviour list, not from the emulator's code: when a test here fails,
//! the reference decides whether the test or the emulator is wrong. Where the reference marks a
//! behaviour [I]nferred or [?]unknown, the test says so and asserts only what the emulator
//! documents as its choice, so the assertion is easy to change.
//!
//! Every test gets its own database from `spanner_queues_emulator::harness` (the official
//! emulator runs one read-write transaction per database at a time), so the tests run
//! concurrently. Conformance tests never skip: no backend is a failure.
//!
//! Run: `cargo test -p spanner-queues-emulator --test conformance`. The tests mostly wait on
//! the emulator, so more test threads than cores shorten the run a lot
//! (`-- --test-threads 8`: about 25 s instead of about 60 s on 2 cores); the longest test is
//! the soak test (about 35 s).
//!
//! `cross_language` runs `python_client.py` with `$PYTHON` (default `python3`), which needs
//! `pip install google-cloud-spanner==3.71.0`; without it that test fails and says so.

mod support;

mod ack;
mod cross_language;
mod ddl;
mod passthrough;
mod receive;
mod renew;
mod send;
mod soak;
