//! Agent pipeline: parse -> classify -> act, each stage a queue and a worker. Every hand-off is
//! one transaction: the stage writes its result, sends the next stage's task, and the worker
//! acks the input in that same commit. A crash anywhere leaves each document in exactly one
//! stage, never in two and never in none.
//!
//! ```text
//! cargo run -p spanner-queues-examples --bin agent_pipeline
//! ```

use std::time::Duration;

use google_cloud_spanner::statement::Statement;
use spanner_queues::{Database, HandlerError, QueueMessage, Transaction, Worker};
use spanner_queues_examples::{Error, count, database, init_tracing};

/// Stage 1: split the raw text into normalised words.
#[derive(QueueMessage, Debug)]
#[queue(name = "ParseTasks")]
struct Parse {
    #[queue(key)]
    document_id: i64,
}

/// Stage 2: pick a category from the parsed words.
#[derive(QueueMessage, Debug)]
#[queue(name = "ClassifyTasks")]
struct Classify {
    #[queue(key)]
    document_id: i64,
}

/// Stage 3: decide what to do about it.
#[derive(QueueMessage, Debug)]
#[queue(name = "ActTasks")]
struct Act {
    #[queue(key)]
    document_id: i64,
}

const DOCUMENTS: [&str; 6] = [
    "I was charged twice, please refund the second payment",
    "The app crashes when I open the settings page",
    "How do I export my data?",
    "Refund request for order 1234",
    "Error 500 on checkout since this morning",
    "Can I change the e-mail address of my account?",
];

/// Reads one text column of a document inside the stage's transaction.
async fn read_column(tx: &Transaction, column: &str, id: i64) -> Result<String, HandlerError> {
    let mut rows = tx
        .execute_query(
            Statement::builder(format!("SELECT {column} FROM Documents WHERE Id = @id"))
                .add_param("id", id)
                .build(),
        )
        .await?;
    let row = rows
        .next()
        .await
        .ok_or_else(|| HandlerError::msg(format!("no document {id}")))??;
    // A permanent problem (the stage before never wrote its result) is not worth retrying.
    row.get::<Option<String>>(0)?
        .ok_or_else(|| HandlerError::dead_letter(format!("document {id} has no {column}")))
}

/// Writes one text column of a document inside the stage's transaction.
async fn write_column(
    tx: &Transaction,
    column: &str,
    id: i64,
    value: &str,
) -> Result<(), HandlerError> {
    tx.execute_update(
        Statement::builder(format!(
            "UPDATE Documents SET {column} = @value WHERE Id = @id"
        ))
        .add_param("id", id)
        .add_param("value", value)
        .build(),
    )
    .await?;
    Ok(())
}

fn parse_worker(db: &Database) -> spanner_queues::Result<Worker<Parse>> {
    Worker::<Parse>::builder(db)
        .transactional(|tx, task, _ctx| async move {
            let text = read_column(&tx, "Text", task.document_id).await?;
            let words: Vec<String> = text
                .split(|c: char| !c.is_alphanumeric())
                .filter(|w| !w.is_empty())
                .map(str::to_lowercase)
                .collect();
            write_column(&tx, "Parsed", task.document_id, &words.join(" ")).await?;
            // The hand-off: the next task commits with this stage's result and its ack.
            let document_id = task.document_id;
            tx.send(&Classify { document_id }).await?;
            Ok(())
        })
        .build()
}

fn classify_worker(db: &Database) -> spanner_queues::Result<Worker<Classify>> {
    Worker::<Classify>::builder(db)
        .transactional(|tx, task, _ctx| async move {
            let parsed = read_column(&tx, "Parsed", task.document_id).await?;
            let has = |word: &str| parsed.split(' ').any(|w| w == word);
            // Where an agent would call a model; the rest of the stage is the same.
            let category = if has("refund") || has("charged") {
                "billing"
            } else if has("crashes") || has("error") {
                "bug"
            } else {
                "question"
            };
            write_column(&tx, "Category", task.document_id, category).await?;
            let document_id = task.document_id;
            tx.send(&Act { document_id }).await?;
            Ok(())
        })
        .build()
}

fn act_worker(db: &Database) -> spanner_queues::Result<Worker<Act>> {
    Worker::<Act>::builder(db)
        .transactional(|tx, task, _ctx| async move {
            let category = read_column(&tx, "Category", task.document_id).await?;
            let action = match category.as_str() {
                "billing" => "route to billing",
                "bug" => "open an incident",
                _ => "answer from the FAQ",
            };
            // The last stage sends nothing: its result is the end of the pipeline.
            write_column(&tx, "Action", task.document_id, action).await
        })
        .build()
}

/// The entry point: the document and its first task commit together.
async fn submit(db: &Database, id: i64, text: &str) -> Result<(), Error> {
    db.transaction()
        .run(move |tx| async move {
            tx.execute_update(
                Statement::builder("INSERT INTO Documents (Id, Text) VALUES (@id, @text)")
                    .add_param("id", id)
                    .add_param("text", text)
                    .build(),
            )
            .await?;
            tx.send(&Parse { document_id: id }).await
        })
        .await?;
    Ok(())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    init_tracing();
    let (db, harness) = database(
        spanner_queues_testing::setup()
            .with_queue::<Parse>()
            .with_queue::<Classify>()
            .with_queue::<Act>()
            .with_ddl([
                "CREATE TABLE Documents (Id INT64 NOT NULL, Text STRING(MAX) NOT NULL, \
                 Parsed STRING(MAX), Category STRING(16), Action STRING(32)) PRIMARY KEY (Id)",
            ]),
    )
    .await?;

    // Three workers, one per stage; in production they may run in different services.
    let parse = parse_worker(&db)?.spawn();
    let classify = classify_worker(&db)?.spawn();
    let act = act_worker(&db)?.spawn();

    for (id, text) in (1..).zip(DOCUMENTS) {
        submit(&db, id, text).await?;
    }
    println!("{} documents submitted", DOCUMENTS.len());

    spanner_queues_examples::wait_for(
        "every document to be acted on",
        Duration::from_secs(180),
        || {
            let db = db.clone();
            async move {
                Ok(count(
                    &db,
                    "SELECT COUNT(*) FROM Documents WHERE Action IS NOT NULL",
                )
                .await?
                    == DOCUMENTS.len() as i64)
            }
        },
    )
    .await?;
    let mut acked = Vec::new();
    for handle in [parse, classify, act] {
        acked.push(handle.shutdown().await?.acked);
    }

    let rows: Vec<(i64, String, String)> = harness
        .query("SELECT Id, Category, Action FROM Documents ORDER BY Id")
        .await?;
    for (id, category, action) in &rows {
        println!("document {id}: {category:<8} -> {action}");
    }
    println!("acked per stage (parse, classify, act): {acked:?}");
    harness.assert_queue_empty::<Parse>().await;
    harness.assert_queue_empty::<Classify>().await;
    harness.assert_queue_empty::<Act>().await;
    harness.assert_no_dead_letters::<Act>().await;
    let expected = DOCUMENTS.len() as u64;
    if acked != [expected; 3] {
        return Err("each stage should have handled each document once".into());
    }
    println!("every document went through every stage exactly once");
    Ok(())
}
