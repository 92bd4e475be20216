//! The worker's store in Spanner: the queue and the worker's tables, in the transactions the
//! worker has always used.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::transaction::ReadWriteTransaction;

use crate::codec::Payload;
use crate::error::Result;
use crate::key::MessageKey;
use crate::message::QueueMessage;
use crate::queue::{DeliverAt, Queue};
use crate::receive::release_in;
use crate::transaction::TransactionSettings;

use super::super::batch::{AckOutcome, Batches};
use super::super::handler::{HandlerContext, to_runner_error};
use super::super::ordered::{self, Clearance, Floors, Gate, OrderingPolicy, Release};
use super::super::tables::{self, AttemptRows, Letter, buffer_rows, dead_letter_in};
use super::super::{TransactionalBatchFn, TransactionalFn};
use super::{AttemptsRead, BeginFn, Member, MemberEnd, Prefetched, Settle, SettleFn, Store};

/// The queue and the worker's tables in Spanner, for one run of a worker: the starts of
/// attempts and the acks of external handlers go through its group-commit tasks, which end when
/// it is dropped.
pub(in crate::worker) struct SpannerStore<M: QueueMessage> {
    db: DatabaseClient,
    queue: Queue<M>,
    settings: TransactionSettings,
    batches: Batches<M>,
    /// Ordered queues: below which sequence nothing of each ordering key is left (shared with
    /// the worker's holding).
    floors: Arc<Floors>,
}

impl<M: QueueMessage> SpannerStore<M> {
    /// A store whose transactions use `settings`; starts its group-commit tasks. Ordered
    /// queues: the store raises `floors` as it learns that earlier messages are gone.
    pub(in crate::worker) fn spawn(
        db: &DatabaseClient,
        queue: &Queue<M>,
        settings: &TransactionSettings,
        floors: Arc<Floors>,
    ) -> Self {
        Self {
            db: db.clone(),
            queue: queue.clone(),
            settings: settings.clone(),
            batches: Batches::spawn(db, queue, settings),
            floors,
        }
    }
}

impl<M: QueueMessage> Store<M> for SpannerStore<M> {
    fn request_start(&self, key: &MessageKey, write: bool) -> Option<Prefetched> {
        self.batches.request_start(key, write)
    }

    fn run_transactional(
        &self,
        handler: &Arc<TransactionalFn<M>>,
        key: &MessageKey,
        message: Arc<M>,
        ctx: HandlerContext,
    ) -> impl Future<Output = Result<()>> + Send {
        let (handler, queue, key) = (Arc::clone(handler), self.queue.clone(), key.clone());
        crate::transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx: ReadWriteTransaction| {
                transactional_attempt(
                    tx,
                    Arc::clone(&handler),
                    queue.clone(),
                    key.clone(),
                    Arc::clone(&message),
                    ctx.clone(),
                )
            })
    }

    fn run_transactional_ordered(
        &self,
        handler: &Arc<TransactionalFn<M>>,
        key: &MessageKey,
        message: Arc<M>,
        ctx: HandlerContext,
        payload: &Payload,
        policy: &OrderingPolicy,
        clearance: Clearance,
    ) -> impl Future<Output = Result<bool>> + Send {
        let (handler, queue, key) = (Arc::clone(handler), self.queue.clone(), key.clone());
        let (payload, policy) = (payload.clone(), policy.clone());
        let (floors, handled) = (Arc::clone(&self.floors), key.clone());
        let run = crate::transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx: ReadWriteTransaction| {
                let (handler, queue, key) = (Arc::clone(&handler), queue.clone(), key.clone());
                let (message, ctx) = (Arc::clone(&message), ctx.clone());
                let (payload, policy) = (payload.clone(), policy.clone());
                async move {
                    let settles = match clearance {
                        Clearance::Clear => true,
                        Clearance::Check => {
                            match ordered::check(&tx, &queue, &policy, &key).await? {
                                Gate::Wait(at) => {
                                    ordered::release_waiting(&tx, &queue, &key, payload, at)
                                        .await?;
                                    return Ok(None);
                                }
                                Gate::Open { settled } => settled,
                            }
                        }
                    };
                    transactional_attempt(tx, handler, queue, key, message, ctx).await?;
                    Ok(Some(settles))
                }
            });
        async move {
            let ran = run.await?;
            if ran == Some(true) {
                floors.settle(&handled);
                floors.acked(&handled);
            }
            Ok(ran.is_some())
        }
    }

    fn wait_if_blocked(
        &self,
        key: &MessageKey,
        payload: &Payload,
        policy: &OrderingPolicy,
    ) -> impl Future<Output = Result<bool>> + Send {
        let (queue, key) = (self.queue.clone(), key.clone());
        let (payload, policy) = (payload.clone(), policy.clone());
        let (floors, checked) = (Arc::clone(&self.floors), key.clone());
        let run = crate::transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx: ReadWriteTransaction| {
                let (queue, key) = (queue.clone(), key.clone());
                let (payload, policy) = (payload.clone(), policy.clone());
                async move {
                    match ordered::check(&tx, &queue, &policy, &key).await? {
                        Gate::Open { settled } => Ok(Some(settled)),
                        Gate::Wait(at) => {
                            ordered::release_waiting(&tx, &queue, &key, payload, at).await?;
                            Ok(None)
                        }
                    }
                }
            });
        async move {
            match run.await? {
                None => Ok(true),
                Some(settled) => {
                    if settled {
                        // Nothing earlier is left: its ack raises the floor past it.
                        floors.settle(&checked);
                    }
                    Ok(false)
                }
            }
        }
    }

    fn release_waiting(
        &self,
        releases: Vec<Release>,
    ) -> impl Future<Output = Result<usize>> + Send {
        let queue = self.queue.clone();
        let messages: Vec<(MessageKey, Payload, crate::queue::DeliverAt)> = releases
            .into_iter()
            .map(|r| (r.key, r.payload, r.at))
            .collect();
        crate::transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx: ReadWriteTransaction| {
                let (queue, messages) = (queue.clone(), messages.clone());
                async move { queue.release_many(&tx, messages).await }
            })
    }

    fn ack_grouped(&self, key: &MessageKey) -> impl Future<Output = AckOutcome> + Send {
        let acked = self.batches.ack(key);
        let floors = M::ORDERED.then(|| (Arc::clone(&self.floors), key.clone()));
        async move {
            let outcome = acked.await;
            if let (AckOutcome::Acked, Some((floors, key))) = (&outcome, floors) {
                floors.acked(&key);
            }
            outcome
        }
    }

    fn ack(&self, key: &MessageKey) -> impl Future<Output = Result<()>> + Send {
        let (queue, key) = (self.queue.clone(), key.clone());
        let floors = M::ORDERED.then(|| (Arc::clone(&self.floors), key.clone()));
        let acked = crate::transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx: ReadWriteTransaction| {
                let (queue, key) = (queue.clone(), key.clone());
                async move {
                    queue.ack_key(&tx, key.clone()).await?;
                    buffer_rows(&tx, queue.dialect(), &M::QUEUE, &key, &AttemptRows::Forget)?;
                    Ok(())
                }
            });
        async move {
            acked.await?;
            if let Some((floors, key)) = floors {
                floors.acked(&key);
            }
            Ok(())
        }
    }

    fn release(
        &self,
        key: &MessageKey,
        payload: &Payload,
        delay: Duration,
        rows: AttemptRows,
    ) -> impl Future<Output = Result<()>> + Send {
        let (queue, key, payload) = (self.queue.clone(), key.clone(), payload.clone());
        crate::transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx: ReadWriteTransaction| {
                let (queue, key, payload, rows) =
                    (queue.clone(), key.clone(), payload.clone(), rows.clone());
                async move {
                    release_in(&queue, &tx, key.clone(), payload, delay).await?;
                    buffer_rows(&tx, queue.dialect(), &M::QUEUE, &key, &rows)?;
                    Ok(())
                }
            })
    }

    fn dead_letter(&self, letter: Letter<'_>) -> impl Future<Output = Result<()>> + Send {
        tables::dead_letter(&self.db, &self.settings, &self.queue, letter)
    }

    fn run_transactional_batch(
        &self,
        handler: &Arc<TransactionalBatchFn<M>>,
        members: Arc<[Member]>,
        begin: Arc<BeginFn<M>>,
        settle: Arc<SettleFn>,
        ordering: Option<&OrderingPolicy>,
        read: AttemptsRead,
    ) -> impl Future<Output = Result<Vec<MemberEnd>>> + Send {
        let (handler, queue) = (Arc::clone(handler), self.queue.clone());
        let policy = ordering.cloned();
        let floors = Arc::clone(&self.floors);
        let ran = Arc::clone(&members);
        let run = crate::transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx: ReadWriteTransaction| {
                let (handler, queue, members) =
                    (Arc::clone(&handler), queue.clone(), Arc::clone(&ran));
                let (begin, settle, read) =
                    (Arc::clone(&begin), Arc::clone(&settle), Arc::clone(&read));
                let policy = policy.clone();
                async move {
                    let keys: Vec<MessageKey> = members.iter().map(|m| m.key.clone()).collect();
                    // The attempts first: the handler needs them, and this read begins the
                    // transaction. The acks' assertion that every message is there then runs
                    // beside the handler (its answer is needed only before the commit), so a
                    // batch costs one round trip more than a hand-written consumer's, not two.
                    let attempts =
                        tables::attempts_in(&tx, queue.dialect(), &M::QUEUE, &keys).await?;
                    *crate::util::lock(&read) = Some(attempts.clone());
                    let (present, ran) = futures::future::join(
                        queue.check_present(&tx, &keys),
                        run_batch_body(
                            &tx,
                            &queue,
                            &members,
                            &attempts,
                            BodyFns {
                                handler: &*handler,
                                begin: &*begin,
                                settle: &*settle,
                                policy: policy.as_ref(),
                            },
                        ),
                    )
                    .await;
                    // A message that is gone wins over the handler's own outcome: the batch
                    // runs again without it.
                    present?;
                    let (ends, settles, decided) = ran?;
                    // The acks' presence is asserted; a message with no attempt rows (read in
                    // this transaction, whose locks keep the range empty) has none to forget.
                    let rows: Vec<bool> = attempts.iter().map(|a| a.number > 1).collect();
                    apply_settles(&tx, &queue, &members, &decided, Some(&rows)).await?;
                    Ok((ends, settles))
                }
            });
        async move {
            let (ends, settles) = run.await?;
            let mut out = Vec::with_capacity(ends.len());
            for (i, end) in ends.into_iter().enumerate() {
                // Every message is decided: released to wait, or settled.
                let end = end.unwrap_or(MemberEnd::Waiting);
                if M::ORDERED && matches!(end, MemberEnd::Settled(Settle::Ack)) {
                    // In the batch's order: a message after an earlier one of its key in the
                    // batch finds the floor raised past that one.
                    let key = &members[i].key;
                    if members[i].check && settles[i] {
                        floors.settle(key);
                    }
                    floors.acked(key);
                }
                out.push(end);
            }
            Ok(out)
        }
    }

    fn settle_batch(
        &self,
        members: Arc<[Member]>,
        settles: Vec<Settle>,
    ) -> impl Future<Output = Result<()>> + Send {
        let queue = self.queue.clone();
        let decided: Arc<[(usize, Settle)]> = settles.into_iter().enumerate().collect();
        let (ran, applied) = (Arc::clone(&members), Arc::clone(&decided));
        let run = crate::transaction::builder(&self.db)
            .with_settings(self.settings.clone())
            .run(move |tx: ReadWriteTransaction| {
                let (queue, members, decided) =
                    (queue.clone(), Arc::clone(&ran), Arc::clone(&applied));
                async move { apply_settles(&tx, &queue, &members, &decided, None).await }
            });
        let floors = M::ORDERED.then(|| Arc::clone(&self.floors));
        async move {
            run.await?;
            if let Some(floors) = floors {
                for (i, settle) in decided.iter() {
                    if matches!(settle, Settle::Ack) {
                        floors.acked(&members[*i].key);
                    }
                }
            }
            Ok(())
        }
    }
}

/// What a transactional batch's body decided: how each message ended (by index; `None` until
/// decided), whether nothing earlier of its key is left (ordered queues), and what the commit
/// applies.
type BodyEnds = (Vec<Option<MemberEnd>>, Vec<bool>, Vec<(usize, Settle)>);

/// What a transactional batch's body runs: the handler, what starts and settles its messages,
/// and the ordering policy (ordered queues).
struct BodyFns<'a, M> {
    handler: &'a TransactionalBatchFn<M>,
    begin: &'a BeginFn<M>,
    settle: &'a SettleFn,
    policy: Option<&'a OrderingPolicy>,
}

/// The part of a transactional batch's transaction between reading its attempts and applying
/// its settles: the ordering checks (ordered queues), the handler, and what each message's
/// outcome means. It runs beside the check that every message is still there.
async fn run_batch_body<M: QueueMessage>(
    tx: &ReadWriteTransaction,
    queue: &Queue<M>,
    members: &[Member],
    attempts: &[tables::Attempt],
    fns: BodyFns<'_, M>,
) -> Result<BodyEnds> {
    let BodyFns {
        handler,
        begin,
        settle,
        policy,
    } = fns;
    let n = members.len();
    let mut ends: Vec<Option<MemberEnd>> = vec![None; n];
    // Ordered queues: whether nothing earlier of the key is left at all.
    let mut settles = vec![false; n];
    let mut open = Vec::with_capacity(n);
    match policy {
        None => open.extend(0..n),
        Some(policy) => {
            // As for single messages: only a message a look left to its transaction is
            // checked; the others are clear (nothing earlier of the key is left, or the one
            // before it is in this batch).
            for (i, member) in members.iter().enumerate() {
                if !member.check {
                    open.push(i);
                    continue;
                }
                match ordered::check(tx, queue, policy, &member.key).await? {
                    Gate::Open { settled } => {
                        settles[i] = settled;
                        open.push(i);
                    }
                    Gate::Wait(at) => {
                        ordered::release_waiting(
                            tx,
                            queue,
                            &member.key,
                            member.payload.clone(),
                            at,
                        )
                        .await?;
                        ends[i] = Some(MemberEnd::Waiting);
                    }
                }
            }
        }
    }
    let begun = begin(&open, attempts);
    if let Some(policy) = policy {
        let at = DeliverAt::After(policy.recheck_delay());
        for &i in &begun.held {
            let member = &members[i];
            ordered::release_waiting(tx, queue, &member.key, member.payload.clone(), at).await?;
            ends[i] = Some(MemberEnd::Waiting);
        }
    }
    let mut decided = Vec::with_capacity(n);
    for (i, settle) in begun.skipped {
        ends[i] = Some(MemberEnd::Skipped(settle.clone()));
        decided.push((i, settle));
    }
    if !begun.run.is_empty() {
        let outcome = match handler(tx.clone(), begun.batch).await {
            Ok(outcome) => outcome,
            Err(error) => return Err(to_runner_error(error)),
        };
        let failures = by_member(&begun.run, outcome.into_failures());
        for (i, settle) in settle(&begun.run, failures, attempts)? {
            ends[i] = Some(MemberEnd::Settled(settle.clone()));
            decided.push((i, settle));
        }
    }
    Ok((ends, settles, decided))
}

/// A batch handler's failures by index among its batch, as indices among the members (`open`
/// maps the one to the other). An index outside the batch is a handler bug: ignored, with a
/// warning.
fn by_member(
    open: &[usize],
    failures: Vec<(usize, super::super::HandlerError)>,
) -> Vec<(usize, super::super::HandlerError)> {
    failures
        .into_iter()
        .filter_map(|(i, error)| match open.get(i) {
            Some(&member) => Some((member, error)),
            None => {
                tracing::warn!(
                    index = i,
                    batch = open.len(),
                    "a batch handler failed a message outside its batch; ignored"
                );
                None
            }
        })
        .collect()
}

/// Carries out, inside `tx`, what was decided for the messages of a batch: the acks first, in
/// one read and one delete, their attempt rows forgotten, then the releases and dead letters,
/// one by one (the rare case). With `checked` (by index: whether the message has attempt rows),
/// the acks' presence was asserted earlier in `tx` and their attempt rows read there.
async fn apply_settles<M: QueueMessage>(
    tx: &ReadWriteTransaction,
    queue: &Queue<M>,
    members: &[Member],
    decided: &[(usize, Settle)],
    checked: Option<&[bool]>,
) -> Result<()> {
    let acked: Vec<usize> = decided
        .iter()
        .filter(|(_, settle)| matches!(settle, Settle::Ack))
        .map(|(i, _)| *i)
        .collect();
    let acks: Vec<MessageKey> = acked.iter().map(|&i| members[i].key.clone()).collect();
    match checked {
        Some(_) => queue.buffer_acks(tx, &acks)?,
        None => queue.ack_keys(tx, &acks).await?,
    }
    for &i in &acked {
        if checked.is_none_or(|rows| rows[i]) {
            buffer_rows(
                tx,
                queue.dialect(),
                &M::QUEUE,
                &members[i].key,
                &AttemptRows::Forget,
            )?;
        }
    }
    for (i, settle) in decided {
        let member = &members[*i];
        match settle {
            Settle::Ack => {}
            Settle::Release { delay, rows } => {
                release_in(
                    queue,
                    tx,
                    member.key.clone(),
                    member.payload.clone(),
                    *delay,
                )
                .await?;
                buffer_rows(tx, queue.dialect(), &M::QUEUE, &member.key, rows)?;
            }
            Settle::DeadLetter(letter) => dead_letter_in(tx, queue, letter).await?,
        }
    }
    Ok(())
}

/// One run of a transactional handler, with the ack, inside `tx`.
async fn transactional_attempt<M: QueueMessage>(
    tx: ReadWriteTransaction,
    handler: Arc<TransactionalFn<M>>,
    queue: Queue<M>,
    key: MessageKey,
    message: Arc<M>,
    ctx: HandlerContext,
) -> Result<()> {
    if let Err(error) = handler(tx.clone(), message, ctx).await {
        return Err(to_runner_error(error));
    }
    queue.ack_key(&tx, key.clone()).await?;
    buffer_rows(&tx, queue.dialect(), &M::QUEUE, &key, &AttemptRows::Forget)?;
    Ok(())
}
