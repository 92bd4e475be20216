//! Consumers measured side by side: the SDK worker, a hand-written consumer on the official
//! client only, and the classic polling outbox.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use google_cloud_gax::error::rpc::Code;
use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::transaction::ReadWriteTransaction;
use spanner_queues::{TransactionSettings, Worker};
use tokio::sync::Semaphore;
use tokio::task::{JoinHandle, JoinSet};
use tokio_util::sync::CancellationToken;

use crate::BoxError;
use crate::db::{Bench, BenchJob, Database, Sql};
use crate::emulator::{RpcCounts, diff};

/// Who consumes, and how many of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Side {
    /// `workers` SDK workers (each its own client) of `handlers` handlers each.
    Worker { workers: usize, handlers: usize },
    /// The hand-written consumer: `workers` receive loops (each its own client) of `handlers`
    /// concurrent transactions each.
    Handwritten { workers: usize, handlers: usize },
    /// `consumers` polling-outbox loops (each its own client).
    Polling { consumers: usize },
    /// One SDK worker with a transactional batch handler: batches of `batch` messages, its
    /// default number of batches at once ([`BATCHES_AT_ONCE`]).
    BatchWorker { batch: usize },
    /// The hand-written batch consumer: one receive loop collecting `batch` rows, each batch
    /// applied and acked in one read-write transaction, [`BATCHES_AT_ONCE`] at once.
    HandwrittenBatch { batch: usize },
}

/// Batches in flight at once, on both batch sides: the batch worker's default.
pub(crate) const BATCHES_AT_ONCE: usize = 2;

impl Side {
    pub(crate) fn label(&self) -> String {
        match self {
            Side::Worker { workers, handlers } => format!("SDK worker {workers}x{handlers}"),
            Side::Handwritten { workers, handlers } => {
                format!("hand-written {workers}x{handlers}")
            }
            Side::Polling { consumers } => format!("polling outbox x{consumers}"),
            Side::BatchWorker { batch } => format!("SDK batch worker x{batch}"),
            Side::HandwrittenBatch { batch } => format!("hand-written batch x{batch}"),
        }
    }

    fn clients(&self) -> usize {
        match *self {
            Side::Worker { workers, .. } | Side::Handwritten { workers, .. } => workers,
            Side::Polling { consumers } => consumers,
            Side::BatchWorker { .. } | Side::HandwrittenBatch { .. } => 1,
        }
    }
}

/// Counters shared by a consumer's tasks.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// Messages whose effect committed (hand-written and polling consumers).
    done: AtomicU64,
    /// Handler (transaction body) runs: aborted transactions run again.
    runs: AtomicU64,
    /// Transactions whose ack found the message gone (delivered twice).
    already_acked: AtomicU64,
    /// Other failures.
    errors: AtomicU64,
    /// First handler start of each message, when latency is measured.
    starts: Option<Mutex<HashMap<i64, Instant>>>,
}

impl Progress {
    /// Also records when each message's handler first starts.
    pub(crate) fn with_starts() -> Self {
        Self {
            starts: Some(Mutex::new(HashMap::new())),
            ..Self::default()
        }
    }

    /// First handler start of each message (with [`with_starts`](Self::with_starts)).
    pub(crate) fn starts(&self) -> HashMap<i64, Instant> {
        self.starts
            .as_ref()
            .map(|s| s.lock().unwrap_or_else(PoisonError::into_inner).clone())
            .unwrap_or_default()
    }

    pub(crate) fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    fn run(&self, id: i64) {
        self.runs.fetch_add(1, Ordering::Relaxed);
        if crate::emulator::rpc_log() {
            // With the proxy's RPC log: when each handler run starts, on the same clock.
            let now = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap_or_default()
                .as_micros();
            eprintln!("handler {id} {now}");
        }
        if let Some(starts) = &self.starts {
            starts
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .entry(id)
                .or_insert_with(Instant::now);
        }
    }

    fn failed(&self, what: &str, error: &dyn std::fmt::Display) {
        if self.errors.fetch_add(1, Ordering::Relaxed) < 3 {
            eprintln!("  {what}: {error}");
        }
    }
}

/// What one consume run measured.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConsumeRun {
    pub(crate) messages: u64,
    pub(crate) secs: f64,
    /// From the consumers' start to the first message's commit (their start-up: sessions,
    /// schema checks, the first receive), part of `secs`.
    pub(crate) first_secs: f64,
    /// RPCs made while consuming (from the start of the consumers to the last commit).
    pub(crate) rpcs: RpcCounts,
    /// Rows the RPCs' result sets returned, by kind of RPC.
    pub(crate) rows: RpcCounts,
    pub(crate) handler_runs: u64,
    pub(crate) already_acked: u64,
    pub(crate) errors: u64,
}

impl ConsumeRun {
    pub(crate) fn rate(&self) -> f64 {
        self.messages as f64 / self.secs
    }
}

/// Settings of every SDK transaction in the benchmark: the emulator aborts concurrent
/// read-write transactions, so allow many attempts.
pub(crate) fn sdk_settings() -> TransactionSettings {
    TransactionSettings::default()
        .with_max_attempts(1_000)
        .with_total_timeout(Duration::from_secs(300))
}

/// Fills the queue (or the outbox) with `ids`, then consumes them with `side` and measures
/// from the consumers' start to the last commit. Verifies every effect exactly once.
pub(crate) async fn run(
    bench: &Bench,
    db: &Database,
    side: Side,
    ids: Range<i64>,
    timeout: Duration,
) -> Result<ConsumeRun, BoxError> {
    let polling = matches!(side, Side::Polling { .. });
    if polling {
        db.fill_outbox(ids.clone()).await?;
    } else {
        db.fill_queue(ids.clone()).await?;
    }
    let messages = (ids.end - ids.start) as u64;
    let mut clients = Vec::new();
    for _ in 0..side.clients() {
        clients.push(bench.new_client(db).await?);
    }
    let progress = Arc::new(Progress::default());
    let before = bench.rpcs().await?;
    let rows_before = bench.rows().await?;
    let started = Instant::now();
    let consumer = Consumer::start(side, db.sql(), clients, Arc::clone(&progress))?;
    wait_until(started, timeout, || consumer.done() >= 1).await;
    let first_secs = started.elapsed().as_secs_f64();
    let finished = wait_until(started, timeout, || consumer.done() >= messages).await;
    let secs = started.elapsed().as_secs_f64();
    let after = bench.rpcs().await?;
    let rows_after = bench.rows().await?;
    let done = consumer.done();
    consumer.stop().await;
    if !finished {
        return Err(format!(
            "{}: only {done} of {messages} messages consumed in {timeout:?}",
            side.label()
        )
        .into());
    }
    db.verify(&ids, polling).await?;
    Ok(ConsumeRun {
        messages,
        secs,
        first_secs,
        rpcs: diff(&after, &before),
        rows: diff(&rows_after, &rows_before),
        handler_runs: progress.runs.load(Ordering::Relaxed),
        already_acked: progress.already_acked.load(Ordering::Relaxed),
        errors: progress.errors.load(Ordering::Relaxed),
    })
}

/// Polls `done` every 2 ms (no RPC) until it holds or `timeout` passes since `started`.
pub(crate) async fn wait_until(
    started: Instant,
    timeout: Duration,
    done: impl Fn() -> bool,
) -> bool {
    loop {
        if done() {
            return true;
        }
        if started.elapsed() > timeout {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Running consumers.
pub(crate) struct Consumer {
    stop: CancellationToken,
    tasks: Vec<JoinHandle<()>>,
    workers: Vec<Arc<Worker<BenchJob>>>,
    progress: Arc<Progress>,
}

impl Consumer {
    /// Starts `side` with one client each (the SDK's handle on it for SDK workers, its data
    /// client for the others), on a database whose SQL is `sql`.
    pub(crate) fn start(
        side: Side,
        sql: Sql,
        clients: Vec<spanner_queues::Database>,
        progress: Arc<Progress>,
    ) -> Result<Self, BoxError> {
        let stop = CancellationToken::new();
        let mut tasks = Vec::new();
        let mut workers = Vec::new();
        for client in clients {
            let stop = stop.clone();
            let progress = Arc::clone(&progress);
            match side {
                Side::Worker { handlers, .. } => {
                    let worker =
                        Arc::new(sdk_worker(&client, sql, handlers, Arc::clone(&progress))?);
                    workers.push(Arc::clone(&worker));
                    tasks.push(tokio::spawn(async move {
                        if let Err(error) = worker.run(stop.cancelled_owned()).await {
                            progress.failed("worker", &error);
                        }
                    }));
                }
                Side::Handwritten { handlers, .. } => {
                    tasks.push(tokio::spawn(handwritten(
                        client.client().clone(),
                        sql,
                        handlers,
                        stop,
                        progress,
                    )));
                }
                Side::BatchWorker { batch } => {
                    let worker = Arc::new(sdk_batch_worker(
                        &client,
                        sql,
                        batch,
                        Arc::clone(&progress),
                    )?);
                    workers.push(Arc::clone(&worker));
                    tasks.push(tokio::spawn(async move {
                        if let Err(error) = worker.run(stop.cancelled_owned()).await {
                            progress.failed("batch worker", &error);
                        }
                    }));
                }
                Side::HandwrittenBatch { batch } => {
                    tasks.push(tokio::spawn(handwritten_batch(
                        client.client().clone(),
                        sql,
                        batch,
                        stop,
                        progress,
                    )));
                }
                Side::Polling { .. } => {
                    tasks.push(tokio::spawn(polling(
                        client.client().clone(),
                        sql,
                        stop,
                        progress,
                    )));
                }
            }
        }
        Ok(Self {
            stop,
            tasks,
            workers,
            progress,
        })
    }

    /// Messages consumed so far (committed with their effect).
    pub(crate) fn done(&self) -> u64 {
        if self.workers.is_empty() {
            self.progress.done.load(Ordering::Relaxed)
        } else {
            self.workers.iter().map(|w| w.stats().acked).sum()
        }
    }

    pub(crate) async fn stop(self) {
        self.stop.cancel();
        for task in self.tasks {
            let _ = task.await;
        }
    }
}

/// The test-only knob that slows the SDK worker's handler down (a sleep of this many
/// milliseconds in the handler, before its effect): it shows that the gate fails when the
/// worker gets slower.
pub(crate) const SLOW_HANDLER_ENV: &str = "SPANNER_QUEUES_BENCH_SLOW_HANDLER_MS";

/// The handler delay [`SLOW_HANDLER_ENV`] asks for (none when unset); an error naming the
/// variable when it is not a whole number of milliseconds.
pub(crate) fn slow_handler() -> Result<Duration, String> {
    match std::env::var(SLOW_HANDLER_ENV) {
        Err(std::env::VarError::NotPresent) => Ok(Duration::ZERO),
        Ok(text) => text
            .trim()
            .parse::<u64>()
            .map(Duration::from_millis)
            .map_err(|_| {
                format!("{SLOW_HANDLER_ENV} must be a whole number of milliseconds, not {text:?}")
            }),
        Err(std::env::VarError::NotUnicode(_)) => Err(format!(
            "{SLOW_HANDLER_ENV} must be a whole number of milliseconds"
        )),
    }
}

/// The SDK worker: a transactional handler inserting the effect; the worker acks in the same
/// transaction.
fn sdk_worker(
    db: &spanner_queues::Database,
    sql: Sql,
    handlers: usize,
    progress: Arc<Progress>,
) -> Result<Worker<BenchJob>, BoxError> {
    // Checked when the benchmark starts (a bad value is a usage error there).
    let delay = slow_handler().unwrap_or_default();
    Ok(Worker::<BenchJob>::builder(db)
        .with_concurrency(handlers)
        .with_transaction_settings(sdk_settings())
        .transactional(move |tx, job, _ctx| {
            let progress = Arc::clone(&progress);
            async move {
                progress.run(job.id);
                if !delay.is_zero() {
                    tokio::time::sleep(delay).await;
                }
                tx.execute_update(sql.insert_effect(job.id)).await?;
                Ok(())
            }
        })
        .build()?)
}

/// The SDK batch worker: a transactional batch handler inserting the batch's effects in one
/// statement; the worker acks the batch in the same transaction.
fn sdk_batch_worker(
    db: &spanner_queues::Database,
    sql: Sql,
    batch: usize,
    progress: Arc<Progress>,
) -> Result<Worker<BenchJob>, BoxError> {
    Ok(Worker::<BenchJob>::builder(db)
        .with_batch_size(batch)
        .with_concurrency(BATCHES_AT_ONCE)
        .with_transaction_settings(sdk_settings())
        .transactional_batch(move |tx, jobs| {
            let progress = Arc::clone(&progress);
            async move {
                let ids: Vec<i64> = jobs.messages().map(|job| job.id).collect();
                for id in &ids {
                    progress.run(*id);
                }
                tx.execute_update(sql.insert_effects(&ids)).await?;
                Ok(spanner_queues::worker::BatchOutcome::new())
            }
        })
        .build()?)
}

/// How long the hand-written batch consumer waits for the next row before it applies a batch
/// that is not full (the batch worker's default linger).
const HANDWRITTEN_LINGER: Duration = Duration::from_millis(10);

/// The hand-written batch consumer on the official client only: one streaming `RECEIVE` call
/// at a time, asking for batches of `batch` rows; it collects rows until it has `batch` of them
/// or none arrives for [`HANDWRITTEN_LINGER`], then applies and acks them in one read-write
/// transaction (the acks' keyed read of the messages, which must all be there; one multi-row
/// insert of the effects; one delete mutation for all the messages), at most
/// [`BATCHES_AT_ONCE`] at once. It neither renews leases nor counts attempts.
async fn handwritten_batch(
    db: DatabaseClient,
    sql: Sql,
    batch: usize,
    stop: CancellationToken,
    progress: Arc<Progress>,
) {
    let slots = Arc::new(Semaphore::new(BATCHES_AT_ONCE));
    let mut tasks = JoinSet::new();
    'calls: while !stop.is_cancelled() {
        let transaction = db.single_use().build();
        let rows = tokio::select! {
            () = stop.cancelled() => break,
            rows = transaction.execute_query(sql.receive_batch(batch)) => rows,
        };
        let mut rows = match rows {
            Ok(rows) => rows,
            Err(error) => {
                progress.failed("receive", &error);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let mut pending: Vec<i64> = Vec::with_capacity(batch);
        let mut ended = false;
        while !ended {
            // The next row, unless the batch has some rows and none arrives within the linger.
            let next = if pending.is_empty() {
                tokio::select! {
                    () = stop.cancelled() => break 'calls,
                    next = rows.next() => Some(next),
                }
            } else {
                tokio::select! {
                    () = stop.cancelled() => break 'calls,
                    next = tokio::time::timeout(HANDWRITTEN_LINGER, rows.next()) => next.ok(),
                }
            };
            match &next {
                Some(None) => ended = true,
                Some(Some(Err(error))) => {
                    progress.failed("receive stream", &error);
                    ended = true;
                }
                Some(Some(Ok(row))) => match (row.get::<i64>(0), row.get::<String>(1)) {
                    (Ok(id), Ok(payload)) => {
                        if let Err(error) = serde_json::from_str::<serde_json::Value>(&payload) {
                            progress.failed("payload", &error);
                        } else {
                            pending.push(id);
                        }
                    }
                    (Err(error), _) | (_, Err(error)) => progress.failed("row", &error),
                },
                // The linger passed.
                None => {}
            }
            let full = pending.len() >= batch;
            let lingered = next.is_none();
            if !pending.is_empty() && (full || lingered || ended) {
                let permit = tokio::select! {
                    () = stop.cancelled() => break 'calls,
                    permit = Arc::clone(&slots).acquire_owned() => permit,
                };
                let Ok(permit) = permit else { break 'calls };
                let ids = std::mem::take(&mut pending);
                let (db, progress) = (db.clone(), Arc::clone(&progress));
                tasks.spawn(async move {
                    handwritten_batch_one(&db, sql, ids, &progress).await;
                    drop(permit);
                });
                while tasks.try_join_next().is_some() {}
            }
        }
    }
    while tasks.join_next().await.is_some() {}
}

async fn handwritten_batch_one(
    db: &DatabaseClient,
    sql: Sql,
    ids: Vec<i64>,
    progress: &Arc<Progress>,
) {
    use google_cloud_spanner::key::{Key, KeySet};
    use google_cloud_spanner::mutation::Mutation;
    use google_cloud_spanner::read::ReadRequest;

    let owned = Arc::clone(progress);
    let count = ids.len() as u64;
    let ids: Arc<[i64]> = ids.into();
    let result = db
        .read_write_transaction()
        .build()
        .run(move |tx: ReadWriteTransaction| {
            let (progress, ids) = (Arc::clone(&owned), Arc::clone(&ids));
            async move {
                for id in ids.iter() {
                    progress.run(*id);
                }
                let (table, column) = sql.queue_table();
                let keys = ids
                    .iter()
                    .fold(KeySet::builder(), |keys, id| {
                        keys.add_key(Key::new(vec![google_cloud_spanner::value::Value::from(
                            *id,
                        )]))
                    })
                    .build();
                let read = ReadRequest::builder(table, vec![column])
                    .with_keys(keys.clone())
                    .build();
                let mut rows = tx.execute_read(read).await?;
                let mut found = 0_usize;
                while let Some(row) = rows.next().await {
                    row?;
                    found += 1;
                }
                if found < ids.len() {
                    // A message is gone (delivered twice): write nothing, as a failed
                    // `ASSERT_ROWS_MODIFIED` would.
                    return Ok(false);
                }
                tx.execute_update(sql.insert_effects(&ids)).await?;
                tx.buffer([Mutation::delete(table, keys)])?;
                Ok(true)
            }
        })
        .await;
    match result.map(|r| r.into_inner()) {
        Ok(true) => {
            progress.done.fetch_add(count, Ordering::Relaxed);
        }
        Ok(false) => {
            progress.already_acked.fetch_add(1, Ordering::Relaxed);
        }
        Err(error) => progress.failed("hand-written batch transaction", &error),
    }
}

/// The hand-written consumer on the official client only: one streaming `RECEIVE` call at a
/// time; per message one read-write transaction with the effect and
/// `DELETE … ASSERT_ROWS_MODIFIED 1`, at most `handlers` at once. It neither renews leases nor
/// counts attempts: the least a correct consumer does when every message is handled well
/// within its lease.
async fn handwritten(
    db: DatabaseClient,
    sql: Sql,
    handlers: usize,
    stop: CancellationToken,
    progress: Arc<Progress>,
) {
    let slots = Arc::new(Semaphore::new(handlers));
    let mut tasks = JoinSet::new();
    'calls: while !stop.is_cancelled() {
        let receive = sql.receive();
        let transaction = db.single_use().build();
        let rows = tokio::select! {
            () = stop.cancelled() => break,
            rows = transaction.execute_query(receive) => rows,
        };
        let mut rows = match rows {
            Ok(rows) => rows,
            Err(error) => {
                progress.failed("receive", &error);
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        loop {
            let next = tokio::select! {
                () = stop.cancelled() => break 'calls,
                next = rows.next() => next,
            };
            let row = match next {
                None => break,
                Some(Err(error)) => {
                    progress.failed("receive stream", &error);
                    break;
                }
                Some(Ok(row)) => row,
            };
            // Both columns by position: the same in both dialects.
            let (id, payload) = match (row.get::<i64>(0), row.get::<String>(1)) {
                (Ok(id), Ok(payload)) => (id, payload),
                (Err(error), _) | (_, Err(error)) => {
                    progress.failed("row", &error);
                    continue;
                }
            };
            // The same decoding work as the SDK's JSON codec.
            if let Err(error) = serde_json::from_str::<serde_json::Value>(&payload) {
                progress.failed("payload", &error);
                continue;
            }
            let permit = tokio::select! {
                () = stop.cancelled() => break 'calls,
                permit = Arc::clone(&slots).acquire_owned() => permit,
            };
            let Ok(permit) = permit else { break 'calls };
            let db = db.clone();
            let progress = Arc::clone(&progress);
            tasks.spawn(async move {
                handwritten_one(&db, sql, id, &progress).await;
                drop(permit);
            });
            while tasks.try_join_next().is_some() {}
        }
    }
    while tasks.join_next().await.is_some() {}
}

async fn handwritten_one(db: &DatabaseClient, sql: Sql, id: i64, progress: &Arc<Progress>) {
    // A closure returning an owned future: the official runner's future is then `Send` (an
    // async closure borrowing its environment is not, inside `tokio::spawn`).
    let owned = Arc::clone(progress);
    let result = db
        .read_write_transaction()
        .build()
        .run(move |tx: ReadWriteTransaction| {
            let progress = Arc::clone(&owned);
            async move {
                progress.run(id);
                tx.execute_update(sql.insert_effect(id)).await?;
                tx.execute_update(sql.ack(id)).await?;
                Ok(())
            }
        })
        .await;
    match result {
        Ok(_) => {
            progress.done.fetch_add(1, Ordering::Relaxed);
        }
        Err(error) if error.status().is_some_and(|s| s.code == Code::OutOfRange) => {
            progress.already_acked.fetch_add(1, Ordering::Relaxed);
        }
        Err(error) => progress.failed("hand-written transaction", &error),
    }
}

/// The classic polling outbox: claim one `NEW` row (`SELECT … LIMIT 1` and a status `UPDATE`
/// in one transaction), then a second transaction for the effect and the completion.
async fn polling(db: DatabaseClient, sql: Sql, stop: CancellationToken, progress: Arc<Progress>) {
    while !stop.is_cancelled() {
        let claimed = db
            .read_write_transaction()
            .build()
            .run(move |tx: ReadWriteTransaction| async move {
                let mut rows = tx.execute_query(sql.claim()).await?;
                let id = match rows.next().await {
                    Some(row) => row?.get::<i64>(0)?,
                    None => return Ok(None),
                };
                tx.execute_update(sql.set_status(id, "CLAIMED")).await?;
                Ok(Some(id))
            })
            .await;
        let id = match claimed {
            Ok(result) => match result.into_inner() {
                Some(id) => id,
                None => {
                    tokio::select! {
                        () = stop.cancelled() => return,
                        () = tokio::time::sleep(Duration::from_millis(20)) => continue,
                    }
                }
            },
            Err(error) => {
                progress.failed("claim", &error);
                continue;
            }
        };
        let completed = db
            .read_write_transaction()
            .build()
            .run({
                let owned = Arc::clone(&progress);
                move |tx: ReadWriteTransaction| {
                    let progress = Arc::clone(&owned);
                    async move {
                        progress.run(id);
                        tx.execute_update(sql.insert_effect(id)).await?;
                        tx.execute_update(sql.set_status(id, "DONE")).await?;
                        Ok(())
                    }
                }
            })
            .await;
        match completed {
            Ok(_) => {
                progress.done.fetch_add(1, Ordering::Relaxed);
            }
            Err(error) => progress.failed("complete", &error),
        }
    }
}

/// Read-write transactions one after the other (an insert and a commit each), through the
/// official client: the reference rate of the emulator.
pub(crate) async fn sequential_transactions(
    bench: &Bench,
    db: &Database,
    ids: Range<i64>,
) -> Result<ConsumeRun, BoxError> {
    let client = bench.new_client(db).await?.client().clone();
    let sql = db.sql();
    let before = bench.rpcs().await?;
    let rows_before = bench.rows().await?;
    let started = Instant::now();
    for id in ids.clone() {
        client
            .read_write_transaction()
            .build()
            .run(async |tx| tx.execute_update(sql.insert_effect(id)).await)
            .await?;
    }
    let secs = started.elapsed().as_secs_f64();
    let after = bench.rpcs().await?;
    let rows_after = bench.rows().await?;
    Ok(ConsumeRun {
        messages: (ids.end - ids.start) as u64,
        secs,
        rpcs: diff(&after, &before),
        rows: diff(&rows_after, &rows_before),
        handler_runs: (ids.end - ids.start) as u64,
        ..ConsumeRun::default()
    })
}
