//! Handler-level tests of the console: every route and every error path, against a database of
//! the test harness (the emulator, or the backend it is pointed at).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use spanner_queues::{Database, HandlerError, QueueMessage, SendOptions, Worker};
use spanner_queues_testing::TestDatabase;
use tower::ServiceExt as _;

use super::request::loopback_host;
use super::{Console, body_text, check_listen, router};
use crate::session::Session;

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "Tickets")]
struct Ticket {
    #[queue(key)]
    id: i64,
    title: String,
}

fn ticket(id: i64, title: &str) -> Ticket {
    Ticket {
        id,
        title: title.to_owned(),
    }
}

const HOST: &str = "127.0.0.1:8800";

/// A database with the dead letters `poison` (keys), then `due` messages due now and one
/// scheduled an hour ahead (key 100).
async fn database(poison: &[i64], due: &[i64]) -> Option<TestDatabase> {
    let db = spanner_queues_testing::setup()
        .with_queue::<Ticket>()
        .create()
        .await?;
    for &id in poison {
        db.send(&ticket(id, &format!("poison {id}")))
            .await
            .expect("send");
    }
    if !poison.is_empty() {
        let worker = Worker::<Ticket>::builder(&db)
            .with_max_attempts(1)
            .external(|t, _ctx| async move {
                Err::<(), _>(HandlerError::msg(format!("cannot file {}", t.id)))
            })
            .build()
            .expect("worker");
        let stats = db.drain(&worker).await.expect("drain");
        assert_eq!(stats.dead_lettered, poison.len() as u64, "{stats:?}");
    }
    for &id in due {
        db.send(&ticket(id, &format!("ticket {id}")))
            .await
            .expect("send");
    }
    db.send_with(
        &ticket(100, "later"),
        SendOptions::new().deliver_after(Duration::from_secs(3600)),
    )
    .await
    .expect("schedule");
    Some(db)
}

async fn console(db: &TestDatabase, allow_writes: bool) -> Arc<Console> {
    let builder = Database::builder(db.path()).with_spanner(db.spanner().clone());
    let session = Session::open(db.path(), builder)
        .await
        .expect("open the database");
    Arc::new(Console::new(
        session,
        allow_writes,
        true,
        Duration::from_secs(5),
    ))
}

fn get(path: &str) -> Request<Body> {
    Request::get(path)
        .header(header::HOST, HOST)
        .body(Body::empty())
        .expect("request")
}

/// A form POST as the console's own page sends it.
fn post(path: &str, form: &str) -> Request<Body> {
    Request::post(path)
        .header(header::HOST, HOST)
        .header(header::ORIGIN, format!("http://{HOST}"))
        .header("sec-fetch-site", "same-origin")
        .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
        .body(Body::from(form.to_owned()))
        .expect("request")
}

/// The answer: status, `Location`, body.
async fn call(console: &Arc<Console>, request: Request<Body>) -> (StatusCode, String, String) {
    let response = router(Arc::clone(console))
        .oneshot(request)
        .await
        .expect("infallible");
    let status = response.status();
    let location = response
        .headers()
        .get(header::LOCATION)
        .and_then(|l| l.to_str().ok())
        .unwrap_or("")
        .to_owned();
    (status, location, body_text(response).await)
}

/// Requires `status` and an HTML error page whose message contains `says`.
#[track_caller]
fn error_page(answer: &(StatusCode, String, String), status: StatusCode, says: &str) {
    let (got, _, body) = answer;
    assert_eq!(*got, status, "{body}");
    assert!(
        body.starts_with("<!DOCTYPE html>") && body.contains("class=\"error\""),
        "{body}"
    );
    assert!(body.contains(says), "expected `{says}` in {body}");
}

/// The state that no refused request may change: depth, dead letters and the pause state.
async fn state(db: &TestDatabase) -> (usize, u64, bool) {
    let depth = db.queue_len::<Ticket>().await.expect("depth");
    let dead = db
        .dead_letters()
        .count(&Ticket::QUEUE)
        .await
        .expect("dead letters");
    let paused = db
        .ddl()
        .await
        .expect("ddl")
        .join("\n")
        .contains("disable_delivery = true");
    (depth, dead, paused)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_show_counts_history_peek_and_dead_letters() {
    let Some(db) = database(&[1], &[2, 3]).await else {
        return;
    };
    let console = console(&db, false).await;
    console.sample().await;
    console.sample().await;

    let (status, _, body) = call(&console, get("/")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("data-queue=\"Tickets\""), "{body}");
    assert!(body.contains("<td class=\"n depth\">3</td>"), "{body}");
    assert!(body.contains("<td class=\"n due\">2</td>"), "{body}");
    assert!(body.contains(">1</a></td>"), "one dead letter: {body}");
    assert!(
        body.contains("<span class=\"samples\">2</span> samples kept"),
        "{body}"
    );
    assert!(body.contains("<svg"), "{body}");
    assert!(body.contains("read-only"), "{body}");

    let (status, _, body) = call(&console, get("/queues/Tickets")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    for shown in [
        "(2)",
        "(3)",
        "(100)",
        "scheduled",
        "ticket 2",
        "cannot file 1",
    ] {
        assert!(body.contains(shown), "`{shown}` missing: {body}");
    }
    assert!(
        !body.contains("<form"),
        "a read-only console offers no action: {body}"
    );
    let (status, _, body) = call(&console, get("/queues/Tickets?limit=1")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("(2)") && !body.contains("ticket 3"), "{body}");

    let (status, _, body) = call(&console, get("/dead-letters")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("cannot file 1"), "{body}");
    let (status, _, body) = call(&console, get("/dead-letters?queue=Tickets")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("cannot file 1"), "{body}");
    let (status, _, body) = call(&console, get("/dead-letters?queue=Other")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("No dead letters."), "{body}");

    let (status, _, body) = call(&console, get("/queues/Tickets/dead-letter?key=1")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body.contains("poison 1") && body.contains("cannot file 1"),
        "{body}"
    );
    assert!(body.contains("Read-only console"), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_reads_get_error_pages() {
    let Some(db) = database(&[1], &[2]).await else {
        return;
    };
    let console = console(&db, false).await;
    let cases: [(&str, StatusCode, &str); 15] = [
        ("/nope", StatusCode::NOT_FOUND, "no such page"),
        (
            "/queues/Nope",
            StatusCode::NOT_FOUND,
            "queue Nope not found",
        ),
        (
            "/queues/bad-name",
            StatusCode::BAD_REQUEST,
            "not a queue name",
        ),
        (
            "/queues/Tickets?limit=0",
            StatusCode::BAD_REQUEST,
            "from 1 to 1000",
        ),
        (
            "/queues/Tickets?limit=many",
            StatusCode::BAD_REQUEST,
            "from 1 to 1000",
        ),
        (
            "/queues/Tickets?limit=1&limit=2",
            StatusCode::BAD_REQUEST,
            "more than once",
        ),
        (
            "/queues/Tickets?done=hacked",
            StatusCode::BAD_REQUEST,
            "unknown `done=hacked`",
        ),
        (
            "/queues/Tickets?bogus=1",
            StatusCode::BAD_REQUEST,
            "unknown field(s): bogus",
        ),
        ("/?x=1", StatusCode::BAD_REQUEST, "unknown field(s): x"),
        (
            "/dead-letters?queue=bad-name",
            StatusCode::BAD_REQUEST,
            "not a queue name",
        ),
        (
            "/dead-letters?limit=5",
            StatusCode::BAD_REQUEST,
            "unknown field(s): limit",
        ),
        (
            "/queues/Tickets/dead-letter",
            StatusCode::BAD_REQUEST,
            "no `key`",
        ),
        (
            "/queues/Tickets/dead-letter?key=99",
            StatusCode::NOT_FOUND,
            "no dead letter of Tickets with key (99)",
        ),
        (
            "/queues/Tickets/dead-letter?key=1&key=2",
            StatusCode::NOT_FOUND,
            "with key (1, 2)",
        ),
        (
            "/queues/Tickets/pause",
            StatusCode::METHOD_NOT_ALLOWED,
            "does not take that method",
        ),
    ];
    for (path, status, says) in cases {
        let answer = call(&console, get(path)).await;
        error_page(&answer, status, says);
    }
    let answer = call(&console, post("/", "")).await;
    error_page(
        &answer,
        StatusCode::METHOD_NOT_ALLOWED,
        "does not take that method",
    );
    // Another site's name for 127.0.0.1 (DNS rebinding) and a request without a Host.
    let rebound = Request::get("/")
        .header(header::HOST, "evil.example:8800")
        .body(Body::empty())
        .expect("request");
    let answer = call(&console, rebound).await;
    error_page(
        &answer,
        StatusCode::MISDIRECTED_REQUEST,
        "loopback host name",
    );
    let hostless = Request::get("/").body(Body::empty()).expect("request");
    let answer = call(&console, hostless).await;
    error_page(
        &answer,
        StatusCode::MISDIRECTED_REQUEST,
        "loopback host name",
    );
    for host in ["localhost:8800", "[::1]:8800", "127.0.0.2"] {
        let request = Request::get("/")
            .header(header::HOST, host)
            .body(Body::empty())
            .expect("request");
        assert_eq!(call(&console, request).await.0, StatusCode::OK, "{host}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_write_without_allow_writes() {
    let Some(db) = database(&[1], &[2]).await else {
        return;
    };
    let before = state(&db).await;
    assert_eq!(before, (2, 1, false));
    let console = console(&db, false).await;
    let token = console.token.clone();
    for (path, form) in [
        ("/queues/Tickets/pause", format!("token={token}")),
        ("/queues/Tickets/resume", format!("token={token}")),
        (
            "/queues/Tickets/dead-letters/replay",
            format!("token={token}&key=1"),
        ),
        (
            "/queues/Tickets/dead-letters/purge",
            format!("token={token}&key=1"),
        ),
        (
            "/queues/Tickets/dead-letters/purge",
            format!("token={token}&all=true"),
        ),
        // Even a form without a token hears why first: the console is read-only.
        ("/queues/Tickets/dead-letters/purge", "all=true".to_owned()),
    ] {
        let answer = call(&console, post(path, &form)).await;
        error_page(
            &answer,
            StatusCode::FORBIDDEN,
            "read-only: nothing was changed",
        );
    }
    assert_eq!(state(&db).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_writes_change_nothing() {
    let Some(db) = database(&[1], &[2]).await else {
        return;
    };
    let before = state(&db).await;
    let console = console(&db, true).await;
    let token = console.token.clone();
    let replay = "/queues/Tickets/dead-letters/replay";
    let purge = "/queues/Tickets/dead-letters/purge";
    let cases: Vec<(Request<Body>, StatusCode, &str)> = vec![
        (
            post(replay, "key=1"),
            StatusCode::FORBIDDEN,
            "token is missing",
        ),
        (
            post(replay, "token=guess&key=1"),
            StatusCode::FORBIDDEN,
            "token is missing",
        ),
        (
            post(replay, &format!("token={token}&token={token}&key=1")),
            StatusCode::FORBIDDEN,
            "token is missing",
        ),
        (
            post(replay, &format!("token={token}")),
            StatusCode::BAD_REQUEST,
            "no `key`",
        ),
        (
            post(replay, &format!("token={token}&key=99")),
            StatusCode::NOT_FOUND,
            "no dead letter of Tickets with key (99)",
        ),
        (
            post(replay, &format!("token={token}&key=1&force=yes")),
            StatusCode::BAD_REQUEST,
            "unknown field(s): force",
        ),
        (
            post(
                "/queues/Nope/dead-letters/replay",
                &format!("token={token}&key=1"),
            ),
            StatusCode::NOT_FOUND,
            "no dead letter of Nope",
        ),
        (
            post(
                "/queues/bad-name/dead-letters/replay",
                &format!("token={token}&key=1"),
            ),
            StatusCode::BAD_REQUEST,
            "not a queue name",
        ),
        (
            post(purge, &format!("token={token}")),
            StatusCode::BAD_REQUEST,
            "either",
        ),
        (
            post(purge, &format!("token={token}&key=1&all=true")),
            StatusCode::BAD_REQUEST,
            "either",
        ),
        (
            post(purge, &format!("token={token}&all=yes")),
            StatusCode::BAD_REQUEST,
            "all=yes",
        ),
        (
            post(
                "/queues/Nope/dead-letters/purge",
                &format!("token={token}&all=true"),
            ),
            StatusCode::NOT_FOUND,
            "queue Nope not found",
        ),
        (
            post("/queues/Nope/pause", &format!("token={token}")),
            StatusCode::NOT_FOUND,
            "queue Nope not found",
        ),
        (
            post("/queues/Tickets/pause", &format!("token={token}&now=1")),
            StatusCode::BAD_REQUEST,
            "unknown field(s): now",
        ),
    ];
    for (request, status, says) in cases {
        let answer = call(&console, request).await;
        error_page(&answer, status, says);
    }

    // From another site: its Origin, or the browser's own Sec-Fetch-Site verdict.
    let form = format!("token={token}&key=1");
    let mut foreign = post(replay, &form);
    foreign.headers_mut().insert(
        header::ORIGIN,
        "http://evil.example".parse().expect("header"),
    );
    foreign.headers_mut().remove("sec-fetch-site");
    error_page(
        &call(&console, foreign).await,
        StatusCode::FORBIDDEN,
        "another site",
    );
    let mut cross = post(replay, &form);
    cross.headers_mut().remove(header::ORIGIN);
    cross
        .headers_mut()
        .insert("sec-fetch-site", "cross-site".parse().expect("header"));
    error_page(
        &call(&console, cross).await,
        StatusCode::FORBIDDEN,
        "another site",
    );
    // Not a form, too large, not UTF-8.
    let mut json = post(replay, &form);
    json.headers_mut().insert(
        header::CONTENT_TYPE,
        "application/json".parse().expect("header"),
    );
    error_page(
        &call(&console, json).await,
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "HTML form",
    );
    let huge = format!("{form}&key={}", "9".repeat(super::MAX_FORM_BYTES));
    error_page(
        &call(&console, post(replay, &huge)).await,
        StatusCode::PAYLOAD_TOO_LARGE,
        "too large",
    );
    let mut binary = post(replay, "");
    *binary.body_mut() = Body::from(vec![b't', 0xff, 0xfe]);
    error_page(
        &call(&console, binary).await,
        StatusCode::BAD_REQUEST,
        "not UTF-8",
    );

    assert_eq!(state(&db).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_onto_a_queued_key_is_a_conflict() {
    let Some(db) = database(&[1], &[]).await else {
        return;
    };
    // The same key is queued again: a replay cannot send it, and the dead letter stays.
    db.send(&ticket(1, "sent again")).await.expect("send");
    let before = state(&db).await;
    assert_eq!(before, (2, 1, false));
    let console = console(&db, true).await;
    let token = console.token.clone();
    let answer = call(
        &console,
        post(
            "/queues/Tickets/dead-letters/replay",
            &format!("token={token}&key=1"),
        ),
    )
    .await;
    error_page(
        &answer,
        StatusCode::CONFLICT,
        "already in Tickets; the dead letter stays",
    );
    assert_eq!(state(&db).await, before);
}

/// On a PostgreSQL-dialect database the pages work, replay works, and pause is refused with
/// the reason (Spanner documents no PostgreSQL syntax for queue options).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_pages_replay_and_pause_refused() {
    let Some(db) = spanner_queues_testing::setup()
        .with_dialect(spanner_queues::Dialect::PostgreSql)
        .with_queue::<Ticket>()
        .create()
        .await
    else {
        return;
    };
    db.send(&ticket(1, "poison 1")).await.expect("send");
    let worker = Worker::<Ticket>::builder(&db)
        .with_max_attempts(1)
        .external(|t, _ctx| async move {
            Err::<(), _>(HandlerError::msg(format!("cannot file {}", t.id)))
        })
        .build()
        .expect("worker");
    assert_eq!(db.drain(&worker).await.expect("drain").dead_lettered, 1);
    db.send(&ticket(2, "ticket 2")).await.expect("send");
    let console = console(&db, true).await;
    console.sample().await;
    let token = console.token.clone();

    let (status, _, body) = call(&console, get("/")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(body.contains("data-queue=\"tickets\""), "{body}");
    let (status, _, body) = call(&console, get("/queues/Tickets")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body.contains("ticket 2") && body.contains("cannot file 1"),
        "{body}"
    );

    let answer = call(
        &console,
        post("/queues/Tickets/pause", &format!("token={token}")),
    )
    .await;
    error_page(&answer, StatusCode::BAD_REQUEST, "PostgreSQL");
    let (status, location, body) = call(
        &console,
        post(
            "/queues/Tickets/dead-letters/replay",
            &format!("token={token}&key=1"),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    assert_eq!(location, "/queues/Tickets?done=replayed");
    assert_eq!(db.queue_len::<Ticket>().await.expect("depth"), 2);
    assert_eq!(
        db.dead_letters()
            .count(&Ticket::QUEUE)
            .await
            .expect("dead letters"),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_replay_purge_pause_and_resume() {
    let Some(db) = database(&[1, 4, 5], &[2]).await else {
        return;
    };
    assert_eq!(state(&db).await, (2, 3, false));
    let console = console(&db, true).await;
    let token = console.token.clone();

    let (status, _, body) = call(&console, get("/queues/Tickets")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body.contains(&format!("name=\"token\" value=\"{token}\"")),
        "{body}"
    );
    assert!(
        body.contains("Pause delivery") && body.contains("Replay"),
        "{body}"
    );

    let (status, location, body) = call(
        &console,
        post("/queues/Tickets/pause", &format!("token={token}")),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    assert_eq!(location, "/queues/Tickets?done=paused");
    assert_eq!(state(&db).await, (2, 3, true));
    let (status, _, body) = call(&console, get(&location)).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert!(
        body.contains("Paused: delivery stopped") && body.contains("Resume delivery"),
        "{body}"
    );
    let (status, location, _) = call(
        &console,
        post("/queues/Tickets/resume", &format!("token={token}")),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(location, "/queues/Tickets?done=resumed");
    assert_eq!(state(&db).await, (2, 3, false));

    let (status, location, body) = call(
        &console,
        post(
            "/queues/Tickets/dead-letters/replay",
            &format!("token={token}&key=1"),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{body}");
    assert_eq!(location, "/queues/Tickets?done=replayed");
    assert_eq!(state(&db).await, (3, 2, false));
    let queued = db.queued::<Ticket>().await.expect("queued");
    assert!(
        queued
            .iter()
            .any(|m| m.message.as_ref().ok() == Some(&ticket(1, "poison 1"))),
        "{queued:?}"
    );
    // Replayed once: a second replay finds nothing and sends nothing.
    let answer = call(
        &console,
        post(
            "/queues/Tickets/dead-letters/replay",
            &format!("token={token}&key=1"),
        ),
    )
    .await;
    error_page(
        &answer,
        StatusCode::NOT_FOUND,
        "no dead letter of Tickets with key (1)",
    );
    assert_eq!(state(&db).await, (3, 2, false));

    let (status, location, _) = call(
        &console,
        post(
            "/queues/Tickets/dead-letters/purge",
            &format!("token={token}&key=4"),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(location, "/queues/Tickets?done=purged");
    assert_eq!(state(&db).await, (3, 1, false));
    let (status, _, _) = call(
        &console,
        post(
            "/queues/Tickets/dead-letters/purge",
            &format!("token={token}&all=true"),
        ),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(state(&db).await, (3, 0, false));
}

#[test]
fn only_loopback_unless_allowed() {
    let public = "0.0.0.0:8800".parse().expect("address");
    let error = check_listen(public, false).expect_err("refused");
    assert_eq!(error.code, crate::error::EXIT_USAGE);
    assert!(
        error.message.contains("--allow-remote"),
        "{}",
        error.message
    );
    assert!(check_listen(public, true).is_ok());
    assert!(check_listen("127.0.0.1:0".parse().expect("address"), false).is_ok());
    assert!(check_listen("[::1]:0".parse().expect("address"), false).is_ok());

    for host in [
        "localhost",
        "LOCALHOST:80",
        "127.0.0.1:8800",
        "127.9.9.9",
        "[::1]:8800",
        "[::1]",
    ] {
        assert!(loopback_host(host), "{host}");
    }
    for host in [
        "evil.example",
        "evil.example:8800",
        "10.0.0.1:80",
        "localhost.evil.example",
        "[::2]:80",
        "",
    ] {
        assert!(!loopback_host(host), "{host}");
    }
}
