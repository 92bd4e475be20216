//! `queues`: each queue with its depth, due and scheduled messages, the age of its oldest due
//! message, whether delivery is paused, and its dead letters.

use std::collections::BTreeMap;
use std::time::Duration;

use google_cloud_spanner::statement::Statement;
use google_cloud_spanner::value::Value;
use spanner_queues::Dialect;

use crate::catalog;
use crate::context::Context;
use crate::error::CliError;
use crate::input::{positive_seconds, queue_name};
use crate::output::{self, Format, QueueInfo};
use crate::session::Session;
use crate::times;

/// `queues` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Refresh in place until interrupted (one JSON document per refresh with --json).
    #[arg(long)]
    watch: bool,
    /// Seconds between refreshes with --watch.
    #[arg(long, default_value_t = 2.0, value_parser = positive_seconds)]
    interval: f64,
    #[command(flatten)]
    output: Format,
}

/// Prints the queues once, or every `--interval` with `--watch` until interrupted.
pub(crate) async fn run(args: Args, context: &Context) -> Result<(), CliError> {
    let session = context.connect().await?;
    let json = context.json(args.output);
    if !args.watch {
        let queues = list(&session).await?;
        output::queues(&queues, json);
        return Ok(());
    }
    let interval = Duration::from_secs_f64(args.interval);
    let stop = tokio::signal::ctrl_c();
    tokio::pin!(stop);
    loop {
        let queues = list(&session).await?;
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

/// Every queue with its counts.
pub(crate) async fn list(session: &Session) -> Result<Vec<QueueInfo>, CliError> {
    let queues = catalog::queues(session).await?;
    // Keyed by lower-case name: a queue's name is case-insensitive (PostgreSQL lists it in
    // lower case; the worker records the name its message type spells).
    let dead: Option<BTreeMap<String, u64>> = if session.has_dead_letter_table().await? {
        let counts = session
            .database()
            .dead_letters()
            .counts()
            .await
            .map_err(|e| CliError::from_error("counting dead letters", e))?;
        let mut by_name = BTreeMap::new();
        for (name, n) in counts {
            *by_name
                .entry(name.as_str().to_ascii_lowercase())
                .or_insert(0) += n;
        }
        Some(by_name)
    } else {
        None
    };
    let mut out = Vec::new();
    for declared in queues {
        let name = declared.name;
        let queue = queue_name(&name)?;
        // [?] Whether a message's DeliverTime changes while it is leased or redelivered is
        // not documented: "due" counts messages whose DeliverTime has passed, leased ones
        // included, and the oldest age is measured from that DeliverTime. Spanner exposes
        // no lease state to SQL, so leased messages are not counted separately.
        let doing = format!("counting the messages of {queue}");
        let (depth, due, oldest) = match session.dialect() {
            Dialect::GoogleSql => {
                let counts: Vec<(i64, i64, Option<i64>)> = session
                    .query(
                        Statement::builder(format!(
                            "SELECT COUNT(*), COUNTIF(DeliverTime <= CURRENT_TIMESTAMP()), \
                             TIMESTAMP_DIFF(CURRENT_TIMESTAMP(), \
                               MIN(IF(DeliverTime <= CURRENT_TIMESTAMP(), DeliverTime, NULL)), \
                               MILLISECOND) \
                             FROM {queue}"
                        ))
                        .build(),
                        &doing,
                    )
                    .await?;
                let (depth, due, oldest_ms) = counts.first().cloned().unwrap_or((0, 0, None));
                (depth, due, oldest_ms.map(time::Duration::milliseconds))
            }
            _ => {
                // The age is the difference of two of Spanner's timestamps, read as
                // RFC 3339 text: the clock is the database's, as in GoogleSQL.
                let rows = session
                    .rows(
                        Statement::builder(format!(
                            "SELECT COUNT(*), \
                             COUNT(CASE WHEN deliver_time <= CURRENT_TIMESTAMP THEN 1 END), \
                             MIN(CASE WHEN deliver_time <= CURRENT_TIMESTAMP \
                                 THEN deliver_time END), \
                             CURRENT_TIMESTAMP \
                             FROM {}",
                            queue.to_sql(Dialect::PostgreSql)
                        ))
                        .build(),
                        &doing,
                    )
                    .await?;
                let row = rows
                    .first()
                    .ok_or_else(|| CliError::failed(format!("no counts from {queue}")))?;
                let int = |i: usize| -> Result<i64, CliError> {
                    row.get(i)
                        .and_then(Value::as_str)
                        .and_then(|t| t.parse().ok())
                        .ok_or_else(|| CliError::failed(format!("unreadable counts of {queue}")))
                };
                let oldest = oldest_age(
                    row.get(2).and_then(Value::as_str),
                    row.get(3).and_then(Value::as_str),
                );
                (int(0)?, int(1)?, oldest)
            }
        };
        out.push(QueueInfo {
            dead_letters: dead
                .as_ref()
                .map(|d| d.get(&name.to_ascii_lowercase()).copied().unwrap_or(0)),
            name,
            depth,
            due,
            scheduled: depth - due,
            oldest_due: oldest,
            paused: declared.delivery_disabled,
        });
    }
    Ok(out)
}

/// How long ago the oldest due message became deliverable: its deliver time and the database's
/// clock, both as Spanner's RFC 3339 text.
fn oldest_age(oldest: Option<&str>, now: Option<&str>) -> Option<time::Duration> {
    Some(times::parse(now?)? - times::parse(oldest?)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_oldest_age_is_the_database_clock_minus_the_deliver_time() {
        let age = oldest_age(
            Some("2026-12-01T23:59:59.250123Z"),
            Some("2026-12-02T00:00:01.000456789Z"),
        );
        assert_eq!(age.map(time::Duration::whole_microseconds), Some(1_750_333));
        // No due message, or a timestamp that does not read: no age.
        assert_eq!(oldest_age(None, Some("2026-12-02T00:00:01Z")), None);
        assert_eq!(oldest_age(Some("2026-12-02T00:00:01Z"), Some("now")), None);
    }
}
