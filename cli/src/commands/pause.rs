//! `pause` and `resume`: the queue option `disable_delivery`.

use google_cloud_lro::Poller as _;
use spanner_queues::Dialect;
use spanner_queues::schema::{AlterQueue, AlterQueueAction, QueueOptions};

use crate::catalog;
use crate::context::Context;
use crate::error::CliError;
use crate::input::queue_name;
use crate::output::{self, Format};
use crate::session::Session;

/// `pause` and `resume` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The queue name.
    queue: String,
    #[command(flatten)]
    output: Format,
}

/// Pauses (`paused`) or resumes delivery from the queue.
pub(crate) async fn run(args: Args, context: &Context, paused: bool) -> Result<(), CliError> {
    let session = context.connect().await?;
    set_paused(&session, &args.queue, paused).await?;
    let verb = if paused { "paused" } else { "resumed" };
    output::done(
        &format!("{verb} delivery from {}", args.queue),
        serde_json::json!({ "queue": args.queue, "paused": paused }),
        context.json(args.output),
    );
    Ok(())
}

/// Sets `disable_delivery` on `queue`.
pub(crate) async fn set_paused(
    session: &Session,
    queue: &str,
    paused: bool,
) -> Result<(), CliError> {
    let name = queue_name(queue)?;
    // [?] Spanner documents no PostgreSQL syntax for queue options (`disable_delivery`),
    // and the emulator refuses an options clause there.
    session.require_google_sql(
        if paused { "pause" } else { "resume" },
        "Spanner documents no PostgreSQL syntax for the disable_delivery queue option",
    )?;
    catalog::queue(session, name.as_str()).await?;
    let sql = AlterQueue::new(
        name.clone(),
        AlterQueueAction::SetOptions(QueueOptions::new().with_disable_delivery(paused)),
    )
    .to_sql(Dialect::GoogleSql)
    .map_err(|e| CliError::from_error("rendering ALTER QUEUE", e))?;
    session
        .admin()
        .update_database_ddl()
        .set_database(session.path())
        .set_statements([sql])
        .poller()
        .until_done()
        .await
        .map(|_| ())
        .map_err(|e| CliError::from_error(&format!("altering {name}"), e))
}
