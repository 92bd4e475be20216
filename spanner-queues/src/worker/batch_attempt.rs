//! One batch of a batch handler: count its messages' attempts, run the handler on them
//! together, then ack, release or dead-letter each message in one transaction. A batch that
//! fails as a whole is split in two, and each half runs again, until the messages that fail are
//! alone: only those count an attempt.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::FutureExt as _;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::error::Error;
use crate::message::QueueMessage;
use crate::receive::Delivery;
use crate::telemetry;

use super::attempt::{
    Action, Env, Failure, Job, Start, Step, ack_after_success, act, count_failure, count_outcome,
    dead_letter, decide, exhausted_before_start, note_waiting, release_job_unstarted,
    settle_release, start,
};
use super::batch_handler::Batch;
use super::handler::{ContextInner, HandlerContext, HandlerError, HandlerFailed};
use super::store::{
    AttemptsRead, BeginFn, Begun, Member, MemberEnd, Prefetched, Settle, SettleFn, Store,
};
use super::tables::{self, Attempt, AttemptRows, OwnedLetter};
use super::{Handler, Shared, bump};
use crate::util::lock;

/// A message of a batch: what the handler gets of it, and its attempt.
struct Counted<'a, M> {
    job: &'a Job<'a, M>,
    message: Arc<M>,
    /// External handlers: counted when the batch starts. Transactional handlers: read in the
    /// batch's transaction (`None` until a run has read it).
    attempt: Mutex<Option<Attempt>>,
}

impl<M> Counted<'_, M> {
    fn attempt(&self) -> Option<Attempt> {
        lock(&self.attempt).clone()
    }
}

/// One batch, from the attempt counts to the ack, release or dead letter of each message.
pub(super) async fn process_batch<M: QueueMessage, S: Store<M>>(
    shared: Arc<Shared<M>>,
    store: Arc<S>,
    deliveries: Vec<(Delivery<M>, Option<Prefetched>)>,
    _slot: OwnedSemaphorePermit,
    abort: CancellationToken,
) {
    let counters = &shared.counters;
    let running = counters.running.fetch_add(1, Ordering::SeqCst) + 1;
    counters.max_running.fetch_max(running, Ordering::SeqCst);
    let span = tracing::info_span!(
        "spanner_queues.batch",
        queue = %M::QUEUE,
        messages = deliveries.len(),
    );
    let (deliveries, counts): (Vec<Delivery<M>>, Vec<Option<Prefetched>>) =
        deliveries.into_iter().unzip();
    let jobs: Vec<Job<'_, M>> = deliveries.iter().map(Job::of).collect();
    Box::pin(attempt_batch(
        &Env::of(&shared),
        &*store,
        &jobs,
        counts,
        &abort,
    ))
    .instrument(span)
    .await;
    // The deliveries (their leases and receiver slots) live until the batch has ended.
    drop(jobs);
    drop(deliveries);
    counters.running.fetch_sub(1, Ordering::SeqCst);
}

/// One attempt at each of `jobs`, together, on `store`.
pub(super) async fn attempt_batch<M: QueueMessage, S: Store<M>>(
    env: &Env<'_, M>,
    store: &S,
    jobs: &[Job<'_, M>],
    counts: Vec<Option<Prefetched>>,
    abort: &CancellationToken,
) {
    let config = env.config;
    let external = env.handler.is_external();
    // Messages that cannot join the batch go their own way first, as single messages do.
    let mut joining = Vec::with_capacity(jobs.len());
    for (job, count) in jobs.iter().zip(counts) {
        let message = match &job.message {
            Ok(message) => Arc::clone(message),
            Err(text) => {
                tracing::warn!(key = %job.key.short(), error = %text, "message does not decode; dead-lettering");
                Box::pin(dead_letter(env, store, job, None, text, true)).await;
                continue;
            }
        };
        if M::ORDERED && external {
            // As for a single external handler: the ordering check before the attempt counts.
            match store
                .wait_if_blocked(job.key, job.payload, &config.ordering)
                .await
            {
                Ok(false) => {}
                Ok(true) => {
                    note_waiting::<M>(env.counters);
                    continue;
                }
                Err(error) => {
                    tracing::warn!(
                        key = %job.key.short(),
                        error = %telemetry::ErrorChain(&error),
                        "could not check the ordering key; the message is delivered again"
                    );
                    continue;
                }
            }
        }
        joining.push((job, message, count));
    }
    let mut members: Vec<Counted<'_, M>> = Vec::with_capacity(joining.len());
    if external {
        // Counted together, before the handler runs (a crash counts): one round of starts, one
        // commit of the attempt rows and one read of every count.
        let starts = futures::future::join_all(joining.into_iter().map(
            |(job, message, count)| async move {
                let started = Box::pin(start(store, job.key, &job.lease, abort, true, count)).await;
                (job, message, started)
            },
        ))
        .await;
        for (job, message, started) in starts {
            let attempt = match started {
                Start::Counted(attempt) => attempt,
                Start::Shutdown => {
                    Box::pin(release_job_unstarted(env, store, job)).await;
                    continue;
                }
                Start::GaveUp => continue,
                Start::Poison(text) => {
                    Box::pin(dead_letter(env, store, job, Some(1), &text, false)).await;
                    continue;
                }
            };
            if exhausted_before_start(attempt.number, config.max_attempts) {
                let text = gave_up(&attempt);
                Box::pin(dead_letter(
                    env,
                    store,
                    job,
                    Some(attempt.number - 1),
                    &text,
                    true,
                ))
                .await;
                continue;
            }
            members.push(Counted {
                job,
                message,
                attempt: Mutex::new(Some(attempt)),
            });
        }
    } else {
        // Transactional: the attempts are read in the batch's own transaction.
        members.extend(joining.into_iter().map(|(job, message, _)| Counted {
            job,
            message,
            attempt: Mutex::new(None),
        }));
    }
    if members.is_empty() {
        return;
    }
    env.counters
        .started
        .fetch_add(members.len() as u64, Ordering::Relaxed);
    let part: Vec<&Counted<'_, M>> = members.iter().collect();
    Box::pin(run_part(env, store, part, abort)).await;
}

/// The error text of a message dead-lettered because it had all its attempts before this one.
fn gave_up(attempt: &Attempt) -> String {
    format!(
        "gave up after {} attempts; last error: {}",
        attempt.number - 1,
        attempt
            .previous_error
            .as_deref()
            .unwrap_or("none recorded (crash or lost lease)")
    )
}

/// The context a handler gets for a message of its batch.
fn context<M: QueueMessage>(
    job: &Job<'_, M>,
    attempt: &Attempt,
    max_attempts: u32,
) -> HandlerContext {
    HandlerContext(Arc::new(ContextInner {
        queue: M::QUEUE,
        key: job.key.clone(),
        attempt: attempt.number,
        max_attempts,
        previous_error: attempt.previous_error.clone(),
        deliver_time: job.deliver_time,
        lease: job.lease.clone(),
    }))
}

/// How one run of a part of a batch ended.
enum PartStep {
    /// Its transaction committed: how each message ended, by index (`None`: it was gone,
    /// acked by another consumer, and left out).
    Done(Vec<Option<MemberEnd>>),
    /// The message at this index was gone (acked elsewhere): the part runs again without it.
    AlreadyAcked(usize),
    /// The commit's outcome is unknown.
    Unknown,
    /// Shutdown stopped it.
    Shutdown,
    /// It failed as a whole (handler error, panic, timeout, commit error).
    Failed(Failure),
    /// External handlers: the handler succeeded but its acks could not be committed together;
    /// each message is settled on its own (by index, as decided).
    SettleAlone(Vec<Settle>),
}

/// Runs the handler on `part` and settles it; a part that fails as a whole is split in two,
/// each half run in turn, until a failing message is alone, whose failure then counts.
async fn run_part<M: QueueMessage, S: Store<M>>(
    env: &Env<'_, M>,
    store: &S,
    mut part: Vec<&Counted<'_, M>>,
    abort: &CancellationToken,
) {
    let counters = env.counters;
    loop {
        if part.is_empty() {
            return;
        }
        bump(&counters.batches);
        let started = Instant::now();
        let step = Box::pin(run_once(env, store, &part, abort)).await;
        metrics::histogram!(telemetry::HANDLER_SECONDS, "queue" => M::QUEUE.as_str().to_owned())
            .record(started.elapsed().as_secs_f64());
        match step {
            PartStep::Done(ends) => {
                for (member, end) in part.iter().zip(ends) {
                    match end {
                        Some(end) => settled::<M>(env, member, end),
                        None => Box::pin(ended(env, store, member, Action::AlreadyAcked)).await,
                    }
                }
                return;
            }
            PartStep::AlreadyAcked(index) => {
                let gone = part.remove(index);
                Box::pin(ended(env, store, gone, Action::AlreadyAcked)).await;
            }
            PartStep::Unknown => {
                for member in part {
                    Box::pin(ended(env, store, member, Action::OutcomeUnknown)).await;
                }
                return;
            }
            PartStep::Shutdown => {
                for member in part {
                    Box::pin(ended(env, store, member, Action::ReleaseUncounted)).await;
                }
                return;
            }
            PartStep::SettleAlone(settles) => {
                for (member, settle) in part.into_iter().zip(settles) {
                    Box::pin(settle_alone(env, store, member, settle)).await;
                }
                return;
            }
            PartStep::Failed(failure) if part.len() == 1 => {
                Box::pin(failed_alone(env, store, part[0], failure, abort)).await;
                return;
            }
            PartStep::Failed(failure) => {
                bump(&counters.batch_splits);
                tracing::info!(
                    error = %failure.text,
                    reason = failure.reason.as_str(),
                    messages = part.len(),
                    "batch failed; splitting it to isolate the messages that fail"
                );
                let second = part.split_off(part.len() / 2);
                Box::pin(run_part(env, store, part, abort)).await;
                Box::pin(run_part(env, store, second, abort)).await;
                return;
            }
        }
    }
}

/// Carries out `action` for a message whose attempt needs no record: acked elsewhere, an
/// unknown outcome, or shutdown (whose release does not count the attempt).
async fn ended<M: QueueMessage, S: Store<M>>(
    env: &Env<'_, M>,
    store: &S,
    member: &Counted<'_, M>,
    action: Action,
) {
    // A transactional attempt wrote no row of its own: a fresh id drops none.
    let attempt = member.attempt().unwrap_or_else(|| {
        tables::attempt_from(
            &[],
            uuid::Uuid::new_v4().to_string(),
            std::time::SystemTime::now(),
        )
    });
    Box::pin(act(env, store, member.job, &attempt, action)).await;
}

/// A message whose run alone failed: its attempt counts (released for a retry, or
/// dead-lettered after its last), as a single message's.
async fn failed_alone<M: QueueMessage, S: Store<M>>(
    env: &Env<'_, M>,
    store: &S,
    member: &Counted<'_, M>,
    failure: Failure,
    abort: &CancellationToken,
) {
    let attempt = match member.attempt() {
        Some(attempt) => attempt,
        // Its transaction failed before it read the attempt: read it now.
        None => match Box::pin(start(
            store,
            member.job.key,
            &member.job.lease,
            abort,
            false,
            None,
        ))
        .await
        {
            Start::Counted(attempt) => attempt,
            Start::Shutdown => {
                Box::pin(release_job_unstarted(env, store, member.job)).await;
                return;
            }
            Start::GaveUp | Start::Poison(_) => {
                tracing::warn!(
                    key = %member.job.key.short(),
                    error = %failure.text,
                    "cannot count the failed attempt; the message is delivered again"
                );
                return;
            }
        },
    };
    let action = decide(
        Step::Failed(failure),
        attempt.number,
        env.config.max_attempts,
    );
    Box::pin(act(env, store, member.job, &attempt, action)).await;
}

/// One run of the handler on `part`, with its settling transaction.
async fn run_once<M: QueueMessage, S: Store<M>>(
    env: &Env<'_, M>,
    store: &S,
    part: &[&Counted<'_, M>],
    abort: &CancellationToken,
) -> PartStep {
    let config = env.config;
    let members: Arc<[Member]> = part
        .iter()
        .map(|m| Member {
            key: m.job.key.clone(),
            payload: m.job.payload.clone(),
        })
        .collect();
    let settle = settle_fn(env, part);
    let external = match env.handler {
        Handler::TransactionalBatch(handler) => {
            let ordering = M::ORDERED.then_some(&config.ordering);
            let read: AttemptsRead = Arc::default();
            let work = Box::pin(store.run_transactional_batch(
                handler,
                Arc::clone(&members),
                begin_fn(env, part),
                settle,
                ordering,
                Arc::clone(&read),
            ));
            let work = AssertUnwindSafe(work).catch_unwind();
            let result = tokio::select! {
                biased;
                result = work => result,
                () = abort.cancelled() => return PartStep::Shutdown,
                () = tokio::time::sleep(config.handler_timeout) => {
                    // Keep the attempts the transaction read before it was stopped.
                    remember(part, &read);
                    return PartStep::Failed(Failure::timeout(config.handler_timeout));
                }
            };
            remember(part, &read);
            return match result {
                Ok(Ok(ends)) => PartStep::Done(ends.into_iter().map(Some).collect()),
                Ok(Err(error)) => commit_failed(error, &members),
                Err(panic) => PartStep::Failed(Failure::panic(&*panic)),
            };
        }
        Handler::ExternalBatch(handler) => handler,
        Handler::Transactional(_) | Handler::External(_) => {
            unreachable!("single-message handlers run in `attempt`")
        }
    };
    // External: the handler first, then its messages' acks, releases and dead letters in
    // one transaction. A lost lease does not stop it (another consumer may handle that message
    // too, as delivery is at least once; its ack then finds the message gone).
    let attempts: Vec<Attempt> = part.iter().filter_map(|m| m.attempt()).collect();
    if attempts.len() != part.len() {
        unreachable!("an external batch's attempts are counted before it runs");
    }
    let batch = Batch::new(part.iter().zip(&attempts).map(|(m, attempt)| {
        (
            Arc::clone(&m.message),
            context(m.job, attempt, config.max_attempts),
        )
    }));
    let work = AssertUnwindSafe(external(batch)).catch_unwind();
    let result = tokio::select! {
        biased;
        result = work => result,
        () = abort.cancelled() => return PartStep::Shutdown,
        () = tokio::time::sleep(config.handler_timeout) => {
            return PartStep::Failed(Failure::timeout(config.handler_timeout));
        }
    };
    let outcome = match result {
        Ok(Ok(outcome)) => outcome,
        Ok(Err(error)) => return PartStep::Failed(Failure::handler(error)),
        Err(panic) => return PartStep::Failed(Failure::panic(&*panic)),
    };
    let run: Vec<usize> = (0..part.len()).collect();
    let failures = outcome
        .into_failures()
        .into_iter()
        .filter(|(i, _)| {
            let inside = *i < part.len();
            if !inside {
                tracing::warn!(
                    index = i,
                    batch = part.len(),
                    "a batch handler failed a message outside its batch; ignored"
                );
            }
            inside
        })
        .collect();
    let mut settles = vec![Settle::Ack; part.len()];
    for (i, decided) in settle(&run, failures, &attempts) {
        settles[i] = decided;
    }
    // The handler is not run again: a message found gone is left out of the next settling.
    let mut kept: Vec<usize> = (0..part.len()).collect();
    loop {
        let settling: Arc<[Member]> = kept.iter().map(|&i| members[i].clone()).collect();
        let decided: Vec<Settle> = kept.iter().map(|&i| settles[i].clone()).collect();
        match Box::pin(store.settle_batch(Arc::clone(&settling), decided)).await {
            Ok(()) => {
                let mut ends: Vec<Option<MemberEnd>> = vec![None; part.len()];
                for &i in &kept {
                    ends[i] = Some(MemberEnd::Settled(settles[i].clone()));
                }
                return PartStep::Done(ends);
            }
            Err(error) => match commit_failed(error, &settling) {
                PartStep::AlreadyAcked(at) => {
                    kept.remove(at);
                    if kept.is_empty() {
                        return PartStep::Done(vec![None; part.len()]);
                    }
                }
                PartStep::Failed(failure) => {
                    tracing::debug!(
                        error = %failure.text,
                        messages = part.len(),
                        "settling a batch together failed; settling its messages one by one"
                    );
                    return PartStep::SettleAlone(settles);
                }
                other => return other,
            },
        }
    }
}

/// Keeps the attempts a transactional run read (by index) with the part's messages.
fn remember<M>(part: &[&Counted<'_, M>], read: &AttemptsRead) {
    if let Some(attempts) = lock(read).take() {
        for (member, attempt) in part.iter().zip(attempts) {
            *lock(&member.attempt) = Some(attempt);
        }
    }
}

/// A part's transaction failed: which message was gone, an unknown outcome, or a failure of the
/// part as a whole (its handler's error among them).
fn commit_failed(error: Error, members: &[Member]) -> PartStep {
    let error = match error.downcast_application::<HandlerFailed>() {
        Ok(HandlerFailed(handler_error)) => {
            return PartStep::Failed(Failure::handler(handler_error));
        }
        Err(error) => error,
    };
    match &error {
        Error::AlreadyAcked { key, .. } => match members.iter().position(|m| &m.key == key) {
            Some(index) => PartStep::AlreadyAcked(index),
            None => PartStep::Failed(Failure::error(&error)),
        },
        Error::OutcomeUnknown(_) => PartStep::Unknown,
        _ => PartStep::Failed(Failure::error(&error)),
    }
}

/// Transactional batches: the batch the handler gets once the attempts are read. A message
/// that already had its last attempt is dead-lettered in the same transaction, without running
/// the handler (crashes of external attempts and lost leases count).
fn begin_fn<M: QueueMessage>(env: &Env<'_, M>, part: &[&Counted<'_, M>]) -> Arc<BeginFn<M>> {
    let max_attempts = env.config.max_attempts;
    let members: Vec<(Arc<M>, HandlerContextParts)> = part
        .iter()
        .map(|m| {
            (
                Arc::clone(&m.message),
                HandlerContextParts {
                    key: m.job.key.clone(),
                    payload: m.job.payload.clone(),
                    deliver_time: m.job.deliver_time,
                    lease: m.job.lease.clone(),
                },
            )
        })
        .collect();
    Arc::new(move |open: &[usize], attempts: &[Attempt]| {
        let mut run = Vec::with_capacity(open.len());
        let mut given = Vec::with_capacity(open.len());
        let mut skipped = Vec::new();
        for &i in open {
            let (message, parts) = &members[i];
            let attempt = &attempts[i];
            if exhausted_before_start(attempt.number, max_attempts) {
                skipped.push((
                    i,
                    Settle::DeadLetter(OwnedLetter {
                        key: parts.key.clone(),
                        payload: parts.payload.clone(),
                        attempts: Some(attempt.number - 1),
                        error: tables::truncate(&gave_up(attempt)),
                        forget_attempts: true,
                    }),
                ));
                continue;
            }
            let ctx = HandlerContext(Arc::new(ContextInner {
                queue: M::QUEUE,
                key: parts.key.clone(),
                attempt: attempt.number,
                max_attempts,
                previous_error: attempt.previous_error.clone(),
                deliver_time: parts.deliver_time,
                lease: parts.lease.clone(),
            }));
            run.push(i);
            given.push((Arc::clone(message), ctx));
        }
        Begun {
            run,
            batch: Batch::new(given),
            skipped,
        }
    })
}

/// What a transactional batch needs of a message to make its context and dead letter.
struct HandlerContextParts {
    key: crate::key::MessageKey,
    payload: crate::codec::Payload,
    deliver_time: Option<std::time::SystemTime>,
    lease: crate::receive::lease::LeaseHandle,
}

/// What the transaction does with each message of `part` that the handler got, from the
/// handler's failures and the messages' attempts: a success is acked; a failure is released for
/// a retry, or dead-lettered after its last attempt (or when the handler says so), as for
/// single messages.
fn settle_fn<M: QueueMessage>(env: &Env<'_, M>, part: &[&Counted<'_, M>]) -> Arc<SettleFn> {
    let config = env.config.clone();
    let members: Vec<(crate::key::MessageKey, crate::codec::Payload)> = part
        .iter()
        .map(|m| (m.job.key.clone(), m.job.payload.clone()))
        .collect();
    Arc::new(
        move |run: &[usize], failures: Vec<(usize, HandlerError)>, attempts: &[Attempt]| {
            let mut failed: Vec<Option<HandlerError>> = (0..members.len()).map(|_| None).collect();
            for (i, error) in failures {
                if let Some(slot) = failed.get_mut(i) {
                    slot.get_or_insert(error);
                }
            }
            run.iter()
                .map(|&i| {
                    let (key, payload) = &members[i];
                    let attempt = &attempts[i];
                    let settle = match failed[i].take() {
                        None => Settle::Ack,
                        Some(error) => {
                            let step = Step::Failed(Failure::handler(error));
                            match decide(step, attempt.number, config.max_attempts) {
                                Action::Retry(failure, after) => Settle::Release {
                                    delay: after.map_or_else(
                                        || config.redelivery.delay(attempt.number),
                                        super::policy::capped,
                                    ),
                                    rows: AttemptRows::RecordFailure {
                                        attempt: attempt.clone(),
                                        error: failure.text,
                                    },
                                },
                                Action::DeadLetter(failure) => Settle::DeadLetter(OwnedLetter {
                                    key: key.clone(),
                                    payload: payload.clone(),
                                    attempts: Some(attempt.number),
                                    error: tables::truncate(&failure.text),
                                    forget_attempts: true,
                                }),
                                // A failure is retried or dead-lettered; nothing else.
                                _ => Settle::Ack,
                            }
                        }
                    };
                    (i, settle)
                })
                .collect()
        },
    )
}

/// Counts and logs how a message of a committed batch ended.
fn settled<M: QueueMessage>(env: &Env<'_, M>, member: &Counted<'_, M>, end: MemberEnd) {
    let counters = env.counters;
    let key = member.job.key.short();
    match end {
        MemberEnd::Waiting => {
            // Not an attempt after all: the handler did not get it.
            counters.started.fetch_sub(1, Ordering::Relaxed);
            note_waiting::<M>(counters);
        }
        MemberEnd::Skipped(settle) => {
            // Dead-lettered without running: not an attempt of its own.
            counters.started.fetch_sub(1, Ordering::Relaxed);
            if let Settle::DeadLetter(letter) = settle {
                tracing::warn!(%key, error = %letter.error, "message of a batch had all its attempts; dead-lettered");
            }
            metrics::counter!(telemetry::DEAD_LETTERED, "queue" => M::QUEUE.as_str().to_owned())
                .increment(1);
            settle_release::<M>(counters, Ok(()), "dead_lettered", &counters.dead_lettered);
        }
        MemberEnd::Settled(Settle::Ack) => {
            bump(&counters.acked);
            count_outcome::<M>("acked");
        }
        MemberEnd::Settled(Settle::Release { delay, rows }) => {
            let error = match &rows {
                AttemptRows::RecordFailure { error, .. } => error.as_str(),
                _ => "",
            };
            count_failure::<M>(counters, &Failure::error_text(error));
            tracing::info!(%key, error, retry_in = ?delay, "message of a batch failed; released for a retry");
            settle_release::<M>(counters, Ok(()), "retried", &counters.retried);
        }
        MemberEnd::Settled(Settle::DeadLetter(letter)) => {
            count_failure::<M>(counters, &Failure::error_text(&letter.error));
            tracing::warn!(%key, error = %letter.error, "message of a batch failed; dead-lettered");
            metrics::counter!(telemetry::DEAD_LETTERED, "queue" => M::QUEUE.as_str().to_owned())
                .increment(1);
            settle_release::<M>(counters, Ok(()), "dead_lettered", &counters.dead_lettered);
        }
    }
}

/// External handlers: settles one message in a transaction of its own, when its batch's
/// settling failed.
async fn settle_alone<M: QueueMessage, S: Store<M>>(
    env: &Env<'_, M>,
    store: &S,
    member: &Counted<'_, M>,
    settle: Settle,
) {
    let config = env.config;
    let Some(attempt) = member.attempt() else {
        return; // an external batch's attempts are counted before it runs
    };
    let action = match settle {
        Settle::Ack => {
            let step = Box::pin(ack_after_success(store, member.job.key)).await;
            decide(step, attempt.number, config.max_attempts)
        }
        Settle::Release { delay, rows } => {
            let text = match rows {
                AttemptRows::RecordFailure { error, .. } => error,
                _ => String::new(),
            };
            Action::Retry(Failure::error_text(&text), Some(delay))
        }
        Settle::DeadLetter(letter) => Action::DeadLetter(Failure::error_text(&letter.error)),
    };
    Box::pin(act(env, store, member.job, &attempt, action)).await;
}

#[cfg(test)]
mod store_tests;
