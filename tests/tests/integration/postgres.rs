//! Issue 13: the SDK on a PostgreSQL-dialect database (the emulator serves queues there too):
//! the derive's PostgreSQL DDL, send / send_at / cancel with PostgreSQL statements, receive,
//! ack, and lease renewal.

use std::time::{Duration, SystemTime};

use futures::StreamExt as _;
use spanner_queues::receive::{ReceiveSettings, Receiver};
use spanner_queues::{Dialect, Queue, QueueMessage};
use spanner_queues_tests::{count, eventually};

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "pgjobs")]
struct PgJob {
    #[queue(key)]
    id: i64,
    name: String,
}

fn job(id: i64) -> PgJob {
    PgJob {
        id,
        name: format!("job {id}"),
    }
}

/// A fresh PostgreSQL-dialect database holding `PgJob`'s queue, created from the derive's
/// PostgreSQL DDL. Fails (never skips) when no emulator is available under
/// `SPANNER_QUEUES_REQUIRE_EMULATOR=1`; skips with a notice otherwise.
async fn pg_db() -> Option<spanner_queues_testing::TestDatabase> {
    let ddl = PgJob::schema()
        .create_statement(Dialect::PostgreSql)
        .expect("PostgreSQL DDL");
    match spanner_queues_testing::try_postgres_database(vec![ddl]).await {
        Ok(db) => Some(db),
        Err(spanner_queues_testing::HarnessError::NoBackend(reason))
            if std::env::var("SPANNER_QUEUES_REQUIRE_EMULATOR").as_deref() != Ok("1") =>
        {
            eprintln!("SKIPPING: no emulator ({reason})");
            None
        }
        Err(error) => panic!("{error}"),
    }
}

/// send, send_at and cancel commit PostgreSQL statements; the receiver reads the PostgreSQL
/// output columns, renews the lease of a message it holds, and acks with `DELETE …
/// ASSERT_ROWS_MODIFIED 1`.
#[tokio::test]
async fn send_receive_renew_and_ack_on_a_postgresql_database() {
    let Some(db) = pg_db().await else { return };
    let client = db.client();
    let q: Queue<PgJob> = db.database().queue();
    client
        .read_write_transaction()
        .build()
        .run(async |tx| {
            q.send(&tx, &job(1)).await?;
            q.send(&tx, &job(2)).await?;
            q.send_after(&tx, &job(3), Duration::from_secs(3600))
                .await?;
            q.send_at(&tx, &job(4), SystemTime::now() + Duration::from_secs(3600))
                .await?;
            Ok(())
        })
        .await
        .expect("send");
    assert_eq!(count(client, "SELECT COUNT(*) FROM pgjobs").await, 4);
    let cancelled = client
        .read_write_transaction()
        .build()
        .run(async |tx| Ok(q.cancel(&tx, &4).await?))
        .await
        .expect("cancel")
        .result;
    assert!(cancelled, "the scheduled message was there to cancel");
    assert_eq!(
        count(
            client,
            "SELECT COUNT(*) FROM pgjobs WHERE deliver_time > CURRENT_TIMESTAMP"
        )
        .await,
        1,
        "send_after scheduled job 3 in the future"
    );

    let mut receiver = Receiver::<PgJob>::builder(db.database())
        .with_settings(
            ReceiveSettings::default()
                .with_max_duration(Duration::from_secs(10))
                .with_renew_interval(Duration::from_millis(500)),
        )
        .build()
        .expect("a receiver for a PostgreSQL queue");
    let mut seen = Vec::new();
    for _ in 0..2 {
        let delivery = tokio::time::timeout(Duration::from_secs(30), receiver.next())
            .await
            .expect("a delivery within 30 s")
            .expect("the stream ended")
            .expect("a delivery, not an error");
        let message = delivery.message().expect("decodes").clone();
        assert!(delivery.deliver_time().is_some());
        assert!(delivery.lease_expiry() > SystemTime::now());
        // Held while the receiver renews its lease through spanner.renewlease_pgjobs.
        let renewed = receiver.stats().renewed;
        eventually(Duration::from_secs(30), "a lease renewal", || {
            let done = receiver.stats().renewed > renewed;
            async move { done }
        })
        .await;
        assert_eq!(receiver.stats().renew_errors, 0);
        delivery.ack_now().await.expect("ack");
        seen.push(message);
    }
    seen.sort_by_key(|j| j.id);
    assert_eq!(seen, [job(1), job(2)]);
    assert_eq!(
        count(client, "SELECT COUNT(*) FROM pgjobs").await,
        1,
        "only the scheduled job is left"
    );
}
