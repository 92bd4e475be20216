//! `BatchWrite` (reference: Cloud Spanner's `BatchWrite` RPC): each mutation group is applied
//! atomically and independently, and a `BatchWriteResponse` per group is streamed back with the
//! group's index, its status and, when it committed, the commit timestamp. The official emulator
//! answers `UNIMPLEMENTED` for every batch write; the front applies each group as its own
//! commit, with `Send` and `Ack` mutations, in both dialects.
//!
//! Cloud Spanner may apply groups in any order and report several groups in one response, so
//! the tests read the responses by index and never rely on their order or count.

use std::collections::BTreeMap;
use std::time::SystemTime;

use google_cloud_gax::error::rpc::Code;
use google_cloud_spanner::mutation::{Mutation as ClientMutation, MutationGroup};
use google_cloud_spanner::statement::Statement;
use googleapis_tonic_google_spanner_v1::google::spanner::v1 as pb;
use spanner_queues_testing::TestDatabase;

use crate::postgres::{PG_SIMPLE_QUEUE, pg_database};
use crate::support::*;

/// The names of the test's table and queue in one dialect.
struct Names {
    table: &'static str,
    id: &'static str,
    note: &'static str,
    queue: &'static str,
}

const GOOGLE_SQL: Names = Names {
    table: "Orders",
    id: "Id",
    note: "Note",
    queue: "Q",
};

const POSTGRESQL: Names = Names {
    table: "orders",
    id: "id",
    note: "note",
    queue: "q",
};

/// The PostgreSQL twin of [`ORDERS`].
const PG_ORDERS: &str = "CREATE TABLE orders (id bigint NOT NULL, note text, PRIMARY KEY (id))";

/// What the front answered for one group.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Outcome {
    code: tonic::Code,
    message: String,
    committed_at: Option<SystemTime>,
}

fn group(mutations: Vec<Mutation>) -> pb::batch_write_request::MutationGroup {
    pb::batch_write_request::MutationGroup { mutations }
}

/// Sends `groups` in one `BatchWrite` call; the outcome of each group by index (each index
/// reported exactly once).
async fn batch_write(
    raw: &Raw,
    groups: Vec<pb::batch_write_request::MutationGroup>,
) -> Result<BTreeMap<usize, Outcome>, tonic::Status> {
    let count = groups.len();
    let mut stream = raw
        .client()
        .batch_write(pb::BatchWriteRequest {
            session: raw.session().to_owned(),
            mutation_groups: groups,
            ..pb::BatchWriteRequest::default()
        })
        .await?
        .into_inner();
    let mut outcomes = BTreeMap::new();
    while let Some(response) = stream.message().await? {
        let status = response.status.expect("every response has a status");
        let committed_at = response.commit_timestamp.as_ref().map(|ts| {
            commit_time(&pb::CommitResponse {
                commit_timestamp: Some(*ts),
                ..pb::CommitResponse::default()
            })
        });
        for index in response.indexes {
            let index = usize::try_from(index).expect("a non-negative index");
            let outcome = Outcome {
                code: tonic::Code::from_i32(status.code),
                message: status.message.clone(),
                committed_at,
            };
            assert!(
                outcomes.insert(index, outcome).is_none(),
                "group {index} reported twice"
            );
        }
    }
    assert_eq!(
        outcomes.keys().copied().collect::<Vec<_>>(),
        (0..count).collect::<Vec<_>>(),
        "every group reported once"
    );
    Ok(outcomes)
}

/// The ids of `table` in order (first column of `SELECT <id> …`).
async fn ids_of(db: &TestDatabase, names: &Names, table: &str) -> Vec<i64> {
    let sql = format!("SELECT {} FROM {table} ORDER BY {}", names.id, names.id);
    query(db.client(), Statement::builder(&sql).build())
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", chain(&e)))
        .iter()
        .map(|r| r.get::<i64>(0usize).expect("an id"))
        .collect()
}

fn order(names: &Names, id: i64, note: &str) -> Mutation {
    insert(
        names.table,
        &[names.id, names.note],
        vec![int(id), text(note)],
    )
}

/// Several groups with sends, acks and plain writes: the good ones commit (each with its
/// timestamp), a duplicate insert (`ALREADY_EXISTS`) and an ack of a missing message
/// (`NOT_FOUND`) fail alone and atomically, and the sent messages are received.
async fn groups_apply_independently(db: &TestDatabase, names: &Names) {
    let raw = Raw::connect_multiplexed(db).await;
    commit_ok(&raw, vec![send_now(names.queue, 1, "queued before")]).await;
    let before = SystemTime::now();
    let outcomes = batch_write(
        &raw,
        vec![
            // 0: a table write and a send.
            group(vec![
                order(names, 1, "one"),
                send_now(names.queue, 2, "two"),
            ]),
            // 1: an ack of the message sent before, with a table write.
            group(vec![
                ack(names.queue, vec![int(1)], false),
                order(names, 2, "two"),
            ]),
            // 2: a duplicate insert: its send is not applied either.
            group(vec![
                send_now(names.queue, 3, "three"),
                order(names, 1, "dup"),
            ]),
            // 3: an ack of a message that does not exist.
            group(vec![ack(names.queue, vec![int(99)], false)]),
            // 4: plain table mutations only.
            group(vec![
                order(names, 4, "four"),
                write(
                    names.table,
                    &[names.id, names.note],
                    vec![int(4), text("four!")],
                    WriteKind::Update,
                ),
            ]),
            // 5: an ack that ignores a missing message.
            group(vec![ack(names.queue, vec![int(98)], true)]),
        ],
    )
    .await
    .expect("BatchWrite");
    for index in [0, 1, 4, 5] {
        let outcome = &outcomes[&index];
        assert_eq!(outcome.code, tonic::Code::Ok, "group {index}: {outcome:?}");
        let at = outcome
            .committed_at
            .expect("a committed group has a timestamp");
        assert!(at >= before - LEASE, "group {index} committed at {at:?}");
    }
    assert_eq!(
        outcomes[&2].code,
        tonic::Code::AlreadyExists,
        "{outcomes:?}"
    );
    assert_eq!(outcomes[&3].code, tonic::Code::NotFound, "{outcomes:?}");
    assert_mentions(&outcomes[&3].message, "Message not found");
    assert!(outcomes[&2].committed_at.is_none() && outcomes[&3].committed_at.is_none());

    assert_eq!(ids_of(db, names, names.table).await, [1, 2, 4]);
    assert_eq!(
        ids_of(db, names, names.queue).await,
        [2],
        "message 1 acked, 2 sent, 3 not sent (its group failed)"
    );
    let note = format!(
        "SELECT {} FROM {} WHERE {} = 4",
        names.note, names.table, names.id
    );
    let rows = query(db.client(), Statement::builder(&note).build())
        .await
        .expect("the note");
    assert_eq!(rows[0].get::<String>(0usize).expect("note"), "four!");

    // The sent message is delivered as any other.
    let receive = match names.queue {
        "q" => "SELECT payload FROM spanner.receive_q(1, NULL, '10s')".to_owned(),
        queue => format!("SELECT Payload FROM RECEIVE_{queue}(max_duration => '10s')"),
    };
    let mut receiver = Receiver::open(db, &receive)
        .await
        .unwrap_or_else(|e| panic!("{receive}: {}", chain(&e)));
    let delivery = receiver
        .expect_next(
            std::time::Duration::from_secs(10),
            "the message sent by the batch write",
        )
        .await;
    assert_eq!(delivery.row.get::<String>(0usize).expect("payload"), "two");
}

#[tokio::test]
async fn batch_write_groups_apply_independently_with_sends_and_acks() {
    let db = database(&[SIMPLE_QUEUE, ORDERS]).await;
    groups_apply_independently(&db, &GOOGLE_SQL).await;
}

#[tokio::test]
async fn batch_write_groups_apply_independently_in_postgresql() {
    let db = pg_database(&[PG_SIMPLE_QUEUE, PG_ORDERS]).await;
    groups_apply_independently(&db, &POSTGRESQL).await;
}

/// A request without groups, or on an unknown database, is the call's error; a group naming a
/// missing queue fails alone.
#[tokio::test]
async fn batch_write_refuses_empty_requests_and_reports_unknown_queues_per_group() {
    let db = database(&[ORDERS]).await;
    let raw = Raw::connect(&db).await;
    let error = batch_write(&raw, Vec::new()).await.expect_err("no groups");
    assert_eq!(error.code(), tonic::Code::InvalidArgument, "{error:?}");

    let outcomes = batch_write(
        &raw,
        vec![
            group(vec![send_now("Missing", 1, "x")]),
            group(vec![order(&GOOGLE_SQL, 1, "one")]),
        ],
    )
    .await
    .expect("BatchWrite");
    assert_eq!(outcomes[&0].code, tonic::Code::NotFound, "{outcomes:?}");
    assert_mentions(&outcomes[&0].message, "Queue not found");
    assert_eq!(outcomes[&1].code, tonic::Code::Ok, "{outcomes:?}");
    assert_eq!(ids(&db, "Orders").await, [1]);
}

/// The official Rust client's batch write (it has no `Send`/`Ack` builders: plain tables), on a
/// multiplexed session as that client uses: one response per group, the failing group alone
/// not applied.
#[tokio::test]
async fn official_rust_client_batch_write() {
    let db = database(&[ORDERS]).await;
    let row = |id: i64, note: &str| {
        ClientMutation::new_insert_builder("Orders")
            .set("Id")
            .to(id)
            .set("Note")
            .to(note.to_owned())
            .build()
    };
    let groups = vec![
        MutationGroup::new(vec![row(1, "one"), row(2, "two")]),
        MutationGroup::new(vec![row(3, "three"), row(1, "duplicate")]),
        MutationGroup::new(vec![row(4, "four")]),
    ];
    let mut stream = db
        .client()
        .batch_write_transaction()
        .build()
        .execute_streaming(groups)
        .await
        .expect("batch write");
    let mut codes = BTreeMap::new();
    while let Some(response) = stream.next().await {
        let response = response.unwrap_or_else(|e| panic!("batch write: {}", chain(&e)));
        let code = response.status.as_ref().map_or(0, |s| s.code);
        for index in response.indexes {
            assert!(codes.insert(index, code).is_none(), "group {index} twice");
        }
    }
    assert_eq!(
        codes,
        BTreeMap::from([
            (0, Code::Ok as i32),
            (1, Code::AlreadyExists as i32),
            (2, Code::Ok as i32)
        ])
    );
    assert_eq!(ids(&db, "Orders").await, [1, 2, 4]);
}
