//! PostgreSQL-dialect databases (reference §1.3, §1.4, §2.1, §3, §4, §5.1): queue DDL in
//! PostgreSQL syntax and `GetDatabaseDdl`, sends and acks, `spanner.receive_<q>` and
//! `spanner.renewlease_<q>`. The PostgreSQL grammar of queue DDL is not published [?]: the
//! statements here are the documented examples and the forms the emulator README names as its
//! choices.

use google_cloud_gax::error::rpc::Code;
use spanner_queues_testing::{HarnessError, TestDatabase};

use crate::support::*;

const USERS: &str = "CREATE TABLE users (userid bigint NOT NULL, PRIMARY KEY (userid))";
/// The documented PostgreSQL example (S2).
const USER_TASKS: &str = "CREATE QUEUE usertasks (
  userid     bigint NOT NULL,
  messageid  varchar(36) NOT NULL, -- UUID recommended
  payload    bytea NOT NULL, -- Also: text, varchar, jsonb are possible.
  PRIMARY KEY (userid, messageid)
) INTERLEAVE IN PARENT users ON DELETE CASCADE";
/// The examples page's queue without interleave (S4).
const APPLICATION_TASKS: &str = "CREATE QUEUE applicationtasks ( tasktype varchar(50) NOT NULL, taskid varchar(36) NOT NULL, payload bytea NOT NULL, PRIMARY KEY (tasktype, taskid) )";
/// A queue with one bigint key and a text payload, used by most tests here.
pub(crate) const PG_SIMPLE_QUEUE: &str =
    "CREATE QUEUE q (id bigint NOT NULL, payload text NOT NULL, PRIMARY KEY (id))";

/// A fresh PostgreSQL-dialect database with `ddl` applied. Never skips.
pub(crate) async fn pg_database(ddl: &[&str]) -> TestDatabase {
    spanner_queues_testing::setup()
        .without_sdk_tables()
        .with_dialect(spanner_queues::Dialect::PostgreSql)
        .with_ddl(ddl.iter().copied())
        .try_create()
        .await
        .unwrap_or_else(|e| panic!("the harness could not create a database: {}", chain(&e)))
}

/// Whitespace-free text, to compare DDL independently of its layout.
fn squash(sql: &str) -> String {
    sql.chars().filter(|c| !c.is_whitespace()).collect()
}

/// The error behind a failed harness DDL call.
fn harness_error_code(error: &HarnessError) -> (Option<Code>, String) {
    match error {
        HarnessError::Spanner { source, .. } => (code(source), message(source)),
        other => panic!("not a Spanner error: {}", chain(other)),
    }
}

/// Applies one statement, expecting `expected`; returns the message.
async fn ddl_fails(db: &TestDatabase, statement: &str, expected: Code) -> String {
    let error = db
        .apply_ddl([statement])
        .await
        .expect_err(&format!("{statement} should fail"));
    let (code, message) = harness_error_code(&error);
    assert_eq!(code, Some(expected), "{statement}: {message}");
    message
}

/// The documented PostgreSQL forms are accepted; `GetDatabaseDdl` shows them as `CREATE
/// QUEUE` statements in PostgreSQL syntax, without the emulator's internal columns.
#[tokio::test]
async fn documented_postgresql_queues_show_in_get_database_ddl() {
    let db = pg_database(&[USERS, USER_TASKS, APPLICATION_TASKS]).await;
    let shown = db.ddl().await.expect("GetDatabaseDdl");
    assert_eq!(shown.len(), 3, "one statement per object: {shown:#?}");
    let user_tasks = shown
        .iter()
        .find(|s| s.starts_with("CREATE QUEUE usertasks"))
        .unwrap_or_else(|| panic!("no CREATE QUEUE usertasks in {shown:#?}"));
    assert_eq!(
        squash(user_tasks),
        squash(
            "CREATE QUEUE usertasks (userid bigint NOT NULL, messageid character varying(36) \
             NOT NULL, payload bytea NOT NULL, PRIMARY KEY(userid, messageid)) INTERLEAVE IN \
             PARENT users ON DELETE CASCADE"
        )
    );
    assert!(
        shown.iter().any(|s| squash(s).starts_with(&squash(
            "CREATE QUEUE applicationtasks (tasktype character varying(50) NOT NULL"
        ))),
        "{shown:#?}"
    );
    for s in &shown {
        assert!(
            !s.contains("SpannerQueuesEmulator"),
            "internal column shown: {s}"
        );
    }
    // What GetDatabaseDdl shows creates the same schema again.
    let again = pg_database(&shown.iter().map(String::as_str).collect::<Vec<_>>()).await;
    assert_eq!(again.ddl().await.expect("GetDatabaseDdl"), shown);
}

/// `ALTER QUEUE` (ON DELETE, TTL) and `DROP QUEUE [IF EXISTS]` in PostgreSQL syntax.
#[tokio::test]
async fn alter_and_drop_queue_in_postgresql() {
    let db = pg_database(&[USERS, USER_TASKS]).await;
    db.apply_ddl([
        "ALTER QUEUE usertasks SET ON DELETE NO ACTION",
        "ALTER QUEUE usertasks ADD TTL INTERVAL '7 days' ON deliver_time",
    ])
    .await
    .expect("alter");
    let shown = squash(&db.ddl().await.expect("ddl").join("\n"));
    assert!(
        shown.contains("INTERLEAVEINPARENTusersONDELETENOACTION"),
        "{shown}"
    );
    assert!(
        shown.contains("TTLINTERVAL'7DAYS'ONdeliver_time"),
        "{shown}"
    );
    db.apply_ddl(["ALTER QUEUE usertasks DROP TTL"])
        .await
        .expect("drop ttl");
    assert!(!squash(&db.ddl().await.expect("ddl").join("\n")).contains("TTL"));
    ddl_fails(
        &db,
        "ALTER QUEUE usertasks DROP TTL",
        Code::FailedPrecondition,
    )
    .await;
    ddl_fails(&db, "DROP TABLE usertasks", Code::FailedPrecondition).await;
    db.apply_ddl(["DROP QUEUE usertasks", "DROP QUEUE IF EXISTS usertasks"])
        .await
        .expect("drop");
    let shown = db.ddl().await.expect("ddl");
    assert_eq!(shown.len(), 1, "{shown:#?}");
    ddl_fails(&db, "DROP QUEUE usertasks", Code::NotFound).await;
    ddl_fails(&db, "DROP QUEUE users", Code::FailedPrecondition).await;
}

/// Invalid PostgreSQL queues are refused with the rule they break; undocumented forms are
/// refused as unsupported.
#[tokio::test]
async fn invalid_postgresql_queues_are_refused() {
    let db = pg_database(&[]).await;
    let message = ddl_fails(
        &db,
        "CREATE QUEUE bad (id bigint NOT NULL, payload bigint NOT NULL, PRIMARY KEY (id))",
        Code::InvalidArgument,
    )
    .await;
    assert_mentions(&message, "bytea, text, varchar or jsonb");
    let message = ddl_fails(
        &db,
        "CREATE QUEUE bad (id bigint NOT NULL, payload bytea, PRIMARY KEY (id))",
        Code::InvalidArgument,
    )
    .await;
    assert_mentions(&message, "NOT NULL");
    let message = ddl_fails(
        &db,
        "CREATE QUEUE bad (id bigint NOT NULL, payload bytea NOT NULL, deliver_time \
         timestamptz NOT NULL, PRIMARY KEY (id))",
        Code::InvalidArgument,
    )
    .await;
    assert_mentions(&message, "system column");
    ddl_fails(
        &db,
        "CREATE QUEUE bad (id bigint NOT NULL, payload bytea NOT NULL)",
        Code::InvalidArgument,
    )
    .await;
    ddl_fails(
        &db,
        "CREATE QUEUE bad (id bigint NOT NULL, payload bytea NOT NULL, PRIMARY KEY (id)) \
         WITH (disable_send = true)",
        Code::Unimplemented,
    )
    .await;
    db.apply_ddl([PG_SIMPLE_QUEUE]).await.expect("create");
    ddl_fails(&db, PG_SIMPLE_QUEUE, Code::AlreadyExists).await;
    db.apply_ddl([PG_SIMPLE_QUEUE.replace("CREATE QUEUE", "CREATE QUEUE IF NOT EXISTS")])
        .await
        .expect("IF NOT EXISTS on an existing queue is a no-op");
}

// ---------------------------------------------------------------------------------------------
// Send, receive, renew, ack
// ---------------------------------------------------------------------------------------------

use std::time::{Duration, SystemTime};

use google_cloud_spanner::statement::Statement;

const GUARD: Duration = Duration::from_secs(60);

/// One row of `spanner.receive_q`, read by its PostgreSQL column names.
#[derive(Debug)]
struct PgDelivery {
    id: i64,
    payload: String,
    token: String,
    expires: SystemTime,
    last_in_batch: bool,
}

async fn pg_receive_n(db: &TestDatabase, sql: &str, n: usize) -> (Vec<String>, Vec<PgDelivery>) {
    let mut receiver = Receiver::open(db, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", chain(&e)));
    let columns = receiver.columns().to_vec();
    let mut out = Vec::new();
    while out.len() < n {
        let d = receiver
            .expect_next(GUARD, &format!("delivery {} of {n}", out.len() + 1))
            .await;
        let token = d
            .row
            .get::<google_cloud_spanner::value::Value>("spanner_lease_token")
            .expect("spanner_lease_token")
            .as_str()
            .map(str::to_owned)
            .expect("a lease token");
        out.push(PgDelivery {
            id: d.row.get::<i64>("id").expect("id"),
            payload: d.row.get::<String>("payload").expect("payload"),
            token,
            expires: d
                .row
                .get::<SystemTime>("spanner_lease_expiration_timestamp")
                .expect("spanner_lease_expiration_timestamp"),
            last_in_batch: d
                .row
                .get::<bool>("spanner_last_batch_message")
                .expect("spanner_last_batch_message"),
        });
    }
    (columns, out)
}

/// Sends by `Mutation.Send` and by DML `INSERT` with `$n` parameters reach
/// `spanner.receive_q(max_batch_size, priority, max_duration)` (positional, as documented),
/// with the PostgreSQL output names, each under a lease of about 10 s.
#[tokio::test]
async fn postgresql_sends_are_received_with_positional_arguments() {
    let db = pg_database(&[PG_SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("q", 1, "by mutation")]).await;
    dml(
        &db,
        vec![
            Statement::builder("INSERT INTO q (id, payload) VALUES ($1, $2)")
                .add_param("p1", 2i64)
                .add_param("p2", "by dml")
                .build(),
        ],
    )
    .await
    .unwrap_or_else(|e| panic!("INSERT: {}", chain(&e)));
    let before = SystemTime::now();
    let (columns, mut got) =
        pg_receive_n(&db, "SELECT * FROM spanner.receive_q(2, NULL, '30s')", 2).await;
    let after = SystemTime::now();
    assert_eq!(
        columns,
        [
            "id",
            "payload",
            "deliver_time",
            "spanner_lease_expiration_timestamp",
            "spanner_lease_token",
            "spanner_last_batch_message"
        ]
    );
    got.sort_by_key(|d| d.id);
    assert_eq!(got[0].payload, "by mutation");
    assert_eq!(got[1].payload, "by dml");
    assert_ne!(got[0].token, got[1].token);
    assert_eq!(
        got.iter().filter(|d| d.last_in_batch).count(),
        1,
        "one batch of two: {got:?}"
    );
    for d in &got {
        assert_lease_about_10s(d.expires, before, after);
    }
}

/// Named arguments, a scheduled send (not delivered before its time) and the `DeliverTime`
/// alias of `deliver_time` [C].
#[tokio::test]
async fn postgresql_receive_with_named_arguments_skips_scheduled_messages() {
    let db = pg_database(&[PG_SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    let later = SystemTime::now() + Duration::from_secs(3600);
    commit_ok(
        &raw,
        vec![send_now("q", 1, "now"), send_at("q", 2, "later", later)],
    )
    .await;
    let sql = "SELECT id, payload, \"DeliverTime\", spanner_lease_token, \
               spanner_lease_expiration_timestamp, spanner_last_batch_message FROM \
               spanner.receive_q(max_batch_size=>NULL, priority=>NULL, max_duration=>'2s')";
    let receiver = Receiver::open(&db, sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", chain(&e)));
    assert_eq!(receiver.columns()[2], "DeliverTime");
    let all = receiver.drain().await;
    let ids: Vec<i64> = all
        .iter()
        .map(|d| d.row.get::<i64>("id").expect("id"))
        .collect();
    assert_eq!(ids, [1], "only the due message: {all:?}");
    let scheduled = scalar_i64(&db, "SELECT COUNT(*) FROM q WHERE id = 2").await;
    assert_eq!(scheduled, 1, "the scheduled message is still queued");
}

/// `spanner.renewlease_q(lease_tokens => …)` extends live leases and rotates their tokens;
/// an unknown token gets no row.
#[tokio::test]
async fn postgresql_renewlease_rotates_tokens() {
    let db = pg_database(&[PG_SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("q", 1, "a")]).await;
    let (_, got) = pg_receive_n(&db, "SELECT * FROM spanner.receive_q(1, NULL, '30s')", 1).await;
    let token = got[0].token.clone();
    let statement = Statement::builder("SELECT * FROM spanner.renewlease_q(lease_tokens => $1)")
        .add_param("p1", vec![token.clone(), "no-such-token".to_owned()])
        .build();
    let before = SystemTime::now();
    let rows = query(db.client(), statement)
        .await
        .unwrap_or_else(|e| panic!("renewlease: {}", chain(&e)));
    let after = SystemTime::now();
    assert_eq!(rows.len(), 1, "only the live token gets a row");
    let old = rows[0]
        .get::<google_cloud_spanner::value::Value>("spanner_old_lease_token")
        .expect("spanner_old_lease_token");
    assert_eq!(old.as_str(), Some(token.as_str()));
    let new = rows[0]
        .get::<google_cloud_spanner::value::Value>("spanner_new_lease_token")
        .expect("spanner_new_lease_token");
    let new = new.as_str().expect("a new token");
    assert_ne!(new, token);
    let expires = rows[0]
        .get::<SystemTime>("spanner_lease_expiration_timestamp")
        .expect("spanner_lease_expiration_timestamp");
    assert_lease_about_10s(expires, before, after);
}

/// Ack by DML `DELETE … ASSERT_ROWS_MODIFIED 1` with `$n` parameters, as documented: the first
/// deletes the message; the second fails with `OUT_OF_RANGE` and rolls its transaction back
/// (the business write in it is not committed). `Mutation.Ack` of a missing message fails with
/// `NOT_FOUND`.
#[tokio::test]
async fn postgresql_acks_by_dml_and_mutation() {
    let db = pg_database(&[
        PG_SIMPLE_QUEUE,
        "CREATE TABLE orders (id bigint NOT NULL, note text, PRIMARY KEY (id))",
    ])
    .await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("q", 1, "a"), send_now("q", 2, "b")]).await;
    let ack = |id: i64| {
        Statement::builder("DELETE FROM q WHERE id = $1 ASSERT_ROWS_MODIFIED 1")
            .add_param("p1", id)
            .build()
    };
    let counts = dml(
        &db,
        vec![
            Statement::builder("INSERT INTO orders (id, note) VALUES (1, 'done')").build(),
            ack(1),
        ],
    )
    .await
    .unwrap_or_else(|e| panic!("ack: {}", chain(&e)));
    assert_eq!(counts, [1, 1]);
    assert_eq!(
        scalar_i64(&db, "SELECT COUNT(*) FROM q WHERE id = 1").await,
        0
    );

    let message = expect_code(
        dml(
            &db,
            vec![
                Statement::builder("INSERT INTO orders (id, note) VALUES (2, 'twice')").build(),
                ack(1),
            ],
        )
        .await,
        Code::OutOfRange,
    );
    assert_mentions(&message, "ASSERT_ROWS_MODIFIED");
    assert_eq!(
        scalar_i64(&db, "SELECT COUNT(*) FROM orders WHERE id = 2").await,
        0,
        "the failed ack's transaction must not commit"
    );
    // Alone in its transaction (the statement begins it inline).
    expect_code(dml(&db, vec![ack(1)]).await, Code::OutOfRange);

    let status = raw
        .commit(vec![ack_mutation(&[1])])
        .await
        .expect_err("acking a missing message");
    assert_eq!(status.code(), tonic::Code::NotFound, "{status:?}");
    commit_ok(&raw, vec![ack_mutation(&[2])]).await;
    assert_eq!(scalar_i64(&db, "SELECT COUNT(*) FROM q").await, 0);
}

fn ack_mutation(key: &[i64]) -> Mutation {
    ack("q", key.iter().map(|k| int(*k)).collect(), false)
}
