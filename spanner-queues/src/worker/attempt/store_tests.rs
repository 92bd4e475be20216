//! The worker's decisions about attempts, releases and dead letters, on the in-memory store:
//! one attempt of [`attempt_message`] per test, and what it left in the queue and the tables.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use super::super::store::memory::{DeadRow, MemoryStore, Queued};
use super::*;
use crate::codec::{CodecError, Payload, PayloadSpec};
use crate::ident::{ColumnName, QueueName};
use crate::key::{KeyColumn, KeyType, KeyValue};
use crate::receive::lease::{Lease, LeaseToken};
use crate::util::lock;
use crate::worker::{RedeliveryPolicy, WorkerStats};

struct Task;

impl QueueMessage for Task {
    type Key = i64;
    const QUEUE: QueueName = QueueName::from_static("Tasks");
    const KEY_COLUMNS: &'static [KeyColumn] = &[KeyColumn::new(
        ColumnName::from_static("TaskId"),
        KeyType::Int64,
    )];
    const PAYLOAD: PayloadSpec = PayloadSpec::string();
    fn key(&self) -> i64 {
        7
    }
    fn encode_payload(&self) -> std::result::Result<Payload, CodecError> {
        Ok(crate::codec::encode_string("task"))
    }
    fn decode(_: i64, _: Payload) -> std::result::Result<Self, CodecError> {
        Ok(Task)
    }
}

const MAX_ATTEMPTS: u32 = 3;
const RETRY_DELAY: Duration = Duration::from_secs(5);

fn key() -> MessageKey {
    MessageKey::new(vec![KeyValue::Int64(7)])
}

fn payload() -> Payload {
    Payload::String("task".into())
}

fn config() -> Config {
    Config {
        max_attempts: MAX_ATTEMPTS,
        redelivery: RedeliveryPolicy::default()
            .with_initial_delay(RETRY_DELAY)
            .with_jitter(0.0),
        ..Config::default()
    }
}

fn transactional() -> Handler<Task> {
    Handler::Transactional(Arc::new(|_, _, _| {
        unreachable!("the in-memory store runs its own body")
    }))
}

fn external<F, Fut>(handler: F) -> Handler<Task>
where
    F: Fn(HandlerContext) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = std::result::Result<(), HandlerError>> + Send + 'static,
{
    Handler::External(Arc::new(move |_, ctx| Box::pin(handler(ctx))))
}

/// A lease that does not expire during a test; lose it with [`lose`].
fn lease() -> LeaseHandle {
    let expiry = SystemTime::now() + Duration::from_secs(3600);
    LeaseHandle {
        lease: Arc::new(Lease::new(0, LeaseToken::String("token".into()), expiry)),
        counters: Arc::default(),
        queue: Task::QUEUE,
    }
}

/// What a renewal does when it finds no lease.
fn lose(lease: &LeaseHandle) {
    lease
        .lease
        .mark_lost(&lease.counters, &lease.queue, "renewal found no lease");
}

/// Earlier failed attempts of the message, oldest first.
fn earlier_failures(store: &MemoryStore<Task>, errors: &[&str]) {
    let now = SystemTime::now();
    let rows = errors
        .iter()
        .enumerate()
        .map(|(i, error)| {
            let at = now - Duration::from_secs(100 - i as u64);
            (format!("earlier-{i}"), at, Some((*error).to_owned()))
        })
        .collect();
    lock(&store.tables).attempts.insert(key(), rows);
}

/// Runs one attempt at the message (decoded unless `undecodable`) and returns the counters.
async fn attempt(
    store: &MemoryStore<Task>,
    handler: &Handler<Task>,
    lease: &LeaseHandle,
    abort: &CancellationToken,
    undecodable: bool,
) -> WorkerStats {
    let (config, counters) = (config(), Counters::default());
    let env = Env {
        config: &config,
        handler,
        counters: &counters,
    };
    let (key, payload) = (key(), payload());
    let job = Job {
        key: &key,
        payload: &payload,
        message: if undecodable {
            Err("payload does not decode".to_owned())
        } else {
            Ok(Arc::new(Task))
        },
        deliver_time: None,
        lease: lease.clone(),
        clearance: crate::worker::ordered::Clearance::Clear,
    };
    attempt_message(&env, store, &job, None, abort).await;
    let c = &counters;
    let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
    WorkerStats {
        started: get(&c.started),
        acked: get(&c.acked),
        retried: get(&c.retried),
        dead_lettered: get(&c.dead_lettered),
        handler_errors: get(&c.handler_errors),
        lease_lost: get(&c.lease_lost),
        already_acked: get(&c.already_acked),
        released_on_shutdown: get(&c.released_on_shutdown),
        parked: get(&c.parked),
        ..WorkerStats::default()
    }
}

async fn run(store: &MemoryStore<Task>, handler: &Handler<Task>) -> WorkerStats {
    attempt(store, handler, &lease(), &CancellationToken::new(), false).await
}

fn queued(store: &MemoryStore<Task>) -> Option<Queued> {
    lock(&store.tables).queue.get(&key()).cloned()
}

fn rows(store: &MemoryStore<Task>) -> Vec<tables::AttemptRow> {
    lock(&store.tables).rows(&key()).to_vec()
}

fn dead(store: &MemoryStore<Task>) -> Option<DeadRow> {
    lock(&store.tables).dead.get(&key()).cloned()
}

/// The attempt number and previous error each run of a handler was given.
type Seen = Arc<std::sync::Mutex<Vec<(u32, Option<String>)>>>;

/// A store with the message queued, whose transactional handler records its context.
fn recording_store(seen: &Seen) -> MemoryStore<Task> {
    let seen = Arc::clone(seen);
    let store = MemoryStore::transactional(move |_, ctx: HandlerContext| {
        lock(&seen).push((ctx.attempt(), ctx.previous_error().map(str::to_owned)));
        async { Ok(()) }
    });
    store.send(&key(), payload());
    store
}

#[tokio::test]
async fn a_transactional_success_is_numbered_after_the_earlier_attempts_and_forgets_them() {
    let seen = Seen::default();
    let store = recording_store(&seen);
    earlier_failures(&store, &["first", "second"]);
    let stats = run(&store, &transactional()).await;
    // Attempt 3, told the most recent earlier error.
    assert_eq!(*lock(&seen), vec![(3, Some("second".to_owned()))]);
    assert_eq!((stats.started, stats.acked), (1, 1));
    assert_eq!(queued(&store), None, "acked");
    assert!(rows(&store).is_empty(), "the ack forgets the attempts");
    assert_eq!(dead(&store), None);
}

#[tokio::test]
async fn a_failed_attempt_is_released_with_its_error_recorded() {
    let store = MemoryStore::transactional(|_, _| async { Err(HandlerError::msg("boom")) });
    store.send(&key(), payload());
    let stats = run(&store, &transactional()).await;
    assert_eq!((stats.retried, stats.handler_errors), (1, 1));
    let queued = queued(&store).expect("released, not acked");
    assert_eq!((queued.releases, queued.delay), (1, RETRY_DELAY));
    assert_eq!(queued.payload, payload());
    let rows = rows(&store);
    assert_eq!(rows.len(), 1, "{rows:?}");
    assert_eq!(rows[0].2.as_deref(), Some("boom"));
    // The next attempt counts it and is told its error.
    let seen = Seen::default();
    let next = recording_store(&seen);
    lock(&next.tables).attempts.insert(key(), rows);
    run(&next, &transactional()).await;
    assert_eq!(*lock(&seen), vec![(2, Some("boom".to_owned()))]);
}

#[tokio::test]
async fn the_handler_chooses_the_delay_of_its_retry() {
    let store = MemoryStore::transactional(|_, _| async {
        Err(HandlerError::retry_after(Duration::from_secs(42), "later"))
    });
    store.send(&key(), payload());
    let stats = run(&store, &transactional()).await;
    assert_eq!(stats.retried, 1);
    assert_eq!(
        queued(&store).map(|q| q.delay),
        Some(Duration::from_secs(42))
    );
}

#[tokio::test]
async fn the_last_attempt_that_fails_is_dead_lettered_and_its_attempts_forgotten() {
    let store = MemoryStore::transactional(|_, _| async { Err(HandlerError::msg("third")) });
    store.send(&key(), payload());
    earlier_failures(&store, &["first", "second"]);
    let stats = run(&store, &transactional()).await;
    assert_eq!((stats.dead_lettered, stats.retried), (1, 0));
    assert_eq!(queued(&store), None, "acked with the move");
    assert!(rows(&store).is_empty());
    let letter = dead(&store).expect("a dead letter");
    assert_eq!(letter.attempts, 3);
    assert_eq!(letter.error, "third");
    assert_eq!(letter.payload, payload());
}

#[tokio::test]
async fn a_message_past_its_last_attempt_is_dead_lettered_without_running_the_handler() {
    let store = MemoryStore::transactional(|_, _| async {
        panic!("the handler must not run past the last attempt")
    });
    store.send(&key(), payload());
    // Three attempts already, the last one lost (a crash records no error).
    earlier_failures(&store, &["first", "second"]);
    lock(&store.tables)
        .attempts
        .get_mut(&key())
        .expect("rows")
        .push(("crashed".into(), SystemTime::now(), None));
    let stats = run(&store, &transactional()).await;
    assert_eq!((stats.started, stats.dead_lettered), (0, 1));
    let letter = dead(&store).expect("a dead letter");
    assert_eq!(letter.attempts, 3);
    assert_eq!(letter.error, "gave up after 3 attempts; last error: second");
    assert!(rows(&store).is_empty());
}

#[tokio::test]
async fn an_external_attempt_is_counted_before_its_handler_runs_and_forgotten_by_its_ack() {
    let store = Arc::new(MemoryStore::external());
    store.send(&key(), payload());
    let during = Arc::new(std::sync::Mutex::new(Vec::new()));
    let handler = {
        let (store, during) = (Arc::clone(&store), Arc::clone(&during));
        external(move |_| {
            *lock(&during) = rows(&store);
            async { Ok(()) }
        })
    };
    let stats = run(&store, &handler).await;
    let during = lock(&during).clone();
    assert_eq!(during.len(), 1, "its row is written before it runs");
    assert_eq!(during[0].2, None);
    assert_eq!(stats.acked, 1);
    assert_eq!(queued(&store), None);
    assert!(rows(&store).is_empty(), "the ack forgets the attempts");
}

#[tokio::test]
async fn an_external_handler_whose_lease_is_lost_is_stopped_and_its_attempt_still_counts() {
    let store = MemoryStore::external();
    store.send(&key(), payload());
    let lease = lease();
    let handler = {
        let lease = lease.clone();
        external(move |_| {
            lose(&lease);
            std::future::pending()
        })
    };
    let stats = attempt(&store, &handler, &lease, &CancellationToken::new(), false).await;
    assert_eq!((stats.lease_lost, stats.acked), (1, 0));
    assert_eq!(queued(&store).map(|q| q.releases), Some(0), "left alone");
    assert_eq!(
        rows(&store).len(),
        1,
        "the attempt counts, as a crash would"
    );
}

/// The race of a transactional handler whose own ack makes the renewal find no lease: the
/// lease is lost while the commit that acked the message is in flight. The commit decides:
/// the message is acked, not counted as a lost lease, and no attempt row is left behind.
#[tokio::test]
async fn a_lease_lost_while_the_handlers_own_ack_commits_leaves_the_message_acked() {
    let store = MemoryStore::transactional(|_, _| async { Ok(()) });
    store.send(&key(), payload());
    let lease = lease();
    let renewal = lease.clone();
    store.after_commit(move || lose(&renewal));
    let stats = attempt(
        &store,
        &transactional(),
        &lease,
        &CancellationToken::new(),
        false,
    )
    .await;
    assert!(lease.is_lost(), "the renewal found no lease mid-commit");
    assert_eq!((stats.acked, stats.lease_lost), (1, 0), "{stats:?}");
    assert_eq!(queued(&store), None);
    assert!(rows(&store).is_empty(), "no stale attempt row");
    assert_eq!(dead(&store), None);
}

/// The other side of that race: another consumer acked the message first, so this attempt's
/// commit fails its ack and rolls back; the message is done, nothing is released or recorded.
#[tokio::test]
async fn a_transactional_commit_that_finds_the_message_acked_elsewhere_is_already_acked() {
    let store = MemoryStore::transactional(|_, _| async { Ok(()) });
    earlier_failures(&store, &["first"]);
    // Not in the queue: acked by another consumer meanwhile.
    let stats = run(&store, &transactional()).await;
    assert_eq!(
        (stats.already_acked, stats.acked, stats.handler_errors),
        (1, 0, 0),
        "not a failure to retry: {stats:?}"
    );
    assert_eq!(queued(&store), None, "not sent again");
    assert_eq!(
        rows(&store).len(),
        1,
        "the rolled-back commit forgot nothing"
    );
    assert_eq!(dead(&store), None);
}

#[tokio::test]
async fn an_undecodable_message_is_dead_lettered_counting_the_attempt_it_was_received_for() {
    let store = MemoryStore::external();
    store.send(&key(), payload());
    earlier_failures(&store, &["first"]);
    let stats = attempt(
        &store,
        &external(|_| async { panic!("never runs") }),
        &lease(),
        &CancellationToken::new(),
        true,
    )
    .await;
    assert_eq!((stats.started, stats.dead_lettered), (0, 1));
    let letter = dead(&store).expect("a dead letter");
    assert_eq!(letter.attempts, 2);
    assert_eq!(letter.error, "payload does not decode");
    assert!(rows(&store).is_empty());
}

#[tokio::test]
async fn a_permanent_error_counting_the_attempt_dead_letters_it_and_leaves_the_rows() {
    let store = MemoryStore::external();
    store.send(&key(), payload());
    earlier_failures(&store, &["first"]);
    lock(&store.tables)
        .start_errors
        .push_back(Error::invalid_schema(
            Some("SpannerQueuesAttempts"),
            "refused",
        ));
    let stats = run(&store, &external(|_| async { panic!("never runs") })).await;
    assert_eq!((stats.started, stats.dead_lettered), (0, 1));
    let letter = dead(&store).expect("a dead letter");
    assert_eq!(letter.attempts, 1);
    assert!(
        letter.error.starts_with("cannot count the attempt"),
        "{}",
        letter.error
    );
    assert_eq!(rows(&store).len(), 1, "the rows may be what fails: kept");
}

#[tokio::test]
async fn a_message_the_dead_letter_table_refuses_is_parked_not_dropped() {
    let store =
        MemoryStore::transactional(|_, _| async { Err(HandlerError::dead_letter("poison")) });
    store.send(&key(), payload());
    lock(&store.tables)
        .dead_letter_errors
        .push_back(Error::invalid_schema(
            Some("SpannerQueuesDeadLetters"),
            "gone",
        ));
    let stats = run(&store, &transactional()).await;
    assert_eq!((stats.parked, stats.dead_lettered), (1, 0));
    let queued = queued(&store).expect("still queued");
    assert_eq!(queued.delay, config().redelivery.max_delay());
    assert_eq!(dead(&store), None);
}

#[tokio::test]
async fn shutdown_releases_a_running_attempt_now_without_counting_it() {
    let store = MemoryStore::external();
    store.send(&key(), payload());
    earlier_failures(&store, &["first"]);
    let abort = CancellationToken::new();
    let handler = {
        let abort = abort.clone();
        external(move |_| {
            abort.cancel();
            std::future::pending()
        })
    };
    let stats = attempt(&store, &handler, &lease(), &abort, false).await;
    assert_eq!((stats.started, stats.released_on_shutdown), (1, 1));
    let queued = queued(&store).expect("released");
    assert_eq!((queued.releases, queued.delay), (1, Duration::ZERO));
    let rows = rows(&store);
    assert_eq!(rows.len(), 1, "its own row is dropped: {rows:?}");
    assert_eq!(rows[0].0, "earlier-0");
}

#[tokio::test]
async fn shutdown_before_the_count_releases_the_message_untouched() {
    let store = MemoryStore::external();
    store.send(&key(), payload());
    let abort = CancellationToken::new();
    abort.cancel();
    let stats = attempt(
        &store,
        &external(|_| async { panic!("never runs") }),
        &lease(),
        &abort,
        false,
    )
    .await;
    assert_eq!((stats.started, stats.released_on_shutdown), (0, 1));
    assert_eq!(queued(&store).map(|q| q.delay), Some(Duration::ZERO));
    assert!(rows(&store).is_empty());
}

#[tokio::test]
async fn a_release_that_finds_the_message_acked_elsewhere_counts_it_already_acked() {
    let store = Arc::new(MemoryStore::external());
    store.send(&key(), payload());
    let handler = {
        let store = Arc::clone(&store);
        external(move |_| {
            // Another consumer acks it while this handler fails.
            lock(&store.tables).queue.remove(&key());
            async { Err(HandlerError::msg("boom")) }
        })
    };
    let stats = run(&store, &handler).await;
    assert_eq!((stats.already_acked, stats.retried), (1, 0));
    assert_eq!(queued(&store), None, "not sent again");
}
