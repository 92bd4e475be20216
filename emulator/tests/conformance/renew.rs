//! Lease renewal: `RENEWLEASE_<Q>` (reference §4).

use std::time::{Duration, SystemTime};

use google_cloud_gax::error::rpc::Code;
use google_cloud_spanner::statement::Statement;
use google_cloud_spanner::transaction::TimestampBound;

use crate::support::*;

const GUARD: Duration = Duration::from_secs(60);

/// The documented literal form; about 10 s from now; tokens rotate and the old one stops
/// working [C, S2; rotation S16, consistent with the Old/New columns].
#[tokio::test]
async fn renew_with_a_literal_array_extends_leases_and_rotates_tokens() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "a"), send_now("Q", 2, "b")]).await;
    let got = receive_n(&db, "Q", 2, GUARD).await;
    let (t1, t2) = (got[0].token.clone(), got[1].token.clone());

    let before = SystemTime::now();
    let sql = format!("SELECT * FROM RENEWLEASE_Q(lease_tokens => ['{t1}', '{t2}'])");
    let mut rs = db
        .client()
        .single_use()
        .build()
        .execute_query(Statement::builder(&sql).build())
        .await
        .expect("RENEWLEASE");
    assert_eq!(
        rs.metadata().column_names(),
        [
            "SpannerOldLeaseToken",
            "SpannerNewLeaseToken",
            "SpannerLeaseExpirationTimestamp"
        ]
    );
    let mut rows = Vec::new();
    while let Some(row) = rs.next().await {
        rows.push(row.expect("row"));
    }
    let after = SystemTime::now();
    assert_eq!(rows.len(), 2);
    let renewed = renewals(&db, Statement::builder(&sql).build())
        .await
        .expect("no rows now: the tokens were rotated");
    assert!(
        renewed.is_empty(),
        "superseded tokens must not renew again: {renewed:?}"
    );

    let mut new_tokens = Vec::new();
    for row in rows {
        let old: String = row.get("SpannerOldLeaseToken").expect("old");
        let new: String = row.get("SpannerNewLeaseToken").expect("new token");
        let expires: SystemTime = row.get("SpannerLeaseExpirationTimestamp").expect("expiry");
        assert!(old == t1 || old == t2, "unknown old token {old}");
        assert_ne!(new, old, "tokens rotate");
        assert!(!new.is_empty());
        assert_lease_about_10s(expires, before, after);
        new_tokens.push(new);
    }
    let renewed = renew(&db, "Q", &new_tokens).await.expect("RENEWLEASE");
    assert_eq!(renewed.len(), 2, "the new tokens renew: {renewed:?}");
}

/// Array parameter [I: the reference's Go sample binds elements; a whole array is the natural
/// form], `[@token]` elements [C, S2 Go sample], and the positional form [C, S4].
#[tokio::test]
async fn renew_with_parameters_and_the_positional_form() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "a")]).await;
    let got = receive_n(&db, "Q", 1, GUARD).await;
    let mut token = got[0].token.clone();

    // lease_tokens => @tokens
    let renewed = renew(&db, "Q", std::slice::from_ref(&token))
        .await
        .expect("array parameter");
    token = renewed[&token].0.clone().expect("renewed");

    // lease_tokens => [@token1]
    let renewed = renewals(
        &db,
        Statement::builder("SELECT * FROM RENEWLEASE_Q(lease_tokens => [@token1])")
            .add_param("token1", token.clone())
            .build(),
    )
    .await
    .expect("element parameter");
    token = renewed[&token].0.clone().expect("renewed");

    // RENEWLEASE_Q([@leaseToken])
    let renewed = renewals(
        &db,
        Statement::builder("SELECT * FROM RENEWLEASE_Q([@leaseToken])")
            .add_param("leaseToken", token.clone())
            .build(),
    )
    .await
    .expect("positional form");
    assert!(renewed[&token].0.is_some());
}

/// Unparseable tokens → no row [C]; nor tokens of another queue, nor an empty list.
#[tokio::test]
async fn unparseable_foreign_and_missing_tokens_have_no_row() {
    let db = database(&[
        SIMPLE_QUEUE,
        &SIMPLE_QUEUE.replace("QUEUE Q ", "QUEUE Other "),
    ])
    .await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Other", 1, "a")]).await;
    let got = receive_n(&db, "Other", 1, GUARD).await;

    let renewed = renew(
        &db,
        "Q",
        &[
            "not a token".to_owned(),
            String::new(),
            "AAAAAAAAAAAAAAAAAAAAAA".to_owned(),
            got[0].token.clone(),
        ],
    )
    .await
    .expect("RENEWLEASE");
    assert!(renewed.is_empty(), "{renewed:?}");
    let renewed = renew(&db, "Q", &[]).await.expect("an empty list");
    assert!(renewed.is_empty());
    // The token still works on its own queue.
    let renewed = renew(&db, "Other", std::slice::from_ref(&got[0].token))
        .await
        .expect("RENEWLEASE");
    assert_eq!(renewed.len(), 1);
}

/// "Un-renewable tokens (e.g. the message was already acked but the token has not expired) → a
/// row with SpannerNewLeaseToken = NULL" [C, S2].
#[tokio::test]
async fn a_live_token_of_an_acked_message_renews_to_null() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "a"), send_now("Q", 2, "b")]).await;
    let got = receive_n(&db, "Q", 2, GUARD).await;
    let acked = got.iter().find(|d| d.id == Some(1)).expect("message 1");
    let kept = got.iter().find(|d| d.id == Some(2)).expect("message 2");
    commit_ok(&raw, vec![ack("Q", vec![int(1)], false)]).await;
    dml1(&db, "DELETE FROM Q WHERE Id = 2 ASSERT_ROWS_MODIFIED 1")
        .await
        .expect("ack by DML");

    let renewed = renew(&db, "Q", &[acked.token.clone(), kept.token.clone()])
        .await
        .expect("RENEWLEASE");
    assert_eq!(renewed.len(), 2, "{renewed:?}");
    for token in [&acked.token, &kept.token] {
        assert_eq!(renewed[token].0, None, "acked: no new token");
    }
}

/// A renewed lease keeps the message from other receivers until the new expiration.
#[tokio::test]
async fn a_renewed_lease_keeps_the_message_from_other_receivers() {
    let db = database(&[SIMPLE_QUEUE]).await;
    let raw = Raw::connect(&db).await;
    commit_ok(&raw, vec![send_now("Q", 1, "long job")]).await;
    let first = receive_n(&db, "Q", 1, GUARD).await.remove(0);
    let mut other = Receiver::open(&db, &receive_sql("Q", "60s", None))
        .await
        .expect("a second receiver");

    // Renew 4 s before the lease would end (the scenario, not synchronisation).
    let renew_at = first.expires - Duration::from_secs(4);
    if let Ok(wait) = renew_at.duration_since(SystemTime::now()) {
        tokio::time::sleep(wait).await;
    }
    let renewed = renew(&db, "Q", std::slice::from_ref(&first.token))
        .await
        .expect("RENEWLEASE");
    let (new_token, extended) = renewed
        .get(&first.token)
        .cloned()
        .expect("the live token renews");
    assert!(new_token.is_some());
    assert!(
        extended > first.expires,
        "renewal must extend the lease: {extended:?} <= {:?}",
        first.expires
    );

    let second = other
        .expect_next(GUARD, "delivery after the renewed lease")
        .await;
    assert_eq!(second.id, Some(1));
    assert!(
        second.received_at >= extended,
        "delivered to another receiver at {:?}, while the renewed lease ran until {extended:?}",
        second.received_at
    );
}

#[tokio::test]
async fn renew_errors() {
    let db = database(&[SIMPLE_QUEUE]).await;
    // Stale read.
    let result = db
        .client()
        .single_use()
        .set_timestamp_bound(TimestampBound::exact_staleness(Duration::from_secs(10)))
        .build()
        .execute_query(
            Statement::builder("SELECT * FROM RENEWLEASE_Q(lease_tokens => ['x'])").build(),
        )
        .await;
    let error = match result {
        Err(e) => e,
        Ok(mut rs) => match rs.next().await {
            Some(Err(e)) => e,
            other => panic!("stale RENEWLEASE: expected an error, got {other:?}"),
        },
    };
    assert_eq!(
        code(&error),
        Some(Code::InvalidArgument),
        "{}",
        chain(&error)
    );

    for (sql, mentions) in [
        (
            "SELECT * FROM RENEWLEASE_Nope(lease_tokens => ['x'])",
            "RENEWLEASE_Nope",
        ),
        (
            "SELECT * FROM RENEWLEASE_Q(lease_tokens => 5)",
            "lease_tokens",
        ),
    ] {
        let error = query(db.client(), Statement::builder(sql).build())
            .await
            .expect_err(sql);
        assert_eq!(
            code(&error),
            Some(Code::InvalidArgument),
            "{sql}: {}",
            chain(&error)
        );
        assert_mentions(&message(&error), mentions);
    }
}
