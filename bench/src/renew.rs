//! Renewal: `RENEWLEASE` RPCs per renewal round as the deliveries held grow.

use std::time::{Duration, Instant};

use futures::StreamExt as _;
use spanner_queues::{ReceiveSettings, Receiver};

use crate::BoxError;
use crate::db::{Bench, BenchJob};
use crate::emulator::{RpcCounts, diff};

/// What one in-flight level measured.
#[derive(Debug, Clone)]
pub(crate) struct RenewRun {
    pub(crate) rounds: u64,
    /// `RENEWLEASE` RPCs counted at the proxy.
    pub(crate) rpcs: u64,
    /// Leases renewed (the receiver's count).
    pub(crate) renewed: u64,
    pub(crate) lost: u64,
    pub(crate) all_rpcs: RpcCounts,
}

impl RenewRun {
    pub(crate) fn rpcs_per_round(&self) -> f64 {
        self.rpcs as f64 / self.rounds as f64
    }

    pub(crate) fn renewed_per_round(&self) -> f64 {
        self.renewed as f64 / self.rounds as f64
    }
}

/// The renewal interval used here (shorter than the default 4 s, to measure more rounds).
pub(crate) const INTERVAL: Duration = Duration::from_secs(1);

/// Holds `in_flight` deliveries without acking them and counts the renewal RPCs of `rounds`
/// renewal rounds.
pub(crate) async fn measure(
    bench: &Bench,
    in_flight: usize,
    rounds: u64,
) -> Result<RenewRun, BoxError> {
    let db = bench.database().await?;
    db.fill_queue(0..in_flight as i64).await?;
    let client = bench.new_client(&db).await?;
    let mut receiver = Receiver::<BenchJob>::builder(&client)
        .with_receive_settings(
            ReceiveSettings::default()
                .with_max_in_flight(in_flight)
                .with_renew_interval(INTERVAL),
        )
        .build()?;
    let mut held = Vec::with_capacity(in_flight);
    let started = Instant::now();
    while held.len() < in_flight {
        let next = tokio::time::timeout(Duration::from_secs(60), receiver.next())
            .await
            .map_err(|_| format!("received {} of {in_flight} messages in 60 s", held.len()))?;
        match next {
            Some(Ok(delivery)) => held.push(delivery),
            Some(Err(error)) => return Err(error.into()),
            None => return Err("the receiver ended".into()),
        }
        if started.elapsed() > Duration::from_secs(120) {
            return Err("receiving took too long".into());
        }
    }
    // Start counting right after a round: no renewal call is then in flight.
    let first = next_round(&receiver, receiver.stats().renew_rounds).await?;
    let before = bench.rpcs().await?;
    let stats_before = receiver.stats();
    let last = next_round(&receiver, first + rounds - 1).await?;
    let after = bench.rpcs().await?;
    let stats_after = receiver.stats();
    drop(held);
    drop(receiver);
    bench.drop_database(db).await?;
    let all_rpcs = diff(&after, &before);
    let rpcs = all_rpcs
        .iter()
        .filter(|(kind, _)| kind.ends_with(":RENEWLEASE"))
        .map(|(_, n)| n)
        .sum();
    Ok(RenewRun {
        rounds: last - first,
        rpcs,
        renewed: stats_after.renewed - stats_before.renewed,
        lost: stats_after.lease_lost,
        all_rpcs,
    })
}

/// Waits until the receiver has finished more than `after` renewal rounds; returns the count.
/// Returns a quarter interval after the round is counted: the round's other counters (leases
/// renewed) are then updated too, and the next round is still far off.
async fn next_round(receiver: &Receiver<BenchJob>, after: u64) -> Result<u64, BoxError> {
    let started = Instant::now();
    loop {
        let rounds = receiver.stats().renew_rounds;
        if rounds > after {
            tokio::time::sleep(INTERVAL / 4).await;
            return Ok(rounds);
        }
        if started.elapsed() > INTERVAL * 20 {
            return Err(format!(
                "no renewal round after round {after} in {:?}",
                INTERVAL * 20
            )
            .into());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}
