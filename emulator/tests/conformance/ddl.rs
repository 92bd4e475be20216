//! Queue DDL (reference §1): `CREATE QUEUE` forms and errors, `CREATE DATABASE` extra statements
//! and `UpdateDatabaseDdl` batches mixing queues and tables, interleaving, row deletion
//! policies, options, `ALTER QUEUE`, `DROP QUEUE`, and `GetDatabaseDdl` over REST and gRPC.

use std::time::Duration;

use google_cloud_gax::error::rpc::Code;
use google_cloud_lro::Poller as _;
use google_cloud_spanner::statement::Statement;
use googleapis_tonic_google_spanner_admin_database_v1::google::spanner::admin::database::v1 as admin_pb;
use spanner_queues_testing::{HarnessError, TestDatabase};

use crate::support::*;

const GUARD: Duration = Duration::from_secs(60);

const USERS: &str = "CREATE TABLE Users (UserId INT64 NOT NULL) PRIMARY KEY (UserId)";
const USER_TASKS: &str = "CREATE QUEUE UserTasks (
  UserId     INT64 NOT NULL,
  MessageId  STRING(36) NOT NULL, -- UUID recommended
  Payload    BYTES(MAX) NOT NULL  -- Also: Proto, JSON, String are possible.
) PRIMARY KEY (UserId, MessageId),
INTERLEAVE IN PARENT Users ON DELETE CASCADE";
/// The form of the client libraries' integration tests and samples (trailing comma) [C].
const Q1: &str = "CREATE QUEUE Q1 ( Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL, ) PRIMARY KEY (Id), OPTIONS (receive_mode = 'PULL')";
/// The examples page's queue (S4), in GoogleSQL, with a trailing comma.
const APPLICATION_TASKS: &str = "CREATE QUEUE ApplicationTasks (
  TaskType STRING(50) NOT NULL,
  TaskId   STRING(36) NOT NULL,
  Payload  BYTES(MAX) NOT NULL,
) PRIMARY KEY (TaskType, TaskId)";

/// Whitespace-free text, to compare DDL independently of how it is laid out.
fn squash(sql: &str) -> String {
    // Backquotes too: Spanner may quote names (proto type names) when it prints DDL.
    sql.chars()
        .filter(|c| !c.is_whitespace() && *c != '`')
        .collect()
}

/// The statement of `GetDatabaseDdl` that creates `name` (a table or queue).
fn statement_for<'a>(ddl: &'a [String], kind: &str, name: &str) -> &'a str {
    let prefix = squash(&format!("CREATE {kind} {name}("));
    ddl.iter()
        .find(|s| squash(s).starts_with(&prefix))
        .unwrap_or_else(|| panic!("no `CREATE {kind} {name}` in {ddl:#?}"))
}

/// The error behind a failed harness DDL call.
fn harness_error_code(error: &HarnessError) -> (Option<Code>, String) {
    match error {
        HarnessError::Spanner { source, .. } => (code(source), message(source)),
        other => panic!("not a Spanner error: {}", chain(other)),
    }
}

async fn ddl(db: &TestDatabase) -> Vec<String> {
    db.ddl().await.expect("GetDatabaseDdl")
}

/// The documented forms are accepted in `CreateDatabase`; `GetDatabaseDdl` shows them as
/// `CREATE QUEUE` statements, with no internal table or column, and its output recreates the
/// same schema.
#[tokio::test]
async fn documented_create_queue_forms_round_trip_through_get_database_ddl() {
    let db = database(&[USERS, USER_TASKS, Q1, APPLICATION_TASKS]).await;
    let shown = ddl(&db).await;
    assert_eq!(
        shown.len(),
        4,
        "one statement per object, nothing internal: {shown:#?}"
    );

    let user_tasks = squash(statement_for(&shown, "QUEUE", "UserTasks"));
    for part in [
        "UserIdINT64NOTNULL",
        "MessageIdSTRING(36)NOTNULL",
        "PayloadBYTES(MAX)NOTNULL",
        "PRIMARYKEY(UserId,MessageId)",
        "INTERLEAVEINPARENTUsersONDELETECASCADE",
    ] {
        assert!(
            user_tasks.contains(part),
            "{part} missing from {user_tasks}"
        );
    }
    let q1 = squash(statement_for(&shown, "QUEUE", "Q1"));
    assert!(q1.contains("receive_mode='PULL'"), "{q1}");
    statement_for(&shown, "QUEUE", "ApplicationTasks");
    statement_for(&shown, "TABLE", "Users");
    for statement in &shown {
        // DeliverTime is created automatically and must not be declared [C]: showing it would
        // make the output unusable as input.
        assert!(
            !statement.contains("DeliverTime"),
            "internal column shown: {statement}"
        );
    }

    // The same statements as `CreateDatabase` extra statements make the same schema.
    let documented = [USERS, USER_TASKS, Q1, APPLICATION_TASKS];
    assert_eq!(
        created_ddl(&db, &documented).await.expect("CreateDatabase"),
        shown
    );

    // The output is valid input and describes the same schema.
    let statements: Vec<&str> = shown.iter().map(String::as_str).collect();
    let copy = database(&statements).await;
    assert_eq!(ddl(&copy).await, shown);
    assert_eq!(
        created_ddl(&db, &statements).await.expect("CreateDatabase"),
        shown
    );

    // And over the raw gRPC admin API.
    assert_eq!(grpc_ddl(&db).await, shown);
}

async fn grpc_admin(
    db: &TestDatabase,
) -> admin_pb::database_admin_client::DatabaseAdminClient<tonic::transport::Channel> {
    let channel = tonic::transport::Channel::from_shared(db.endpoint().expect("emulator"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    admin_pb::database_admin_client::DatabaseAdminClient::new(channel)
}

async fn grpc_ddl(db: &TestDatabase) -> Vec<String> {
    grpc_admin(db)
        .await
        .get_database_ddl(admin_pb::GetDatabaseDdlRequest {
            database: db.path().to_owned(),
        })
        .await
        .expect("gRPC GetDatabaseDdl")
        .into_inner()
        .statements
}

/// `UpdateDatabaseDdl` through the raw gRPC admin API, waiting for its operation.
#[tokio::test]
async fn queue_ddl_over_the_grpc_admin_api() {
    let db = database(&[]).await;
    let mut admin = grpc_admin(&db).await;
    let mut operation = admin
        .update_database_ddl(admin_pb::UpdateDatabaseDdlRequest {
            database: db.path().to_owned(),
            statements: vec![SIMPLE_QUEUE.to_owned(), ORDERS.to_owned()],
            ..admin_pb::UpdateDatabaseDdlRequest::default()
        })
        .await
        .expect("gRPC UpdateDatabaseDdl")
        .into_inner();
    let channel = tonic::transport::Channel::from_shared(db.endpoint().expect("emulator"))
        .expect("endpoint")
        .connect()
        .await
        .expect("connect");
    let mut operations = googleapis_tonic_google_spanner_admin_database_v1::google::longrunning::operations_client::OperationsClient::new(channel);
    let started = std::time::Instant::now();
    while !operation.done {
        assert!(
            started.elapsed() < GUARD,
            "the DDL operation never finished"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
        operation = operations
            .get_operation(
                googleapis_tonic_google_spanner_admin_database_v1::google::longrunning::GetOperationRequest {
                    name: operation.name.clone(),
                },
            )
            .await
            .expect("GetOperation")
            .into_inner();
    }
    use googleapis_tonic_google_spanner_admin_database_v1::google::longrunning::operation::Result as OpResult;
    assert!(
        !matches!(operation.result, Some(OpResult::Error(_))),
        "{:?}",
        operation.result
    );
    let shown = grpc_ddl(&db).await;
    assert_eq!(shown.len(), 2, "{shown:#?}");
    statement_for(&shown, "QUEUE", "Q");
    assert_eq!(shown, ddl(&db).await, "REST and gRPC admin agree");

    // An invalid queue statement fails the same way over gRPC.
    let status = admin
        .update_database_ddl(admin_pb::UpdateDatabaseDdlRequest {
            database: db.path().to_owned(),
            statements: vec![
                "CREATE QUEUE Bad (Id INT64 NOT NULL, DeliverTime TIMESTAMP, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Id)".to_owned(),
            ],
            ..admin_pb::UpdateDatabaseDdlRequest::default()
        })
        .await;
    match status {
        Err(status) => assert_mentions(status.message(), "DeliverTime"),
        Ok(op) => {
            let op = op.into_inner();
            // Validation may also surface as a failed operation.
            assert!(
                matches!(op.result, Some(OpResult::Error(_))) || !op.done,
                "an invalid CREATE QUEUE succeeded: {op:?}"
            );
        }
    }
    assert_eq!(grpc_ddl(&db).await.len(), 2);
}

#[tokio::test]
async fn create_queue_if_not_exists() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let before = ddl(&db).await;
    db.apply_ddl([
        "CREATE QUEUE IF NOT EXISTS Q (Other STRING(10) NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Other)",
    ])
    .await
    .expect("IF NOT EXISTS on an existing queue is a no-op");
    assert_eq!(ddl(&db).await, before);

    let error = db
        .apply_ddl([SIMPLE_QUEUE])
        .await
        .expect_err("creating an existing queue again");
    let (code, message) = harness_error_code(&error);
    assert!(
        matches!(
            code,
            Some(Code::FailedPrecondition | Code::AlreadyExists | Code::InvalidArgument)
        ),
        "{code:?} {message}"
    );

    db.apply_ddl([
        "CREATE QUEUE IF NOT EXISTS Fresh (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)",
    ])
    .await
    .expect("IF NOT EXISTS creates a missing queue");
    let shown = ddl(&db).await;
    assert_eq!(shown.len(), 2);
    statement_for(&shown, "QUEUE", "Fresh");
}

/// BYTES(n), STRING(n) and JSON payloads [C, S22], each round-tripping through Send and
/// RECEIVE.
#[tokio::test]
async fn bytes_string_and_json_payloads() {
    let db = database(&[
        "CREATE QUEUE Qb (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Id)",
        "CREATE QUEUE Qb10 (Id INT64 NOT NULL, Payload BYTES(10) NOT NULL) PRIMARY KEY (Id)",
        "CREATE QUEUE Qs (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)",
        "CREATE QUEUE Qs5 (Id INT64 NOT NULL, Payload STRING(5) NOT NULL) PRIMARY KEY (Id)",
        "CREATE QUEUE Qj (Id INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Id)",
    ])
    .await;
    let raw = Raw::connect(&db).await;
    let blob: Vec<u8> = vec![0, 1, 2, 254, 255, b'\n'];
    commit_ok(
        &raw,
        vec![
            send("Qb", vec![int(1)], Some(bytes(&blob)), None),
            send("Qb10", vec![int(1)], Some(bytes(b"0123456789")), None),
            send("Qs", vec![int(1)], Some(text("héllo, wörld")), None),
            send("Qs5", vec![int(1)], Some(text("short")), None),
            send(
                "Qj",
                vec![int(1)],
                Some(text(r#"{"order": 7, "items": ["a", "b"]}"#)),
                None,
            ),
        ],
    )
    .await;

    let d = receive_n(&db, "Qb", 1, GUARD).await.remove(0);
    assert_eq!(d.row.get::<Vec<u8>>("Payload").expect("bytes"), blob);
    let d = receive_n(&db, "Qb10", 1, GUARD).await.remove(0);
    assert_eq!(
        d.row.get::<Vec<u8>>("Payload").expect("bytes"),
        b"0123456789"
    );
    let d = receive_n(&db, "Qs", 1, GUARD).await.remove(0);
    assert_eq!(d.payload_text(), "héllo, wörld");
    let d = receive_n(&db, "Qs5", 1, GUARD).await.remove(0);
    assert_eq!(d.payload_text(), "short");
    let d = receive_n(&db, "Qj", 1, GUARD).await.remove(0);
    let json: serde_json::Value = serde_json::from_str(&d.payload_text()).expect("a JSON payload");
    assert_eq!(json, serde_json::json!({"order": 7, "items": ["a", "b"]}));

    // Lengths are enforced as for any column.
    for mutation in [
        send("Qb10", vec![int(2)], Some(bytes(b"01234567890")), None),
        send("Qs5", vec![int(2)], Some(text("toolong")), None),
    ] {
        let status = raw
            .commit(vec![mutation])
            .await
            .expect_err("payload too long");
        assert!(
            matches!(
                status.code(),
                tonic::Code::FailedPrecondition
                    | tonic::Code::InvalidArgument
                    | tonic::Code::OutOfRange
            ),
            "{status:?}"
        );
    }
    // JSON by DML too.
    dml1(
        &db,
        r#"INSERT INTO Qj (Id, Payload) VALUES (2, JSON '{"b": 2}')"#,
    )
    .await
    .expect("JSON INSERT");
    assert_eq!(ids(&db, "Qj").await, vec![1, 2]);
}

/// A PROTO payload [C, S22] needs a proto bundle (`CREATE PROTO BUNDLE` with descriptors).
#[tokio::test]
async fn proto_payload() {
    use prost::Message as _;
    use prost_types::field_descriptor_proto::{Label, Type};
    let descriptors = prost_types::FileDescriptorSet {
        file: vec![prost_types::FileDescriptorProto {
            name: Some("conformance/task.proto".into()),
            package: Some("conformance".into()),
            syntax: Some("proto3".into()),
            message_type: vec![prost_types::DescriptorProto {
                name: Some("Task".into()),
                field: vec![prost_types::FieldDescriptorProto {
                    name: Some("name".into()),
                    json_name: Some("name".into()),
                    number: Some(1),
                    label: Some(Label::Optional as i32),
                    r#type: Some(Type::String as i32),
                    ..prost_types::FieldDescriptorProto::default()
                }],
                ..prost_types::DescriptorProto::default()
            }],
            ..prost_types::FileDescriptorProto::default()
        }],
    }
    .encode_to_vec();
    let db = database(&[]).await;
    db.admin()
        .update_database_ddl()
        .set_database(db.path())
        .set_statements([
            "CREATE PROTO BUNDLE (conformance.Task)",
            "CREATE QUEUE Tasks (Id INT64 NOT NULL, Payload conformance.Task NOT NULL) PRIMARY KEY (Id)",
        ])
        .set_proto_descriptors(descriptors)
        .poller()
        .until_done()
        .await
        .unwrap_or_else(|e| panic!("a queue with a PROTO payload: {}", chain(&e)));
    let shown = ddl(&db).await;
    let tasks = squash(statement_for(&shown, "QUEUE", "Tasks"));
    assert!(tasks.contains("Payloadconformance.TaskNOTNULL"), "{tasks}");

    // The payload is the serialized message, base64 on the wire: field 1 = "build".
    let message = [0x0a, 5, b'b', b'u', b'i', b'l', b'd'];
    let raw = Raw::connect(&db).await;
    commit_ok(
        &raw,
        vec![send("Tasks", vec![int(1)], Some(bytes(&message)), None)],
    )
    .await;
    let d = receive_n(&db, "Tasks", 1, GUARD).await.remove(0);
    let value = d
        .row
        .get::<google_cloud_spanner::value::Value>("Payload")
        .expect("Payload");
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(value.as_str().expect("base64 text"))
        .expect("base64");
    assert_eq!(decoded, message);
}

/// "parent row deletion cascades to its messages" (issue 3; reference §1.2 example).
#[tokio::test]
async fn interleaved_queue_follows_its_parent_on_delete() {
    let db = database(&[
        USERS,
        USER_TASKS,
        "CREATE TABLE Accounts (AccountId INT64 NOT NULL) PRIMARY KEY (AccountId)",
        "CREATE QUEUE AccountTasks (AccountId INT64 NOT NULL, TaskId INT64 NOT NULL, \
         Payload STRING(MAX) NOT NULL) PRIMARY KEY (AccountId, TaskId), \
         INTERLEAVE IN PARENT Accounts ON DELETE NO ACTION",
    ])
    .await;
    let raw = Raw::connect(&db).await;
    let user_task = |user: i64, id: &str| {
        send(
            "UserTasks",
            vec![int(user), text(id)],
            Some(bytes(id.as_bytes())),
            None,
        )
    };
    commit_ok(
        &raw,
        vec![
            insert("Users", &["UserId"], vec![int(1)]),
            insert("Users", &["UserId"], vec![int(2)]),
            insert("Users", &["UserId"], vec![int(3)]),
            user_task(1, "a"),
            user_task(1, "b"),
            user_task(2, "c"),
            user_task(3, "d"),
            insert("Accounts", &["AccountId"], vec![int(1)]),
            send("AccountTasks", vec![int(1), int(1)], Some(text("x")), None),
        ],
    )
    .await;

    // A message needs its parent row, as an interleaved row does.
    let status = raw
        .commit(vec![user_task(9, "orphan")])
        .await
        .expect_err("a message without its parent row");
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");

    // ON DELETE CASCADE: by DML and by mutation.
    assert_eq!(
        dml1(&db, "DELETE FROM Users WHERE UserId = 1")
            .await
            .expect("delete user"),
        1
    );
    commit_ok(&raw, vec![delete("Users", vec![int(3)])]).await;
    let remaining = query(
        db.client(),
        Statement::builder("SELECT UserId, MessageId FROM UserTasks ORDER BY UserId, MessageId")
            .build(),
    )
    .await
    .expect("read the queue");
    assert_eq!(remaining.len(), 1);
    assert_eq!(remaining[0].get::<i64>("UserId").expect("UserId"), 2);
    let got = receive_all(&db, &receive_sql("UserTasks", "2s", None)).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].row.get::<i64>("UserId").expect("UserId"), 2);

    // ON DELETE NO ACTION: the parent cannot go while it has messages.
    let error = dml1(&db, "DELETE FROM Accounts WHERE AccountId = 1")
        .await
        .expect_err("NO ACTION with a child message");
    assert_eq!(
        code(&error),
        Some(Code::FailedPrecondition),
        "{}",
        chain(&error)
    );

    // ALTER QUEUE … SET ON DELETE CASCADE.
    db.apply_ddl(["ALTER QUEUE AccountTasks SET ON DELETE CASCADE"])
        .await
        .expect("ALTER QUEUE SET ON DELETE");
    let shown = ddl(&db).await;
    assert!(
        squash(statement_for(&shown, "QUEUE", "AccountTasks"))
            .contains("INTERLEAVEINPARENTAccountsONDELETECASCADE"),
        "{shown:#?}"
    );
    dml1(&db, "DELETE FROM Accounts WHERE AccountId = 1")
        .await
        .expect("CASCADE after ALTER");
    assert_eq!(
        scalar_i64(&db, "SELECT COUNT(*) FROM AccountTasks").await,
        0
    );

    // And back to NO ACTION.
    db.apply_ddl(["ALTER QUEUE AccountTasks SET ON DELETE NO ACTION"])
        .await
        .expect("ALTER QUEUE SET ON DELETE NO ACTION");
    let shown = ddl(&db).await;
    assert!(
        !squash(statement_for(&shown, "QUEUE", "AccountTasks")).contains("CASCADE"),
        "{shown:#?}"
    );

    // A table with an interleaved queue cannot be dropped.
    let error = db
        .apply_ddl(["DROP TABLE Users"])
        .await
        .expect_err("dropping the parent of a queue");
    let (code, message) = harness_error_code(&error);
    assert!(code.is_some(), "{message}");
}

/// `ROW DELETION POLICY` on `DeliverTime` [C that queues support TTL; the column is I], and the
/// grammar's clause order: interleave, policy, options.
#[tokio::test]
async fn row_deletion_policy_is_accepted_and_shown() {
    let db = database(&[
        USERS,
        "CREATE QUEUE Expiring (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id), \
         ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL 7 DAY)), \
         OPTIONS (receive_mode = 'PULL')",
        "CREATE QUEUE UserExpiring (UserId INT64 NOT NULL, Id INT64 NOT NULL, \
         Payload STRING(MAX) NOT NULL) PRIMARY KEY (UserId, Id), \
         INTERLEAVE IN PARENT Users ON DELETE CASCADE, \
         ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL 30 DAY))",
        SIMPLE_QUEUE,
    ])
    .await;
    let shown = ddl(&db).await;
    let expiring = squash(statement_for(&shown, "QUEUE", "Expiring"));
    assert!(
        expiring.contains("ROWDELETIONPOLICY(OLDER_THAN(DeliverTime,INTERVAL7DAY))"),
        "{expiring}"
    );
    let user_expiring = squash(statement_for(&shown, "QUEUE", "UserExpiring"));
    assert!(
        user_expiring.contains("ROWDELETIONPOLICY(OLDER_THAN(DeliverTime,INTERVAL30DAY))"),
        "{user_expiring}"
    );
    // ALTER QUEUE … ADD ROW DELETION POLICY [C, grammar truncated after ADD].
    db.apply_ddl([
        "ALTER QUEUE Q ADD ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL 1 DAY))",
    ])
    .await
    .expect("ALTER QUEUE ADD ROW DELETION POLICY");
    let shown = ddl(&db).await;
    assert!(
        squash(statement_for(&shown, "QUEUE", "Q"))
            .contains("ROWDELETIONPOLICY(OLDER_THAN(DeliverTime,INTERVAL1DAY))"),
        "{shown:#?}"
    );
    // The queue works as any other.
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Expiring", 1, "x")]).await;
    assert_eq!(receive_n(&db, "Expiring", 1, GUARD).await[0].id, Some(1));
}

/// All four queue options [C, S22]; `ALTER QUEUE … SET OPTIONS` [C, S22].
#[tokio::test]
async fn queue_options_are_accepted_shown_and_altered() {
    let db = database(&[
        "CREATE QUEUE Q (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id), \
         OPTIONS (receive_mode = 'PULL', disable_send = false, disable_delivery = false, \
         locality_group = 'hot')",
    ])
    .await;
    let shown = ddl(&db).await;
    let q = squash(statement_for(&shown, "QUEUE", "Q"));
    for part in [
        "receive_mode='PULL'",
        "disable_send=false",
        "disable_delivery=false",
        "locality_group='hot'",
    ] {
        assert!(q.contains(part), "{part} missing from {q}");
    }
    db.apply_ddl(["ALTER QUEUE Q SET OPTIONS (disable_send = true, disable_delivery = true)"])
        .await
        .expect("ALTER QUEUE SET OPTIONS");
    let q = squash(statement_for(&ddl(&db).await, "QUEUE", "Q"));
    assert!(q.contains("disable_send=true"), "{q}");
    assert!(q.contains("disable_delivery=true"), "{q}");
    assert!(
        q.contains("receive_mode='PULL'"),
        "options not named stay: {q}"
    );
    // Setting an option to NULL clears it, as for table options.
    db.apply_ddl(["ALTER QUEUE Q SET OPTIONS (disable_send = NULL)"])
        .await
        .expect("ALTER QUEUE SET OPTIONS (… = NULL)");
    let q = squash(statement_for(&ddl(&db).await, "QUEUE", "Q"));
    assert!(!q.contains("disable_send"), "{q}");
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "sendable again")]).await;

    let error = db
        .apply_ddl(["ALTER QUEUE Q SET OPTIONS (receive_mode = 'PUSH')"])
        .await
        .expect_err("a bad option value");
    let (_, message) = harness_error_code(&error);
    assert_mentions(&message, "receive_mode");
}

/// Invalid queues are refused with a message naming the problem (issue 3), in both
/// `UpdateDatabaseDdl` and `CreateDatabase`; nothing is created.
#[tokio::test]
async fn invalid_queue_definitions_are_refused_with_clear_messages() {
    let cases = [
        (
            "CREATE QUEUE Bad (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL, DeliverTime TIMESTAMP) PRIMARY KEY (Id)",
            "DeliverTime",
        ),
        (
            "CREATE QUEUE Bad (Id INT64 NOT NULL, Extra STRING(MAX), Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)",
            "Extra",
        ),
        (
            "CREATE QUEUE Bad (Id INT64 NOT NULL) PRIMARY KEY (Id)",
            "Payload",
        ),
        (
            "CREATE QUEUE Bad (Id INT64 NOT NULL, Payload INT64 NOT NULL) PRIMARY KEY (Id)",
            "Payload",
        ),
        (
            "CREATE QUEUE Bad (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id), OPTIONS (retention = 3)",
            "retention",
        ),
        (
            "CREATE QUEUE Bad (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id), OPTIONS (receive_mode = 'PUSH')",
            "receive_mode",
        ),
        (
            "CREATE QUEUE Bad (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id), OPTIONS (disable_send = 'yes')",
            "disable_send",
        ),
        (
            "CREATE QUEUE Bad (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL)",
            "PRIMARY",
        ),
        (
            "CREATE QUEUE Bad (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id), INTERLEAVE IN PARENT Missing",
            "Missing",
        ),
    ];
    let db = database(&[ORDERS]).await;
    for (statement, mentions) in cases {
        let error = db.apply_ddl([statement]).await.expect_err(statement);
        let (code, message) = harness_error_code(&error);
        assert!(
            matches!(
                code,
                Some(Code::InvalidArgument | Code::FailedPrecondition | Code::NotFound)
            ),
            "{statement}: {code:?} {message}"
        );
        assert_mentions(&message, mentions);

        match created_ddl(&db, &[ORDERS, statement]).await {
            Ok(shown) => panic!("CreateDatabase accepted {statement}: {shown:?}"),
            Err(error) => assert_mentions(&crate::support::message(&error), mentions),
        }
    }
    // Mixed with valid statements in one batch: the batch fails at the bad statement.
    let error = db
        .apply_ddl([
            SIMPLE_QUEUE,
            "CREATE QUEUE Bad (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL, DeliverTime TIMESTAMP) PRIMARY KEY (Id)",
        ])
        .await
        .expect_err("a batch with a bad queue");
    assert_mentions(&harness_error_code(&error).1, "DeliverTime");
    let shown = ddl(&db).await;
    assert!(
        !shown
            .iter()
            .any(|s| squash(s).starts_with("CREATEQUEUEBad")),
        "{shown:#?}"
    );

    // "Queues cannot be created in named schemas" [C, S3].
    db.apply_ddl(["CREATE SCHEMA sch"])
        .await
        .expect("CREATE SCHEMA");
    let error = db
        .apply_ddl(["CREATE QUEUE sch.Bad (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)"])
        .await
        .expect_err("a queue in a named schema");
    assert_mentions(&harness_error_code(&error).1, "schema");
}

/// Queues and tables mixed in `CreateDatabase` extra statements and in one `UpdateDatabaseDdl`
/// batch (issue 3).
#[tokio::test]
async fn batches_mix_queues_and_tables() {
    let mixed = [
        "CREATE TABLE A (Id INT64 NOT NULL, X STRING(MAX)) PRIMARY KEY (Id)",
        "CREATE QUEUE QA (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id)",
        "CREATE INDEX AByX ON A (X)",
        "CREATE TABLE B (Id INT64 NOT NULL, Sub INT64 NOT NULL) PRIMARY KEY (Id, Sub), INTERLEAVE IN PARENT A ON DELETE CASCADE",
        "CREATE QUEUE QB (Id INT64 NOT NULL, Sub INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id, Sub), INTERLEAVE IN PARENT A ON DELETE CASCADE",
    ];
    let db = database(&mixed).await;
    // As `CreateDatabase` extra statements: the same schema.
    let shown = ddl(&db).await;
    assert_eq!(shown.len(), 5, "{shown:#?}");
    assert_eq!(
        created_ddl(&db, &mixed).await.expect("CreateDatabase"),
        shown
    );
    db.apply_ddl([
        "CREATE TABLE C (Id INT64 NOT NULL) PRIMARY KEY (Id)",
        "CREATE QUEUE QC (Id INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Id)",
        "ALTER TABLE C ADD COLUMN Y STRING(MAX)",
        "DROP QUEUE QA",
        "CREATE QUEUE QD (Id INT64 NOT NULL, N INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Id, N), INTERLEAVE IN PARENT C ON DELETE CASCADE",
        "ALTER QUEUE QC SET OPTIONS (disable_delivery = true)",
        "DROP INDEX AByX",
    ])
    .await
    .expect("a mixed batch");
    let shown = ddl(&db).await;
    for (kind, name) in [
        ("TABLE", "A"),
        ("TABLE", "B"),
        ("QUEUE", "QB"),
        ("TABLE", "C"),
        ("QUEUE", "QC"),
        ("QUEUE", "QD"),
    ] {
        statement_for(&shown, kind, name);
    }
    assert_eq!(shown.len(), 6, "{shown:#?}");
    assert!(squash(statement_for(&shown, "TABLE", "C")).contains("YSTRING(MAX)"));
    assert!(squash(statement_for(&shown, "QUEUE", "QC")).contains("disable_delivery=true"));

    let raw = Raw::connect(&db).await;
    commit_ok(
        &raw,
        vec![
            insert("A", &["Id"], vec![int(1)]),
            send("QB", vec![int(1), int(1)], Some(text("b")), None),
            send("QC", vec![int(1)], Some(text("{}")), None),
            insert("C", &["Id"], vec![int(1)]),
            send("QD", vec![int(1), int(1)], Some(bytes(b"d")), None),
        ],
    )
    .await;
    expect_status(
        raw.commit(vec![send_now("QA", 1, "dropped")]).await,
        tonic::Code::NotFound,
    );
    assert_eq!(receive_n(&db, "QD", 1, GUARD).await.len(), 1);
}

#[tokio::test]
async fn drop_queue_removes_it_and_its_functions() {
    let db = database(&[SIMPLE_QUEUE, ORDERS]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "x")]).await;
    let mut open = Receiver::open(&db, &receive_sql("Q", "60s", None))
        .await
        .expect("RECEIVE");
    open.expect_next(GUARD, "before the drop").await;

    db.apply_ddl(["DROP QUEUE Q"]).await.expect("DROP QUEUE");
    let shown = ddl(&db).await;
    assert_eq!(shown.len(), 1, "{shown:#?}");
    statement_for(&shown, "TABLE", "Orders");

    // A stream open on the dropped queue ends (with an error or without).
    match tokio::time::timeout(GUARD, open.try_next()).await {
        Ok(None | Some(Err(_))) => {}
        Ok(Some(Ok(d))) => panic!("a delivery from a dropped queue: {d:?}"),
        Err(_) => panic!("the stream on a dropped queue stayed open"),
    }
    expect_status(
        raw.commit(vec![send_now("Q", 2, "x")]).await,
        tonic::Code::NotFound,
    );
    let error = query(
        db.client(),
        Statement::builder(receive_sql("Q", "1s", None)).build(),
    )
    .await
    .expect_err("RECEIVE on a dropped queue");
    assert_eq!(
        code(&error),
        Some(Code::InvalidArgument),
        "{}",
        chain(&error)
    );
    let error = query(db.client(), Statement::builder("SELECT * FROM Q").build())
        .await
        .expect_err("SELECT from a dropped queue");
    assert_eq!(
        code(&error),
        Some(Code::InvalidArgument),
        "{}",
        chain(&error)
    );

    let error = db
        .apply_ddl(["DROP QUEUE Q"])
        .await
        .expect_err("dropping a missing queue");
    assert!(harness_error_code(&error).0.is_some());
}

/// A queue is queryable with ordinary SELECT and the Read API [C, S3, S7]; `SELECT *` shows the
/// declared columns and `DeliverTime`, never internal ones.
#[tokio::test]
async fn a_queue_is_queryable_and_hides_internal_columns() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "x"), send_now("Q", 2, "y")]).await;
    let mut rs = db
        .client()
        .single_use()
        .build()
        .execute_query(Statement::builder("SELECT * FROM Q ORDER BY Id").build())
        .await
        .expect("SELECT * FROM a queue");
    assert_eq!(
        rs.metadata().column_names(),
        ["Id", "Payload", "DeliverTime"]
    );
    let mut n = 0;
    while let Some(row) = rs.next().await {
        row.expect("row");
        n += 1;
    }
    assert_eq!(n, 2);

    let read = google_cloud_spanner::read::ReadRequest::builder("Q", vec!["Id", "Payload"])
        .with_keys(google_cloud_spanner::key::KeySet::all())
        .build();
    let mut rs = db
        .client()
        .single_use()
        .build()
        .execute_read(read)
        .await
        .expect("Read API on a queue");
    let mut payloads = Vec::new();
    while let Some(row) = rs.next().await {
        payloads.push(row.expect("row").get::<String>("Payload").expect("Payload"));
    }
    payloads.sort();
    assert_eq!(payloads, ["x", "y"]);
}

/// The grammar's column forms [C, S22]: generated (`AS (…) STORED`), `HIDDEN` and
/// `OPTIONS (allow_commit_timestamp = true)` key columns, a `HIDDEN` payload, `DESC` keys.
#[tokio::test]
async fn key_column_forms_of_the_grammar() {
    let db = database(&["CREATE QUEUE Events (
           Tenant  STRING(20) NOT NULL,
           Shard   INT64 NOT NULL AS (MOD(FARM_FINGERPRINT(Tenant), 8)) STORED,
           Stamp   TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true),
           Secret  STRING(10) NOT NULL HIDDEN,
           Payload JSON NOT NULL HIDDEN,
         ) PRIMARY KEY (Shard, Tenant, Stamp DESC, Secret)"])
    .await;
    let shown = ddl(&db).await;
    let events = squash(statement_for(&shown, "QUEUE", "Events"));
    for part in [
        "AS(MOD(FARM_FINGERPRINT(Tenant),8))STORED",
        "allow_commit_timestamp=true",
        "SecretSTRING(10)NOTNULLHIDDEN",
        "PayloadJSONNOTNULLHIDDEN",
        "StampDESC",
    ] {
        assert!(events.contains(part), "{part} missing from {events}");
    }
    let statements: Vec<&str> = shown.iter().map(String::as_str).collect();
    let copy = database(&statements).await;
    assert_eq!(ddl(&copy).await, shown, "the output recreates the queue");

    // Sent by DML (the generated column is computed, the commit timestamp filled in).
    dml1(
        &db,
        r#"INSERT INTO Events (Tenant, Stamp, Secret, Payload)
           VALUES ('acme', PENDING_COMMIT_TIMESTAMP(), 's1', JSON '{"n": 1}')"#,
    )
    .await
    .expect("INSERT with a generated key and a commit timestamp");
    // HIDDEN columns stay out of SELECT *.
    let mut rs = db
        .client()
        .single_use()
        .build()
        .execute_query(Statement::builder("SELECT * FROM Events").build())
        .await
        .expect("SELECT *");
    assert_eq!(
        rs.metadata().column_names(),
        ["Tenant", "Shard", "Stamp", "DeliverTime"]
    );
    while let Some(row) = rs.next().await {
        row.expect("row");
    }
    let mut receiver = Receiver::open(
        &db,
        "SELECT Tenant, Secret, Payload, SpannerLeaseToken FROM RECEIVE_Events(max_duration => '60s')",
    )
    .await
    .expect("RECEIVE with hidden columns named");
    let d = receiver.expect_next(GUARD, "the event").await;
    assert_eq!(d.row.get::<String>("Secret").expect("Secret"), "s1");

    // Acked by DML on the whole key.
    assert_eq!(
        dml1(
            &db,
            "DELETE FROM Events WHERE Tenant = 'acme' AND Secret = 's1' ASSERT_ROWS_MODIFIED 1"
        )
        .await
        .expect("ack"),
        1
    );
}
