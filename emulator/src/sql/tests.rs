//! Classification of queue function queries and DML.

use std::time::Duration;

use super::*;

#[test]
fn identifiers_are_found_as_tokens() {
    let g = Dialect::GoogleSql;
    assert!(names_identifier(
        "SELECT * FROM jobs WHERE x = 1",
        g,
        "Jobs"
    ));
    assert!(names_identifier("SELECT * FROM `Jobs`", g, "Jobs"));
    assert!(!names_identifier("SELECT 'Jobs' AS Jobsite", g, "Jobs"));
    assert!(!names_identifier(
        "INSERT INTO Effects (Id) VALUES (@id)",
        g,
        "Jobs"
    ));
}

#[test]
fn assert_rows_modified_is_stripped_from_postgresql_dml_only() {
    let pg = Dialect::PostgreSql;
    assert_eq!(
        strip_assert_rows_modified(
            "DELETE FROM q WHERE userid = $1 AND messageid = $2 ASSERT_ROWS_MODIFIED 1;",
            pg
        ),
        Some((
            "DELETE FROM q WHERE userid = $1 AND messageid = $2".to_owned(),
            1
        ))
    );
    assert_eq!(
        strip_assert_rows_modified("DELETE FROM q WHERE id = 1 assert_rows_modified 2", pg),
        Some(("DELETE FROM q WHERE id = 1".to_owned(), 2))
    );
    // Inside a literal, or in GoogleSQL (the backend supports it there): untouched.
    assert_eq!(
        strip_assert_rows_modified("DELETE FROM q WHERE note = 'ASSERT_ROWS_MODIFIED 1'", pg),
        None
    );
    assert_eq!(
        strip_assert_rows_modified(
            "DELETE FROM Q WHERE Id = 1 ASSERT_ROWS_MODIFIED 1",
            Dialect::GoogleSql
        ),
        None
    );
}

/// Classifies a GoogleSQL statement that must classify without error.
fn ok(sql: &str) -> Classified {
    classify(sql, Dialect::GoogleSql).unwrap_or_else(|e| panic!("{sql}: {e}"))
}

/// The error of classifying a GoogleSQL statement.
fn err(sql: &str) -> SqlError {
    match classify(sql, Dialect::GoogleSql) {
        Ok(c) => panic!("{sql} classified as {c:?}"),
        Err(e) => e,
    }
}

/// Classifies a statement that must be a receive query.
fn receive(sql: &str) -> ReceiveQuery {
    match ok(sql) {
        Classified::Receive(q) => q,
        other => panic!("{sql}: {other:?}"),
    }
}

/// Classifies a statement that must be a renew query.
fn renew(sql: &str) -> RenewQuery {
    match ok(sql) {
        Classified::RenewLease(q) => q,
        other => panic!("{sql}: {other:?}"),
    }
}

/// A column list projection.
fn cols(names: &[&str]) -> Projection {
    Projection::Columns(names.iter().map(|n| (*n).to_owned()).collect())
}

/// A DML classification.
fn dml(kind: DmlKind, table: &str) -> Classified {
    Classified::Dml {
        kind,
        table: table.to_owned(),
    }
}

#[test]
fn documented_receive_queries() {
    let q = receive(
        "SELECT UserId, MessageId, Payload, DeliverTime,
                SpannerLeaseExpirationTimestamp, SpannerLeaseToken
         FROM RECEIVE_UserTasks(max_duration=>'20m');",
    );
    assert_eq!(q.queue, "UserTasks");
    assert_eq!(
        q.projection,
        cols(&[
            "UserId",
            "MessageId",
            "Payload",
            "DeliverTime",
            "SpannerLeaseExpirationTimestamp",
            "SpannerLeaseToken"
        ])
    );
    assert_eq!(
        q.max_duration,
        Some(ArgValue::Literal(Duration::from_secs(20 * 60)))
    );
    assert_eq!(q.max_batch_size, None);
    assert_eq!(q.filter, None);

    let q = receive(
        "SELECT UserId, MessageId, Payload, DeliverTime,
                SpannerLeaseExpirationTimestamp, SpannerLeaseToken,
                SpannerLastBatchMessage -- Special boolean column returns TRUE if the
                                        -- last message is in a batch.
         FROM RECEIVE_UserTasks(max_duration=>'20m', max_batch_size=>20)",
    );
    assert_eq!(q.max_batch_size, Some(ArgValue::Literal(20)));
    assert!(matches!(&q.projection, Projection::Columns(c) if c.len() == 7));

    let q = receive("SELECT * FROM RECEIVE_UserTasks(max_duration=>'20m')");
    assert_eq!(q.projection, Projection::All);
}

#[test]
fn receive_arguments() {
    let q = receive(
        "select * from receive_Q(MAX_BATCH_SIZE => @n, Max_Duration => @d, priority => NULL)",
    );
    assert_eq!(q.queue, "Q");
    assert_eq!(q.max_duration, Some(ArgValue::Param("d".to_owned())));
    assert_eq!(q.max_batch_size, Some(ArgValue::Param("n".to_owned())));
    assert_eq!(q.priority, None);
    let q = receive(
        "SELECT * FROM RECEIVE_Q(max_duration => NULL, max_batch_size => NULL, priority => 2)",
    );
    assert_eq!((q.max_duration, q.max_batch_size), (None, None));
    assert_eq!(q.priority, Some(ArgValue::Literal(2)));
    let q = receive("SELECT * FROM RECEIVE_Q()");
    assert_eq!(q.max_duration, None);
    let q = receive("SELECT * FROM RECEIVE_Q(max_duration => \"1m30s\", max_batch_size => 0x10)");
    assert_eq!(
        q.max_duration,
        Some(ArgValue::Literal(Duration::from_secs(90)))
    );
    assert_eq!(q.max_batch_size, Some(ArgValue::Literal(16)));
}

#[test]
fn receive_argument_errors() {
    let cases: &[(&str, &str)] = &[
        ("SELECT * FROM RECEIVE_Q('20m')", "positional"),
        (
            "SELECT * FROM RECEIVE_Q(max_duration => '20m', 20)",
            "positional",
        ),
        ("SELECT * FROM RECEIVE_Q(timeout => '20m')", "unknown"),
        (
            "SELECT * FROM RECEIVE_Q(max_duration => '1m', MAX_DURATION => '2m')",
            "duplicate",
        ),
        ("SELECT * FROM RECEIVE_Q(max_duration => 20)", "invalid"),
        ("SELECT * FROM RECEIVE_Q(max_duration => '20')", "invalid"),
        ("SELECT * FROM RECEIVE_Q(max_duration => '0s')", "invalid"),
        ("SELECT * FROM RECEIVE_Q(max_duration => '-5s')", "invalid"),
        (
            "SELECT * FROM RECEIVE_Q(max_duration => INTERVAL 5 MINUTE)",
            "invalid",
        ),
        ("SELECT * FROM RECEIVE_Q(max_batch_size => 0)", "invalid"),
        ("SELECT * FROM RECEIVE_Q(max_batch_size => -3)", "invalid"),
        ("SELECT * FROM RECEIVE_Q(max_batch_size => '20')", "invalid"),
        ("SELECT * FROM RECEIVE_Q(max_batch_size => 1.5)", "invalid"),
        (
            "SELECT * FROM RECEIVE_Q(max_batch_size => 99999999999999999999)",
            "invalid",
        ),
        ("SELECT * FROM RECEIVE_Q(priority => 'HIGH')", "invalid"),
    ];
    for (sql, kind) in cases {
        let e = err(sql);
        let matches = match *kind {
            "positional" => matches!(e, SqlError::PositionalArgument { .. }),
            "unknown" => matches!(e, SqlError::UnknownArgument { .. }),
            "duplicate" => matches!(e, SqlError::DuplicateArgument { .. }),
            _ => matches!(e, SqlError::InvalidArgument { .. }),
        };
        assert!(matches, "{sql}: {e:?}");
        assert_eq!(e.code(), SqlErrorCode::InvalidArgument, "{sql}");
        assert!(e.to_string().contains("RECEIVE_Q"), "{sql}: {e}");
    }
}

#[test]
fn projections_aliases_hints_and_filters() {
    let q = receive(
        "SELECT r.Payload, r.`UserId`, SpannerLeaseToken, FROM RECEIVE_Q(max_duration => '1m') AS r",
    );
    assert_eq!(
        q.projection,
        cols(&["Payload", "UserId", "SpannerLeaseToken"])
    );
    let q = receive(
        "SELECT m.* FROM RECEIVE_Q(max_duration => '1m') m WHERE m.UserId = 5 AND Payload IS NOT NULL;",
    );
    assert_eq!(q.projection, Projection::All);
    assert_eq!(
        q.filter.as_deref(),
        Some("m.UserId = 5 AND Payload IS NOT NULL")
    );
    let q = receive("SELECT RECEIVE_Q.Payload FROM RECEIVE_Q(max_duration => '1m')");
    assert_eq!(q.projection, cols(&["Payload"]));
    let q = receive(
        "@{USE_ADDITIONAL_PARALLELISM=TRUE} /* c */ SELECT * FROM RECEIVE_Q(max_duration => '1m') \
         @{FORCE_INDEX=_BASE_TABLE} WHERE Payload = b'x' -- trailing comment\n",
    );
    assert_eq!(q.filter.as_deref(), Some("Payload = b'x'"));
    let q = receive("SELECT * FROM `RECEIVE_Odd Name`(max_duration => '1m')");
    assert_eq!(q.queue, "Odd Name");
    assert_eq!(
        err("SELECT x.Payload FROM RECEIVE_Q(max_duration => '1m') AS r").code(),
        SqlErrorCode::InvalidArgument
    );
}

#[test]
fn unsupported_shapes_are_refused() {
    for sql in [
        "SELECT Payload || 'x' FROM RECEIVE_Q(max_duration => '1m')",
        "SELECT Payload AS p FROM RECEIVE_Q(max_duration => '1m')",
        "SELECT COUNT(*) FROM RECEIVE_Q(max_duration => '1m')",
        "SELECT DISTINCT Payload FROM RECEIVE_Q(max_duration => '1m')",
        "SELECT * EXCEPT (Payload) FROM RECEIVE_Q(max_duration => '1m')",
        "SELECT * FROM RECEIVE_Q(max_duration => '1m') ORDER BY DeliverTime",
        "SELECT * FROM RECEIVE_Q(max_duration => '1m') LIMIT 5",
        "SELECT * FROM RECEIVE_Q(max_duration => '1m') r JOIN Users u ON r.UserId = u.UserId",
        "SELECT * FROM Users, RECEIVE_Q(max_duration => '1m')",
        "SELECT * FROM (SELECT * FROM RECEIVE_Q(max_duration => '1m'))",
        "WITH r AS (SELECT * FROM RECEIVE_Q(max_duration => '1m')) SELECT * FROM r",
        "SELECT (SELECT COUNT(*) FROM RECEIVE_Q(max_duration => '1m'))",
        "SELECT * FROM RECEIVE_Q(max_duration => '1m') UNION ALL SELECT * FROM RECEIVE_Q(max_duration => '1m')",
        "INSERT INTO T SELECT * FROM RECEIVE_Q(max_duration => '1m')",
        "SELECT * FROM RECEIVE_Q(max_duration => '1m'); SELECT 1",
        "SELECT * FROM RENEWLEASE_Q(['a']) WHERE SpannerNewLeaseToken IS NULL",
    ] {
        let e = err(sql);
        assert!(matches!(e, SqlError::Unsupported { .. }), "{sql}: {e:?}");
        assert_eq!(e.code(), SqlErrorCode::Unimplemented);
        assert!(
            e.to_string()
                .contains("not supported by the spanner-queues emulator")
        );
    }
}

#[test]
fn renew_lease_forms() {
    let r = renew("SELECT * FROM RENEWLEASE_UserTasks(lease_tokens => ['token1', 'token2'])");
    assert_eq!(r.queue, "UserTasks");
    assert_eq!(r.projection, Projection::All);
    assert_eq!(
        r.tokens,
        TokensArg::Literals(vec!["token1".to_owned(), "token2".to_owned()])
    );
    let r = renew("SELECT * FROM RENEWLEASE_UserTasks(lease_tokens => [@token1])");
    assert_eq!(r.tokens, TokensArg::Params(vec!["token1".to_owned()]));
    let r = renew("SELECT * FROM RENEWLEASE_ReportQueue(['tok'])");
    assert_eq!(r.queue, "ReportQueue");
    assert_eq!(r.tokens, TokensArg::Literals(vec!["tok".to_owned()]));
    let r = renew("select SpannerNewLeaseToken from renewlease_q(@tokens)");
    assert_eq!(r.projection, cols(&["SpannerNewLeaseToken"]));
    assert_eq!(r.tokens, TokensArg::Param("tokens".to_owned()));
    let r = renew(
        "SELECT * FROM RENEWLEASE_Q(LEASE_TOKENS => ARRAY<STRING>['a', r'b\\c', b'x', NULL])",
    );
    assert_eq!(
        r.tokens,
        TokensArg::Literals(vec![
            "a".to_owned(),
            "b\\c".to_owned(),
            "x".to_owned(),
            String::new()
        ])
    );
    let r = renew("SELECT * FROM RENEWLEASE_Q(lease_tokens => ['a', @b])");
    assert_eq!(
        r.tokens,
        TokensArg::Mixed(vec![
            ArgValue::Literal("a".to_owned()),
            ArgValue::Param("b".to_owned())
        ])
    );
    let r = renew("SELECT * FROM RENEWLEASE_Q(lease_tokens => [])");
    assert_eq!(r.tokens, TokensArg::Literals(Vec::new()));
    let r = renew("SELECT * FROM RENEWLEASE_Q(lease_tokens => ARRAY['a'])");
    assert_eq!(r.tokens, TokensArg::Literals(vec!["a".to_owned()]));
}

#[test]
fn renew_lease_errors() {
    for (sql, check) in [
        ("SELECT * FROM RENEWLEASE_Q()", "missing"),
        ("SELECT * FROM RENEWLEASE_Q(tokens => ['a'])", "unknown"),
        ("SELECT * FROM RENEWLEASE_Q(lease_tokens => 'a')", "invalid"),
        (
            "SELECT * FROM RENEWLEASE_Q(lease_tokens => [1, 2])",
            "invalid",
        ),
        ("SELECT * FROM RENEWLEASE_Q(['a'], ['b'])", "query"),
    ] {
        let e = err(sql);
        let matches = match check {
            "missing" => matches!(e, SqlError::MissingArgument { .. }),
            "unknown" => matches!(e, SqlError::UnknownArgument { .. }),
            "invalid" => matches!(e, SqlError::InvalidArgument { .. }),
            _ => matches!(e, SqlError::InvalidQuery { .. }),
        };
        assert!(matches, "{sql}: {e:?}");
        assert_eq!(e.code(), SqlErrorCode::InvalidArgument);
    }
}

#[test]
fn dml_classification() {
    let cases = [
        (
            "INSERT INTO UserTasks (UserId, MessageId, Payload) VALUES (1, 'a', b'x')",
            DmlKind::Insert,
            "UserTasks",
        ),
        (
            "insert UserTasks (UserId) VALUES (1)",
            DmlKind::Insert,
            "UserTasks",
        ),
        (
            "INSERT OR UPDATE INTO T (A) VALUES (1)",
            DmlKind::InsertOrUpdate,
            "T",
        ),
        (
            "INSERT OR IGNORE T (A) VALUES (1)",
            DmlKind::InsertOrIgnore,
            "T",
        ),
        (
            "UPDATE `Order` SET A = 1 WHERE TRUE",
            DmlKind::Update,
            "Order",
        ),
        (
            "DELETE FROM UserTasks WHERE UserId = @u AND MessageId = @m ASSERT_ROWS_MODIFIED 1",
            DmlKind::Delete,
            "UserTasks",
        ),
        ("DELETE T WHERE TRUE THEN RETURN *", DmlKind::Delete, "T"),
        (
            "@{PDML_MAX_PARALLELISM=4} -- x\n DELETE FROM sch.T WHERE TRUE",
            DmlKind::Delete,
            "sch.T",
        ),
        (
            "/* RECEIVE_X( */ UPDATE T SET S = 'RECEIVE_Y(' WHERE TRUE",
            DmlKind::Update,
            "T",
        ),
    ];
    for (sql, kind, table) in cases {
        assert_eq!(ok(sql), dml(kind, table), "{sql}");
    }
    for sql in ["INSERT", "INSERT INTO (", "DELETE FROM 'x'"] {
        assert_eq!(ok(sql), Classified::Other, "{sql}");
    }
}

#[test]
fn everything_else_is_other() {
    for sql in [
        "SELECT 1",
        "SELECT * FROM UserTasks",
        "SELECT * FROM Receive_Log WHERE Id = 1",
        "SELECT RECEIVE_COUNT FROM T",
        "SELECT 'RECEIVE_Q(max_duration => 1)' AS s",
        "SELECT * FROM T WHERE s = \"\"\"RENEWLEASE_Q(\"\"\"",
        "SELECT x.RECEIVE_Q(1) FROM T x",
        "-- SELECT * FROM RECEIVE_Q(max_duration => '1m')\nSELECT 1",
        "WITH t AS (SELECT 1) SELECT * FROM t",
        "SELECT * FROM RECEIVE_(max_duration => '1m')",
        "SELECT 'unterminated RECEIVE_Q(",
        "CALL cancel_query('1')",
        "",
    ] {
        assert_eq!(ok(sql), Classified::Other, "{sql}");
    }
}

#[test]
fn postgres_dialect() {
    let pg = |sql: &str| classify(sql, Dialect::PostgreSql);
    let Ok(Classified::Receive(q)) = pg("SELECT * FROM spanner.receive_usertasks(20, NULL, '20m')")
    else {
        panic!("positional receive");
    };
    assert_eq!(q.queue, "usertasks");
    assert_eq!(q.max_batch_size, Some(ArgValue::Literal(20)));
    assert_eq!(
        q.max_duration,
        Some(ArgValue::Literal(Duration::from_secs(1200)))
    );
    let Ok(Classified::Receive(q)) = pg(
        "SELECT userid, \"Payload\" FROM SPANNER.RECEIVE_UserTasks(max_batch_size=>NULL, priority=>NULL, max_duration=>$1)",
    ) else {
        panic!("named receive");
    };
    assert_eq!(q.queue, "usertasks");
    assert_eq!(q.projection, cols(&["userid", "Payload"]));
    assert_eq!(q.max_duration, Some(ArgValue::Param("p1".to_owned())));
    let Ok(Classified::RenewLease(r)) =
        pg("SELECT * FROM spanner.renewlease_usertasks(lease_tokens => ARRAY['token1', 'token2'])")
    else {
        panic!("renew");
    };
    assert_eq!(
        r.tokens,
        TokensArg::Literals(vec!["token1".to_owned(), "token2".to_owned()])
    );
    assert!(matches!(
        pg("SELECT * FROM spanner.receive_q(1, 2, '1m', 4)"),
        Err(SqlError::InvalidQuery { .. })
    ));
    assert_eq!(pg("SELECT * FROM receive_q(1)"), Ok(Classified::Other));
    assert_eq!(
        pg("INSERT INTO UserTasks (userid, payload) VALUES ($1, $2)"),
        Ok(dml(DmlKind::Insert, "usertasks"))
    );
    assert_eq!(
        pg("INSERT INTO \"Q\" (id) VALUES (1) ON CONFLICT (id) DO NOTHING"),
        Ok(dml(DmlKind::InsertOrIgnore, "Q"))
    );
    assert_eq!(
        pg("INSERT INTO q (id) VALUES (1) ON CONFLICT (id) DO UPDATE SET id = excluded.id"),
        Ok(dml(DmlKind::InsertOrUpdate, "q"))
    );
    assert_eq!(
        pg("DELETE FROM ONLY public.q WHERE id = $1"),
        Ok(dml(DmlKind::Delete, "public.q"))
    );
    assert_eq!(pg("UPDATE q SET id = 2"), Ok(dml(DmlKind::Update, "q")));
    assert_eq!(pg("DELETE q"), Ok(Classified::Other));
}

#[test]
fn durations() {
    let cases = [
        ("20m", Duration::from_secs(1200)),
        ("1m30s", Duration::from_secs(90)),
        ("10s", Duration::from_secs(10)),
        ("500ms", Duration::from_millis(500)),
        ("1h", Duration::from_secs(3600)),
        ("1.5s", Duration::from_millis(1500)),
        (".5s", Duration::from_millis(500)),
        ("1h2m3s4ms5us6ns", Duration::new(3723, 4_005_006)),
        ("250µs", Duration::from_micros(250)),
        ("+2s", Duration::from_secs(2)),
        ("1.0000000001s", Duration::from_secs(1)),
    ];
    for (s, want) in cases {
        assert_eq!(parse_duration(s), Ok(want), "{s}");
    }
    for s in [
        "",
        "20",
        "m",
        "0",
        "0s",
        "-1s",
        "1 m",
        "1d",
        "1.s2",
        "20M",
        "1e3s",
        "99999999999999999999h",
    ] {
        let e = parse_duration(s).expect_err(s);
        assert!(matches!(e, SqlError::InvalidDuration { .. }), "{s}");
    }
    // "1." is a valid Go duration number ("1.s" = 1s).
    assert_eq!(parse_duration("1.s"), Ok(Duration::from_secs(1)));
}
