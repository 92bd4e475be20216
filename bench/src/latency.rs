//! Latency: from the return of a send's commit to the start of the message's handler.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::BoxError;
use crate::consume::{Consumer, Progress, Side, sdk_settings, wait_until};
use crate::db::{Bench, BenchJob, Database};

/// Samples of one side, in microseconds.
#[derive(Debug, Clone, Default)]
pub(crate) struct Samples {
    pub(crate) micros: Vec<u64>,
    /// Handler starts seen before the sender's commit returned (counted as 0).
    pub(crate) before_commit_returned: u64,
}

impl Samples {
    pub(crate) fn extend(&mut self, other: Samples) {
        self.micros.extend(other.micros);
        self.before_commit_returned += other.before_commit_returned;
    }

    /// The `p`-th percentile (nearest rank), in milliseconds.
    pub(crate) fn percentile_ms(&self, p: f64) -> f64 {
        if self.micros.is_empty() {
            return f64::NAN;
        }
        let mut sorted = self.micros.clone();
        sorted.sort_unstable();
        let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
        sorted[rank.clamp(1, sorted.len()) - 1] as f64 / 1000.0
    }
}

/// Starts `side`, then sends `ids` one per transaction every `interval` and records, per
/// message, the time from the send's commit returning to its handler's first start.
pub(crate) async fn measure(
    bench: &Bench,
    db: &Database,
    side: Side,
    ids: std::ops::Range<i64>,
    interval: Duration,
) -> Result<Samples, BoxError> {
    let client = bench.new_client(db).await?;
    let progress = Arc::new(Progress::with_starts());
    let consumer = Consumer::start(side, db.sql(), vec![client], Arc::clone(&progress))?;
    // Each message in a transaction of its own, with the benchmark's settings.
    let send = |id: i64| {
        let job = BenchJob::new(id);
        async move {
            db.sdk
                .transaction()
                .with_transaction_settings(sdk_settings())
                .run(move |tx| async move { tx.send(&job).await })
                .await
        }
    };
    // A first message, not measured: the consumer is then receiving.
    let warm_up = ids.start;
    send(warm_up).await?;
    let started = Instant::now();
    if !wait_until(started, Duration::from_secs(60), || consumer.done() >= 1).await {
        consumer.stop().await;
        return Err(format!("{}: the warm-up message was not consumed", side.label()).into());
    }
    let mut committed: HashMap<i64, Instant> = HashMap::new();
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    for id in ids.start + 1..ids.end {
        tick.tick().await;
        send(id).await?;
        committed.insert(id, Instant::now());
    }
    let total = (ids.end - ids.start) as u64;
    let finished = wait_until(Instant::now(), Duration::from_secs(120), || {
        consumer.done() >= total
    })
    .await;
    consumer.stop().await;
    if !finished {
        return Err(format!("{}: not every message was consumed", side.label()).into());
    }
    if progress.errors() > 0 {
        return Err(format!("{}: {} consumer errors", side.label(), progress.errors()).into());
    }
    let starts = progress.starts();
    let mut samples = Samples::default();
    for (id, commit) in committed {
        let start = starts
            .get(&id)
            .ok_or_else(|| format!("no handler start recorded for message {id}"))?;
        match start.checked_duration_since(commit) {
            Some(latency) => samples.micros.push(latency.as_micros() as u64),
            None => {
                samples.micros.push(0);
                samples.before_commit_returned += 1;
            }
        }
    }
    db.verify(&ids, false).await?;
    Ok(samples)
}
