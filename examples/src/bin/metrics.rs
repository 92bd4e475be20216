//! Metrics you can look at: the worker's metrics (see `spanner_queues::telemetry`) exported to
//! Prometheus with `metrics-exporter-prometheus`, plus the queue's depth, oldest due age and
//! dead letters read from the database every few seconds. `docs/grafana-dashboard.json` is a
//! dashboard for them.
//!
//! ```text
//! cargo run -p spanner-queues-examples --bin metrics             # one run, then the scrape
//! cargo run -p spanner-queues-examples --bin metrics -- --serve  # keeps serving /metrics
//! ```
//!
//! It serves `http://127.0.0.1:9464/metrics` (`PORT` picks another port; 0 for any free one).

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use google_cloud_spanner::statement::Statement;
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use spanner_queues::ident::QueueName;
use spanner_queues::{Database, HandlerError, QueueMessage, RedeliveryPolicy, Worker, telemetry};
use spanner_queues_examples::{Error, database, init_tracing, say};

/// Gauge: messages in the queue (due, scheduled and leased).
const QUEUE_DEPTH: &str = "spanner_queues_queue_depth";
/// Gauge: messages whose deliver time has passed (waiting or leased).
const QUEUE_DUE: &str = "spanner_queues_queue_due";
/// Gauge: seconds since the oldest due message's deliver time (0 when none is due).
const OLDEST_DUE_AGE: &str = "spanner_queues_queue_oldest_due_age_seconds";
/// Gauge: rows of the queue in the dead-letter table.
const DEAD_LETTERS: &str = "spanner_queues_dead_letters";

#[derive(QueueMessage, Debug)]
#[queue(name = "Invoices")]
struct Invoice {
    #[queue(key)]
    invoice_id: i64,
    amount_cents: i64,
}

const INVOICES: i64 = 40;

/// Installs the Prometheus recorder: every `metrics` call of the SDK lands there.
fn install_prometheus() -> Result<PrometheusHandle, Error> {
    let handle = PrometheusBuilder::new()
        // Buckets make the handler time a Prometheus histogram (quantiles across instances)
        // rather than a per-process summary.
        .set_buckets_for_metric(
            Matcher::Full(telemetry::HANDLER_SECONDS.to_owned()),
            &[
                0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
            ],
        )?
        .install_recorder()?;
    telemetry::describe(); // units and help texts
    metrics::describe_gauge!(QUEUE_DEPTH, "Messages in the queue");
    metrics::describe_gauge!(QUEUE_DUE, "Messages whose deliver time has passed");
    metrics::describe_gauge!(
        OLDEST_DUE_AGE,
        metrics::Unit::Seconds,
        "Age of the oldest due message"
    );
    metrics::describe_gauge!(DEAD_LETTERS, "Dead letters of the queue");
    Ok(handle)
}

/// The worker does not know how deep its queue is; one process per service (not every worker)
/// reads it with SQL now and then. Spanner exposes no lease state to SQL, so `due` counts
/// leased messages too.
async fn sample_queue(db: &Database, queue: &QueueName) -> Result<(), Error> {
    let counts = Statement::builder(format!(
        "SELECT COUNT(*), COUNTIF(DeliverTime <= CURRENT_TIMESTAMP()), \
         IFNULL(TIMESTAMP_DIFF(CURRENT_TIMESTAMP(), \
           MIN(IF(DeliverTime <= CURRENT_TIMESTAMP(), DeliverTime, NULL)), MILLISECOND), 0) \
         FROM {queue}"
    ))
    .build();
    let mut rows = db
        .client()
        .single_use()
        .build()
        .execute_query(counts)
        .await?;
    if let Some(row) = rows.next().await {
        let row = row?;
        let name = queue.to_string();
        metrics::gauge!(QUEUE_DEPTH, "queue" => name.clone()).set(row.get::<i64>(0)? as f64);
        metrics::gauge!(QUEUE_DUE, "queue" => name.clone()).set(row.get::<i64>(1)? as f64);
        metrics::gauge!(OLDEST_DUE_AGE, "queue" => name).set(row.get::<i64>(2)? as f64 / 1000.0);
    }
    let dead = db.dead_letters().count(queue).await?;
    metrics::gauge!(DEAD_LETTERS, "queue" => queue.to_string()).set(dead as f64);
    Ok(())
}

/// The value of the first sample of `name` whose labels contain `labels`, in a scrape.
fn sample(scrape: &str, name: &str, labels: &str) -> Option<f64> {
    scrape
        .lines()
        .filter(|l| !l.starts_with('#'))
        .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(labels))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::main]
async fn main() -> Result<(), Error> {
    init_tracing();
    let serve_forever = std::env::args().any(|a| a == "--serve");
    let prometheus = install_prometheus()?;

    let (db, harness) = database(spanner_queues_testing::setup().with_queue::<Invoice>()).await?;

    // The scrape endpoint, on loopback. Histograms need their upkeep now and then.
    let port = std::env::var("PORT").unwrap_or_else(|_| "9464".into());
    let listener = tokio::net::TcpListener::bind(format!("127.0.0.1:{port}")).await?;
    let address = listener.local_addr()?;
    let scrape = prometheus.clone();
    let app = Router::new().route("/metrics", get(move || async move { scrape.render() }));
    tokio::spawn(async move { axum::serve(listener, app).await });
    let upkeep = prometheus.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(5)).await;
            upkeep.run_upkeep();
        }
    });
    say(&format!("metrics on http://{address}/metrics"));

    let sampler = db.clone();
    tokio::spawn(async move {
        loop {
            if let Err(error) = sample_queue(&sampler, &Invoice::QUEUE).await {
                tracing::warn!(%error, "queue not sampled");
            }
            tokio::time::sleep(Duration::from_secs(2)).await;
        }
    });

    let invoices: Vec<Invoice> = (1..=INVOICES)
        .map(|invoice_id| Invoice {
            invoice_id,
            amount_cents: 100 * invoice_id,
        })
        .collect();
    db.send_many(&invoices).await?;
    sample_queue(&db, &Invoice::QUEUE).await?;
    say(&format!("{INVOICES} invoices queued"));

    // Something to see: every tenth invoice fails once (a retry), and invoice 13 is refused
    // for good (a dead letter).
    let worker = Worker::<Invoice>::builder(&db)
        .with_redelivery_policy(
            RedeliveryPolicy::default().with_initial_delay(Duration::from_millis(300)),
        )
        .external(|invoice, ctx| async move {
            if invoice.invoice_id == 13 {
                return Err(HandlerError::dead_letter("customer account closed"));
            }
            if invoice.invoice_id % 10 == 0 && ctx.attempt() == 1 {
                return Err(HandlerError::msg("mail server busy"));
            }
            tokio::time::sleep(Duration::from_millis(20)).await; // the work
            Ok(())
        })
        .build()?;
    let stats = harness
        .drain_with(
            &worker,
            spanner_queues_testing::Drain::new().including_scheduled(),
        )
        .await?;
    sample_queue(&db, &Invoice::QUEUE).await?;

    // What Prometheus would scrape now.
    let scrape = reqwest::get(format!("http://{address}/metrics"))
        .await?
        .error_for_status()?
        .text()
        .await?;
    let q = r#"queue="Invoices""#;
    let read = |name: &str, labels: &str| sample(&scrape, name, labels).unwrap_or(-1.0);
    let shown = [
        (telemetry::SENT, q),
        (telemetry::RECEIVED, q),
        (telemetry::PROCESSED, r#"outcome="acked""#),
        (telemetry::RETRIED, q),
        (telemetry::DEAD_LETTERED, q),
        (telemetry::LEASE_LOST, q),
        (QUEUE_DEPTH, q),
        (DEAD_LETTERS, q),
    ];
    println!("scraped from /metrics:");
    for (name, labels) in shown {
        match scrape
            .lines()
            .find(|l| l.starts_with(&format!("{name}{{")) && l.contains(labels))
        {
            Some(line) => println!("  {line}"),
            None => println!("  {name}: no sample yet (nothing happened)"),
        }
    }
    let histogram = format!("{}_bucket", telemetry::HANDLER_SECONDS);
    println!(
        "  {histogram}: {} buckets",
        scrape.lines().filter(|l| l.starts_with(&histogram)).count()
    );
    println!(
        "worker: acked {}, retried {}, dead-lettered {}",
        stats.acked, stats.retried, stats.dead_lettered
    );
    let acked = (INVOICES - 1) as f64;
    if read(telemetry::PROCESSED, r#"outcome="acked""#) != acked
        || read(telemetry::RETRIED, q) != 4.0
        || read(telemetry::DEAD_LETTERED, q) != 1.0
        || read(QUEUE_DEPTH, q) != 0.0
        || read(DEAD_LETTERS, q) != 1.0
    {
        return Err("the scrape does not match what the worker did".into());
    }
    println!("the scrape matches the worker's counts");

    if serve_forever {
        say("serving /metrics until Ctrl-C");
        tokio::signal::ctrl_c().await?;
    }
    Ok(())
}
