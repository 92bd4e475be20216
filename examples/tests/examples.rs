//! The examples are tested code: each binary runs here as a user runs it, and must finish within
//! a bound with the summary it promises.
//!
//! - `demo` (the README's first command) sets up its own emulator, exactly as on a fresh machine.
//! - `worker` (the README's "Writing a worker") runs against a database this test prepares, is
//!   stopped with Ctrl-C (SIGINT), and must have applied every order.

use std::io::Write as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::statement::Statement;
use spanner_queues::{Producer, QueueMessage, TransactionSettings};
use tokio::process::Command;

/// How long the demo may take, start-up of its emulator included (about 20 s on 2 idle cores).
const DEMO_LIMIT: Duration = Duration::from_secs(300);
/// How long the worker may take to e-mail every order.
const WORKER_LIMIT: Duration = Duration::from_secs(120);
/// How long the worker may take to stop after Ctrl-C.
const SHUTDOWN_LIMIT: Duration = Duration::from_secs(60);

fn require_emulator() -> bool {
    std::env::var("SPANNER_QUEUES_REQUIRE_EMULATOR").is_ok_and(|v| v == "1" || v == "true")
}

fn notice(text: &str) {
    let _ = writeln!(std::io::stderr(), "examples test: {text}");
}

#[tokio::test]
async fn demo_runs_to_its_summary() {
    let run = Command::new(env!("CARGO_BIN_EXE_demo"))
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(DEMO_LIMIT, run)
        .await
        .unwrap_or_else(|_| panic!("the demo did not finish within {DEMO_LIMIT:?}"))
        .expect("run the demo");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    if !out.status.success() && stderr.contains("no Spanner backend") && !require_emulator() {
        notice(&format!(
            "SKIPPING: the demo found no Spanner backend (set \
             SPANNER_QUEUES_REQUIRE_EMULATOR=1 to make this an error): {}",
            stderr.trim()
        ));
        return;
    }
    assert!(
        out.status.success(),
        "the demo failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    for promised in [
        "placed 36 orders; 36 e-mails queued",
        "orders e-mailed: 36 of 36; messages left: 0; dead letters: 0",
        "order 7 (its first attempt failed): 1 row e-mailed",
        "every order e-mailed exactly once",
    ] {
        assert!(
            stdout.contains(promised),
            "the demo's summary lacks {promised:?}:\n{stdout}"
        );
    }
}

/// The worker example's message type, as a producer elsewhere would declare it.
#[derive(QueueMessage, Debug)]
#[queue(name = "OrderEmails")]
struct OrderEmail {
    #[queue(key)]
    order_id: i64,
    to: String,
}

const ORDERS: i64 = 12;

async fn count(db: &DatabaseClient, sql: &str) -> i64 {
    let mut rows = db
        .single_use()
        .build()
        .execute_query(Statement::builder(sql))
        .await
        .expect("query");
    let row = rows.next().await.expect("one row").expect("row");
    row.get::<i64>(0).expect("a count")
}

#[tokio::test]
async fn worker_applies_every_order_and_stops_on_ctrl_c() {
    let Some(db) = spanner_queues_testing::setup()
        .with_queue::<OrderEmail>()
        .with_ddl([
            "CREATE TABLE Orders (OrderId INT64 NOT NULL, Status STRING(20) NOT NULL) \
             PRIMARY KEY (OrderId)",
        ])
        .create()
        .await
    else {
        return; // no backend: the harness said why
    };
    let client = db.client().clone();
    // The emulator runs one read-write transaction per database at a time: be patient.
    let settings = TransactionSettings::default().with_max_attempts(100);
    let orders = Statement::builder(
        "INSERT INTO Orders (OrderId, Status) \
         SELECT id, 'placed' FROM UNNEST(GENERATE_ARRAY(1, @n)) AS id",
    )
    .add_param("n", ORDERS)
    .build();
    spanner_queues::transaction::builder(&client)
        .with_settings(settings.clone())
        .run(move |tx| {
            let orders = orders.clone();
            async move {
                tx.execute_update(orders).await?;
                Ok(())
            }
        })
        .await
        .expect("place the orders");
    let emails: Vec<OrderEmail> = (1..=ORDERS)
        .map(|order_id| OrderEmail {
            order_id,
            to: format!("customer{order_id}@example.com"),
        })
        .collect();
    let sent = Producer::new(client.clone())
        .with_settings(settings)
        .send_many(&emails)
        .await
        .expect("send the e-mails");
    assert_eq!(sent, emails.len());

    let mut command = Command::new(env!("CARGO_BIN_EXE_worker"));
    command
        .env("SPANNER_DATABASE", db.path())
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    match db.emulator_host() {
        Some(host) => command.env("SPANNER_EMULATOR_HOST", host),
        None => command.env_remove("SPANNER_EMULATOR_HOST"),
    };
    let worker = command.spawn().expect("start the worker example");
    let pid = worker.id().expect("the worker's pid");

    let started = Instant::now();
    loop {
        let emailed = count(
            &client,
            "SELECT COUNT(*) FROM Orders WHERE Status = 'emailed'",
        )
        .await;
        if emailed == ORDERS {
            break;
        }
        assert!(
            started.elapsed() < WORKER_LIMIT,
            "{emailed} of {ORDERS} orders e-mailed after {WORKER_LIMIT:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    db.assert_queue_empty::<OrderEmail>().await;
    db.assert_no_dead_letters::<OrderEmail>().await;

    // Ctrl-C, as a user stops it.
    let kill = std::process::Command::new("kill")
        .args(["-INT", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(kill.success(), "kill -INT {pid}: {kill}");
    let out = tokio::time::timeout(SHUTDOWN_LIMIT, worker.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("the worker did not stop within {SHUTDOWN_LIMIT:?} of Ctrl-C"))
        .expect("wait for the worker");
    let logs = strip_ansi(&format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    ));
    assert!(
        out.status.success(),
        "the worker failed ({}):\n{logs}",
        out.status
    );
    let stopped = logs
        .lines()
        .find(|l| l.contains("worker stopped") && l.contains("acked="))
        .unwrap_or_else(|| panic!("no 'worker stopped acked=…' summary:\n{logs}"));
    assert!(
        stopped.contains(&format!("acked={ORDERS}")),
        "the summary does not count {ORDERS} acks: {stopped}"
    );
}

/// The text without ANSI colour sequences (`ESC [ … m`).
fn strip_ansi(text: &str) -> String {
    let mut plain = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            plain.push(c);
        }
    }
    plain
}
