//! The `spanner-queues` binary end to end against the emulator (or the harness's backend).

use std::process::{Command, Output};
use std::time::Duration;

use serde_json::Value;
use spanner_queues::{Dialect, HandlerError, QueueMessage, SchemaSetup, SendOptions, Worker};
use spanner_queues_testing::TestDatabase;

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

async fn database() -> Option<TestDatabase> {
    spanner_queues_testing::setup()
        .with_queue::<Ticket>()
        .create()
        .await
}

/// Runs the binary against `db` (or, with `db = None`, against nothing).
fn cli(db: Option<&TestDatabase>, args: &[&str]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_spanner-queues"));
    command.args(args).env_remove("SPANNER_QUEUES_DATABASE");
    if let Some(db) = db {
        command.env("SPANNER_QUEUES_DATABASE", db.path());
        match db.emulator_host() {
            Some(host) => command.env("SPANNER_EMULATOR_HOST", host),
            None => command.env_remove("SPANNER_EMULATOR_HOST"),
        };
    }
    command.output().expect("run spanner-queues")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// Runs the command, requires exit status `code`, and returns its output.
#[track_caller]
fn expect(db: Option<&TestDatabase>, args: &[&str], code: i32) -> Output {
    let output = cli(db, args);
    assert_eq!(
        output.status.code(),
        Some(code),
        "spanner-queues {args:?}\nstdout: {}\nstderr: {}",
        stdout(&output),
        stderr(&output)
    );
    output
}

#[track_caller]
fn json(db: Option<&TestDatabase>, args: &[&str]) -> Value {
    let output = expect(db, args, 0);
    serde_json::from_str(&stdout(&output))
        .unwrap_or_else(|e| panic!("{args:?} printed no JSON ({e}): {}", stdout(&output)))
}

fn queue<'a>(listing: &'a Value, name: &str) -> &'a Value {
    listing["queues"]
        .as_array()
        .expect("a queues array")
        .iter()
        .find(|q| q["queue"] == name)
        .unwrap_or_else(|| panic!("{name} missing from {listing}"))
}

/// The statements of the SDK's worker tables and commit markers, as `schema` prints them.
fn sdk_statements(dialect: Dialect) -> Vec<String> {
    SchemaSetup::new()
        .with_worker_tables()
        .with_commit_markers()
        .statements(dialect)
        .expect("statements")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_peek_send_pause_and_resume() {
    let Some(db) = database().await else { return };
    let long = "x".repeat(200);
    db.send(&ticket(1, &long)).await.expect("send");
    db.send_with(
        &ticket(2, "later"),
        SendOptions::new().deliver_after(Duration::from_secs(3600)),
    )
    .await
    .expect("schedule");

    let listing = json(Some(&db), &["queues", "--json"]);
    let tickets = queue(&listing, "Tickets");
    assert_eq!(tickets["depth"], 2, "{listing}");
    assert_eq!(tickets["due"], 1, "{listing}");
    assert_eq!(tickets["scheduled"], 1, "{listing}");
    assert_eq!(tickets["paused"], false, "{listing}");
    assert_eq!(tickets["dead_letters"], 0, "{listing}");
    assert!(
        tickets["oldest_due_age_ms"]
            .as_i64()
            .is_some_and(|ms| ms >= 0),
        "{listing}"
    );
    // The top-level flag works as well as the command's.
    let mut again = json(Some(&db), &["--json", "queues"]);
    again["queues"][0]["oldest_due_age_ms"] = tickets["oldest_due_age_ms"].clone();
    assert_eq!(again, listing);
    let table = stdout(&expect(Some(&db), &["queues"], 0));
    assert!(table.starts_with("QUEUE"), "{table}");
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("Tickets ") && l.contains("delivering")),
        "{table}"
    );

    let peeked = json(Some(&db), &["peek", "Tickets", "--limit", "1", "--json"]);
    let messages = peeked["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 1, "{peeked}");
    assert_eq!(messages[0]["key"], serde_json::json!(["1"]));
    assert_eq!(messages[0]["due"], true);
    assert_eq!(messages[0]["truncated"], true);
    let preview = messages[0]["payload"].as_str().expect("payload");
    assert!(
        preview.ends_with('…') && preview.chars().count() == 81,
        "{preview}"
    );
    let full = json(Some(&db), &["peek", "Tickets", "--full", "--json"]);
    assert_eq!(full["messages"].as_array().map(Vec::len), Some(2), "{full}");
    assert!(
        full["messages"][0]["payload"]
            .as_str()
            .is_some_and(|p| p.contains(&long)),
        "{full}"
    );
    assert_eq!(full["messages"][1]["due"], false, "{full}");

    expect(
        Some(&db),
        &[
            "send",
            "Tickets",
            "--key",
            "3",
            "--json",
            r#"{"title":"from the shell"}"#,
        ],
        0,
    );
    let queued = db.queued::<Ticket>().await.expect("queued");
    let sent = queued
        .iter()
        .find(|m| m.key.to_string() == "(3)")
        .expect("ticket 3 queued");
    assert_eq!(
        sent.message.as_ref().expect("decodes"),
        &ticket(3, "from the shell")
    );
    let again = expect(
        Some(&db),
        &["send", "Tickets", "--key", "3", "--json", "{}"],
        4,
    );
    assert!(
        stderr(&again).contains("already in Tickets"),
        "{}",
        stderr(&again)
    );
    let bad = expect(
        Some(&db),
        &["send", "Tickets", "--key", "three", "--json", "{}"],
        2,
    );
    assert!(stderr(&bad).contains("Id is INT64"), "{}", stderr(&bad));
    let bad = expect(
        Some(&db),
        &["send", "Tickets", "--key", "4", "--json", "{not json"],
        2,
    );
    assert!(stderr(&bad).contains("not valid JSON"), "{}", stderr(&bad));
    let bad = expect(
        Some(&db),
        &[
            "send", "Tickets", "--key", "4", "--key", "5", "--json", "{}",
        ],
        2,
    );
    assert!(
        stderr(&bad).contains("1 key column(s) (Id INT64): pass --key once for each"),
        "{}",
        stderr(&bad)
    );
    let missing = expect(
        Some(&db),
        &["send", "Nope", "--key", "4", "--json", "{}"],
        3,
    );
    assert!(
        stderr(&missing).contains("queue Nope not found"),
        "{}",
        stderr(&missing)
    );
    assert_eq!(db.queue_len::<Ticket>().await.expect("depth"), 3);

    expect(Some(&db), &["pause", "Tickets"], 0);
    assert_eq!(
        queue(&json(Some(&db), &["queues", "--json"]), "Tickets")["paused"],
        true
    );
    let ddl = db.ddl().await.expect("ddl").join("\n");
    assert!(ddl.contains("disable_delivery = true"), "{ddl}");
    let resumed = json(Some(&db), &["resume", "Tickets", "--json"]);
    assert_eq!(resumed["paused"], false);
    assert_eq!(
        queue(&json(Some(&db), &["queues", "--json"]), "Tickets")["paused"],
        false
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dead_letters_list_show_replay_and_purge() {
    let Some(db) = database().await else { return };
    db.send(&ticket(1, "poison one")).await.expect("send");
    db.send(&ticket(2, "poison two")).await.expect("send");
    let worker = Worker::<Ticket>::builder(&db)
        .with_max_attempts(1)
        .external(|t, _ctx| async move {
            Err::<(), _>(HandlerError::msg(format!("cannot file {}", t.id)))
        })
        .build()
        .expect("worker");
    let stats = db.drain(&worker).await.expect("drain");
    assert_eq!(stats.dead_lettered, 2, "{stats:?}");

    let listing = json(Some(&db), &["dead-letters", "list", "--json"]);
    let letters = listing["dead_letters"].as_array().expect("dead letters");
    assert_eq!(letters.len(), 2, "{listing}");
    assert!(
        letters
            .iter()
            .all(|l| l["queue"] == "Tickets" && l["attempts"] == 1),
        "{listing}"
    );
    let table = stdout(&expect(
        Some(&db),
        &["dead-letters", "list", "--queue", "Tickets"],
        0,
    ));
    assert!(
        table.contains("cannot file 1") && table.contains("cannot file 2"),
        "{table}"
    );

    let shown = json(
        Some(&db),
        &["dead-letters", "show", "Tickets", "--key", "1", "--json"],
    );
    assert_eq!(shown["key"], serde_json::json!(["1"]));
    assert!(
        shown["payload"]
            .as_str()
            .is_some_and(|p| p.contains("poison one")),
        "{shown}"
    );
    assert_eq!(shown["error"], "cannot file 1");

    expect(
        Some(&db),
        &["dead-letters", "replay", "Tickets", "--key", "1"],
        0,
    );
    db.assert_queued(&[ticket(1, "poison one")]).await;
    assert_eq!(
        db.dead_letters()
            .count(&Ticket::QUEUE)
            .await
            .expect("letters"),
        1
    );
    let gone = expect(
        Some(&db),
        &["dead-letters", "replay", "Tickets", "--key", "1"],
        3,
    );
    assert!(
        stderr(&gone).contains("no dead letter of Tickets with key (1)"),
        "{}",
        stderr(&gone)
    );

    let purged = json(
        Some(&db),
        &["dead-letters", "purge", "Tickets", "--all", "--json"],
    );
    assert_eq!(purged["purged"], 1, "{purged}");
    db.assert_no_dead_letters::<Ticket>().await;
    let empty = json(Some(&db), &["dead-letters", "list", "--json"]);
    assert_eq!(empty["dead_letters"], serde_json::json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_database_queue_and_table_are_clear_errors() {
    let Some(db) = database().await else { return };
    let no_db = expect(None, &["queues"], 2);
    assert!(
        stderr(&no_db).contains("SPANNER_QUEUES_DATABASE"),
        "{}",
        stderr(&no_db)
    );
    let malformed = expect(None, &["--database", "mydb", "queues"], 2);
    assert!(
        stderr(&malformed).contains("projects/P/instances/I/databases/D"),
        "{}",
        stderr(&malformed)
    );

    let instance = db
        .path()
        .rsplit_once("/databases/")
        .expect("a database path")
        .0;
    let missing = format!("{instance}/databases/nosuchdb");
    let output = expect(Some(&db), &["--database", &missing, "queues"], 3);
    assert!(
        stderr(&output).contains("database") && stderr(&output).contains("not found"),
        "{}",
        stderr(&output)
    );

    let output = expect(Some(&db), &["peek", "Nope"], 3);
    assert!(
        stderr(&output).contains("queue Nope not found") && stderr(&output).contains("Tickets"),
        "{}",
        stderr(&output)
    );

    let output = expect(Some(&db), &["pause", "SpannerQueuesAttempts"], 3);
    assert!(
        stderr(&output).contains("is a table, not a queue"),
        "{}",
        stderr(&output)
    );

    // A database without the worker's tables has no dead letters to list.
    let Some(bare) = spanner_queues_testing::setup()
        .without_sdk_tables()
        .with_queue::<Ticket>()
        .create()
        .await
    else {
        return;
    };
    let output = expect(Some(&bare), &["dead-letters", "list"], 3);
    assert!(
        stderr(&output).contains("no dead-letter table"),
        "{}",
        stderr(&output)
    );
    let listing = json(Some(&bare), &["queues", "--json"]);
    assert_eq!(
        queue(&listing, "Tickets")["dead_letters"],
        Value::Null,
        "{listing}"
    );
}

#[test]
fn schema_prints_the_ddl_without_a_database() {
    let output = expect(
        None,
        &["schema", "--queue", "Tickets", "--key", "Id:INT64"],
        0,
    );
    let text = stdout(&output);
    assert!(
        text.contains("CREATE QUEUE IF NOT EXISTS Tickets (Id INT64 NOT NULL, Payload JSON NOT NULL) PRIMARY KEY (Id)"),
        "{text}"
    );
    assert!(
        text.contains("CREATE TABLE IF NOT EXISTS SpannerQueuesDeadLetters"),
        "{text}"
    );
    let document: Value =
        serde_json::from_str(&stdout(&expect(None, &["schema", "--json"], 0))).expect("json");
    let statements: Vec<&str> = document["statements"]
        .as_array()
        .expect("statements")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(statements, sdk_statements(Dialect::GoogleSql));
    let sized = expect(
        None,
        &[
            "schema",
            "--queue",
            "Skus",
            "--key",
            "Sku:STRING(64)",
            "--key",
            "Tag:BYTES(16)",
        ],
        0,
    );
    assert!(
        stdout(&sized).contains("(Sku STRING(64) NOT NULL, Tag BYTES(16) NOT NULL,"),
        "{}",
        stdout(&sized)
    );
    let bad = expect(None, &["schema", "--queue", "Tickets", "--key", "Id"], 2);
    assert!(stderr(&bad).contains("NAME:TYPE"), "{}", stderr(&bad));
    // A key column holds a kind of key the SDK can send: FLOAT64 is none.
    let bad = expect(
        None,
        &["schema", "--queue", "Tickets", "--key", "Id:FLOAT64"],
        2,
    );
    assert!(
        stderr(&bad).contains("a key column is one of"),
        "{}",
        stderr(&bad)
    );
}

/// The statements the SDK renders for the roles `schema` is given, with the commit markers.
fn expected_grants(
    dialect: spanner_queues::Dialect,
    producer: Option<&str>,
    worker: Option<&str>,
    queues: &[&str],
) -> Vec<String> {
    let mut roles = spanner_queues::grants::Roles::builder().with_commit_markers(true);
    if let Some(role) = producer {
        roles = roles.with_producer_role(role);
    }
    if let Some(role) = worker {
        roles = roles.with_worker_role(role);
    }
    let queues: Vec<spanner_queues::ident::QueueName> = queues
        .iter()
        .map(|q| spanner_queues::ident::QueueName::new(*q).expect("valid"))
        .collect();
    roles
        .build()
        .expect("valid")
        .grant_statements(dialect, &queues)
}

#[test]
fn schema_prints_grants_for_named_roles_and_queues() {
    let text = stdout(&expect(
        None,
        &[
            "schema",
            "--producer-role",
            "app_producer",
            "--worker-role",
            "app_worker",
            "--queue",
            "Tickets",
            "--queue",
            "Skus",
        ],
        0,
    ));
    let expected = expected_grants(
        spanner_queues::Dialect::GoogleSql,
        Some("app_producer"),
        Some("app_worker"),
        &["Tickets", "Skus"],
    );
    let printed: Vec<&str> = text
        .split(";\n")
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .collect();
    assert_eq!(printed, expected, "{text}");
    for statement in [
        "GRANT INSERT ON QUEUE Tickets TO ROLE app_producer",
        "GRANT EXECUTE ON TABLE FUNCTION RECEIVE_Skus TO ROLE app_worker",
        "GRANT EXECUTE ON TABLE FUNCTION RENEWLEASE_Tickets TO ROLE app_worker",
        "GRANT DELETE ON QUEUE Tickets TO ROLE app_worker",
    ] {
        assert!(
            text.contains(&format!("{statement};")),
            "{statement}\n{text}"
        );
    }
    assert!(!text.contains("CREATE"), "{text}");

    let document = json(
        None,
        &[
            "schema",
            "--dialect",
            "postgresql",
            "--worker-role",
            "app_worker",
            "--queue",
            "Tickets",
            "--json",
        ],
    );
    let statements: Vec<&str> = document["statements"]
        .as_array()
        .expect("statements")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(
        statements,
        expected_grants(
            spanner_queues::Dialect::PostgreSql,
            None,
            Some("app_worker"),
            &["Tickets"]
        )
    );
    assert!(
        statements.contains(&"GRANT EXECUTE ON FUNCTION spanner.receive_tickets TO app_worker"),
        "{document}"
    );

    // What cannot be granted is refused before anything is printed.
    let usage = |args: &[&str], says: &str| {
        let output = expect(None, args, 2);
        assert!(stdout(&output).is_empty(), "{}", stdout(&output));
        assert!(
            stderr(&output).contains(says),
            "{args:?}: {}",
            stderr(&output)
        );
    };
    usage(&["schema", "--worker-role", "w"], "--all-queues");
    usage(
        &["schema", "--worker-role", "bad-role", "--queue", "Tickets"],
        "worker_role",
    );
    usage(
        &[
            "schema",
            "--producer-role",
            "spanner_sys_reader",
            "--queue",
            "Tickets",
        ],
        "system role",
    );
    usage(
        &["schema", "--worker-role", "w", "--queue", "bad-queue"],
        "not a queue name",
    );
    usage(
        &[
            "schema",
            "--worker-role",
            "w",
            "--queue",
            "Tickets",
            "--key",
            "Id:INT64",
        ],
        "--key",
    );
    usage(&["schema", "--all-queues"], "--producer-role");
    usage(
        &[
            "schema",
            "--worker-role",
            "w",
            "--all-queues",
            "--queue",
            "Tickets",
        ],
        "--queue",
    );
    usage(
        &["schema", "--worker-role", "w", "--all-queues"],
        "no database",
    );
    // Without a role, one queue to create, with its key.
    usage(&["schema", "--queue", "Tickets"], "--key");
    usage(
        &[
            "schema", "--queue", "A", "--queue", "B", "--key", "Id:INT64",
        ],
        "one --queue at a time",
    );
}

/// `--all-queues` reads the queues and the dialect from the database, and what it prints
/// applies: on Cloud Spanner every statement; on the emulator, which parses `CREATE ROLE` and
/// grants on tables and table functions but applies none of them ("unsupported", `INTERNAL`)
/// and cannot parse `ON QUEUE`, the others at least parse (no `INVALID_ARGUMENT`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn schema_grants_on_every_queue_of_the_database() {
    let Some(db) = database().await else { return };
    let document = json(
        Some(&db),
        &[
            "schema",
            "--producer-role",
            "app_producer",
            "--worker-role",
            "app_worker",
            "--all-queues",
            "--json",
        ],
    );
    let statements: Vec<String> = document["statements"]
        .as_array()
        .expect("statements")
        .iter()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect();
    assert_eq!(
        statements,
        expected_grants(
            spanner_queues::Dialect::GoogleSql,
            Some("app_producer"),
            Some("app_worker"),
            &["Tickets"]
        )
    );
    let mut ddl = vec![
        "CREATE ROLE app_producer".to_owned(),
        "CREATE ROLE app_worker".to_owned(),
    ];
    ddl.extend(statements);
    let emulator = db.emulator_host().is_some();
    for statement in ddl {
        let result = db.apply_ddl([statement.clone()]).await;
        if !emulator {
            result.unwrap_or_else(|e| panic!("{statement}: {e:?}"));
            continue;
        }
        if statement.contains(" ON QUEUE ") {
            eprintln!("not checked on the emulator, whose parser has no queues: {statement}");
            continue;
        }
        let code = match result {
            Ok(()) => None,
            Err(spanner_queues_testing::HarnessError::Spanner { source, .. }) => {
                spanner_queues::Error::from(source).code()
            }
            Err(other) => panic!("{statement}: {other:?}"),
        };
        assert_ne!(
            code,
            Some(spanner_queues::error::Code::InvalidArgument),
            "the emulator cannot parse {statement}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_refreshes_until_interrupted() {
    use std::io::BufRead as _;

    let Some(db) = database().await else { return };
    db.send(&ticket(1, "watched")).await.expect("send");
    let mut command = Command::new(env!("CARGO_BIN_EXE_spanner-queues"));
    command
        .args(["queues", "--watch", "--interval", "0.2", "--json"])
        .env("SPANNER_QUEUES_DATABASE", db.path())
        .stdout(std::process::Stdio::piped());
    match db.emulator_host() {
        Some(host) => command.env("SPANNER_EMULATOR_HOST", host),
        None => command.env_remove("SPANNER_EMULATOR_HOST"),
    };
    let mut child = command.spawn().expect("start --watch");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = std::io::BufReader::new(stdout).lines();
    // Two refreshes, each a whole JSON document on its own line.
    for _ in 0..2 {
        let line = lines.next().expect("a refresh").expect("read");
        let document: Value = serde_json::from_str(&line).expect("one JSON document per line");
        assert_eq!(queue(&document, "Tickets")["depth"], 1, "{document}");
    }
    let interrupted = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("kill -INT");
    assert!(interrupted.success());
    let status = child.wait().expect("wait");
    assert_eq!(
        status.code(),
        Some(0),
        "Ctrl-C ends --watch cleanly: {status}"
    );
}

/// `dead-letters replay` replays through the SDK, which reads the dead letter, sends it and
/// deletes it in one transaction: a dead letter that is gone (replayed or purged since the
/// command found it) sends nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_whose_dead_letter_is_gone_sends_nothing() {
    use spanner_queues::MessageKey;
    use spanner_queues::key::TypedKey;

    let Some(db) = database().await else { return };
    let key: MessageKey = 9_i64.to_message_key();
    let replayed = db
        .dead_letters()
        .replay(&Ticket::QUEUE, &key)
        .await
        .expect("replay");
    assert!(!replayed, "no dead letter with that key");
    db.assert_queue_empty::<Ticket>().await;
}

async fn postgres_database() -> Option<TestDatabase> {
    spanner_queues_testing::setup()
        .with_dialect(Dialect::PostgreSql)
        .with_queue::<Ticket>()
        .create()
        .await
}

/// On a PostgreSQL-dialect database: `queues`, `peek` and `send` with its statements
/// (`information_schema`, `deliver_time`, `$n` parameters); `pause` and `resume` are refused
/// with a reason, since Spanner documents no PostgreSQL syntax for queue options.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_queues_peek_send_and_pause_refused() {
    let Some(db) = postgres_database().await else {
        return;
    };
    let long = "y".repeat(200);
    db.send(&ticket(1, &long)).await.expect("send");
    db.send_with(
        &ticket(2, "later"),
        SendOptions::new().deliver_after(Duration::from_secs(3600)),
    )
    .await
    .expect("schedule");

    let listing = json(Some(&db), &["queues", "--json"]);
    let tickets = queue(&listing, "tickets");
    assert_eq!(tickets["depth"], 2, "{listing}");
    assert_eq!(tickets["due"], 1, "{listing}");
    assert_eq!(tickets["scheduled"], 1, "{listing}");
    assert_eq!(tickets["paused"], false, "{listing}");
    assert_eq!(tickets["dead_letters"], 0, "{listing}");
    assert!(
        tickets["oldest_due_age_ms"]
            .as_i64()
            .is_some_and(|ms| (0..600_000).contains(&ms)),
        "{listing}"
    );

    let peeked = json(Some(&db), &["peek", "Tickets", "--limit", "1", "--json"]);
    let messages = peeked["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 1, "{peeked}");
    assert_eq!(messages[0]["key"], serde_json::json!(["1"]));
    assert_eq!(messages[0]["due"], true);
    assert_eq!(messages[0]["truncated"], true);
    let deliver_time = messages[0]["deliver_time"].as_str().expect("deliver time");
    assert!(
        deliver_time.len() == "2026-12-02T03:04:05.123Z".len() && deliver_time.ends_with('Z'),
        "{deliver_time}"
    );
    let full = json(Some(&db), &["peek", "tickets", "--full", "--json"]);
    assert_eq!(full["messages"].as_array().map(Vec::len), Some(2), "{full}");
    assert!(
        full["messages"][0]["payload"]
            .as_str()
            .is_some_and(|p| p.contains(&long)),
        "{full}"
    );
    assert_eq!(full["messages"][1]["key"], serde_json::json!(["2"]));
    assert_eq!(full["messages"][1]["due"], false, "{full}");

    expect(
        Some(&db),
        &[
            "send",
            "Tickets",
            "--key",
            "3",
            "--json",
            r#"{"title":"from the shell"}"#,
        ],
        0,
    );
    let queued = db.queued::<Ticket>().await.expect("queued");
    let sent = queued
        .iter()
        .find(|m| m.key.to_string() == "(3)")
        .expect("ticket 3 queued");
    assert_eq!(
        sent.message.as_ref().expect("decodes"),
        &ticket(3, "from the shell")
    );
    let again = expect(
        Some(&db),
        &["send", "Tickets", "--key", "3", "--json", "{}"],
        4,
    );
    assert!(
        stderr(&again).contains("already in Tickets"),
        "{}",
        stderr(&again)
    );
    let bad = expect(
        Some(&db),
        &["send", "Tickets", "--key", "three", "--json", "{}"],
        2,
    );
    assert!(stderr(&bad).contains("is INT64"), "{}", stderr(&bad));
    let missing = expect(Some(&db), &["peek", "Nope"], 3);
    assert!(
        stderr(&missing).contains("queue Nope not found") && stderr(&missing).contains("tickets"),
        "{}",
        stderr(&missing)
    );

    for command in ["pause", "resume"] {
        let refused = expect(Some(&db), &[command, "Tickets"], 2);
        assert!(
            stderr(&refused).contains("PostgreSQL")
                && stderr(&refused).contains("disable_delivery"),
            "{}",
            stderr(&refused)
        );
    }
    let ddl = db.ddl().await.expect("ddl").join("\n");
    assert!(!ddl.contains("disable_delivery"), "{ddl}");
}

/// Dead letters on a PostgreSQL-dialect database: the worker's snake_case table, through the
/// SDK's `DeadLetters` in the database's dialect.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_dead_letters_list_show_replay_and_purge() {
    let Some(db) = postgres_database().await else {
        return;
    };
    db.send(&ticket(1, "poison one")).await.expect("send");
    db.send(&ticket(2, "poison two")).await.expect("send");
    let worker = Worker::<Ticket>::builder(&db)
        .with_max_attempts(1)
        .external(|t, _ctx| async move {
            Err::<(), _>(HandlerError::msg(format!("cannot file {}", t.id)))
        })
        .build()
        .expect("worker");
    let stats = db.drain(&worker).await.expect("drain");
    assert_eq!(stats.dead_lettered, 2, "{stats:?}");

    let listing = json(Some(&db), &["dead-letters", "list", "--json"]);
    let letters = listing["dead_letters"].as_array().expect("dead letters");
    assert_eq!(letters.len(), 2, "{listing}");
    assert!(letters.iter().all(|l| l["attempts"] == 1), "{listing}");
    // The queue's name is case-insensitive: the listing's lower-case name finds them too.
    let by_name = json(
        Some(&db),
        &["dead-letters", "list", "--queue", "tickets", "--json"],
    );
    assert_eq!(by_name["dead_letters"], listing["dead_letters"]);
    assert_eq!(
        queue(&json(Some(&db), &["queues", "--json"]), "tickets")["dead_letters"],
        2
    );

    let shown = json(
        Some(&db),
        &["dead-letters", "show", "tickets", "--key", "1", "--json"],
    );
    assert_eq!(shown["key"], serde_json::json!(["1"]));
    assert!(
        shown["payload"]
            .as_str()
            .is_some_and(|p| p.contains("poison one")),
        "{shown}"
    );
    assert_eq!(shown["error"], "cannot file 1");

    expect(
        Some(&db),
        &["dead-letters", "replay", "Tickets", "--key", "1"],
        0,
    );
    db.assert_queued(&[ticket(1, "poison one")]).await;
    assert_eq!(
        db.dead_letters()
            .count(&Ticket::QUEUE)
            .await
            .expect("letters"),
        1
    );
    let gone = expect(
        Some(&db),
        &["dead-letters", "replay", "Tickets", "--key", "1"],
        3,
    );
    assert!(
        stderr(&gone).contains("no dead letter of Tickets with key (1)"),
        "{}",
        stderr(&gone)
    );

    let purged = json(
        Some(&db),
        &["dead-letters", "purge", "tickets", "--all", "--json"],
    );
    assert_eq!(purged["purged"], 1, "{purged}");
    db.assert_no_dead_letters::<Ticket>().await;
    let empty = json(Some(&db), &["dead-letters", "list", "--json"]);
    assert_eq!(empty["dead_letters"], serde_json::json!([]));
}

#[test]
fn schema_prints_postgresql_ddl() {
    let output = expect(
        None,
        &[
            "schema",
            "--dialect",
            "postgresql",
            "--queue",
            "Tickets",
            "--key",
            "Id:bigint",
            "--key",
            "Sku:STRING(64)",
            "--payload",
            "jsonb",
        ],
        0,
    );
    let text = stdout(&output);
    assert!(
        text.contains(
            "CREATE QUEUE IF NOT EXISTS tickets (id bigint NOT NULL, sku varchar(64) NOT NULL, \
             payload jsonb NOT NULL, PRIMARY KEY (id, sku))"
        ),
        "{text}"
    );
    assert!(
        text.contains("CREATE TABLE IF NOT EXISTS spanner_queues_dead_letters"),
        "{text}"
    );
    assert!(!text.contains("SpannerQueues"), "{text}");
    let document: Value = serde_json::from_str(&stdout(&expect(
        None,
        &["schema", "--dialect", "postgresql", "--json"],
        0,
    )))
    .expect("json");
    let statements: Vec<&str> = document["statements"]
        .as_array()
        .expect("statements")
        .iter()
        .filter_map(Value::as_str)
        .collect();
    assert_eq!(statements, sdk_statements(Dialect::PostgreSql));
    let bad = expect(None, &["schema", "--dialect", "mysql"], 2);
    assert!(stderr(&bad).contains("postgresql"), "{}", stderr(&bad));
}

/// A PostgreSQL queue keyed by text with a `bytea` payload, in a database without the worker's
/// tables: keys and payloads read back as text, and the missing dead-letter table is named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgresql_text_keys_bytes_payloads_and_no_worker_tables() {
    let ddl = vec![
        "CREATE QUEUE blobs (sku varchar(64) NOT NULL, payload bytea NOT NULL, PRIMARY KEY (sku))"
            .to_owned(),
    ];
    let Some(db) = spanner_queues_testing::setup()
        .without_sdk_tables()
        .with_dialect(Dialect::PostgreSql)
        .with_ddl(ddl)
        .create()
        .await
    else {
        return;
    };
    expect(
        Some(&db),
        &["send", "blobs", "--key", "a-1", "--json", r#"{"n":1}"#],
        0,
    );
    let peeked = json(Some(&db), &["peek", "blobs", "--json"]);
    let messages = peeked["messages"].as_array().expect("messages");
    assert_eq!(messages.len(), 1, "{peeked}");
    assert_eq!(messages[0]["key"], serde_json::json!(["a-1"]));
    // The payload column is bytea: the JSON text's UTF-8 bytes, shown in base64.
    assert_eq!(messages[0]["payload"], "base64:eyJuIjoxfQ==", "{peeked}");
    let table = stdout(&expect(Some(&db), &["peek", "blobs"], 0));
    assert!(table.lines().any(|l| l.contains("a-1")), "{table}");

    let listing = json(Some(&db), &["queues", "--json"]);
    let blobs = queue(&listing, "blobs");
    assert_eq!(blobs["depth"], 1, "{listing}");
    assert_eq!(blobs["dead_letters"], Value::Null, "{listing}");
    let table = stdout(&expect(Some(&db), &["queues"], 0));
    assert!(table.starts_with("QUEUE"), "{table}");
    assert!(table.lines().any(|l| l.starts_with("blobs ")), "{table}");

    let output = expect(Some(&db), &["dead-letters", "list"], 3);
    assert!(
        stderr(&output).contains("no dead-letter table spanner_queues_dead_letters"),
        "{}",
        stderr(&output)
    );
}
