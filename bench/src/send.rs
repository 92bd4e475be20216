//! Send: `Transaction::send` / `send_many` in the caller's transaction and `Database::send` /
//! `send_many` in a transaction of their own, against hand-written DML with the same
//! statements, wall time and the client's CPU time.

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

/// Wall and CPU time of one side.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Cost {
    pub(crate) wall: Duration,
    pub(crate) cpu: Duration,
    pub(crate) messages: u64,
}

impl Cost {
    pub(crate) fn add(&mut self, other: Cost) {
        self.wall += other.wall;
        self.cpu += other.cpu;
        self.messages += other.messages;
    }
}

/// Sends `transactions` transactions of `variant` with the SDK (`sdk`) or the hand-written
/// twin, with ids from `first`.
pub(crate) async fn measure(
    db: &Database,
    variant: Variant,
    sdk: bool,
    first: i64,
    transactions: usize,
) -> Result<Cost, BoxError> {
    let per = variant.per_transaction();
    let jobs: Vec<BenchJob> = (first..first + (transactions * per) as i64)
        .map(BenchJob::new)
        .collect();
    let cpu = crate::cpu::process_cpu();
    let started = Instant::now();
    for chunk in jobs.chunks(per) {
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
    }
    Ok(Cost {
        wall: started.elapsed(),
        cpu: crate::cpu::process_cpu().saturating_sub(cpu),
        messages: jobs.len() as u64,
    })
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
