//! What the commands print: human tables, or JSON documents with `--json`.

use serde_json::{Value, json};
use time::Duration;

/// `--json` after a command.
#[derive(Debug, clap::Args, Clone, Copy)]
pub(crate) struct Format {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// One queue in the `queues` listing.
#[derive(Debug)]
pub(crate) struct QueueInfo {
    pub(crate) name: String,
    pub(crate) depth: i64,
    pub(crate) due: i64,
    pub(crate) scheduled: i64,
    /// How long ago the oldest due message became deliverable.
    pub(crate) oldest_due: Option<time::Duration>,
    pub(crate) paused: bool,
    /// `None` when the database has no dead-letter table.
    pub(crate) dead_letters: Option<u64>,
}

impl QueueInfo {
    /// [`oldest_due`](Self::oldest_due) in whole milliseconds.
    pub(crate) fn oldest_due_ms(&self) -> Option<i64> {
        self.oldest_due.map(millis)
    }
}

/// One message shown by `peek`.
#[derive(Debug)]
pub(crate) struct Peeked {
    pub(crate) key: Vec<String>,
    pub(crate) deliver_time: String,
    pub(crate) due: bool,
    pub(crate) payload: String,
    pub(crate) truncated: bool,
}

/// One dead letter, ready to print.
#[derive(Debug)]
pub(crate) struct Letter {
    pub(crate) queue: String,
    /// The key as the SDK prints it, e.g. `(42, "abc")`.
    pub(crate) key: String,
    /// The key values as `--key` takes them.
    pub(crate) key_parts: Vec<String>,
    pub(crate) attempts: u32,
    pub(crate) error: String,
    pub(crate) dead_lettered_at: String,
    /// Text payloads as they are; binary ones as `base64:…`.
    pub(crate) payload: String,
    pub(crate) payload_kind: String,
}

/// Left-aligned columns separated by two spaces.
fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let padded: Vec<String> = cells
            .iter()
            .zip(&widths)
            .map(|(cell, w)| format!("{cell:<w$}"))
            .collect();
        padded.join("  ").trim_end().to_owned()
    };
    let mut out = vec![line(headers.to_vec())];
    for row in rows {
        out.push(line(row.iter().map(String::as_str).collect()));
    }
    out.join("\n")
}

fn print_json(value: &Value) {
    println!("{value}");
}

/// `1.2s`, `3m04s`, `2h05m`, `3d04h` (a negative age, from clock skew, is `0.0s`).
fn age(age: Duration) -> String {
    let age = age.max(Duration::ZERO);
    let s = age.whole_seconds();
    match s {
        _ if age < Duration::MINUTE => format!("{:.1}s", age.as_seconds_f64()),
        _ if age < Duration::HOUR => format!("{}m{:02}s", s / 60, s % 60),
        _ if age < Duration::DAY => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
        _ => format!("{}d{:02}h", s / 86_400, s % 86_400 / 3600),
    }
}

/// Whole milliseconds, for JSON.
fn millis(age: Duration) -> i64 {
    i64::try_from(age.whole_milliseconds()).unwrap_or(i64::MAX)
}

pub(crate) fn queues(queues: &[QueueInfo], json: bool) {
    if json {
        let items: Vec<Value> = queues
            .iter()
            .map(|q| {
                json!({
                    "queue": q.name,
                    "depth": q.depth,
                    "due": q.due,
                    "scheduled": q.scheduled,
                    // Spanner exposes no lease state to SQL.
                    "leased": null,
                    "oldest_due_age_ms": q.oldest_due_ms(),
                    "paused": q.paused,
                    "dead_letters": q.dead_letters,
                })
            })
            .collect();
        print_json(&json!({ "queues": items }));
        return;
    }
    if queues.is_empty() {
        println!("no queues");
        return;
    }
    let rows: Vec<Vec<String>> = queues
        .iter()
        .map(|q| {
            vec![
                q.name.clone(),
                q.depth.to_string(),
                q.due.to_string(),
                q.scheduled.to_string(),
                q.oldest_due.map_or_else(|| "-".to_owned(), age),
                if q.paused { "paused" } else { "delivering" }.to_owned(),
                q.dead_letters
                    .map_or_else(|| "-".to_owned(), |n| n.to_string()),
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &[
                "QUEUE",
                "DEPTH",
                "DUE",
                "SCHEDULED",
                "OLDEST DUE",
                "STATE",
                "DEAD LETTERS"
            ],
            &rows
        )
    );
}

pub(crate) fn peek(queue: &str, messages: &[Peeked], json: bool) {
    if json {
        let items: Vec<Value> = messages
            .iter()
            .map(|m| {
                json!({
                    "key": m.key,
                    "deliver_time": m.deliver_time,
                    "due": m.due,
                    "payload": m.payload,
                    "truncated": m.truncated,
                })
            })
            .collect();
        print_json(&json!({ "queue": queue, "messages": items }));
        return;
    }
    if messages.is_empty() {
        println!("{queue} is empty");
        return;
    }
    let rows: Vec<Vec<String>> = messages
        .iter()
        .map(|m| {
            vec![
                format!("({})", m.key.join(", ")),
                m.deliver_time.clone(),
                if m.due { "due" } else { "scheduled" }.to_owned(),
                m.payload.clone(),
            ]
        })
        .collect();
    println!(
        "{}",
        table(&["KEY", "DELIVER TIME", "STATE", "PAYLOAD"], &rows)
    );
}

fn letter_json(l: &Letter, with_payload: bool) -> Value {
    let mut value = json!({
        "queue": l.queue,
        "key": l.key_parts,
        "attempts": l.attempts,
        "error": l.error,
        "dead_lettered_at": l.dead_lettered_at,
        "payload_kind": l.payload_kind,
    });
    if with_payload {
        value["payload"] = Value::String(l.payload.clone());
    }
    value
}

pub(crate) fn dead_letters(letters: &[Letter], json: bool) {
    if json {
        let items: Vec<Value> = letters.iter().map(|l| letter_json(l, false)).collect();
        print_json(&json!({ "dead_letters": items }));
        return;
    }
    if letters.is_empty() {
        println!("no dead letters");
        return;
    }
    let rows: Vec<Vec<String>> = letters
        .iter()
        .map(|l| {
            let error: String = l
                .error
                .lines()
                .next()
                .unwrap_or("")
                .chars()
                .take(80)
                .collect();
            vec![
                l.queue.clone(),
                format!("({})", l.key_parts.join(", ")),
                l.attempts.to_string(),
                l.dead_lettered_at.clone(),
                error,
            ]
        })
        .collect();
    println!(
        "{}",
        table(
            &["QUEUE", "KEY", "ATTEMPTS", "DEAD-LETTERED AT", "ERROR"],
            &rows
        )
    );
}

pub(crate) fn dead_letter(l: &Letter, json: bool) {
    if json {
        print_json(&letter_json(l, true));
        return;
    }
    println!("queue:            {}", l.queue);
    println!("key:              ({})", l.key_parts.join(", "));
    println!("attempts:         {}", l.attempts);
    println!("dead-lettered at: {}", l.dead_lettered_at);
    println!("error:            {}", l.error);
    println!("payload ({}):", l.payload_kind);
    println!("{}", l.payload);
}

pub(crate) fn done(text: &str, value: Value, json: bool) {
    if json {
        print_json(&value);
    } else {
        println!("{text}");
    }
}

pub(crate) fn schema(statements: &[String], json: bool) {
    if json {
        print_json(&json!({ "statements": statements }));
    } else {
        for statement in statements {
            println!("{statement};\n");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_align_on_the_widest_cell() {
        let text = table(
            &["A", "LONGER"],
            &[
                vec!["wide cell".into(), "1".into()],
                vec!["x".into(), "22".into()],
            ],
        );
        assert_eq!(text, "A          LONGER\nwide cell  1\nx          22");
    }

    #[test]
    fn ages_pick_a_readable_unit() {
        assert_eq!(age(Duration::milliseconds(1_234)), "1.2s");
        assert_eq!(age(Duration::milliseconds(59_949)), "59.9s");
        assert_eq!(age(Duration::seconds(184)), "3m04s");
        assert_eq!(age(Duration::seconds(7_500)), "2h05m");
        assert_eq!(age(Duration::seconds(273_600)), "3d04h");
        assert_eq!(age(Duration::milliseconds(-5)), "0.0s");
        assert_eq!(millis(Duration::microseconds(1_999)), 1);
    }
}
