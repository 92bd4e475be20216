//! One message's attempt: count it, run the handler, then ack, release or dead-letter.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use backon::BackoffBuilder as _;
use futures::FutureExt as _;
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::sync::CancellationToken;
use tracing::Instrument as _;

use crate::codec::Payload;
use crate::error::{Classification, Error, Result};
use crate::key::MessageKey;
use crate::message::QueueMessage;
use crate::receive::Delivery;
use crate::receive::lease::LeaseHandle;
use crate::telemetry;

use super::batch::AckOutcome;
use super::builder::Config;
use super::handler::{ContextInner, HandlerFailed};
use super::handler::{HandlerContext, HandlerError, HandlerErrorKind};
use super::ordered::{Clearance, Release};
use super::store::{Prefetched, Store};
use super::tables::AttemptRows;
use super::{Counters, Handler, Shared, bump, tables};

pub(super) fn count_outcome<M: QueueMessage>(outcome: &'static str) {
    metrics::counter!(
        telemetry::PROCESSED,
        "queue" => M::QUEUE.as_str().to_owned(),
        "outcome" => outcome
    )
    .increment(1);
}

/// Why an attempt failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reason {
    Error,
    Panic,
    Timeout,
}

impl Reason {
    pub(super) fn as_str(self) -> &'static str {
        match self {
            Self::Error => "error",
            Self::Panic => "panic",
            Self::Timeout => "timeout",
        }
    }
}

#[derive(Debug)]
pub(super) struct Failure {
    pub(super) reason: Reason,
    pub(super) kind: HandlerErrorKind,
    pub(super) text: String,
}

impl Failure {
    pub(super) fn handler(error: HandlerError) -> Self {
        Self {
            reason: Reason::Error,
            kind: error.kind(),
            text: error.to_string(),
        }
    }

    /// A failure of a message known by its text only (already counted as a handler's).
    pub(super) fn error_text(text: &str) -> Self {
        Self {
            reason: Reason::Error,
            kind: HandlerErrorKind::Retry,
            text: text.to_owned(),
        }
    }

    pub(super) fn error(error: &Error) -> Self {
        Self {
            reason: Reason::Error,
            kind: HandlerErrorKind::Retry,
            text: telemetry::ErrorChain(error).to_string(),
        }
    }

    pub(super) fn panic(payload: &(dyn std::any::Any + Send)) -> Self {
        let text = if let Some(s) = payload.downcast_ref::<&str>() {
            (*s).to_owned()
        } else if let Some(s) = payload.downcast_ref::<String>() {
            s.clone()
        } else {
            "a non-string panic payload".to_owned()
        };
        Self {
            reason: Reason::Panic,
            kind: HandlerErrorKind::Retry,
            text: format!("handler panicked: {text}"),
        }
    }

    pub(super) fn timeout(after: Duration) -> Self {
        Self {
            reason: Reason::Timeout,
            kind: HandlerErrorKind::Retry,
            text: format!("handler timed out after {after:?}"),
        }
    }
}

/// How one attempt ended.
pub(super) enum Step {
    /// Transactional: committed with the ack.
    Acked,
    /// External: the handler succeeded; the ack is still to do.
    Succeeded,
    /// The message was gone when acked.
    AlreadyAcked,
    /// The commit's outcome is unknown.
    Unknown,
    Failed(Failure),
    LeaseLost,
    Shutdown,
    /// Ordered queue: an earlier message of its ordering key is left; it was released to
    /// come back later (not an attempt).
    Waiting,
}

/// What an attempt uses of its worker: its settings, handler and counters.
pub(super) struct Env<'a, M> {
    pub(super) config: &'a Config,
    pub(super) handler: &'a Handler<M>,
    pub(super) counters: &'a Counters,
}

impl<'a, M> Env<'a, M> {
    pub(super) fn of(shared: &'a Shared<M>) -> Self {
        Self {
            config: &shared.config,
            handler: &shared.handler,
            counters: &shared.counters,
        }
    }
}

/// What an attempt uses of its delivery (which its caller keeps alive meanwhile).
pub(super) struct Job<'a, M> {
    pub(super) key: &'a MessageKey,
    pub(super) payload: &'a Payload,
    /// The decoded message, or why it does not decode.
    pub(super) message: std::result::Result<Arc<M>, String>,
    pub(super) deliver_time: Option<std::time::SystemTime>,
    pub(super) lease: LeaseHandle,
    /// Ordered queues: whether it may run without ordering reads.
    pub(super) clearance: Clearance,
}

impl<'a, M: QueueMessage> Job<'a, M> {
    pub(super) fn of(delivery: &'a Delivery<M>, clearance: Clearance) -> Self {
        let message = delivery
            .shared_message()
            .ok_or_else(|| match delivery.message() {
                Err(error) => telemetry::ErrorChain(error).to_string(),
                Ok(_) => "undecodable payload".to_owned(),
            });
        Self {
            key: delivery.key(),
            payload: delivery.payload(),
            message,
            deliver_time: delivery.deliver_time(),
            lease: delivery.lease_handle(),
            clearance,
        }
    }
}

/// One message, from the attempt count to ack, release or dead letter.
pub(super) async fn process<M: QueueMessage, S: Store<M>>(
    shared: Arc<Shared<M>>,
    store: Arc<S>,
    delivery: Delivery<M>,
    count: Option<Prefetched>,
    clearance: Clearance,
    _slot: OwnedSemaphorePermit,
    abort: CancellationToken,
) {
    let counters = &shared.counters;
    let running = counters.running.fetch_add(1, Ordering::SeqCst) + 1;
    counters.max_running.fetch_max(running, Ordering::SeqCst);
    let span = tracing::info_span!(
        "spanner_queues.process",
        queue = %M::QUEUE,
        key = %delivery.key().short(),
        attempt = tracing::field::Empty,
        lease = delivery.lease_label(),
    );
    let job = Job::of(&delivery, clearance);
    Box::pin(attempt_message(
        &Env::of(&shared),
        &*store,
        &job,
        count,
        &abort,
    ))
    .instrument(span)
    .await;
    // The delivery (its lease and its receiver slot) lives until the attempt has ended.
    drop(job);
    drop(delivery);
    counters.running.fetch_sub(1, Ordering::SeqCst);
}

/// One attempt at `job`, on `store`.
pub(super) async fn attempt_message<M: QueueMessage, S: Store<M>>(
    env: &Env<'_, M>,
    store: &S,
    job: &Job<'_, M>,
    count: Option<Prefetched>,
    abort: &CancellationToken,
) {
    let config = env.config;
    let message = match &job.message {
        Ok(message) => Arc::clone(message),
        Err(text) => {
            tracing::warn!(error = %text, "message does not decode; dead-lettering");
            Box::pin(dead_letter(env, store, job, None, text, true)).await;
            return;
        }
    };
    let lease = &job.lease;
    let external = env.handler.is_external();
    if M::ORDERED && external && job.clearance == Clearance::Check {
        // An external handler's ordering check comes before its attempt is recorded; a
        // transactional handler's is in its own transaction. A message cleared already (the
        // usual case) needs neither.
        match store
            .wait_if_blocked(job.key, job.payload, &config.ordering)
            .await
        {
            Ok(false) => {}
            Ok(true) => {
                note_waiting::<M>(env.counters);
                return;
            }
            Err(error) => {
                tracing::warn!(
                    error = %telemetry::ErrorChain(&error),
                    "could not check the ordering key; the message is delivered again"
                );
                return;
            }
        }
    }
    // External handlers write the attempt's row before they run, so that a crash or a lost
    // lease counts; transactional attempts only read the count: a failure is recorded with the
    // release, a success deletes the rows with the ack, and a crash applied nothing.
    let started = Box::pin(start(store, job.key, lease, abort, external, count)).await;
    let counted = match started {
        Start::Counted(counted) => counted,
        Start::Shutdown => {
            Box::pin(release_job_unstarted(env, store, job)).await;
            return;
        }
        Start::GaveUp => return,
        Start::Poison(text) => {
            // The attempt rows may be what fails: leave them alone.
            Box::pin(dead_letter(env, store, job, Some(1), &text, false)).await;
            return;
        }
    };
    let attempt = counted.number;
    let previous_error = counted.previous_error.clone();
    tracing::Span::current().record("attempt", attempt);
    if exhausted_before_start(attempt, config.max_attempts) {
        let text = format!(
            "gave up after {} attempts; last error: {}",
            attempt - 1,
            previous_error
                .as_deref()
                .unwrap_or("none recorded (crash or lost lease)")
        );
        Box::pin(dead_letter(env, store, job, Some(attempt - 1), &text, true)).await;
        return;
    }
    bump(&env.counters.started);
    let ctx = HandlerContext(Arc::new(ContextInner {
        queue: M::QUEUE,
        key: job.key.clone(),
        sequence: crate::ordering::Sequence::of::<M>(job.key),
        attempt,
        max_attempts: config.max_attempts,
        previous_error: previous_error.clone(),
        deliver_time: job.deliver_time,
        lease: lease.clone(),
    }));

    let started = Instant::now();
    let work =
        AssertUnwindSafe(Box::pin(run_handler(env, store, job, message, ctx))).catch_unwind();
    // A lost lease stops an external handler (its ack comes after it). A transactional attempt
    // runs on: its ack is in its own transaction, so Spanner decides (the commit fails with
    // `AlreadyAcked` when another consumer acked first), and stopping it could drop a commit in
    // flight, whose own ack is what makes the renewal find no lease.
    let lease_lost = async {
        if external {
            lease.wait_lost().await;
        } else {
            std::future::pending::<()>().await;
        }
    };
    let step = tokio::select! {
        biased;
        result = work => match result {
            Ok(step) => step,
            Err(panic) => Step::Failed(Failure::panic(&*panic)),
        },
        () = lease_lost => Step::LeaseLost,
        () = abort.cancelled() => Step::Shutdown,
        () = tokio::time::sleep(config.handler_timeout) => {
            Step::Failed(Failure::timeout(config.handler_timeout))
        }
    };
    metrics::histogram!(telemetry::HANDLER_SECONDS, "queue" => M::QUEUE.as_str().to_owned())
        .record(started.elapsed().as_secs_f64());

    let mut action = decide(step, attempt, config.max_attempts);
    if let Action::Ack = action {
        let step = Box::pin(ack_after_success(store, job.key)).await;
        action = decide(step, attempt, config.max_attempts);
    }
    Box::pin(act(env, store, job, &counted, action)).await;
}

/// Whether a message already had its last attempt before this one could start (crashes and
/// lost leases count): then it goes to the dead-letter table without running the handler.
pub(super) fn exhausted_before_start(attempt: u32, max_attempts: u32) -> bool {
    attempt > max_attempts
}

/// What the worker does with a message once an attempt ended.
#[derive(Debug)]
pub(super) enum Action {
    /// The external handler succeeded: ack the message now (and decide again).
    Ack,
    /// Acked with its effects: done.
    Acked,
    /// Another consumer acked it first: done.
    AlreadyAcked,
    /// The commit's outcome is unknown: if it was not applied, the lease lapses and Spanner
    /// delivers the message again.
    OutcomeUnknown,
    /// The lease was lost: the handler was stopped, and Spanner delivers the message again.
    LeaseLost,
    /// Shutdown interrupted the attempt: release the message now, and do not count the attempt.
    ReleaseUncounted,
    /// Ordered queue: released to wait for an earlier message of its ordering key: done.
    Waiting,
    /// Release the message for a retry, recording the failure: after this delay, or after the
    /// redelivery policy's when `None`.
    Retry(Failure, Option<Duration>),
    /// Move the message to the dead-letter table.
    DeadLetter(Failure),
}

/// The per-message decision: a pure function of how the attempt ended, its number and the
/// worker's `max_attempts`.
pub(super) fn decide(step: Step, attempt: u32, max_attempts: u32) -> Action {
    match step {
        Step::Succeeded => Action::Ack,
        Step::Acked => Action::Acked,
        Step::AlreadyAcked => Action::AlreadyAcked,
        Step::Unknown => Action::OutcomeUnknown,
        Step::LeaseLost => Action::LeaseLost,
        Step::Shutdown => Action::ReleaseUncounted,
        Step::Waiting => Action::Waiting,
        Step::Failed(failure) => match failure.kind {
            HandlerErrorKind::DeadLetter => Action::DeadLetter(failure),
            _ if attempt >= max_attempts => Action::DeadLetter(failure),
            HandlerErrorKind::RetryAfter(delay) => Action::Retry(failure, Some(delay)),
            _ => Action::Retry(failure, None),
        },
    }
}

/// Carries out `action`, with its counters, metrics and logs.
pub(super) async fn act<M: QueueMessage, S: Store<M>>(
    env: &Env<'_, M>,
    store: &S,
    job: &Job<'_, M>,
    counted: &tables::Attempt,
    action: Action,
) {
    let counters = env.counters;
    match action {
        Action::Ack => {
            unreachable!("an ack is carried out, and its outcome decided, before acting")
        }
        Action::Acked => {
            bump(&counters.acked);
            count_outcome::<M>("acked");
        }
        Action::AlreadyAcked => {
            bump(&counters.already_acked);
            count_outcome::<M>("already_acked");
            tracing::info!("message already acked by another consumer");
        }
        Action::OutcomeUnknown => {
            bump(&counters.outcome_unknown);
            count_outcome::<M>("outcome_unknown");
            tracing::warn!(
                "commit outcome unknown; if it was not applied, the message is delivered again"
            );
        }
        Action::LeaseLost => {
            bump(&counters.lease_lost);
            count_outcome::<M>("lease_lost");
            metrics::counter!(
                telemetry::HANDLER_FAILURES,
                "queue" => M::QUEUE.as_str().to_owned(),
                "reason" => "lease_lost"
            )
            .increment(1);
            tracing::warn!("lease lost; handler stopped, the message will be delivered again");
        }
        Action::ReleaseUncounted => {
            Box::pin(release_interrupted(env, store, job, counted)).await;
        }
        Action::Waiting => {
            // Not an attempt after all: the handler did not run.
            counters.started.fetch_sub(1, Ordering::Relaxed);
            note_waiting::<M>(counters);
        }
        Action::Retry(failure, after) => {
            count_failure::<M>(counters, &failure);
            let delay = after.map_or_else(
                || env.config.redelivery.delay(counted.number),
                super::policy::capped,
            );
            tracing::info!(error = %failure.text, reason = failure.reason.as_str(), retry_in = ?delay, "attempt failed; releasing for a retry");
            let rows = AttemptRows::RecordFailure {
                attempt: counted.clone(),
                error: failure.text,
            };
            let result = store.release(job.key, job.payload, delay, rows).await;
            settle_release::<M>(counters, result, "retried", &counters.retried);
        }
        Action::DeadLetter(failure) => {
            count_failure::<M>(counters, &failure);
            tracing::warn!(error = %failure.text, reason = failure.reason.as_str(), "attempt failed; dead-lettering");
            dead_letter(env, store, job, Some(counted.number), &failure.text, true).await;
        }
    }
}

pub(super) fn count_failure<M: QueueMessage>(counters: &Counters, failure: &Failure) {
    match failure.reason {
        Reason::Error => bump(&counters.handler_errors),
        Reason::Panic => bump(&counters.panics),
        Reason::Timeout => bump(&counters.timeouts),
    }
    metrics::counter!(
        telemetry::HANDLER_FAILURES,
        "queue" => M::QUEUE.as_str().to_owned(),
        "reason" => failure.reason.as_str()
    )
    .increment(1);
}

pub(super) enum Start {
    Counted(tables::Attempt),
    /// Shutdown began before the attempt was counted.
    Shutdown,
    /// Counting failed for a transient reason, or the lease was lost: the lease lapses and
    /// Spanner delivers it again.
    GaveUp,
    /// Counting failed for a permanent reason (retrying would fail the same way): the message
    /// is poison and goes to the dead-letter table with this reason.
    Poison(String),
}

/// Counts the attempt (writing its row if `write`), retrying briefly if that fails. A count
/// read ahead (`prefetched`) is used if it succeeded; it is read again otherwise.
pub(super) async fn start<M: QueueMessage, S: Store<M>>(
    store: &S,
    key: &MessageKey,
    lease: &LeaseHandle,
    abort: &CancellationToken,
    write: bool,
    prefetched: Option<Prefetched>,
) -> Start {
    if let Some(answer) = prefetched {
        let answer = tokio::select! {
            biased;
            () = abort.cancelled() => return Start::Shutdown,
            () = lease.wait_lost() => return Start::GaveUp,
            answer = answer => answer,
        };
        match answer {
            Ok(Ok(mut counted)) => {
                // The attempt starts now, not when its count was read.
                counted.started_at = std::time::SystemTime::now();
                return Start::Counted(counted);
            }
            Ok(Err(error)) => tracing::debug!(
                error = %telemetry::ErrorChain(&error),
                "reading the attempt count ahead failed; reading it again"
            ),
            Err(_) => {}
        }
    }
    let mut backoff = backon::ExponentialBuilder::default()
        .with_jitter()
        .with_min_delay(Duration::from_millis(50))
        .with_max_delay(Duration::from_secs(2))
        .with_max_times(5)
        .build();
    loop {
        let result = tokio::select! {
            biased;
            () = abort.cancelled() => return Start::Shutdown,
            () = lease.wait_lost() => return Start::GaveUp,
            result = started(store, key, write) => match result {
                Some(result) => result,
                None => return Start::GaveUp,
            },
        };
        match result {
            Ok(started) => return Start::Counted(started),
            Err(error) if error.classification() == Classification::Permanent => {
                let text = format!(
                    "cannot count the attempt: {}",
                    telemetry::ErrorChain(&error)
                );
                tracing::warn!(error = %text, "a permanent error; dead-lettering the message");
                return Start::Poison(text);
            }
            Err(error) => match backoff.next() {
                Some(delay) => {
                    tracing::debug!(error = %telemetry::ErrorChain(&error), "counting the attempt failed; retrying");
                    tokio::time::sleep(delay).await;
                }
                None => {
                    tracing::warn!(
                        error = %telemetry::ErrorChain(&error),
                        "cannot count the attempt; leaving the message to be delivered again"
                    );
                    return Start::GaveUp;
                }
            },
        }
    }
}

/// Counts an attempt at `key` in the next round of starts; `None` if the store takes no more.
///
/// # Cancellation
/// Dropping the future leaves the request in its round: a written attempt row stays and
/// counts (as a crash would).
async fn started<M: QueueMessage, S: Store<M>>(
    store: &S,
    key: &MessageKey,
    write: bool,
) -> Option<Result<tables::Attempt>> {
    store.request_start(key, write)?.await.ok()
}

/// Runs the handler (with its transaction and the ack, for the transactional style).
async fn run_handler<M: QueueMessage, S: Store<M>>(
    env: &Env<'_, M>,
    store: &S,
    job: &Job<'_, M>,
    message: Arc<M>,
    ctx: HandlerContext,
) -> Step {
    let key = job.key;
    let handler = match env.handler {
        Handler::External(handler) => {
            return match handler(message, ctx).await {
                Ok(()) => Step::Succeeded,
                Err(error) => Step::Failed(Failure::handler(error)),
            };
        }
        Handler::Transactional(handler) => handler,
        Handler::TransactionalBatch(_) | Handler::ExternalBatch(_) => {
            unreachable!("batch handlers run in `batch_attempt`")
        }
    };
    let result = if M::ORDERED {
        // Unless the message is cleared, the transaction first looks for an earlier message of
        // the ordering key, and releases this one instead of running the handler if there is
        // one.
        store
            .run_transactional_ordered(
                handler,
                key,
                message,
                ctx,
                job.payload,
                &env.config.ordering,
                job.clearance,
            )
            .await
    } else {
        store
            .run_transactional(handler, key, message, ctx)
            .await
            .map(|()| true)
    };
    match result {
        Ok(true) => Step::Acked,
        Ok(false) => Step::Waiting,
        Err(error) => match error.downcast_application::<HandlerFailed>() {
            Ok(HandlerFailed(handler_error)) => Step::Failed(Failure::handler(handler_error)),
            Err(error) => classify_commit_error(error, key),
        },
    }
}

pub(super) fn note_waiting<M: QueueMessage>(counters: &Counters) {
    bump(&counters.waited);
    count_outcome::<M>("waited");
    tracing::debug!("an earlier message of the ordering key is left; released to wait");
}

fn classify_commit_error(error: Error, key: &MessageKey) -> Step {
    match &error {
        Error::AlreadyAcked { key: acked, .. } if acked == key => Step::AlreadyAcked,
        Error::OutcomeUnknown(_) => Step::Unknown,
        _ => Step::Failed(Failure::error(&error)),
    }
}

/// External style: acks after the handler succeeded, with the acks of other handlers in one
/// transaction; if that group fails, on its own, retrying a failed ack a few times.
pub(super) async fn ack_after_success<M: QueueMessage, S: Store<M>>(
    store: &S,
    key: &MessageKey,
) -> Step {
    match store.ack_grouped(key).await {
        AckOutcome::Acked => return Step::Acked,
        AckOutcome::AlreadyAcked => return Step::AlreadyAcked,
        AckOutcome::Unknown => return Step::Unknown,
        AckOutcome::Failed => {}
    }
    let mut last = None;
    for attempt in 0..3_u32 {
        if attempt > 0 {
            tokio::time::sleep(Duration::from_millis(100 << attempt)).await;
        }
        match store.ack(key).await {
            Ok(()) => return Step::Acked,
            Err(error) => match classify_commit_error(error, key) {
                Step::Failed(failure) => last = Some(failure.text),
                settled => return settled,
            },
        }
    }
    tracing::warn!(
        error = last.as_deref().unwrap_or(""),
        "could not ack after the handler succeeded; the message will be delivered again"
    );
    Step::Unknown
}

pub(super) fn settle_release<M: QueueMessage>(
    counters: &Counters,
    result: Result<()>,
    outcome: &'static str,
    counter: &AtomicU64,
) {
    match result {
        Ok(()) => {
            bump(counter);
            count_outcome::<M>(outcome);
            if outcome == "retried" {
                metrics::counter!(telemetry::RETRIED, "queue" => M::QUEUE.as_str().to_owned())
                    .increment(1);
            }
        }
        Err(Error::AlreadyAcked { .. }) => {
            bump(&counters.already_acked);
            count_outcome::<M>("already_acked");
        }
        Err(error) => tracing::warn!(
            error = %telemetry::ErrorChain(&error),
            "release failed; the message is delivered again when its lease lapses"
        ),
    }
}

/// Shutdown stopped a running attempt: release now, and do not count the attempt.
async fn release_interrupted<M: QueueMessage, S: Store<M>>(
    env: &Env<'_, M>,
    store: &S,
    job: &Job<'_, M>,
    attempt: &tables::Attempt,
) {
    let rows = AttemptRows::Drop(attempt.clone());
    let result = store
        .release(job.key, job.payload, Duration::ZERO, rows)
        .await;
    let counters = env.counters;
    settle_release::<M>(counters, result, "released", &counters.released_on_shutdown);
}

/// Shutdown found deliveries that never started: releases them now, in one transaction (the
/// deliveries live until it is done). A delivery whose lease is lost is left alone: Spanner
/// delivers it again anyway.
pub(super) async fn release_unstarted<M: QueueMessage, S: Store<M>>(
    shared: &Shared<M>,
    store: &S,
    deliveries: Vec<Delivery<M>>,
) {
    let releases: Vec<Release> = deliveries
        .iter()
        .filter(|delivery| !delivery.is_lease_lost())
        .map(|delivery| Release {
            key: delivery.key().clone(),
            payload: delivery.payload().clone(),
            at: crate::queue::DeliverAt::Now,
        })
        .collect();
    if releases.is_empty() {
        return;
    }
    let counters = &shared.counters;
    match store.release_waiting(releases).await {
        Ok(released) => {
            for _ in 0..released {
                settle_release::<M>(counters, Ok(()), "released", &counters.released_on_shutdown);
            }
        }
        Err(error) => settle_release::<M>(
            counters,
            Err(error),
            "released",
            &counters.released_on_shutdown,
        ),
    }
    drop(deliveries);
}

pub(super) async fn release_job_unstarted<M: QueueMessage, S: Store<M>>(
    env: &Env<'_, M>,
    store: &S,
    job: &Job<'_, M>,
) {
    let result = store
        .release(job.key, job.payload, Duration::ZERO, AttemptRows::Keep)
        .await;
    let counters = env.counters;
    settle_release::<M>(counters, result, "released", &counters.released_on_shutdown);
}

/// Moves a message to the dead-letter table (deleting its attempt rows if `forget_attempts`).
/// If that fails for a permanent reason, the message is parked: released with the redelivery
/// policy's longest delay, never dropped, with an ERROR line and
/// [`DEAD_LETTER_FAILED`](telemetry::DEAD_LETTER_FAILED).
pub(super) async fn dead_letter<M: QueueMessage, S: Store<M>>(
    env: &Env<'_, M>,
    store: &S,
    job: &Job<'_, M>,
    attempts: Option<u32>,
    error: &str,
    forget_attempts: bool,
) {
    let letter = tables::Letter {
        key: job.key,
        payload: job.payload,
        attempts,
        error,
        forget_attempts,
    };
    let counters = env.counters;
    match store.dead_letter(letter).await {
        Ok(()) => {
            metrics::counter!(telemetry::DEAD_LETTERED, "queue" => M::QUEUE.as_str().to_owned())
                .increment(1);
            settle_release::<M>(counters, Ok(()), "dead_lettered", &counters.dead_lettered);
        }
        Err(failed)
            if failed.classification() == Classification::Permanent
                && !matches!(failed, Error::AlreadyAcked { .. }) =>
        {
            Box::pin(park(env, store, job, &failed)).await;
        }
        Err(other) => {
            settle_release::<M>(
                counters,
                Err(other),
                "dead_lettered",
                &counters.dead_lettered,
            );
        }
    }
}

/// A message that cannot be dead-lettered (the table refuses it): released with the longest
/// redelivery delay, so it neither loops nor is lost; each return tries the dead-letter table
/// again.
async fn park<M: QueueMessage, S: Store<M>>(
    env: &Env<'_, M>,
    store: &S,
    job: &Job<'_, M>,
    failed: &Error,
) {
    metrics::counter!(telemetry::DEAD_LETTER_FAILED, "queue" => M::QUEUE.as_str().to_owned())
        .increment(1);
    let delay = env.config.redelivery.max_delay();
    tracing::error!(
        error = %telemetry::ErrorChain(failed),
        payload_bytes = job.payload.as_bytes().len(),
        park_for = ?delay,
        "cannot move the message to the dead-letter table; parking it in the queue"
    );
    let result = store
        .release(job.key, job.payload, delay, AttemptRows::Keep)
        .await;
    let counters = env.counters;
    settle_release::<M>(counters, result, "parked", &counters.parked);
}

#[cfg(test)]
mod store_tests;

#[cfg(test)]
mod tests {
    use super::*;

    fn failed(kind: HandlerErrorKind) -> Step {
        Step::Failed(Failure {
            reason: Reason::Error,
            kind,
            text: "boom".into(),
        })
    }

    #[test]
    fn a_failure_is_retried_until_the_last_attempt_then_dead_lettered() {
        let retry = HandlerErrorKind::Retry;
        assert!(matches!(
            decide(failed(retry), 1, 3),
            Action::Retry(_, None)
        ));
        assert!(matches!(
            decide(failed(retry), 2, 3),
            Action::Retry(_, None)
        ));
        assert!(matches!(decide(failed(retry), 3, 3), Action::DeadLetter(f) if f.text == "boom"));
        // An attempt past the last (a crash after the count): dead-lettered too.
        assert!(matches!(decide(failed(retry), 4, 3), Action::DeadLetter(_)));
        assert!(exhausted_before_start(4, 3));
        assert!(!exhausted_before_start(3, 3));
        // Panics and timeouts follow the same rule.
        let panic = Step::Failed(Failure::panic(&"boom"));
        assert!(matches!(decide(panic, 1, 3), Action::Retry(_, None)));
        let timeout = Step::Failed(Failure::timeout(Duration::from_secs(1)));
        assert!(matches!(decide(timeout, 3, 3), Action::DeadLetter(_)));
    }

    #[test]
    fn the_handler_chooses_the_delay_or_the_dead_letter() {
        let later = HandlerErrorKind::RetryAfter(Duration::from_secs(7));
        assert!(matches!(
            decide(failed(later), 1, 3),
            Action::Retry(_, Some(d)) if d == Duration::from_secs(7)
        ));
        // The last attempt wins over a requested delay.
        assert!(matches!(decide(failed(later), 3, 3), Action::DeadLetter(_)));
        let dead = HandlerErrorKind::DeadLetter;
        assert!(matches!(decide(failed(dead), 1, 10), Action::DeadLetter(_)));
    }

    #[test]
    fn shutdown_releases_without_counting_and_a_lost_lease_leaves_the_message_alone() {
        assert!(matches!(
            decide(Step::Shutdown, 1, 3),
            Action::ReleaseUncounted
        ));
        assert!(matches!(
            decide(Step::Shutdown, 3, 3),
            Action::ReleaseUncounted
        ));
        assert!(matches!(decide(Step::LeaseLost, 3, 3), Action::LeaseLost));
        assert!(matches!(
            decide(Step::Unknown, 3, 3),
            Action::OutcomeUnknown
        ));
    }

    #[test]
    fn success_acks_and_a_message_acked_elsewhere_is_done() {
        assert!(matches!(decide(Step::Succeeded, 1, 3), Action::Ack));
        assert!(matches!(decide(Step::Acked, 3, 3), Action::Acked));
        assert!(matches!(
            decide(Step::AlreadyAcked, 1, 3),
            Action::AlreadyAcked
        ));
    }

    #[test]
    fn panics_and_timeouts_describe_themselves() {
        let failure = Failure::panic(&"boom");
        assert_eq!(failure.reason, Reason::Panic);
        assert_eq!(failure.text, "handler panicked: boom");
        let failure = Failure::panic(&String::from("owned"));
        assert_eq!(failure.text, "handler panicked: owned");
        let failure = Failure::timeout(Duration::from_secs(2));
        assert_eq!(failure.reason, Reason::Timeout);
        assert!(failure.text.contains("2s"), "{}", failure.text);
    }
}
