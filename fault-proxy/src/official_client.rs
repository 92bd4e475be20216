//! What the official Rust client (`google-cloud-spanner`) reports for each fault on a commit,
//! against the official emulator. Opt-in (`cargo test -- --ignored official_client`): it starts
//! `emulator_main` from the installed Cloud SDK on a free port in 19200-19299.

use std::fmt::Write as _;
use std::future::Future;
use std::time::{Duration, Instant};

use tokio::net::TcpStream;
use tonic::Code;

use crate::*;

use google_cloud_spanner::client::{DatabaseClient, Spanner};
use google_cloud_spanner::statement::Statement;
use googleapis_tonic_google_spanner_admin_database_v1::google::spanner::admin::database::v1 as admin;
use tonic::transport::{Channel, Endpoint};

const PROJECT: &str = "fault-proxy";
const INSTANCE: &str = "fault-proxy-instance";

/// The instance-admin messages we need (no tonic crate for that API is in the workspace).
#[derive(Clone, PartialEq, prost::Message)]
struct CreateInstanceRequest {
    #[prost(string, tag = "1")]
    parent: String,
    #[prost(string, tag = "2")]
    instance_id: String,
    #[prost(message, optional, tag = "3")]
    instance: Option<Instance>,
}

#[derive(Clone, PartialEq, prost::Message)]
struct Instance {
    #[prost(string, tag = "1")]
    name: String,
    #[prost(string, tag = "2")]
    config: String,
    #[prost(string, tag = "3")]
    display_name: String,
    #[prost(int32, tag = "5")]
    node_count: i32,
}

/// Any response: only success matters.
#[derive(Clone, PartialEq, prost::Message)]
struct Ignored {}

struct Emulator {
    addr: String,
    _child: tokio::process::Child,
}

async fn emulator_binary() -> Option<std::path::PathBuf> {
    let output = tokio::process::Command::new("gcloud")
        .args(["info", "--format=value(installation.sdk_root)"])
        .output()
        .await
        .ok()?;
    let root = String::from_utf8(output.stdout).ok()?;
    let path = std::path::Path::new(root.trim()).join("bin/cloud_spanner_emulator/emulator_main");
    path.exists().then_some(path)
}

async fn start_emulator() -> Option<Emulator> {
    let binary = emulator_binary().await?;
    let port =
        (19200..19300).find(|port| std::net::TcpListener::bind(("127.0.0.1", *port)).is_ok())?;
    let addr = format!("127.0.0.1:{port}");
    let child = tokio::process::Command::new(binary)
        .args(["--host_port", &addr])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .ok()?;
    // Readiness probe of an external process: poll its port.
    let deadline = Instant::now() + Duration::from_secs(30);
    while TcpStream::connect(&addr).await.is_err() {
        assert!(
            Instant::now() < deadline,
            "emulator did not start on {addr}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Some(Emulator {
        addr,
        _child: child,
    })
}

async fn create_instance(channel: Channel) {
    let mut grpc = tonic::client::Grpc::new(channel);
    grpc.ready().await.expect("ready");
    let request = CreateInstanceRequest {
        parent: format!("projects/{PROJECT}"),
        instance_id: INSTANCE.into(),
        instance: Some(Instance {
            name: format!("projects/{PROJECT}/instances/{INSTANCE}"),
            config: format!("projects/{PROJECT}/instanceConfigs/emulator-config"),
            display_name: "fault proxy".into(),
            node_count: 1,
        }),
    };
    grpc.unary(
        tonic::Request::new(request),
        http::uri::PathAndQuery::from_static(
            "/google.spanner.admin.instance.v1.InstanceAdmin/CreateInstance",
        ),
        tonic_prost::ProstCodec::<CreateInstanceRequest, Ignored>::default(),
    )
    .await
    .expect("create instance");
}

async fn create_database(channel: Channel, id: &str) -> String {
    let mut admin = admin::database_admin_client::DatabaseAdminClient::new(channel);
    let parent = format!("projects/{PROJECT}/instances/{INSTANCE}");
    admin
        .create_database(admin::CreateDatabaseRequest {
            parent: parent.clone(),
            create_statement: format!("CREATE DATABASE `{id}`"),
            extra_statements: vec![
                "CREATE TABLE T (Id INT64 NOT NULL, V STRING(MAX)) PRIMARY KEY (Id)".into(),
            ],
            ..Default::default()
        })
        .await
        .expect("create database");
    let name = format!("{parent}/databases/{id}");
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let database = admin
            .get_database(admin::GetDatabaseRequest { name: name.clone() })
            .await
            .expect("get database")
            .into_inner();
        if database.state == admin::database::State::Ready as i32 {
            return name;
        }
        assert!(Instant::now() < deadline, "database {name} not ready");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
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
#[ignore = "starts the official emulator (Cloud SDK) on a port in 19200-19299"]
async fn official_client_commit_errors() {
    let Some(emulator) = start_emulator().await else {
        eprintln!("skipped: emulator_main not found (gcloud info) or no free port");
        return;
    };
    let direct = Endpoint::from_shared(format!("http://{}", emulator.addr))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect to the emulator");
    create_instance(direct.clone()).await;

    let proxy = FaultProxy::start(emulator.addr.clone())
        .await
        .expect("proxy");
    let spanner = Spanner::builder()
        .with_endpoint(format!("http://{}", proxy.addr()))
        .build()
        .await
        .expect("official client");

    let commit = Method::path("/google.spanner.v1.Spanner/Commit");
    let mut cases = vec![
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
    ];
    cases.push(Case {
        label: "Stall, commit attempt timeout 1s",
        injection: Some(Fault::Stall.into()),
        commit_timeout: Some(Duration::from_secs(1)),
    });

    let mut table = String::from(
        "| case | result | is_timeout | is_exhausted | is_io | is_transport | is_connect | status().code | Commit RPCs | applied | time |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
    );
    let mut violations = Vec::new();
    for (index, case) in cases.iter().enumerate() {
        // A database per case: the emulator allows one read-write transaction per database
        // at a time, and a dropped commit leaves its transaction open.
        let name = create_database(direct.clone(), &format!("db{index}")).await;
        let db = spanner
            .database_client(name)
            .build()
            .await
            .expect("database client");
        let armed = case
            .injection
            .map(|injection| proxy.inject(commit.clone(), injection));
        let before = proxy.stats().requests_to("/Commit");
        let id = i64::try_from(index).expect("small") + 1;

        let mut runner = db.read_write_transaction();
        if let Some(timeout) = case.commit_timeout {
            runner = runner.with_commit_attempt_timeout(timeout);
        }
        let started = Instant::now();
        let result = tokio::time::timeout(
            Duration::from_secs(60),
            runner.build().run(async |tx| {
                let statement = Statement::builder("INSERT INTO T (Id, V) VALUES (@id, 'x')")
                    .add_param("id", id)
                    .build();
                tx.execute_update(statement).await?;
                Ok(())
            }),
        )
        .await
        .expect("transaction finished");
        let elapsed = started.elapsed();
        let commits = proxy.stats().requests_to("/Commit") - before;
        if let Some(armed) = &armed {
            within_secs(10, armed.fired()).await.expect("fault fired");
        }
        let applied = row_count(&db, id).await;

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

        // Exactly one transaction was applied, whatever the client saw.
        if applied != 1 && !(result.is_err() && applied == 0) {
            violations.push(row);
        }
    }
    eprintln!("{table}");

    // Streaming reads (ExecuteStreamingSql), cut before the first message.
    let streaming = Method::path("/google.spanner.v1.Spanner/ExecuteStreamingSql");
    let name = create_database(direct.clone(), "streams").await;
    let db = spanner
        .database_client(name)
        .build()
        .await
        .expect("database client");
    db.read_write_transaction()
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
            let mut rows = db
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

async fn within_secs<F: Future>(seconds: u64, future: F) -> F::Output {
    tokio::time::timeout(Duration::from_secs(seconds), future)
        .await
        .expect("in time")
}
