//! One batch of a batch handler: count its messages' attempts, run the handler on them
//! together, then ack, release or dead-letter each message in one transaction. A batch that
//! fails as a whole is split in two, and each half runs again, until the messages that fail are
//! alone: only those count an attempt.

use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, Ordering};
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
use super::ordered::{Clearance, Release};
use super::store::{
    AttemptsRead, BeginFn, Begun, Member, MemberEnd, Prefetched, Settle, SettleFn, Store,
};
use super::tables::{self, Attempt, AttemptRows, OwnedLetter};
use super::{Handler, Shared, bump};
use crate::util::lock;

/// A message the run loop gives a batch: its delivery, its attempt count if read ahead, how
/// it may run (ordered queues), and the message of its ordering key right before it in the
/// same batch, if any (by index: it runs only if that one is acked with it).
pub(super) struct BatchMember<M: QueueMessage> {
    pub(super) delivery: Delivery<M>,
    pub(super) count: Option<Prefetched>,
    pub(super) clearance: Clearance,
    pub(super) after: Option<usize>,
}

/// A message of a batch: what the handler gets of it, and its attempt.
struct Counted<'a, M> {
    job: &'a Job<'a, M>,
    message: Arc<M>,
    /// External handlers: counted when the batch starts. Transactional handlers: read in the
    /// batch's transaction (`None` until a run has read it).
    attempt: Mutex<Option<Attempt>>,
    /// Its index among the batch's messages.
    index: usize,
    /// Ordered queues: the index of the message of its ordering key right before it in the
    /// batch, if any.
    after: Option<usize>,
}

/// Ordered queues: which messages of a batch are acked, by index among the batch's messages. A
/// message that follows another of its key in the batch runs only once that one is acked (in
/// an earlier commit, or in its own).
struct Acked(Vec<AtomicBool>);

impl Acked {
    fn new(n: usize) -> Self {
        Self((0..n).map(|_| AtomicBool::new(false)).collect())
    }

    fn set(&self, index: usize) {
        self.0[index].store(true, Ordering::Relaxed);
    }

    fn get(&self, index: usize) -> bool {
        self.0[index].load(Ordering::Relaxed)
    }
}

/// Ordered queues: the later messages of a batch (by index among the run's messages) whose
/// handler ran while an earlier message of their ordering key in the same run was not acked
/// (it failed, or a message before it did): the transaction rolls back, and the run is done
/// again without them (they are released to wait for that message).
#[derive(Debug)]
struct HeldBack(Vec<usize>);

impl std::fmt::Display for HeldBack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} message(s) of the batch follow a failed earlier message of their ordering key",
            self.0.len()
        )
    }
}

impl std::error::Error for HeldBack {}

impl<M> Counted<'_, M> {
    fn attempt(&self) -> Option<Attempt> {
        lock(&self.attempt).clone()
    }
}

/// One batch, from the attempt counts to the ack, release or dead letter of each message.
pub(super) async fn process_batch<M: QueueMessage, S: Store<M>>(
    shared: Arc<Shared<M>>,
    store: Arc<S>,
    members: Vec<BatchMember<M>>,
    _slot: OwnedSemaphorePermit,
    abort: CancellationToken,
) {
    let counters = &shared.counters;
    let running = counters.running.fetch_add(1, Ordering::SeqCst) + 1;
    counters.max_running.fetch_max(running, Ordering::SeqCst);
    let span = tracing::info_span!(
        "spanner_queues.batch",
        queue = %M::QUEUE,
        messages = members.len(),
    );
    let mut deliveries = Vec::with_capacity(members.len());
    let mut counts = Vec::with_capacity(members.len());
    let mut links = Vec::with_capacity(members.len());
    for member in members {
        deliveries.push((member.delivery, member.clearance));
        counts.push(member.count);
        links.push(member.after);
    }
    let jobs: Vec<Job<'_, M>> = deliveries
        .iter()
        .map(|(delivery, clearance)| Job::of(delivery, *clearance))
        .collect();
    Box::pin(attempt_batch(
        &Env::of(&shared),
        &*store,
        &jobs,
        counts,
        &links,
        &abort,
    ))
    .instrument(span)
    .await;
    // The deliveries (their leases and receiver slots) live until the batch has ended.
    drop(jobs);
    drop(deliveries);
    counters.running.fetch_sub(1, Ordering::SeqCst);
}

/// One attempt at each of `jobs`, together, on `store`. Ordered queues: `after` names, for
/// each job, the job of its ordering key right before it in the batch (by index), if any.
pub(super) async fn attempt_batch<M: QueueMessage, S: Store<M>>(
    env: &Env<'_, M>,
    store: &S,
    jobs: &[Job<'_, M>],
    counts: Vec<Option<Prefetched>>,
    after: &[Option<usize>],
    abort: &CancellationToken,
) {
    let config = env.config;
    let external = env.handler.is_external();
    // Messages that cannot join the batch go their own way first, as single messages do.
    let mut joining = Vec::with_capacity(jobs.len());
    for (index, (job, count)) in jobs.iter().zip(counts).enumerate() {
        let message = match &job.message {
            Ok(message) => Arc::clone(message),
            Err(text) => {
                tracing::warn!(key = %job.key.short(), error = %text, "message does not decode; dead-lettering");
                Box::pin(dead_letter(env, store, job, None, text, true)).await;
                continue;
            }
        };
        if M::ORDERED && external && job.clearance == Clearance::Check {
            // As for a single external handler: the ordering check before the attempt counts
            // (a message cleared already needs none).
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
        joining.push((index, job, message, count));
    }
    let mut members: Vec<Counted<'_, M>> = Vec::with_capacity(joining.len());
    if external {
        // Counted together, before the handler runs (a crash counts): one round of starts, one
        // commit of the attempt rows and one read of every count.
        let starts = futures::future::join_all(joining.into_iter().map(
            |(index, job, message, count)| async move {
                let started = Box::pin(start(store, job.key, &job.lease, abort, true, count)).await;
                (index, job, message, started)
            },
        ))
        .await;
        for (index, job, message, started) in starts {
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
                index,
                after: after.get(index).copied().flatten(),
            });
        }
    } else {
        // Transactional: the attempts are read in the batch's own transaction.
        members.extend(joining.into_iter().map(|(index, job, message, _)| Counted {
            job,
            message,
            attempt: Mutex::new(None),
            index,
            after: after.get(index).copied().flatten(),
        }));
    }
    if members.is_empty() {
        return;
    }
    env.counters
        .started
        .fetch_add(members.len() as u64, Ordering::Relaxed);
    let part: Vec<&Counted<'_, M>> = members.iter().collect();
    let acked = Acked::new(jobs.len());
    Box::pin(run_part(env, store, part, &acked, abort)).await;
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
        sequence: crate::ordering::Sequence::of::<M>(job.key),
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
    /// Ordered queues: these messages (by index) ran after an earlier message of their
    /// ordering key that was not acked; the transaction rolled back, and the part runs again
    /// without them.
    HoldBack(Vec<usize>),
}

/// Runs the handler on `part` and settles it; a part that fails as a whole is split in two,
/// each half run in turn, until a failing message is alone, whose failure then counts.
async fn run_part<M: QueueMessage, S: Store<M>>(
    env: &Env<'_, M>,
    store: &S,
    mut part: Vec<&Counted<'_, M>>,
    acked: &Acked,
    abort: &CancellationToken,
) {
    let counters = env.counters;
    loop {
        // Ordered queues: a message whose earlier message of its key was in the batch and is
        // not in this part runs only if that one was acked; otherwise it waits for it.
        let (kept, behind): (Vec<_>, Vec<_>) = part.iter().partition(|member| {
            member.after.is_none_or(|before| {
                acked.get(before) || part.iter().any(|other| other.index == before)
            })
        });
        if !behind.is_empty() {
            // Those after them in the part go too: the next round finds them.
            part = kept;
            Box::pin(wait_behind(env, store, &behind)).await;
            continue;
        }
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
                    if matches!(end, Some(MemberEnd::Settled(Settle::Ack))) {
                        acked.set(member.index);
                    }
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
            PartStep::HoldBack(held) => {
                let behind: Vec<&Counted<'_, M>> = held.iter().map(|&i| part[i]).collect();
                part = part
                    .into_iter()
                    .enumerate()
                    .filter(|(i, _)| !held.contains(i))
                    .map(|(_, member)| member)
                    .collect();
                Box::pin(wait_behind(env, store, &behind)).await;
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
                Box::pin(run_part(env, store, part, acked, abort)).await;
                Box::pin(run_part(env, store, second, acked, abort)).await;
                return;
            }
        }
    }
}

/// Ordered queues: releases messages of a batch that must wait for an earlier message of their
/// ordering key that was in the batch and was not acked (not attempts: they come back after the
/// recheck delay, and wait as any message whose earlier message is left).
async fn wait_behind<M: QueueMessage, S: Store<M>>(
    env: &Env<'_, M>,
    store: &S,
    behind: &[&Counted<'_, M>],
) {
    let at = crate::queue::DeliverAt::After(env.config.ordering.recheck_delay());
    let releases = behind
        .iter()
        .filter(|member| !member.job.lease.is_lost())
        .map(|member| Release {
            key: member.job.key.clone(),
            payload: member.job.payload.clone(),
            at,
        })
        .collect::<Vec<_>>();
    if releases.is_empty() {
        return;
    }
    // Not attempts after all.
    env.counters
        .started
        .fetch_sub(behind.len() as u64, Ordering::Relaxed);
    match store.release_waiting(releases).await {
        Ok(released) => {
            for _ in 0..released {
                note_waiting::<M>(env.counters);
            }
        }
        Err(error) => tracing::warn!(
            messages = behind.len(),
            error = %telemetry::ErrorChain(&error),
            "could not release messages that wait for an earlier one of their batch; they are delivered again when their leases lapse"
        ),
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
            check: m.job.clearance == Clearance::Check,
        })
        .collect();
    // Ordered queues: the message of the key right before each one in this part (by index
    // among the part; one before it in an earlier part was acked there).
    let after: Arc<[Option<usize>]> = part
        .iter()
        .map(|m| {
            m.after
                .and_then(|before| part.iter().position(|other| other.index == before))
        })
        .collect();
    let settle = settle_fn(env, part, Arc::clone(&after));
    let external = match env.handler {
        Handler::TransactionalBatch(handler) => {
            let ordering = M::ORDERED.then_some(&config.ordering);
            let read: AttemptsRead = Arc::default();
            let work = Box::pin(store.run_transactional_batch(
                handler,
                Arc::clone(&members),
                begin_fn(env, part, after),
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
    match settle(&run, failures, &attempts) {
        Ok(decided) => {
            for (i, decided) in decided {
                settles[i] = decided;
            }
        }
        Err(error) => return commit_failed(error, &members),
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
    let error = match error.downcast_application::<HeldBack>() {
        Ok(HeldBack(held)) => return PartStep::HoldBack(held),
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
///
/// Ordered queues: a message whose earlier message of its key in the part (`after`, by index)
/// does not run waits for it (the store releases it: [`Begun::held`]).
fn begin_fn<M: QueueMessage>(
    env: &Env<'_, M>,
    part: &[&Counted<'_, M>],
    after: Arc<[Option<usize>]>,
) -> Arc<BeginFn<M>> {
    let max_attempts = env.config.max_attempts;
    let members: Vec<(Arc<M>, HandlerContextParts)> = part
        .iter()
        .map(|m| {
            (
                Arc::clone(&m.message),
                HandlerContextParts {
                    sequence: crate::ordering::Sequence::of::<M>(m.job.key),
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
        let mut held = Vec::new();
        for &i in open {
            let (message, parts) = &members[i];
            let attempt = &attempts[i];
            if after[i].is_some_and(|before| !run.contains(&before)) {
                held.push(i);
                continue;
            }
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
                sequence: parts.sequence,
            }));
            run.push(i);
            given.push((Arc::clone(message), ctx));
        }
        Begun {
            run,
            batch: Batch::new(given),
            skipped,
            held,
        }
    })
}

/// What a transactional batch needs of a message to make its context and dead letter.
struct HandlerContextParts {
    sequence: Option<crate::ordering::Sequence>,
    key: crate::key::MessageKey,
    payload: crate::codec::Payload,
    deliver_time: Option<std::time::SystemTime>,
    lease: crate::receive::lease::LeaseHandle,
}

/// What the transaction does with each message of `part` that the handler got, from the
/// handler's failures and the messages' attempts: a success is acked; a failure is released for
/// a retry, or dead-lettered after its last attempt (or when the handler says so), as for
/// single messages.
///
/// Ordered queues: when a message the handler got follows one of its key in the part (`after`,
/// by index) that is not acked, the run's effects must not commit: [`HeldBack`] names every
/// such message, and the part runs again without them.
fn settle_fn<M: QueueMessage>(
    env: &Env<'_, M>,
    part: &[&Counted<'_, M>],
    after: Arc<[Option<usize>]>,
) -> Arc<SettleFn> {
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
            let decided: Vec<(usize, Settle)> = run
                .iter()
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
                .collect();
            // Ordered queues: `run` is in the part's order, so a message's earlier one of its
            // key comes first.
            let mut behind: Vec<usize> = Vec::new();
            for (i, _) in &decided {
                if let Some(before) = after.get(*i).copied().flatten() {
                    let before_acked = decided
                        .iter()
                        .any(|(j, s)| *j == before && matches!(s, Settle::Ack));
                    if !before_acked || behind.contains(&before) {
                        behind.push(*i);
                    }
                }
            }
            if behind.is_empty() {
                Ok(decided)
            } else {
                Err(Error::application(HeldBack(behind)))
            }
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
