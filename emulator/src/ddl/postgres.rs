//! Queue DDL in PostgreSQL-dialect databases.
//!
//! # Client syntax
//!
//! ```text
//! CREATE QUEUE [IF NOT EXISTS] name (
//!   key_column type NOT NULL [GENERATED ALWAYS AS (expr) STORED] [, ...],
//!   payload { bytea | text | varchar[(n)] | jsonb } NOT NULL,
//!   PRIMARY KEY (key_column [, ...])
//! ) [INTERLEAVE IN PARENT table [ON DELETE { CASCADE | NO ACTION }]]
//!   [TTL INTERVAL 'n days' ON column]
//! ALTER QUEUE name { SET ON DELETE { CASCADE | NO ACTION }
//!                  | ADD TTL INTERVAL '...' ON column | ALTER TTL INTERVAL '...' ON column
//!                  | DROP TTL }
//! DROP QUEUE [IF EXISTS] name
//! ```
//!
//! # Backend representation
//!
//! As in GoogleSQL databases, a queue is a table of the official emulator:
//!
//! ```text
//! CREATE TABLE q (
//!   <each declared column>,
//!   deliver_time timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP,
//!   "DeliverTime" timestamptz GENERATED ALWAYS AS (deliver_time) STORED,
//!   "SpannerQueuesEmulatorMessageId" varchar(36) NOT NULL DEFAULT spanner.generate_uuid(),
//!   "SpannerQueuesEmulatorQueue" varchar DEFAULT 'sqe1:<base64url(JSON)>',
//!   PRIMARY KEY (<key>)
//! ) [INTERLEAVE IN PARENT p ON DELETE ...] [TTL ...]
//! ```
//!
//! # Choices where the platform is not documented
//!
//! - The PostgreSQL grammar of queue DDL is not published; the statements above follow the
//!   documented `CREATE QUEUE` examples and the PostgreSQL forms of the matching table
//!   statements (`TTL` for row deletion policies, `SET ON DELETE`).
//! - Queue options (`receive_mode`, `disable_send`, ...) have no documented PostgreSQL
//!   syntax: any options clause is refused as unsupported.
//! - `INTERLEAVE IN` without `PARENT` and `ALTER QUEUE ... SET INTERLEAVE IN` are refused as
//!   unsupported (the official emulator's PostgreSQL dialect lacks the table forms too).
//! - Cloud Spanner exposes both `deliver_time` and `DeliverTime` [C]; here `"DeliverTime"` is
//!   a stored generated column: it can be read, not written. PostgreSQL has no `HIDDEN`
//!   columns, so `SELECT * FROM q` also returns the emulator's two internal columns.
//! - The payload types are `bytea`, `text`, `varchar` / `character varying` (with or without
//!   a length) and `jsonb` [C]; the official emulator prints `text` back as
//!   `character varying`, and so does `GetDatabaseDdl`.

use spanner_queues_sql::{Cursor, Dialect, tokenize};

use super::catalog::Catalog;
use super::classify::{
    leading_words, not_a_queue_statement, queue_statement_tokens, reject_meta_column,
};
use super::error::DdlError;
use super::model::{OnDelete, QueueOptions, fold};
use super::pg_bodies::{parse_pg_table, parse_pg_ttl, pg_path};
use super::queues::{QueueParts, build_queue};
use super::tokens::path_written;

/// The action of a PostgreSQL `ALTER QUEUE`.
enum PgAlter {
    /// `SET ON DELETE ...`.
    SetOnDelete(OnDelete),
    /// `ADD TTL ...`.
    AddTtl(String),
    /// `ALTER TTL ...`.
    AlterTtl(String),
    /// `DROP TTL`.
    DropTtl,
}

/// Translates one statement of a PostgreSQL-dialect database, updating `catalog`.
pub(super) fn translate_postgres(
    catalog: &mut Catalog,
    statement: &str,
) -> Result<Vec<String>, DdlError> {
    let words = leading_words(statement, Dialect::PostgreSql, 4);
    let word = |i: usize| words.get(i).map(String::as_str);
    if let Some((kind, toks)) = queue_statement_tokens(statement, &words, Dialect::PostgreSql)? {
        let mut p = Cursor::new(&toks, kind);
        p.set_pos(2);
        return match (word(0), word(1)) {
            (Some("CREATE"), Some("QUEUE")) => pg_create_queue(catalog, &mut p),
            (Some("ALTER"), Some("QUEUE")) => pg_alter_queue(catalog, &mut p),
            (Some("DROP"), Some("QUEUE")) => pg_drop_queue(catalog, &mut p),
            _ => Err(not_a_queue_statement(&words)),
        };
    }
    let pass = Ok(vec![statement.to_owned()]);
    let Ok(toks) = tokenize(statement, Dialect::PostgreSql) else {
        return pass;
    };
    let mut p = Cursor::new(&toks, "TABLE");
    p.set_pos(2);
    match (word(0), word(1)) {
        (Some("CREATE"), Some("TABLE")) => {
            reject_meta_column(&toks, "table")?;
            if let Ok(table) = parse_pg_table(&mut p, false) {
                let name = table.full_name();
                if !catalog.is_queue(&name)
                    && !catalog.tables.contains_key(&fold(&name))
                    && let Some(info) = table.info()
                {
                    catalog.tables.insert(fold(&name), info);
                }
            }
        }
        (Some("DROP"), Some("TABLE")) => {
            p.eat_words(&["IF", "EXISTS"]);
            if let Ok(path) = pg_path(&mut p, "a table name") {
                let name = path.join(".");
                if catalog.is_queue(&name) {
                    return Err(DdlError::UseQueueStatement {
                        name,
                        statement: "DROP QUEUE",
                    });
                }
                catalog.tables.remove(&fold(&name));
            }
        }
        (Some("ALTER"), Some("TABLE")) => {
            if let Ok(path) = pg_path(&mut p, "a table name") {
                let name = path.join(".");
                if catalog.is_queue(&name) {
                    return Err(DdlError::UseQueueStatement {
                        name,
                        statement: "ALTER QUEUE",
                    });
                }
                reject_meta_column(&toks, &format!("table {name}"))?;
            }
        }
        _ => {}
    }
    pass
}

/// PostgreSQL `CREATE QUEUE`.
fn pg_create_queue(catalog: &mut Catalog, p: &mut Cursor<'_, '_>) -> Result<Vec<String>, DdlError> {
    let ast = parse_pg_table(p, true)?;
    let name = ast.full_name();
    if ast.name.len() > 1 {
        return Err(DdlError::NamedSchema { queue: name });
    }
    if let Some(word) = &ast.constraint {
        return Err(DdlError::InvalidQueue {
            queue: name,
            reason: format!(
                "{word} clauses are not allowed: a queue holds only its primary key columns \
                 and the payload column"
            ),
        });
    }
    if !ast.options.is_empty() {
        return Err(DdlError::Unsupported {
            what: "Queue options in PostgreSQL-dialect databases (their syntax is not \
                   documented)"
                .to_owned(),
        });
    }
    if ast.interleave.as_ref().is_some_and(|i| !i.in_parent) {
        return Err(DdlError::Unsupported {
            what: "INTERLEAVE IN without PARENT in PostgreSQL-dialect databases".to_owned(),
        });
    }
    let def = build_queue(QueueParts {
        name: name.clone(),
        written_name: ast.written_name.clone(),
        columns: ast.columns,
        primary_key: ast.primary_key,
        interleave: ast.interleave,
        row_deletion_policy: ast.row_deletion_policy,
        options: QueueOptions::default(),
        dialect: Dialect::PostgreSql,
    })?;
    if catalog.tables.contains_key(&fold(&name)) {
        return Err(DdlError::NameInUse { name });
    }
    if catalog.is_queue(&name) {
        if ast.if_not_exists {
            return Ok(vec![def.backend_create_table(true)]);
        }
        return Err(DdlError::QueueExists { queue: name });
    }
    let backend = def.backend_create_table(ast.if_not_exists);
    catalog.queues.insert(fold(&name), def);
    Ok(vec![backend])
}

/// PostgreSQL `ALTER QUEUE`.
fn pg_alter_queue(catalog: &mut Catalog, p: &mut Cursor<'_, '_>) -> Result<Vec<String>, DdlError> {
    let (name, table) = path_written(p, Dialect::PostgreSql, "a queue name")?;
    let name = name.join(".");
    let action = if p.eat_words(&["SET", "ON", "DELETE"]) {
        if p.eat_word("CASCADE") {
            PgAlter::SetOnDelete(OnDelete::Cascade)
        } else if p.eat_words(&["NO", "ACTION"]) {
            PgAlter::SetOnDelete(OnDelete::NoAction)
        } else {
            return Err(p.error("CASCADE or NO ACTION").into());
        }
    } else if p.eat_words(&["ADD", "TTL"]) {
        PgAlter::AddTtl(parse_pg_ttl(p)?)
    } else if p.eat_words(&["ALTER", "TTL"]) {
        PgAlter::AlterTtl(parse_pg_ttl(p)?)
    } else if p.eat_words(&["DROP", "TTL"]) {
        PgAlter::DropTtl
    } else if p.at_word("SET") {
        return Err(DdlError::Unsupported {
            what: "ALTER QUEUE ... SET other than SET ON DELETE in PostgreSQL-dialect databases"
                .to_owned(),
        });
    } else {
        return Err(p
            .error("SET ON DELETE, ADD TTL, ALTER TTL or DROP TTL")
            .into());
    };
    p.expect_end()?;
    let Some(queue) = catalog.queues.get_mut(&fold(&name)) else {
        if catalog.tables.contains_key(&fold(&name)) {
            return Err(DdlError::NotAQueue {
                name,
                statement: "ALTER TABLE",
            });
        }
        return Err(DdlError::QueueNotFound { queue: name });
    };
    let rejected = |reason: &str| DdlError::AlterRejected {
        queue: name.clone(),
        reason: reason.to_owned(),
    };
    let backend = match action {
        PgAlter::SetOnDelete(action) => {
            match queue.interleave.as_mut().filter(|i| i.in_parent) {
                Some(interleave) => interleave.on_delete = Some(action),
                None => {
                    return Err(rejected(
                        "ON DELETE applies only to a queue created with INTERLEAVE IN PARENT",
                    ));
                }
            }
            format!("ALTER TABLE {table} SET ON DELETE {}", action.sql())
        }
        PgAlter::AddTtl(policy) => {
            if queue.row_deletion_policy.is_some() {
                return Err(rejected("it already has a TTL; use ALTER TTL"));
            }
            let stmt = format!("ALTER TABLE {table} ADD TTL {policy}");
            queue.row_deletion_policy = Some(policy);
            stmt
        }
        PgAlter::AlterTtl(policy) => {
            if queue.row_deletion_policy.is_none() {
                return Err(rejected("it has no TTL; use ADD TTL"));
            }
            let stmt = format!("ALTER TABLE {table} ALTER TTL {policy}");
            queue.row_deletion_policy = Some(policy);
            stmt
        }
        PgAlter::DropTtl => {
            if queue.row_deletion_policy.take().is_none() {
                return Err(rejected("it has no TTL"));
            }
            format!("ALTER TABLE {table} DROP TTL")
        }
    };
    Ok(vec![backend])
}

/// PostgreSQL `DROP QUEUE`.
fn pg_drop_queue(catalog: &mut Catalog, p: &mut Cursor<'_, '_>) -> Result<Vec<String>, DdlError> {
    let if_exists = p.eat_words(&["IF", "EXISTS"]);
    let (name, written) = path_written(p, Dialect::PostgreSql, "a queue name")?;
    let name = name.join(".");
    p.expect_end()?;
    if catalog.tables.contains_key(&fold(&name)) {
        return Err(DdlError::NotAQueue {
            name,
            statement: "DROP TABLE",
        });
    }
    if !catalog.is_queue(&name) {
        if if_exists {
            return Ok(vec![format!("DROP TABLE IF EXISTS {written}")]);
        }
        return Err(DdlError::QueueNotFound { queue: name });
    }
    let backend = format!("DROP TABLE {written}");
    catalog.queues.remove(&fold(&name));
    Ok(vec![backend])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ddl::model::PayloadKind;
    use crate::ddl::queues::pg_payload_kind;
    use crate::ddl::{render_client_ddl_in, translate_batch};
    use spanner_queues_sql::quote_ident;

    const USERS: &str = "CREATE TABLE users (userid bigint NOT NULL, PRIMARY KEY (userid))";
    const USER_TASKS: &str = "CREATE QUEUE usertasks (
  userid     bigint NOT NULL,
  messageid  varchar(36) NOT NULL, -- UUID recommended
  payload    bytea NOT NULL, -- Also: text, varchar, jsonb are possible.
  PRIMARY KEY (userid, messageid)
) INTERLEAVE IN PARENT users ON DELETE CASCADE;";

    fn translate(catalog: &Catalog, statements: &[&str]) -> Result<Vec<String>, DdlError> {
        let statements: Vec<String> = statements.iter().map(|s| (*s).to_owned()).collect();
        translate_batch(catalog, &statements, Dialect::PostgreSql)
            .map(|t| t.into_iter().flat_map(|t| t.backend_statements).collect())
    }

    /// What the official emulator prints for the backend table of the documented example.
    const PRINTED: &str = "CREATE TABLE usertasks (
  userid bigint NOT NULL,
  messageid character varying(36) NOT NULL,
  payload bytea NOT NULL,
  deliver_time timestamp with time zone DEFAULT CURRENT_TIMESTAMP NOT NULL,
  \"DeliverTime\" timestamp with time zone GENERATED ALWAYS AS (deliver_time) STORED,
  \"SpannerQueuesEmulatorMessageId\" character varying(36) DEFAULT spanner.generate_uuid() NOT NULL,
  \"SpannerQueuesEmulatorQueue\" character varying DEFAULT 'sqe1:e30'::text,
  PRIMARY KEY(userid, messageid)
) INTERLEAVE IN PARENT users ON DELETE CASCADE";

    #[test]
    fn the_documented_example_becomes_a_table_with_the_system_columns() {
        let out = translate(&Catalog::default(), &[USERS, USER_TASKS]).expect("translates");
        assert_eq!(out[0], USERS);
        let table = &out[1];
        assert!(table.starts_with("CREATE TABLE usertasks (\n  userid bigint NOT NULL,\n"));
        assert!(table.contains("  messageid varchar(36) NOT NULL,\n"));
        assert!(table.contains("  payload bytea NOT NULL,\n"));
        assert!(table.contains("deliver_time timestamptz NOT NULL DEFAULT CURRENT_TIMESTAMP"));
        assert!(table.contains("\"DeliverTime\" timestamptz GENERATED ALWAYS AS (deliver_time)"));
        assert!(table.contains("  PRIMARY KEY (userid, messageid)\n)"));
        assert!(table.ends_with(") INTERLEAVE IN PARENT users ON DELETE CASCADE"));
    }

    #[test]
    fn the_printed_backend_table_reads_back_as_the_queue() {
        let catalog = Catalog::from_backend_ddl_in(&[PRINTED.to_owned()], Dialect::PostgreSql)
            .expect("reads");
        let queue = catalog.queue("usertasks").expect("a queue");
        assert_eq!(queue.dialect, Dialect::PostgreSql);
        assert_eq!(queue.payload.kind, PayloadKind::Bytes);
        assert_eq!(queue.deliver_time_column(), "deliver_time");
        let keys: Vec<&str> = queue
            .key_columns
            .iter()
            .map(|k| k.column.name.as_str())
            .collect();
        assert_eq!(keys, ["userid", "messageid"]);
        let rendered =
            render_client_ddl_in(&[PRINTED.to_owned()], Dialect::PostgreSql).expect("renders");
        assert_eq!(
            rendered,
            ["CREATE QUEUE usertasks (
  userid bigint NOT NULL,
  messageid character varying(36) NOT NULL,
  payload bytea NOT NULL,
  PRIMARY KEY(userid, messageid)
) INTERLEAVE IN PARENT users ON DELETE CASCADE"]
        );
    }

    #[test]
    fn payload_types_follow_the_postgresql_list() {
        for (ty, kind) in [
            ("bytea", PayloadKind::Bytes),
            ("text", PayloadKind::String),
            ("varchar", PayloadKind::String),
            ("varchar(100)", PayloadKind::String),
            ("character varying(36)", PayloadKind::String),
            ("jsonb", PayloadKind::Json),
        ] {
            assert_eq!(pg_payload_kind(ty), Some(kind), "{ty}");
        }
        for ty in ["bigint", "json", "bytea(3)", "varchar(max)", "timestamptz"] {
            assert_eq!(pg_payload_kind(ty), None, "{ty}");
        }
        let err = translate(
            &Catalog::default(),
            &["CREATE QUEUE q (id bigint NOT NULL, payload bigint NOT NULL, PRIMARY KEY (id))"],
        )
        .expect_err("bigint payload");
        assert!(matches!(err, DdlError::PgPayloadType { .. }), "{err}");
        assert!(err.to_string().contains("bytea, text, varchar or jsonb"));
    }

    #[test]
    fn invalid_queues_are_refused_with_the_rule_they_break() {
        type Check = fn(&DdlError) -> bool;
        let cases: [(&str, Check); 7] = [
            (
                "CREATE QUEUE q (id bigint NOT NULL, payload bytea, PRIMARY KEY (id))",
                |e| matches!(e, DdlError::PayloadNullable { .. }),
            ),
            (
                "CREATE QUEUE q (id bigint NOT NULL, PRIMARY KEY (id))",
                |e| matches!(e, DdlError::MissingPayload { .. }),
            ),
            (
                "CREATE QUEUE q (id bigint NOT NULL, payload bytea NOT NULL, deliver_time \
                 timestamptz, PRIMARY KEY (id))",
                |e| matches!(e, DdlError::DeliverTimeDeclared { .. }),
            ),
            (
                "CREATE QUEUE q (id bigint NOT NULL, note text, payload bytea NOT NULL, \
                 PRIMARY KEY (id))",
                |e| matches!(e, DdlError::NonKeyColumn { .. }),
            ),
            (
                "CREATE QUEUE q (id bigint NOT NULL, payload bytea NOT NULL)",
                |e| matches!(e, DdlError::Syntax { .. }),
            ),
            (
                "CREATE QUEUE q (id bigint NOT NULL, payload bytea NOT NULL, PRIMARY KEY (id)) \
                 WITH (disable_send = true)",
                |e| matches!(e, DdlError::Unsupported { .. }),
            ),
            (
                "CREATE QUEUE q (id bigint NOT NULL, spanner_lease_token text NOT NULL, \
                 payload bytea NOT NULL, PRIMARY KEY (id, spanner_lease_token))",
                |e| matches!(e, DdlError::ReservedColumn { .. }),
            ),
        ];
        for (sql, check) in cases {
            let err = translate(&Catalog::default(), &[sql]).expect_err(sql);
            assert!(check(&err), "{sql}: {err:?}");
        }
    }

    #[test]
    fn alter_and_drop_map_to_table_statements() {
        let out = translate(
            &Catalog::default(),
            &[
                USERS,
                USER_TASKS,
                "ALTER QUEUE usertasks SET ON DELETE NO ACTION",
                "ALTER QUEUE usertasks ADD TTL INTERVAL '7 days' ON deliver_time",
                "ALTER QUEUE usertasks ALTER TTL INTERVAL '3 days' ON deliver_time",
                "ALTER QUEUE usertasks DROP TTL",
                "DROP QUEUE usertasks",
                "DROP QUEUE IF EXISTS usertasks",
            ],
        )
        .expect("translates");
        assert_eq!(
            &out[2..],
            [
                "ALTER TABLE usertasks SET ON DELETE NO ACTION",
                "ALTER TABLE usertasks ADD TTL INTERVAL '7 days' ON deliver_time",
                "ALTER TABLE usertasks ALTER TTL INTERVAL '3 days' ON deliver_time",
                "ALTER TABLE usertasks DROP TTL",
                "DROP TABLE usertasks",
                "DROP TABLE IF EXISTS usertasks",
            ]
        );
        let err = translate(&Catalog::default(), &["DROP QUEUE nope"]).expect_err("missing");
        assert!(matches!(err, DdlError::QueueNotFound { .. }), "{err:?}");
        let err = translate(
            &Catalog::default(),
            &[USERS, USER_TASKS, "DROP TABLE usertasks"],
        )
        .expect_err("a queue");
        assert!(matches!(err, DdlError::UseQueueStatement { .. }), "{err:?}");
        let err = translate(&Catalog::default(), &[USERS, "DROP QUEUE users"]).expect_err("table");
        assert!(matches!(err, DdlError::NotAQueue { .. }), "{err:?}");
    }

    #[test]
    fn identifiers_fold_and_quote_as_in_postgresql() {
        let pg_ident = |name| quote_ident(Dialect::PostgreSql, name);
        assert_eq!(pg_ident("usertasks"), "usertasks");
        assert_eq!(pg_ident("UserTasks"), "\"UserTasks\"");
        assert_eq!(pg_ident("select"), "\"select\"");
        assert_eq!(pg_ident("user"), "\"user\"");
        assert_eq!(pg_ident("a\"b"), "\"a\"\"b\"");
        let out = translate(
            &Catalog::default(),
            &["CREATE QUEUE MyQ (Id bigint NOT NULL, \"Payload\" text NOT NULL, PRIMARY KEY (ID))"],
        )
        .expect("translates");
        assert!(
            out[0].starts_with("CREATE TABLE myq (\n  id bigint NOT NULL,\n  \"Payload\" text")
        );
    }

    /// PostgreSQL reserved words as quoted names: quoted by the PostgreSQL list (not the
    /// GoogleSQL one) wherever the front writes them, passed on as written in the statement
    /// that creates them, and read back from what the official emulator prints (issue 34).
    #[test]
    fn quoted_reserved_words_are_names() {
        let create = "CREATE QUEUE \"table\" (\"user\" bigint NOT NULL, payload bytea NOT NULL, \
                      PRIMARY KEY (\"user\"))";
        let out = translate(&Catalog::default(), &[create]).expect("translates");
        assert!(
            out[0].starts_with("CREATE TABLE \"table\" (\n  \"user\" bigint NOT NULL,"),
            "{}",
            out[0]
        );
        assert!(out[0].contains("PRIMARY KEY (\"user\")"));
        let printed = "CREATE TABLE \"table\" (
  \"user\" bigint NOT NULL,
  payload bytea NOT NULL,
  deliver_time timestamp with time zone DEFAULT CURRENT_TIMESTAMP NOT NULL,
  \"DeliverTime\" timestamp with time zone GENERATED ALWAYS AS (deliver_time) STORED,
  \"SpannerQueuesEmulatorMessageId\" character varying(36) DEFAULT spanner.generate_uuid() NOT NULL,
  \"SpannerQueuesEmulatorQueue\" character varying DEFAULT 'sqe1:e30'::text,
  PRIMARY KEY(\"user\")
)";
        let catalog = Catalog::from_backend_ddl_in(&[printed.to_owned()], Dialect::PostgreSql)
            .expect("reads back");
        let queue = catalog.queue("table").expect("a queue");
        assert_eq!(queue.key_columns[0].column.name, "user");
        assert_eq!(queue.quoted_name(), "\"table\"");
        assert_eq!(
            render_client_ddl_in(&[printed.to_owned()], Dialect::PostgreSql).expect("renders")[0],
            "CREATE QUEUE \"table\" (\n  \"user\" bigint NOT NULL,\n  payload bytea NOT NULL,\n  \
             PRIMARY KEY(\"user\")\n)"
        );
        assert_eq!(
            translate(
                &catalog,
                &["ALTER QUEUE \"table\" ADD TTL INTERVAL '1 day' ON \"user\""]
            )
            .expect("translates"),
            ["ALTER TABLE \"table\" ADD TTL INTERVAL '1 day' ON \"user\""]
        );
        assert_eq!(
            translate(&catalog, &["DROP QUEUE \"table\""]).expect("translates"),
            ["DROP TABLE \"table\""]
        );
    }
}
