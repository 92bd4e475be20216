//! Issue 3's acceptance: "Another language's official client can create a queue, send,
//! receive, renew and ack against it." Python's `google-cloud-spanner` (3.71.0) has
//! `send`/`ack` on transactions and batches; `python_client.py` exercises them.

use std::path::PathBuf;
use std::time::Duration;

use crate::support::*;

/// The Python interpreter: `$PYTHON`, else `python3`.
fn python() -> String {
    std::env::var("PYTHON")
        .ok()
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| "python3".to_owned())
}

const INSTALL: &str = "pip install google-cloud-spanner==3.71.0";

#[tokio::test]
async fn python_official_client_creates_sends_receives_renews_and_acks() {
    let python = python();
    let probe = tokio::process::Command::new(&python)
        .args([
            "-c",
            "import google.cloud.spanner as s, google.cloud.spanner_v1.batch as b; \
             assert hasattr(b._BatchBase, 'send') and hasattr(b._BatchBase, 'ack'); \
             print(s.__version__)",
        ])
        .output()
        .await;
    let version = match probe {
        Ok(out) if out.status.success() => String::from_utf8_lossy(&out.stdout).trim().to_owned(),
        Ok(out) => panic!(
            "the cross-language check needs Python's official Spanner client with queue \
             support; install it with `{INSTALL}` (interpreter `{python}`, override with \
             PYTHON=...): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ),
        Err(e) => panic!(
            "the cross-language check needs a Python interpreter `{python}` (set PYTHON) with \
             `{INSTALL}`: {e}"
        ),
    };

    let db = database(&[ORDERS]).await;
    let parts: Vec<&str> = db.path().split('/').collect();
    let [_, project, _, instance, _, database_id] = parts[..] else {
        panic!("unexpected database path {}", db.path());
    };
    let script =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/conformance/python_client.py");
    let run = tokio::process::Command::new(&python)
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
