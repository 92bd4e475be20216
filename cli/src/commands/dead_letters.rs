//! `dead-letters`: list, show, replay and purge the worker's dead letters.

use base64::Engine as _;
use spanner_queues::Error;
use spanner_queues::codec::Payload;
use spanner_queues::ident::QueueName;
use spanner_queues::worker::{DeadLetter, Purge};

use crate::catalog;
use crate::context::Context;
use crate::error::{CliError, EXIT_CONFLICT, chain};
use crate::input::{key_texts, queue_name};
use crate::output::{self, Format, Letter};
use crate::session::Session;
use crate::times::rfc3339;

/// Dead letters read per queue when looking one up by key.
const LOOKUP_LIMIT: usize = 100_000;

/// The `dead-letters` subcommands.
#[derive(Debug, clap::Subcommand)]
pub(crate) enum Command {
    /// Dead letters, oldest first: queue, key, attempts, when, last error.
    List {
        /// Only this queue's.
        #[arg(long)]
        queue: Option<String>,
        /// Dead letters to show at most.
        #[arg(long, default_value_t = 50, value_parser = clap::value_parser!(u32).range(1..=100_000))]
        limit: u32,
        #[command(flatten)]
        output: Format,
    },
    /// One dead letter with its whole payload.
    Show {
        /// The queue it came from.
        queue: String,
        /// Its key column values, in primary-key order.
        #[arg(long = "key", required = true)]
        keys: Vec<String>,
        #[command(flatten)]
        output: Format,
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
        output: Format,
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
        output: Format,
    },
}

/// Runs one `dead-letters` subcommand.
pub(crate) async fn run(command: Command, context: &Context) -> Result<(), CliError> {
    let session = context.connect().await?;
    match command {
        Command::List {
            queue,
            limit,
            output,
        } => {
            let letters = list(&session, queue.as_deref(), limit).await?;
            output::dead_letters(&letters, context.json(output));
        }
        Command::Show {
            queue,
            keys,
            output,
        } => {
            let letter = show(&session, &queue, &keys).await?;
            output::dead_letter(&letter, context.json(output));
        }
        Command::Replay {
            queue,
            keys,
            output,
        } => {
            let letter = replay(&session, &queue, &keys).await?;
            output::done(
                &format!("replayed {} {} to {queue}", queue, letter.key),
                serde_json::json!({ "queue": queue, "key": letter.key_parts, "replayed": true }),
                context.json(output),
            );
        }
        Command::Purge {
            queue,
            keys,
            all,
            output,
        } => {
            let purged = purge(&session, &queue, (!all).then_some(&keys[..])).await?;
            output::done(
                &format!("purged {purged} dead letter(s) of {queue}"),
                serde_json::json!({ "queue": queue, "purged": purged }),
                context.json(output),
            );
        }
    }
    Ok(())
}

async fn letters_of(
    session: &Session,
    queue: &QueueName,
    limit: usize,
) -> Result<Vec<DeadLetter>, CliError> {
    session
        .database()
        .dead_letters()
        .list(queue, limit)
        .await
        .map_err(|e| CliError::from_error(&format!("reading the dead letters of {queue}"), e))
}

/// The queue names the dead-letter table holds (as the workers spelled them), all or
/// those equal to `queue` ignoring case (queue names are case-insensitive).
async fn dead_letter_queues(
    session: &Session,
    queue: Option<&str>,
) -> Result<Vec<QueueName>, CliError> {
    let names = session
        .database()
        .dead_letters()
        .queues()
        .await
        .map_err(|e| CliError::from_error("listing the queues with dead letters", e))?;
    Ok(names
        .into_iter()
        .filter(|n| queue.is_none_or(|q| q.eq_ignore_ascii_case(n.as_str())))
        .collect())
}

/// Dead letters, oldest first, of one queue or all.
pub(crate) async fn list(
    session: &Session,
    queue: Option<&str>,
    limit: u32,
) -> Result<Vec<Letter>, CliError> {
    session.require_dead_letter_table().await?;
    let limit = limit as usize;
    if let Some(queue) = queue {
        queue_name(queue)?;
    }
    let queues = dead_letter_queues(session, queue).await?;
    let mut letters = Vec::new();
    for queue in &queues {
        letters.extend(letters_of(session, queue, limit).await?);
    }
    letters.sort_by_key(DeadLetter::dead_lettered_at);
    letters.truncate(limit);
    Ok(letters.iter().map(letter).collect())
}

/// The dead letter of `queue` whose key values print as `keys`.
async fn find_letter(
    session: &Session,
    queue: &QueueName,
    keys: &[String],
) -> Result<DeadLetter, CliError> {
    session.require_dead_letter_table().await?;
    // The command line has the key only as text, and a dead letter keeps the key as its
    // message type made it (a UUID where the column is a STRING): so the text of each key
    // value (as `dead-letters list` prints them) is compared.
    let mut found = None;
    for stored in dead_letter_queues(session, Some(queue.as_str())).await? {
        found = letters_of(session, &stored, LOOKUP_LIMIT)
            .await?
            .into_iter()
            .find(|l| key_texts(l.key().parts()) == keys);
        if found.is_some() {
            break;
        }
    }
    found.ok_or_else(|| {
        CliError::not_found(format!(
            "no dead letter of {queue} with key ({}); `spanner-queues dead-letters list \
             --queue {queue}` shows them",
            keys.join(", ")
        ))
    })
}

/// One dead letter.
pub(crate) async fn show(
    session: &Session,
    queue: &str,
    keys: &[String],
) -> Result<Letter, CliError> {
    let queue = queue_name(queue)?;
    Ok(letter(&find_letter(session, &queue, keys).await?))
}

/// Sends a dead letter back to its queue and deletes it, in one transaction (the SDK's
/// untyped replay).
pub(crate) async fn replay(
    session: &Session,
    queue: &str,
    keys: &[String],
) -> Result<Letter, CliError> {
    let name = queue_name(queue)?;
    let dead = find_letter(session, &name, keys).await?;
    let shown = dead.key().to_string();
    let replayed = session
        .database()
        .dead_letters()
        .replay(dead.queue(), dead.key())
        .await;
    match replayed {
        Ok(true) => Ok(letter(&dead)),
        // Removed meanwhile (replayed or purged by someone else): nothing was sent.
        Ok(false) => Err(CliError::not_found(format!(
            "the dead letter {shown} of {name} was removed meanwhile; nothing was sent"
        ))),
        Err(Error::AlreadyQueued { .. }) => Err(CliError::new(
            EXIT_CONFLICT,
            format!("a message with key {shown} is already in {name}; the dead letter stays"),
        )),
        Err(e @ Error::InvalidKey { .. }) => Err(CliError::failed(format!(
            "the dead letter's key {shown} does not fit the key columns {name} has now; \
             the dead letter stays: {}",
            chain(&e)
        ))),
        Err(e) => Err(catalog::queue_error(
            session,
            name.as_str(),
            &format!("replaying {shown} to {name}"),
            e,
        )
        .await),
    }
}

/// Deletes one dead letter (`keys`) or every one of `queue`; returns how many.
pub(crate) async fn purge(
    session: &Session,
    queue: &str,
    keys: Option<&[String]>,
) -> Result<u64, CliError> {
    let name = queue_name(queue)?;
    let dead = session.database().dead_letters();
    let purge = |stored: QueueName, which: Purge| {
        let dead = &dead;
        async move {
            dead.purge(&stored, which)
                .await
                .map_err(|e| CliError::from_error(&format!("purging dead letters of {stored}"), e))
        }
    };
    match keys {
        Some(keys) => {
            let letter = find_letter(session, &name, keys).await?;
            purge(
                letter.queue().clone(),
                Purge::Keys(vec![letter.key().clone()]),
            )
            .await
        }
        None => {
            session.require_dead_letter_table().await?;
            let mut purged = 0;
            for stored in dead_letter_queues(session, Some(name.as_str())).await? {
                purged += purge(stored, Purge::All).await?;
            }
            Ok(purged)
        }
    }
}

/// A dead letter as printed.
fn letter(dead: &DeadLetter) -> Letter {
    let (payload, payload_kind) = match dead.payload() {
        Payload::Json(text) => (text.clone(), "JSON"),
        Payload::String(text) => (text.clone(), "STRING"),
        other => (
            format!(
                "base64:{}",
                base64::engine::general_purpose::STANDARD.encode(other.as_bytes())
            ),
            "BYTES",
        ),
    };
    Letter {
        queue: dead.queue().to_string(),
        key: dead.key().to_string(),
        key_parts: key_texts(dead.key().parts()),
        attempts: dead.attempts(),
        error: dead.error().to_owned(),
        dead_lettered_at: rfc3339(dead.dead_lettered_at()),
        payload,
        payload_kind: payload_kind.to_owned(),
    }
}
