//! A long-running job: it outlives many of Spanner's 10-second leases, kept alive by the
//! worker's background renewal, and it checkpoints its progress so that a crash resumes the
//! job where it stopped rather than restarting it.
//!
//! The example kills the first worker process midway; a second worker picks the job up after
//! the dead worker's lease expires and finishes the remaining shards only.
//!
//! ```text
//! cargo run -p spanner-queues-examples --bin long_job
//! ```

use std::time::{Duration, SystemTime};

use google_cloud_spanner::statement::Statement;
use spanner_queues::{Database, HandlerError, QueueMessage, Worker};
use spanner_queues_examples::{
    Error, WorkerProcess, connect_from_env, count, database, execute, init_tracing, role, say,
};

/// Re-index every shard of a table.
#[derive(QueueMessage, Debug)]
#[queue(name = "ReindexJobs")]
struct Reindex {
    #[queue(key)]
    job_id: String,
    shards: i64,
}

/// Shards in the job, and how long each takes: about 15 s in all, longer than a lease.
const SHARDS: i64 = 20;
const SHARD_TIME: Duration = Duration::from_millis(750);
/// The first worker process is killed after this many checkpoints.
const CRASH_AFTER: i64 = 5;

/// Where the job stands: shards done (the checkpoint).
async fn checkpoint_of(db: &Database, job_id: &str) -> Result<i64, HandlerError> {
    let mut rows = db
        .client()
        .single_use()
        .build()
        .execute_query(
            Statement::builder("SELECT DoneShards FROM Jobs WHERE JobId = @id")
                .add_param("id", job_id)
                .build(),
        )
        .await?;
    match rows.next().await {
        Some(row) => Ok(row?.get::<i64>(0)?),
        None => Err(HandlerError::dead_letter(format!("no job {job_id}"))),
    }
}

/// The handler. It runs outside any transaction (a transaction must not stay open for
/// minutes): each shard's checkpoint commits on its own, and the worker acks at the end.
fn reindex_worker(
    db: &Database,
    crash_after: Option<i64>,
) -> spanner_queues::Result<Worker<Reindex>> {
    let db = db.clone();
    Worker::<Reindex>::builder(&db)
        .external(move |job, ctx| {
            let db = db.clone();
            async move {
                // Resume from the last checkpoint: 0 on the first delivery.
                let start = checkpoint_of(&db, &job.job_id).await?;
                if start > 0 {
                    say(&format!(
                        "resuming {} at shard {start} of {}",
                        job.job_id, job.shards
                    ));
                }
                for shard in start..job.shards {
                    tokio::time::sleep(SHARD_TIME).await; // the work on one shard
                    // The checkpoint only moves forward from where this worker found it: a
                    // worker that lost its lease (and was replaced) cannot overwrite the
                    // progress of its successor.
                    let moved = execute(
                        &db,
                        Statement::builder(
                            "UPDATE Jobs SET DoneShards = @done, \
                             ShardsProcessed = ShardsProcessed + 1 \
                             WHERE JobId = @id AND DoneShards = @shard",
                        )
                        .add_param("id", job.job_id.clone())
                        .add_param("shard", shard)
                        .add_param("done", shard + 1)
                        .build(),
                    )
                    .await
                    .map_err(HandlerError::new)?;
                    if moved == 0 {
                        return Err(HandlerError::msg("another worker has moved the job on"));
                    }
                    let lease_left = ctx
                        .lease_expiry()
                        .duration_since(SystemTime::now())
                        .unwrap_or_default();
                    say(&format!(
                        "checkpoint {}/{}: lease expires in {:.1}s (renewed in the background)",
                        shard + 1,
                        job.shards,
                        lease_left.as_secs_f64()
                    ));
                    if crash_after == Some(shard + 1) {
                        say("crashing now");
                        std::future::pending::<()>().await;
                    }
                }
                // Idempotent: a redelivery after this point finds every shard done and only
                // marks the job done again.
                execute(
                    &db,
                    Statement::builder("UPDATE Jobs SET Status = 'done' WHERE JobId = @id")
                        .add_param("id", job.job_id.clone())
                        .build(),
                )
                .await
                .map_err(HandlerError::new)?;
                Ok(())
            }
        })
        .build()
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    init_tracing();
    if role().as_deref() == Some("crash") {
        let _worker = reindex_worker(&connect_from_env().await?, Some(CRASH_AFTER))?.spawn();
        std::future::pending::<()>().await;
    }

    let (db, harness) = database(
        spanner_queues_testing::setup()
            .with_queue::<Reindex>()
            .with_ddl([
                "CREATE TABLE Jobs (JobId STRING(36) NOT NULL, Status STRING(16) NOT NULL, \
                 DoneShards INT64 NOT NULL, ShardsProcessed INT64 NOT NULL) PRIMARY KEY (JobId)",
            ]),
    )
    .await?;

    let job_id = uuid::Uuid::new_v4().to_string();
    execute(
        &db,
        Statement::builder(
            "INSERT INTO Jobs (JobId, Status, DoneShards, ShardsProcessed) \
             VALUES (@id, 'running', 0, 0)",
        )
        .add_param("id", job_id.clone())
        .build(),
    )
    .await?;
    db.send(&Reindex {
        job_id: job_id.clone(),
        shards: SHARDS,
    })
    .await?;
    println!("job {job_id}: {SHARDS} shards of {SHARD_TIME:?} each");

    let mut first = WorkerProcess::start(&harness, "crash", &[])?;
    first
        .wait_for_line("crashing now", Duration::from_secs(120))
        .await?;
    first.kill().await?;
    println!("worker process killed after checkpoint {CRASH_AFTER}");

    let worker = reindex_worker(&db, None)?.spawn();
    spanner_queues_examples::wait_for("the job to finish", Duration::from_secs(180), || {
        let db = db.clone();
        async move { Ok(count(&db, "SELECT COUNT(*) FROM Jobs WHERE Status = 'done'").await? == 1) }
    })
    .await?;
    spanner_queues_examples::wait_for("the job's ack", Duration::from_secs(60), || {
        let db = db.clone();
        async move { Ok(count(&db, "SELECT COUNT(*) FROM ReindexJobs").await? == 0) }
    })
    .await?;
    let stats = worker.shutdown().await?;
    let processed = count(&db, "SELECT ShardsProcessed FROM Jobs").await?;
    println!(
        "job done: shards processed {processed} of {SHARDS} (a restart would have processed {}); \
         leases renewed by the second worker {}, lost {}",
        SHARDS + CRASH_AFTER,
        stats.receiver.renewed,
        stats.receiver.lease_lost
    );
    if processed != SHARDS || stats.acked != 1 || stats.receiver.renewed == 0 {
        return Err("the job did not resume from its checkpoint under a renewed lease".into());
    }
    println!("resumed from the checkpoint; each shard processed once");
    Ok(())
}
