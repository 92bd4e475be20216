//! The example of the README's "Testing your queue code" section, kept identical to it.

use google_cloud_spanner::statement::Statement;
use spanner_queues::{Database, HandlerError, QueueMessage, Worker};

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "TriageTasks")]
struct TriageTask {
    #[queue(key)]
    ticket_id: i64,
    title: String,
}

/// The producer: opens a ticket and queues its triage in the same transaction.
async fn open_ticket(db: &Database, id: i64, title: &str) -> spanner_queues::Result<()> {
    db.transaction()
        .run(move |tx| async move {
            tx.execute_update(
                Statement::builder("INSERT INTO Tickets (Id, Status) VALUES (@id, 'open')")
                    .add_param("id", id)
                    .build(),
            )
            .await?;
            let task = TriageTask {
                ticket_id: id,
                title: title.to_owned(),
            };
            tx.send(&task).await?;
            Ok(())
        })
        .await
}

/// The worker: sets the ticket's priority in the transaction that acks the task.
fn triage_worker(db: &Database) -> spanner_queues::Result<Worker<TriageTask>> {
    Worker::<TriageTask>::builder(db)
        .transactional(|tx, task, _ctx| async move {
            let priority = if task.title.contains("fire") {
                "urgent"
            } else {
                "normal"
            };
            tx.execute_update(
                Statement::builder("UPDATE Tickets SET Status = @priority WHERE Id = @id")
                    .add_param("priority", priority)
                    .add_param("id", task.ticket_id)
                    .build(),
            )
            .await?;
            Ok::<(), HandlerError>(())
        })
        .build()
}

#[tokio::test]
async fn tickets_are_triaged_and_the_queue_ends_empty() {
    let Some(db) = spanner_queues_testing::setup()
        .with_queue::<TriageTask>()
        .with_ddl([
            "CREATE TABLE Tickets (Id INT64 NOT NULL, Status STRING(16) NOT NULL) \
                    PRIMARY KEY (Id)",
        ])
        .create()
        .await
    else {
        return; // no emulator: skipped, with the reason printed
    };

    // The producer's transaction sent exactly this task.
    let (opened, sent) = db
        .sent_by::<TriageTask, _>(open_ticket(&db, 1, "printer on fire"))
        .await;
    opened.expect("open ticket 1");
    sent.assert_exactly(&[TriageTask {
        ticket_id: 1,
        title: "printer on fire".into(),
    }]);
    open_ticket(&db, 2, "mouse").await.expect("open ticket 2");
    db.assert_queued_keys::<TriageTask>(&[1, 2]).await;

    // Run the worker until the queue is idle, then check its effects.
    let stats = db
        .drain(&triage_worker(&db).expect("worker settings"))
        .await
        .expect("drain");
    assert_eq!(stats.acked, 2);
    let tickets: Vec<(i64, String)> = db
        .query("SELECT Id, Status FROM Tickets ORDER BY Id")
        .await
        .expect("query");
    assert_eq!(tickets, [(1, "urgent".into()), (2, "normal".into())]);
    db.assert_queue_empty::<TriageTask>().await;
    db.assert_no_dead_letters::<TriageTask>().await;
}
