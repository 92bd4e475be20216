//! Schema set-up without the admin crates: `admin::SchemaSetup`, `admin::create_database*`.

use spanner_queues::admin::{self, SchemaSetup};
use spanner_queues::{Dialect, Error, Producer, QueueMessage};
use spanner_queues_tests::db_or_skip;
use spanner_queues_tests::harness::Mode;

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "SetupTasks")]
struct SetupTask {
    #[queue(key)]
    id: i64,
    body: String,
}

/// Same queue as [`SetupTask`] with another key type: drift.
#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "SetupTasks")]
struct SetupTaskByName {
    #[queue(key)]
    name: String,
    body: String,
}

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "NeverCreated")]
struct Ghost {
    #[queue(key)]
    id: i64,
}

fn full_setup() -> SchemaSetup {
    SchemaSetup::new()
        .with_queue::<SetupTask>()
        .with_worker_tables()
        .with_commit_markers()
}

#[tokio::test]
async fn schema_setup_creates_what_is_missing_then_checks_every_object() {
    let db = db_or_skip!();
    let setup = full_setup();
    // Before: the check names the missing queue.
    let before = setup
        .check(db.client())
        .await
        .expect_err("nothing exists yet");
    assert!(
        matches!(&before, Error::QueueNotFound { queue, .. } if queue.as_str() == "SetupTasks"),
        "{before:?}"
    );

    setup.ensure(db.spanner(), db.path()).await.expect("ensure");
    // Idempotent: a second run finds everything and changes nothing.
    setup
        .ensure(db.spanner(), db.path())
        .await
        .expect("ensure again");
    let ddl = db.ddl().await.expect("ddl").join("\n");
    for object in [
        "SetupTasks",
        "SpannerQueuesAttempts",
        "SpannerQueuesDeadLetters",
        "SpannerQueuesCommitMarkers",
    ] {
        assert_eq!(
            ddl.matches(&format!(" {object} (")).count(),
            1,
            "{object} once in:\n{ddl}"
        );
    }
    // The queue works.
    Producer::new(db.client().clone())
        .send(&SetupTask {
            id: 1,
            body: "hello".into(),
        })
        .await
        .expect("send");

    let drift = SchemaSetup::new()
        .with_queue::<SetupTaskByName>()
        .check(db.client())
        .await
        .expect_err("a STRING key against an INT64 column");
    assert!(matches!(drift, Error::SchemaDrift { .. }), "{drift:?}");
    let missing = SchemaSetup::new()
        .with_queue::<Ghost>()
        .check(db.client())
        .await
        .expect_err("missing queue");
    assert!(
        matches!(missing, Error::QueueNotFound { .. }),
        "{missing:?}"
    );
}

#[tokio::test]
async fn a_missing_worker_table_or_marker_table_fails_the_check_naming_the_fix() {
    let db = db_or_skip!();
    SchemaSetup::new()
        .with_queue::<SetupTask>()
        .ensure(db.spanner(), db.path())
        .await
        .expect("queue only");
    let tables = full_setup()
        .check(db.client())
        .await
        .expect_err("no worker tables");
    assert!(
        tables
            .to_string()
            .contains("schema_statements(Dialect::GoogleSql)"),
        "{tables}"
    );
    let markers = SchemaSetup::new()
        .with_commit_markers()
        .check(db.client())
        .await
        .expect_err("no marker table");
    assert!(
        markers.to_string().contains("SpannerQueuesCommitMarkers"),
        "{markers}"
    );
}

#[tokio::test]
async fn create_database_on_emulator_creates_the_instance_and_the_database() {
    let db = db_or_skip!();
    if matches!(db.mode(), Mode::CloudSpanner { .. }) {
        eprintln!("SKIPPING: creates an emulator instance; the backend is Cloud Spanner");
        return;
    }
    let project = db.path().split('/').nth(1).expect("project").to_owned();
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let database = format!("projects/{project}/instances/setup-{suffix}/databases/d{suffix}");
    admin::create_database_on_emulator(db.spanner(), &database, Dialect::GoogleSql, &full_setup())
        .await
        .expect("instance and database");
    let client = db
        .spanner()
        .database_client(&database)
        .build()
        .await
        .expect("client");
    full_setup().check(&client).await.expect("everything there");
    Producer::new(client)
        .send(&SetupTask {
            id: 7,
            body: "x".into(),
        })
        .await
        .expect("send");
    // The instance exists now: a second database on it skips the instance step.
    let second = format!("projects/{project}/instances/setup-{suffix}/databases/e{suffix}");
    admin::create_database_on_emulator(
        db.spanner(),
        &second,
        Dialect::GoogleSql,
        &SchemaSetup::new(),
    )
    .await
    .expect("second database");
    // A database that exists is Spanner's ALREADY_EXISTS, not silently reused.
    let again = admin::create_database(
        db.spanner(),
        &second,
        Dialect::GoogleSql,
        &SchemaSetup::new(),
    )
    .await
    .expect_err("exists");
    assert_eq!(
        again.code(),
        Some(spanner_queues::error::Code::AlreadyExists),
        "{again:?}"
    );
    // A malformed path fails before any call.
    let bad = admin::create_database(
        db.spanner(),
        "orders",
        Dialect::GoogleSql,
        &SchemaSetup::new(),
    )
    .await
    .expect_err("malformed");
    assert!(
        bad.to_string()
            .contains("projects/P/instances/I/databases/D"),
        "{bad}"
    );
}
