//! `peek`: the next messages of a queue, without leasing them.

use google_cloud_spanner::statement::Statement;
use google_cloud_spanner::value::Value;
use spanner_queues::Dialect;
use spanner_queues::schema::SpannerType;

use crate::catalog;
use crate::context::Context;
use crate::error::CliError;
use crate::input::queue_name;
use crate::output::{self, Format, Peeked};
use crate::session::Session;
use crate::sql::{as_text, value_text};

/// Payload characters shown without `--full`.
const PREVIEW: usize = 80;

/// `peek` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The queue name.
    queue: String,
    /// Messages to show at most.
    #[arg(long, default_value_t = 10, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    limit: u32,
    /// Show whole payloads (default: the first 80 characters).
    #[arg(long)]
    full: bool,
    #[command(flatten)]
    output: Format,
}

/// Prints the first `--limit` messages of the queue by deliver time.
pub(crate) async fn run(args: Args, context: &Context) -> Result<(), CliError> {
    let session = context.connect().await?;
    let messages = peek(&session, &args.queue, args.limit, args.full).await?;
    output::peek(&args.queue, &messages, context.json(args.output));
    Ok(())
}

/// The first `limit` messages of `queue` by deliver time.
pub(crate) async fn peek(
    session: &Session,
    queue: &str,
    limit: u32,
    full: bool,
) -> Result<Vec<Peeked>, CliError> {
    let name = queue_name(queue)?;
    let queue = catalog::queue(session, name.as_str()).await?;
    let keys: Vec<(&str, SpannerType)> = queue
        .key_columns()
        .iter()
        .map(|column| (column.name().as_str(), column.spanner_type()))
        .collect();
    let postgres = session.postgres();
    let statement = if postgres {
        // The values come as they are and are turned into text here: their wire forms
        // (RFC 3339 timestamps, base64 bytes, decimal integers) are the text.
        let order: Vec<String> = keys
            .iter()
            .map(|(name, _)| session.column_sql(name))
            .collect();
        Statement::builder(format!(
            "SELECT {}, payload, deliver_time, deliver_time <= CURRENT_TIMESTAMP \
             FROM {} ORDER BY deliver_time, {} LIMIT $1",
            order.join(", "),
            name.to_sql(Dialect::PostgreSql),
            order.join(", ")
        ))
        .add_param("p1", i64::from(limit))
        .build()
    } else {
        let mut select: Vec<String> = keys.iter().map(|(name, ty)| as_text(name, ty)).collect();
        select.push(as_text("Payload", queue.payload_type()));
        let order: Vec<&str> = keys.iter().map(|(name, _)| *name).collect();
        Statement::builder(format!(
            "SELECT {}, FORMAT_TIMESTAMP('%Y-%m-%dT%H:%M:%E3SZ', DeliverTime, 'UTC'), \
             DeliverTime <= CURRENT_TIMESTAMP() \
             FROM {name} ORDER BY DeliverTime, {} LIMIT @limit",
            select.join(", "),
            order.join(", ")
        ))
        .add_param("limit", i64::from(limit))
        .build()
    };
    let rows = session.rows(statement, &format!("reading {name}")).await?;
    let n = keys.len();
    let types: Vec<SpannerType> = keys
        .into_iter()
        .map(|(_, ty)| ty)
        .chain([queue.payload_type().clone(), SpannerType::Timestamp])
        .collect();
    rows.into_iter()
        .map(|values| {
            let text = |i: usize| -> Result<String, CliError> {
                let value = values.get(i);
                let text = if postgres {
                    value.and_then(|v| value_text(v, types.get(i)?))
                } else {
                    value.and_then(|v| v.as_str().map(str::to_owned))
                };
                text.ok_or_else(|| CliError::failed(format!("unreadable row of {name}")))
            };
            let key = (0..n).map(text).collect::<Result<Vec<_>, _>>()?;
            let payload = text(n)?;
            let (payload, truncated) = if full {
                (payload, false)
            } else {
                shorten(&payload)
            };
            Ok(Peeked {
                key,
                payload,
                truncated,
                deliver_time: text(n + 1)?,
                due: values.get(n + 2).and_then(Value::as_bool).unwrap_or(false),
            })
        })
        .collect()
}

/// The first [`PREVIEW`] characters of `text` and whether it was cut.
fn shorten(text: &str) -> (String, bool) {
    if text.chars().count() <= PREVIEW {
        return (text.to_owned(), false);
    }
    let mut short: String = text.chars().take(PREVIEW).collect();
    short.push('…');
    (short, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_previews_are_cut() {
        let long = "x".repeat(200);
        let (short, cut) = shorten(&long);
        assert!(cut);
        assert_eq!(short.chars().count(), PREVIEW + 1);
        assert_eq!(shorten("{}"), ("{}".to_owned(), false));
    }
}
