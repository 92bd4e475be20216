//! The worker's store in memory, for unit tests of the worker's decisions: the queue, the
//! attempt rows and the dead letters in maps, each method applied atomically under one lock.
//!
//! It cannot join a Spanner read-write transaction, so a transactional handler is replaced by
//! a test body ([`MemoryStore::transactional`]) whose success commits the ack with the
//! forgetting of the attempts. Everything transactional is tested against the emulator.

use std::collections::{HashMap, VecDeque};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use tokio::sync::oneshot;

use crate::codec::Payload;
use crate::error::{Error, Result};
use crate::key::MessageKey;
use crate::message::QueueMessage;
use crate::util::lock;

use super::super::batch::AckOutcome;
use super::super::batch_handler::Batch;
use super::super::handler::{HandlerContext, to_runner_error};
use super::super::ordered::{Clearance, OrderingPolicy, Release};
use super::super::tables::Attempt;
use super::super::tables::{AttemptRow, AttemptRows, Letter, attempt_from, truncate};
use super::super::{BatchFuture, HandlerFuture, TransactionalBatchFn, TransactionalFn};
use super::{AttemptsRead, BeginFn, Member, MemberEnd, Prefetched, Settle, SettleFn, Store};

/// A message in the in-memory queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Queued {
    pub(crate) payload: Payload,
    /// Deliverable this long after it was (re-)sent.
    pub(crate) delay: Duration,
    /// How many times the worker released it (re-sent it).
    pub(crate) releases: u32,
}

/// A row of the in-memory dead-letter table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeadRow {
    pub(crate) payload: Payload,
    pub(crate) attempts: i64,
    pub(crate) error: String,
}

/// The queue and the worker's tables.
#[derive(Debug, Default)]
pub(crate) struct Tables {
    pub(crate) queue: HashMap<MessageKey, Queued>,
    /// Attempt rows by message: id, start, error.
    pub(crate) attempts: HashMap<MessageKey, Vec<AttemptRow>>,
    pub(crate) dead: HashMap<MessageKey, DeadRow>,
    /// Errors the next starts fail with, in order.
    pub(crate) start_errors: VecDeque<Error>,
    /// Errors the next moves to the dead-letter table fail with, in order.
    pub(crate) dead_letter_errors: VecDeque<Error>,
}

impl Tables {
    fn apply(&mut self, key: &MessageKey, rows: &AttemptRows) {
        match rows {
            AttemptRows::Keep => {}
            AttemptRows::RecordFailure { attempt, error } => {
                let rows = self.attempts.entry(key.clone()).or_default();
                rows.retain(|(id, _, _)| *id != attempt.id);
                rows.push((
                    attempt.id.clone(),
                    attempt.started_at,
                    Some(truncate(error)),
                ));
            }
            AttemptRows::Drop(attempt) => {
                if let Some(rows) = self.attempts.get_mut(key) {
                    rows.retain(|(id, _, _)| *id != attempt.id);
                }
            }
            AttemptRows::Forget => {
                self.attempts.remove(key);
            }
        }
    }

    /// Acks `key`: the message must be in the queue, as `ASSERT_ROWS_MODIFIED 1` wants.
    fn ack<M: QueueMessage>(&mut self, key: &MessageKey) -> Result<Queued> {
        self.queue.remove(key).ok_or_else(|| Error::AlreadyAcked {
            queue: M::QUEUE,
            key: key.clone(),
        })
    }

    /// The attempt rows of `key`.
    pub(crate) fn rows(&self, key: &MessageKey) -> &[AttemptRow] {
        self.attempts.get(key).map_or(&[], Vec::as_slice)
    }
}

/// What a test runs in place of a transactional handler.
pub(crate) type Body<M> = Box<dyn Fn(Arc<M>, HandlerContext) -> HandlerFuture + Send + Sync>;

/// What a test runs in place of a transactional batch handler.
pub(crate) type BatchBody<M> = Box<dyn Fn(Batch<M>) -> BatchFuture + Send + Sync>;

/// The in-memory store.
pub(crate) struct MemoryStore<M> {
    pub(crate) tables: Mutex<Tables>,
    body: Body<M>,
    batch_body: Option<BatchBody<M>>,
    /// Transactional batch runs that reached their commit and applied.
    pub(crate) batch_commits: std::sync::atomic::AtomicU64,
    /// Runs once, right after the next transactional commit applied and before its reply
    /// arrives (a test's way to have something happen while a commit is in flight).
    after_commit: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl<M: QueueMessage> MemoryStore<M> {
    /// A store whose transactional handler runs `body`.
    pub(crate) fn transactional<F, Fut>(body: F) -> Self
    where
        F: Fn(Arc<M>, HandlerContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), super::super::HandlerError>> + Send + 'static,
    {
        Self {
            tables: Mutex::new(Tables::default()),
            body: Box::new(move |message, ctx| Box::pin(body(message, ctx))),
            batch_body: None,
            batch_commits: std::sync::atomic::AtomicU64::new(0),
            after_commit: Mutex::new(None),
        }
    }

    /// A store whose transactional batch handler runs `body`.
    pub(crate) fn transactional_batch<F, Fut>(body: F) -> Self
    where
        F: Fn(Batch<M>) -> Fut + Send + Sync + 'static,
        Fut: Future<
                Output = std::result::Result<
                    super::super::BatchOutcome,
                    super::super::HandlerError,
                >,
            > + Send
            + 'static,
    {
        let mut store = Self::external();
        store.batch_body = Some(Box::new(move |batch| Box::pin(body(batch))));
        store
    }

    /// A store for external handlers (a transactional run is a test bug).
    pub(crate) fn external() -> Self {
        Self::transactional(|_, _| async { panic!("no transactional handler in this test") })
    }

    /// Puts a message in the queue.
    pub(crate) fn send(&self, key: &MessageKey, payload: Payload) {
        lock(&self.tables).queue.insert(
            key.clone(),
            Queued {
                payload,
                delay: Duration::ZERO,
                releases: 0,
            },
        );
    }

    /// Runs `hook` right after the next transactional commit, before its reply arrives.
    pub(crate) fn after_commit(&self, hook: impl FnOnce() + Send + 'static) {
        *lock(&self.after_commit) = Some(Box::new(hook));
    }
}

impl<M: QueueMessage> Store<M> for MemoryStore<M> {
    fn request_start(&self, key: &MessageKey, write: bool) -> Option<Prefetched> {
        let (reply, answer) = oneshot::channel();
        let mut tables = lock(&self.tables);
        let result = match tables.start_errors.pop_front() {
            Some(error) => Err(error),
            None => {
                let (id, started_at) = (uuid::Uuid::new_v4().to_string(), SystemTime::now());
                let rows = tables.attempts.entry(key.clone()).or_default();
                if write {
                    rows.push((id.clone(), started_at, None));
                }
                Ok(attempt_from(rows, id, started_at))
            }
        };
        drop(tables);
        let _ = reply.send(result);
        Some(answer)
    }

    fn run_transactional(
        &self,
        _handler: &Arc<TransactionalFn<M>>,
        key: &MessageKey,
        message: Arc<M>,
        ctx: HandlerContext,
    ) -> impl Future<Output = Result<()>> + Send {
        let work = (self.body)(message, ctx);
        async move {
            if let Err(error) = work.await {
                return Err(to_runner_error(error));
            }
            {
                let mut tables = lock(&self.tables);
                tables.ack::<M>(key)?;
                tables.apply(key, &AttemptRows::Forget);
            }
            let hook = lock(&self.after_commit).take();
            if let Some(hook) = hook {
                hook();
            }
            // The reply to the commit arrives one poll later, as over a network.
            tokio::task::yield_now().await;
            Ok(())
        }
    }

    // The in-memory store models no ordering: the unit tests on it use unordered message
    // types, and every message is open. Ordering is tested against the emulator.
    fn run_transactional_ordered(
        &self,
        handler: &Arc<TransactionalFn<M>>,
        key: &MessageKey,
        message: Arc<M>,
        ctx: HandlerContext,
        _payload: &Payload,
        _policy: &OrderingPolicy,
        _clearance: Clearance,
    ) -> impl Future<Output = Result<bool>> + Send {
        let work = self.run_transactional(handler, key, message, ctx);
        async move { work.await.map(|()| true) }
    }

    fn wait_if_blocked(
        &self,
        _key: &MessageKey,
        _payload: &Payload,
        _policy: &OrderingPolicy,
    ) -> impl Future<Output = Result<bool>> + Send {
        std::future::ready(Ok(false))
    }

    fn release_waiting(
        &self,
        releases: Vec<Release>,
    ) -> impl Future<Output = Result<usize>> + Send {
        let mut tables = lock(&self.tables);
        let mut released = 0;
        for release in releases {
            if let Ok(acked) = tables.ack::<M>(&release.key) {
                tables.queue.insert(
                    release.key,
                    Queued {
                        payload: release.payload,
                        delay: Duration::ZERO,
                        releases: acked.releases + 1,
                    },
                );
                released += 1;
            }
        }
        std::future::ready(Ok(released))
    }

    fn ack_grouped(&self, key: &MessageKey) -> impl Future<Output = AckOutcome> + Send {
        let outcome = match self.ack_now(key) {
            Ok(()) => AckOutcome::Acked,
            Err(Error::AlreadyAcked { .. }) => AckOutcome::AlreadyAcked,
            Err(_) => AckOutcome::Failed,
        };
        std::future::ready(outcome)
    }

    fn ack(&self, key: &MessageKey) -> impl Future<Output = Result<()>> + Send {
        std::future::ready(self.ack_now(key))
    }

    fn release(
        &self,
        key: &MessageKey,
        payload: &Payload,
        delay: Duration,
        rows: AttemptRows,
    ) -> impl Future<Output = Result<()>> + Send {
        let mut tables = lock(&self.tables);
        let result = tables.ack::<M>(key).map(|acked| {
            tables.queue.insert(
                key.clone(),
                Queued {
                    payload: payload.clone(),
                    delay,
                    releases: acked.releases + 1,
                },
            );
            tables.apply(key, &rows);
        });
        std::future::ready(result)
    }

    fn dead_letter(&self, letter: Letter<'_>) -> impl Future<Output = Result<()>> + Send {
        let mut tables = lock(&self.tables);
        let result = match tables.dead_letter_errors.pop_front() {
            Some(error) => Err(error),
            None => tables.ack::<M>(letter.key).map(|_| {
                let attempts = match letter.attempts {
                    Some(n) => i64::from(n),
                    None => i64::try_from(tables.rows(letter.key).len())
                        .unwrap_or(i64::MAX)
                        .saturating_add(1),
                };
                if letter.forget_attempts {
                    tables.apply(letter.key, &AttemptRows::Forget);
                }
                tables.dead.insert(
                    letter.key.clone(),
                    DeadRow {
                        payload: letter.payload.clone(),
                        attempts,
                        error: truncate(letter.error),
                    },
                );
            }),
        };
        std::future::ready(result)
    }

    // No ordering checks here either (see `run_transactional_ordered`); the messages of a key
    // that wait for an earlier one of the batch (`Begun::held`) are released with the commit.
    async fn run_transactional_batch(
        &self,
        _handler: &Arc<TransactionalBatchFn<M>>,
        members: Arc<[Member]>,
        begin: Arc<BeginFn<M>>,
        settle: Arc<SettleFn>,
        _ordering: Option<&OrderingPolicy>,
        read: AttemptsRead,
    ) -> Result<Vec<MemberEnd>> {
        let attempts: Vec<Attempt> = {
            let tables = lock(&self.tables);
            if let Some(gone) = members.iter().find(|m| !tables.queue.contains_key(&m.key)) {
                return Err(Error::AlreadyAcked {
                    queue: M::QUEUE,
                    key: gone.key.clone(),
                });
            }
            members
                .iter()
                .map(|m| {
                    attempt_from(
                        tables.rows(&m.key),
                        uuid::Uuid::new_v4().to_string(),
                        SystemTime::now(),
                    )
                })
                .collect()
        };
        *lock(&read) = Some(attempts.clone());
        let open: Vec<usize> = (0..members.len()).collect();
        let begun = begin(&open, &attempts);
        let mut ends = vec![MemberEnd::Waiting; members.len()];
        let mut decided = Vec::new();
        // Released to wait (with the commit, as the other settles).
        let held: Vec<Release> = begun
            .held
            .iter()
            .map(|&i| Release {
                key: members[i].key.clone(),
                payload: members[i].payload.clone(),
                at: crate::queue::DeliverAt::Now,
            })
            .collect();
        for (i, settle) in begun.skipped {
            ends[i] = MemberEnd::Skipped(settle.clone());
            decided.push((i, settle));
        }
        if !begun.run.is_empty() {
            // Called in the future, as the transaction runner calls a handler.
            let work = match &self.batch_body {
                Some(body) => body(begun.batch),
                None => panic!("no transactional batch handler in this test"),
            };
            let outcome = match work.await {
                Ok(outcome) => outcome,
                Err(error) => return Err(to_runner_error(error)),
            };
            let failures = outcome
                .into_failures()
                .into_iter()
                .filter_map(|(i, error)| begun.run.get(i).map(|&m| (m, error)))
                .collect();
            for (i, settle) in settle(&begun.run, failures, &attempts)? {
                ends[i] = MemberEnd::Settled(settle.clone());
                decided.push((i, settle));
            }
        }
        lock(&self.tables).apply_settles::<M>(&members, &decided)?;
        self.release_waiting(held).await?;
        self.batch_commits
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        tokio::task::yield_now().await;
        Ok(ends)
    }

    fn settle_batch(
        &self,
        members: Arc<[Member]>,
        settles: Vec<Settle>,
    ) -> impl Future<Output = Result<()>> + Send {
        let decided: Vec<(usize, Settle)> = settles.into_iter().enumerate().collect();
        std::future::ready(lock(&self.tables).apply_settles::<M>(&members, &decided))
    }
}

impl Tables {
    /// Carries out a batch's settles atomically: all of them, or (an error) none.
    fn apply_settles<M: QueueMessage>(
        &mut self,
        members: &[Member],
        decided: &[(usize, Settle)],
    ) -> Result<()> {
        if let Some((i, _)) = decided
            .iter()
            .find(|(i, _)| !self.queue.contains_key(&members[*i].key))
        {
            return Err(Error::AlreadyAcked {
                queue: M::QUEUE,
                key: members[*i].key.clone(),
            });
        }
        if decided
            .iter()
            .any(|(_, settle)| matches!(settle, Settle::DeadLetter(_)))
            && let Some(error) = self.dead_letter_errors.pop_front()
        {
            return Err(error);
        }
        for (i, settle) in decided {
            let key = &members[*i].key;
            let acked = self.ack::<M>(key)?;
            match settle {
                Settle::Ack => self.apply(key, &AttemptRows::Forget),
                Settle::Release { delay, rows } => {
                    self.queue.insert(
                        key.clone(),
                        Queued {
                            payload: members[*i].payload.clone(),
                            delay: *delay,
                            releases: acked.releases + 1,
                        },
                    );
                    self.apply(key, rows);
                }
                Settle::DeadLetter(letter) => {
                    let attempts = match letter.attempts {
                        Some(n) => i64::from(n),
                        None => i64::try_from(self.rows(key).len())
                            .unwrap_or(i64::MAX)
                            .saturating_add(1),
                    };
                    if letter.forget_attempts {
                        self.apply(key, &AttemptRows::Forget);
                    }
                    self.dead.insert(
                        key.clone(),
                        DeadRow {
                            payload: letter.payload.clone(),
                            attempts,
                            error: letter.error.clone(),
                        },
                    );
                }
            }
        }
        Ok(())
    }
}

impl<M: QueueMessage> MemoryStore<M> {
    fn ack_now(&self, key: &MessageKey) -> Result<()> {
        let mut tables = lock(&self.tables);
        tables.ack::<M>(key)?;
        tables.apply(key, &AttemptRows::Forget);
        Ok(())
    }
}
