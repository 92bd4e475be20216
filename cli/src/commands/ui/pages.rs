//! The console's pages, rendered on the server. maud escapes every value it interpolates.

use axum::http::StatusCode;
use maud::{DOCTYPE, Markup, html};

use super::history::History;
use super::{Done, View, chart};
use crate::output::{Letter, Peeked, QueueInfo};

const STYLE: &str = "
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1f2937; background: #f9fafb; }
header { background: #1e293b; color: #f8fafc; padding: 10px 24px; display: flex; gap: 24px; align-items: baseline; }
header a { color: #f8fafc; text-decoration: none; font-weight: 600; }
header .mode { margin-left: auto; font-size: 12px; padding: 2px 8px; border-radius: 10px; background: #334155; }
header .mode.writes { background: #b45309; }
main { padding: 16px 24px; max-width: 1100px; }
table { border-collapse: collapse; background: #fff; margin: 8px 0 20px; }
th, td { border-bottom: 1px solid #e5e7eb; padding: 6px 10px; text-align: left; vertical-align: top; }
td.n, th.n { text-align: right; font-variant-numeric: tabular-nums; }
pre { background: #fff; border: 1px solid #e5e7eb; padding: 10px; white-space: pre-wrap; word-break: break-all; }
code { font-size: 13px; }
h1 code { font-size: inherit; }
.muted { color: #6b7280; }
.paused { color: #b45309; font-weight: 600; }
.notice { background: #dcfce7; border: 1px solid #86efac; padding: 8px 12px; }
.error { background: #fee2e2; border: 1px solid #fca5a5; padding: 8px 12px; }
.warn { background: #fef3c7; border: 1px solid #fcd34d; padding: 8px 12px; }
form.inline { display: inline; margin: 0 4px 0 0; }
button { font: inherit; padding: 2px 10px; cursor: pointer; }
button.danger { color: #b91c1c; }
svg.chart { background: #fff; border: 1px solid #e5e7eb; font-size: 11px; fill: #374151; }
.legend span { margin-right: 14px; }
.sw { display: inline-block; width: 18px; height: 3px; vertical-align: middle; margin-right: 4px; }
";

/// A value for a query string or a path segment.
pub(crate) fn encode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// `/queues/Q/dead-letter?key=…&key=…`.
fn letter_href(queue: &str, keys: &[String]) -> String {
    let query: Vec<String> = keys.iter().map(|k| format!("key={}", encode(k))).collect();
    format!("/queues/{}/dead-letter?{}", encode(queue), query.join("&"))
}

/// Milliseconds as a person reads an age.
pub(crate) fn age(ms: i64) -> String {
    #[allow(clippy::cast_precision_loss)]
    let s = ms as f64 / 1000.0;
    if ms < 1000 {
        format!("{ms} ms")
    } else if s < 120.0 {
        format!("{s:.1} s")
    } else if s < 7200.0 {
        format!("{:.0} min", s / 60.0)
    } else if s < 172_800.0 {
        format!("{:.1} h", s / 3600.0)
    } else {
        format!("{:.1} d", s / 86_400.0)
    }
}

fn layout(view: Option<&View>, title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (title) " · spanner-queues" }
                style { (maud::PreEscaped(STYLE)) }
            }
            body {
                header {
                    a href="/" { "spanner-queues" }
                    a href="/" { "Queues" }
                    a href="/dead-letters" { "Dead letters" }
                    @if let Some(view) = view {
                        @if view.allow_writes {
                            span.mode.writes { "writes allowed" }
                        } @else {
                            span.mode { "read-only" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// A page saying what went wrong.
pub(crate) fn error(status: StatusCode, message: &str) -> Markup {
    let title = format!(
        "{} {}",
        status.as_u16(),
        status.canonical_reason().unwrap_or("error")
    );
    layout(
        None,
        &title,
        html! {
            h1 { (title) }
            p.error { (message) }
            p { a href="/" { "Back to the queues" } }
        },
    )
}

fn sampling_note(history: &History) -> Markup {
    html! {
        @if let Some(error) = history.last_error() {
            p.warn { "The last sample failed: " (error) }
        }
    }
}

fn legend() -> Markup {
    html! {
        p.legend.muted {
            span { i.sw style="background:#2563eb" {} "depth" }
            span { i.sw style="background:#ea580c" {} "due now" }
            span { i.sw style="background:#16a34a" {} "net drained / s" }
            span { i.sw style="background:#dc2626" {} "net grown / s" }
        }
    }
}

fn charts(queue: &str, history: &History) -> Markup {
    let series = history.series(queue);
    let first = series.first().map_or(0.0, |p| p.at);
    html! {
        (chart::depth(&series))
        " "
        (chart::drain(&history.drain_rates(queue), first))
    }
}

/// Every queue with its counts and charts.
pub(crate) fn overview(view: &View, queues: &[QueueInfo], history: &History) -> Markup {
    layout(
        Some(view),
        "Queues",
        html! {
            h1 { "Queues" }
            (sampling_note(history))
            @if queues.is_empty() {
                p { "This database has no queues." }
            } @else {
                table {
                    tr {
                        th { "Queue" } th.n { "Depth" } th.n { "Due now" } th.n { "Scheduled" }
                        th.n { "Oldest due" } th { "Delivery" } th.n { "Dead letters" }
                    }
                    @for q in queues {
                        tr.queue data-queue=(q.name) {
                            td { a href={"/queues/" (encode(&q.name))} { (q.name) } }
                            td.n.depth { (q.depth) }
                            td.n.due { (q.due) }
                            td.n { (q.scheduled) }
                            td.n { (q.oldest_due_ms().map_or("–".to_owned(), age)) }
                            td { @if q.paused { span.paused { "paused" } } @else { "delivering" } }
                            td.n.dead {
                                @match q.dead_letters {
                                    Some(n) => a href={"/dead-letters?queue=" (encode(&q.name))} { (n) },
                                    None => span.muted title="no dead-letter table" { "–" },
                                }
                            }
                        }
                    }
                }
                h2 { "Over time" }
                p.muted {
                    span.samples { (history.len()) } " samples kept. Spanner keeps no count of acked messages: the "
                    "rate is the net flow, messages that left the queue minus those sent meanwhile."
                }
                (legend())
                @for q in queues {
                    h3 { a href={"/queues/" (encode(&q.name))} { (q.name) } }
                    (charts(&q.name, history))
                }
            }
        },
    )
}

fn letter_actions(view: &View, letter: &Letter) -> Markup {
    html! {
        @if view.allow_writes {
            form.inline method="post" action={"/queues/" (encode(&letter.queue)) "/dead-letters/replay"} {
                input type="hidden" name="token" value=(view.token);
                @for key in &letter.key_parts { input type="hidden" name="key" value=(key); }
                button.replay type="submit" { "Replay" }
            }
            form.inline method="post" action={"/queues/" (encode(&letter.queue)) "/dead-letters/purge"} {
                input type="hidden" name="token" value=(view.token);
                @for key in &letter.key_parts { input type="hidden" name="key" value=(key); }
                button.danger.purge type="submit" { "Purge" }
            }
        }
    }
}

fn letters_table(view: &View, letters: &[Letter]) -> Markup {
    html! {
        table {
            tr {
                th { "Queue" } th { "Key" } th.n { "Attempts" } th { "Dead-lettered at" }
                th { "Last error" } th {}
            }
            @for l in letters {
                tr.letter data-key=(l.key) {
                    td { (l.queue) }
                    td { a href=(letter_href(&l.queue, &l.key_parts)) { code { (l.key) } } }
                    td.n { (l.attempts) }
                    td { (l.dead_lettered_at) }
                    td { (l.error) }
                    td { (letter_actions(view, l)) }
                }
            }
        }
    }
}

/// Dead letters, of one queue or all.
pub(crate) fn dead_letters(view: &View, queue: Option<&str>, letters: &[Letter]) -> Markup {
    layout(
        Some(view),
        "Dead letters",
        html! {
            h1 { "Dead letters" @if let Some(q) = queue { " of " (q) } }
            @if letters.is_empty() {
                p { "No dead letters." }
            } @else {
                (letters_table(view, letters))
            }
        },
    )
}

/// What a queue's page shows.
#[derive(Debug)]
pub(crate) struct QueuePage<'a> {
    pub(crate) info: &'a QueueInfo,
    pub(crate) peeked: &'a [Peeked],
    pub(crate) limit: u32,
    /// The queue's dead letters, or why they could not be read.
    pub(crate) letters: Result<&'a [Letter], &'a str>,
    pub(crate) history: &'a History,
    pub(crate) done: Option<Done>,
}

/// One queue: counts, charts, the next messages, its dead letters, pause and resume.
pub(crate) fn queue(view: &View, page: &QueuePage<'_>) -> Markup {
    let q = page.info;
    let name = encode(&q.name);
    layout(
        Some(view),
        &q.name,
        html! {
            h1 { (q.name) " " @if q.paused { span.paused { "(paused)" } } }
            @if let Some(done) = page.done {
                p.notice {
                    @match done {
                        Done::Replayed => "Replayed: the message is back in the queue, deliverable now.",
                        Done::Purged => "Purged.",
                        Done::Paused => "Paused: delivery stopped (sends still work).",
                        Done::Resumed => "Resumed: delivery goes on.",
                    }
                }
            }
            (sampling_note(page.history))
            table {
                tr {
                    th.n { "Depth" } th.n { "Due now" } th.n { "Scheduled" } th.n { "Oldest due" }
                    th { "Delivery" } th.n { "Dead letters" }
                }
                tr {
                    td.n.depth { (q.depth) }
                    td.n.due { (q.due) }
                    td.n { (q.scheduled) }
                    td.n { (q.oldest_due_ms().map_or("–".to_owned(), age)) }
                    td { @if q.paused { span.paused { "paused" } } @else { "delivering" } }
                    td.n.dead { (q.dead_letters.map_or("–".to_owned(), |n| n.to_string())) }
                }
            }
            @if view.allow_writes {
                @let (action, label) = if q.paused { ("resume", "Resume delivery") } else { ("pause", "Pause delivery") };
                form method="post" action={"/queues/" (name) "/" (action)} {
                    input type="hidden" name="token" value=(view.token);
                    button.(action) type="submit" { (label) }
                }
            }
            h2 { "Dead letters" }
            @match page.letters {
                Err(why) => p.muted { (why) },
                Ok([]) => p { "No dead letters." },
                Ok(letters) => {
                    (letters_table(view, letters))
                    @if view.allow_writes {
                        form method="post" action={"/queues/" (name) "/dead-letters/purge"} {
                            input type="hidden" name="token" value=(view.token);
                            input type="hidden" name="all" value="true";
                            button.danger.purge-all type="submit" { "Purge every dead letter of " (q.name) }
                        }
                    }
                },
            }
            h2 { "Next messages" }
            p.muted {
                "The first " (page.limit) " by deliver time, read without leasing them "
                "(" a href={"/queues/" (name) "?limit=" (page.limit.saturating_mul(5).min(super::PEEK_MAX))} { "more" } ")."
            }
            @if page.peeked.is_empty() {
                p { "The queue is empty." }
            } @else {
                table.peek {
                    tr { th { "Key" } th { "Deliver time" } th { "State" } th { "Payload" } }
                    @for m in page.peeked {
                        tr {
                            td { code { "(" (m.key.join(", ")) ")" } }
                            td { (m.deliver_time) }
                            td { @if m.due { "due" } @else { "scheduled" } }
                            td { code { (m.payload) } }
                        }
                    }
                }
            }
            h2 { "Over time" }
            (legend())
            (charts(&q.name, page.history))
        },
    )
}

/// A JSON payload indented; others as they are.
fn pretty(letter: &Letter) -> String {
    if letter.payload_kind == "JSON"
        && let Ok(value) = serde_json::from_str::<serde_json::Value>(&letter.payload)
        && let Ok(text) = serde_json::to_string_pretty(&value)
    {
        return text;
    }
    letter.payload.clone()
}

/// One dead letter with its whole payload.
pub(crate) fn dead_letter(view: &View, letter: &Letter) -> Markup {
    layout(
        Some(view),
        &format!("Dead letter {}", letter.key),
        html! {
            h1 { "Dead letter " code { (letter.key) } " of "
                a href={"/queues/" (encode(&letter.queue))} { (letter.queue) } }
            table {
                tr { th { "Attempts" } td { (letter.attempts) } }
                tr { th { "Dead-lettered at" } td { (letter.dead_lettered_at) } }
                tr { th { "Last error" } td { (letter.error) } }
                tr { th { "Payload" } td { (letter.payload_kind) } }
            }
            pre.payload { (pretty(letter)) }
            (letter_actions(view, letter))
            @if !view.allow_writes {
                p.muted { "Read-only console: start it with --allow-writes to replay or purge." }
            }
        },
    )
}
