//! Everything that is not about queues passes through untouched (issue 3), and the front's
//! queue work does not starve client transactions.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use google_cloud_gax::error::rpc::Code;
use google_cloud_spanner::batch::BatchDml;
use google_cloud_spanner::key::{Key, KeySet};
use google_cloud_spanner::mutation::Mutation as ClientMutation;
use google_cloud_spanner::read::ReadRequest;
use google_cloud_spanner::statement::Statement;

use crate::support::*;

const GUARD: Duration = Duration::from_secs(120);

/// Tables, mutations, DML (with THEN RETURN, batch DML, partitioned DML), queries and reads in
/// a database that also has a queue.
#[tokio::test]
async fn tables_dml_queries_and_reads_pass_through() {
    let db = database(&[
        SIMPLE_QUEUE,
        ORDERS,
        "CREATE INDEX OrdersByNote ON Orders (Note)",
    ])
    .await;
    let client = db.client();

    // Mutations through the official client.
    client
        .write_only_transaction()
        .build()
        .write(vec![
            ClientMutation::new_insert_builder("Orders")
                .set("Id")
                .to(1i64)
                .set("Note")
                .to("one")
                .build(),
            ClientMutation::new_insert_or_update_builder("Orders")
                .set("Id")
                .to(2i64)
                .set("Note")
                .to("two")
                .build(),
        ])
        .await
        .expect("write-only transaction");
    // Raw mutations of every kind.
    let raw = Raw::connect(&db).await;
    commit_ok(
        &raw,
        vec![
            write(
                "Orders",
                &["Id", "Note"],
                vec![int(3), text("three")],
                WriteKind::Insert,
            ),
            write(
                "Orders",
                &["Id", "Note"],
                vec![int(1), text("uno")],
                WriteKind::Update,
            ),
            write(
                "Orders",
                &["Id", "Note"],
                vec![int(4), text("four")],
                WriteKind::Replace,
            ),
            delete("Orders", vec![int(2)]),
        ],
    )
    .await;
    assert_eq!(ids(&db, "Orders").await, vec![1, 3, 4]);

    // DML, THEN RETURN, batch DML.
    let returned = db
        .client()
        .read_write_transaction()
        .build()
        .run(async |tx| {
            let mut rs = tx
                .execute_query(
                    Statement::builder(
                        "UPDATE Orders SET Note = CONCAT(Note, '!') WHERE Id >= 3 THEN RETURN Id, Note",
                    )
                    .build(),
                )
                .await?;
            let mut notes = Vec::new();
            while let Some(row) = rs.next().await {
                notes.push(row?.get::<String>("Note")?);
            }
            let counts = tx
                .execute_batch_update(
                    BatchDml::builder()
                        .add_statement(Statement::builder("INSERT INTO Orders (Id, Note) VALUES (5, 'five')"))
                        .add_statement(Statement::builder("DELETE FROM Orders WHERE Id = 4"))
                        .build(),
                )
                .await?;
            Ok((notes, counts))
        })
        .await
        .expect("DML")
        .result;
    let (mut notes, counts) = returned;
    notes.sort();
    assert_eq!(notes, ["four!", "three!"]);
    assert_eq!(counts, vec![1, 1]);

    // Partitioned DML.
    let updated = client
        .partitioned_dml_transaction()
        .build()
        .execute_update(Statement::builder(
            "UPDATE Orders SET Note = UPPER(Note) WHERE TRUE",
        ))
        .await
        .expect("partitioned DML");
    assert_eq!(updated, 3);

    // A parameterised query, and reads by key and by index.
    let rows = query(
        client,
        Statement::builder("SELECT Id, Note FROM Orders WHERE Id > @min ORDER BY Id")
            .add_param("min", 1i64)
            .build(),
    )
    .await
    .expect("query");
    let got: Vec<(i64, String)> = rows
        .iter()
        .map(|r| (r.get("Id").expect("Id"), r.get("Note").expect("Note")))
        .collect();
    assert_eq!(got, [(3, "THREE!".to_owned()), (5, "FIVE".to_owned())]);

    let mut rs = client
        .single_use()
        .build()
        .execute_read(
            ReadRequest::builder("Orders", vec!["Id", "Note"])
                .with_keys(
                    KeySet::builder()
                        .add_key(Key::new(vec![1i64.into()]))
                        .build(),
                )
                .build(),
        )
        .await
        .expect("read by key");
    let row = rs.next().await.expect("a row").expect("no error");
    assert_eq!(row.get::<String>("Note").expect("Note"), "UNO");
    let mut rs = client
        .single_use()
        .build()
        .execute_read(
            ReadRequest::builder("Orders", vec!["Id", "Note"])
                .with_index("OrdersByNote", KeySet::all())
                .build(),
        )
        .await
        .expect("read by index");
    let mut n = 0;
    while let Some(row) = rs.next().await {
        row.expect("row");
        n += 1;
    }
    assert_eq!(n, 3);

    // Errors pass through too.
    expect_code(
        dml1(&db, "INSERT INTO Orders (Id) VALUES (1)").await,
        Code::AlreadyExists,
    );
    expect_code(
        query(
            client,
            Statement::builder("SELECT * FROM NoSuchTable").build(),
        )
        .await,
        Code::InvalidArgument,
    );
}

/// Statements that merely look like queue functions are not queue calls.
#[tokio::test]
async fn names_and_text_that_look_like_queue_functions_pass_through() {
    let db = database(&[
        SIMPLE_QUEUE,
        "CREATE TABLE RECEIVE_Log (Id INT64 NOT NULL, Line STRING(MAX)) PRIMARY KEY (Id)",
        "CREATE TABLE RENEWLEASE_Audit (Id INT64 NOT NULL) PRIMARY KEY (Id)",
    ])
    .await;
    dml(
        &db,
        vec![
            Statement::builder("INSERT INTO RECEIVE_Log (Id, Line) VALUES (1, \"FROM RECEIVE_Q(max_duration => '1s')\")")
                .build(),
            Statement::builder("INSERT INTO RENEWLEASE_Audit (Id) VALUES (1)").build(),
        ],
    )
    .await
    .expect("DML on tables with look-alike names");
    let rows = query(
        db.client(),
        Statement::builder("SELECT Line FROM RECEIVE_Log WHERE Id = 1").build(),
    )
    .await
    .expect("SELECT from RECEIVE_Log");
    assert_eq!(
        rows[0].get::<String>("Line").expect("Line"),
        "FROM RECEIVE_Q(max_duration => '1s')"
    );
    assert_eq!(
        scalar_i64(&db, "SELECT COUNT(*) FROM RENEWLEASE_Audit").await,
        1
    );
    let rows = query(
        db.client(),
        Statement::builder(
            "SELECT \"SELECT * FROM RECEIVE_Q(max_duration => '20m')\" AS s -- RENEWLEASE_Q([])",
        )
        .build(),
    )
    .await
    .expect("a query that only mentions RECEIVE_Q in text");
    assert_eq!(rows.len(), 1);
}

/// Database admin calls: GetDatabase, ListDatabases, schema changes on tables, and
/// INFORMATION_SCHEMA, where queues appear as table-level objects [C, S6].
#[tokio::test]
async fn admin_calls_and_information_schema_pass_through() {
    let db = database(&[SIMPLE_QUEUE, ORDERS]).await;
    let instance = db
        .path()
        .rsplit_once("/databases/")
        .map(|(i, _)| i.to_owned())
        .expect("a database path");
    let got = db
        .admin()
        .get_database()
        .set_name(db.path())
        .send()
        .await
        .expect("GetDatabase");
    assert_eq!(got.name, db.path());
    let listed = db
        .admin()
        .list_databases()
        .set_parent(&instance)
        .set_page_size(1000)
        .send()
        .await
        .expect("ListDatabases");
    assert!(
        listed.databases.iter().any(|d| d.name == db.path()),
        "ListDatabases does not list this database"
    );

    db.apply_ddl([
        "ALTER TABLE Orders ADD COLUMN Amount INT64",
        "CREATE INDEX OrdersByAmount ON Orders (Amount)",
        "CREATE TABLE Extra (Id INT64 NOT NULL) PRIMARY KEY (Id)",
    ])
    .await
    .expect("table DDL");
    db.apply_ddl(["DROP TABLE Extra"])
        .await
        .expect("DROP TABLE");
    let shown = db.ddl().await.expect("GetDatabaseDdl");
    assert_eq!(shown.len(), 3, "{shown:#?}");
    assert!(shown.iter().any(|s| s.contains("OrdersByAmount")));

    let rows = query(
        db.client(),
        Statement::builder(
            "SELECT TABLE_NAME FROM INFORMATION_SCHEMA.TABLES WHERE TABLE_SCHEMA = '' ORDER BY TABLE_NAME",
        )
        .build(),
    )
    .await
    .expect("INFORMATION_SCHEMA.TABLES");
    let names: BTreeSet<String> = rows
        .iter()
        .map(|r| r.get::<String>("TABLE_NAME").expect("TABLE_NAME"))
        .collect();
    assert_eq!(
        names,
        BTreeSet::from(["Orders".to_owned(), "Q".to_owned()]),
        "the queue appears as a table-level object, and nothing internal does"
    );
}

/// The official emulator runs one read-write transaction per database at a time; the front's
/// own work for receivers must not starve client transactions (issue 3).
#[tokio::test]
async fn client_transactions_are_not_starved_by_active_receivers() {
    const MESSAGES: i64 = 40;
    const TRANSACTIONS: i64 = 30;
    let db = Arc::new(database(&[SIMPLE_QUEUE, ORDERS]).await);
    let raw = Raw::connect(&db).await;
    commit_ok(
        &raw,
        (1..=MESSAGES).map(|id| send_now("Q", id, "work")).collect(),
    )
    .await;

    let stop = Arc::new(AtomicBool::new(false));
    let acked = Arc::new(AtomicUsize::new(0));
    let all_acked = Arc::new(tokio::sync::Notify::new());
    let mut receivers = tokio::task::JoinSet::new();
    for _ in 0..4 {
        let (db, stop, acked) = (Arc::clone(&db), Arc::clone(&stop), Arc::clone(&acked));
        let all_acked = Arc::clone(&all_acked);
        let raw = raw.clone();
        receivers.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let mut receiver = Receiver::open(&db, &receive_sql("Q", "3s", Some(5)))
                    .await
                    .expect("RECEIVE");
                while let Some(d) = receiver.next().await {
                    let id = d.id.expect("Id");
                    // Acks by Mutation.Ack (the official client's runner cannot be moved into
                    // a spawned task); the client transactions below use the official client.
                    let result = commit_retrying(&raw, vec![ack("Q", vec![int(id)], false)]).await;
                    match result {
                        Ok(_) => {
                            if acked.fetch_add(1, Ordering::Relaxed) + 1 == MESSAGES as usize {
                                all_acked.notify_one();
                            }
                        }
                        // A lease that ran out before the ack: another receiver acked it.
                        Err(status) if status.code() == tonic::Code::NotFound => {}
                        Err(status) => panic!("ack failed: {status:?}"),
                    }
                }
            }
        });
    }

    let started = Instant::now();
    let mut slowest = Duration::ZERO;
    tokio::time::timeout(GUARD, async {
        for i in 1..=TRANSACTIONS {
            let one = Instant::now();
            db.client()
                .read_write_transaction()
                .build()
                .run(async |tx| {
                    let mut rs = tx
                        .execute_query(
                            Statement::builder("SELECT COUNT(*) AS N FROM Orders").build(),
                        )
                        .await?;
                    let n: i64 = match rs.next().await {
                        Some(row) => row?.get("N")?,
                        None => 0,
                    };
                    tx.execute_update(
                        Statement::builder("INSERT INTO Orders (Id, Note) VALUES (@id, @note)")
                            .add_param("id", i)
                            .add_param("note", format!("{n} before"))
                            .build(),
                    )
                    .await
                })
                .await
                .unwrap_or_else(|e| panic!("client transaction {i}: {}", chain(&e)));
            slowest = slowest.max(one.elapsed());
        }
    })
    .await
    .expect("client transactions starved by the receivers");
    let client_time = started.elapsed();

    tokio::time::timeout(GUARD, async {
        tokio::select! {
            () = all_acked.notified() => {}
            Some(ended) = receivers.join_next() => {
                panic!("a receiver ended early: {ended:?}")
            }
        }
    })
    .await
    .expect("every message acked");
    stop.store(true, Ordering::Relaxed);
    receivers.abort_all();

    println!(
        "{TRANSACTIONS} client transactions beside 4 receivers: {client_time:?} in all, slowest {slowest:?}"
    );
    assert_eq!(ids(&db, "Orders").await.len(), TRANSACTIONS as usize);
    assert!(ids(&db, "Q").await.is_empty());
}

/// Six read-write transactions on one client, all begun before the first commits: the official
/// emulator alone would let each newcomer displace the older one (which the front would then
/// report as `ABORTED`, for the runner to retry). With admission (the default), the newcomers
/// wait for the database instead: every transaction commits once, at its first attempt.
#[tokio::test]
async fn concurrent_transactions_on_one_client_wait_their_turn_and_each_commit_once() {
    const TRANSACTIONS: usize = 6;
    let db = database(&[ORDERS]).await;
    let client = db.client();
    // Attempts begun (the runner runs the closure once per attempt): more than one per
    // transaction means one was aborted.
    let (begun, _) = tokio::sync::watch::channel(0usize);
    let begun = &begun;
    // Polled concurrently in one task (the runner's future is not `Send` for this closure).
    let transactions = (0..TRANSACTIONS as i64).map(|i| async move {
        client
            .read_write_transaction()
            .build()
            .run(async |tx| {
                begun.send_modify(|n| *n += 1);
                tx.execute_update(
                    Statement::builder("INSERT INTO Orders (Id, Note) VALUES (@id, 'a')")
                        .add_param("id", i * 2)
                        .build(),
                )
                .await?;
                // Keep the transaction open until every other one has begun.
                tokio::time::timeout(GUARD, begun.subscribe().wait_for(|n| *n >= TRANSACTIONS))
                    .await
                    .expect("every transaction begins while the first is open")
                    .expect("the sender lives");
                tx.execute_update(
                    Statement::builder("INSERT INTO Orders (Id, Note) VALUES (@id, 'b')")
                        .add_param("id", i * 2 + 1)
                        .build(),
                )
                .await
            })
            .await
            .map(|_| ())
    });
    for result in futures::future::join_all(transactions).await {
        result.expect("every transaction commits");
    }
    assert_eq!(
        scalar_i64(&db, "SELECT COUNT(*) FROM Orders").await,
        2 * TRANSACTIONS as i64
    );
    assert_eq!(
        *begun.borrow(),
        TRANSACTIONS,
        "attempts: a transaction was aborted and retried instead of waiting its turn"
    );
}

/// A keyed `INSERT` into an ordinary table, which the front holds until commit and applies as
/// a mutation (the official emulator would scan the table for it), answers as the statement
/// would: the row is there after the commit, a key already taken is `ALREADY_EXISTS` at the
/// statement, and a query of the table later in the same transaction sees the row.
#[tokio::test]
async fn keyed_inserts_into_a_table_answer_as_the_statement_would() {
    let db = database(&[ORDERS]).await;
    let insert = |id: i64| {
        Statement::builder("INSERT INTO Orders (Id, Note) VALUES (@id, @note)")
            .add_param("id", id)
            .add_param("note", format!("order {id}"))
            .build()
    };
    let count = db
        .client()
        .read_write_transaction()
        .build()
        .run(async |tx| tx.execute_update(insert(1)).await)
        .await
        .expect("insert 1");
    assert_eq!(count.result, 1, "one row inserted");
    assert_eq!(ids(&db, "Orders").await, vec![1]);

    let taken = db
        .client()
        .read_write_transaction()
        .build()
        .run(async |tx| tx.execute_update(insert(1)).await)
        .await;
    let code = taken
        .expect_err("a key already taken")
        .status()
        .map(|s| s.code);
    assert_eq!(code, Some(Code::AlreadyExists));

    let seen = db
        .client()
        .read_write_transaction()
        .build()
        .run(async |tx| {
            tx.execute_update(insert(2)).await?;
            let mut rows = tx
                .execute_query(Statement::builder("SELECT Note FROM Orders WHERE Id = 2").build())
                .await?;
            let mut notes = Vec::new();
            while let Some(row) = rows.next().await {
                notes.push(row?.get::<String>("Note")?);
            }
            Ok(notes)
        })
        .await
        .expect("insert 2 and read it back");
    assert_eq!(seen.result, vec!["order 2".to_owned()]);
    assert_eq!(ids(&db, "Orders").await, vec![1, 2]);
}

/// Tables and queues with an empty primary key (`PRIMARY KEY ()`) hold one row at most: a
/// keyed `INSERT` into one (which names no key column, so every row has the empty key) inserts
/// that row, and a second insert is `ALREADY_EXISTS`, as it would be without the front.
#[tokio::test]
async fn inserts_into_tables_and_queues_with_an_empty_primary_key() {
    let db = database(&[
        "CREATE TABLE Singleton (Note STRING(MAX) NOT NULL) PRIMARY KEY ()",
        "CREATE QUEUE Lonely (Payload STRING(MAX) NOT NULL) PRIMARY KEY ()",
    ])
    .await;
    for (table, column) in [("Singleton", "Note"), ("Lonely", "Payload")] {
        let insert = |text: &str| {
            Statement::builder(format!("INSERT INTO {table} ({column}) VALUES (@text)"))
                .add_param("text", text.to_owned())
                .build()
        };
        let first = db
            .client()
            .read_write_transaction()
            .build()
            .run(async |tx| tx.execute_update(insert("one")).await)
            .await
            .unwrap_or_else(|e| panic!("the first insert into {table}: {}", chain(&e)));
        assert_eq!(first.result, 1, "one row inserted into {table}");

        let second = db
            .client()
            .read_write_transaction()
            .build()
            .run(async |tx| tx.execute_update(insert("two")).await)
            .await;
        let code = second
            .expect_err("the empty key is taken")
            .status()
            .map(|s| s.code);
        assert_eq!(
            code,
            Some(Code::AlreadyExists),
            "the second insert into {table}"
        );

        let rows = query(
            db.client(),
            Statement::builder(format!("SELECT {column} FROM {table}")).build(),
        )
        .await
        .unwrap_or_else(|e| panic!("read {table}: {}", chain(&e)));
        let texts: Vec<String> = rows
            .iter()
            .map(|r| r.get::<String>(column).expect("text"))
            .collect();
        assert_eq!(texts, vec!["one".to_owned()], "the rows of {table}");
    }
}
