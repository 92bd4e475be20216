//! Queue DDL: translating client `CREATE/ALTER/DROP QUEUE` statements into statements the
//! official emulator accepts, reading the queues back from the backend schema ([`Catalog`]), and
//! rendering the backend schema as the client should see it ([`render_client_ddl`]).
//!
//! Everything here is pure: no I/O, no clock.
//!
//! # Backend representation
//!
//! A queue `Q` is an ordinary table `Q` of the official emulator:
//!
//! ```text
//! CREATE TABLE Q (
//!   <each key column, as declared>,
//!   Payload <payload type> NOT NULL [HIDDEN] [OPTIONS (...)],
//!   DeliverTime TIMESTAMP NOT NULL DEFAULT (CURRENT_TIMESTAMP()),
//!   SpannerQueuesEmulatorMessageId STRING(36) NOT NULL DEFAULT (GENERATE_UUID()) HIDDEN,
//!   SpannerQueuesEmulatorQueue STRING(MAX) DEFAULT ('sqe1:<base64url(JSON)>') HIDDEN,
//! ) PRIMARY KEY (<key>)[,
//!   INTERLEAVE IN PARENT P ON DELETE ...][,
//!   ROW DELETION POLICY (...)]
//! ```
//!
//! The DEFAULT of [`META_COLUMN`] marks the table as a queue and carries what the backend
//! schema cannot hold: the explicitly set queue options, a non-PARENT `INTERLEAVE IN` clause
//! (the official emulator 1.5.28 rejects it), and which user columns are `HIDDEN` (its
//! `GetDatabaseDdl` drops the word). The format is versioned by its prefix (`sqe1:`); inside a
//! version, fields are optional and unknown fields are ignored, so fields can be added without
//! breaking databases created by an older front.
//!
//! # Statement mapping
//!
//! [`translate_batch`] maps every client statement to at least one backend statement, so the
//! backend's long-running operation stays one-to-one with the client's statements (today every
//! client statement maps to exactly one):
//!
//! | Client statement | Backend statement |
//! |---|---|
//! | `CREATE QUEUE [IF NOT EXISTS] Q ...` | `CREATE TABLE [IF NOT EXISTS] Q ...` (above); on an existing queue with IF NOT EXISTS the backend treats it as a no-op |
//! | `ALTER QUEUE Q SET OPTIONS (...)` | `ALTER TABLE Q ALTER COLUMN SpannerQueuesEmulatorQueue SET DEFAULT ('sqe1:...')` |
//! | `ALTER QUEUE Q SET ON DELETE x` | `ALTER TABLE Q SET ON DELETE x` |
//! | `ALTER QUEUE Q SET INTERLEAVE IN PARENT P [ON DELETE x]` (same parent, already PARENT) | `ALTER TABLE Q SET ON DELETE x` (NO ACTION when omitted) |
//! | `ALTER QUEUE Q SET INTERLEAVE IN P` (same parent, already non-PARENT) | the metadata `SET DEFAULT` above (a no-op) |
//! | `ALTER QUEUE Q {ADD\|REPLACE} ROW DELETION POLICY (...)` | `ALTER TABLE Q {ADD\|REPLACE} ROW DELETION POLICY (...)` |
//! | `ALTER QUEUE Q DROP ROW DELETION POLICY` | `ALTER TABLE Q DROP ROW DELETION POLICY` |
//! | `DROP QUEUE [IF EXISTS] Q` | `DROP TABLE Q`, or `DROP TABLE IF EXISTS Q` when IF EXISTS names a missing queue (the backend accepts it as a no-op) |
//! | anything else | unchanged |
//!
//! # Choices where the platform is not documented
//!
//! These are the behaviours picked for [I]/[?] points of the specification; each is one
//! function or one constant away from being changed.
//!
//! - `INTERLEAVE IN T` (no PARENT) is only remembered in the metadata: the backend table is
//!   not interleaved, so nothing co-locates or protects the rows. The parent must be a known
//!   table or queue whose primary key is a prefix of the queue's; `DROP TABLE` / renaming of
//!   that parent is refused while the queue exists.
//! - `ALTER QUEUE SET INTERLEAVE IN` may only keep the parent: switching between PARENT and
//!   non-PARENT is refused as unsupported (the backend cannot re-interleave a table), and a
//!   queue that is not interleaved cannot become interleaved.
//! - `ALTER QUEUE {REPLACE|DROP} ROW DELETION POLICY` are accepted (by analogy with
//!   `ALTER TABLE`); they fail when the queue has no policy, and `ADD` fails when it has one.
//! - `DROP QUEUE IF EXISTS` is accepted. `DROP QUEUE` / `DROP QUEUE IF EXISTS` on a *table* is
//!   refused rather than dropping the table. `CREATE QUEUE IF NOT EXISTS` naming a table is
//!   refused too.
//! - `DROP TABLE` / `ALTER TABLE` / `RENAME TABLE` naming a queue are refused
//!   (`FAILED_PRECONDITION`): use `DROP QUEUE` / `ALTER QUEUE`.
//! - Queue key columns may not have a `DEFAULT` (the grammar has none); the payload may be
//!   neither generated nor defaulted. The column names that `RECEIVE`/`RENEWLEASE` add to
//!   their output (`SpannerLeaseToken`, ...) and the emulator's internal names are reserved.
//! - `receive_mode` accepts `'PULL'` in any letter case; an option set to `NULL` in
//!   `CREATE QUEUE` counts as not set. `locality_group` is remembered and rendered back but has
//!   no effect (the backend has no locality groups).
//! - An empty primary key (`PRIMARY KEY ()`) is accepted, as for tables.
//! - A change stream that names a queue in its `FOR` clause is refused ([C]: change streams
//!   cannot track queues); `FOR ALL` passes through and, unlike Cloud Spanner, tracks the
//!   queue tables.
//! - PostgreSQL-dialect databases: see [`postgres`] for the representation and its choices.

/// The system column holding the time from which a message may be delivered.
pub(crate) const DELIVER_TIME_COLUMN: &str = "DeliverTime";
/// The name of the payload column (matched case-insensitively in client DDL).
pub(crate) const PAYLOAD_COLUMN: &str = "Payload";
/// Internal hidden column: a fresh UUID per message incarnation (set by its DEFAULT).
pub(crate) const MESSAGE_ID_COLUMN: &str = "SpannerQueuesEmulatorMessageId";
/// Internal hidden column whose DEFAULT marks a table as a queue and carries its metadata.
pub(crate) const META_COLUMN: &str = "SpannerQueuesEmulatorQueue";
/// Prefix of the hidden index of each GoogleSQL queue table on its delivery time (see
/// [`QueueDef::due_index`]); `GetDatabaseDdl` does not show these indexes.
pub(crate) const DUE_INDEX_PREFIX: &str = "SpannerQueuesEmulatorDue_";

/// The delivery time system column in PostgreSQL-dialect databases.
pub(crate) const PG_DELIVER_TIME_COLUMN: &str = "deliver_time";

/// Output columns of `spanner.receive_<q>` / `spanner.renewlease_<q>`, reserved in queues [I].
const PG_TVF_OUTPUT_COLUMNS: [&str; 5] = [
    "spanner_lease_expiration_timestamp",
    "spanner_lease_token",
    "spanner_last_batch_message",
    "spanner_old_lease_token",
    "spanner_new_lease_token",
];

/// Prefix of the metadata literal written by this version of the front.
const META_PREFIX: &str = "sqe1:";
/// The metadata version this front reads and writes.
const META_VERSION: u32 = 1;

/// Column names that `RECEIVE_<Q>` / `RENEWLEASE_<Q>` add to their output, reserved in queues
/// so that the output stays unambiguous [I].
const TVF_OUTPUT_COLUMNS: [&str; 5] = [
    "SpannerLeaseExpirationTimestamp",
    "SpannerLeaseToken",
    "SpannerLastBatchMessage",
    "SpannerOldLeaseToken",
    "SpannerNewLeaseToken",
];

mod bodies;
mod catalog;
mod classify;
mod error;
mod metadata;
mod model;
mod pg_bodies;
mod postgres;
mod queues;
#[cfg(test)]
mod tests;
mod tokens;
mod translate;

// What the rest of the crate uses; the sections import from each other by name.
pub(crate) use self::catalog::Catalog;
pub(crate) use self::error::{DdlError, DdlErrorCode};
pub(crate) use self::model::QueueDef;
pub(crate) use self::translate::{render_client_ddl_in, translate_batch};
