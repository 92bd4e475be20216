//! Issue 3's acceptance: "Another language's official client can create a queue, send,
//! receive, renew and ack against it." Python's `google-cloud-spanner` (3.71.0) has
//! `send`/`ack` on transactions and batches; `python_client.py` exercises them. The test installs
//! that client itself (see `python.rs`).

use std::path::PathBuf;
use std::time::Duration;

use crate::python;
use crate::support::*;

#[tokio::test]
async fn python_official_client_creates_sends_receives_renews_and_acks() {
    // Installs the client into a virtual environment under the target directory on first use.
    let client = match python::official_client().await {
        Ok(client) => client,
        Err(reason) if !require_emulator() => {
            python::notice(&format!(
                "SKIPPING: Python's official Spanner client is not available: {reason} \
                 (set SPANNER_QUEUES_REQUIRE_EMULATOR=1 to make this an error)"
            ));
            return;
        }
        Err(reason) => panic!("Python's official Spanner client is not available: {reason}"),
    };
    let python = &client.interpreter;
    let version = &client.version;

    let db = database(&[ORDERS]).await;
    let parts: Vec<&str> = db.path().split('/').collect();
    let [_, project, _, instance, _, database_id] = parts[..] else {
        panic!("unexpected database path {}", db.path());
    };
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/python_client.py");
    let run = tokio::process::Command::new(python)
        .arg(&script)
        .args([
            "--project",
            project,
            "--instance",
            instance,
            "--database",
            database_id,
        ])
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
        "python_client.py (google-cloud-spanner {version}) failed: {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    let summary: serde_json::Value = stdout
        .lines()
        .last()
        .and_then(|l| serde_json::from_str(l).ok())
        .unwrap_or_else(|| panic!("no JSON summary from python_client.py:\n{stdout}"));
    assert_eq!(summary["ok"], serde_json::json!(true), "{summary}");
    println!("python google-cloud-spanner {version}: {summary}");

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

/// `SPANNER_QUEUES_REQUIRE_EMULATOR=1` (as in CI): what the test needs must be there.
fn require_emulator() -> bool {
    std::env::var("SPANNER_QUEUES_REQUIRE_EMULATOR").is_ok_and(|v| v == "1" || v == "true")
}
