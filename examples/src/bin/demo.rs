//! The main demo: starts an embedded queue-aware emulator and runs a small workload on it.

use google_cloud_spanner::statement::Statement;
use spanner_queues_emulator::harness;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,h2=warn,hyper=warn")),
        )
        .init();
    let db = harness::try_database(vec![
        "CREATE TABLE Greetings (Id INT64 NOT NULL, Text STRING(MAX)) PRIMARY KEY (Id)".into(),
    ])
    .await?;
    println!("database {} on {}", db.path(), db.mode());
    db.client()
        .read_write_transaction()
        .build()
        .run(async |tx| {
            tx.execute_update(Statement::builder(
                "INSERT INTO Greetings (Id, Text) VALUES (1, 'hello from spanner-queues')",
            ))
            .await
        })
        .await?;
    let mut rows = db
        .client()
        .single_use()
        .build()
        .execute_query(Statement::builder("SELECT Text FROM Greetings"))
        .await?;
    while let Some(row) = rows.next().await.transpose()? {
        let text: String = row.get("Text")?;
        println!("read back: {text}");
    }
    Ok(())
}
