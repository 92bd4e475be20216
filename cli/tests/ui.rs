//! `spanner-queues ui` in a real headless browser: Chromium driven over WebDriver (chromedriver)
//! opens the console on a database with a dead letter, clicks Replay, and sees the message
//! processed by the worker this test runs.
//!
//! Needs Debian's `chromium` and `chromium-driver`. Without them the test prints `SKIPPING …`
//! and passes, except under `SPANNER_QUEUES_REQUIRE_EMULATOR=1` (CI), where it fails with the
//! command that installs them.
//!
//! With `SPANNER_QUEUES_UI_SCREENSHOTS=DIR` it also sends a batch of messages for the worker to
//! work through, and saves the README's screenshots (PNG) into DIR.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use spanner_queues::{HandlerError, QueueMessage, SendOptions, Worker};
use spanner_queues_testing::TestDatabase;
use tokio::io::AsyncBufReadExt as _;
use tokio::process::{Child, Command};

#[derive(QueueMessage, Debug, Clone, PartialEq)]
#[queue(name = "Tickets")]
struct Ticket {
    #[queue(key)]
    id: i64,
    title: String,
}

/// Attempts to reach chromedriver or to see a page change before the test gives up (a guard
/// against hanging, not a speed requirement: each attempt waits 100 ms).
const ATTEMPTS: u32 = 3000;
const INSTALL: &str = "apt-get install -y chromium chromium-driver";

/// An executable on `PATH`.
fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|dir| dir.join(name))
        .find(|path| path.is_file())
}

/// Chromium and chromedriver, or `None` after saying why (failing where they are required).
fn browser() -> Option<(PathBuf, PathBuf)> {
    let chromium = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find_map(which);
    let driver = which("chromedriver");
    match (chromium, driver) {
        (Some(chromium), Some(driver)) => Some((chromium, driver)),
        (chromium, _) => {
            let missing = if chromium.is_none() {
                "chromium"
            } else {
                "chromedriver"
            };
            let reason = format!("no {missing} on PATH (install with `{INSTALL}`)");
            let required = std::env::var("SPANNER_QUEUES_REQUIRE_EMULATOR")
                .is_ok_and(|v| v == "1" || v == "true");
            assert!(
                !required,
                "the console's browser test needs a browser: {reason}"
            );
            // Past the test harness's capture, like the emulator harness's own notice.
            let _ = writeln!(
                std::io::stderr(),
                "SKIPPING the console's browser test: {reason} \
                 (set SPANNER_QUEUES_REQUIRE_EMULATOR=1 to make this an error)"
            );
            None
        }
    }
}

/// `spanner-queues ui --allow-writes` on `db`, as a user starts it, and its address.
async fn start_console(db: &TestDatabase) -> (Child, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_spanner-queues"));
    command
        .args([
            "ui",
            "--listen",
            "127.0.0.1:0",
            "--allow-writes",
            "--interval",
            "0.5",
        ])
        .env("SPANNER_QUEUES_DATABASE", db.path())
        .stdout(Stdio::piped())
        .kill_on_drop(true);
    match db.emulator_host() {
        Some(host) => command.env("SPANNER_EMULATOR_HOST", host),
        None => command.env_remove("SPANNER_EMULATOR_HOST"),
    };
    let mut child = command.spawn().expect("start spanner-queues ui");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    tokio::io::BufReader::new(stdout)
        .read_line(&mut line)
        .await
        .expect("read the console's first line");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("the console printed no address: `{line}`"))
        .to_owned();
    (child, url)
}

/// chromedriver on a free port, and a headless Chromium session through it.
async fn start_browser(chromium: &Path, driver: &Path) -> (Child, Client) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let child = Command::new(driver)
        .arg(format!("--port={port}"))
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("start chromedriver");
    let mut capabilities = serde_json::Map::new();
    capabilities.insert(
        "goog:chromeOptions".to_owned(),
        serde_json::json!({
            "binary": chromium,
            "args": ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                     "--disable-gpu", "--window-size=1100,1000"],
        }),
    );
    let mut last_error = String::new();
    for _ in 0..ATTEMPTS {
        match ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities.clone())
            .connect(&format!("http://127.0.0.1:{port}"))
            .await
        {
            Ok(client) => return (child, client),
            // Not listening yet.
            Err(error) => last_error = error.to_string(),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("chromedriver on port {port} never took a session: {last_error}");
}

/// The text of the first element matching `css` on the page shown.
async fn text(client: &Client, css: &str) -> String {
    client
        .find(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("no `{css}` on the page: {e}"))
        .text()
        .await
        .expect("text")
}

async fn screenshot(client: &Client, dir: Option<&Path>, name: &str) {
    if let Some(dir) = dir {
        let png = client.screenshot().await.expect("screenshot");
        std::fs::create_dir_all(dir).expect("screenshot directory");
        std::fs::write(dir.join(name), png).expect("write the screenshot");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_clicked_in_the_browser_is_processed() {
    let Some((chromium, driver)) = browser() else {
        return;
    };
    let Some(db) = spanner_queues_testing::setup()
        .with_queue::<Ticket>()
        .create()
        .await
    else {
        return;
    };
    let shots = std::env::var_os("SPANNER_QUEUES_UI_SCREENSHOTS").map(PathBuf::from);
    let shots = shots.as_deref();

    // A dead letter: its one attempt fails.
    db.send(&Ticket {
        id: 7,
        title: "refund order 7".to_owned(),
    })
    .await
    .expect("send");
    let failing = Worker::<Ticket>::builder(&db)
        .with_max_attempts(1)
        .external(|t, _ctx| async move {
            Err::<(), _>(HandlerError::msg(format!(
                "payment service refused ticket {}",
                t.id
            )))
        })
        .build()
        .expect("worker");
    let stats = db.drain(&failing).await.expect("drain");
    assert_eq!(stats.dead_lettered, 1, "{stats:?}");

    let (_console, url) = start_console(&db).await;
    let (_driver, client) = start_browser(&chromium, &driver).await;

    if shots.is_some() {
        // Something for the charts: a backlog the worker works through, and later work.
        for id in 100..160 {
            db.send(&Ticket {
                id,
                title: format!("ticket {id}"),
            })
            .await
            .expect("send");
        }
        for id in 200..205 {
            db.send_with(
                &Ticket {
                    id,
                    title: format!("follow-up {id}"),
                },
                SendOptions::new().deliver_after(Duration::from_secs(3600)),
            )
            .await
            .expect("schedule");
        }
    }

    // The queue's page shows the dead letter; the browser clicks Replay.
    client
        .goto(&format!("{url}queues/Tickets"))
        .await
        .expect("open the queue page");
    let row = text(&client, "tr.letter").await;
    assert!(row.contains("payment service refused ticket 7"), "{row}");
    screenshot(&client, shots, "ui-queue.png").await;
    if shots.is_some() {
        client
            .find(Locator::Css("tr.letter a"))
            .await
            .expect("the dead letter's link")
            .click()
            .await
            .expect("open the dead letter");
        let payload = text(&client, "pre.payload").await;
        assert!(payload.contains("refund order 7"), "{payload}");
        screenshot(&client, shots, "ui-dead-letter.png").await;
    }

    // Now a worker that processes what it gets, and reports each ticket it processed.
    let (processed_tx, mut processed) = tokio::sync::mpsc::unbounded_channel();
    let pace = if shots.is_some() {
        Duration::from_millis(60)
    } else {
        Duration::ZERO
    };
    let worker = Worker::<Ticket>::builder(&db)
        .with_concurrency(1)
        .external(move |t, _ctx| {
            let processed_tx = processed_tx.clone();
            async move {
                if !pace.is_zero() {
                    // Screenshots only: work that takes a while, so the charts show a drain.
                    tokio::time::sleep(pace).await;
                }
                let _ = processed_tx.send(t.id);
                Ok::<(), HandlerError>(())
            }
        })
        .build()
        .expect("worker")
        .spawn();

    client
        .find(Locator::Css("button.replay"))
        .await
        .expect("a Replay button")
        .click()
        .await
        .expect("click Replay");
    let notice = client
        .wait()
        .for_element(Locator::Css("p.notice"))
        .await
        .expect("the page after the replay")
        .text()
        .await
        .expect("text");
    assert!(notice.starts_with("Replayed"), "{notice}");
    let current = client.current_url().await.expect("url");
    assert_eq!(current.path(), "/queues/Tickets");
    assert_eq!(current.query(), Some("done=replayed"));

    // The worker processes the replayed message...
    let seven = async {
        while let Some(id) = processed.recv().await {
            if id == 7 {
                return true;
            }
        }
        false
    };
    // A guard against hanging, not a speed requirement.
    let processed_seven = tokio::time::timeout(Duration::from_secs(300), seven).await;
    assert_eq!(
        processed_seven,
        Ok(true),
        "the worker never processed the replayed ticket 7"
    );
    // ...and the console shows it gone: no message due, no dead letter; and its sampler (every
    // 0.5 s, --interval) has kept more than one reading for the charts.
    let mut seen = String::new();
    for _ in 0..ATTEMPTS {
        client.goto(&url).await.expect("open the overview");
        let due = text(&client, "tr.queue td.due").await;
        let dead = text(&client, "tr.queue td.dead").await;
        let samples: u32 = text(&client, "span.samples")
            .await
            .parse()
            .expect("a number of samples");
        seen = format!("due {due}, dead letters {dead}, sampled {}", samples > 1);
        if seen == "due 0, dead letters 0, sampled true" {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(seen, "due 0, dead letters 0, sampled true");
    screenshot(&client, shots, "ui-overview.png").await;

    client.close().await.expect("close the browser");
    worker.shutdown().await.expect("worker shutdown");
}

/// `--listen` on an address that is not loopback is refused before anything is served (exit
/// code 2), and says how to do it anyway.
#[test]
fn a_non_loopback_address_needs_allow_remote() {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_spanner-queues"))
        .args(["ui", "--listen", "0.0.0.0:0"])
        .env(
            "SPANNER_QUEUES_DATABASE",
            "projects/p/instances/i/databases/d",
        )
        .output()
        .expect("run spanner-queues ui");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("is not a loopback address") && stderr.contains("--allow-remote"),
        "{stderr}"
    );
    assert!(output.stdout.is_empty(), "nothing was served");
}
