//! Memory: peak RSS of one worker process over many messages vs over few.
//!
//! Each measurement runs the worker in a fresh process of its own (this binary with
//! `--rss-worker`), so that its peak RSS (`VmHWM`) is the worker's alone. The queue is kept at
//! a steady backlog while it runs, so a longer run differs from a shorter one only in length.

use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::BoxError;
use tokio::io::AsyncBufReadExt as _;

use crate::consume::{Consumer, Progress, Side};
use crate::db::Bench;

/// Handlers of the measured worker.
pub(crate) const HANDLERS: usize = 4;

/// What the child reports.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct RssRun {
    pub(crate) messages: u64,
    pub(crate) peak_rss_kib: u64,
    pub(crate) secs: f64,
}

/// Messages kept waiting in the queue while the worker runs: the queue is topped up as the
/// worker drains it, so that every run sees the same backlog whatever its length.
pub(crate) const BACKLOG: i64 = 200;

/// Runs one worker process over `messages` messages, fed to a fresh database as it goes.
pub(crate) async fn measure(bench: &Bench, messages: i64) -> Result<RssRun, BoxError> {
    let db = bench.database().await?;
    let mut sent = BACKLOG.min(messages);
    db.fill_queue(0..sent).await?;
    let exe = std::env::current_exe()?;
    let timeout = Duration::from_secs(120 + messages as u64);
    let mut child = tokio::process::Command::new(exe)
        .arg("--rss-worker")
        .arg(bench.emulator.endpoint.to_string())
        .arg(db.path())
        .arg(messages.to_string())
        .arg(timeout.as_secs().to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()?;
    // The child reports how many messages it acked (`ACKED n` lines) as it goes, so the queue
    // is topped up without querying it (a count of the queue table costs more as the run goes
    // on, and a strong query waits for the emulator's clock).
    let stdout = child.stdout.take().ok_or("no stdout pipe")?;
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let deadline = tokio::time::Instant::now() + timeout + Duration::from_secs(60);
    let mut report = None;
    loop {
        let line = tokio::select! {
            line = lines.next_line() => line?,
            () = tokio::time::sleep_until(deadline) => {
                return Err("the worker process did not finish".into());
            }
        };
        let Some(line) = line else { break };
        if let Some(acked) = line.strip_prefix("ACKED ") {
            let acked: i64 = acked.trim().parse()?;
            let left = sent - acked;
            if sent < messages && left < BACKLOG / 2 {
                let more = (BACKLOG - left).min(messages - sent);
                db.fill_queue(sent..sent + more).await?;
                sent += more;
            }
        } else if let Some(run) = line.strip_prefix("RSS ") {
            report = Some(run.to_owned());
        }
    }
    let status = child.wait().await?;
    let line = report.ok_or_else(|| format!("the worker process reported nothing ({status})"))?;
    let run: RssRun = serde_json::from_str(&line)?;
    db.verify(&(0..messages), false).await?;
    bench.drop_database(db).await?;
    Ok(run)
}

/// The `--rss-worker ENDPOINT DATABASE MESSAGES TIMEOUT_SECS` child: runs one worker until it
/// acked `MESSAGES` messages, then prints its peak RSS.
pub(crate) async fn child(args: &[String]) -> Result<(), BoxError> {
    let [endpoint, path, messages, timeout] = args else {
        return Err("usage: --rss-worker ENDPOINT DATABASE MESSAGES TIMEOUT_SECS".into());
    };
    let messages: u64 = messages.parse()?;
    let timeout = Duration::from_secs(timeout.parse()?);
    let spanner = crate::db::client(endpoint).await?;
    let client = spanner.database_client(path).build().await?;
    let db = spanner_queues::Database::builder(path.as_str())
        .with_spanner(spanner)
        .with_client(client)
        .with_dialect(spanner_queues::Dialect::GoogleSql)
        .connect()
        .await?;
    let progress = Arc::new(Progress::default());
    let started = Instant::now();
    let consumer = Consumer::start(
        Side::Worker {
            workers: 1,
            handlers: HANDLERS,
        },
        crate::db::Sql(spanner_queues::Dialect::GoogleSql),
        vec![db],
        progress,
    )?;
    // Reports progress (`ACKED n`) every 50 ms for the parent to top the queue up.
    let finished = loop {
        let done = consumer.done();
        println!("ACKED {done}");
        if done >= messages {
            break true;
        }
        if started.elapsed() > timeout {
            break false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let secs = started.elapsed().as_secs_f64();
    let peak_rss_kib = crate::cpu::peak_rss_kib().ok_or("no VmHWM in /proc/self/status")?;
    consumer.stop().await;
    if !finished {
        return Err(format!("acked fewer than {messages} messages in {timeout:?}").into());
    }
    let run = RssRun {
        messages,
        peak_rss_kib,
        secs,
    };
    println!("RSS {}", serde_json::to_string(&run)?);
    Ok(())
}
