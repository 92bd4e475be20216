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
//! payloads written by other clients are read, and [`schema`] for `CREATE`/`ALTER`/`DROP QUEUE`.
//!
//! # Sending in your transaction
//!
//! A send is an insert into the queue, made in the caller's read-write transaction: the
//! business write and the message commit together or not at all, and the message stays
//! invisible to consumers until the commit. [`transaction::builder`] runs the transaction: its
//! closure returns this crate's [`Result`], Spanner's aborts re-run it, the Commit is never
//! re-sent, and its future is `Send`, so it runs inside `tokio::spawn` and web handlers.
//!
//! ```no_run
//! # use spanner_queues::QueueMessage;
//! # #[derive(QueueMessage)]
//! # #[queue(name = "OrderEmails")]
//! # struct OrderEmail { #[queue(key)] order_id: i64, subject: String }
//! use google_cloud_spanner::client::DatabaseClient;
//! use google_cloud_spanner::statement::Statement;
//! use spanner_queues::{Queue, transaction};
//!
//! async fn ship(db: &DatabaseClient, email: &OrderEmail) -> spanner_queues::Result<()> {
//!     let emails = &Queue::<OrderEmail>::new(db);
//!     transaction::builder(db)
//!         .run(move |tx| async move {
//!             tx.execute_update(
//!                 Statement::builder("UPDATE Orders SET Shipped = TRUE WHERE OrderId = @id")
//!                     .add_param("id", email.order_id)
//!                     .build(),
//!             )
//!             .await?;
//!             // Encoding errors are typed `spanner_queues::Error`s; `?` rolls back.
//!             emails.send(&tx, email).await?;
//!             Ok(())
//!         })
//!         .await
//! }
//! ```
//!
//! The closure runs once per attempt, so it captures references (as here) or clones what its
//! future needs. Inside the official client's own `TransactionRunner`, [`Queue::send`] works
//! too: see [`queue`].
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
//!   lease is lost. A delivery acks in your transaction ([`Delivery::ack`]), on its own
//!   ([`Delivery::ack_now`]), or releases the message for a later retry ([`Delivery::release`]:
//!   ack and re-send of the same payload in one transaction).
//! - A [`Worker<M>`](Worker) runs a handler per delivery with bounded concurrency, counts
//!   attempts, retries failures with backoff, moves poison and exhausted messages to a
//!   dead-letter table, and shuts down without losing anything. Create its tables once from
//!   [`worker::schema_statements`].
//!
//! With a **transactional** handler, the handler's writes and the ack commit together, so they
//! are applied exactly once however often the message is delivered:
//!
//! ```no_run
//! # use spanner_queues::QueueMessage;
//! # #[derive(QueueMessage)]
//! # #[queue(name = "OrderEmails")]
//! # struct OrderEmail { #[queue(key)] order_id: i64, subject: String }
//! use google_cloud_spanner::client::DatabaseClient;
//! use google_cloud_spanner::statement::Statement;
//! use spanner_queues::Worker;
//!
//! async fn run_worker(
//!     db: DatabaseClient,
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
//!         });
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
//! use spanner_queues::Receiver;
//!
//! async fn drain(db: google_cloud_spanner::client::DatabaseClient) -> spanner_queues::Result<()> {
//!     let mut receiver = Receiver::<OrderEmail>::builder(db.clone()).build()?;
//!     while let Some(delivery) = receiver.next().await {
//!         let delivery = delivery?;
//!         let Ok(email) = delivery.message() else {
//!             continue; // poison: its lease lapses (the worker would dead-letter it)
//!         };
//!         let delivery = &delivery;
//!         spanner_queues::transaction::builder(&db)
//!             .run(move |tx| async move {
//!                 // … the effects of `email` …
//!                 # let _ = email;
//!                 delivery.ack(&tx).await?; // one commit for both
//!                 Ok(())
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
//! The SQL dialect is a property of the database, so the crate learns it once, on a
//! [`Database`] handle: [`Database::connect`] reads it from the database, [`Database::new`] is
//! told. Every entry point takes that handle ([`AsDatabase`]) and writes its statements in the
//! database's dialect; a bare `DatabaseClient` is taken to be GoogleSQL.
//!
//! ```no_run
//! # use spanner_queues::QueueMessage;
//! # #[derive(QueueMessage)]
//! # #[queue(name = "OrderEmails")]
//! # struct OrderEmail { #[queue(key)] order_id: i64, subject: String }
//! use spanner_queues::{Database, Producer, transaction};
//!
//! async fn send(client: google_cloud_spanner::client::DatabaseClient) -> spanner_queues::Result<()> {
//!     let db = Database::connect(client).await?; // GoogleSQL or PostgreSQL
//!     let emails = &db.queue::<OrderEmail>();
//!     transaction::builder(&db)
//!         .run(move |tx| async move {
//!             emails.send(&tx, &OrderEmail { order_id: 1, subject: "Hi".into() }).await
//!         })
//!         .await?;
//!     Producer::new(&db).send(&OrderEmail { order_id: 2, subject: "Hi".into() }).await
//! }
//! ```
//!
//! # Errors
//!
//! One [`Error`] enum for the crate. Each variant says whether anything may have been written,
//! and [`Error::classification`] tells a caller whether to retry, give up, or first resolve an
//! unknown commit outcome.
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
//!   once with [`CommitMarkers::create_statement`](outcome::CommitMarkers::create_statement).
//! - **Acks guard themselves**: a transaction that acked a message, run again after it was
//!   applied, fails its ack with [`Error::AlreadyAcked`] and rolls back
//!   ([`OutcomeUnknown::is_self_guarded`](outcome::OutcomeUnknown::is_self_guarded)).
//!
//! ```no_run
//! # use spanner_queues::QueueMessage;
//! # #[derive(QueueMessage)]
//! # #[queue(name = "Shipments")]
//! # struct Shipment { #[queue(key)] order_id: i64 }
//! use google_cloud_spanner::client::DatabaseClient;
//! use spanner_queues::transaction::{self, Guarded};
//! use spanner_queues::{Error, Queue};
//!
//! async fn ship(db: &DatabaseClient, order_id: i64) -> spanner_queues::Result<()> {
//!     let shipments = &Queue::<Shipment>::new(db);
//!     let outcome = transaction::builder(db)
//!         .guarded()
//!         .run(move |tx| async move { shipments.send(&tx, &Shipment { order_id }).await })
//!         .await;
//!     match outcome {
//!         Ok(Guarded::Committed(())) | Ok(Guarded::CommittedEarlier) => Ok(()), // sent once
//!         Err(Error::OutcomeUnknown(unknown)) => {
//!             // Still unknown (the database was unreachable): resolve it later.
//!             let _applied = transaction::resolve(db, &unknown).await?.is_applied();
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

pub mod admin;
mod bounds;
pub mod codec;
mod database;
mod ddl;
mod dialect;
pub mod error;
pub mod ident;
pub mod key;
pub mod message;
pub mod ordering;
pub mod outcome;
mod query;
pub mod queue;
pub mod receive;
pub mod schema;
mod status;
pub mod telemetry;
pub mod transaction;
mod types;
mod util;
pub mod worker;

// The happy path at the root; everything else under its module (the DDL builder under
// `schema`, payload codecs under `codec`, keys under `key`, names under `ident`, commit outcomes
// under `outcome`).
pub use database::{AsDatabase, Database};
pub use dialect::Dialect;
pub use error::{Error, Result};
pub use key::MessageKey;
pub use message::QueueMessage;
pub use ordering::Sequence;
pub use queue::{DeliverAt, Producer, Queue};
pub use receive::{Delivery, ReceiveSettings, Receiver};
pub use transaction::TransactionSettings;
pub use worker::{HandlerContext, HandlerError, RedeliveryPolicy, Worker};

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
