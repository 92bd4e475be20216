//! What the official Rust client (`google-cloud-spanner`) reports for each fault on a commit and
//! on a streaming read, through the proxy in front of the test harness's emulator (or whatever
//! backend the harness provides; faults need an emulator, so a real instance skips).
//!
//! It prints one table row per case (run with `--nocapture` to read them; the crate docs'
//! "What clients report" comes from these tables) and asserts what must hold whatever the client
//! saw: a transaction is applied exactly once, or not at all when the client got an error; a
//! read that succeeds returns every row.

use std::fmt::Write as _;
use std::future::Future;
use std::time::{Duration, Instant};

use google_cloud_spanner::client::{DatabaseClient, Spanner};
use google_cloud_spanner::statement::Statement;
use spanner_queues_fault_proxy::{Code, Ending, Fault, FaultProxy, Injection, Method};
use spanner_queues_testing::TestDatabase;

const TABLE: &str = "CREATE TABLE T (Id INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (Id)";

/// A fresh database with table `T`, or `None` (after saying why) when the harness has no
/// backend and none is required, or the backend is not an emulator.
async fn database() -> Option<TestDatabase> {
    let db = spanner_queues_testing::setup()
        .without_sdk_tables()
        .with_ddl([TABLE])
        .create()
        .await?;
    if db.emulator_host().is_none() {
        eprintln!(
            "SKIPPING: the backend is real Cloud Spanner; faults are injected between the \
             client and an emulator only"
        );
        return None;
    }
    Some(db)
}

/// A client of `db` that goes through `proxy`.
async fn client(spanner: &Spanner, db: &TestDatabase) -> DatabaseClient {
    spanner
        .database_client(db.path())
        .build()
        .await
        .expect("database client through the proxy")
}

async fn row_count(db: &DatabaseClient, id: i64) -> i64 {
    let statement = Statement::builder("SELECT COUNT(*) FROM T WHERE Id = @id")
        .add_param("id", id)
        .build();
    let mut rows = db
        .single_use()
        .build()
        .execute_query(statement)
        .await
        .expect("query");
    let row = rows.next().await.expect("one row").expect("row");
    row.get::<i64>(0).expect("count")
}

/// Guards every wait so a broken proxy fails the test instead of hanging it.
async fn within_secs<F: Future>(seconds: u64, future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(seconds), future)
        .await
        .expect("in time")
}

struct Case {
    label: &'static str,
    injection: Option<Injection>,
    commit_timeout: Option<Duration>,
}

fn case(label: &'static str, injection: impl Into<Injection>) -> Case {
    Case {
        label,
        injection: Some(injection.into()),
        commit_timeout: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn official_client_commit_and_read_errors() {
    let Some(first) = database().await else {
        return;
    };
    let host = first.emulator_host().expect("an emulator").to_owned();
    let proxy = FaultProxy::start(host).await.expect("proxy");
    // A plaintext endpoint: the client uses anonymous credentials.
    let spanner = Spanner::builder()
        .with_endpoint(format!("http://{}", proxy.addr()))
        .build()
        .await
        .expect("official client");

    let commit = Method::path("/google.spanner.v1.Spanner/Commit");
    let cases = vec![
        Case {
            label: "no fault",
            injection: None,
            commit_timeout: None,
        },
        case("DropRequest (reset conn)", Fault::DropRequest),
        case(
            "DropRequest (RST_STREAM)",
            Fault::DropRequest.with_ending(Ending::ResetStream),
        ),
        case(
            "DropRequest (UNAVAILABLE)",
            Fault::DropRequest.with_ending(Ending::Status(Code::Unavailable)),
        ),
        case("ResetConnection", Fault::ResetConnection),
        case("DropResponse (reset conn)", Fault::DropResponse),
        case(
            "DropResponse (RST_STREAM)",
            Fault::DropResponse.with_ending(Ending::ResetStream),
        ),
        case(
            "DropResponse (UNAVAILABLE)",
            Fault::DropResponse.with_ending(Ending::Status(Code::Unavailable)),
        ),
        case(
            "DropResponse (DEADLINE_EXCEEDED)",
            Fault::DropResponse.with_ending(Ending::Status(Code::DeadlineExceeded)),
        ),
        case(
            "DropResponse (INTERNAL)",
            Fault::DropResponse.with_ending(Ending::Status(Code::Internal)),
        ),
        case(
            "DelayResponseThenDrop(200ms)",
            Fault::DelayResponseThenDrop(Duration::from_millis(200)),
        ),
        Case {
            label: "Stall, commit attempt timeout 1s",
            injection: Some(Fault::Stall.into()),
            commit_timeout: Some(Duration::from_secs(1)),
        },
    ];

    let mut table = String::from(
        "| case | result | is_timeout | is_exhausted | is_io | is_transport | is_connect | status().code | Commit RPCs | applied | time |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut violations = Vec::new();
    let mut first = Some(first);
    for (index, case) in cases.iter().enumerate() {
        // A database per case: the emulator allows one read-write transaction per database at
        // a time, and a dropped commit leaves its transaction open.
        let db = match first.take() {
            Some(db) => db,
            None => database()
                .await
                .expect("the same backend as the first case"),
        };
        let client = client(&spanner, &db).await;
        let armed = case
            .injection
            .map(|injection| proxy.inject(commit.clone(), injection));
        let before = proxy.stats().requests_to("/Commit");
        let id = i64::try_from(index).expect("small") + 1;

        let mut runner = client.read_write_transaction();
        if let Some(timeout) = case.commit_timeout {
            runner = runner.with_commit_attempt_timeout(timeout);
        }
        let started = Instant::now();
        let result = within_secs(
            60,
            runner.build().run(async |tx| {
                let statement = Statement::builder("INSERT INTO T (Id, V) VALUES (@id, 'x')")
                    .add_param("id", id)
                    .build();
                tx.execute_update(statement).await?;
                Ok(())
            }),
        )
        .await;
        let elapsed = started.elapsed();
        let commits = proxy.stats().requests_to("/Commit") - before;
        if let Some(armed) = &armed {
            within_secs(10, armed.fired()).await.expect("fault fired");
        }
        let applied = row_count(&client, id).await;

        let row = match &result {
            Ok(_) => format!(
                "| {} | Ok | | | | | | | {commits} | {applied} | {elapsed:.1?} |",
                case.label
            ),
            Err(error) => format!(
                "| {} | Err: {} | {} | {} | {} | {} | {} | {:?} | {commits} | {applied} | {elapsed:.1?} |",
                case.label,
                error.to_string().replace('|', "/"),
                error.is_timeout(),
                error.is_exhausted(),
                error.is_io(),
                error.is_transport(),
                error.is_connect(),
                error.status().map(|status| status.code),
            ),
        };
        let _ = writeln!(table, "{row}");

        // Exactly one transaction was applied, whatever the client saw; none only if it saw an
        // error.
        if applied != 1 && !(result.is_err() && applied == 0) {
            violations.push(row);
        }
    }
    eprintln!("{table}");

    // Streaming reads (ExecuteStreamingSql), cut before the first message.
    let streaming = Method::path("/google.spanner.v1.Spanner/ExecuteStreamingSql");
    let db = database()
        .await
        .expect("the same backend as the first case");
    let client = client(&spanner, &db).await;
    client
        .read_write_transaction()
        .build()
        .run(async |tx| {
            tx.execute_update("INSERT INTO T (Id, V) VALUES (1, 'x'), (2, 'y')")
                .await?;
            Ok(())
        })
        .await
        .expect("seed rows");
    let mut table = String::from(
        "| query case | result | is_timeout | is_io | is_transport | status().code | ExecuteStreamingSql RPCs |\n|---|---|---|---|---|---|---|\n",
    );
    for (label, injection) in [
        (
            "DropRequest (reset conn)",
            Injection::from(Fault::DropRequest),
        ),
        (
            "ResetMidStream(0) (reset conn)",
            Fault::ResetMidStream { after_messages: 0 }.into(),
        ),
        (
            "ResetMidStream(0) (RST_STREAM)",
            Fault::ResetMidStream { after_messages: 0 }.with_ending(Ending::ResetStream),
        ),
        (
            "ResetMidStream(0) (UNAVAILABLE)",
            Fault::ResetMidStream { after_messages: 0 }
                .with_ending(Ending::Status(Code::Unavailable)),
        ),
    ] {
        let armed = proxy.inject(streaming.clone(), injection);
        let before = proxy.stats().requests_to("/ExecuteStreamingSql");
        let result = within_secs(60, async {
            let mut rows = client
                .single_use()
                .build()
                .execute_query("SELECT Id FROM T ORDER BY Id")
                .await?;
            let mut ids = Vec::new();
            while let Some(row) = rows.next().await {
                ids.push(
                    row?.get::<i64>(0)
                        .map_err(google_cloud_spanner::Error::deser)?,
                );
            }
            Ok::<_, google_cloud_spanner::Error>(ids)
        })
        .await;
        within_secs(10, armed.fired()).await.expect("fault fired");
        let rpcs = proxy.stats().requests_to("/ExecuteStreamingSql") - before;
        let row = match &result {
            Ok(ids) => format!("| {label} | Ok {ids:?} | | | | | {rpcs} |"),
            Err(error) => format!(
                "| {label} | Err: {} | {} | {} | {} | {:?} | {rpcs} |",
                error.to_string().replace('|', "/"),
                error.is_timeout(),
                error.is_io(),
                error.is_transport(),
                error.status().map(|status| status.code),
            ),
        };
        let _ = writeln!(table, "{row}");
        if let Ok(ids) = &result {
            assert_eq!(ids, &[1, 2], "{row}");
        }
    }
    eprintln!("{table}");
    eprintln!("proxy stats: {:?}", proxy.stats());
    assert!(violations.is_empty(), "{violations:#?}");
}
