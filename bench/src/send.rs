//! Send: `Transaction::send` / `send_many` in the caller's transaction and `Database::send` /
//! `send_many` in a transaction of their own, against hand-written DML with the same
//! statements, interleaved transaction by transaction: wall time and the client's CPU time.

use std::time::{Duration, Instant};

use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::statement::Statement;

use crate::BoxError;
use crate::db::{BenchJob, Database};

/// The variants measured, each against its hand-written twin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Variant {
    /// `Transaction::send` in the caller's transaction, one message per transaction.
    TxSend,
    /// `Transaction::send_many`, 100 messages per transaction.
    TxSendMany,
    /// `Database::send` (a transaction of its own), one message per transaction.
    DbSend,
    /// `Database::send_many`, 100 messages per transaction.
    DbSendMany,
}

impl Variant {
    pub(crate) const ALL: [Variant; 4] = [
        Variant::TxSend,
        Variant::TxSendMany,
        Variant::DbSend,
        Variant::DbSendMany,
    ];

    pub(crate) fn label(self) -> &'static str {
        match self {
            Variant::TxSend => "tx.send (1 per txn)",
            Variant::TxSendMany => "tx.send_many (100 per txn)",
            Variant::DbSend => "db.send (1 per txn)",
            Variant::DbSendMany => "db.send_many (100 per txn)",
        }
    }

    /// The stable name of the wall-time ratio (the names predate the `Database::send` API:
    /// `producer_*` are its sends in a transaction of their own).
    pub(crate) fn ratio_name(self) -> &'static str {
        match self {
            Variant::TxSend => "send_vs_dml",
            Variant::TxSendMany => "send_many_vs_dml",
            Variant::DbSend => "producer_send_vs_dml",
            Variant::DbSendMany => "producer_send_many_vs_dml",
        }
    }

    pub(crate) fn per_transaction(self) -> usize {
        match self {
            Variant::TxSend | Variant::DbSend => 1,
            Variant::TxSendMany | Variant::DbSendMany => 100,
        }
    }
}

/// Wall and CPU time of one side: each transaction's wall time, and the CPU time of all.
#[derive(Debug, Clone, Default)]
pub(crate) struct Cost {
    /// The wall time of each transaction, in the order they ran.
    pub(crate) walls: Vec<Duration>,
    pub(crate) cpu: Duration,
    pub(crate) messages: u64,
}

impl Cost {
    pub(crate) fn add(&mut self, other: Cost) {
        self.walls.extend(other.walls);
        self.cpu += other.cpu;
        self.messages += other.messages;
    }

    /// The wall time of all transactions.
    pub(crate) fn wall(&self) -> Duration {
        self.walls.iter().sum()
    }

    /// The median wall time of one transaction (the mean of the middle two for an even count).
    pub(crate) fn median_wall(&self) -> Duration {
        let mut sorted = self.walls.clone();
        sorted.sort_unstable();
        match sorted.len() {
            0 => Duration::ZERO,
            n if n % 2 == 1 => sorted[n / 2],
            n => (sorted[n / 2 - 1] + sorted[n / 2]) / 2,
        }
    }
}

/// Runs `transactions` transactions of `variant` on each side, interleaved: the SDK's and the
/// hand-written twin's alternate transaction by transaction, and which of the two goes first
/// alternates too (the SDK first in even transactions when `sdk_first`). So the machine's load,
/// which changes from one second to the next on a shared machine, falls on both sides alike.
/// Ids are taken from `first`. Returns the SDK's cost, then the twin's.
pub(crate) async fn measure(
    db: &Database,
    variant: Variant,
    first: i64,
    transactions: usize,
    sdk_first: bool,
) -> Result<[Cost; 2], BoxError> {
    let per = variant.per_transaction();
    let jobs: Vec<BenchJob> = (first..first + (2 * transactions * per) as i64)
        .map(BenchJob::new)
        .collect();
    let mut costs = [Cost::default(), Cost::default()];
    for (t, pair) in jobs.chunks(2 * per).enumerate() {
        let (a, b) = pair.split_at(per);
        let sdk_goes_first = (t % 2 == 0) == sdk_first;
        for (sdk, chunk) in [(sdk_goes_first, a), (!sdk_goes_first, b)] {
            let cpu = crate::cpu::process_cpu();
            let started = Instant::now();
            transaction(db, variant, sdk, chunk).await?;
            let cost = &mut costs[usize::from(!sdk)];
            cost.walls.push(started.elapsed());
            cost.cpu += crate::cpu::process_cpu().saturating_sub(cpu);
            cost.messages += chunk.len() as u64;
        }
    }
    Ok(costs)
}

/// One transaction of `variant` sending `chunk`, with the SDK (`sdk`) or the hand-written twin.
async fn transaction(
    db: &Database,
    variant: Variant,
    sdk: bool,
    chunk: &[BenchJob],
) -> Result<(), BoxError> {
    match (sdk, variant) {
        (true, Variant::TxSend) => {
            db.sdk
                .transaction()
                .run(move |tx| async move {
                    tx.send(&chunk[0]).await?;
                    Ok(())
                })
                .await?;
        }
        (true, Variant::TxSendMany) => {
            db.sdk
                .transaction()
                .run(move |tx| async move {
                    tx.send_many(chunk).await?;
                    Ok(())
                })
                .await?;
        }
        (true, Variant::DbSend) => {
            db.sdk.send(&chunk[0]).await?;
        }
        (true, Variant::DbSendMany) => {
            db.sdk.send_many(chunk).await?;
        }
        (false, _) => handwritten(db.client(), chunk).await?,
    }
    Ok(())
}

/// The hand-written twin: the statement the SDK sends, built by hand (one `INSERT` per
/// message; several in one Batch DML call).
async fn handwritten(db: &DatabaseClient, jobs: &[BenchJob]) -> Result<(), BoxError> {
    db.read_write_transaction()
        .build()
        .run(async |tx| {
            let statements: Vec<Statement> = jobs.iter().map(insert).collect();
            if statements.len() == 1 {
                let [statement] = <[Statement; 1]>::try_from(statements)
                    .unwrap_or_else(|_| unreachable!("one statement"));
                tx.execute_update(statement).await?;
            } else {
                tx.execute_batch_update(statements).await?;
            }
            Ok(())
        })
        .await?;
    Ok(())
}

fn insert(job: &BenchJob) -> Statement {
    let payload = serde_json::json!({ "body": job.body }).to_string();
    Statement::builder(
        "INSERT INTO BenchJobs (Id, Payload, DeliverTime) VALUES (@k0_0, @p0, CURRENT_TIMESTAMP())",
    )
    .add_typed_param("k0_0", job.id, google_cloud_spanner::types::int64())
    .add_typed_param("p0", payload, google_cloud_spanner::types::json())
    .build()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(micros: &[u64]) -> Cost {
        Cost {
            walls: micros.iter().map(|&m| Duration::from_micros(m)).collect(),
            ..Cost::default()
        }
    }

    #[test]
    fn the_median_ignores_stalls_and_the_sum_keeps_them() {
        let stalled = cost(&[1300, 15_000, 1200, 1250, 1280]);
        assert_eq!(stalled.median_wall(), Duration::from_micros(1280));
        assert_eq!(stalled.wall(), Duration::from_micros(20_030));
        assert_eq!(
            cost(&[4, 1, 3, 2]).median_wall(),
            Duration::from_nanos(2500),
            "the mean of the middle two"
        );
        assert_eq!(cost(&[]).median_wall(), Duration::ZERO);
    }
}
