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

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::transaction::ReadWriteTransaction;

use crate::error::{Error, Result};
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
    // Boxed: the runner's future is large, and debug builds poll it on a small stack.
    Box::pin(run_once(db, settings, Arc::new(Mutex::new(body)))).await
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
    let runner = crate::transaction::runner(db, settings);
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
