//! `schema`: the DDL the SDK needs, without a database; with `--producer-role` or
//! `--worker-role`, the `GRANT` statements those roles need instead.

use spanner_queues::grants::Roles;
use spanner_queues::ident::ColumnName;
use spanner_queues::key::{KeyColumn, KeyType};
use spanner_queues::schema::{Length, PayloadType, QueueSchema, SpannerType, google_sql_type};
use spanner_queues::{Dialect, SchemaSetup};

use crate::context::Context;
use crate::error::{CliError, chain};
use crate::input::queue_name;
use crate::output::{self, Format};

/// `schema` arguments.
#[derive(Debug, clap::Args)]
#[command(group = clap::ArgGroup::new("roles").multiple(true).args(["producer_role", "worker_role"]))]
pub(crate) struct Args {
    /// A queue to create (with --key). With --producer-role or --worker-role: a queue to grant
    /// on (repeat it for several).
    #[arg(long = "queue", value_name = "NAME")]
    queues: Vec<String>,
    /// A key column of the queue, as NAME:TYPE (e.g. TicketId:INT64), in primary-key order.
    #[arg(
        long = "key",
        value_name = "NAME:TYPE",
        requires = "queues",
        conflicts_with = "roles"
    )]
    key_columns: Vec<String>,
    /// The queue's payload type: JSON, STRING(MAX), BYTES(MAX), … (for PostgreSQL, its
    /// names are taken too: jsonb, text, bytea, …).
    #[arg(long, default_value = "JSON", conflicts_with = "roles")]
    payload: String,
    /// The database's SQL dialect.
    #[arg(long, value_enum, default_value_t = SchemaDialect::Googlesql)]
    dialect: SchemaDialect,
    /// Print the GRANT statements for this database role of processes that send: INSERT,
    /// DELETE (cancel) and SELECT on each queue, SELECT and INSERT on the commit markers.
    #[arg(long, value_name = "ROLE")]
    producer_role: Option<String>,
    /// Print the GRANT statements for this database role of processes that run workers:
    /// EXECUTE on each queue's RECEIVE and RENEWLEASE functions, DELETE (ack), INSERT (retry)
    /// and SELECT on each queue, and the worker's tables.
    #[arg(long, value_name = "ROLE")]
    worker_role: Option<String>,
    /// Grant on every queue of the database (--database; its dialect is used).
    #[arg(long, requires = "roles", conflicts_with_all = ["queues", "dialect"])]
    all_queues: bool,
    #[command(flatten)]
    output: Format,
}

/// `schema --dialect`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum SchemaDialect {
    /// GoogleSQL.
    Googlesql,
    /// PostgreSQL.
    Postgresql,
}

/// Prints the statements.
pub(crate) async fn run(args: Args, context: &Context) -> Result<(), CliError> {
    let mut dialect = match args.dialect {
        SchemaDialect::Googlesql => Dialect::GoogleSql,
        SchemaDialect::Postgresql => Dialect::PostgreSql,
    };
    let statements = if args.producer_role.is_some() || args.worker_role.is_some() {
        let mut queues = args.queues.clone();
        if args.all_queues {
            let session = context.connect().await?;
            dialect = session.dialect();
            queues = crate::catalog::queues(&session)
                .await?
                .into_iter()
                .map(|q| q.name)
                .collect();
        } else if queues.is_empty() {
            return Err(CliError::usage(
                "name the queues to grant on: --queue NAME (repeatable) or --all-queues",
            ));
        }
        grants(
            dialect,
            args.producer_role.as_deref(),
            args.worker_role.as_deref(),
            &queues,
        )?
    } else {
        let queue = match args.queues.as_slice() {
            [] => None,
            [queue] if !args.key_columns.is_empty() => Some(queue.as_str()),
            [_] => {
                return Err(CliError::usage(
                    "--queue needs its key columns: --key NAME:TYPE, e.g. --key TicketId:INT64",
                ));
            }
            _ => {
                return Err(CliError::usage(
                    "one --queue at a time (several only with --producer-role or --worker-role)",
                ));
            }
        };
        statements(dialect, queue, &args.key_columns, &args.payload)?
    };
    output::schema(&statements, context.json(args.output));
    Ok(())
}

/// The `GRANT` statements for the roles on `queues`, with the commit markers that `schema`
/// creates (the sequence table of ordered queues is not among them).
fn grants(
    dialect: Dialect,
    producer: Option<&str>,
    worker: Option<&str>,
    queues: &[String],
) -> Result<Vec<String>, CliError> {
    let mut roles = Roles::builder().with_commit_markers(true);
    if let Some(role) = producer {
        roles = roles.with_producer_role(role);
    }
    if let Some(role) = worker {
        roles = roles.with_worker_role(role);
    }
    let roles = roles.build().map_err(|e| CliError::usage(chain(&e)))?;
    let queues = queues
        .iter()
        .map(|q| queue_name(q))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(roles.grant_statements(dialect, &queues))
}

/// The kinds of key the SDK can send and read back.
const KEY_TYPES: [KeyType; 8] = [
    KeyType::Bool,
    KeyType::Int64,
    KeyType::String,
    KeyType::Bytes,
    KeyType::Uuid,
    KeyType::Timestamp,
    KeyType::Date,
    KeyType::Numeric,
];

/// The DDL the SDK needs in `dialect`: an optional queue, the worker's tables and the commit
/// markers. Types are GoogleSQL names (`INT64`, `STRING(64)`, `JSON`); for PostgreSQL their
/// PostgreSQL names (`bigint`, `varchar(64)`, `jsonb`) are taken too.
fn statements(
    dialect: Dialect,
    queue: Option<&str>,
    key_columns: &[String],
    payload: &str,
) -> Result<Vec<String>, CliError> {
    let spelled = |ty: &str| match dialect {
        Dialect::GoogleSql => ty.to_owned(),
        _ => google_sql_type(ty),
    };
    let mut setup = SchemaSetup::new();
    if let Some(queue) = queue {
        let queue = queue_name(queue)?;
        let payload_type = match spelled(payload).parse::<SpannerType>() {
            Ok(SpannerType::Json) => PayloadType::Json,
            Ok(SpannerType::String(len)) => PayloadType::String(len),
            Ok(SpannerType::Bytes(len)) => PayloadType::Bytes(len),
            Ok(SpannerType::Proto(name)) => PayloadType::Proto(name),
            _ => {
                return Err(CliError::usage(format!(
                    "--payload {payload}: a payload is JSON, STRING(n|MAX), BYTES(n|MAX) or a proto type"
                )));
            }
        };
        let mut schema = QueueSchema::new(queue.clone(), payload_type);
        for column in key_columns {
            let (name, ty) = column.split_once(':').ok_or_else(|| {
                CliError::usage(format!(
                    "--key {column}: use NAME:TYPE, e.g. TicketId:INT64"
                ))
            })?;
            let ty: SpannerType = spelled(ty)
                .parse()
                .map_err(|e| CliError::usage(format!("--key {column}: {e}")))?;
            // A key column holds what the SDK can key a message by: the column type of a
            // `KeyType` (STRING(36) is a UUID's), or STRING(n)/BYTES(n) with another length.
            let sized = match ty {
                SpannerType::String(Length::Fixed(n)) => Some((KeyType::String, n)),
                SpannerType::Bytes(Length::Fixed(n)) => Some((KeyType::Bytes, n)),
                _ => None,
            };
            let exact = KEY_TYPES.into_iter().find(|k| k.spanner_type() == ty);
            let (key_type, max_length) = exact
                .map(|k| (k, None))
                .or(sized.map(|(k, n)| (k, Some(n))))
                .ok_or_else(|| {
                    let allowed: Vec<String> = KEY_TYPES
                        .iter()
                        .map(|k| k.spanner_type().to_string())
                        .chain(["STRING(n)".to_owned(), "BYTES(n)".to_owned()])
                        .collect();
                    CliError::usage(format!(
                        "--key {column}: a key column is one of {}",
                        allowed.join(", ")
                    ))
                })?;
            let name = ColumnName::new(name)
                .map_err(|e| CliError::usage(format!("--key {column}: {e}")))?;
            let mut key_column = KeyColumn::new(name, key_type);
            if let Some(n) = max_length {
                key_column = key_column.with_max_length(n);
            }
            schema = schema.with_key_column(key_column);
        }
        // A queue known by its name only: its statement goes first, as DDL of the caller's.
        setup = setup.with_ddl([schema
            .create_if_not_exists_statement(dialect)
            .map_err(|e| CliError::usage(format!("queue {queue}: {}", chain(&e))))?]);
    }
    setup
        .with_worker_tables()
        .with_commit_markers()
        .statements(dialect)
        .map_err(|e| CliError::from_error("rendering the schema", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::EXIT_USAGE;

    fn keys(columns: &[&str]) -> Vec<String> {
        columns.iter().map(|c| (*c).to_owned()).collect()
    }

    #[test]
    fn without_a_queue_the_worker_tables_and_markers_are_printed() {
        let plain = statements(Dialect::GoogleSql, None, &[], "JSON").expect("valid");
        let with_queue = statements(
            Dialect::GoogleSql,
            Some("Tickets"),
            &keys(&["TicketId:INT64"]),
            "JSON",
        )
        .expect("valid");
        assert_eq!(with_queue.len(), plain.len() + 1);
        assert!(
            with_queue[0].starts_with("CREATE QUEUE IF NOT EXISTS Tickets"),
            "{}",
            with_queue[0]
        );
        assert!(
            with_queue[0].contains("TicketId INT64"),
            "{}",
            with_queue[0]
        );
        assert_eq!(with_queue[1..], plain[..]);
    }

    #[test]
    fn key_columns_take_sized_strings_and_postgresql_names() {
        let statement = &statements(
            Dialect::GoogleSql,
            Some("Jobs"),
            &keys(&["Region:STRING(16)", "Id:STRING(36)"]),
            "BYTES(MAX)",
        )
        .expect("valid")[0];
        assert!(statement.contains("Region STRING(16)"), "{statement}");
        assert!(statement.contains("Payload BYTES(MAX)"), "{statement}");
        let statement = &statements(
            Dialect::PostgreSql,
            Some("jobs"),
            &keys(&["id:bigint"]),
            "jsonb",
        )
        .expect("valid")[0];
        assert!(statement.contains("bigint"), "{statement}");
        assert!(statement.contains("jsonb"), "{statement}");
    }

    #[test]
    fn grants_name_the_roles_and_the_queues() {
        let printed = grants(
            Dialect::GoogleSql,
            Some("sender"),
            Some("handler"),
            &keys(&["Tickets"]),
        )
        .expect("valid");
        assert_eq!(
            printed,
            Roles::builder()
                .with_producer_role("sender")
                .with_worker_role("handler")
                .with_commit_markers(true)
                .build()
                .expect("valid")
                .grant_statements(Dialect::GoogleSql, &[queue_name("Tickets").expect("valid")])
        );
        assert!(printed.contains(
            &"GRANT SELECT, INSERT ON TABLE SpannerQueuesCommitMarkers TO ROLE sender".to_owned()
        ));
        let error = grants(
            Dialect::GoogleSql,
            Some("bad-role"),
            None,
            &keys(&["Tickets"]),
        )
        .expect_err("invalid role");
        assert_eq!(error.code, EXIT_USAGE, "{}", error.message);
        assert!(error.message.contains("producer_role"), "{}", error.message);
        let error = grants(Dialect::GoogleSql, None, Some("w"), &keys(&["bad-queue"]))
            .expect_err("invalid queue");
        assert!(
            error.message.contains("not a queue name"),
            "{}",
            error.message
        );
    }

    #[test]
    fn bad_arguments_are_usage_errors_that_say_what_to_type() {
        let usage = |queue: &str, columns: &[&str], payload: &str| {
            let error = statements(Dialect::GoogleSql, Some(queue), &keys(columns), payload)
                .expect_err("invalid");
            assert_eq!(error.code, EXIT_USAGE, "{}", error.message);
            error.message
        };
        assert!(usage("Q", &["Id"], "JSON").contains("use NAME:TYPE"));
        assert!(usage("Q", &["Id:ARRAY<INT64>"], "JSON").contains("--key Id:ARRAY<INT64>"));
        assert!(usage("Q", &["Id:FLOAT64"], "JSON").contains("a key column is one of"));
        assert!(usage("Q", &["bad-name:INT64"], "JSON").contains("--key bad-name:INT64"));
        assert!(usage("Q", &["Id:INT64"], "INT64").contains("a payload is JSON"));
        assert!(usage("bad-queue", &["Id:INT64"], "JSON").contains("not a queue name"));
    }
}
