//! `spanner-queues`: the operator's command line for Cloud Spanner queues.
//!
//! See `spanner-queues --help` and the crate README for the commands and exit codes.

mod ops;
mod output;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};

use ops::{CliError, Session};

/// Exit status: success.
pub(crate) const EXIT_OK: u8 = 0;
/// Exit status: the operation failed (a Spanner error, unreadable data).
pub(crate) const EXIT_FAILED: u8 = 1;
/// Exit status: bad usage (clap uses 2 as well for unknown flags and missing arguments).
pub(crate) const EXIT_USAGE: u8 = 2;
/// Exit status: the database, queue, table, message or dead letter does not exist.
pub(crate) const EXIT_NOT_FOUND: u8 = 3;
/// Exit status: a message with that key is already in the queue.
pub(crate) const EXIT_CONFLICT: u8 = 4;

const AFTER_HELP: &str = "\
Database: --database projects/P/instances/I/databases/D, or SPANNER_QUEUES_DATABASE. Against an
emulator, set SPANNER_EMULATOR_HOST=host:port; otherwise Application Default Credentials are used.

Both dialects are served (learned at connect); pause and resume need GoogleSQL.

Exit codes: 0 success, 1 the operation failed, 2 bad usage, 3 the database, queue, table, message
or dead letter does not exist, 4 a message with that key is already queued.";

/// Inspect and operate Cloud Spanner queues: depths and ages, peek, dead letters, pause and
/// resume, send, and the schema the SDK needs.
#[derive(Debug, Parser)]
#[command(name = "spanner-queues", version, after_help = AFTER_HELP)]
struct Cli {
    /// The database: projects/P/instances/I/databases/D.
    #[arg(long, env = "SPANNER_QUEUES_DATABASE", global = true)]
    database: Option<String>,
    /// Print JSON instead of tables (also accepted after each command but `send`).
    #[arg(long)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

/// `--json` after a command.
#[derive(Debug, Args, Clone, Copy)]
struct Output {
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Each queue with its depth, messages due now and scheduled, the age of the oldest due
    /// message, whether delivery is paused, and its dead letters.
    Queues {
        /// Refresh in place until interrupted (one JSON document per refresh with --json).
        #[arg(long)]
        watch: bool,
        /// Seconds between refreshes with --watch.
        #[arg(long, default_value_t = 2.0, value_parser = positive_seconds)]
        interval: f64,
        #[command(flatten)]
        output: Output,
    },
    /// The next messages of a queue (keys, deliver times, payload previews), without leasing
    /// them.
    Peek {
        /// The queue name.
        queue: String,
        /// Messages to show at most.
        #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=10_000))]
        limit: u32,
        /// Show whole payloads (default: the first 80 characters).
        #[arg(long)]
        full: bool,
        #[command(flatten)]
        output: Output,
    },
    /// The worker's dead-letter table.
    #[command(subcommand)]
    DeadLetters(DeadLetterCommand),
    /// Stops delivery from a queue (queue option disable_delivery = true); sends still work.
    /// GoogleSQL databases only: Spanner documents no PostgreSQL syntax for queue options.
    Pause {
        /// The queue name.
        queue: String,
        #[command(flatten)]
        output: Output,
    },
    /// Resumes delivery from a queue (disable_delivery = false). GoogleSQL databases only.
    Resume {
        /// The queue name.
        queue: String,
        #[command(flatten)]
        output: Output,
    },
    /// Sends one message, deliverable now, in a transaction of its own.
    Send {
        /// The queue name.
        queue: String,
        /// A key column value, in primary-key order (repeat for each key column). BYTES in
        /// base64, TIMESTAMP in RFC 3339.
        #[arg(long = "key", required = true)]
        keys: Vec<String>,
        /// The payload, as JSON text (stored as JSON, as text in a STRING column, as UTF-8 in a
        /// BYTES column).
        #[arg(long = "json", value_name = "PAYLOAD")]
        payload: String,
    },
    /// The DDL the SDK needs: a queue (with --queue and --key), the worker's tables and the
    /// commit-marker table, each `IF NOT EXISTS`.
    Schema {
        /// A queue to create.
        #[arg(long, requires = "key_columns")]
        queue: Option<String>,
        /// A key column of the queue, as NAME:TYPE (e.g. TicketId:INT64), in primary-key order.
        #[arg(long = "key", value_name = "NAME:TYPE", requires = "queue")]
        key_columns: Vec<String>,
        /// The queue's payload type: JSON, STRING(MAX), BYTES(MAX), … (for PostgreSQL, its
        /// names are taken too: jsonb, text, bytea, …).
        #[arg(long, default_value = "JSON")]
        payload: String,
        /// The database's SQL dialect.
        #[arg(long, value_enum, default_value_t = SchemaDialect::Googlesql)]
        dialect: SchemaDialect,
        #[command(flatten)]
        output: Output,
    },
}

/// `schema --dialect`.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
enum SchemaDialect {
    /// GoogleSQL.
    Googlesql,
    /// PostgreSQL.
    Postgresql,
}

#[derive(Debug, Subcommand)]
enum DeadLetterCommand {
    /// Dead letters, oldest first: queue, key, attempts, when, last error.
    List {
        /// Only this queue's.
        #[arg(long)]
        queue: Option<String>,
        /// Dead letters to show at most.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        limit: u32,
        #[command(flatten)]
        output: Output,
    },
    /// One dead letter with its whole payload.
    Show {
        /// The queue it came from.
        queue: String,
        /// Its key column values, in primary-key order.
        #[arg(long = "key", required = true)]
        keys: Vec<String>,
        #[command(flatten)]
        output: Output,
    },
    /// Sends a dead letter back to its queue (same payload, deliverable now) and deletes it, in
    /// one transaction.
    Replay {
        /// The queue it came from.
        queue: String,
        /// Its key column values, in primary-key order.
        #[arg(long = "key", required = true)]
        keys: Vec<String>,
        #[command(flatten)]
        output: Output,
    },
    /// Deletes dead letters for good: one (--key) or every one of the queue (--all).
    Purge {
        /// The queue they came from.
        queue: String,
        /// Its key column values, in primary-key order.
        #[arg(long = "key", conflicts_with = "all", required_unless_present = "all")]
        keys: Vec<String>,
        /// Every dead letter of the queue.
        #[arg(long)]
        all: bool,
        #[command(flatten)]
        output: Output,
    },
}

fn positive_seconds(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(s) if s.is_finite() && (0.1..=86_400.0).contains(&s) => Ok(s),
        _ => Err(format!(
            "`{text}` is not a number of seconds from 0.1 to 86400"
        )),
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return ExitCode::from(EXIT_FAILED);
        }
    };
    match runtime.block_on(run(cli)) {
        Ok(()) => ExitCode::from(EXIT_OK),
        Err(error) => {
            eprintln!("error: {}", error.message);
            ExitCode::from(error.code)
        }
    }
}

async fn run(cli: Cli) -> Result<(), CliError> {
    let top_json = cli.json;
    let json = |output: Output| top_json || output.json;
    match cli.command {
        Command::Schema {
            queue,
            key_columns,
            payload,
            dialect,
            output,
        } => {
            let dialect = match dialect {
                SchemaDialect::Googlesql => spanner_queues::Dialect::GoogleSql,
                SchemaDialect::Postgresql => spanner_queues::Dialect::PostgreSql,
            };
            let statements = ops::schema(dialect, queue.as_deref(), &key_columns, &payload)?;
            output::schema(&statements, json(output));
            Ok(())
        }
        Command::Queues {
            watch,
            interval,
            output,
        } => {
            let session = Session::connect(cli.database.as_deref()).await?;
            let json = json(output);
            if !watch {
                let queues = session.queues().await?;
                output::queues(&queues, json);
                return Ok(());
            }
            let interval = Duration::from_secs_f64(interval);
            let stop = tokio::signal::ctrl_c();
            tokio::pin!(stop);
            loop {
                let queues = session.queues().await?;
                if !json {
                    // Clear the screen and home the cursor: refresh in place.
                    print!("\x1b[2J\x1b[H");
                }
                output::queues(&queues, json);
                tokio::select! {
                    _ = &mut stop => return Ok(()),
                    () = tokio::time::sleep(interval) => {}
                }
            }
        }
        Command::Peek {
            queue,
            limit,
            full,
            output,
        } => {
            let session = Session::connect(cli.database.as_deref()).await?;
            let messages = session.peek(&queue, limit, full).await?;
            output::peek(&queue, &messages, json(output));
            Ok(())
        }
        Command::Pause { queue, output } => {
            pause(cli.database.as_deref(), &queue, true, json(output)).await
        }
        Command::Resume { queue, output } => {
            pause(cli.database.as_deref(), &queue, false, json(output)).await
        }
        Command::Send {
            queue,
            keys,
            payload,
        } => {
            let session = Session::connect(cli.database.as_deref()).await?;
            session.send(&queue, &keys, &payload).await?;
            output::done(
                &format!("sent to {queue}: ({})", keys.join(", ")),
                serde_json::json!({ "queue": queue, "key": keys, "sent": true }),
                top_json,
            );
            Ok(())
        }
        Command::DeadLetters(command) => {
            let session = Session::connect(cli.database.as_deref()).await?;
            match command {
                DeadLetterCommand::List {
                    queue,
                    limit,
                    output,
                } => {
                    let letters = session.dead_letters(queue.as_deref(), limit).await?;
                    output::dead_letters(&letters, json(output));
                }
                DeadLetterCommand::Show {
                    queue,
                    keys,
                    output,
                } => {
                    let letter = session.dead_letter(&queue, &keys).await?;
                    output::dead_letter(&letter, json(output));
                }
                DeadLetterCommand::Replay {
                    queue,
                    keys,
                    output,
                } => {
                    let letter = session.replay(&queue, &keys).await?;
                    output::done(
                        &format!("replayed {} {} to {queue}", queue, letter.key),
                        serde_json::json!({ "queue": queue, "key": letter.key_parts, "replayed": true }),
                        json(output),
                    );
                }
                DeadLetterCommand::Purge {
                    queue,
                    keys,
                    all,
                    output,
                } => {
                    let purged = session.purge(&queue, (!all).then_some(&keys[..])).await?;
                    output::done(
                        &format!("purged {purged} dead letter(s) of {queue}"),
                        serde_json::json!({ "queue": queue, "purged": purged }),
                        json(output),
                    );
                }
            }
            Ok(())
        }
    }
}

async fn pause(
    database: Option<&str>,
    queue: &str,
    pause: bool,
    json: bool,
) -> Result<(), CliError> {
    let session = Session::connect(database).await?;
    session.set_paused(queue, pause).await?;
    let verb = if pause { "paused" } else { "resumed" };
    output::done(
        &format!("{verb} delivery from {queue}"),
        serde_json::json!({ "queue": queue, "paused": pause }),
        json,
    );
    Ok(())
}
