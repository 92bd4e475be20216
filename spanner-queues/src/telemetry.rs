//! Names of the metrics and tracing spans this crate emits.
//!
//! # Metrics
//!
//! Metrics go through the [`metrics`](https://docs.rs/metrics) facade: they cost nothing until
//! the application installs a recorder, and any recorder works — for instance
//! `metrics-exporter-prometheus` for a Prometheus scrape endpoint, or an OpenTelemetry bridge.
//! Every metric carries the label `queue` (the queue name). Call [`describe`] once after
//! installing the recorder to attach units and descriptions.
//!
//! | Name | Kind | Extra labels | Meaning |
//! |---|---|---|---|
//! | [`SENT`] | counter | | Messages sent by [`Transaction::send`](crate::Transaction::send) statements (counted when the statement runs; the transaction may still roll back). |
//! | [`ACKED`] | counter | | Messages acked by [`Transaction::ack`](crate::Transaction::ack) statements (same caveat). |
//! | [`RECEIVED`] | counter | | Rows handed out by a [`Receiver`](crate::receive::Receiver). |
//! | [`EXPIRED_ON_RECEIPT`] | counter | | Rows skipped because their lease had (nearly) expired when they were read. |
//! | [`UNDECODABLE`] | counter | | Rows handed out whose key or payload does not decode as the message type (poison messages; the worker dead-letters them). |
//! | [`IN_FLIGHT`] | gauge | | Deliveries handed out and not yet dropped. |
//! | [`RENEW_REQUESTS`] | counter | | `RENEWLEASE` calls. |
//! | [`RENEWED`] | counter | | Leases renewed. |
//! | [`LEASE_LOST`] | counter | | Leases lost (expired, not renewable, or renewal failed past expiry). |
//! | [`PROCESSED`] | counter | `outcome` | Worker attempts by outcome: `acked`, `retried`, `dead_lettered`, `lease_lost`, `already_acked`, `outcome_unknown`, `released`, `parked`. |
//! | [`RETRIED`] | counter | | Worker attempts that failed and were released for a later retry. |
//! | [`DEAD_LETTERED`] | counter | | Messages moved to the dead-letter table. |
//! | [`DEAD_LETTER_FAILED`] | counter | | Messages the worker could not move to the dead-letter table for a permanent reason (it parks them instead: released with the redelivery policy's longest delay). |
//! | [`HANDLER_FAILURES`] | counter | `reason` | Failed handler attempts: `error`, `panic`, `timeout`, `lease_lost`. |
//! | [`HANDLER_SECONDS`] | histogram | | Handler run time, including its transaction. |
//!
//! # Spans
//!
//! | Name | Fields |
//! |---|---|
//! | [`SPAN_RECEIVE`] | `queue`, `call` (one span per `RECEIVE` call) |
//! | [`SPAN_PROCESS`] | `queue`, `key`, `attempt`, `lease` (one per worker attempt) |
//! | [`SPAN_RENEW`] | `queue`, `leases` (one per `RENEWLEASE` call) |
//! | [`SPAN_ACK`] | `queue`, `key` |
//!
//! `lease` is a short hash of the lease token, enough to correlate log lines; the token itself
//! and payloads are never recorded.

/// Counter: messages sent (emitted by [`Transaction::send`](crate::Transaction::send)).
pub const SENT: &str = "spanner_queues_sent_total";
/// Counter: messages acked (emitted by [`Transaction::ack`](crate::Transaction::ack) and everything built
/// on it).
pub const ACKED: &str = "spanner_queues_acked_total";
/// Counter: commits whose outcome is unknown (emitted by every transaction of
/// [`Database::transaction`](crate::Database::transaction), the worker's included).
pub const COMMIT_OUTCOME_UNKNOWN: &str = "spanner_queues_commit_outcome_unknown_total";
/// Counter: rows handed out by receivers.
pub const RECEIVED: &str = "spanner_queues_received_total";
/// Counter: rows skipped because their lease had (nearly) expired when read.
pub const EXPIRED_ON_RECEIPT: &str = "spanner_queues_expired_on_receipt_total";
/// Counter: rows handed out whose key or payload does not decode as the message type.
pub const UNDECODABLE: &str = "spanner_queues_undecodable_total";
/// Gauge: deliveries handed out and not yet dropped.
pub const IN_FLIGHT: &str = "spanner_queues_in_flight";
/// Counter: `RENEWLEASE` calls.
pub const RENEW_REQUESTS: &str = "spanner_queues_renew_requests_total";
/// Counter: leases renewed.
pub const RENEWED: &str = "spanner_queues_leases_renewed_total";
/// Counter: leases lost.
pub const LEASE_LOST: &str = "spanner_queues_lease_lost_total";
/// Counter: worker attempts by `outcome`.
pub const PROCESSED: &str = "spanner_queues_processed_total";
/// Counter: worker attempts released for a later retry.
pub const RETRIED: &str = "spanner_queues_retried_total";
/// Counter: messages moved to the dead-letter table.
pub const DEAD_LETTERED: &str = "spanner_queues_dead_lettered_total";
/// Counter: messages the worker could not dead-letter for a permanent reason (parked instead).
pub const DEAD_LETTER_FAILED: &str = "spanner_queues_dead_letter_failed_total";
/// Counter: failed handler attempts by `reason`.
pub const HANDLER_FAILURES: &str = "spanner_queues_handler_failures_total";
/// Histogram: handler run time in seconds.
pub const HANDLER_SECONDS: &str = "spanner_queues_handler_seconds";

/// Span: one `RECEIVE` call.
pub const SPAN_RECEIVE: &str = "spanner_queues.receive";
/// Span: one worker attempt at one message.
pub const SPAN_PROCESS: &str = "spanner_queues.process";
/// Span: one `RENEWLEASE` call.
pub const SPAN_RENEW: &str = "spanner_queues.renew";
/// Span: one ack statement.
pub const SPAN_ACK: &str = "spanner_queues.ack";

/// Registers units and descriptions of every metric above with the installed recorder.
///
/// Optional: metrics are emitted whether or not this is called.
pub fn describe() {
    use metrics::Unit;
    metrics::describe_counter!(SENT, Unit::Count, "Messages sent (statements run)");
    metrics::describe_counter!(ACKED, Unit::Count, "Messages acked (statements run)");
    metrics::describe_counter!(RECEIVED, Unit::Count, "Rows handed out by receivers");
    metrics::describe_counter!(
        EXPIRED_ON_RECEIPT,
        Unit::Count,
        "Rows skipped because their lease had expired when read"
    );
    metrics::describe_counter!(
        UNDECODABLE,
        Unit::Count,
        "Rows whose key or payload does not decode (poison messages)"
    );
    metrics::describe_gauge!(IN_FLIGHT, Unit::Count, "Deliveries held by the application");
    metrics::describe_counter!(RENEW_REQUESTS, Unit::Count, "RENEWLEASE calls");
    metrics::describe_counter!(RENEWED, Unit::Count, "Leases renewed");
    metrics::describe_counter!(LEASE_LOST, Unit::Count, "Leases lost");
    metrics::describe_counter!(PROCESSED, Unit::Count, "Worker attempts by outcome");
    metrics::describe_counter!(RETRIED, Unit::Count, "Worker attempts released for a retry");
    metrics::describe_counter!(DEAD_LETTERED, Unit::Count, "Messages dead-lettered");
    metrics::describe_counter!(
        DEAD_LETTER_FAILED,
        Unit::Count,
        "Messages that could not be dead-lettered (parked)"
    );
    metrics::describe_counter!(
        HANDLER_FAILURES,
        Unit::Count,
        "Failed handler attempts by reason"
    );
    metrics::describe_histogram!(HANDLER_SECONDS, Unit::Seconds, "Handler run time");
}

/// Displays an error with its `source()` chain, for log lines.
pub(crate) struct ErrorChain<'a>(pub(crate) &'a (dyn std::error::Error + 'static));

impl std::fmt::Display for ErrorChain<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(cause) = source {
            write!(f, ": {cause}")?;
            source = cause.source();
        }
        Ok(())
    }
}

/// The lower-case hex SHA-256 digest of `bytes`.
pub(crate) fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|byte| format!("{byte:02x}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn span_names_match_the_literals_of_the_spans() {
        // `tracing` span names must be literals: check the sources use these names.
        for (name, source) in [
            (SPAN_ACK, include_str!("queue.rs")),
            (SPAN_RECEIVE, include_str!("receive/mod.rs")),
            (SPAN_RENEW, include_str!("receive/lease.rs")),
            (SPAN_PROCESS, include_str!("worker/attempt.rs")),
        ] {
            assert!(source.contains(&format!("\"{name}\"")), "{name}");
        }
    }

    #[test]
    fn sha256_hex_matches_the_standard_test_vectors() {
        // FIPS 180-2 examples.
        assert_eq!(
            sha256_hex(b""),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(
            sha256_hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
