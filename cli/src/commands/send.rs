//! `send`: one message, deliverable now, in a transaction of its own.

use crate::catalog;
use crate::context::Context;
use crate::error::{CliError, EXIT_CONFLICT};
use crate::input::{key_value, queue_name};
use crate::output;
use crate::session::Session;
use crate::sql::{insert, param_type, payload_value};

/// `send` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
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
}

/// Sends the message and says so.
pub(crate) async fn run(args: Args, context: &Context) -> Result<(), CliError> {
    let session = context.connect().await?;
    send(&session, &args.queue, &args.keys, &args.payload).await?;
    output::done(
        &format!("sent to {}: ({})", args.queue, args.keys.join(", ")),
        serde_json::json!({ "queue": args.queue, "key": args.keys, "sent": true }),
        context.global_json(),
    );
    Ok(())
}

/// Sends one message with key values `keys` (text) and JSON `payload`.
async fn send(
    session: &Session,
    queue: &str,
    keys: &[String],
    payload: &str,
) -> Result<(), CliError> {
    let name = queue_name(queue)?;
    if let Err(e) = serde_json::from_str::<serde_json::Value>(payload) {
        return Err(CliError::usage(format!("--json is not valid JSON: {e}")));
    }
    let columns = catalog::columns(session, &name).await?;
    if keys.len() != columns.keys.len() {
        let wanted: Vec<String> = columns
            .keys
            .iter()
            .map(|(n, t)| format!("{n} {t}"))
            .collect();
        return Err(CliError::usage(format!(
            "{name} has {} key column(s) ({}): pass --key once for each, in that order",
            columns.keys.len(),
            wanted.join(", ")
        )));
    }
    let mut params = Vec::new();
    for ((column, ty), text) in columns.keys.iter().zip(keys) {
        params.push((
            column.clone(),
            key_value(column, ty, text)?,
            param_type(ty, session.dialect())?,
        ));
    }
    let payload = payload_value(
        payload.as_bytes().to_vec(),
        &columns.payload,
        session.dialect(),
    )?;
    let statement = insert(session.dialect(), &name, params, payload);
    session.commit(statement).await.map_err(|e| {
        if e.code == EXIT_CONFLICT {
            CliError::new(
                EXIT_CONFLICT,
                format!(
                    "a message with key ({}) is already in {name}",
                    keys.join(", ")
                ),
            )
        } else {
            e
        }
    })
}
