//! Transactional messaging on [Cloud Spanner queues](https://cloud.google.com/spanner/docs/queues/queues-overview).
//!
//! A Spanner queue is a schema object that lives next to your tables. A message is **sent** by
//! inserting it inside your own read-write transaction, so it exists if and only if that
//! transaction commits: no outbox table, no dual write. Consumers **receive** messages under a
//! **lease** (renewed while they work), and **ack** a message by deleting it, again inside the
//! transaction that applies the message's effects, so those effects happen once.
//!
//! This crate builds on the official client (`google-cloud-spanner`) and adds typed messages,
//! schema management and errors that say what may have been written.
//!
//! # Defining messages
//!
//! One Rust type per queue. The queue name is the type's stable identity; key fields map to the
//! queue's primary key columns, everything else is the payload (JSON by default):
//!
//! ```
//! use spanner_queues::{Dialect, QueueMessage};
//!
//! #[derive(QueueMessage, Debug, Clone, PartialEq)]
//! #[queue(name = "OrderEmails")]
//! struct OrderEmail {
//!     #[queue(key)]
//!     order_id: i64,
//!     #[queue(key, column = "EmailId")]
//!     id: uuid::Uuid,
//!     subject: String,
//!     body: String,
//! }
//!
//! // The queue's DDL comes from the type: no hand-written schema.
//! assert_eq!(
//!     OrderEmail::schema().create_statement(Dialect::GoogleSql)?,
//!     "CREATE QUEUE OrderEmails (OrderId INT64 NOT NULL, EmailId STRING(36) NOT NULL, \
//!      Payload JSON NOT NULL) PRIMARY KEY (OrderId, EmailId)"
//! );
//!
//! // A message is identified by its key; the payload holds the other fields.
//! let email = OrderEmail {
//!     order_id: 42,
//!     id: uuid::Uuid::nil(),
//!     subject: "Your order".into(),
//!     body: "has shipped".into(),
//! };
//! let payload = email.encode()?;
//! assert_eq!(payload.as_bytes(), br#"{"subject":"Your order","body":"has shipped"}"#);
//! let back = OrderEmail::decode_parts(email.message_key(), payload)?;
//! assert_eq!(back, email);
//! # Ok::<(), spanner_queues::Error>(())
//! ```
//!
//! See [`QueueMessage`] for every attribute, the [`codec`] module for the payload codecs and how
//! payloads written by other clients are read, and [`schema`] for `CREATE`/`ALTER`/`DROP QUEUE`
//! (to create queues, use [`SchemaSetup`]).
//!
//! # API at a glance
//!
//! Each job has one way to do it. Everything takes a [`Database`].
//!
//! | Job | The one way |
//! |---|---|
//! | Open a database | [`Database::connect`]`(path)`, or [`Database::builder`]`(path).with_…().connect()` |
//! | Create a database (tests, tools) | [`Database::builder`]`(path).with_dialect(d).create()` |
//! | Create and check the SDK's tables and your DDL | [`SchemaSetup`]`::new().with_ddl(..).with_queue::<M>().with_worker_tables().with_commit_markers().apply(&db)` |
//! | Run a transaction | [`db.transaction()`](Database::transaction)`.run(move \|tx\| async move { … })` |
//! | Send in your transaction | [`tx.send(&m)`](Transaction::send), [`send_with`](Transaction::send_with)`(&m, `[`SendOptions`]`)`, [`send_many`](Transaction::send_many), [`send_many_with`](Transaction::send_many_with) |
//! | Send in its own transaction | the same names on [`Database`]: [`db.send(&m)`](Database::send), … |
//! | Schedule a message | [`SendOptions::new().deliver_at(t)`](SendOptions::deliver_at) / [`.deliver_after(d)`](SendOptions::deliver_after) |
//! | Cancel a queued message | [`tx.cancel::<M>(&key)`](Transaction::cancel) / [`db.cancel::<M>(&key)`](Database::cancel); of an ordered type, [`cancel_sequenced::<M>(&key, sequence)`](Transaction::cancel_sequenced) |
//! | Commit at most once across unknown outcomes | [`db.transaction().guarded()`](transaction::TransactionBuilder::guarded), [`db.resolve(&unknown)`](Database::resolve) |
//! | Receive | [`Receiver::<M>::builder(&db)`](Receiver::builder)`.with_receive_settings(..).build()?` (a `Stream` of [`Delivery`]) |
//! | Ack / release in your transaction | [`tx.ack(&delivery)`](Transaction::ack), [`tx.release(&delivery, delay)`](Transaction::release) |
//! | Ack / release on its own | [`db.ack(&delivery)`](Database::ack), [`db.release(&delivery, delay)`](Database::release) |
//! | Run a worker | [`Worker::<M>::builder(&db)`](Worker::builder)`.with_…().transactional(f)` (or `.external(f)`) `.build()?`, then [`run`](Worker::run) or [`spawn`](Worker::spawn) |
//! | Read counters | `stats()` on [`Receiver`] and [`Worker`] |
//! | Dead letters | [`db.dead_letters()`](Database::dead_letters): `queues`, `counts`, `count`, `list`, `get`, `replay`, `purge` |
//! | A queue known by name only | [`db.queue_by_name(name)`](Database::queue_by_name) → [`DynQueue`]; [`tx.send_raw`](Transaction::send_raw) / [`db.send_raw`](Database::send_raw) a [`RawMessage`] |
//! | The SDK's table names | [`tables`] |
//! | An external system's idempotency key | [`HandlerContext::idempotency_key`] |
//! | Handle an error | [`Error`] (one type); [`Error::classification`] |
//!
//! # Sending in your transaction
//!
//! A send is an insert into the queue, made in the caller's read-write transaction: the
//! business write and the message commit together or not at all, and the message stays
//! invisible to consumers until the commit. [`Database::transaction`] runs the transaction:
//! its closure returns this crate's [`Result`], Spanner's aborts re-run it, the Commit is never
//! re-sent, and its future is `Send`, so it runs inside `tokio::spawn` and web handlers.
//!
//! ```no_run
//! # use spanner_queues::QueueMessage;
//! # #[derive(QueueMessage)]
//! # #[queue(name = "OrderEmails")]
//! # struct OrderEmail { #[queue(key)] order_id: i64, subject: String }
//! use google_cloud_spanner::statement::Statement;
//! use spanner_queues::Database;
//!
//! async fn ship(db: &Database, email: &OrderEmail) -> spanner_queues::Result<()> {
//!     db.transaction()
//!         .run(move |tx| async move {
//!             tx.execute_update(
//!                 Statement::builder("UPDATE Orders SET Shipped = TRUE WHERE OrderId = @id")
//!                     .add_param("id", email.order_id)
//!                     .build(),
//!             )
//!             .await?;
//!             // Encoding errors are typed `spanner_queues::Error`s; `?` rolls back.
//!             tx.send(email).await?;
//!             Ok(())
//!         })
//!         .await
//! }
//! ```
//!
//! The closure is `FnOnce + Clone`: it is cloned once per attempt, so it captures references
//! (which are `Copy`) or values it may clone, with no `let x = &x;` line before it. The
//! [`Transaction`] it gets dereferences to the official `ReadWriteTransaction` for your own
//! statements.
//!
//! # Receiving under a lease, acking in your transaction
//!
//! A consumer calls the queue's `RECEIVE_<queue>` function ([`QueueName::receive_function`](ident::QueueName::receive_function)),
//! which hands out messages under a lease of about ten seconds; `RENEWLEASE_<queue>` extends it.
//! A message whose lease lapses is delivered again: delivery is at least once. The consumer acks
//! by deleting the message with `ASSERT_ROWS_MODIFIED 1` in the same transaction as the
//! message's effects. An ack that finds nothing ([`Error::AlreadyAcked`]) must roll that
//! transaction back, so the effects are applied at most once.
//!
//! Rows read back decode with [`QueueMessage::decode_parts`]; a message that does not match its
//! type is a typed [`Error::Decode`] (a poison message) and nothing is acked.
//!
//! # Receiving and workers
//!
//! Two layers do this for you, both in spawnable, `Send` futures:
//!
//! - A [`Receiver<M>`](receive::Receiver) is a `Stream` of [`Delivery<M>`](receive::Delivery)s:
//!   it keeps `RECEIVE` calls open (restarting them when they end or break, with backoff),
//!   renews every held lease in one batched `RENEWLEASE` call per round, stops reading at
//!   [`max_in_flight`](ReceiveSettings::max_in_flight), and tells a delivery's holder when its
//!   lease is lost. A delivery is acked in your transaction ([`Transaction::ack`]), on its own
//!   ([`Database::ack`]), or released for a later retry ([`Transaction::release`]: ack and
//!   re-send of the same payload in one transaction).
//! - A [`Worker<M>`](Worker) runs a handler per delivery with bounded concurrency, counts
//!   attempts, retries failures with backoff, moves poison and exhausted messages to a
//!   dead-letter table, and shuts down without losing anything. Create its tables once with
//!   [`SchemaSetup::with_worker_tables`].
//!
//! With a **transactional** handler, the handler's writes and the ack commit together, so they
//! are applied exactly once however often the message is delivered:
//!
//! ```no_run
//! # use spanner_queues::QueueMessage;
//! # #[derive(QueueMessage)]
//! # #[queue(name = "OrderEmails")]
//! # struct OrderEmail { #[queue(key)] order_id: i64, subject: String }
//! use google_cloud_spanner::statement::Statement;
//! use spanner_queues::{Database, Worker};
//!
//! async fn run_worker(
//!     db: &Database,
//!     shutdown: impl Future<Output = ()> + Send, // e.g. Ctrl-C
//! ) -> spanner_queues::Result<()> {
//!     let worker = Worker::<OrderEmail>::builder(db)
//!         .with_concurrency(8)
//!         .with_max_attempts(5)
//!         .transactional(|tx, email, _ctx| async move {
//!             tx.execute_update(
//!                 Statement::builder("UPDATE Orders SET Emailed = TRUE WHERE OrderId = @id")
//!                     .add_param("id", email.order_id)
//!                     .build(),
//!             )
//!             .await?;
//!             Ok(()) // the worker acks in this same transaction
//!         })
//!         .build()?; // every setting is checked here
//!     // Runs until `shutdown` completes, then finishes or releases what is in flight.
//!     worker.run(shutdown).await
//! }
//! ```
//!
//! An **external** handler (an e-mail, a payment API) gets a stable
//! [`idempotency_key`](HandlerContext::idempotency_key) to pass on, and the worker acks after it
//! succeeds. To receive without the worker:
//!
//! ```no_run
//! # use spanner_queues::QueueMessage;
//! # #[derive(QueueMessage)]
//! # #[queue(name = "OrderEmails")]
//! # struct OrderEmail { #[queue(key)] order_id: i64, subject: String }
//! use futures::StreamExt as _;
//! use spanner_queues::{Database, Receiver};
//!
//! async fn drain(db: &Database) -> spanner_queues::Result<()> {
//!     let mut receiver = Receiver::<OrderEmail>::builder(db).build()?;
//!     while let Some(delivery) = receiver.next().await {
//!         let delivery = delivery?;
//!         let Ok(email) = delivery.message() else {
//!             continue; // poison: its lease lapses (the worker would dead-letter it)
//!         };
//!         let delivery = &delivery;
//!         db.transaction()
//!             .run(move |tx| async move {
//!                 // … the effects of `email` …
//!                 # let _ = email;
//!                 tx.ack(delivery).await // one commit for both
//!             })
//!             .await?;
//!     }
//!     Ok(())
//! }
//! ```
//!
//! Metrics (through the `metrics` facade) and tracing spans are listed in [`telemetry`].
//!
//! # PostgreSQL-dialect databases
//!
//! The SQL dialect is a property of the database, so a [`Database`] always knows it:
//! [`Database::connect`] reads it from the database, and a dialect stated with
//! [`DatabaseBuilder::with_dialect`] is checked against it ([`Error::DialectMismatch`]). Every
//! statement of the crate is written in the database's dialect.
//!
//! # Errors
//!
//! One [`Error`] enum for the crate. Each variant says whether anything may have been written,
//! and [`Error::classification`] tells a caller whether to retry, give up, or first resolve an
//! unknown commit outcome. A setting out of range is always [`Error::InvalidSetting`], raised
//! when it is handed over (`build()`, `connect()`, `create()`), before any RPC.
//!
//! # Commit outcomes
//!
//! A commit can be applied while the client sees an error (a lost reply, a reset connection, a
//! deadline). A [`transaction`] never re-sends a commit: it returns
//! [`Error::OutcomeUnknown`], which lists the messages the transaction sent, acked or cancelled
//! ([`OutcomeUnknown::operations`](outcome::OutcomeUnknown::operations)). Every other error means nothing was applied.
//!
//! - **Guarded transactions** ([`guarded`](transaction::TransactionBuilder::guarded)) also
//!   insert a commit marker; an
//!   unknown outcome is then resolved by reading it back, and retried, with the same marker,
//!   only if it was not applied: the transaction commits at most once. Create the marker table
//!   once with [`SchemaSetup::with_commit_markers`].
//! - **Acks guard themselves**: a transaction that acked a message, run again after it was
//!   applied, fails its ack with [`Error::AlreadyAcked`] and rolls back
//!   ([`OutcomeUnknown::is_self_guarded`](outcome::OutcomeUnknown::is_self_guarded)).
//!
//! ```no_run
//! # use spanner_queues::QueueMessage;
//! # #[derive(QueueMessage)]
//! # #[queue(name = "Shipments")]
//! # struct Shipment { #[queue(key)] order_id: i64 }
//! use spanner_queues::transaction::Guarded;
//! use spanner_queues::{Database, Error};
//!
//! async fn ship(db: &Database, order_id: i64) -> spanner_queues::Result<()> {
//!     let outcome = db
//!         .transaction()
//!         .guarded()
//!         .run(move |tx| async move { tx.send(&Shipment { order_id }).await })
//!         .await;
//!     match outcome {
//!         Ok(Guarded::Committed(_)) | Ok(Guarded::CommittedEarlier) => Ok(()), // sent once
//!         Err(Error::OutcomeUnknown(unknown)) => {
//!             // Still unknown (the database was unreachable): resolve it later.
//!             let _applied = db.resolve(&unknown).await?.is_applied();
//!             Err(unknown.into())
//!         }
//!         Err(error) => Err(error), // not sent
//!     }
//! }
//! ```
//!
//! The [`outcome`] module describes both mechanisms and the cases they do not cover.
//!
//! # Feature flags
//!
//! - `derive` (default): `#[derive(QueueMessage)]`.
//! - `rustls-provider` (default): the official client's default TLS crypto provider.
//! - `protobuf`: the `proto` payload codec, built on `prost`.

#![cfg_attr(docsrs, feature(doc_cfg))]

mod admin;
mod bounds;
pub mod codec;
mod database;
mod ddl;
mod dialect;
mod dynamic;
pub mod error;
pub mod grants;
pub mod ident;
pub mod key;
pub mod message;
pub mod ordering;
pub mod outcome;
mod query;
mod queue;
pub mod receive;
pub mod schema;
mod status;
pub mod tables;
pub mod telemetry;
pub mod transaction;
mod types;
mod util;
pub mod worker;

// The happy path at the root; everything else under its module (the DDL builder under
// `schema`, payload codecs under `codec`, keys under `key`, names under `ident`, commit outcomes
// under `outcome`, the SDK's table names under `tables`).
pub use admin::SchemaSetup;
pub use database::{Database, DatabaseBuilder, MAX_PAYLOAD_BYTES_LIMIT, TransactionSettings};
pub use dialect::Dialect;
pub use dynamic::{DynQueue, RawMessage};
pub use error::{Error, Result};
pub use key::MessageKey;
pub use message::QueueMessage;
pub use ordering::Sequence;
pub use queue::{SendOptions, Sent};
pub use receive::{Delivery, ReceiveSettings, Receiver};
pub use transaction::Transaction;
pub use worker::{DeadLetters, HandlerContext, HandlerError, RedeliveryPolicy, Worker};

/// Derives [`QueueMessage`]; see its documentation for the attributes.
#[cfg(feature = "derive")]
#[cfg_attr(docsrs, doc(cfg(feature = "derive")))]
pub use spanner_queues_macros::QueueMessage;

/// Support for the derive macro. Not public API: no stability guarantees.
#[doc(hidden)]
pub mod __private {
    pub use serde;
    pub use serde_json;

    pub use crate::codec::{
        decode_bytes, decode_json, decode_string, encode_bytes, encode_json, encode_string,
    };
    #[cfg(feature = "protobuf")]
    pub use crate::codec::{decode_proto, encode_proto};

    /// Checks the derive's compile-time identifier rules against the runtime ones.
    #[cfg(feature = "derive")]
    pub use spanner_queues_macros::__identifier_problem;

    #[cfg(not(feature = "protobuf"))]
    use crate::codec::{CodecError, Payload};

    /// Stands in for `prost::Message` when the `protobuf` feature is off, so that
    /// `payload = "proto"` fails with a message naming the feature.
    #[cfg(not(feature = "protobuf"))]
    #[diagnostic::on_unimplemented(
        message = "`payload = \"proto\"` needs the `protobuf` feature of spanner-queues",
        label = "the proto codec is not enabled",
        note = "enable it in Cargo.toml: spanner-queues = {{ version = \"…\", features = [\"protobuf\"] }}"
    )]
    pub trait ProtobufFeatureRequired: Sized {
        /// Never called: no type implements this trait.
        fn encode(&self) -> Payload;
        /// Never called: no type implements this trait.
        fn decode(payload: &Payload) -> Result<Self, CodecError>;
    }

    /// See [`ProtobufFeatureRequired`].
    #[cfg(not(feature = "protobuf"))]
    pub fn encode_proto<M: ProtobufFeatureRequired>(message: &M) -> Payload {
        message.encode()
    }

    /// See [`ProtobufFeatureRequired`].
    #[cfg(not(feature = "protobuf"))]
    pub fn decode_proto<M: ProtobufFeatureRequired>(payload: &Payload) -> Result<M, CodecError> {
        M::decode(payload)
    }
}
