//! Names: keywords as names, names passed on as written.

use super::{apply, err, one};
use crate::ddl::{Catalog, DdlError};

/// Words that are keywords only in some positions (`constraint`, `foreign`, `check`,
/// `primary`, `synonym`) are column names where a column is declared: the official emulator
/// accepts them unquoted and prints them unquoted, and the queue must read back from what it
/// prints (issue 34: a queue with such a key column failed every later statement with
/// INTERNAL).
#[test]
fn position_keywords_are_column_names_and_read_back() {
    for word in [
        "constraint",
        "foreign",
        "check",
        "primary",
        "synonym",
        "unique",
    ] {
        for written in [word.to_owned(), format!("`{word}`")] {
            let create = format!(
                "CREATE QUEUE Q ({written} INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) \
                 PRIMARY KEY ({written})"
            );
            let backend = one(&Catalog::default(), &create).expect("translates");
            assert!(
                backend[0].contains(&format!("\n  {written} INT64 NOT NULL,\n")),
                "passed on as written: {}",
                backend[0]
            );
            let (catalog, printed) = apply(&[&create]);
            let queue = catalog.queue("Q").expect("reads back");
            assert_eq!(queue.key_columns[0].column.name, word);
            // What the official emulator prints (bare, since none of them is reserved).
            let bare = printed[0].replace(&format!("`{word}`"), word);
            let catalog = Catalog::from_backend_ddl(&[bare]).expect("reads back");
            assert_eq!(catalog.queue("Q").expect("a queue").key_columns.len(), 1);
        }
    }
    // The constraints themselves are still constraints.
    for element in [
        "CONSTRAINT fk FOREIGN KEY (Id) REFERENCES Users (UserId)",
        "FOREIGN KEY (Id) REFERENCES Users (UserId)",
        "CONSTRAINT ck CHECK (Id > 0)",
        "CHECK (Id > 0)",
    ] {
        let e = err(&format!(
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL, {element}) \
             PRIMARY KEY (Id)"
        ));
        assert!(
            matches!(e, DdlError::InvalidQueue { .. }),
            "{element}: {e:?}"
        );
    }
}

/// Names go to the backend as the client wrote them, so that the official emulator accepts or
/// refuses them as Cloud Spanner would; quoted names stay quoted.
#[test]
fn names_are_passed_on_as_written() {
    let out = one(
        &Catalog::default(),
        "CREATE QUEUE `select` (`Order` INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) \
         PRIMARY KEY (`Order`)",
    )
    .expect("translates");
    assert!(out[0].starts_with("CREATE TABLE `select` (\n  `Order` INT64 NOT NULL,"));
    assert!(out[0].contains(") PRIMARY KEY (`Order`)"));
    assert!(out[1].ends_with("ON `select` (DeliverTime) STORING (SpannerQueuesEmulatorMessageId)"));
    // A reserved word left bare reaches the backend bare, which refuses it (a syntax error).
    let out = one(
        &Catalog::default(),
        "CREATE QUEUE select (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Id)",
    )
    .expect("translates");
    assert!(out[0].starts_with("CREATE TABLE select ("));
    let (catalog, _) = apply(&[
        "CREATE QUEUE `select` (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Id)",
    ]);
    assert_eq!(
        one(
            &catalog,
            "ALTER QUEUE select SET OPTIONS (disable_send = true)"
        )
        .expect("translates")[0]
            .split(" ALTER COLUMN")
            .next(),
        Some("ALTER TABLE select")
    );
    assert_eq!(
        one(&catalog, "DROP QUEUE `select`").expect("translates"),
        [
            "DROP INDEX SpannerQueuesEmulatorDue_select",
            "DROP TABLE `select`"
        ]
    );
}
