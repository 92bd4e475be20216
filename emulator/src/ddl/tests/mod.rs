//! Unit tests.

mod names;

use base64::Engine as _;

use super::bodies::parse_table;
use super::metadata::{QueueMeta, decode_meta, encode_meta};
use super::model::{Interleave, OnDelete, PayloadKind, QueueOptions, ReceiveMode};
use super::translate::{render_client_ddl, translate_batch_with_catalog};
use super::*;
use spanner_queues_sql::{Cursor, Dialect, quote_ident, tokenize};

/// Translates one GoogleSQL statement against `catalog`.
fn one(catalog: &Catalog, sql: &str) -> Result<Vec<String>, DdlError> {
    translate_batch(catalog, &[sql.to_owned()], Dialect::GoogleSql)
        .map(|mut t| t.remove(0).backend_statements)
}

/// The error of translating one GoogleSQL statement against an empty catalog.
fn err(sql: &str) -> DdlError {
    one(&Catalog::default(), sql).expect_err("statement must be rejected")
}

/// Renders a backend statement the way the official emulator's `GetDatabaseDdl` prints it:
/// no `HIDDEN`, `PRIMARY KEY(...)` without a space, `OPTIONS` on separate lines, and an
/// explicit `ON DELETE NO ACTION`.
fn emulator_print(statement: &str) -> String {
    let toks = tokenize(statement, Dialect::GoogleSql).expect("backend DDL tokenizes");
    let mut p = Cursor::new(&toks, "CREATE TABLE");
    p.set_pos(2);
    let table = parse_table(&mut p, false).expect("backend DDL parses");
    let mut out = format!(
        "CREATE TABLE {} (\n",
        quote_ident(Dialect::GoogleSql, &table.full_name())
    );
    for column in &table.columns {
        let mut column = column.clone();
        column.hidden = false;
        out.push_str(&format!("  {},\n", column.render(true)));
    }
    let keys: Vec<String> = table
        .primary_key
        .iter()
        .map(|k| {
            let n = quote_ident(Dialect::GoogleSql, &k.name).into_owned();
            if k.descending { format!("{n} DESC") } else { n }
        })
        .collect();
    out.push_str(&format!(") PRIMARY KEY({})", keys.join(", ")));
    if let Some(mut interleave) = table.interleave.clone() {
        interleave.on_delete.get_or_insert(OnDelete::NoAction);
        out.push_str(&format!(",\n  {}", interleave.sql()));
    }
    if let Some(policy) = &table.row_deletion_policy {
        out.push_str(&format!(", ROW DELETION POLICY ({policy})"));
    }
    out
}

/// Runs client DDL through translation and a simulated backend, returning the catalog and
/// the backend's printed schema.
fn apply(statements: &[&str]) -> (Catalog, Vec<String>) {
    let statements: Vec<String> = statements.iter().map(|s| (*s).to_owned()).collect();
    let translated = translate_batch(&Catalog::default(), &statements, Dialect::GoogleSql)
        .expect("batch translates");
    let printed: Vec<String> = translated
        .iter()
        .flat_map(|t| t.backend_statements.iter())
        .map(|s| {
            if s.starts_with("CREATE TABLE") {
                emulator_print(s)
            } else {
                s.clone()
            }
        })
        .collect();
    let catalog = Catalog::from_backend_ddl(&printed).expect("backend schema reads back");
    (catalog, printed)
}

const USER_TASKS: &str = "CREATE QUEUE UserTasks (
  UserId     INT64 NOT NULL,
  MessageId  STRING(36) NOT NULL, -- UUID recommended
  Payload    BYTES(MAX) NOT NULL  -- Also: Proto, JSON, String are possible.
) PRIMARY KEY (UserId, MessageId),
INTERLEAVE IN PARENT Users ON DELETE CASCADE;";

const Q1: &str = "CREATE QUEUE Q1 ( Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL, ) \
                      PRIMARY KEY (Id), OPTIONS (receive_mode = 'PULL')";

const APPLICATION_TASKS: &str = "CREATE QUEUE ApplicationTasks (
  TaskType STRING(50) NOT NULL,
  TaskId STRING(36) NOT NULL,
  Payload JSON NOT NULL,
) PRIMARY KEY (TaskType, TaskId)";

const USERS: &str = "CREATE TABLE Users (UserId INT64 NOT NULL) PRIMARY KEY (UserId)";

#[test]
fn user_tasks_becomes_an_interleaved_table_with_internal_columns() {
    let (catalog, printed) = apply(&[USERS, USER_TASKS]);
    let out = one(&Catalog::default(), USER_TASKS).expect("translates");
    assert_eq!(out.len(), 2);
    // The hidden due index: receivers read from a delivery time on instead of scanning.
    assert_eq!(
        out[1],
        "CREATE INDEX SpannerQueuesEmulatorDue_UserTasks ON UserTasks (DeliverTime) \
         STORING (SpannerQueuesEmulatorMessageId)"
    );
    let queue = catalog.queue("UserTasks").expect("read back");
    assert!(queue.has_due_index, "the catalog sees the index");
    assert!(
        render_client_ddl_in(&printed, Dialect::GoogleSql)
            .expect("renders")
            .iter()
            .all(|s| !s.contains("SpannerQueuesEmulatorDue_")),
        "clients do not see it"
    );
    let backend = &out[0];
    assert!(backend.starts_with("CREATE TABLE UserTasks (\n  UserId INT64 NOT NULL,\n"));
    assert!(backend.contains("  Payload BYTES(MAX) NOT NULL,\n"));
    assert!(backend.contains("  DeliverTime TIMESTAMP NOT NULL DEFAULT (CURRENT_TIMESTAMP()),\n"));
    assert!(backend.contains(
        "  SpannerQueuesEmulatorMessageId STRING(36) NOT NULL DEFAULT (GENERATE_UUID()) HIDDEN,\n"
    ));
    assert!(backend.contains("  SpannerQueuesEmulatorQueue STRING(MAX) DEFAULT ('sqe1:"));
    assert!(backend.ends_with(
        ") PRIMARY KEY (UserId, MessageId),\n  INTERLEAVE IN PARENT Users ON DELETE CASCADE"
    ));
    let queue = catalog.queue("usertasks").expect("queue is in the catalog");
    assert_eq!(queue.name, "UserTasks");
    let keys: Vec<&str> = queue
        .key_columns
        .iter()
        .map(|k| k.column.name.as_str())
        .collect();
    assert_eq!(keys, ["UserId", "MessageId"]);
    assert_eq!(queue.key_columns[1].column.data_type, "STRING(36)");
    assert_eq!(queue.payload.kind, PayloadKind::Bytes);
    assert_eq!(
        queue.interleave,
        Some(Interleave {
            parent: "Users".to_owned(),
            parent_written: "Users".to_owned(),
            in_parent: true,
            on_delete: Some(OnDelete::Cascade),
        })
    );
    assert!(catalog.is_queue("USERTASKS"));
    assert!(!catalog.is_queue("Users"));
    assert_eq!(printed.len(), 3, "Users, UserTasks and its due index");
}

#[test]
fn q1_with_trailing_comma_and_receive_mode() {
    let (catalog, _) = apply(&[Q1]);
    let queue = catalog.queue("Q1").expect("queue exists");
    assert_eq!(queue.options.receive_mode, Some(ReceiveMode::Pull));
    assert_eq!(queue.options.disable_send, None);
    assert!(!queue.options.send_disabled());
    assert!(!queue.options.delivery_disabled());
    let rendered =
        render_client_ddl(&[one(&Catalog::default(), Q1).expect("ok").remove(0)]).expect("renders");
    assert_eq!(
        rendered[0],
        "CREATE QUEUE Q1 (\n  Id INT64 NOT NULL,\n  Payload BYTES(MAX) NOT NULL,\n) \
             PRIMARY KEY(Id),\n  OPTIONS (receive_mode = 'PULL')"
    );
}

#[test]
fn application_tasks_has_a_json_payload() {
    let (catalog, _) = apply(&[APPLICATION_TASKS]);
    let queue = catalog.queue("ApplicationTasks").expect("queue exists");
    assert_eq!(queue.payload.kind, PayloadKind::Json);
    assert!(queue.interleave.is_none());
    assert_eq!(
        queue
            .key_column("taskid")
            .map(|k| k.column.data_type.as_str()),
        Some("STRING(36)")
    );
}

#[test]
fn rendering_matches_the_documented_layout() {
    let sql = "CREATE QUEUE UserTasks (UserId INT64 NOT NULL, MessageId STRING(36) NOT NULL, \
                   Payload BYTES(MAX) NOT NULL) PRIMARY KEY (UserId, MessageId), \
                   INTERLEAVE IN PARENT Users ON DELETE CASCADE, OPTIONS (disable_send = true)";
    let (_, printed) = apply(&[USERS, sql]);
    let rendered = render_client_ddl(&printed).expect("renders");
    assert_eq!(rendered[0], printed[0], "tables pass through unchanged");
    assert_eq!(
        rendered[1],
        "CREATE QUEUE UserTasks (
  UserId INT64 NOT NULL,
  MessageId STRING(36) NOT NULL,
  Payload BYTES(MAX) NOT NULL,
) PRIMARY KEY(UserId, MessageId),
  INTERLEAVE IN PARENT Users ON DELETE CASCADE,
  OPTIONS (disable_send = true)"
    );
}

/// client DDL → backend → printed → catalog → client DDL → backend again: same backend.
fn assert_round_trip(setup: &[&str], sql: &str) {
    let mut all: Vec<&str> = setup.to_vec();
    all.push(sql);
    let (_, printed) = apply(&all);
    let rendered = render_client_ddl(&printed).expect("renders");
    let again: Vec<String> = rendered.clone();
    let (_, printed_again) = apply(&again.iter().map(String::as_str).collect::<Vec<_>>());
    assert_eq!(printed, printed_again, "round trip of {sql}");
    let rendered_again = render_client_ddl(&printed_again).expect("renders");
    assert_eq!(rendered, rendered_again);
    let (base, _) = apply(setup);
    let first = one(&base, sql).expect("translates");
    let second = one(&base, rendered.last().expect("rendered")).expect("again");
    assert_eq!(
        first, second,
        "the rendered CREATE QUEUE translates to the same table"
    );
}

#[test]
fn round_trips() {
    assert_round_trip(&[USERS], USER_TASKS);
    assert_round_trip(&[], Q1);
    assert_round_trip(&[], APPLICATION_TASKS);
    assert_round_trip(
        &[USERS],
        "create queue `Order` (`Select` int64 not null, UserId INT64 NOT NULL HIDDEN, \
             Ts TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true), \
             payload string(max) not null hidden) \
             primary key (UserId, `Select` DESC, Ts), interleave in Users, \
             row deletion policy (older_than(DeliverTime, interval 7 day)), \
             options (disable_delivery = false, locality_group = 'it\\'s', disable_send = true)",
    );
    assert_round_trip(
        &[],
        "CREATE QUEUE P (Id INT64 NOT NULL, Doubled INT64 NOT NULL AS (Id * 2) STORED, \
             Payload examples.music.`Singer` NOT NULL) PRIMARY KEY (Id, Doubled)",
    );
    assert_round_trip(
        &[],
        "CREATE QUEUE Single (Payload STRING(1024) NOT NULL) PRIMARY KEY ()",
    );
}

#[test]
fn hidden_columns_survive_the_backend_dropping_the_word() {
    let (catalog, printed) = apply(&[
        "CREATE QUEUE H (Id INT64 NOT NULL HIDDEN, Payload BYTES(MAX) NOT NULL HIDDEN) \
             PRIMARY KEY (Id)",
    ]);
    assert!(!printed[0].contains("HIDDEN"));
    let queue = catalog.queue("H").expect("queue exists");
    assert!(queue.key_columns[0].column.hidden);
    assert!(queue.payload.column.hidden);
    assert!(
        queue
            .client_create_queue()
            .contains("  Payload BYTES(MAX) NOT NULL HIDDEN,\n")
    );
}

#[test]
fn non_parent_interleave_is_kept_in_metadata_only() {
    let (catalog, printed) = apply(&[
        USERS,
        "CREATE QUEUE T (UserId INT64 NOT NULL, Id INT64 NOT NULL, Payload BYTES(MAX) \
             NOT NULL) PRIMARY KEY (UserId, Id), INTERLEAVE IN Users",
    ]);
    assert!(!printed[1].contains("INTERLEAVE"));
    let queue = catalog.queue("T").expect("queue exists");
    assert_eq!(
        queue.interleave,
        Some(Interleave {
            parent: "Users".to_owned(),
            parent_written: "Users".to_owned(),
            in_parent: false,
            on_delete: None
        })
    );
    assert!(
        queue
            .client_create_queue()
            .contains(",\n  INTERLEAVE IN Users")
    );
}

#[test]
fn non_parent_interleave_checks_parent_and_key_prefix() {
    let base = Catalog::from_backend_ddl(&[USERS.to_owned()]).expect("reads");
    let missing = one(
        &base,
        "CREATE QUEUE T (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Id), \
             INTERLEAVE IN Nope",
    )
    .expect_err("unknown parent");
    assert_eq!(missing.code(), DdlErrorCode::NotFound);
    let prefix = one(
        &base,
        "CREATE QUEUE T (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Id), \
             INTERLEAVE IN Users",
    )
    .expect_err("key is not prefixed by the parent's");
    assert!(matches!(prefix, DdlError::InvalidQueue { .. }), "{prefix}");
    assert!(prefix.to_string().contains("UserId"));
    let types = one(
        &base,
        "CREATE QUEUE T (UserId STRING(10) NOT NULL, Payload BYTES(MAX) NOT NULL) \
             PRIMARY KEY (UserId), INTERLEAVE IN Users",
    )
    .expect_err("key type differs");
    assert!(matches!(types, DdlError::InvalidQueue { .. }));
    let on_delete = one(
        &base,
        "CREATE QUEUE T (UserId INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) \
             PRIMARY KEY (UserId), INTERLEAVE IN Users ON DELETE CASCADE",
    )
    .expect_err("ON DELETE needs PARENT");
    assert!(on_delete.to_string().contains("ON DELETE"));
}

#[test]
fn parent_tables_of_non_parent_queues_cannot_be_dropped_or_renamed() {
    let (catalog, _) = apply(&[
        USERS,
        "CREATE QUEUE T (UserId INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) \
             PRIMARY KEY (UserId), INTERLEAVE IN Users",
    ]);
    for sql in [
        "DROP TABLE Users",
        "ALTER TABLE users RENAME TO People",
        "RENAME TABLE Users TO People",
    ] {
        let e = one(&catalog, sql).expect_err(sql);
        assert!(matches!(e, DdlError::InterleavedQueue { .. }), "{sql}: {e}");
        assert_eq!(e.code(), DdlErrorCode::FailedPrecondition);
    }
}

#[test]
fn create_queue_errors() {
    type Check = fn(&DdlError) -> bool;
    let cases: &[(&str, Check)] = &[
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL) PRIMARY KEY (Id)",
            |e| matches!(e, DdlError::MissingPayload { queue } if queue == "Q"),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload BYTES(MAX)) PRIMARY KEY (Id)",
            |e| matches!(e, DdlError::PayloadNullable { column, .. } if column == "Payload"),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload INT64 NOT NULL) PRIMARY KEY (Id)",
            |e| matches!(e, DdlError::PayloadType { found, .. } if found == "INT64"),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload BYTES NOT NULL) PRIMARY KEY (Id)",
            |e| matches!(e, DdlError::PayloadType { .. }),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload ARRAY<BYTES(MAX)> NOT NULL) PRIMARY KEY (Id)",
            |e| matches!(e, DdlError::PayloadType { .. }),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL) PRIMARY KEY (Id, Payload)",
            |e| matches!(e, DdlError::PayloadInPrimaryKey { .. }),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload JSON NOT NULL, DeliverTime TIMESTAMP NOT NULL) PRIMARY KEY (Id)",
            |e| matches!(e, DdlError::DeliverTimeDeclared { column, .. } if column == "DeliverTime"),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload JSON NOT NULL, Extra STRING(MAX)) PRIMARY KEY (Id)",
            |e| matches!(e, DdlError::NonKeyColumn { column, .. } if column == "Extra"),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Nope)",
            |e| matches!(e, DdlError::UndeclaredKeyColumn { column, .. } if column == "Nope"),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, id INT64, Payload JSON NOT NULL) PRIMARY KEY (Id)",
            |e| matches!(e, DdlError::DuplicateColumn { column, .. } if column == "id"),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Id, id)",
            |e| matches!(e, DdlError::InvalidQueue { .. }),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Id), OPTIONS (colour = 'red')",
            |e| matches!(e, DdlError::UnknownOption { option, .. } if option == "colour"),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Id), OPTIONS (receive_mode = 'PUSH')",
            |e| matches!(e, DdlError::InvalidOptionValue { option, .. } if option == "receive_mode"),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Id), OPTIONS (disable_send = 'yes')",
            |e| matches!(e, DdlError::InvalidOptionValue { option, .. } if option == "disable_send"),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Id), OPTIONS (disable_delivery = 1)",
            |e| matches!(e, DdlError::InvalidOptionValue { .. }),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Id), OPTIONS (locality_group = true)",
            |e| matches!(e, DdlError::InvalidOptionValue { .. }),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Id), OPTIONS (disable_send = true, DISABLE_SEND = false)",
            |e| matches!(e, DdlError::InvalidQueue { .. }),
        ),
        (
            "CREATE QUEUE sch.Q (Id INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Id)",
            |e| matches!(e, DdlError::NamedSchema { queue } if queue == "sch.Q"),
        ),
        (
            "CREATE QUEUE Q (SpannerQueuesEmulatorMessageId STRING(36) NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (SpannerQueuesEmulatorMessageId)",
            |e| matches!(e, DdlError::ReservedColumn { .. }),
        ),
        (
            "CREATE QUEUE Q (SpannerLeaseToken STRING(36) NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (SpannerLeaseToken)",
            |e| matches!(e, DdlError::ReservedColumn { .. }),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL DEFAULT (1), Payload JSON NOT NULL) PRIMARY KEY (Id)",
            |e| matches!(e, DdlError::InvalidQueue { reason, .. } if reason.contains("DEFAULT")),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload STRING(MAX) NOT NULL AS ('x') STORED) PRIMARY KEY (Id)",
            |e| matches!(e, DdlError::InvalidQueue { .. }),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload JSON NOT NULL, CONSTRAINT c CHECK (Id > 0)) PRIMARY KEY (Id)",
            |e| matches!(e, DdlError::InvalidQueue { .. }),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload JSON NOT NULL)",
            |e| matches!(e, DdlError::Syntax { .. }),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Id) extra",
            |e| matches!(e, DdlError::Syntax { .. }),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Id), INTERLEAVE IN PARENT P ON DELETE",
            |e| matches!(e, DdlError::Syntax { .. }),
        ),
        (
            "CREATE QUEUE Q (Id INT64 NOT NULL, Payload 'x) PRIMARY KEY (Id)",
            |e| matches!(e, DdlError::Syntax { .. }),
        ),
        (
            "CREATE OR REPLACE QUEUE Q (Payload JSON NOT NULL) PRIMARY KEY ()",
            |e| matches!(e, DdlError::UnsupportedStatement { .. }),
        ),
    ];
    for (sql, check) in cases {
        let e = err(sql);
        assert!(check(&e), "{sql}\n  gave {e:?}");
        assert_eq!(e.code(), DdlErrorCode::InvalidArgument, "{sql}");
        assert!(!e.to_string().is_empty());
    }
}

#[test]
fn error_messages_name_the_queue_and_the_column() {
    let e = err(
        "CREATE QUEUE Jobs (Id INT64 NOT NULL, Payload JSON NOT NULL, Note STRING(10)) PRIMARY KEY (Id)",
    );
    let msg = e.to_string();
    assert!(msg.contains("Jobs") && msg.contains("Note"), "{msg}");
    let e = err(
        "CREATE QUEUE Jobs (Id INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Id), OPTIONS (x = 1)",
    );
    assert!(
        e.to_string().contains("Unknown option x for queue Jobs"),
        "{e}"
    );
}

#[test]
fn payload_types_and_case() {
    for (ty, kind) in [
        ("BYTES(MAX)", PayloadKind::Bytes),
        ("bytes(1024)", PayloadKind::Bytes),
        ("STRING(36)", PayloadKind::String),
        ("json", PayloadKind::Json),
        ("examples.Singer", PayloadKind::Proto),
        ("`examples.Singer`", PayloadKind::Proto),
        ("Singer", PayloadKind::Proto),
    ] {
        let sql =
            format!("CREATE QUEUE Q (Id INT64 NOT NULL, pAyLoAd {ty} NOT NULL) PRIMARY KEY (Id)");
        let (catalog, _) = apply(&[sql.as_str()]);
        let queue = catalog.queue("q").expect("queue exists");
        assert_eq!(queue.payload.kind, kind, "{ty}");
        assert_eq!(queue.payload.column.name, "pAyLoAd");
    }
    for ty in [
        "INT64",
        "BOOL",
        "TIMESTAMP",
        "STRING",
        "ARRAY<STRING(MAX)>",
        "FLOAT64",
    ] {
        let sql =
            format!("CREATE QUEUE Q (Id INT64 NOT NULL, Payload {ty} NOT NULL) PRIMARY KEY (Id)");
        assert!(matches!(err(&sql), DdlError::PayloadType { .. }), "{ty}");
    }
}

#[test]
fn create_queue_against_existing_names() {
    let (catalog, _) = apply(&[USERS, Q1]);
    let e = one(&catalog, Q1).expect_err("queue exists");
    assert!(matches!(e, DdlError::QueueExists { .. }));
    assert_eq!(e.code(), DdlErrorCode::AlreadyExists);
    let e = one(&catalog, &Q1.replace("QUEUE Q1", "QUEUE q1")).expect_err("case-insensitive");
    assert_eq!(e.code(), DdlErrorCode::AlreadyExists);
    let e = one(
        &catalog,
        "CREATE QUEUE Users (Id INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Id)",
    )
    .expect_err("table exists");
    assert!(matches!(e, DdlError::NameInUse { .. }));
    let e = one(
        &catalog,
        "CREATE QUEUE IF NOT EXISTS Users (Id INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Id)",
    )
    .expect_err("IF NOT EXISTS does not hide a table");
    assert_eq!(e.code(), DdlErrorCode::AlreadyExists);
    // IF NOT EXISTS on an existing queue: a harmless backend statement, catalog unchanged.
    let sql = "CREATE QUEUE IF NOT EXISTS Q1 (Other INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Other)";
    let (translated, after) =
        translate_batch_with_catalog(&catalog, &[sql.to_owned()], Dialect::GoogleSql)
            .expect("no-op");
    assert!(translated[0].backend_statements[0].starts_with("CREATE TABLE IF NOT EXISTS Q1 ("));
    assert_eq!(after, catalog);
}

#[test]
fn batch_creates_then_alters_in_order() {
    let statements: Vec<String> = [
        USERS,
        USER_TASKS,
        "ALTER QUEUE UserTasks SET OPTIONS (disable_send = true, locality_group = 'hot')",
        "ALTER QUEUE UserTasks SET ON DELETE NO ACTION",
        "CREATE INDEX ByUser ON Users (UserId)",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let (translated, catalog) =
        translate_batch_with_catalog(&Catalog::default(), &statements, Dialect::GoogleSql)
            .expect("batch translates");
    assert_eq!(translated.len(), statements.len());
    for (i, (t, s)) in translated.iter().zip(&statements).enumerate() {
        assert_eq!(&t.client_statement, s);
        // CREATE QUEUE adds the queue's due index.
        assert_eq!(t.backend_statements.len(), if i == 1 { 2 } else { 1 });
    }
    assert_eq!(translated[0].backend_statements[0], USERS);
    assert_eq!(translated[4].backend_statements[0], statements[4]);
    let set_meta = &translated[2].backend_statements[0];
    assert!(set_meta.starts_with(
        "ALTER TABLE UserTasks ALTER COLUMN SpannerQueuesEmulatorQueue SET DEFAULT ('sqe1:"
    ));
    assert_eq!(
        translated[3].backend_statements[0],
        "ALTER TABLE UserTasks SET ON DELETE NO ACTION"
    );
    let queue = catalog.queue("UserTasks").expect("exists");
    assert_eq!(queue.options.disable_send, Some(true));
    assert_eq!(queue.options.locality_group.as_deref(), Some("hot"));
    assert_eq!(
        queue.interleave.as_ref().and_then(|i| i.on_delete),
        Some(OnDelete::NoAction)
    );
}

/// Applies ALTER's metadata statement to a printed CREATE TABLE, as the backend would.
fn apply_set_default(printed: &str, alter: &str) -> String {
    let new_default = alter.split("SET DEFAULT ").nth(1).expect("SET DEFAULT");
    let start = printed
        .find("SpannerQueuesEmulatorQueue STRING(MAX) DEFAULT ")
        .expect("meta");
    let from = start + "SpannerQueuesEmulatorQueue STRING(MAX) DEFAULT ".len();
    let end = from + printed[from..].find("),").expect("end") + 1;
    format!("{}{}{}", &printed[..from], new_default, &printed[end..])
}

#[test]
fn set_options_merges_and_null_resets() {
    let (catalog, printed) = apply(&[
        "CREATE QUEUE Q (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Id), \
             OPTIONS (receive_mode = 'pull', disable_send = true)",
    ]);
    let alter = one(
        &catalog,
        "ALTER QUEUE q SET OPTIONS (disable_delivery = true, disable_send = NULL)",
    )
    .expect("alters")
    .remove(0);
    let after = apply_set_default(&printed[0], &alter);
    let reread = Catalog::from_backend_ddl(std::slice::from_ref(&after)).expect("reads");
    let options = &reread.queue("Q").expect("exists").options;
    assert_eq!(
        *options,
        QueueOptions {
            receive_mode: Some(ReceiveMode::Pull),
            disable_send: None,
            disable_delivery: Some(true),
            locality_group: None,
        }
    );
    let rendered = render_client_ddl(&[after]).expect("renders");
    assert!(rendered[0].ends_with("OPTIONS (receive_mode = 'PULL', disable_delivery = true)"));
    let e = one(
        &catalog,
        "ALTER QUEUE Q SET OPTIONS (receive_mode = 'PUSH')",
    )
    .expect_err("bad value");
    assert!(matches!(e, DdlError::InvalidOptionValue { .. }));
}

#[test]
fn alter_queue_interleave_and_policies() {
    let (catalog, _) = apply(&[
        USERS,
        USER_TASKS,
        "CREATE QUEUE Loose (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Id)",
        "CREATE QUEUE Child (UserId INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) \
             PRIMARY KEY (UserId), INTERLEAVE IN Users",
    ]);
    let ok = |sql: &str| one(&catalog, sql).map(|mut v| v.remove(0));
    assert_eq!(
        ok("ALTER QUEUE UserTasks SET INTERLEAVE IN PARENT Users").expect("same parent"),
        "ALTER TABLE UserTasks SET ON DELETE NO ACTION"
    );
    assert_eq!(
        ok("ALTER QUEUE UserTasks SET INTERLEAVE IN PARENT users ON DELETE CASCADE").expect("ok"),
        "ALTER TABLE UserTasks SET ON DELETE CASCADE"
    );
    assert!(
        ok("ALTER QUEUE Child SET INTERLEAVE IN Users")
            .expect("no-op")
            .contains("SET DEFAULT")
    );
    let e = ok("ALTER QUEUE UserTasks SET INTERLEAVE IN Users").expect_err("PARENT to non-PARENT");
    assert_eq!(e.code(), DdlErrorCode::Unimplemented);
    let e =
        ok("ALTER QUEUE Child SET INTERLEAVE IN PARENT Users").expect_err("non-PARENT to PARENT");
    assert_eq!(e.code(), DdlErrorCode::Unimplemented);
    let e = ok("ALTER QUEUE UserTasks SET INTERLEAVE IN PARENT Other").expect_err("new parent");
    assert_eq!(e.code(), DdlErrorCode::FailedPrecondition);
    let e = ok("ALTER QUEUE Loose SET INTERLEAVE IN PARENT Users").expect_err("not interleaved");
    assert_eq!(e.code(), DdlErrorCode::FailedPrecondition);
    let e = ok("ALTER QUEUE Loose SET ON DELETE CASCADE").expect_err("not interleaved");
    assert_eq!(e.code(), DdlErrorCode::FailedPrecondition);
    let e = ok("ALTER QUEUE Child SET ON DELETE CASCADE").expect_err("non-PARENT");
    assert_eq!(e.code(), DdlErrorCode::FailedPrecondition);

    let policy =
        "ALTER QUEUE Loose ADD ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL 7 DAY))";
    assert_eq!(
        ok(policy).expect("adds"),
        "ALTER TABLE Loose ADD ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL 7 DAY))"
    );
    assert_eq!(
        ok("ALTER QUEUE Loose REPLACE ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL 1 DAY))")
            .expect_err("no policy yet")
            .code(),
        DdlErrorCode::FailedPrecondition
    );
    assert_eq!(
        ok("ALTER QUEUE Loose DROP ROW DELETION POLICY")
            .expect_err("no policy")
            .code(),
        DdlErrorCode::FailedPrecondition
    );
    let batch: Vec<String> = [
        policy,
        "ALTER QUEUE Loose REPLACE ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL 1 DAY))",
        "ALTER QUEUE Loose DROP ROW DELETION POLICY",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let translated = translate_batch(&catalog, &batch, Dialect::GoogleSql).expect("in order");
    assert_eq!(
        translated[2].backend_statements[0],
        "ALTER TABLE Loose DROP ROW DELETION POLICY"
    );
    let twice = [policy.to_owned(), policy.to_owned()];
    assert_eq!(
        translate_batch(&catalog, &twice, Dialect::GoogleSql)
            .expect_err("second ADD")
            .code(),
        DdlErrorCode::FailedPrecondition
    );
}

#[test]
fn alter_queue_errors() {
    let (catalog, _) = apply(&[USERS, Q1]);
    let e = one(
        &catalog,
        "ALTER QUEUE Nope SET OPTIONS (disable_send = true)",
    )
    .expect_err("missing");
    assert!(matches!(e, DdlError::QueueNotFound { .. }));
    assert_eq!(e.code(), DdlErrorCode::NotFound);
    let e = one(
        &catalog,
        "ALTER QUEUE Users SET OPTIONS (disable_send = true)",
    )
    .expect_err("table");
    assert!(matches!(e, DdlError::NotAQueue { .. }));
    let e = one(&catalog, "ALTER QUEUE Q1 ADD COLUMN X INT64").expect_err("unsupported action");
    assert!(matches!(e, DdlError::Syntax { .. }));
    assert!(e.to_string().contains("SET OPTIONS"), "{e}");
    let e = one(&catalog, "ALTER QUEUE Q1 SET OPTIONS (nope = true)").expect_err("unknown option");
    assert!(matches!(e, DdlError::UnknownOption { .. }));
}

#[test]
fn drop_queue() {
    let (catalog, _) = apply(&[USERS, Q1]);
    let (translated, after) =
        translate_batch_with_catalog(&catalog, &["DROP QUEUE q1".to_owned()], Dialect::GoogleSql)
            .expect("drops");
    assert_eq!(
        translated[0].backend_statements,
        // The client's name as written: the backend judges it as Cloud Spanner would.
        ["DROP INDEX SpannerQueuesEmulatorDue_Q1", "DROP TABLE q1"]
    );
    assert!(!after.is_queue("Q1"));
    assert_eq!(
        one(&catalog, "DROP QUEUE IF EXISTS Gone").expect("no-op"),
        ["DROP TABLE IF EXISTS Gone"]
    );
    assert_eq!(
        one(&catalog, "DROP QUEUE IF EXISTS Q1;").expect("drops"),
        ["DROP INDEX SpannerQueuesEmulatorDue_Q1", "DROP TABLE Q1"]
    );
    let e = one(&catalog, "DROP QUEUE Gone").expect_err("missing");
    assert_eq!(e.code(), DdlErrorCode::NotFound);
    for sql in ["DROP QUEUE Users", "DROP QUEUE IF EXISTS Users"] {
        let e = one(&catalog, sql).expect_err("a table");
        assert!(matches!(e, DdlError::NotAQueue { .. }), "{sql}");
    }
    let batch = ["DROP QUEUE Q1".to_owned(), "DROP QUEUE Q1".to_owned()];
    assert!(matches!(
        translate_batch(&catalog, &batch, Dialect::GoogleSql),
        Err(DdlError::QueueNotFound { .. })
    ));
    let batch = ["DROP QUEUE Q1".to_owned(), Q1.to_owned()];
    assert!(translate_batch(&catalog, &batch, Dialect::GoogleSql).is_ok());
}

#[test]
fn table_statements_naming_queues_are_refused() {
    let (catalog, _) = apply(&[Q1]);
    for (sql, hint) in [
        ("DROP TABLE Q1", "DROP QUEUE"),
        ("DROP TABLE IF EXISTS q1", "DROP QUEUE"),
        ("ALTER TABLE Q1 ADD COLUMN X INT64", "ALTER QUEUE"),
        ("ALTER TABLE `Q1` SET ON DELETE CASCADE", "ALTER QUEUE"),
    ] {
        let e = one(&catalog, sql).expect_err(sql);
        assert!(matches!(e, DdlError::UseQueueStatement { .. }), "{sql}");
        assert!(e.to_string().contains(hint));
        assert_eq!(e.code(), DdlErrorCode::FailedPrecondition);
    }
    let e = one(&catalog, "RENAME TABLE Q1 TO Q2").expect_err("rename");
    assert_eq!(e.code(), DdlErrorCode::FailedPrecondition);
    let e = one(&catalog, "CREATE CHANGE STREAM S FOR Users, q1(Payload)").expect_err("stream");
    assert!(matches!(e, DdlError::ChangeStreamOnQueue { .. }));
    assert!(one(&catalog, "CREATE CHANGE STREAM S FOR ALL").is_ok());
    let e = one(&catalog, "ALTER CHANGE STREAM S SET FOR Q1").expect_err("stream");
    assert!(matches!(e, DdlError::ChangeStreamOnQueue { .. }));
    let e = one(
        &catalog,
        "CREATE TABLE X (Id INT64, SpannerQueuesEmulatorQueue STRING(MAX)) PRIMARY KEY (Id)",
    )
    .expect_err("reserved");
    assert!(matches!(e, DdlError::ReservedColumn { .. }));
    // Other statements pass through byte for byte, even ones we cannot parse.
    for sql in [
        "DROP TABLE Users",
        "CREATE INDEX I ON Q1 (Id)",
        "ALTER TABLE T ADD COLUMN C STRING(MAX)",
        "CREATE TABLE Broken (",
        "GRANT SELECT ON TABLE T TO ROLE R",
        "-- comment\nCREATE VIEW V SQL SECURITY INVOKER AS SELECT 1 AS x",
        "DROP TABLE 'unterminated",
    ] {
        assert_eq!(one(&catalog, sql).expect(sql), [sql]);
    }
}

#[test]
fn postgres_table_statements_pass_through() {
    let sql = "CREATE TABLE t (id bigint NOT NULL, PRIMARY KEY (id))".to_owned();
    let out = translate_batch(
        &Catalog::default(),
        std::slice::from_ref(&sql),
        Dialect::PostgreSql,
    )
    .expect("passes through");
    assert_eq!(out[0].backend_statements, std::slice::from_ref(&sql));
    // A PostgreSQL schema without queues reads as a catalog without queues.
    assert_eq!(
        Catalog::from_backend_ddl_in(&[sql], Dialect::PostgreSql)
            .expect("reads")
            .queues()
            .count(),
        0
    );
}

#[test]
fn metadata_is_versioned_and_tolerant() {
    let meta = QueueMeta {
        disable_send: Some(true),
        hidden: vec!["Payload".to_owned()],
        ..QueueMeta::default()
    };
    let encoded = encode_meta(&meta);
    assert!(encoded.starts_with("sqe1:"));
    assert!(
        encoded[5..]
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
    );
    assert_eq!(decode_meta("Q", &encoded).expect("decodes"), meta);
    // Unknown fields are ignored, missing ones default, padding is tolerated.
    let json = br#"{"disable_delivery":false,"some_future_field":[1,2]}"#;
    let padded = format!(
        "sqe1:{}",
        base64::engine::general_purpose::URL_SAFE.encode(json)
    );
    let decoded = decode_meta("Q", &padded).expect("tolerant");
    assert_eq!(decoded.disable_delivery, Some(false));
    assert_eq!(decoded.disable_send, None);
    for bad in ["sqe2:e30", "xyz", "sqe1:!!!", "sqe1:bm90IGpzb24"] {
        let e = decode_meta("Q", bad).expect_err(bad);
        assert_eq!(e.code(), DdlErrorCode::Internal);
        assert!(e.to_string().contains('Q'));
    }
}

#[test]
fn corrupt_queue_tables_are_reported() {
    let (_, printed) = apply(&[Q1]);
    let broken = printed[0].replace("DeliverTime", "Other");
    let e = Catalog::from_backend_ddl(&[broken]).expect_err("no DeliverTime");
    assert!(
        matches!(e, DdlError::CorruptBackend { ref queue, .. } if queue == "Q1"),
        "{e:?}"
    );
    let broken = printed[0].replace("PRIMARY KEY", "PRIMARY");
    assert!(matches!(
        Catalog::from_backend_ddl(&[broken]),
        Err(DdlError::CorruptBackend { .. })
    ));
    // Unparseable statements that are not queues are skipped.
    let fine = Catalog::from_backend_ddl(&[
        "CREATE TABLE (".to_owned(),
        "CREATE INDEX I ON T (A)".to_owned(),
    ])
    .expect("skips");
    assert_eq!(fine.queues().count(), 0);
}

#[test]
fn parses_the_emulators_exact_print_format() {
    // Captured from the official emulator 1.5.28 (GetDatabaseDdl after translate_batch).
    let printed = "CREATE TABLE Q (
  Id INT64 NOT NULL,
  K2 STRING(36) NOT NULL,
  Ts TIMESTAMP NOT NULL OPTIONS (
    allow_commit_timestamp = true
  ),
  Payload BYTES(MAX) NOT NULL,
  DeliverTime TIMESTAMP NOT NULL DEFAULT (CURRENT_TIMESTAMP()),
  SpannerQueuesEmulatorMessageId STRING(36) NOT NULL DEFAULT (GENERATE_UUID()),
  SpannerQueuesEmulatorQueue STRING(MAX) DEFAULT ('sqe1:eyJkaXNhYmxlX3NlbmQiOnRydWV9'),
) PRIMARY KEY(Id, K2 DESC, Ts),
  INTERLEAVE IN PARENT P ON DELETE CASCADE, ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL 7 DAY))";
    let catalog = Catalog::from_backend_ddl(&[printed.to_owned()]).expect("reads");
    let queue = catalog.queue("Q").expect("queue");
    assert_eq!(queue.options.disable_send, Some(true));
    assert!(queue.key_columns[1].descending);
    assert_eq!(
        queue.key_columns[2].column.options,
        [("allow_commit_timestamp".to_owned(), "true".to_owned())]
    );
    assert_eq!(
        queue.row_deletion_policy.as_deref(),
        Some("OLDER_THAN(DeliverTime, INTERVAL 7 DAY)")
    );
    let rendered = render_client_ddl(&[printed.to_owned()]).expect("renders");
    assert_eq!(
        rendered[0],
        "CREATE QUEUE Q (
  Id INT64 NOT NULL,
  K2 STRING(36) NOT NULL,
  Ts TIMESTAMP NOT NULL OPTIONS (
    allow_commit_timestamp = true
  ),
  Payload BYTES(MAX) NOT NULL,
) PRIMARY KEY(Id, K2 DESC, Ts),
  INTERLEAVE IN PARENT P ON DELETE CASCADE,
  ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL 7 DAY)),
  OPTIONS (disable_send = true)"
    );
}

#[test]
fn every_client_statement_maps_to_at_least_one_backend_statement() {
    let statements: Vec<String> = [
        USERS,
        USER_TASKS,
        Q1,
        "CREATE QUEUE IF NOT EXISTS Q1 (Id INT64 NOT NULL, Payload BYTES(MAX) NOT NULL) PRIMARY KEY (Id)",
        "ALTER QUEUE Q1 SET OPTIONS (disable_delivery = true)",
        "ALTER QUEUE UserTasks SET ON DELETE NO ACTION",
        "ALTER QUEUE UserTasks ADD ROW DELETION POLICY (OLDER_THAN(DeliverTime, INTERVAL 1 DAY))",
        "DROP QUEUE IF EXISTS Nope",
        "DROP QUEUE Q1",
    ]
    .iter()
    .map(|s| (*s).to_owned())
    .collect();
    let translated =
        translate_batch(&Catalog::default(), &statements, Dialect::GoogleSql).expect("ok");
    assert_eq!(translated.len(), statements.len());
    assert!(translated.iter().all(|t| !t.backend_statements.is_empty()));
}
