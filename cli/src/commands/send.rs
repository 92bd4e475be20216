//! `send`: one message, deliverable now, in a transaction of its own.

use spanner_queues::codec::Payload;
use spanner_queues::key::{KeyError, KeyType};
use spanner_queues::schema::SpannerType;
use spanner_queues::{DynQueue, Error, RawMessage};

use crate::catalog;
use crate::context::Context;
use crate::error::{CliError, EXIT_CONFLICT};
use crate::input::queue_name;
use crate::output;
use crate::session::Session;

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

/// Sends one message with key values `keys` (text) and JSON `payload`, through the SDK's
/// untyped send: it checks the key against the queue's key columns and writes the payload as
/// the `Payload` column takes it.
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
    let queue = catalog::queue(session, name.as_str()).await?;
    let columns = queue.key_columns();
    if keys.len() != columns.len() {
        let wanted: Vec<String> = columns
            .iter()
            .map(|c| format!("{} {}", c.name(), c.key_type()))
            .collect();
        return Err(CliError::usage(format!(
            "{name} has {} key column(s) ({}): pass --key once for each, in that order",
            columns.len(),
            wanted.join(", ")
        )));
    }
    let message = RawMessage::new(keys, payload_for(&queue, payload));
    session
        .database()
        .send_raw(&queue, &message)
        .await
        .map_err(|e| match e {
            Error::AlreadyQueued { .. } => CliError::new(
                EXIT_CONFLICT,
                format!(
                    "a message with key ({}) is already in {name}",
                    keys.join(", ")
                ),
            ),
            Error::InvalidKey {
                source: KeyError::InvalidValue { position, .. },
                ..
            } if position < keys.len() => bad_key(&queue, position, &keys[position]),
            other => CliError::from_error("sending", other),
        })
}

/// The JSON text `payload` as the queue's `Payload` column takes it: JSON, text for a STRING
/// column, its UTF-8 bytes for BYTES and PROTO.
fn payload_for(queue: &DynQueue, payload: &str) -> Payload {
    match queue.payload_type() {
        SpannerType::Json => Payload::Json(payload.to_owned()),
        SpannerType::String(_) => Payload::String(payload.to_owned()),
        _ => Payload::Bytes(payload.as_bytes().to_vec()),
    }
}

/// A usage error for key value `text`, which does not read as a value of key column
/// `position`.
fn bad_key(queue: &DynQueue, position: usize, text: &str) -> CliError {
    let Some(column) = queue.key_columns().get(position) else {
        return CliError::usage(format!("`{text}` is not a key value of {}", queue.name()));
    };
    let what = match column.key_type() {
        KeyType::Int64 => "an integer",
        KeyType::Bool => "true or false",
        KeyType::Bytes => "base64",
        KeyType::Timestamp => "an RFC 3339 timestamp",
        KeyType::Date => "a date (YYYY-MM-DD)",
        KeyType::Numeric => "a decimal number",
        _ => "a value of that type",
    };
    CliError::usage(format!(
        "key column {} is {}: `{text}` is not {what}",
        column.name(),
        column.key_type()
    ))
}
