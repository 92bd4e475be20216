//! Issue 6: unknown commit outcomes, produced for real with a fault-injecting proxy between the
//! official client and the emulator.
//!
//! Each test makes its own database handle whose client dials a [`FaultProxy`] in front of the
//! harness's emulator, and checks the database through the harness's direct handle. Against
//! real Cloud Spanner the tests skip (with a printed reason): faults can only be injected in
//! front of an emulator.
//!
//! Acks go through a [`Delivery`]: the tests receive the message on the direct handle (no
//! faults there) and ack it in a transaction of the faulty one.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt as _;
use google_cloud_spanner::statement::Statement;
use rand::{Rng as _, RngExt as _, SeedableRng as _};
use spanner_queues::outcome::{MarkerId, OperationKind, QueueOperation, Resolution};
use spanner_queues::transaction::Guarded;
use spanner_queues::{
    Database, Delivery, Error, QueueMessage, Receiver, Transaction, TransactionSettings,
    error::Code,
};
use spanner_queues_fault_proxy::{
    ArmedFault, Ending, Fault, FaultFired, FaultProxy, Injection, Method,
};
use spanner_queues_tests::{Setup, TestDatabase, TestRng, count, seed, setup, through_fault_proxy};

const COMMIT: &str = "/google.spanner.v1.Spanner/Commit";
const EXECUTE_SQL: &str = "/google.spanner.v1.Spanner/ExecuteSql";
const STREAMING_SQL: &str = "/google.spanner.v1.Spanner/ExecuteStreamingSql";
const ROLLBACK: &str = "/google.spanner.v1.Spanner/Rollback";
const BEGIN: &str = "/google.spanner.v1.Spanner/BeginTransaction";

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "Refunds")]
struct Refund {
    #[queue(key)]
    id: uuid::Uuid,
    order_id: i64,
}

const ORDERS: &str = "CREATE TABLE Orders (OrderId INT64 NOT NULL, Refunds INT64 NOT NULL) \
                      PRIMARY KEY (OrderId)";

/// A database, a fault proxy in front of its emulator, and a handle that goes through it.
struct Faulty {
    db: TestDatabase,
    proxy: FaultProxy,
    /// The database through the proxy.
    faulty: Database,
}

impl Faulty {
    /// A fresh database as `setup` describes it, or `None` (after printing why) when there is
    /// no backend or the backend is real Cloud Spanner.
    async fn start(setup: Setup) -> Option<Self> {
        let db = setup.create().await?;
        let (proxy, faulty) = through_fault_proxy(&db).await?;
        Some(Self { db, proxy, faulty })
    }

    /// The harness's handle: it does not go through the proxy.
    fn direct(&self) -> &Database {
        self.db.database()
    }

    fn inject(&self, path: &str, injection: impl Into<Injection>) -> ArmedFault {
        self.proxy.inject(Method::path(path), injection)
    }

    fn commits(&self) -> u64 {
        self.proxy.stats().requests_to(COMMIT)
    }
}

/// The orders table, the refunds queue and the commit markers (and the worker's tables).
fn ddl() -> Setup {
    setup().with_ddl([ORDERS]).with_queue::<Refund>()
}

async fn exec(db: &Database, sql: &str) {
    db.client()
        .read_write_transaction()
        .build()
        .run(async |tx| tx.execute_update(Statement::builder(sql)).await)
        .await
        .expect("setup statement");
}

/// The business transaction of the first tests: count a refund on the order, and send the
/// refund message, in one transaction.
async fn refund_in(tx: &Transaction, refund: &Refund) -> spanner_queues::Result<i64> {
    let rows = tx
        .execute_update(
            Statement::builder("UPDATE Orders SET Refunds = Refunds + 1 WHERE OrderId = @id")
                .add_param("id", refund.order_id)
                .build(),
        )
        .await?;
    tx.send(refund).await?;
    Ok(rows)
}

fn refund(order_id: i64) -> Refund {
    Refund {
        id: uuid::Uuid::new_v4(),
        order_id,
    }
}

async fn refunds_of(db: &Database, order_id: i64) -> i64 {
    count(
        db,
        &format!("SELECT Refunds FROM Orders WHERE OrderId = {order_id}"),
    )
    .await
}

/// The next delivery of `receiver`, failing the test after a minute.
async fn next<M: QueueMessage>(receiver: &mut Receiver<M>) -> Delivery<M> {
    tokio::time::timeout(Duration::from_secs(60), receiver.next())
        .await
        .expect("a delivery within a minute")
        .expect("the stream goes on")
        .expect("a delivery")
}

async fn fired(armed: &ArmedFault) -> FaultFired {
    tokio::time::timeout(Duration::from_secs(10), armed.fired())
        .await
        .expect("the fault fires in time")
        .expect("the fault fired")
}

#[tokio::test]
async fn unguarded_unknown_outcome_lists_what_the_transaction_did() {
    let Some(f) = Faulty::start(ddl()).await else {
        return;
    };
    exec(
        f.direct(),
        "INSERT INTO Orders (OrderId, Refunds) VALUES (1, 0)",
    )
    .await;
    let sent = &refund(1);

    // Spanner applies the commit; its reply is replaced by UNAVAILABLE.
    let armed = f.inject(
        COMMIT,
        Fault::DropResponse.with_ending(Ending::Status(Code::Unavailable)),
    );
    let result = f
        .faulty
        .transaction()
        .run(move |tx| async move { refund_in(&tx, sent).await })
        .await;
    assert_eq!(fired(&armed).await.upstream_status, Some(Code::Ok));

    let Err(Error::OutcomeUnknown(unknown)) = result else {
        panic!("expected an unknown outcome, got {result:?}");
    };
    assert_eq!(
        unknown.operations(),
        [QueueOperation::new(
            OperationKind::Send,
            Refund::QUEUE,
            sent.message_key()
        )]
    );
    assert_eq!(unknown.queue(), Some(&Refund::QUEUE));
    assert_eq!(unknown.keys(), [sent.message_key()]);
    assert_eq!(unknown.marker(), None, "not guarded");
    assert!(!unknown.is_self_guarded(), "a send does not guard itself");
    assert_eq!(
        unknown.spanner_error().and_then(|e| e.code()),
        Some(Code::Unavailable)
    );
    let text = unknown.to_string();
    assert!(text.contains(&sent.message_key().to_string()), "{text}");
    assert!(text.contains("find out whether it was applied"), "{text}");

    // Without a marker there is nothing to read back.
    let error = f.faulty.resolve(&unknown).await.expect_err("unguarded");
    assert!(matches!(error, Error::Precondition { .. }), "{error:?}");

    // The commit was sent once, never re-sent, and applied once.
    assert_eq!(f.commits(), 1);
    assert_eq!(refunds_of(f.direct(), 1).await, 1);
    assert_eq!(count(f.direct(), "SELECT COUNT(*) FROM Refunds").await, 1);
}

#[tokio::test]
async fn reply_dropped_resolves_to_applied_and_the_guarded_retry_does_not_duplicate() {
    let Some(f) = Faulty::start(ddl()).await else {
        return;
    };
    exec(
        f.direct(),
        "INSERT INTO Orders (OrderId, Refunds) VALUES (1, 0)",
    )
    .await;
    let sent = &refund(1);
    let marker = MarkerId::new();
    // 0: hand the unknown outcome back instead of resolving it automatically.
    let manual = TransactionSettings::default().with_unknown_outcome_retries(0);

    // Spanner applies the commit; the client's connection is reset before the reply.
    let armed = f.inject(COMMIT, Fault::DropResponse);
    let result = f
        .faulty
        .transaction()
        .with_transaction_settings(manual.clone())
        .guarded_as(marker)
        .run(move |tx| async move { refund_in(&tx, sent).await })
        .await;
    assert_eq!(fired(&armed).await.upstream_status, Some(Code::Ok));
    let Err(Error::OutcomeUnknown(unknown)) = result else {
        panic!("expected an unknown outcome, got {result:?}");
    };
    assert_eq!(unknown.marker().map(|m| m.id()), Some(marker));
    assert_eq!(unknown.operations().len(), 1);
    assert!(unknown.to_string().contains(&marker.to_string()));

    // A strong read of the marker: applied.
    let resolution = f.faulty.resolve(&unknown).await.expect("marker read");
    assert!(
        matches!(resolution, Resolution::Applied { .. }),
        "{resolution:?}"
    );

    // The guarded retry finds the marker and applies nothing.
    let ran = &AtomicUsize::new(0);
    let retry = f
        .faulty
        .transaction()
        .with_transaction_settings(manual.clone())
        .guarded_as(marker)
        .run(move |tx| {
            ran.fetch_add(1, Ordering::SeqCst);
            async move { refund_in(&tx, sent).await }
        })
        .await
        .expect("guarded retry");
    assert_eq!(retry, Guarded::CommittedEarlier);
    assert_eq!(
        ran.load(Ordering::SeqCst),
        0,
        "the marker insert comes first: the closure never ran"
    );
    assert_eq!(refunds_of(f.direct(), 1).await, 1, "refund counted once");
    assert_eq!(count(f.direct(), "SELECT COUNT(*) FROM Refunds").await, 1);
    assert_eq!(f.commits(), 1, "the commit was never re-sent");

    // Automatic resolution (the default): the same fault ends in success, with the value of
    // the attempt that committed, and one commit.
    let second = refund(1);
    let armed = f.inject(COMMIT, Fault::DropResponse);
    let outcome = f
        .faulty
        .transaction()
        .guarded()
        .run(move |tx| async move { refund_in(&tx, &second).await })
        .await
        .expect("resolved automatically");
    fired(&armed).await;
    assert_eq!(outcome, Guarded::Committed(1), "1 row updated");
    assert_eq!(f.commits(), 2);
    assert_eq!(refunds_of(f.direct(), 1).await, 2);
    assert_eq!(count(f.direct(), "SELECT COUNT(*) FROM Refunds").await, 2);
    assert_eq!(
        count(
            f.direct(),
            "SELECT COUNT(*) FROM SpannerQueuesCommitMarkers"
        )
        .await,
        2
    );
}

#[tokio::test]
async fn request_dropped_resolves_to_not_applied_and_the_retry_commits_once() {
    let Some(f) = Faulty::start(ddl()).await else {
        return;
    };
    exec(
        f.direct(),
        "INSERT INTO Orders (OrderId, Refunds) VALUES (1, 0)",
    )
    .await;
    let sent = &refund(1);
    let marker = MarkerId::new();
    let manual = TransactionSettings::default().with_unknown_outcome_retries(0);

    // The commit never reaches Spanner; the client's connection is reset.
    let armed = f.inject(COMMIT, Fault::DropRequest);
    let run = move |tx: Transaction| async move { refund_in(&tx, sent).await };
    let guarded = || {
        f.faulty
            .transaction()
            .with_transaction_settings(manual.clone())
            .guarded_as(marker)
    };
    let result = guarded().run(run).await;
    fired(&armed).await;
    let Err(Error::OutcomeUnknown(unknown)) = result else {
        panic!("expected an unknown outcome, got {result:?}");
    };
    assert_eq!(
        f.proxy.stats().forwarded_to(COMMIT),
        0,
        "nothing reached Spanner"
    );

    let resolution = f.faulty.resolve(&unknown).await.expect("marker read");
    assert_eq!(resolution, Resolution::NotApplied);
    assert_eq!(refunds_of(f.direct(), 1).await, 0);

    // The guarded retry commits, once.
    let retry = guarded().run(run).await.expect("guarded retry");
    assert_eq!(retry, Guarded::Committed(1));
    // A second retry (say, after a crash) finds the marker.
    let again = guarded().run(run).await.expect("second retry");
    assert_eq!(again, Guarded::CommittedEarlier);
    assert_eq!(refunds_of(f.direct(), 1).await, 1);
    assert_eq!(count(f.direct(), "SELECT COUNT(*) FROM Refunds").await, 1);

    // Automatically: the unknown outcome is read as not applied, and the transaction runs
    // again with the same marker: two commit requests, one applied.
    let before = f.commits();
    let second = refund(1);
    let armed = f.inject(
        COMMIT,
        Fault::DropRequest.with_ending(Ending::Status(Code::Unavailable)),
    );
    let outcome = f
        .faulty
        .transaction()
        .guarded()
        .run(move |tx| async move { refund_in(&tx, &second).await })
        .await
        .expect("resolved and retried automatically");
    fired(&armed).await;
    assert_eq!(outcome, Guarded::Committed(1));
    assert_eq!(f.commits() - before, 2);
    assert_eq!(refunds_of(f.direct(), 1).await, 2);
    assert_eq!(count(f.direct(), "SELECT COUNT(*) FROM Refunds").await, 2);
}

#[tokio::test]
async fn ack_in_a_handler_guards_itself_when_the_reply_is_dropped() {
    let Some(f) = Faulty::start(ddl()).await else {
        return;
    };
    exec(
        f.direct(),
        "INSERT INTO Orders (OrderId, Refunds) VALUES (1, 0)",
    )
    .await;
    let message = &refund(1);
    f.direct().send(message).await.expect("send");
    // Received on the direct handle: the faults are for the handler's commit.
    let mut receiver = Receiver::<Refund>::builder(f.direct())
        .build()
        .expect("receiver");
    let delivery = &next(&mut receiver).await;
    assert_eq!(delivery.key(), &message.message_key());

    // The handler's transaction: apply the refund and ack the message, together.
    let handle = move |tx: Transaction| async move {
        tx.execute_update(
            Statement::builder("UPDATE Orders SET Refunds = Refunds + 1 WHERE OrderId = @id")
                .add_param("id", message.order_id)
                .build(),
        )
        .await?;
        tx.ack(delivery).await?;
        Ok(())
    };

    let armed = f.inject(COMMIT, Fault::DropResponse);
    let result = f.faulty.transaction().run(handle).await;
    assert_eq!(fired(&armed).await.upstream_status, Some(Code::Ok));
    let Err(Error::OutcomeUnknown(unknown)) = result else {
        panic!("expected an unknown outcome, got {result:?}");
    };
    assert!(unknown.is_self_guarded());
    assert_eq!(
        unknown.operations(),
        [QueueOperation::new(
            OperationKind::Ack,
            Refund::QUEUE,
            message.message_key()
        )]
    );
    assert!(
        unknown.to_string().contains("running it again is safe"),
        "{unknown}"
    );

    // Running the handler again: the message is gone, the ack fails, everything rolls back.
    let retry = f.faulty.transaction().run(handle).await;
    match retry {
        Err(Error::AlreadyAcked { queue, key, .. }) => {
            assert_eq!(queue, Refund::QUEUE);
            assert_eq!(key, message.message_key());
        }
        other => panic!("expected AlreadyAcked, got {other:?}"),
    }
    assert_eq!(refunds_of(f.direct(), 1).await, 1, "refund applied once");
    assert_eq!(count(f.direct(), "SELECT COUNT(*) FROM Refunds").await, 0);
}

// ---------------------------------------------------------------------------------------------
// Randomized run.

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "Tasks")]
struct Task {
    #[queue(key)]
    id: uuid::Uuid,
    account: i64,
}

const ACCOUNTS: i64 = 4;

fn random_ddl() -> Setup {
    setup()
        .with_ddl([
            "CREATE TABLE Accounts (Id INT64 NOT NULL, Produced INT64 NOT NULL, \
             Consumed INT64 NOT NULL) PRIMARY KEY (Id)",
            // One row per run of a closure that reached commit and was applied: a duplicated
            // business effect shows up as two rows for one message.
            "CREATE TABLE Produced (MessageId STRING(36) NOT NULL, Nonce STRING(36) NOT NULL) \
             PRIMARY KEY (MessageId, Nonce)",
            "CREATE TABLE Processed (MessageId STRING(36) NOT NULL, Nonce STRING(36) NOT NULL) \
             PRIMARY KEY (MessageId, Nonce)",
        ])
        .with_queue::<Task>()
}

/// Where a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Target {
    Commit,
    Statement,
    Other,
}

/// A random fault on a random call of one attempt: the commit (mostly), a statement before it,
/// the marker read, the rollback, or an explicit begin.
fn random_fault(rng: &mut TestRng) -> (String, Target, Method, Injection) {
    let unavailable = Ending::Status(Code::Unavailable);
    let roll = rng.random_range(0..100);
    if roll < 60 {
        let (label, injection): (&str, Injection) = match rng.random_range(0..10) {
            0 => ("DropRequest", Fault::DropRequest.into()),
            1 => (
                "DropRequest/UNAVAILABLE",
                Fault::DropRequest.with_ending(unavailable),
            ),
            2 | 3 => ("DropResponse", Fault::DropResponse.into()),
            4 => (
                "DropResponse/UNAVAILABLE",
                Fault::DropResponse.with_ending(unavailable),
            ),
            5 => (
                "DropResponse/DEADLINE_EXCEEDED",
                Fault::DropResponse.with_ending(Ending::Status(Code::DeadlineExceeded)),
            ),
            6 => (
                "DropResponse/RST_STREAM",
                Fault::DropResponse.with_ending(Ending::ResetStream),
            ),
            7 => ("ResetConnection", Fault::ResetConnection.into()),
            8 => (
                "DelayResponseThenDrop",
                Fault::DelayResponseThenDrop(Duration::from_millis(30)).into(),
            ),
            _ => {
                // A stall costs a commit timeout: keep it rare.
                if rng.random_ratio(40, 100) {
                    ("Stall", Fault::Stall.into())
                } else {
                    ("DropResponse", Fault::DropResponse.into())
                }
            }
        };
        (
            format!("Commit {label}"),
            Target::Commit,
            Method::path(COMMIT),
            injection,
        )
    } else if roll < 88 {
        let nth = 1 + rng.random_range(0..3) as u32;
        let (label, injection): (&str, Injection) = match rng.random_range(0..7) {
            0 => ("DropRequest", Fault::DropRequest.into()),
            1 => ("DropResponse", Fault::DropResponse.into()),
            2 => ("ResetConnection", Fault::ResetConnection.into()),
            3 => (
                "DropRequest/UNAVAILABLE",
                Fault::DropRequest.with_ending(unavailable),
            ),
            4 => (
                "DropRequest/ABORTED",
                Fault::DropRequest.with_ending(Ending::Status(Code::Aborted)),
            ),
            5 => (
                "DropRequest/INTERNAL",
                Fault::DropRequest.with_ending(Ending::Status(Code::Internal)),
            ),
            _ => (
                "DropResponse/INTERNAL",
                Fault::DropResponse.with_ending(Ending::Status(Code::Internal)),
            ),
        };
        (
            format!("ExecuteSql#{nth} {label}"),
            Target::Statement,
            Method::path(EXECUTE_SQL).nth(nth),
            injection,
        )
    } else if roll < 94 {
        (
            "ExecuteStreamingSql ResetConnection".to_owned(),
            Target::Other,
            Method::path(STREAMING_SQL),
            Fault::ResetConnection.into(),
        )
    } else if roll < 97 {
        (
            "Rollback DropRequest".to_owned(),
            Target::Other,
            Method::path(ROLLBACK),
            Fault::DropRequest.into(),
        )
    } else {
        (
            "BeginTransaction DropRequest/UNAVAILABLE".to_owned(),
            Target::Other,
            Method::path(BEGIN),
            Fault::DropRequest.with_ending(unavailable),
        )
    }
}

#[derive(Debug, Default)]
struct Counts {
    /// Logical transactions: guarded sends with a business update.
    produces: u64,
    /// Logical transactions: handlers that update, record and ack.
    consumes: u64,
    /// Transaction runs, guarded or not (each may run the closure several times).
    attempts: u64,
    /// Closure runs that returned `Ok`, i.e. that asked for a commit.
    closure_commits: u64,
    faults_armed: u64,
    faults_fired: BTreeMap<String, u64>,
    /// A commit fault fired and the guarded transaction resolved it by itself (marker read; retry if not
    /// applied): the call returned success.
    unknown_resolved_automatically: u64,
    /// `Error::OutcomeUnknown` returned to the driver (manual guarded mode, or handlers).
    unknown_returned: u64,
    /// The driver read the marker: applied.
    driver_resolved_applied: u64,
    /// The driver read the marker: not applied, then retried with the same marker.
    driver_resolved_not_applied: u64,
    /// Unknown outcomes the driver retried (same marker) without reading the marker.
    blind_guarded_retries: u64,
    /// A guarded retry found its marker: committed earlier.
    committed_earlier: u64,
    /// A handler run again after an unknown outcome found its message acked (it had committed).
    handler_retry_already_acked: u64,
    /// A handler run again after an unknown outcome committed (the first had not).
    handler_retry_committed: u64,
    /// Errors that mean "not applied" (a statement failed), retried.
    not_applied_errors: u64,
    /// Statement faults that the client absorbed (it re-sent the statement or re-ran the
    /// transaction after an abort): the call succeeded.
    statement_faults_absorbed: u64,
}

/// Arms at most one fault for an attempt.
fn arm(f: &Faulty, rng: &mut TestRng, counts: &mut Counts) -> Option<(String, Target, ArmedFault)> {
    if !rng.random_ratio(55, 100) {
        return None;
    }
    let (label, target, method, injection) = random_fault(rng);
    counts.faults_armed += 1;
    Some((label, target, f.proxy.inject(method, injection)))
}

/// Disarms the attempt's fault if it did not fire, counts it if it did, and says where it hit.
async fn settle(
    armed: Option<(String, Target, ArmedFault)>,
    counts: &mut Counts,
) -> Option<Target> {
    let (label, target, armed) = armed?;
    if armed.disarm() {
        return None;
    }
    // It matched a request: wait until it is done with it.
    match tokio::time::timeout(Duration::from_secs(10), armed.fired()).await {
        Ok(Ok(_)) => {
            *counts.faults_fired.entry(label).or_default() += 1;
            Some(target)
        }
        _ => None,
    }
}

const MAX_ATTEMPTS: u32 = 30;

/// Lanes of the randomized run. Each has its own database and fault proxy, so they run at the
/// same time: the emulator runs one read-write transaction per database at a time, and a run of
/// one lane is bound by its latency, not by the CPU.
const LANES: u64 = 4;

#[tokio::test]
async fn randomized_faults_lose_nothing_and_duplicate_nothing() {
    let seed = seed("SPANNER_QUEUES_FAULT_SEED");
    eprintln!("fault seed: {seed} (replay with SPANNER_QUEUES_FAULT_SEED={seed})");
    let transactions: u64 = std::env::var("SPANNER_QUEUES_FAULT_TRANSACTIONS")
        .ok()
        .and_then(|t| t.parse().ok())
        .unwrap_or(200)
        .max(200);
    let per_lane = transactions.div_ceil(LANES);
    // Each lane's seed follows from the run's, so one printed seed replays every lane (the
    // interleaving of the lanes' requests differs between runs, but each lane's own choices of
    // fault and transaction do not depend on it; which queued message a handler gets is the
    // receiver's choice).
    let mut seeds = TestRng::seed_from_u64(seed);
    let lanes: Vec<_> = (0..LANES)
        .map(|lane| random_lane(lane, seeds.next_u64(), per_lane))
        .collect();
    // The batch lane: a batch worker under the same kind of faults.
    let batch = batch_lane(seeds.next_u64(), per_lane);
    let (lanes, batch) = futures::future::join(futures::future::join_all(lanes), batch).await;
    let Some(lanes) = lanes.into_iter().collect::<Option<Vec<Counts>>>() else {
        return;
    };
    if let Some(batch) = batch {
        eprintln!("batch lane: {batch:?}");
    }
    let unknowns: u64 = lanes
        .iter()
        .map(|c| c.unknown_resolved_automatically + c.unknown_returned)
        .sum();
    let fired: u64 = lanes
        .iter()
        .map(|c| c.faults_fired.values().sum::<u64>())
        .sum();
    assert!(
        unknowns > 0,
        "no unknown outcome happened in any lane: the run proved nothing"
    );
    eprintln!(
        "{} transactions in {LANES} lanes, {fired} faults fired, {unknowns} unknown outcomes, \
         all resolved: 0 lost messages, 0 duplicated effects",
        per_lane * LANES
    );
}

/// One lane of the randomized run: `transactions` logical transactions through a fault proxy of
/// its own, checked against its own database. `None` when there is no emulator to run against.
async fn random_lane(lane: u64, seed: u64, transactions: u64) -> Option<Counts> {
    let f = Faulty::start(random_ddl()).await?;
    let mut rng = TestRng::seed_from_u64(seed);
    for id in 0..ACCOUNTS {
        exec(
            f.direct(),
            &format!("INSERT INTO Accounts (Id, Produced, Consumed) VALUES ({id}, 0, 0)"),
        )
        .await;
    }
    // The handlers' messages are received on the direct handle (no faults on the receive
    // calls and renewals) and acked through the faulty one.
    let mut receiver = Receiver::<Task>::builder(f.direct())
        .build()
        .expect("receiver");
    // A short commit timeout, so that a stalled reply costs little.
    let base = TransactionSettings::default().with_commit_timeout(Duration::from_secs(1));
    let mut counts = Counts::default();
    let mut queued: Vec<Task> = Vec::new();
    let mut consumed: BTreeSet<uuid::Uuid> = BTreeSet::new();
    let mut produced: BTreeSet<uuid::Uuid> = BTreeSet::new();

    for n in 0..transactions {
        let produce = queued.is_empty() || rng.random_ratio(55, 100);
        if produce {
            // A guarded send with a business update. Half of them resolve unknown outcomes by
            // themselves; the others hand them back to this driver, which resolves them.
            counts.produces += 1;
            let task = &Task {
                id: uuid::Uuid::new_v4(),
                account: rng.random_range(0..ACCOUNTS as u64) as i64,
            };
            let marker = MarkerId::new();
            let automatic = rng.random_ratio(50, 100);
            let settings = if automatic {
                base.clone()
            } else {
                base.clone().with_unknown_outcome_retries(0)
            };
            let mut attempt = 0;
            loop {
                attempt += 1;
                assert!(
                    attempt <= MAX_ATTEMPTS,
                    "lane {lane}, transaction {n}: not settled"
                );
                counts.attempts += 1;
                let armed = arm(&f, &mut rng, &mut counts);
                let commits = &AtomicU64::new(0);
                let result = f
                    .faulty
                    .transaction()
                    .with_transaction_settings(settings.clone())
                    .guarded_as(marker)
                    .run(move |tx| async move {
                        produce_in(&tx, task).await?;
                        commits.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    })
                    .await;
                counts.closure_commits += commits.load(Ordering::SeqCst);
                let hit = settle(armed, &mut counts).await;
                match result {
                    Ok(Guarded::Committed(())) => {
                        match hit {
                            Some(Target::Commit) => counts.unknown_resolved_automatically += 1,
                            Some(Target::Statement) => counts.statement_faults_absorbed += 1,
                            _ => {}
                        }
                        break;
                    }
                    Ok(_) => {
                        // `Guarded::CommittedEarlier`: an earlier attempt committed.
                        counts.committed_earlier += 1;
                        break;
                    }
                    Err(Error::OutcomeUnknown(unknown)) => {
                        counts.unknown_returned += 1;
                        assert_eq!(unknown.marker().map(|m| m.id()), Some(marker));
                        assert!(
                            !automatic || hit.is_some(),
                            "unknown outcome without a fault"
                        );
                        if rng.random_ratio(50, 100) {
                            // Retry at once, guarded by the same marker, without reading it:
                            // the retry commits only if this attempt did not.
                            counts.blind_guarded_retries += 1;
                            continue;
                        }
                        // No fault is armed now: read the marker.
                        match f.faulty.resolve(&unknown).await {
                            Ok(Resolution::Applied { .. }) => {
                                counts.driver_resolved_applied += 1;
                                break;
                            }
                            Ok(_) => counts.driver_resolved_not_applied += 1,
                            Err(error) => {
                                panic!("lane {lane}, transaction {n}: marker read failed: {error}")
                            }
                        }
                        // Not applied: retry, guarded by the same marker.
                    }
                    Err(error) => {
                        // Nothing was applied: retry.
                        counts.not_applied_errors += 1;
                        assert!(
                            !matches!(error, Error::AlreadyQueued { .. }),
                            "lane {lane}, transaction {n}: a guarded retry re-sent a message: {error}"
                        );
                    }
                }
            }
            produced.insert(task.id);
            queued.push(task.clone());
        } else {
            // A handler: business update, processed row and ack in one unguarded transaction.
            // The ack guards it: run it again until it commits or its ack finds the message gone.
            // It handles the message the receiver delivers next (acks need a delivery).
            counts.consumes += 1;
            let delivery = &take(&mut receiver, &mut queued).await;
            let task = delivery.message().expect("a task decodes");
            let mut attempt = 0;
            let mut saw_unknown = false;
            loop {
                attempt += 1;
                assert!(
                    attempt <= MAX_ATTEMPTS,
                    "lane {lane}, transaction {n}: not settled"
                );
                counts.attempts += 1;
                let armed = arm(&f, &mut rng, &mut counts);
                let commits = &AtomicU64::new(0);
                let result = f
                    .faulty
                    .transaction()
                    .with_transaction_settings(base.clone())
                    .run(move |tx| async move {
                        consume_in(&tx, task, delivery).await?;
                        commits.fetch_add(1, Ordering::SeqCst);
                        Ok(())
                    })
                    .await;
                counts.closure_commits += commits.load(Ordering::SeqCst);
                let hit = settle(armed, &mut counts).await;
                match result {
                    Ok(()) => {
                        if saw_unknown {
                            counts.handler_retry_committed += 1;
                        } else if hit == Some(Target::Statement) {
                            counts.statement_faults_absorbed += 1;
                        }
                        break;
                    }
                    Err(Error::OutcomeUnknown(unknown)) => {
                        counts.unknown_returned += 1;
                        saw_unknown = true;
                        assert!(unknown.is_self_guarded(), "{unknown}");
                        assert_eq!(unknown.keys(), [task.message_key()]);
                    }
                    Err(Error::AlreadyAcked { .. }) => {
                        assert!(
                            saw_unknown,
                            "lane {lane}, transaction {n}: message {} gone without an earlier commit",
                            task.id
                        );
                        counts.handler_retry_already_acked += 1;
                        break;
                    }
                    Err(_) => counts.not_applied_errors += 1,
                }
            }
            consumed.insert(task.id);
        }
    }

    eprintln!("lane {lane} (lane seed {seed}, {transactions} transactions): {counts:#?}");
    let stats = f.proxy.stats();
    eprintln!("lane {lane} proxy: {stats:#?}");

    // The SDK never re-sent a commit: one Commit request per closure run that asked for one.
    assert_eq!(
        stats.requests_to(COMMIT),
        counts.closure_commits,
        "Commit requests vs closure runs that reached commit"
    );
    // Every unknown outcome was resolved (the loops above only end once settled); check the
    // database against what the driver knows, through the direct handle. The messages the
    // receiver still holds stay in the queue (their leases lapse).
    drop(receiver);
    let db = f.direct();
    assert_eq!(
        count(
            db,
            "SELECT COUNT(*) FROM (SELECT MessageId FROM Produced GROUP BY MessageId \
             HAVING COUNT(*) > 1)"
        )
        .await,
        0,
        "a send's business effect was applied twice"
    );
    assert_eq!(
        count(
            db,
            "SELECT COUNT(*) FROM (SELECT MessageId FROM Processed GROUP BY MessageId \
             HAVING COUNT(*) > 1)"
        )
        .await,
        0,
        "a handler's business effect was applied twice"
    );
    let produces = i64::try_from(counts.produces).expect("small");
    let consumes = i64::try_from(counts.consumes).expect("small");
    assert_eq!(count(db, "SELECT COUNT(*) FROM Produced").await, produces);
    assert_eq!(count(db, "SELECT COUNT(*) FROM Processed").await, consumes);
    assert_eq!(
        count(db, "SELECT SUM(Produced) FROM Accounts").await,
        produces
    );
    assert_eq!(
        count(db, "SELECT SUM(Consumed) FROM Accounts").await,
        consumes
    );
    assert_eq!(
        count(db, "SELECT COUNT(*) FROM SpannerQueuesCommitMarkers").await,
        produces,
        "one marker per guarded transaction"
    );
    // Zero lost messages: the queue holds exactly the produced, unconsumed ones.
    let mut rows = db
        .client()
        .single_use()
        .build()
        .execute_query(Statement::builder("SELECT Id FROM Tasks"))
        .await
        .expect("read the queue");
    let mut in_queue = BTreeSet::new();
    while let Some(row) = rows.next().await {
        let id: String = row.expect("row").get(0).expect("Id");
        in_queue.insert(uuid::Uuid::parse_str(&id).expect("uuid"));
    }
    let expected: BTreeSet<uuid::Uuid> = produced.difference(&consumed).copied().collect();
    assert_eq!(in_queue, expected, "lane {lane}: queue contents");
    Some(counts)
}

/// The next delivery of a task still queued (a redelivery of one that was handled meanwhile,
/// after its lease lapsed, is skipped), taken out of `queued`.
async fn take(receiver: &mut Receiver<Task>, queued: &mut Vec<Task>) -> Delivery<Task> {
    loop {
        let delivery = next(receiver).await;
        let id = delivery.message().expect("a task decodes").id;
        if let Some(index) = queued.iter().position(|t| t.id == id) {
            queued.swap_remove(index);
            return delivery;
        }
    }
}

async fn produce_in(tx: &Transaction, task: &Task) -> spanner_queues::Result<()> {
    tx.execute_update(
        Statement::builder("UPDATE Accounts SET Produced = Produced + 1 WHERE Id = @id")
            .add_param("id", task.account)
            .build(),
    )
    .await?;
    tx.execute_update(
        Statement::builder("INSERT INTO Produced (MessageId, Nonce) VALUES (@m, @n)")
            .add_param("m", task.id.to_string())
            .add_param("n", uuid::Uuid::new_v4().to_string())
            .build(),
    )
    .await?;
    tx.send(task).await?;
    Ok(())
}

async fn consume_in(
    tx: &Transaction,
    task: &Task,
    delivery: &Delivery<Task>,
) -> spanner_queues::Result<()> {
    tx.execute_update(
        Statement::builder("UPDATE Accounts SET Consumed = Consumed + 1 WHERE Id = @id")
            .add_param("id", task.account)
            .build(),
    )
    .await?;
    tx.execute_update(
        Statement::builder("INSERT INTO Processed (MessageId, Nonce) VALUES (@m, @n)")
            .add_param("m", task.id.to_string())
            .add_param("n", uuid::Uuid::new_v4().to_string())
            .build(),
    )
    .await?;
    tx.ack(delivery).await?;
    Ok(())
}

/// What the batch lane saw.
#[derive(Debug)]
#[allow(dead_code)] // Printed.
struct BatchLane {
    tasks: u64,
    faults_fired: BTreeMap<String, u64>,
    commits: u64,
    batches: u64,
    outcome_unknown: u64,
    already_acked: u64,
    retried: u64,
}

/// A random fault for the batch lane: mostly on the batch's commit (its reply lost, late or
/// never sent, or the request lost), else on one of its statements or reads.
fn random_batch_fault(rng: &mut TestRng) -> (String, Method, Injection) {
    let unavailable = Ending::Status(Code::Unavailable);
    let roll = rng.random_range(0..100);
    if roll < 75 {
        let (label, injection): (&str, Injection) = match rng.random_range(0..7) {
            0 => ("DropRequest", Fault::DropRequest.into()),
            1 => (
                "DropRequest/UNAVAILABLE",
                Fault::DropRequest.with_ending(unavailable),
            ),
            2 | 3 => ("DropResponse", Fault::DropResponse.into()),
            4 => (
                "DropResponse/DEADLINE_EXCEEDED",
                Fault::DropResponse.with_ending(Ending::Status(Code::DeadlineExceeded)),
            ),
            5 => (
                "DelayResponseThenDrop",
                Fault::DelayResponseThenDrop(Duration::from_millis(30)).into(),
            ),
            _ => ("ResetConnection", Fault::ResetConnection.into()),
        };
        (format!("Commit {label}"), Method::path(COMMIT), injection)
    } else if roll < 90 {
        (
            "ExecuteSql DropResponse/INTERNAL".to_owned(),
            Method::path(EXECUTE_SQL),
            Fault::DropResponse.with_ending(Ending::Status(Code::Internal)),
        )
    } else {
        (
            "StreamingRead ResetConnection".to_owned(),
            Method::path("/google.spanner.v1.Spanner/StreamingRead"),
            Fault::ResetConnection.into(),
        )
    }
}

/// The batch lane of the randomized run: `tasks` tasks, queued at the start, handled by a
/// worker with a transactional batch handler whose client goes through the fault proxy, while
/// random faults hit one call after another until the queue is empty. Each handler run records
/// a `Processed` row per task in its batch's transaction: a duplicated effect shows up as two
/// rows. `None` when there is no emulator to run against.
async fn batch_lane(seed: u64, tasks: u64) -> Option<BatchLane> {
    let f = Faulty::start(random_ddl()).await?;
    let mut rng = TestRng::seed_from_u64(seed);
    for id in 0..ACCOUNTS {
        exec(
            f.direct(),
            &format!("INSERT INTO Accounts (Id, Produced, Consumed) VALUES ({id}, 0, 0)"),
        )
        .await;
    }
    let sent: Vec<Task> = (0..tasks)
        .map(|i| Task {
            id: uuid::Uuid::new_v4(),
            account: i64::try_from(i).expect("small") % ACCOUNTS,
        })
        .collect();
    let to_send = &sent;
    f.direct()
        .transaction()
        .run(move |tx| async move { tx.send_many(to_send).await })
        .await
        .expect("tasks queued");
    let settings = TransactionSettings::default()
        .with_commit_timeout(Duration::from_secs(1))
        .with_max_attempts(200)
        .with_total_timeout(Duration::from_secs(120));
    let worker = spanner_queues::Worker::<Task>::builder(&f.faulty)
        .with_batch_size(8)
        .with_transaction_settings(settings)
        .transactional_batch(|tx, batch| async move {
            for task in batch.messages() {
                tx.execute_update(
                    Statement::builder(
                        "UPDATE Accounts SET Consumed = Consumed + 1 WHERE Id = @id",
                    )
                    .add_param("id", task.account)
                    .build(),
                )
                .await?;
                tx.execute_update(
                    Statement::builder("INSERT INTO Processed (MessageId, Nonce) VALUES (@m, @n)")
                        .add_param("m", task.id.to_string())
                        .add_param("n", uuid::Uuid::new_v4().to_string())
                        .build(),
                )
                .await?;
            }
            Ok(spanner_queues::worker::BatchOutcome::new())
        })
        .build()
        .expect("batch worker")
        .spawn();
    let mut faults_fired: BTreeMap<String, u64> = BTreeMap::new();
    let queued = || async { count(f.direct(), "SELECT COUNT(*) FROM Tasks").await };
    let mut last_progress = (queued().await, std::time::Instant::now());
    loop {
        let left = queued().await;
        if left == 0 {
            break;
        }
        if left < last_progress.0 {
            last_progress = (left, std::time::Instant::now());
        }
        assert!(
            last_progress.1.elapsed() < Duration::from_secs(180),
            "batch lane: no progress for three minutes, {left} tasks left"
        );
        let (label, method, injection) = random_batch_fault(&mut rng);
        let armed = f.proxy.inject(method, injection);
        // Until it fires, or the queue empties (a fault for a call that never comes).
        let fired = loop {
            match tokio::time::timeout(Duration::from_millis(500), armed.fired()).await {
                Ok(result) => break result.is_ok(),
                Err(_) if queued().await == 0 => break false,
                Err(_) => {}
            }
        };
        if fired {
            *faults_fired.entry(label).or_default() += 1;
        } else {
            armed.disarm();
        }
    }
    let stats = worker.shutdown().await.expect("a clean shutdown");
    let db = f.direct();
    let lane = BatchLane {
        tasks,
        faults_fired,
        commits: f.commits(),
        batches: stats.batches,
        outcome_unknown: stats.outcome_unknown,
        already_acked: stats.already_acked,
        retried: stats.retried,
    };
    eprintln!("batch lane (seed {seed}): {lane:?}");
    let n = i64::try_from(tasks).expect("small");
    assert_eq!(
        count(
            db,
            "SELECT COUNT(*) FROM (SELECT MessageId FROM Processed GROUP BY MessageId \
             HAVING COUNT(*) > 1)"
        )
        .await,
        0,
        "batch lane: an effect was applied twice"
    );
    assert_eq!(
        count(db, "SELECT COUNT(DISTINCT MessageId) FROM Processed").await,
        n,
        "batch lane: a task was lost"
    );
    assert_eq!(count(db, "SELECT SUM(Consumed) FROM Accounts").await, n);
    let commit_faults: u64 = lane
        .faults_fired
        .iter()
        .filter(|(label, _)| label.starts_with("Commit"))
        .map(|(_, n)| n)
        .sum();
    assert!(
        commit_faults > 0 && lane.outcome_unknown > 0,
        "batch lane: no commit outcome was unknown, the lane proved nothing: {lane:?}"
    );
    Some(lane)
}
