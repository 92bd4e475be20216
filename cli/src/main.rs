//! `spanner-queues`: the operator's command line for Cloud Spanner queues.
//!
//! See `spanner-queues --help` and the crate README for the commands and exit codes.

mod catalog;
mod commands;
mod context;
mod ddl;
mod error;
mod input;
mod output;
mod session;
mod sql;
mod times;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use context::Context;
use error::{CliError, EXIT_FAILED, EXIT_OK};

const AFTER_HELP: &str = "\
Database: --database projects/P/instances/I/databases/D, or SPANNER_QUEUES_DATABASE. Against an
emulator, set SPANNER_EMULATOR_HOST=host:port; otherwise Application Default Credentials are used.

Both dialects are served (learned at connect); pause and resume need GoogleSQL.

Exit codes: 0 success, 1 the operation failed, 2 bad usage, 3 the database, queue, table, message
or dead letter does not exist, 4 a message with that key is already queued.";

/// Inspect and operate Cloud Spanner queues: depths and ages, peek, dead letters, pause and
/// resume, send, the schema the SDK needs, and a console in the browser.
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

/// The subcommands. To add one: a module under `commands/` with its arguments and a `run`, a
/// variant here (its doc comment is the command's help), and an arm in [`run`].
#[derive(Debug, Subcommand)]
enum Command {
    /// Each queue with its depth, messages due now and scheduled, the age of the oldest due
    /// message, whether delivery is paused, and its dead letters.
    Queues(commands::queues::Args),
    /// The next messages of a queue (keys, deliver times, payload previews), without leasing
    /// them.
    Peek(commands::peek::Args),
    /// The worker's dead-letter table.
    #[command(subcommand)]
    DeadLetters(commands::dead_letters::Command),
    /// Stops delivery from a queue (queue option disable_delivery = true); sends still work.
    /// GoogleSQL databases only: Spanner documents no PostgreSQL syntax for queue options.
    Pause(commands::pause::Args),
    /// Resumes delivery from a queue (disable_delivery = false). GoogleSQL databases only.
    Resume(commands::pause::Args),
    /// Sends one message, deliverable now, in a transaction of its own.
    Send(commands::send::Args),
    /// The DDL the SDK needs: a queue (with --queue and --key), the worker's tables and the
    /// commit-marker table, each `IF NOT EXISTS`; with --producer-role or --worker-role, the
    /// GRANT statements those database roles need on the queues instead.
    Schema(commands::schema::Args),
    /// Serves an operator console in the browser: each queue's counts and their history, the
    /// next messages, dead letters (show, replay, purge), pause and resume.
    ///
    /// Loopback only unless --allow-remote; read-only unless --allow-writes. Ctrl-C stops it.
    Ui(commands::ui::Args),
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
    let context = Context::new(cli.database, cli.json);
    match cli.command {
        Command::Queues(args) => commands::queues::run(args, &context).await,
        Command::Peek(args) => commands::peek::run(args, &context).await,
        Command::DeadLetters(command) => commands::dead_letters::run(command, &context).await,
        Command::Pause(args) => commands::pause::run(args, &context, true).await,
        Command::Resume(args) => commands::pause::run(args, &context, false).await,
        Command::Send(args) => commands::send::run(args, &context).await,
        Command::Schema(args) => commands::schema::run(args, &context).await,
        Command::Ui(args) => commands::ui::run(args, &context).await,
    }
}
