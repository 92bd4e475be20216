//! The harness and the official client work end to end (through the queue front when the
//! backend is an emulator).

use google_cloud_spanner::statement::Statement;
use spanner_queues_tests::{db_or_skip, setup};

const ACCOUNTS: &str =
    "CREATE TABLE Accounts (Id INT64 NOT NULL, Owner STRING(MAX), Balance INT64) PRIMARY KEY (Id)";

#[tokio::test]
async fn table_dml_in_read_write_transaction_and_read_back() {
    let db = db_or_skip!();
    db.apply_ddl([ACCOUNTS]).await.expect("create table");

    let runner = db.client().read_write_transaction().build();
    let inserted = runner
        .run(async |tx| {
            tx.execute_update(
                Statement::builder(
                    "INSERT INTO Accounts (Id, Owner, Balance) VALUES (@id, @owner, @balance)",
                )
                .add_param("id", 7i64)
                .add_param("owner", "ada")
                .add_param("balance", 120i64)
                .build(),
            )
            .await
        })
        .await
        .expect("read-write transaction")
        .result;
    assert_eq!(inserted, 1, "one row inserted");

    let tx = db.client().single_use().build();
    let mut rows = tx
        .execute_query(
            Statement::builder("SELECT Owner, Balance FROM Accounts WHERE Id = @id")
                .add_param("id", 7i64)
                .build(),
        )
        .await
        .expect("query");
    let row = rows
        .next()
        .await
        .expect("one row")
        .expect("row without error");
    let owner: String = row.get("Owner").expect("Owner");
    let balance: i64 = row.get("Balance").expect("Balance");
    assert_eq!((owner.as_str(), balance), ("ada", 120));
    assert!(rows.next().await.is_none(), "exactly one row");

    let ddl = db.ddl().await.expect("GetDatabaseDdl");
    assert_eq!(ddl.len(), 1, "{ddl:?}");
    assert!(ddl[0].starts_with("CREATE TABLE Accounts"), "{ddl:?}");
}

#[tokio::test]
async fn databases_from_the_harness_are_isolated() {
    let first = db_or_skip!(setup().without_sdk_tables().with_ddl([ACCOUNTS]));
    let second = db_or_skip!(setup().without_sdk_tables().with_ddl([ACCOUNTS]));
    assert_ne!(first.path(), second.path());

    first
        .client()
        .read_write_transaction()
        .build()
        .run(async |tx| {
            tx.execute_update(Statement::builder(
                "INSERT INTO Accounts (Id, Owner, Balance) VALUES (1, 'only-in-first', 1)",
            ))
            .await
        })
        .await
        .expect("insert into first");

    let count = |db: &spanner_queues_tests::TestDatabase| {
        let tx = db.client().single_use().build();
        async move {
            let mut rows = tx
                .execute_query(Statement::builder("SELECT COUNT(*) AS N FROM Accounts"))
                .await
                .expect("count query");
            let row = rows.next().await.expect("a row").expect("no error");
            row.get::<i64>("N").expect("N")
        }
    };
    assert_eq!(count(&first).await, 1);
    assert_eq!(
        count(&second).await,
        0,
        "a write in one database is invisible in another"
    );

    // Schema changes are per database too.
    second
        .apply_ddl(["CREATE TABLE OnlyInSecond (Id INT64 NOT NULL) PRIMARY KEY (Id)"])
        .await
        .expect("ddl on second");
    assert_eq!(first.ddl().await.expect("ddl").len(), 1);
    assert_eq!(second.ddl().await.expect("ddl").len(), 2);
}
