//! `spanner-queues ui`: a small web console in the browser over the same operations as the
//! subcommands (`queues`, `peek`, `dead-letters`, `pause`, `resume`).
//!
//! Pages are rendered on the server (maud) with no script; actions are HTML forms that POST.
//! Writes (replay, purge, pause, resume) exist only with `--allow-writes`; otherwise every POST
//! is answered 403 and changes nothing. Each POST carries a per-server token and, when the
//! browser sends one, an `Origin` that must be the console's own. Bound to a loopback address
//! (the default), the console also refuses requests whose `Host` is not a loopback name, so a
//! web page elsewhere cannot read it through DNS rebinding.

mod chart;
mod history;
mod pages;
mod request;
#[cfg(test)]
mod tests;

use std::io::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::middleware;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use spanner_queues::ident::QueueName;

use super::{dead_letters, pause, peek, queues};
use crate::catalog;
use crate::context::Context;
use crate::error::{CliError, EXIT_CONFLICT, EXIT_FAILED, EXIT_NOT_FOUND, EXIT_USAGE};
use crate::input::positive_seconds;
use crate::session::Session;
use history::History;
use request::{QueuePath, WriteForm, check_host, query};

/// Samples kept per console: an hour at the default interval.
const HISTORY_SAMPLES: usize = 720;
/// The largest POST body read (a form with a few keys).
const MAX_FORM_BYTES: usize = 64 * 1024;
/// Messages shown by a queue page's peek unless `?limit=` says otherwise.
const PEEK_DEFAULT: u32 = 20;
/// The largest `?limit=` of a queue page's peek.
const PEEK_MAX: u32 = 1000;
/// Dead letters listed per page.
const DEAD_LETTERS_SHOWN: u32 = 200;

/// `ui` arguments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// The address to listen on (port 0 picks a free port; the first line printed says which).
    #[arg(long, default_value = "127.0.0.1:8800")]
    listen: SocketAddr,
    /// Serve replay, purge, pause and resume (otherwise every action is refused with 403).
    #[arg(long)]
    allow_writes: bool,
    /// Allow a --listen address that is not loopback. The console has no login: whoever
    /// reaches it reads every payload.
    #[arg(long)]
    allow_remote: bool,
    /// Seconds between two samples of the queues' counts (the history keeps the last 720).
    #[arg(long, default_value_t = 5.0, value_parser = positive_seconds)]
    interval: f64,
}

/// The console's state, shared by its handlers and its sampler.
#[derive(Debug)]
pub(crate) struct Console {
    session: Session,
    allow_writes: bool,
    /// Only loopback host names in `Host` (the console listens on a loopback address).
    loopback_only: bool,
    /// The per-server token every POST carries (a hidden form field).
    token: String,
    started: Instant,
    interval: Duration,
    history: std::sync::Mutex<History>,
}

impl Console {
    /// A console over `session`.
    pub(crate) fn new(
        session: Session,
        allow_writes: bool,
        loopback_only: bool,
        interval: Duration,
    ) -> Self {
        Self {
            session,
            allow_writes,
            loopback_only,
            token: uuid::Uuid::new_v4().simple().to_string(),
            started: Instant::now(),
            interval,
            history: std::sync::Mutex::new(History::new(HISTORY_SAMPLES)),
        }
    }

    /// Reads every queue's counts once and keeps them in the history.
    pub(crate) async fn sample(&self) {
        let at = self.started.elapsed().as_secs_f64();
        let outcome = queues::list(&self.session).await;
        let mut history = self
            .history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match outcome {
            Ok(queues) => history.push(at, &queues),
            Err(error) => history.failed(error.message),
        }
    }

    fn history(&self) -> std::sync::MutexGuard<'_, History> {
        self.history
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Serves the console until Ctrl-C.
pub(crate) async fn run(options: Args, context: &Context) -> Result<(), CliError> {
    check_listen(options.listen, options.allow_remote)?;
    let session = context.connect().await?;
    let console = Arc::new(Console::new(
        session,
        options.allow_writes,
        !options.allow_remote,
        Duration::from_secs_f64(options.interval),
    ));
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .map_err(|e| CliError {
            code: EXIT_FAILED,
            message: format!("cannot listen on {}: {e}", options.listen),
        })?;
    let local = listener.local_addr().map_err(|e| CliError {
        code: EXIT_FAILED,
        message: format!("cannot read the listening address: {e}"),
    })?;
    let mode = if options.allow_writes {
        "writes allowed: replay, purge, pause and resume"
    } else {
        "read-only; --allow-writes enables replay, purge, pause and resume"
    };
    // Tests read this first line for the address (port 0 picks a free one).
    println!("console: http://{local}/ ({mode}); Ctrl-C stops it");
    let _ = std::io::stdout().flush();
    let sampler = Arc::clone(&console);
    tokio::spawn(async move {
        loop {
            sampler.sample().await;
            tokio::time::sleep(sampler.interval).await;
        }
    });
    axum::serve(listener, router(console))
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await
        .map_err(|e| CliError {
            code: EXIT_FAILED,
            message: format!("the console stopped: {e}"),
        })
}

/// Refuses a non-loopback address unless `allow_remote`.
fn check_listen(listen: SocketAddr, allow_remote: bool) -> Result<(), CliError> {
    if listen.ip().is_loopback() || allow_remote {
        return Ok(());
    }
    Err(CliError {
        code: EXIT_USAGE,
        message: format!(
            "--listen {listen} is not a loopback address: the console has no login, so anyone \
             who reaches it reads every payload (and, with --allow-writes, replays and purges). \
             Pass --allow-remote to serve it there anyway, or listen on 127.0.0.1 and use an SSH \
             tunnel"
        ),
    })
}

/// The console's routes.
pub(crate) fn router(console: Arc<Console>) -> Router {
    Router::new()
        .route("/", get(overview))
        .route("/dead-letters", get(all_dead_letters))
        .route("/queues/{queue}", get(queue_page))
        .route("/queues/{queue}/dead-letter", get(show_dead_letter))
        .route("/queues/{queue}/pause", post(pause))
        .route("/queues/{queue}/resume", post(resume))
        .route("/queues/{queue}/dead-letters/replay", post(replay))
        .route("/queues/{queue}/dead-letters/purge", post(purge))
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn_with_state(
            Arc::clone(&console),
            check_host,
        ))
        .with_state(console)
}

/// An error page.
#[derive(Debug)]
pub(crate) struct PageError {
    status: StatusCode,
    message: String,
}

impl PageError {
    fn new(status: StatusCode, message: impl Into<String>) -> Self {
        Self {
            status,
            message: message.into(),
        }
    }
}

impl From<CliError> for PageError {
    fn from(error: CliError) -> Self {
        let status = match error.code {
            EXIT_USAGE => StatusCode::BAD_REQUEST,
            EXIT_NOT_FOUND => StatusCode::NOT_FOUND,
            EXIT_CONFLICT => StatusCode::CONFLICT,
            // The database answered with an error: the console is a gateway to it.
            _ => StatusCode::BAD_GATEWAY,
        };
        Self::new(status, error.message)
    }
}

impl IntoResponse for PageError {
    fn into_response(self) -> Response {
        (self.status, pages::error(self.status, &self.message)).into_response()
    }
}

type Page = Result<maud::Markup, PageError>;

async fn not_found() -> PageError {
    PageError::new(StatusCode::NOT_FOUND, "no such page")
}

async fn method_not_allowed() -> PageError {
    PageError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "this page does not take that method: pages are read with GET, actions are forms that POST",
    )
}

/// What a write did, shown once on the page it redirects to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Done {
    Replayed,
    Purged,
    Paused,
    Resumed,
}

impl Done {
    fn as_str(self) -> &'static str {
        match self {
            Self::Replayed => "replayed",
            Self::Purged => "purged",
            Self::Paused => "paused",
            Self::Resumed => "resumed",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        [Self::Replayed, Self::Purged, Self::Paused, Self::Resumed]
            .into_iter()
            .find(|d| d.as_str() == text)
    }
}

/// Where a write goes back to: the queue's page, saying what was done.
fn back_to(queue: &str, done: Done) -> Redirect {
    Redirect::to(&format!(
        "/queues/{}?done={}",
        pages::encode(queue),
        done.as_str()
    ))
}

/// What each page needs to know about the console.
#[derive(Debug, Clone)]
pub(crate) struct View {
    pub(crate) allow_writes: bool,
    pub(crate) token: String,
}

fn view(console: &Console) -> View {
    View {
        allow_writes: console.allow_writes,
        token: console.token.clone(),
    }
}

async fn overview(State(console): State<Arc<Console>>, RawQuery(raw): RawQuery) -> Page {
    query(raw).only(&[])?;
    let queues = queues::list(&console.session).await?;
    let history = console.history();
    Ok(pages::overview(&view(&console), &queues, &history))
}

async fn all_dead_letters(State(console): State<Arc<Console>>, RawQuery(raw): RawQuery) -> Page {
    let fields = query(raw);
    fields.only(&["queue"])?;
    let queue = fields.one("queue")?;
    if let Some(queue) = &queue {
        QueueName::new(queue).map_err(|e| {
            PageError::new(
                StatusCode::BAD_REQUEST,
                format!("`{queue}` is not a queue name: {e}"),
            )
        })?;
    }
    let letters =
        dead_letters::list(&console.session, queue.as_deref(), DEAD_LETTERS_SHOWN).await?;
    Ok(pages::dead_letters(
        &view(&console),
        queue.as_deref(),
        &letters,
    ))
}

async fn queue_page(
    State(console): State<Arc<Console>>,
    QueuePath(queue): QueuePath,
    RawQuery(raw): RawQuery,
) -> Page {
    let fields = query(raw);
    fields.only(&["limit", "done"])?;
    let limit = match fields.one("limit")? {
        None => PEEK_DEFAULT,
        Some(text) => text
            .parse::<u32>()
            .ok()
            .filter(|n| (1..=PEEK_MAX).contains(n))
            .ok_or_else(|| {
                PageError::new(
                    StatusCode::BAD_REQUEST,
                    format!("limit `{text}` is not a number from 1 to {PEEK_MAX}"),
                )
            })?,
    };
    let done = match fields.one("done")? {
        None => None,
        Some(text) => Some(Done::parse(&text).ok_or_else(|| {
            PageError::new(StatusCode::BAD_REQUEST, format!("unknown `done={text}`"))
        })?),
    };
    // The peek first: it says "queue … not found" (404) for a name that is no queue.
    let peeked = peek::peek(&console.session, &queue, limit, false).await?;
    let queues = queues::list(&console.session).await?;
    let info = queues
        .into_iter()
        .find(|q| q.name.eq_ignore_ascii_case(&queue))
        .ok_or_else(|| PageError::new(StatusCode::NOT_FOUND, format!("queue {queue} not found")))?;
    // A database without the worker's tables has no dead letters: say so on the page.
    let letters = dead_letters::list(&console.session, Some(&queue), DEAD_LETTERS_SHOWN)
        .await
        .map_err(|e| e.message);
    let history = console.history();
    Ok(pages::queue(
        &view(&console),
        &pages::QueuePage {
            info: &info,
            peeked: &peeked,
            limit,
            letters: letters.as_deref().map_err(String::as_str),
            history: &history,
            done,
        },
    ))
}

async fn show_dead_letter(
    State(console): State<Arc<Console>>,
    QueuePath(queue): QueuePath,
    RawQuery(raw): RawQuery,
) -> Page {
    let fields = query(raw);
    fields.only(&["key"])?;
    let keys = fields.keys()?;
    let letter = dead_letters::show(&console.session, &queue, &keys).await?;
    Ok(pages::dead_letter(&view(&console), &letter))
}

async fn pause(
    State(console): State<Arc<Console>>,
    QueuePath(queue): QueuePath,
    WriteForm(fields): WriteForm,
) -> Result<Redirect, PageError> {
    fields.only(&[])?;
    pause::set_paused(&console.session, &queue, true).await?;
    Ok(back_to(&queue, Done::Paused))
}

async fn resume(
    State(console): State<Arc<Console>>,
    QueuePath(queue): QueuePath,
    WriteForm(fields): WriteForm,
) -> Result<Redirect, PageError> {
    fields.only(&[])?;
    pause::set_paused(&console.session, &queue, false).await?;
    Ok(back_to(&queue, Done::Resumed))
}

async fn replay(
    State(console): State<Arc<Console>>,
    QueuePath(queue): QueuePath,
    WriteForm(fields): WriteForm,
) -> Result<Redirect, PageError> {
    fields.only(&["key"])?;
    let keys = fields.keys()?;
    dead_letters::replay(&console.session, &queue, &keys).await?;
    Ok(back_to(&queue, Done::Replayed))
}

async fn purge(
    State(console): State<Arc<Console>>,
    QueuePath(queue): QueuePath,
    WriteForm(fields): WriteForm,
) -> Result<Redirect, PageError> {
    fields.only(&["key", "all"])?;
    let all = match fields.one("all")?.as_deref() {
        None => false,
        Some("true") => true,
        Some(other) => {
            return Err(PageError::new(
                StatusCode::BAD_REQUEST,
                format!("`all={other}`: use all=true to purge every dead letter of {queue}"),
            ));
        }
    };
    let keys = fields.all("key");
    if all != keys.is_empty() {
        return Err(PageError::new(
            StatusCode::BAD_REQUEST,
            "give either the dead letter's `key` values or all=true; nothing was purged",
        ));
    }
    if all {
        // Purging every dead letter of a name that is no queue would quietly do nothing:
        // say it is not found, as the queue page does.
        catalog::queue(&console.session, &queue).await?;
    }
    dead_letters::purge(&console.session, &queue, (!all).then_some(&keys[..])).await?;
    Ok(back_to(&queue, Done::Purged))
}

/// The body of a response, for tests.
#[cfg(test)]
pub(crate) async fn body_text(response: Response) -> String {
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("read the body");
    String::from_utf8_lossy(&bytes).into_owned()
}
