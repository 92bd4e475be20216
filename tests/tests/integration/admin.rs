//! Schema set-up without the admin crates: `SchemaSetup::apply` / `check` on a `Database`, and
//! `Database::builder(..).create()`.

use spanner_queues::{Database, Dialect, Error, QueueMessage, SchemaSetup};
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
    let before = setup.check(&db).await.expect_err("nothing exists yet");
    assert!(
        matches!(&before, Error::QueueNotFound { queue, .. } if queue.as_str() == "SetupTasks"),
        "{before:?}"
    );

    setup.apply(&db).await.expect("apply");
    // Idempotent: a second run finds everything and changes nothing.
    setup.apply(&db).await.expect("apply again");
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
    db.send(&SetupTask {
        id: 1,
        body: "hello".into(),
    })
    .await
    .expect("send");

    let drift = SchemaSetup::new()
        .with_queue::<SetupTaskByName>()
        .check(&db)
        .await
        .expect_err("a STRING key against an INT64 column");
    assert!(matches!(drift, Error::SchemaDrift { .. }), "{drift:?}");
    let missing = SchemaSetup::new()
        .with_queue::<Ghost>()
        .check(&db)
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
        .apply(&db)
        .await
        .expect("queue only");
    let tables = full_setup().check(&db).await.expect_err("no worker tables");
    assert!(
        tables
            .to_string()
            .contains("SchemaSetup::with_worker_tables"),
        "{tables}"
    );
    let markers = SchemaSetup::new()
        .with_commit_markers()
        .check(&db)
        .await
        .expect_err("no marker table");
    assert!(
        markers.to_string().contains("SpannerQueuesCommitMarkers"),
        "{markers}"
    );
}

#[tokio::test]
async fn database_create_on_an_emulator_creates_the_instance_and_the_database() {
    let db = db_or_skip!();
    if matches!(db.mode(), Mode::CloudSpanner { .. }) {
        eprintln!("SKIPPING: creates an emulator instance; the backend is Cloud Spanner");
        return;
    }
    let project = db.path().split('/').nth(1).expect("project").to_owned();
    let suffix = &uuid::Uuid::new_v4().simple().to_string()[..12];
    let path = format!("projects/{project}/instances/setup-{suffix}/databases/d{suffix}");
    let create = |path: &str| {
        Database::builder(path)
            .with_spanner(db.spanner().clone())
            .with_dialect(Dialect::GoogleSql)
            .create()
    };
    let created = create(&path).await.expect("instance and database");
    full_setup().apply(&created).await.expect("the set-up");
    // Another handle on it, made by `connect`, finds everything.
    let connected = Database::builder(&path)
        .with_spanner(db.spanner().clone())
        .connect()
        .await
        .expect("connect");
    assert_eq!(connected.dialect(), Dialect::GoogleSql);
    full_setup()
        .check(&connected)
        .await
        .expect("everything there");
    connected
        .send(&SetupTask {
            id: 7,
            body: "x".into(),
        })
        .await
        .expect("send");
    // The instance exists now: a second database on it skips the instance step.
    let second = format!("projects/{project}/instances/setup-{suffix}/databases/e{suffix}");
    create(&second).await.expect("second database");
    // A database that exists is Spanner's ALREADY_EXISTS, not silently reused.
    let again = create(&second).await.expect_err("exists");
    assert_eq!(
        again.code(),
        Some(spanner_queues::error::Code::AlreadyExists),
        "{again:?}"
    );
    // A malformed path fails before any call.
    let bad = create("orders").await.expect_err("malformed");
    assert!(
        matches!(
            &bad,
            Error::InvalidSetting {
                setting: "database",
                ..
            }
        ),
        "{bad:?}"
    );
    assert!(
        bad.to_string()
            .contains("projects/P/instances/I/databases/D"),
        "{bad}"
    );
}
