//! The batch handlers' decisions on the in-memory store: one batch per test (through
//! [`attempt_batch`]), and what it left in the queue and the tables.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio_util::sync::CancellationToken;

use super::super::attempt::{Env, Job};
use super::super::batch_handler::{Batch, BatchOutcome};
use super::super::builder::Config;
use super::super::handler::HandlerError;
use super::super::ordered::Clearance;
use super::super::store::memory::MemoryStore;
use super::super::{Counters, Handler, RedeliveryPolicy, WorkerStats};
use super::attempt_batch;
use crate::codec::{CodecError, Payload, PayloadSpec};
use crate::ident::{ColumnName, QueueName};
use crate::key::{KeyColumn, KeyType, KeyValue, MessageKey};
use crate::message::QueueMessage;
use crate::receive::lease::{Lease, LeaseHandle, LeaseToken};
use crate::util::lock;

struct Item(i64);

impl QueueMessage for Item {
    type Key = i64;
    const QUEUE: QueueName = QueueName::from_static("Items");
    const KEY_COLUMNS: &'static [KeyColumn] = &[KeyColumn::new(
        ColumnName::from_static("ItemId"),
        KeyType::Int64,
    )];
    const PAYLOAD: PayloadSpec = PayloadSpec::string();
    fn key(&self) -> i64 {
        self.0
    }
    fn encode_payload(&self) -> std::result::Result<Payload, CodecError> {
        Ok(crate::codec::encode_string("item"))
    }
    fn decode(id: i64, _: Payload) -> std::result::Result<Self, CodecError> {
        Ok(Item(id))
    }
}

const MAX_ATTEMPTS: u32 = 3;
const RETRY_DELAY: Duration = Duration::from_secs(5);
/// The message every test's handler fails on (when it is in its batch).
const POISON: i64 = 5;

fn key(id: i64) -> MessageKey {
    MessageKey::new(vec![KeyValue::Int64(id)])
}

fn payload() -> Payload {
    Payload::String("item".into())
}

fn config() -> Config {
    Config {
        max_attempts: MAX_ATTEMPTS,
        redelivery: RedeliveryPolicy::default()
            .with_initial_delay(RETRY_DELAY)
            .with_jitter(0.0),
        batch: true,
        ..Config::default()
    }
}

fn lease() -> LeaseHandle {
    let expiry = SystemTime::now() + Duration::from_secs(3600);
    LeaseHandle {
        lease: Arc::new(Lease::new(0, LeaseToken::String("token".into()), expiry)),
        counters: Arc::default(),
        queue: Item::QUEUE,
    }
}

/// The batches each handler run got (their ids).
type Runs = Arc<Mutex<Vec<Vec<i64>>>>;

fn ids(batch: &Batch<Item>) -> Vec<i64> {
    batch.messages().map(|item| item.0).collect()
}

/// A store with `1..=n` queued, whose transactional batch handler records its batches and
/// runs `body` on them.
fn store_with<F>(n: i64, runs: &Runs, body: F) -> MemoryStore<Item>
where
    F: Fn(&Batch<Item>) -> Result<BatchOutcome, HandlerError> + Send + Sync + 'static,
{
    let runs = Arc::clone(runs);
    let store = MemoryStore::transactional_batch(move |batch: Batch<Item>| {
        lock(&runs).push(ids(&batch));
        let result = body(&batch);
        async move { result }
    });
    for id in 1..=n {
        store.send(&key(id), payload());
    }
    store
}

fn transactional() -> Handler<Item> {
    Handler::TransactionalBatch(Arc::new(|_, _| {
        unreachable!("the in-memory store runs its own body")
    }))
}

/// Runs one batch of the messages `1..=n` (each `undecodable` one cannot be decoded) and
/// returns the counters.
async fn batch_of(
    store: &MemoryStore<Item>,
    handler: &Handler<Item>,
    n: i64,
    abort: &CancellationToken,
) -> WorkerStats {
    let (config, counters) = (config(), Counters::default());
    let env = Env {
        config: &config,
        handler,
        counters: &counters,
    };
    let keys: Vec<MessageKey> = (1..=n).map(key).collect();
    let payload = payload();
    let lease = lease();
    let jobs: Vec<Job<'_, Item>> = keys
        .iter()
        .zip(1..=n)
        .map(|(key, id)| Job {
            key,
            payload: &payload,
            message: Ok(Arc::new(Item(id))),
            deliver_time: None,
            lease: lease.clone(),
            clearance: Clearance::Clear,
        })
        .collect();
    let counts = jobs.iter().map(|_| None).collect();
    let after = vec![None; jobs.len()];
    attempt_batch(&env, store, &jobs, counts, &after, abort).await;
    let c = &counters;
    let get = |n: &AtomicU64| n.load(std::sync::atomic::Ordering::Relaxed);
    WorkerStats {
        started: get(&c.started),
        acked: get(&c.acked),
        retried: get(&c.retried),
        dead_lettered: get(&c.dead_lettered),
        handler_errors: get(&c.handler_errors),
        panics: get(&c.panics),
        timeouts: get(&c.timeouts),
        already_acked: get(&c.already_acked),
        released_on_shutdown: get(&c.released_on_shutdown),
        batches: get(&c.batches),
        batch_splits: get(&c.batch_splits),
        ..WorkerStats::default()
    }
}

async fn run(store: &MemoryStore<Item>, n: i64) -> WorkerStats {
    batch_of(store, &transactional(), n, &CancellationToken::new()).await
}

fn queued(store: &MemoryStore<Item>) -> HashSet<i64> {
    lock(&store.tables)
        .queue
        .keys()
        .map(|k| match k.parts() {
            [KeyValue::Int64(id)] => *id,
            other => panic!("{other:?}"),
        })
        .collect()
}

fn attempt_rows(store: &MemoryStore<Item>, id: i64) -> Vec<Option<String>> {
    lock(&store.tables)
        .rows(&key(id))
        .iter()
        .map(|(_, _, error)| error.clone())
        .collect()
}

fn commits<M>(store: &MemoryStore<M>) -> u64 {
    store
        .batch_commits
        .load(std::sync::atomic::Ordering::SeqCst)
}

#[tokio::test]
async fn a_batch_that_succeeds_is_acked_with_one_commit() {
    let runs = Runs::default();
    let store = store_with(10, &runs, |_| Ok(BatchOutcome::new()));
    let stats = run(&store, 10).await;
    assert_eq!(*lock(&runs), vec![(1..=10).collect::<Vec<_>>()]);
    assert_eq!((stats.started, stats.acked, stats.batches), (10, 10, 1));
    assert_eq!(commits(&store), 1);
    assert!(queued(&store).is_empty());
}

#[tokio::test]
async fn messages_the_handler_fails_are_released_or_dead_lettered_in_the_same_commit() {
    let runs = Runs::default();
    let store = store_with(6, &runs, |batch| {
        let mut outcome = BatchOutcome::new();
        for (i, item) in batch.messages().enumerate() {
            match item.0 {
                2 => {
                    outcome.fail(i, HandlerError::msg("try later"));
                }
                4 => {
                    outcome.fail(i, HandlerError::dead_letter("never"));
                }
                _ => {}
            }
        }
        Ok(outcome)
    });
    let stats = run(&store, 6).await;
    assert_eq!(commits(&store), 1, "one commit for the batch");
    assert_eq!(lock(&runs).len(), 1, "no split: the batch itself succeeded");
    assert_eq!((stats.acked, stats.retried, stats.dead_lettered), (4, 1, 1));
    assert_eq!(queued(&store), HashSet::from([2]), "released for a retry");
    let tables = lock(&store.tables);
    assert_eq!(tables.queue[&key(2)].delay, RETRY_DELAY);
    assert_eq!(tables.rows(&key(2)).len(), 1, "its failure recorded");
    assert_eq!(tables.dead[&key(4)].error, "never");
    assert_eq!(tables.dead.len(), 1);
}

#[tokio::test]
async fn a_poison_message_is_isolated_by_splitting_and_only_it_counts_an_attempt() {
    let runs = Runs::default();
    let store = store_with(8, &runs, |batch| {
        if batch.messages().any(|item| item.0 == POISON) {
            return Err(HandlerError::msg("poison in the batch"));
        }
        Ok(BatchOutcome::new())
    });
    let stats = run(&store, 8).await;
    assert_eq!(stats.acked, 7, "{stats:?}");
    assert_eq!((stats.retried, stats.handler_errors), (1, 1), "{stats:?}");
    assert_eq!(queued(&store), HashSet::from([POISON]));
    assert_eq!(
        attempt_rows(&store, POISON),
        [Some("poison in the batch".to_owned())]
    );
    for id in (1..=8).filter(|id| *id != POISON) {
        assert!(
            attempt_rows(&store, id).is_empty(),
            "{id} counted no attempt"
        );
    }
    // 8 → 4 + 4 → (2 + 2) → (1 + 1): the poison alone after three splits.
    assert_eq!(stats.batch_splits, 3, "{stats:?}");
    let runs = lock(&runs);
    assert!(runs.contains(&vec![POISON]), "{runs:?}");
    // [1..=4], [6] and [7, 8] committed; the poison alone was released on its own.
    assert_eq!(commits(&store), 3, "{runs:?}");
}

#[tokio::test]
async fn a_poison_message_on_its_last_attempt_is_dead_lettered_alone() {
    let runs = Runs::default();
    let store = store_with(4, &runs, |batch| {
        if batch.messages().any(|item| item.0 == 3) {
            panic!("cannot handle 3");
        }
        Ok(BatchOutcome::new())
    });
    {
        let mut tables = lock(&store.tables);
        let rows = (0..MAX_ATTEMPTS - 1)
            .map(|i| {
                (
                    format!("earlier-{i}"),
                    SystemTime::now(),
                    Some("before".into()),
                )
            })
            .collect();
        tables.attempts.insert(key(3), rows);
    }
    let stats = run(&store, 4).await;
    assert_eq!((stats.acked, stats.dead_lettered, stats.panics), (3, 1, 1));
    assert!(queued(&store).is_empty());
    let tables = lock(&store.tables);
    assert_eq!(tables.dead.len(), 1);
    let letter = &tables.dead[&key(3)];
    assert_eq!(letter.attempts, i64::from(MAX_ATTEMPTS));
    assert!(letter.error.contains("cannot handle 3"), "{}", letter.error);
}

#[tokio::test]
async fn a_message_acked_elsewhere_leaves_the_batch_and_the_rest_commits() {
    let runs = Runs::default();
    let store = store_with(5, &runs, |_| Ok(BatchOutcome::new()));
    lock(&store.tables).queue.remove(&key(2));
    let stats = run(&store, 5).await;
    assert_eq!((stats.acked, stats.already_acked), (4, 1), "{stats:?}");
    assert_eq!(stats.batch_splits, 0);
    assert!(queued(&store).is_empty());
    // The handler ran again without it (its first transaction rolled back).
    assert_eq!(lock(&runs).last(), Some(&vec![1, 3, 4, 5]));
}

#[tokio::test]
async fn shutdown_releases_every_message_of_a_running_batch_without_counting() {
    let abort = CancellationToken::new();
    let started = Arc::new(AtomicUsize::new(0));
    let store = {
        let (abort, started) = (abort.clone(), Arc::clone(&started));
        MemoryStore::transactional_batch(move |_batch: Batch<Item>| {
            started.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            abort.cancel();
            std::future::pending::<Result<BatchOutcome, HandlerError>>()
        })
    };
    for id in 1..=3 {
        store.send(&key(id), payload());
    }
    let stats = batch_of(&store, &transactional(), 3, &abort).await;
    assert_eq!(stats.released_on_shutdown, 3, "{stats:?}");
    assert_eq!(queued(&store), HashSet::from([1, 2, 3]));
    for id in 1..=3 {
        assert!(attempt_rows(&store, id).is_empty());
    }
}

#[tokio::test]
async fn an_external_batch_counts_its_attempts_first_and_acks_its_successes_together() {
    let runs = Runs::default();
    let store = MemoryStore::<Item>::external();
    for id in 1..=6 {
        store.send(&key(id), payload());
    }
    let handler = {
        let runs = Arc::clone(&runs);
        Handler::ExternalBatch(Arc::new(move |batch: Batch<Item>| {
            lock(&runs).push(ids(&batch));
            let result = if batch.messages().any(|item| item.0 == POISON) {
                Err(HandlerError::msg("poison"))
            } else {
                let mut outcome = BatchOutcome::new();
                for (i, item) in batch.messages().enumerate() {
                    if item.0 == 1 {
                        outcome.fail(
                            i,
                            HandlerError::retry_after(Duration::from_secs(9), "later"),
                        );
                    }
                }
                Ok(outcome)
            };
            Box::pin(async move { result })
        }))
    };
    let stats = batch_of(&store, &handler, 6, &CancellationToken::new()).await;
    assert_eq!((stats.acked, stats.retried), (4, 2), "{stats:?}");
    assert_eq!(queued(&store), HashSet::from([1, POISON]));
    let tables = lock(&store.tables);
    assert_eq!(tables.queue[&key(1)].delay, Duration::from_secs(9));
    // An external attempt's row is written when it starts: the released ones keep theirs,
    // with the error.
    assert_eq!(tables.rows(&key(1)).len(), 1);
    assert_eq!(tables.rows(&key(POISON)).len(), 1);
    assert_eq!(tables.rows(&key(2)).len(), 0, "forgotten by the ack");
}

#[tokio::test]
async fn an_external_batch_whose_message_is_gone_acks_the_rest_without_running_again() {
    let runs = Runs::default();
    let store = MemoryStore::<Item>::external();
    for id in 1..=4 {
        store.send(&key(id), payload());
    }
    let handler = {
        let runs = Arc::clone(&runs);
        Handler::ExternalBatch(Arc::new(move |batch: Batch<Item>| {
            lock(&runs).push(ids(&batch));
            Box::pin(async { Ok(BatchOutcome::new()) })
        }))
    };
    // Acked by another consumer while the handler runs (its attempt rows are written first).
    lock(&store.tables).queue.remove(&key(3));
    let stats = batch_of(&store, &handler, 4, &CancellationToken::new()).await;
    assert_eq!((stats.acked, stats.already_acked), (3, 1), "{stats:?}");
    assert_eq!(lock(&runs).len(), 1, "the handler ran once");
    assert!(queued(&store).is_empty());
}

// ---------------------------------------------------------------------------------------------
// Ordered queues: a key's messages in one batch, each right after the one before it

/// An ordered message type: ordering key `Conversation`, sequence `Seq`.
#[derive(Debug)]
struct Step {
    conversation: String,
}

impl QueueMessage for Step {
    type Key = String;
    const QUEUE: QueueName = QueueName::from_static("Steps");
    const KEY_COLUMNS: &'static [KeyColumn] = &[
        KeyColumn::new(ColumnName::from_static("Conversation"), KeyType::String),
        KeyColumn::new(ColumnName::from_static("Seq"), KeyType::Int64),
    ];
    const PAYLOAD: PayloadSpec = PayloadSpec::string();
    const ORDERED: bool = true;
    fn key(&self) -> String {
        self.conversation.clone()
    }
    fn encode_payload(&self) -> std::result::Result<Payload, CodecError> {
        Ok(crate::codec::encode_string("step"))
    }
    fn decode(conversation: String, _: Payload) -> std::result::Result<Self, CodecError> {
        Ok(Step { conversation })
    }
}

fn step_key(conversation: &str, sequence: i64) -> MessageKey {
    MessageKey::new(vec![
        KeyValue::String(conversation.to_owned()),
        KeyValue::Int64(sequence),
    ])
}

/// The batches each handler run got, as `conversation/sequence`.
type StepRuns = Arc<Mutex<Vec<Vec<String>>>>;

/// A store with `members` queued, whose transactional batch handler records its batches and
/// fails the messages `fail` names (as `conversation/sequence`) on their own, or, with
/// `whole`, the batch as a whole while it holds one of them.
fn step_store(
    members: &[(&str, i64)],
    runs: &StepRuns,
    fail: &'static str,
    whole: bool,
) -> MemoryStore<Step> {
    let runs = Arc::clone(runs);
    let store = MemoryStore::transactional_batch(move |batch: Batch<Step>| {
        let names: Vec<String> = batch
            .iter()
            .map(|(step, ctx)| {
                let sequence = ctx.sequence().expect("an ordered queue").get();
                format!("{}/{sequence}", step.conversation)
            })
            .collect();
        lock(&runs).push(names.clone());
        let mut outcome = BatchOutcome::new();
        let mut result = Ok(());
        for (i, name) in names.iter().enumerate() {
            if name == fail {
                if whole {
                    result = Err(HandlerError::msg("fails the batch"));
                } else {
                    outcome.fail(i, HandlerError::msg("not now"));
                }
            }
        }
        let result = result.map(|()| outcome);
        async move { result }
    });
    for (conversation, sequence) in members {
        store.send(&step_key(conversation, *sequence), payload());
    }
    store
}

/// Runs one batch of `members` in the order given; a message follows the one before it of its
/// conversation when it is the next sequence (as the run loop takes them).
async fn ordered_batch(store: &MemoryStore<Step>, members: &[(&str, i64)]) -> WorkerStats {
    let (config, counters) = (config(), Counters::default());
    let handler: Handler<Step> = Handler::TransactionalBatch(Arc::new(|_, _| {
        unreachable!("the in-memory store runs its own body")
    }));
    let env = Env {
        config: &config,
        handler: &handler,
        counters: &counters,
    };
    let keys: Vec<MessageKey> = members.iter().map(|(c, s)| step_key(c, *s)).collect();
    let payload = payload();
    let lease = lease();
    let jobs: Vec<Job<'_, Step>> = keys
        .iter()
        .zip(members)
        .map(|(key, (conversation, _))| Job {
            key,
            payload: &payload,
            message: Ok(Arc::new(Step {
                conversation: (*conversation).to_owned(),
            })),
            deliver_time: None,
            lease: lease.clone(),
            clearance: Clearance::Clear,
        })
        .collect();
    let after: Vec<Option<usize>> = members
        .iter()
        .enumerate()
        .map(|(i, (conversation, sequence))| {
            members[..i]
                .iter()
                .position(|(c, s)| c == conversation && s + 1 == *sequence)
        })
        .collect();
    let counts = jobs.iter().map(|_| None).collect();
    attempt_batch(
        &env,
        store,
        &jobs,
        counts,
        &after,
        &CancellationToken::new(),
    )
    .await;
    let get = |n: &AtomicU64| n.load(std::sync::atomic::Ordering::Relaxed);
    WorkerStats {
        started: get(&counters.started),
        acked: get(&counters.acked),
        retried: get(&counters.retried),
        waited: get(&counters.waited),
        batches: get(&counters.batches),
        batch_splits: get(&counters.batch_splits),
        ..WorkerStats::default()
    }
}

fn queued_steps(store: &MemoryStore<Step>) -> HashSet<MessageKey> {
    lock(&store.tables).queue.keys().cloned().collect()
}

const STEPS: [(&str, i64); 5] = [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)];

#[tokio::test]
async fn a_message_that_fails_in_a_batch_keeps_the_later_ones_of_its_key_from_committing() {
    let runs = StepRuns::default();
    let store = step_store(&STEPS, &runs, "a/1", false);
    let stats = ordered_batch(&store, &STEPS).await;
    // The first run committed nothing: a/2 ran after a/1, which failed. The second ran
    // without a/2, which was released to wait for a/1 (not an attempt).
    assert_eq!(
        *lock(&runs),
        vec![
            vec!["a/0", "a/1", "a/2", "b/0", "b/1"],
            vec!["a/0", "a/1", "b/0", "b/1"],
        ]
    );
    assert_eq!(commits(&store), 1, "only the run without a/2 committed");
    assert_eq!(
        queued_steps(&store),
        HashSet::from([step_key("a", 1), step_key("a", 2)])
    );
    assert_eq!(
        (stats.acked, stats.retried, stats.waited),
        (3, 1, 1),
        "{stats:?}"
    );
    assert_eq!(stats.started, 4, "a/2 counted no attempt: {stats:?}");
    let tables = lock(&store.tables);
    assert_eq!(
        tables.rows(&step_key("a", 1)).len(),
        1,
        "a/1's failure recorded"
    );
    assert!(
        tables.rows(&step_key("a", 2)).is_empty(),
        "a/2 counted no attempt"
    );
    assert_eq!(
        tables.queue[&step_key("a", 2)].releases,
        1,
        "a/2 released once"
    );
}

#[tokio::test]
async fn a_split_never_runs_a_message_past_an_earlier_one_of_its_key_that_failed() {
    let runs = StepRuns::default();
    let store = step_store(&STEPS, &runs, "a/1", true);
    let stats = ordered_batch(&store, &STEPS).await;
    // [a/0 a/1 | a/2 b/0 b/1]: a/1 is isolated and released for a retry; a/2, in the other
    // half, waits for it instead of running.
    let runs = lock(&runs).clone();
    assert_eq!(
        runs.iter()
            .filter(|run| run.contains(&"a/2".to_owned()))
            .count(),
        1,
        "a/2 ran only in the whole batch, which failed: {runs:?}"
    );
    assert!(
        runs.contains(&vec!["b/0".to_owned(), "b/1".to_owned()]),
        "{runs:?}"
    );
    assert_eq!(
        queued_steps(&store),
        HashSet::from([step_key("a", 1), step_key("a", 2)])
    );
    assert_eq!(
        (stats.acked, stats.retried, stats.waited),
        (3, 1, 1),
        "{stats:?}"
    );
    let tables = lock(&store.tables);
    assert!(
        tables.rows(&step_key("a", 2)).is_empty(),
        "a/2 counted no attempt"
    );
}

#[tokio::test]
async fn a_key_whose_messages_all_succeed_commits_them_together_in_order() {
    let runs = StepRuns::default();
    let store = step_store(&STEPS, &runs, "none", false);
    let stats = ordered_batch(&store, &STEPS).await;
    assert_eq!(lock(&runs).len(), 1);
    assert_eq!(commits(&store), 1);
    assert_eq!((stats.acked, stats.waited), (5, 0), "{stats:?}");
    assert!(queued_steps(&store).is_empty());
}
