//! A read-write transaction runner whose future is `Send` for every caller.
//!
//! [`transaction::run_with`](crate::transaction::run_with) takes an async closure that may
//! borrow its environment; the future it returns cannot currently be proven `Send` in generic
//! code (it fails with "implementation of `Send` is not general enough" inside
//! `tokio::spawn`). Receivers and workers run transactions from spawned tasks, so they use this
//! runner instead: the same policy (aborts re-run the body, bounded by the settings; the commit
//! is never re-sent; a failed commit is classified with
//! [`commit_outcome`](crate::transaction::commit_outcome), and an unknown outcome lists the
//! attempt's queue operations), with a body that returns an owned
//! future. Callers pass the body closure inline and capture only named types: a closure bound
//! to a variable first, or one capturing a trait object (`Arc<dyn Fn…>`) directly, brings the
//! same compiler limitation back.
//!
//! It also runs a transaction again when the server no longer knows it before the commit (see
//! `is_lost_transaction`): the emulator reports a transaction displaced by a concurrent one
//! that way instead of `ABORTED`.

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use backon::BackoffBuilder as _;

use google_cloud_gax::retry_policy::NeverRetry;
use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::transaction::{BasicTransactionRetryPolicy, ReadWriteTransaction};

use crate::error::{Code, Error, Result};
use crate::outcome::Recorder;
use crate::receive::lock;
use crate::transaction::{TransactionSettings, commit_failure};

/// Runs `body` in a read-write transaction; see the module docs.
pub(crate) async fn run<T, F, Fut>(
    db: &DatabaseClient,
    settings: &TransactionSettings,
    body: F,
) -> Result<T>
where
    F: FnMut(ReadWriteTransaction) -> Fut + Send,
    Fut: Future<Output = google_cloud_spanner::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let body = Arc::new(Mutex::new(body));
    let started = Instant::now();
    let mut backoff = backon::ExponentialBuilder::default()
        .with_jitter()
        .with_min_delay(Duration::from_millis(10))
        .with_max_delay(Duration::from_secs(1))
        .without_max_times()
        .build();
    let mut runs = 1_u32;
    loop {
        // Boxed: the runner's future is large, and debug builds poll it on a small stack.
        let result = Box::pin(run_once(db, settings, Arc::clone(&body))).await;
        match result {
            Err(error)
                if is_lost_transaction(&error)
                    && runs < settings.max_attempts
                    && started.elapsed() < settings.total_timeout =>
            {
                runs += 1;
                let delay = backoff.next().unwrap_or(Duration::from_secs(1));
                tracing::debug!(error = %error, ?delay, "transaction lost before commit; running it again");
                tokio::time::sleep(delay).await;
            }
            other => return other,
        }
    }
}

/// A transaction the server no longer knows, reported before anything was applied.
///
/// The emulator reports a transaction that a newer concurrent one displaced (it runs one
/// read-write transaction per database at a time) as `NOT_FOUND` "Transaction not found" or
/// `FAILED_PRECONDITION` "Invalid transaction ID" instead of `ABORTED`, which the official
/// client would retry. Cloud Spanner reports `NOT_FOUND` "Transaction not found" for a
/// transaction that expired. In both cases nothing was applied (neither code leaves a commit's
/// outcome unknown), so running the transaction again is safe. Matching on the message is a
/// last resort: remove it once the emulator reports `ABORTED`.
fn is_lost_transaction(error: &Error) -> bool {
    let Error::Spanner(spanner) = error else {
        return false;
    };
    let message = spanner.status_message().unwrap_or_default();
    match spanner.code() {
        Some(Code::NotFound) => message.starts_with("Transaction not found"),
        Some(Code::FailedPrecondition) => message.starts_with("Invalid transaction ID"),
        _ => false,
    }
}

async fn run_once<T, F, Fut>(
    db: &DatabaseClient,
    settings: &TransactionSettings,
    body: Arc<Mutex<F>>,
) -> Result<T>
where
    F: FnMut(ReadWriteTransaction) -> Fut + Send,
    Fut: Future<Output = google_cloud_spanner::Result<T>> + Send + 'static,
    T: Send + 'static,
{
    let reached_commit = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&reached_commit);
    let runner = db
        .read_write_transaction()
        .with_commit_retry_policy(NeverRetry)
        .with_commit_attempt_timeout(settings.commit_timeout)
        .with_retry_policy(
            BasicTransactionRetryPolicy::new()
                .with_max_attempts(settings.max_attempts)
                .with_total_timeout(settings.total_timeout),
        )
        .build();
    // Queue operations of the attempt, for `OutcomeUnknown` (the crate's shared convention).
    let recorder = Recorder::default();
    let attempt_recorder = recorder.clone();
    let result = Box::pin(recorder.scope(runner.run(move |tx: ReadWriteTransaction| {
        attempt_recorder.clear();
        let attempt = (lock(&body))(tx);
        let flag = Arc::clone(&flag);
        async move {
            flag.store(false, Ordering::SeqCst);
            let result = attempt.await;
            flag.store(result.is_ok(), Ordering::SeqCst);
            result
        }
    })))
    .await;
    match result {
        Ok(done) => Ok(done.result),
        Err(error) if reached_commit.load(Ordering::SeqCst) => {
            Err(commit_failure(error, &recorder, None))
        }
        Err(error) => Err(Error::from(error)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use google_cloud_gax::error::rpc::{Code as GaxCode, Status};

    fn status(code: GaxCode, message: &str) -> Error {
        Error::from(google_cloud_spanner::Error::service(
            Status::default().set_code(code).set_message(message),
        ))
    }

    #[test]
    fn only_lost_transactions_run_again() {
        assert!(is_lost_transaction(&status(
            GaxCode::NotFound,
            "Transaction not found: 16"
        )));
        assert!(is_lost_transaction(&status(
            GaxCode::FailedPrecondition,
            "Invalid transaction ID. Transaction ID must be >= 19"
        )));
        assert!(!is_lost_transaction(&status(
            GaxCode::NotFound,
            "Table not found: T"
        )));
        assert!(!is_lost_transaction(&status(
            GaxCode::FailedPrecondition,
            "Cannot delete a row with children"
        )));
        assert!(!is_lost_transaction(&status(
            GaxCode::Unavailable,
            "Transaction not found"
        )));
    }

    /// Compiles only if the runner's future is `Send` inside `tokio::spawn`.
    #[allow(dead_code)]
    fn spawnable(db: DatabaseClient) {
        tokio::spawn(async move {
            let settings = TransactionSettings::default();
            let _ = run(&db, &settings, |tx: ReadWriteTransaction| async move {
                let _ = tx;
                Ok(())
            })
            .await;
        });
    }
}
