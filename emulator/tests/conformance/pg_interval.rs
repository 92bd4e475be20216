//! PostgreSQL interval arithmetic (`now() + interval '5 minutes'` and its relatives), which the
//! official emulator cannot run (it has no `interval` type) and Cloud Spanner's PostgreSQL
//! dialect can. Each form schedules a message on a queue (stored at the expected delivery time,
//! not received before it, cancelled by a delete) and writes an ordinary table. Forms the
//! emulator cannot run are `INVALID_ARGUMENT` naming the construct.
//!
//! Expected times come from the statement itself (`RETURNING now()`: `now()` is the same
//! everywhere in one statement) or from a fixed base timestamp parameter, so nothing here
//! depends on how fast anything runs.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use google_cloud_gax::error::rpc::Code;
use google_cloud_spanner::batch::BatchDml;
use google_cloud_spanner::statement::Statement;
use google_cloud_spanner::types;
use spanner_queues_testing::TestDatabase;

use crate::postgres::{PG_SIMPLE_QUEUE, pg_database};
use crate::support::*;

/// An ordinary table with a nullable timestamp.
const EVENTS: &str = "CREATE TABLE events (id bigint NOT NULL, at timestamptz, PRIMARY KEY (id))";

/// What a form's time is computed from.
#[derive(Debug, Clone, Copy)]
enum Anchor {
    /// `now()` of the statement.
    Now,
    /// The base timestamp parameter `$3`.
    Base,
}

/// An extra parameter `$4`.
#[derive(Debug, Clone, Copy)]
enum Extra {
    None,
    Int(i64),
    /// An `INTERVAL`-typed parameter (its wire form is an ISO 8601 duration).
    Interval(&'static str),
    Text(&'static str),
}

/// One way of writing a time with an interval.
#[derive(Debug, Clone, Copy)]
struct Form {
    /// The time expression (`$3` is the base timestamp, `$4` the extra parameter).
    expr: &'static str,
    anchor: Anchor,
    /// Expected offset from the anchor, in seconds.
    offset: i64,
    extra: Extra,
}

const fn form(expr: &'static str, anchor: Anchor, offset: i64) -> Form {
    Form {
        expr,
        anchor,
        offset,
        extra: Extra::None,
    }
}

const fn with(expr: &'static str, anchor: Anchor, offset: i64, extra: Extra) -> Form {
    Form {
        expr,
        anchor,
        offset,
        extra,
    }
}

/// Every supported form, each in the future.
const SCHEDULED: [Form; 15] = [
    form("now() + interval '5 minutes'", Anchor::Now, 300),
    form("$3::timestamptz + interval '30 seconds'", Anchor::Base, 30),
    form("$3::timestamptz - interval '1 hour'", Anchor::Base, -3600),
    form("now() + interval '1 hour 30 minutes'", Anchor::Now, 5400),
    form("now() + '5 minutes'::interval", Anchor::Now, 300),
    form(
        "$3::timestamptz + CAST('2 hours' AS interval)",
        Anchor::Base,
        7200,
    ),
    form("now() + make_interval(mins => 10)", Anchor::Now, 600),
    form(
        "$3::timestamptz + make_interval(0, 0, 0, 1, 2)",
        Anchor::Base,
        93_600,
    ),
    with(
        "now() + make_interval(hours => $4)",
        Anchor::Now,
        10_800,
        Extra::Int(3),
    ),
    with(
        "$3::timestamptz + $4",
        Anchor::Base,
        45,
        Extra::Interval("PT45S"),
    ),
    with(
        "$3::timestamptz - $4::interval",
        Anchor::Base,
        -60,
        Extra::Text("1 minute"),
    ),
    with(
        "now() + $4 * interval '1 minute'",
        Anchor::Now,
        420,
        Extra::Int(7),
    ),
    form("interval '1 day' + $3::timestamptz", Anchor::Base, 86_400),
    form("now() + '15 minutes'", Anchor::Now, 900),
    form("now() + interval '20' minute", Anchor::Now, 1200),
];

/// Forms whose time is already past: delivered at once.
const DUE: [Form; 2] = [
    form("now() + - interval '5 minutes'", Anchor::Now, -300),
    form("now() - interval '1 second'", Anchor::Now, -1),
];

/// A base time a day ahead, in whole seconds.
fn base_time() -> SystemTime {
    let secs = (SystemTime::now() + Duration::from_secs(86_400))
        .duration_since(UNIX_EPOCH)
        .expect("after the epoch")
        .as_secs();
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn shifted(t: SystemTime, offset: i64) -> SystemTime {
    let by = Duration::from_secs(offset.unsigned_abs());
    if offset >= 0 { t + by } else { t - by }
}

/// `sql` with the parameters `form` uses (`$3`, `$4`) added to `builder`.
fn bind(
    mut builder: google_cloud_spanner::statement::StatementBuilder,
    form: &Form,
    base: SystemTime,
) -> Statement {
    if form.expr.contains("$3") {
        builder = builder.add_typed_param("p3", base, types::timestamp());
    }
    builder = match form.extra {
        Extra::None => builder,
        Extra::Int(n) => builder.add_typed_param("p4", n, types::int64()),
        Extra::Interval(text) => builder.add_typed_param("p4", text, types::interval()),
        Extra::Text(text) => builder.add_typed_param("p4", text, types::string()),
    };
    builder.build()
}

/// Runs `statement` (DML with `RETURNING <time>, now()`) in a read-write transaction; returns
/// the expected time for `form` and the time the statement wrote.
async fn write_returning(
    db: &TestDatabase,
    statement: Statement,
    form: &Form,
    base: SystemTime,
) -> (SystemTime, SystemTime) {
    let rows = db
        .client()
        .read_write_transaction()
        .build()
        .run(async |tx| {
            let mut rs = tx.execute_query(statement.clone()).await?;
            let mut rows = Vec::new();
            while let Some(row) = rs.next().await {
                rows.push(row?);
            }
            Ok(rows)
        })
        .await
        .unwrap_or_else(|e| panic!("{}: {}", form.expr, chain(&e)))
        .result;
    assert_eq!(rows.len(), 1, "{}: one row returned", form.expr);
    let written = rows[0]
        .get::<SystemTime>(0usize)
        .unwrap_or_else(|e| panic!("{}: the written time: {}", form.expr, chain(&e)));
    let now = rows[0]
        .get::<SystemTime>(1usize)
        .unwrap_or_else(|e| panic!("{}: now(): {}", form.expr, chain(&e)));
    let anchor = match form.anchor {
        Anchor::Now => now,
        Anchor::Base => base,
    };
    (shifted(anchor, form.offset), written)
}

/// The stored times of `sql` (`SELECT id, <time> … ORDER BY id`) by id.
async fn stored_times(db: &TestDatabase, sql: &str) -> Vec<(i64, Option<SystemTime>)> {
    query(db.client(), Statement::builder(sql).build())
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", chain(&e)))
        .iter()
        .map(|r| {
            (
                r.get::<i64>(0usize).expect("id"),
                r.get::<Option<SystemTime>>(1usize).expect("a timestamptz"),
            )
        })
        .collect()
}

/// Each form schedules a message: stored at the expected delivery time, not received while
/// that time is ahead (the due ones, sent the same way, are), and cancelled by a delete.
#[tokio::test]
async fn postgresql_interval_forms_schedule_queue_messages() {
    let db = pg_database(&[PG_SIMPLE_QUEUE]).await;
    let base = base_time();
    let mut expected = Vec::new();
    for (n, form) in SCHEDULED.iter().chain(DUE.iter()).enumerate() {
        let id = i64::try_from(n).expect("few forms") + 1;
        let sql = format!(
            "INSERT INTO q (id, payload, deliver_time) VALUES ($1, $2, {}) \
             RETURNING deliver_time, now()",
            form.expr
        );
        let builder = Statement::builder(&sql)
            .add_typed_param("p1", id, types::int64())
            .add_typed_param("p2", form.expr, types::string());
        let (want, written) = write_returning(&db, bind(builder, form, base), form, base).await;
        assert_eq!(written, want, "{}: the delivery time written", form.expr);
        expected.push((id, Some(want)));
    }
    assert_eq!(
        stored_times(&db, "SELECT id, deliver_time FROM q ORDER BY id").await,
        expected,
        "the stored delivery times"
    );

    // Not delivered early: only the due messages are received.
    let deliveries = receive_all(&db, "SELECT * FROM spanner.receive_q(100, NULL, '2s')").await;
    let mut received: Vec<i64> = deliveries
        .iter()
        .map(|d| d.row.get::<i64>("id").expect("id"))
        .collect();
    received.sort_unstable();
    let due: Vec<i64> = (SCHEDULED.len() + 1..=SCHEDULED.len() + DUE.len())
        .map(|n| i64::try_from(n).expect("few forms"))
        .collect();
    assert_eq!(received, due, "only the messages already due are received");

    // Cancel every message.
    let deletes: Vec<Statement> = expected
        .iter()
        .map(|(id, _)| {
            Statement::builder("DELETE FROM q WHERE id = $1 ASSERT_ROWS_MODIFIED 1")
                .add_param("p1", *id)
                .build()
        })
        .collect();
    let counts = dml(&db, deletes)
        .await
        .unwrap_or_else(|e| panic!("cancel: {}", chain(&e)));
    assert!(counts.iter().all(|&c| c == 1), "{counts:?}");
    assert_eq!(scalar_i64(&db, "SELECT COUNT(*) FROM q").await, 0);
}

/// The same forms write an ordinary table (`INSERT`, and `UPDATE` of a column by an interval),
/// and filter in `WHERE`.
#[tokio::test]
async fn postgresql_interval_forms_write_tables() {
    let db = pg_database(&[EVENTS]).await;
    let base = base_time();
    let mut expected = Vec::new();
    for (n, form) in SCHEDULED.iter().chain(DUE.iter()).enumerate() {
        let id = i64::try_from(n).expect("few forms") + 1;
        let sql = format!(
            "INSERT INTO events (id, at) VALUES ($1, {}) RETURNING at, now()",
            form.expr
        );
        let builder = Statement::builder(&sql).add_typed_param("p1", id, types::int64());
        let (want, written) = write_returning(&db, bind(builder, form, base), form, base).await;
        assert_eq!(written, want, "{}: the time written", form.expr);
        expected.push((id, Some(want)));
    }
    assert_eq!(
        stored_times(&db, "SELECT id, at FROM events ORDER BY id").await,
        expected
    );

    // WHERE: the rows more than an hour ahead of now.
    let statement = Statement::builder(
        "SELECT id FROM events WHERE at > now() + interval '1 hour' ORDER BY id",
    )
    .build();
    let later: Vec<i64> = query(db.client(), statement)
        .await
        .unwrap_or_else(|e| panic!("WHERE: {}", chain(&e)))
        .iter()
        .map(|r| r.get::<i64>(0usize).expect("id"))
        .collect();
    let now = SystemTime::now();
    let want: Vec<i64> = expected
        .iter()
        .filter(|(_, at)| at.is_some_and(|at| at > now + Duration::from_secs(3600 + 600)))
        .map(|(id, _)| *id)
        .collect();
    // Every row far enough ahead is found (rows near the one-hour edge may go either way).
    assert!(
        want.iter().all(|id| later.contains(id)) && !later.is_empty(),
        "{later:?} should hold {want:?}"
    );
    assert!(
        !later.contains(&1),
        "row 1 (five minutes ahead) is not an hour ahead"
    );

    // UPDATE by an interval, in a batch of DML.
    let batch = BatchDml::builder()
        .add_statement(
            Statement::builder("UPDATE events SET at = at + interval '1 day' WHERE id = $1")
                .add_param("p1", 2i64)
                .build(),
        )
        .add_statement(
            Statement::builder(
                "UPDATE events SET at = at - make_interval(hours => 1) WHERE id = $1",
            )
            .add_param("p1", 3i64)
            .build(),
        )
        .build();
    let counts = db
        .client()
        .read_write_transaction()
        .build()
        .run(async |tx| tx.execute_batch_update(batch.clone()).await)
        .await
        .unwrap_or_else(|e| panic!("batch: {}", chain(&e)))
        .result;
    assert_eq!(counts, [1, 1]);
    let stored = stored_times(
        &db,
        "SELECT id, at FROM events WHERE id IN (2, 3) ORDER BY id",
    )
    .await;
    assert_eq!(
        stored,
        [
            (2, Some(shifted(base, 30 + 86_400))),
            (3, Some(shifted(base, -3600 - 3600))),
        ]
    );
}

/// A NULL operand gives NULL, as in PostgreSQL, also in a written call of
/// `spanner.timestamptz_add`. (The official emulator's process stops on that function with a
/// NULL argument, so the front guards the call.)
#[tokio::test]
async fn postgresql_interval_arithmetic_on_null_is_null() {
    let db = pg_database(&[EVENTS]).await;
    let insert = Statement::builder(
        "INSERT INTO events (id, at) VALUES (1, $1::timestamptz + interval '1 hour'), \
         (2, now() + $2::interval)",
    )
    .add_typed_param("p1", Option::<SystemTime>::None, types::timestamp())
    .add_typed_param("p2", Option::<String>::None, types::string())
    .build();
    let counts = dml(&db, vec![insert])
        .await
        .unwrap_or_else(|e| panic!("insert: {}", chain(&e)));
    assert_eq!(counts, [2]);
    // A written call of the official emulator's function, with a NULL parameter.
    let written = Statement::builder(
        "INSERT INTO events (id, at) VALUES (3, spanner.timestamptz_add($1::timestamptz, '1 hour'))",
    )
    .add_typed_param("p1", Option::<SystemTime>::None, types::timestamp())
    .build();
    let counts = dml(
        &db,
        vec![
            written,
            Statement::builder("UPDATE events SET at = at - interval '1 day' WHERE id = 1").build(),
        ],
    )
    .await
    .unwrap_or_else(|e| panic!("update: {}", chain(&e)));
    assert_eq!(counts, [1, 1]);
    assert_eq!(
        stored_times(&db, "SELECT id, at FROM events ORDER BY id").await,
        [(1, None), (2, None), (3, None)]
    );
}

/// Interval uses the official emulator cannot run are `INVALID_ARGUMENT` naming the construct
/// (or, for an interval the front cannot see, saying what works), not its `UNIMPLEMENTED` "The
/// Postgres Type is not supported: interval"; the transaction's other writes are not committed.
#[tokio::test]
async fn unsupported_postgresql_interval_forms_name_the_construct() {
    let db = pg_database(&[EVENTS]).await;
    for (sql, construct) in [
        (
            "INSERT INTO events (id, at) VALUES (1, now() + interval(3) '1 hour')",
            "interval(3)",
        ),
        (
            "UPDATE events SET at = now() + interval '1 hour' / 2 WHERE id = 1",
            "/ 2",
        ),
        (
            "INSERT INTO events (id, at) VALUES (1, interval '1 day' - now())",
            "now()",
        ),
        (
            "INSERT INTO events (id, at) VALUES (1, now() + make_interval(minutes => 5))",
            "make_interval(minutes => 5)",
        ),
    ] {
        let result = dml(
            &db,
            vec![
                Statement::builder("INSERT INTO events (id, at) VALUES (9, now())").build(),
                Statement::builder(sql).build(),
            ],
        )
        .await;
        let message = expect_code(result, Code::InvalidArgument);
        assert_mentions(&message, construct);
        assert_mentions(&message, "interval");
    }
    let statement = Statement::builder("SELECT interval '1 hour' AS i").build();
    let message = expect_code(query(db.client(), statement).await, Code::InvalidArgument);
    assert_mentions(&message, "interval '1 hour'");
    // An interval the front cannot see: the difference of two timestamps.
    let statement = Statement::builder("SELECT now() - at AS age FROM events").build();
    let message = expect_code(query(db.client(), statement).await, Code::InvalidArgument);
    assert_mentions(&message, "timestamptz - timestamptz");
    let statement = Statement::builder("SELECT $1 AS i")
        .add_typed_param("p1", "PT1H", types::interval())
        .build();
    let message = expect_code(query(db.client(), statement).await, Code::InvalidArgument);
    assert_mentions(&message, "$1");
    assert_eq!(
        scalar_i64(&db, "SELECT COUNT(*) FROM events").await,
        0,
        "no refused transaction committed"
    );
}

/// A rewritten statement is printed anew from its parsed tree: quoted reserved names, `$n`
/// parameters, `::` casts, escaped strings, `spanner.` functions, `RETURNING` and a trailing
/// `ASSERT_ROWS_MODIFIED` (on a queue) come out as the official emulator reads them, and a
/// leading statement hint stays.
#[tokio::test]
async fn rewritten_postgresql_statements_round_trip_through_the_official_emulator() {
    let db = pg_database(&[
        "CREATE TABLE \"user\" (\"order\" bigint NOT NULL, \"check\" timestamptz, note text, \
         PRIMARY KEY (\"order\"))",
        PG_SIMPLE_QUEUE,
    ])
    .await;
    let base = base_time();
    let insert = Statement::builder(
        "/* a comment before it */ INSERT INTO \"user\" (\"order\", \"check\", \
         note) VALUES ($1::bigint, $2::timestamptz + interval '1 hour', E'it\\'s') RETURNING \
         \"check\", note",
    )
    .add_typed_param("p1", 1i64, types::int64())
    .add_typed_param("p2", base, types::timestamp())
    .build();
    let rows = db
        .client()
        .read_write_transaction()
        .build()
        .run(async |tx| {
            let mut rs = tx.execute_query(insert.clone()).await?;
            let mut rows = Vec::new();
            while let Some(row) = rs.next().await {
                let row = row?;
                rows.push((row.get::<SystemTime>(0usize)?, row.get::<String>(1usize)?));
            }
            Ok(rows)
        })
        .await
        .unwrap_or_else(|e| panic!("insert: {}", chain(&e)))
        .result;
    assert_eq!(rows, [(shifted(base, 3600), "it's".to_owned())]);

    let update = Statement::builder(
        "UPDATE \"user\" SET \"check\" = \"check\" - make_interval(mins => $2) WHERE \"order\" \
         = $1 AND note LIKE 'it%'",
    )
    .add_typed_param("p1", 1i64, types::int64())
    .add_typed_param("p2", 30i64, types::int64())
    .build();
    assert_eq!(
        dml(&db, vec![update])
            .await
            .unwrap_or_else(|e| panic!("update: {}", chain(&e))),
        [1]
    );
    assert_eq!(
        stored_times(
            &db,
            "/*@ USE_ADDITIONAL_PARALLELISM = TRUE */ SELECT \"order\", \"check\" FROM \
             \"user\" WHERE \"check\" > now() + interval '1 hour'"
        )
        .await,
        [(1, Some(shifted(base, 1800)))]
    );

    // A cancel with an interval condition and the clause the front checks itself.
    let send = Statement::builder(
        "INSERT INTO q (id, payload, deliver_time) VALUES (7, 'later', $1::timestamptz + \
         interval '1 day')",
    )
    .add_typed_param("p1", base, types::timestamp())
    .build();
    let cancel = |id: i64| {
        Statement::builder(
            "DELETE FROM q WHERE id = $1 AND deliver_time > now() + interval '1 hour' \
             ASSERT_ROWS_MODIFIED 1",
        )
        .add_param("p1", id)
        .build()
    };
    assert_eq!(
        dml(&db, vec![send, cancel(7)])
            .await
            .unwrap_or_else(|e| panic!("send and cancel: {}", chain(&e))),
        [1, 1]
    );
    let result = dml(&db, vec![cancel(7)]).await;
    let message = expect_code(result, Code::OutOfRange);
    assert_mentions(&message, "ASSERT_ROWS_MODIFIED");
}

/// `interval` as a name (a table, a column, an alias, a queue's key column) beside interval
/// arithmetic: the rewritten statements keep the names as written, and the official emulator
/// reads them.
#[tokio::test]
async fn interval_as_a_name_beside_interval_arithmetic() {
    let db = pg_database(&[
        "CREATE TABLE interval (id bigint NOT NULL, interval timestamptz, PRIMARY KEY (id))",
        "CREATE QUEUE q (interval bigint NOT NULL, payload text NOT NULL, PRIMARY KEY (interval))",
    ])
    .await;
    let base = base_time();
    let with_base = |sql: &str| {
        Statement::builder(sql)
            .add_typed_param("p1", base, types::timestamp())
            .build()
    };
    let insert = with_base(
        "INSERT INTO interval (id, interval) VALUES (1, $1::timestamptz + interval '1 hour'), \
         (2, NULL)",
    );
    let update = Statement::builder(
        "UPDATE interval SET interval = interval - make_interval(mins => 30) WHERE id = 1",
    )
    .build();
    assert_eq!(
        dml(&db, vec![insert, update])
            .await
            .unwrap_or_else(|e| panic!("insert and update: {}", chain(&e))),
        [2, 1]
    );
    assert_eq!(
        stored_times(&db, "SELECT id, interval FROM interval ORDER BY id").await,
        [(1, Some(shifted(base, 1800))), (2, None)]
    );
    let select = with_base(
        "SELECT i.id FROM interval AS i WHERE i.interval < $1::timestamptz + interval '1 hour'",
    );
    let ids: Vec<i64> = query(db.client(), select)
        .await
        .unwrap_or_else(|e| panic!("select: {}", chain(&e)))
        .iter()
        .map(|r| r.get::<i64>(0usize).expect("id"))
        .collect();
    assert_eq!(ids, [1]);
    let delete = with_base(
        "DELETE FROM interval WHERE interval IS NULL OR interval < $1::timestamptz + interval \
         '1 day'",
    );
    assert_eq!(
        dml(&db, vec![delete])
            .await
            .unwrap_or_else(|e| panic!("delete: {}", chain(&e))),
        [2]
    );

    // A queue keyed by a column named interval: a scheduled send, and its cancel.
    let send = Statement::builder(
        "INSERT INTO q (interval, payload, deliver_time) VALUES (7, 'later', now() + interval \
         '1 day')",
    )
    .build();
    let cancel = Statement::builder(
        "DELETE FROM q WHERE interval = 7 AND deliver_time > now() + interval '1 hour' \
         ASSERT_ROWS_MODIFIED 1",
    )
    .build();
    assert_eq!(
        dml(&db, vec![send, cancel])
            .await
            .unwrap_or_else(|e| panic!("send and cancel: {}", chain(&e))),
        [1, 1]
    );
    assert_eq!(scalar_i64(&db, "SELECT COUNT(*) FROM q").await, 0);
}
