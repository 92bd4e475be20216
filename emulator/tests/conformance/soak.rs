//! Soak test (issue 3): 4 receivers, 2,000 messages, lease expiries forced by a receiver that
//! never acks. Every message must be acked exactly once, and no two live leases on one message
//! may overlap.
//!
//! Acks are recorded transactionally: each ack commit also inserts the message id into
//! `Acked`, whose primary key makes a second ack of a message impossible to hide (and an Ack of
//! a message that is gone fails the whole commit with NOT_FOUND). The only timing assertions
//! are the lease semantics themselves.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use google_cloud_spanner::statement::Statement;

use crate::receive::assert_no_overlapping_leases;
use crate::support::*;

const MESSAGES: i64 = 2_000;
const SEND_CHUNK: usize = 100;
const RECEIVERS: usize = 4;
/// The receiver that never acks.
const HOARDER: usize = 0;
/// How many deliveries the hoarder takes before it stops receiving (its leases then expire and
/// the messages go to the others).
const HOARD: usize = 150;
const BATCH: i64 = 10;
/// Guard against a hung test; a passing run takes a small fraction of it.
const GUARD: Duration = Duration::from_secs(600);

#[derive(Debug, Default)]
struct Shared {
    deliveries: Mutex<Vec<(usize, Delivery)>>,
    acks: Mutex<HashMap<usize, usize>>,
    /// Acks that found their message already gone (a lease that ran out before the ack).
    lost: AtomicUsize,
    ack_commits: AtomicUsize,
    acked: AtomicUsize,
    all_acked: tokio::sync::Notify,
}

fn ack_and_record(receiver: usize, id: i64) -> Vec<Mutation> {
    vec![
        ack("Q", vec![int(id)], false),
        insert(
            "Acked",
            &["Id", "Receiver", "AckedAt"],
            vec![
                int(id),
                int(i64::try_from(receiver).unwrap_or(-1)),
                text("spanner.commit_timestamp()"),
            ],
        ),
    ]
}

/// Acks a batch in one commit; if one message of it is gone, acks them one by one.
async fn ack_batch(raw: &Raw, shared: &Shared, receiver: usize, ids: &[i64]) {
    let mutations: Vec<Mutation> = ids
        .iter()
        .flat_map(|id| ack_and_record(receiver, *id))
        .collect();
    shared.ack_commits.fetch_add(1, Ordering::Relaxed);
    let done = match commit_retrying(raw, mutations).await {
        Ok(_) => ids.len(),
        Err(status) if status.code() == tonic::Code::NotFound && ids.len() > 1 => {
            let mut done = 0;
            for id in ids {
                shared.ack_commits.fetch_add(1, Ordering::Relaxed);
                match commit_retrying(raw, ack_and_record(receiver, *id)).await {
                    Ok(_) => done += 1,
                    Err(s) if s.code() == tonic::Code::NotFound => {
                        shared.lost.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(s) => panic!("receiver {receiver}: ack of {id} failed: {s:?}"),
                }
            }
            done
        }
        Err(status) if status.code() == tonic::Code::NotFound => {
            shared.lost.fetch_add(1, Ordering::Relaxed);
            0
        }
        Err(status) => panic!("receiver {receiver}: ack commit failed: {status:?}"),
    };
    *shared
        .acks
        .lock()
        .expect("lock")
        .entry(receiver)
        .or_default() += done;
    let before = shared.acked.fetch_add(done, Ordering::Relaxed);
    if before < MESSAGES as usize && before + done >= MESSAGES as usize {
        shared.all_acked.notify_one();
    }
}

async fn run_receiver(
    db: Arc<spanner_queues_testing::TestDatabase>,
    raw: Raw,
    shared: Arc<Shared>,
    receiver: usize,
    first_delivery: Option<tokio::sync::oneshot::Sender<()>>,
) {
    let mut first_delivery = first_delivery;
    let client = db
        .spanner()
        .database_client(db.path())
        .build()
        .await
        .expect("a client per receiver");
    let mut taken = 0usize;
    loop {
        let mut stream = Receiver::open_with(
            &client,
            Statement::builder(receive_sql("Q", "5s", Some(BATCH))).build(),
        )
        .await
        .expect("RECEIVE");
        let mut batch = Vec::new();
        while let Some(d) = stream.next().await {
            let id = d.id.expect("Id");
            let last = d.last_in_batch.expect("SpannerLastBatchMessage");
            shared.deliveries.lock().expect("lock").push((receiver, d));
            if let Some(tx) = first_delivery.take() {
                let _ = tx.send(());
            }
            if receiver == HOARDER {
                taken += 1;
                if taken >= HOARD {
                    return; // Holds its leases until they expire; never acks.
                }
                continue;
            }
            batch.push(id);
            if last {
                ack_batch(&raw, &shared, receiver, &batch).await;
                batch.clear();
            }
        }
        if !batch.is_empty() {
            ack_batch(&raw, &shared, receiver, &batch).await;
        }
    }
}

#[tokio::test]
async fn soak_four_receivers_two_thousand_messages_with_forced_lease_expiries() {
    let started = Instant::now();
    let db = Arc::new(
        database(&[
            SIMPLE_QUEUE,
            "CREATE TABLE Acked (Id INT64 NOT NULL, Receiver INT64 NOT NULL, \
             AckedAt TIMESTAMP NOT NULL OPTIONS (allow_commit_timestamp = true)) PRIMARY KEY (Id)",
        ])
        .await,
    );
    let raw = Raw::connect(&db).await;
    let shared = Arc::new(Shared::default());

    let ids: Vec<i64> = (0..MESSAGES).collect();
    let mut chunks = ids.chunks(SEND_CHUNK);
    let send_chunk = |chunk: &[i64]| -> Vec<Mutation> {
        chunk
            .iter()
            .map(|id| send_now("Q", *id, &format!("message {id}")))
            .collect()
    };
    // The first chunk, and the hoarder, first: it is sure to take (and drop) messages.
    commit_retrying(&raw, send_chunk(chunks.next().expect("a chunk")))
        .await
        .expect("send");
    let mut tasks = tokio::task::JoinSet::new();
    let (first_tx, first_rx) = tokio::sync::oneshot::channel();
    tasks.spawn(run_receiver(
        Arc::clone(&db),
        raw.clone(),
        Arc::clone(&shared),
        HOARDER,
        Some(first_tx),
    ));
    first_rx.await.expect("the hoarder's first delivery");
    for receiver in 1..RECEIVERS {
        tasks.spawn(run_receiver(
            Arc::clone(&db),
            raw.clone(),
            Arc::clone(&shared),
            receiver,
            None,
        ));
    }
    // The rest is sent while the receivers run.
    {
        let raw = raw.clone();
        let rest: Vec<Vec<Mutation>> = chunks.map(send_chunk).collect();
        tasks.spawn(async move {
            for mutations in rest {
                commit_retrying(&raw, mutations).await.expect("send");
            }
        });
    }
    tokio::time::timeout(GUARD, async {
        loop {
            tokio::select! {
                () = shared.all_acked.notified() => return,
                Some(ended) = tasks.join_next() => {
                    if let Err(e) = ended {
                        panic!("a soak task failed: {e}");
                    }
                    // The hoarder and the sender end early by design.
                }
            }
        }
    })
    .await
    .unwrap_or_else(|_| {
        panic!(
            "not every message was acked within {GUARD:?}: {} of {MESSAGES}",
            shared.acked.load(Ordering::Relaxed)
        )
    });
    tasks.abort_all();
    let elapsed = started.elapsed();

    // Exactly once: one Acked row per message, and the queue is empty.
    assert_eq!(
        scalar_i64(&db, "SELECT COUNT(*) FROM Acked").await,
        MESSAGES,
        "acked rows"
    );
    assert_eq!(
        scalar_i64(&db, "SELECT COUNT(DISTINCT Id) FROM Acked").await,
        MESSAGES
    );
    assert_eq!(scalar_i64(&db, "SELECT MIN(Id) FROM Acked").await, 0);
    assert_eq!(
        scalar_i64(&db, "SELECT MAX(Id) FROM Acked").await,
        MESSAGES - 1
    );
    assert_eq!(
        scalar_i64(&db, "SELECT COUNT(*) FROM Q").await,
        0,
        "queue empty"
    );
    assert_eq!(
        shared.acked.load(Ordering::Relaxed),
        MESSAGES as usize,
        "successful ack commits cover each message once"
    );

    let deliveries = std::mem::take(&mut *shared.deliveries.lock().expect("lock"));
    let acked_at: HashMap<i64, SystemTime> = {
        let rows = query(
            db.client(),
            Statement::builder("SELECT Id, AckedAt FROM Acked").build(),
        )
        .await
        .expect("Acked");
        rows.iter()
            .map(|r| (r.get("Id").expect("Id"), r.get("AckedAt").expect("AckedAt")))
            .collect()
    };
    // No two live leases on one message overlap.
    assert_no_overlapping_leases(deliveries.iter().map(|(r, d)| (*r, d)));
    // No delivery began after its message was acked (the lease began one lease before its
    // expiry).
    let after_ack = deliveries
        .iter()
        .filter(|(_, d)| {
            let granted = d.expires - LEASE;
            acked_at
                .get(&d.id.expect("Id"))
                .is_some_and(|at| granted > *at)
        })
        .count();

    let mut per_message: HashMap<i64, usize> = HashMap::new();
    let mut per_receiver: BTreeMap<usize, usize> = BTreeMap::new();
    for (r, d) in deliveries.iter() {
        *per_message.entry(d.id.expect("Id")).or_default() += 1;
        *per_receiver.entry(*r).or_default() += 1;
    }
    let hoarded = per_receiver.get(&HOARDER).copied().unwrap_or(0);
    // Each message the hoarder held went to another receiver after its lease expired.
    for (_, held) in deliveries.iter().filter(|(r, _)| *r == HOARDER) {
        assert!(
            deliveries
                .iter()
                .any(|(r, d)| *r != HOARDER && d.id == held.id && d.expires > held.expires),
            "message {:?} held by the receiver that never acks was not redelivered",
            held.id
        );
    }
    let redelivered = per_message.values().filter(|n| **n > 1).count();
    println!(
        "soak: {MESSAGES} messages, {} deliveries ({redelivered} messages redelivered, at most {} \
         deliveries of one), per receiver {per_receiver:?} (receiver {HOARDER} never acks), \
         acks per receiver {:?}, {} ack commits, {} acks found their message gone, \
         {after_ack} deliveries began after the ack, {elapsed:.1?} in all",
        deliveries.len(),
        per_message.values().max().copied().unwrap_or(0),
        shared.acks.lock().expect("lock"),
        shared.ack_commits.load(Ordering::Relaxed),
        shared.lost.load(Ordering::Relaxed),
    );
    assert_eq!(
        per_message.len(),
        MESSAGES as usize,
        "every message delivered"
    );
    assert!(hoarded > 0, "the receiver that never acks got nothing");
    assert_eq!(after_ack, 0, "messages delivered after they were acked");
}
