//! Admission of read-write transactions, one at a time per database, in arrival order.
//!
//! The official emulator runs one read-write transaction per database at a time: a second one
//! displaces (aborts) the first. Clients retry `ABORTED` with a back-off, so the more clients
//! write concurrently, the fewer transactions commit. The front therefore holds a newcomer back
//! until the database's current read-write transaction ends (commit, rollback, abort), and admits
//! the waiting ones in the order they arrived. A waiting transaction waits; it is not aborted.
//!
//! An abandoned transaction (a client that began and then vanished) must not block the rest:
//! once the holder has been idle (no call of its transaction in flight) for the configured
//! wait, the first waiter takes the slot, the front rolls the old transaction back in the
//! backend (which would otherwise abort the newcomer while the old one holds locks) and answers
//! the old transaction's later calls with `ABORTED`.
//!
//! Reads (single-use, read-only and partitioned), `RECEIVE` and `RENEWLEASE` never pass through
//! here. Partitioned DML is not admitted either: it never commits, so it would hold the slot.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;
use tonic::Status;

use super::proto::spanner::{TransactionOptions, TransactionSelector, transaction_options};
use super::sync::lock;

/// How many displaced transaction ids are remembered (their later calls get `ABORTED`).
const REVOKED_REMEMBERED: usize = 64;

/// The read-write transaction slot of one database.
#[derive(Debug)]
pub(crate) struct Admission {
    /// How long a holder may stay idle while others wait; `None` disables admission.
    wait: Option<Duration>,
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    holder: Option<Holder>,
    /// Waiting transactions, in arrival order: their tickets and how to wake them. Only the
    /// first one can be admitted (or start the idle holder's clock), so a change of the slot
    /// wakes that one alone, not every waiter.
    waiting: VecDeque<(u64, Arc<Notify>)>,
    next_ticket: u64,
    /// Transactions whose slot was taken away after an idle wait, newest last.
    revoked: VecDeque<Vec<u8>>,
}

impl Inner {
    /// Wakes the first waiter, which is the only one a change of the slot concerns. A wake-up
    /// sent before it waits is kept for it, so none is lost.
    fn wake_first(&self) {
        if let Some((_, wake)) = self.waiting.front() {
            wake.notify_one();
        }
    }
}

#[derive(Debug)]
struct Holder {
    ticket: u64,
    /// The session the transaction runs in (to roll it back when it loses the slot).
    session: String,
    /// The backend's transaction id, once the begin call returned it.
    transaction: Option<Vec<u8>>,
    /// Calls of this transaction in flight: never displaced while one runs.
    busy: usize,
    last_active: Instant,
}

/// Whether a transaction selector or options begin a read-write transaction.
pub(crate) fn begins_read_write(selector: Option<&TransactionSelector>) -> bool {
    use super::proto::spanner::transaction_selector::Selector;
    match selector.and_then(|s| s.selector.as_ref()) {
        Some(Selector::Begin(options)) => is_read_write(options),
        _ => false,
    }
}

/// Whether transaction options are read-write (not read-only, not partitioned DML).
pub(crate) fn is_read_write(options: &TransactionOptions) -> bool {
    matches!(options.mode, Some(transaction_options::Mode::ReadWrite(_)))
}

/// The id of an existing transaction a selector names, if any.
pub(crate) fn selected_id(selector: Option<&TransactionSelector>) -> Option<&[u8]> {
    use super::proto::spanner::transaction_selector::Selector;
    match selector.and_then(|s| s.selector.as_ref()) {
        Some(Selector::Id(id)) => Some(&id[..]),
        _ => None,
    }
}

impl Admission {
    pub(crate) fn new(wait: Option<Duration>) -> Self {
        Self {
            wait,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Whether admission is on and `transaction` (a read-write transaction, then) holds the
    /// slot.
    pub(crate) fn holds(&self, transaction: &[u8]) -> bool {
        self.wait.is_some()
            && lock(&self.inner)
                .holder
                .as_ref()
                .is_some_and(|h| h.transaction.as_deref() == Some(transaction))
    }

    /// Whether read-write transactions are admitted one at a time.
    pub(crate) fn enabled(&self) -> bool {
        self.wait.is_some()
    }

    /// Waits for the slot, in arrival order. The returned permit holds it: bind it to the
    /// transaction id the backend returns, or drop it to give the slot to the next waiter.
    ///
    /// # Cancellation
    /// Dropping the future leaves the queue; nothing is held.
    pub(crate) async fn acquire(self: &Arc<Self>, session: &str) -> Permit {
        self.acquire_with(session, true).await
    }

    /// [`Admission::acquire`] for a read of the front's own: it never takes the slot from an
    /// idle holder (its caller gives up waiting instead, see `receive::FrontRead`).
    pub(crate) async fn acquire_patiently(self: &Arc<Self>, session: &str) -> Permit {
        self.acquire_with(session, false).await
    }

    async fn acquire_with(self: &Arc<Self>, session: &str, displace: bool) -> Permit {
        let Some(wait) = self.wait else {
            return Permit {
                admission: None,
                ticket: 0,
                displaced: None,
            };
        };
        let wake = Arc::new(Notify::new());
        let ticket = {
            let mut inner = lock(&self.inner);
            let ticket = inner.next_ticket;
            inner.next_ticket += 1;
            inner.waiting.push_back((ticket, Arc::clone(&wake)));
            ticket
        };
        let mut queued = Queued {
            admission: self,
            ticket,
            admitted: false,
        };
        loop {
            let deadline = {
                let mut inner = lock(&self.inner);
                let now = Instant::now();
                let first = inner.waiting.front().map(|w| w.0) == Some(ticket);
                let deadline = match &inner.holder {
                    _ if !first => None,
                    None => Some(now),
                    Some(holder) if holder.busy > 0 || !displace => None,
                    Some(holder) => Some(holder.last_active + wait),
                };
                if deadline.is_some_and(|at| at <= now) {
                    let mut displaced = None;
                    if let Some(old) = inner.holder.take() {
                        tracing::warn!(
                            idle_ms = now.duration_since(old.last_active).as_millis() as u64,
                            "a read-write transaction stayed idle while others waited: \
                             aborting it and admitting the next one"
                        );
                        if let Some(id) = old.transaction {
                            inner.revoked.push_back(id.clone());
                            if inner.revoked.len() > REVOKED_REMEMBERED {
                                inner.revoked.pop_front();
                            }
                            displaced = Some(Displaced {
                                session: old.session,
                                transaction: id,
                            });
                        }
                    }
                    inner.waiting.pop_front();
                    inner.holder = Some(Holder {
                        ticket,
                        session: session.to_owned(),
                        transaction: None,
                        busy: 1,
                        last_active: now,
                    });
                    queued.admitted = true;
                    // The next waiter is now first: let it start its clock.
                    inner.wake_first();
                    drop(inner);
                    return Permit {
                        admission: Some(Arc::clone(self)),
                        ticket,
                        displaced,
                    };
                }
                deadline
            };
            match deadline {
                Some(at) => {
                    tokio::select! {
                        () = wake.notified() => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => wake.notified().await,
            }
        }
    }

    /// Marks the start of a call in an existing transaction. `Err(ABORTED)` when the
    /// transaction lost its slot after an idle wait.
    pub(crate) fn call(self: &Arc<Self>, transaction: &[u8]) -> Result<Call, Status> {
        if self.wait.is_none() {
            return Ok(Call { admission: None });
        }
        let mut inner = lock(&self.inner);
        if inner.revoked.iter().any(|id| id == transaction) {
            return Err(Status::aborted(
                "Transaction was aborted: it stayed idle while other read-write transactions \
                 waited (the emulator runs one read-write transaction per database at a time)",
            ));
        }
        match &mut inner.holder {
            Some(holder) if holder.transaction.as_deref() == Some(transaction) => {
                holder.busy += 1;
                holder.last_active = Instant::now();
                Ok(Call {
                    admission: Some((Arc::clone(self), holder.ticket)),
                })
            }
            _ => Ok(Call { admission: None }),
        }
    }

    /// Ends the holding of `ticket` (if it still holds the slot) and wakes the waiters.
    fn release(&self, ticket: u64) {
        let mut inner = lock(&self.inner);
        if inner.holder.as_ref().is_some_and(|h| h.ticket == ticket) {
            inner.holder = None;
            inner.wake_first();
        }
    }

    /// One call of the holder finished.
    fn idle(&self, ticket: u64) {
        let mut inner = lock(&self.inner);
        if let Some(holder) = inner.holder.as_mut().filter(|h| h.ticket == ticket) {
            holder.busy = holder.busy.saturating_sub(1);
            holder.last_active = Instant::now();
            inner.wake_first();
        }
    }
}

/// A place in the queue; leaves it when dropped before admission.
struct Queued<'a> {
    admission: &'a Admission,
    ticket: u64,
    admitted: bool,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        if self.admitted {
            return;
        }
        let mut inner = lock(&self.admission.inner);
        let was_first = inner.waiting.front().map(|w| w.0) == Some(self.ticket);
        inner.waiting.retain(|w| w.0 != self.ticket);
        if was_first {
            inner.wake_first();
        }
    }
}

/// The slot, held by a transaction being begun (or by a single-use read-write commit).
#[derive(Debug)]
pub(crate) struct Permit {
    admission: Option<Arc<Admission>>,
    ticket: u64,
    displaced: Option<Displaced>,
}

/// A transaction that lost the slot after an idle wait: the backend still holds its locks (the
/// official emulator aborts newcomers while an older transaction holds some), so the caller
/// rolls it back before going on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Displaced {
    pub(crate) session: String,
    pub(crate) transaction: Vec<u8>,
}

impl Permit {
    /// The transaction this admission took the slot from, if any (to roll back).
    pub(crate) fn take_displaced(&mut self) -> Option<Displaced> {
        self.displaced.take()
    }

    /// The backend began `transaction`: it keeps the slot until it commits, rolls back or
    /// aborts.
    pub(crate) fn bind(mut self, transaction: &[u8]) {
        if let Some(admission) = self.admission.take() {
            let mut inner = lock(&admission.inner);
            if let Some(holder) = inner.holder.as_mut().filter(|h| h.ticket == self.ticket) {
                holder.transaction = Some(transaction.to_vec());
                holder.busy = holder.busy.saturating_sub(1);
                holder.last_active = Instant::now();
            }
            // The first waiter's idle clock starts now.
            inner.wake_first();
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(admission) = self.admission.take() {
            admission.release(self.ticket);
        }
    }
}

/// A call in the transaction holding the slot (a no-op for other transactions).
#[derive(Debug)]
pub(crate) struct Call {
    admission: Option<(Arc<Admission>, u64)>,
}

impl Call {
    /// The call ended its transaction (commit, rollback, or `ABORTED`): free the slot.
    pub(crate) fn end_transaction(mut self) {
        if let Some((admission, ticket)) = self.admission.take() {
            admission.release(ticket);
        }
    }

    /// Frees the slot when `status` says the transaction is over.
    pub(crate) fn finish(self, status: Option<&Status>) {
        if status.is_some_and(|s| s.code() == tonic::Code::Aborted) {
            self.end_transaction();
        }
    }
}

impl Drop for Call {
    fn drop(&mut self) {
        if let Some((admission, ticket)) = self.admission.take() {
            admission.idle(ticket);
        }
    }
}

/// What a data call holds: the slot it begins a transaction in, or its place in the holder's
/// transaction, or nothing (reads, other transactions, admission off).
#[derive(Debug)]
pub(crate) enum Admitted {
    Nothing,
    Begin(Permit),
    Call(Call),
}

impl Admitted {
    /// Admits a call with this transaction selector: waits for the slot when it begins a
    /// read-write transaction in `session`; `ABORTED` when it names a transaction that lost
    /// its slot.
    ///
    /// # Cancellation
    /// Dropping the future leaves the queue; nothing is held.
    pub(crate) async fn selector(
        admission: &Arc<Admission>,
        session: &str,
        selector: Option<&TransactionSelector>,
    ) -> Result<Self, Status> {
        if begins_read_write(selector) {
            Ok(Self::Begin(admission.acquire(session).await))
        } else if let Some(id) = selected_id(selector) {
            Ok(Self::Call(admission.call(id)?))
        } else {
            Ok(Self::Nothing)
        }
    }

    /// The backend answered: `transaction` is the id an inline begin returned (if any),
    /// `status` the error (if any). A begin without an id gives the slot up.
    pub(crate) fn done(self, transaction: Option<&[u8]>, status: Option<&Status>) {
        match self {
            Self::Nothing => {}
            // A batch whose second statement failed still began its transaction.
            Self::Begin(permit) => match transaction {
                Some(id) if !id.is_empty() => permit.bind(id),
                _ => drop(permit),
            },
            Self::Call(call) => call.finish(status),
        }
    }

    /// The call ended its transaction (a commit or a rollback, whatever the outcome).
    pub(crate) fn end(self) {
        match self {
            Self::Nothing => {}
            Self::Begin(permit) => drop(permit),
            Self::Call(call) => call.end_transaction(),
        }
    }

    /// Whether this still waits for the id of a transaction it began.
    pub(crate) fn is_begin(&self) -> bool {
        matches!(self, Self::Begin(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn admission(wait_ms: u64) -> Arc<Admission> {
        Arc::new(Admission::new(Some(Duration::from_millis(wait_ms))))
    }

    #[tokio::test(start_paused = true)]
    async fn waiters_are_admitted_in_arrival_order() {
        let admission = admission(60_000);
        let first = admission.acquire("s").await;
        first.bind(b"t0");
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 1..=5u8 {
            let admission = Arc::clone(&admission);
            let order = Arc::clone(&order);
            tasks.push(tokio::spawn(async move {
                let permit = admission.acquire("s").await;
                lock(&order).push(i);
                permit.bind(&[i]);
                // Work in the transaction, then commit.
                tokio::time::sleep(Duration::from_millis(5)).await;
                admission.call(&[i]).unwrap().end_transaction();
            }));
            // Let task i queue before task i + 1 is spawned.
            tokio::task::yield_now().await;
        }
        assert!(lock(&order).is_empty(), "nobody may pass the holder");
        admission.call(b"t0").unwrap().end_transaction();
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(*lock(&order), vec![1, 2, 3, 4, 5]);
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_holder_loses_the_slot_after_the_wait_and_is_aborted() {
        let admission = admission(2_000);
        admission.acquire("s1").await.bind(b"abandoned");
        let started = Instant::now();
        let mut next = admission.acquire("s2").await;
        assert_eq!(started.elapsed(), Duration::from_millis(2_000));
        assert_eq!(
            next.take_displaced(),
            Some(Displaced {
                session: "s1".to_owned(),
                transaction: b"abandoned".to_vec(),
            })
        );
        next.bind(b"next");
        let error = admission.call(b"abandoned").unwrap_err();
        assert_eq!(error.code(), tonic::Code::Aborted);
        // The new holder is unaffected.
        assert!(admission.call(b"next").is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_busy_holder_is_not_displaced() {
        let admission = admission(1_000);
        admission.acquire("s").await.bind(b"slow");
        let call = admission.call(b"slow").unwrap();
        let waiter = {
            let admission = Arc::clone(&admission);
            tokio::spawn(async move { admission.acquire("s").await.bind(b"w") })
        };
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(!waiter.is_finished(), "a call in flight keeps the slot");
        drop(call);
        // Idle from now on: the waiter gets the slot one wait later.
        let released = Instant::now();
        waiter.await.unwrap();
        assert_eq!(released.elapsed(), Duration::from_millis(1_000));
    }

    #[tokio::test(start_paused = true)]
    async fn a_cancelled_waiter_leaves_the_queue() {
        let admission = admission(60_000);
        let holder = admission.acquire("s").await;
        let cancelled =
            tokio::time::timeout(Duration::from_millis(10), admission.acquire("s")).await;
        assert!(cancelled.is_err());
        drop(holder);
        // Admitted at once: the cancelled waiter is not ahead of it.
        let started = Instant::now();
        drop(admission.acquire("s").await);
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn when_the_first_waiter_leaves_the_next_one_takes_over_its_clock() {
        let admission = admission(1_000);
        admission.acquire("s1").await.bind(b"idle");
        let bound = Instant::now();
        let first = {
            let admission = Arc::clone(&admission);
            tokio::spawn(async move { admission.acquire("s2").await.bind(b"first") })
        };
        tokio::task::yield_now().await;
        let second = {
            let admission = Arc::clone(&admission);
            tokio::spawn(async move {
                let mut permit = admission.acquire("s3").await;
                let displaced = permit.take_displaced();
                permit.bind(b"second");
                displaced
            })
        };
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(10)).await;
        first.abort();
        assert!(first.await.unwrap_err().is_cancelled());
        // Nothing else changes the slot: only the departure of the first waiter can wake the
        // second, which then displaces the idle holder when its wait is up.
        let displaced = tokio::time::timeout(Duration::from_secs(60), second)
            .await
            .expect("the second waiter was never woken")
            .unwrap();
        assert_eq!(bound.elapsed(), Duration::from_millis(1_000));
        assert_eq!(displaced.map(|d| d.transaction), Some(b"idle".to_vec()));
    }

    #[tokio::test(start_paused = true)]
    async fn an_aborted_call_frees_the_slot_and_other_transactions_pass_through() {
        let admission = admission(60_000);
        admission.acquire("s").await.bind(b"t");
        // A call in some other transaction (a read-only one, say) is not held back.
        assert!(admission.call(b"other").is_ok());
        admission
            .call(b"t")
            .unwrap()
            .finish(Some(&Status::aborted("lost")));
        let started = Instant::now();
        drop(admission.acquire("s").await);
        assert_eq!(started.elapsed(), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn disabled_admission_never_waits() {
        let admission = Arc::new(Admission::new(None));
        let _held = admission.acquire("s").await;
        let started = Instant::now();
        let _second = admission.acquire("s").await;
        assert_eq!(started.elapsed(), Duration::ZERO);
    }
}
