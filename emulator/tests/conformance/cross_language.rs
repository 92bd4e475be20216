//! Issue 3's acceptance: "Another language's official client can create a queue, send,
//! receive, renew and ack against it." Python's `google-cloud-spanner` (3.71.0) has
//! `send`/`ack` on transactions and batches; `python_client.py` exercises them on a GoogleSQL
//! database and `python_client_pg.py` on a PostgreSQL-dialect one. The tests install that client
//! themselves (see `python.rs`).

use std::path::PathBuf;
use std::time::Duration;

use google_cloud_spanner::statement::Statement;
use spanner_queues_testing::TestDatabase;

use crate::python;
use crate::support::*;

#[tokio::test]
async fn python_official_client_creates_sends_receives_renews_and_acks() {
    let Some(client) = python_client().await else {
        return;
    };
    let db = database(&[ORDERS]).await;
    run_script(&client, &db, "python_client.py", &[]).await;

    // What Python did is visible from Rust.
    let ddl = db.ddl().await.expect("GetDatabaseDdl");
    assert!(
        ddl.iter().any(|s| s.starts_with("CREATE QUEUE PyTasks")),
        "{ddl:#?}"
    );
    assert_eq!(ids(&db, "Orders").await, vec![1]);
    assert_eq!(ids(&db, "PyTasks").await, vec![2]);
    assert!(ids(&db, "PyBlobs").await.is_empty());
}

/// The same client on a PostgreSQL-dialect database: queue DDL in PostgreSQL syntax, sends,
/// `spanner.receive_<q>`, `spanner.renewlease_<q>`, acks by mutation and by DML with `$n`, and a
/// DML send scheduled with `now() + interval '5 minutes'` (not received early, then cancelled).
#[tokio::test]
async fn python_official_client_on_a_postgresql_database() {
    let Some(client) = python_client().await else {
        return;
    };
    let db = crate::postgres::pg_database(&[
        "CREATE TABLE orders (id bigint NOT NULL, note text, PRIMARY KEY (id))",
    ])
    .await;
    run_script(&client, &db, "python_client_pg.py", &[]).await;

    let ddl = db.ddl().await.expect("GetDatabaseDdl");
    assert!(
        ddl.iter().any(|s| s.starts_with("CREATE QUEUE pytasks")),
        "{ddl:#?}"
    );
    assert_eq!(pg_ids(&db, "pytasks").await, vec![2]);
    assert!(pg_ids(&db, "pyblobs").await.is_empty());
}

/// Batch writes through the same client: `database.mutation_groups()` with sends, acks and
/// table writes, groups failing alone (see `python_batch_write.py`), in both dialects.
#[tokio::test]
async fn python_official_client_batch_write_mutation_groups() {
    let Some(client) = python_client().await else {
        return;
    };
    let db = database(&[SIMPLE_QUEUE, ORDERS]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "queued before")]).await;
    run_script(
        &client,
        &db,
        "python_batch_write.py",
        &["--dialect", "googlesql"],
    )
    .await;
    // What Python did is visible from Rust.
    assert_eq!(ids(&db, "Orders").await, [10, 11, 13]);
    assert_eq!(ids(&db, "Q").await, [10]);

    let db = crate::postgres::pg_database(&[
        crate::postgres::PG_SIMPLE_QUEUE,
        "CREATE TABLE orders (id bigint NOT NULL, note text, PRIMARY KEY (id))",
    ])
    .await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("q", 1, "queued before")]).await;
    run_script(
        &client,
        &db,
        "python_batch_write.py",
        &["--dialect", "postgresql"],
    )
    .await;
    assert_eq!(pg_ids(&db, "orders").await, [10, 11, 13]);
    assert_eq!(pg_ids(&db, "q").await, [10]);
}

/// The `id` column of PostgreSQL table or queue `name`, in order.
async fn pg_ids(db: &TestDatabase, name: &str) -> Vec<i64> {
    let sql = format!("SELECT id FROM {name} ORDER BY id");
    query(db.client(), Statement::builder(&sql).build())
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", chain(&e)))
        .iter()
        .map(|r| r.get::<i64>("id").expect("id"))
        .collect()
}

/// The official Python client, installed on first use; `None` (with a printed reason) when it
/// cannot be had and the emulator is not required.
async fn python_client() -> Option<python::PythonClient> {
    match python::official_client().await {
        Ok(client) => Some(client),
        Err(reason) if !require_emulator() => {
            python::notice(&format!(
                "SKIPPING: Python's official Spanner client is not available: {reason} \
                 (set SPANNER_QUEUES_REQUIRE_EMULATOR=1 to make this an error)"
            ));
            None
        }
        Err(reason) => panic!("Python's official Spanner client is not available: {reason}"),
    }
}

/// Runs `script` (next to this file) against `db` with `args` after the database's; fails
/// unless it exits 0 with a JSON summary whose `ok` is true.
async fn run_script(client: &python::PythonClient, db: &TestDatabase, script: &str, args: &[&str]) {
    let python = &client.interpreter;
    let version = &client.version;
    let parts: Vec<&str> = db.path().split('/').collect();
    let [_, project, _, instance, _, database_id] = parts[..] else {
        panic!("unexpected database path {}", db.path());
    };
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/conformance")
        .join(script);
    let run = tokio::process::Command::new(python)
        .arg(&path)
        .args([
            "--project",
            project,
            "--instance",
            instance,
            "--database",
            database_id,
        ])
        .args(args)
        .env(
            "SPANNER_EMULATOR_HOST",
            db.emulator_host().expect("an emulator"),
        )
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(300), run)
        .await
        .expect("the Python client run did not finish")
        .expect("run the Python client");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{script} (google-cloud-spanner {version}) failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let summary: serde_json::Value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON summary from {script}:\n{stdout}"));
    assert_eq!(summary["ok"], serde_json::json!(true), "{summary}");
    println!("{script}, python google-cloud-spanner {version}: {summary}");
}

/// `SPANNER_QUEUES_REQUIRE_EMULATOR=1` (as in CI): what the test needs must be there.
fn require_emulator() -> bool {
    std::env::var("SPANNER_QUEUES_REQUIRE_EMULATOR").is_ok_and(|v| v == "1" || v == "true")
}
