//! The examples are tested code: each binary runs here as a user runs it, and must finish within
//! a bound with the summary it promises.
//!
//! - `demo` (the README's first command) sets up its own emulator, exactly as on a fresh machine.
//! - The workflow examples run against this process's emulator (`SPANNER_EMULATOR_HOST`), each
//!   in a database of its own, so that they share one emulator's start-up (or against the Cloud
//!   Spanner instance the tests use).
//! - `worker` (the README's "Writing a worker") runs against a database this test prepares, is
//!   stopped with Ctrl-C (SIGINT), and must have applied every order.
//! - `metrics` serves a Prometheus scrape that must match what its worker did.
//! - `web` serves HTTP on a free loopback port, takes orders, and stops on SIGTERM.

use std::io::Write as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

use google_cloud_spanner::statement::Statement;
use spanner_queues::{Database, QueueMessage, TransactionSettings};
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

/// How long a workflow example may take (the slowest waits out one 10-second lease).
const EXAMPLE_LIMIT: Duration = Duration::from_secs(300);

/// Where this test process's databases live: `Some(Some(host:port))` for an emulator (started
/// on first use), `Some(None)` for Cloud Spanner (the examples inherit its variables), `None`
/// without a backend (the harness said why).
async fn backend() -> Option<Option<String>> {
    let db = spanner_queues_testing::setup()
        .without_sdk_tables()
        .create()
        .await?;
    Some(db.emulator_host().map(str::to_owned))
}

/// Points `command` at this process's backend; `false` (after saying why) when there is none.
async fn use_backend(command: &mut Command, name: &str) -> bool {
    let Some(host) = backend().await else {
        assert!(!require_emulator(), "no backend for the {name} example");
        notice(&format!("SKIPPING the {name} example: no Spanner backend"));
        return false;
    };
    match host {
        Some(host) => command.env("SPANNER_EMULATOR_HOST", host),
        None => command.env_remove("SPANNER_EMULATOR_HOST"),
    };
    true
}

/// Runs example `binary` to its end on this process's backend; checks that it succeeds within
/// [`EXAMPLE_LIMIT`] and prints every `promised` line. Returns its stdout.
async fn run_example(name: &str, binary: &str, promised: &[&str]) -> Option<String> {
    let mut command = Command::new(binary);
    if !use_backend(&mut command, name).await {
        return None;
    }
    let started = Instant::now();
    let run = command
        .env_remove("SPANNER_DATABASE")
        .env("PORT", "0")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(EXAMPLE_LIMIT, run)
        .await
        .unwrap_or_else(|_| panic!("the {name} example did not finish within {EXAMPLE_LIMIT:?}"))
        .unwrap_or_else(|e| panic!("run the {name} example: {e}"));
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "the {name} example failed ({}):\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );
    for line in promised {
        assert!(
            stdout.contains(line),
            "the {name} example's output lacks {line:?}:\n{stdout}"
        );
    }
    notice(&format!("{name} example: {:.1?}", started.elapsed()));
    Some(stdout)
}

#[tokio::test]
async fn refund_approval_pays_each_approved_refund_once() {
    run_example(
        "refund_approval",
        env!("CARGO_BIN_EXE_refund_approval"),
        &[
            "refund 1 approved; escalation cancelled: true",
            "refund 2 approved; escalation cancelled: true",
            "refund 3: escalated (no payment)",
            "2 refunds paid",
            "each approved refund paid exactly once; the unapproved one escalated",
        ],
    )
    .await;
}

#[tokio::test]
async fn agent_followup_survives_a_kill_between_the_call_and_the_ack() {
    run_example(
        "agent_followup",
        env!("CARGO_BIN_EXE_agent_followup"),
        &[
            "crashing before the ack",
            "worker killed: tickets created 1, ticket ids recorded 0, tasks queued 1",
            "ticket service calls 2, tickets created 1",
            "duplicates: 0",
        ],
    )
    .await;
}

#[tokio::test]
async fn agent_pipeline_moves_every_document_through_every_stage() {
    run_example(
        "agent_pipeline",
        env!("CARGO_BIN_EXE_agent_pipeline"),
        &[
            "document 1: billing  -> route to billing",
            "document 2: bug      -> open an incident",
            "document 3: question -> answer from the FAQ",
            "acked per stage (parse, classify, act): [6, 6, 6]",
            "every document went through every stage exactly once",
        ],
    )
    .await;
}

#[tokio::test]
async fn notification_fanout_notifies_each_event_once_in_batches() {
    run_example(
        "notification_fanout",
        env!("CARGO_BIN_EXE_notification_fanout"),
        &[
            "200 shipment events sent",
            "notifications: 200 for 200 events",
            "pushes: 195 delivered",
            "195 acked, 5 dead-lettered",
            "dead letter (13): device token unregistered",
            "every event notified once; 195 pushes, duplicates: 0; 5 unregistered devices \
             dead-lettered alone",
        ],
    )
    .await;
}

#[tokio::test]
async fn long_job_resumes_from_its_checkpoint_after_a_crash() {
    let Some(stdout) = run_example(
        "long_job",
        env!("CARGO_BIN_EXE_long_job"),
        &[
            "checkpoint 5/20",
            "worker process killed after checkpoint 5",
            "at shard 5 of 20",
            "checkpoint 20/20",
            "job done: shards processed 20 of 20",
            "resumed from the checkpoint; each shard processed once",
        ],
    )
    .await
    else {
        return;
    };
    // The second worker never went back to a shard the first one had finished.
    for shard in 1..=5 {
        let line = format!("checkpoint {shard}/20");
        assert_eq!(
            stdout.matches(&format!("{line}:")).count(),
            1,
            "{line} was reached more than once:\n{stdout}"
        );
    }
}

#[tokio::test]
async fn polling_migration_loses_and_repeats_nothing() {
    run_example(
        "polling_migration",
        env!("CARGO_BIN_EXE_polling_migration"),
        &[
            "before: 10 sign-ups in the outbox, the poller sent 4",
            "migration: 6 pending outbox rows moved into the queue",
            "e-mails sent 13 of 13 [(\"poller\", 4), (\"queue\", 9)]; worker acked 9",
            "every sign-up e-mailed exactly once across the migration",
        ],
    )
    .await;
}

#[tokio::test]
async fn metrics_example_scrape_matches_the_worker() {
    run_example(
        "metrics",
        env!("CARGO_BIN_EXE_metrics"),
        &[
            "metrics on http://127.0.0.1:",
            r#"spanner_queues_dead_lettered_total{queue="Invoices"} 1"#,
            r#"spanner_queues_queue_depth{queue="Invoices"} 0"#,
            "spanner_queues_handler_seconds_bucket: 13 buckets",
            "the scrape matches the worker's counts",
        ],
    )
    .await;
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
        "summary:\n  sent:          36\n  processed:     36\n  retried:       1\n  \
         dead-lettered: 0\n  duplicates:    0\n",
        "every order e-mailed exactly once",
    ] {
        assert!(
            stdout.contains(promised),
            "the demo's summary lacks {promised:?}:\n{stdout}"
        );
    }
    // Not on a terminal: progress as plain lines on stderr, ending with the totals.
    for progress in ["placing: 36/36 orders placed", "e-mailing: 36/36 e-mailed"] {
        assert!(
            stderr.contains(progress),
            "the demo's progress lacks {progress:?}:\n{stderr}"
        );
    }
}

/// The worker example's message type, as a producer elsewhere would declare it.
#[derive(QueueMessage, Debug, Clone)]
#[queue(name = "OrderEmails")]
struct OrderEmail {
    #[queue(key)]
    order_id: i64,
    to: String,
}

const ORDERS: i64 = 12;

async fn count(db: &Database, sql: &str) -> i64 {
    let mut rows = db
        .client()
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
        // The emulator runs one read-write transaction per database at a time: be patient.
        .with_transaction_settings(TransactionSettings::default().with_max_attempts(100))
        .create()
        .await
    else {
        return; // no backend: the harness said why
    };
    let orders = Statement::builder(
        "INSERT INTO Orders (OrderId, Status) \
         SELECT id, 'placed' FROM UNNEST(GENERATE_ARRAY(1, @n)) AS id",
    )
    .add_param("n", ORDERS)
    .build();
    db.transaction()
        .run(move |tx| async move {
            tx.execute_update(orders).await?;
            Ok(())
        })
        .await
        .expect("place the orders");
    let emails: Vec<OrderEmail> = (1..=ORDERS)
        .map(|order_id| OrderEmail {
            order_id,
            to: format!("customer{order_id}@example.com"),
        })
        .collect();
    let sent = db
        .transaction()
        .run(move |tx| async move { tx.send_many(&emails).await })
        .await
        .expect("send the e-mails");
    assert_eq!(sent.len(), ORDERS as usize);

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
        let emailed = count(&db, "SELECT COUNT(*) FROM Orders WHERE Status = 'emailed'").await;
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

#[tokio::test]
async fn web_takes_orders_and_stops_on_sigterm() {
    use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, BufReader};

    let mut command = Command::new(env!("CARGO_BIN_EXE_web"));
    if !use_backend(&mut command, "web").await {
        return;
    }
    let mut web = command
        .env_remove("SPANNER_DATABASE")
        .env("PORT", "0")
        .env("NO_COLOR", "1")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start the web example");
    let pid = web.id().expect("the web example's pid");
    let mut stderr = web.stderr.take().expect("stderr");
    let logs = tokio::spawn(async move {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text).await;
        text
    });
    let mut stdout = BufReader::new(web.stdout.take().expect("stdout")).lines();
    let listening = tokio::time::timeout(EXAMPLE_LIMIT, async {
        while let Some(line) = stdout.next_line().await.expect("read stdout") {
            if let Some(url) = line.strip_prefix("listening on ") {
                return url.to_owned();
            }
        }
        panic!("the web example ended before listening");
    })
    .await
    .expect("the web example did not listen in time");

    let http = reqwest::Client::new();
    const PLACED: i64 = 5;
    for id in 1..=PLACED {
        let reply = http
            .post(format!("{listening}/orders/{id}"))
            .json(&serde_json::json!({ "email": format!("customer{id}@example.com") }))
            .send()
            .await
            .expect("POST an order");
        assert_eq!(reply.status(), 201, "placing order {id}");
    }
    // A repeated request changes nothing.
    let again = http
        .post(format!("{listening}/orders/3"))
        .json(&serde_json::json!({ "email": "someone@example.com" }))
        .send()
        .await
        .expect("POST an order again");
    assert_eq!(again.status(), 409, "placing order 3 twice");

    let started = Instant::now();
    for id in 1..=PLACED {
        loop {
            let status = http
                .get(format!("{listening}/orders/{id}"))
                .send()
                .await
                .expect("GET an order")
                .text()
                .await
                .expect("the order's status");
            if status.trim() == "emailed" {
                break;
            }
            assert!(
                started.elapsed() < WORKER_LIMIT,
                "order {id} still {status:?} after {WORKER_LIMIT:?}"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    // SIGTERM, as a container platform stops it.
    let term = std::process::Command::new("kill")
        .args(["-TERM", &pid.to_string()])
        .status()
        .expect("run kill");
    assert!(term.success(), "kill -TERM {pid}: {term}");
    let mut rest = Vec::new();
    let status = tokio::time::timeout(SHUTDOWN_LIMIT, async {
        while let Some(line) = stdout.next_line().await.expect("read stdout") {
            rest.push(line);
        }
        web.wait().await.expect("wait for the web example")
    })
    .await
    .unwrap_or_else(|_| panic!("the web example did not stop within {SHUTDOWN_LIMIT:?}"));
    let logs = logs.await.unwrap_or_default();
    assert!(
        status.success(),
        "the web example failed ({status}):\n{}\n{logs}",
        rest.join("\n")
    );
    assert!(
        rest.iter()
            .any(|l| l.starts_with(&format!("shut down: worker acked {PLACED},"))),
        "no 'shut down: worker acked {PLACED}' line after SIGTERM:\n{}\n{logs}",
        rest.join("\n")
    );
}
