//! The rewrite, statement by statement: what it writes and what it refuses.

use super::terms::{Number, simple_pairs};
use super::*;
fn sql(statement: &str) -> String {
    rewrite(statement, &[]).sql
}

fn rewrite(statement: &str, interval_params: &[&str]) -> Translated {
    translate(statement, interval_params, &[])
        .unwrap_or_else(|e| panic!("{statement}: {e}"))
        .unwrap_or_else(|| panic!("{statement}: left alone"))
}

/// The error's text (panics when the statement is accepted).
fn refused(statement: &str) -> String {
    match translate(statement, &[], &[]) {
        Err(e) => e.to_string(),
        Ok(t) => panic!("{statement}: accepted as {t:?}"),
    }
}

#[test]
fn statements_without_intervals_are_left_alone() {
    for statement in [
        "SELECT 1",
        "INSERT INTO q (id, payload) VALUES ($1, $2)",
        "SELECT spanner.timestamptz_add(now(), '5 minutes')",
        "SELECT spanner.timestamptz_add(CURRENT_TIMESTAMP, '5 microseconds')",
        "SELECT a + b - c * 2 FROM t WHERE x > now()",
        "SELECT 'a' || 'b'",
        // An identifier named interval, and a string that says interval.
        "SELECT interval FROM t",
        "SELECT \"interval\" + 1 FROM t",
        "SELECT 'interval ''1 day''' FROM t",
        "SELECT x - 'abc' FROM t",
        // Does not tokenize: the backend judges it.
        "SELECT interval '5 minutes",
    ] {
        assert_eq!(translate(statement, &[], &[]), Ok(None), "{statement}");
    }
}

#[test]
fn interval_literals_added_to_now_need_no_guard() {
    assert_eq!(
        sql(
            "INSERT INTO q (id, payload, deliver_time) VALUES ($1, $2, now() + interval '5 minutes')"
        ),
        "INSERT INTO q (id, payload, deliver_time) VALUES ($1, $2, \
         spanner.timestamptz_add(now(), '5 minutes'))"
    );
    assert_eq!(
        sql("SELECT CURRENT_TIMESTAMP - INTERVAL '1 hour 30 minutes'"),
        "SELECT spanner.timestamptz_subtract(CURRENT_TIMESTAMP, '1 hour 30 minutes')"
    );
    assert_eq!(
        sql("SELECT now() + '5 minutes'::interval, now() - CAST('2 days' AS interval)"),
        "SELECT spanner.timestamptz_add(now(), '5 minutes'), \
         spanner.timestamptz_subtract(now(), '2 days')"
    );
    assert_eq!(
        sql("SELECT '2026-01-01T00:00:00Z'::timestamptz + interval '1 day'"),
        "SELECT spanner.timestamptz_add('2026-01-01T00:00:00Z'::TIMESTAMPTZ, '1 day')"
    );
    assert_eq!(
        sql("SELECT timestamptz '2026-01-01T00:00:00Z' + interval '1 day'"),
        "SELECT spanner.timestamptz_add(TIMESTAMPTZ '2026-01-01T00:00:00Z', '1 day')"
    );
}

#[test]
fn operands_that_may_be_null_are_guarded() {
    assert_eq!(
        sql(
            "INSERT INTO q (id, payload, deliver_time) VALUES ($1, $2, $3::timestamptz + interval '30 seconds')"
        ),
        "INSERT INTO q (id, payload, deliver_time) VALUES ($1, $2, CASE WHEN \
         ($3::TIMESTAMPTZ) IS NULL THEN NULL ELSE \
         spanner.timestamptz_add($3::TIMESTAMPTZ, '30 seconds') END)"
    );
    assert_eq!(
        sql("UPDATE t SET ts = ts + interval '1 hour' WHERE id = 1"),
        "UPDATE t SET ts = CASE WHEN (ts) IS NULL THEN NULL ELSE \
         spanner.timestamptz_add(ts, '1 hour') END WHERE id = 1"
    );
    // A cast parameter: both operands may be NULL.
    assert_eq!(
        sql("SELECT now() + $1::interval"),
        "SELECT CASE WHEN ($1) IS NULL THEN NULL ELSE spanner.timestamptz_add(now(), $1) END"
    );
}

#[test]
fn chains_are_evaluated_left_to_right_with_one_guard() {
    assert_eq!(
        sql("SELECT $1::timestamptz + interval '1 day' - interval '1 hour'"),
        "SELECT CASE WHEN ($1::TIMESTAMPTZ) IS NULL THEN NULL ELSE \
         spanner.timestamptz_subtract(spanner.timestamptz_add($1::TIMESTAMPTZ, '1 day'), \
         '1 hour') END"
    );
    // Intervals before the timestamp are summed as PostgreSQL sums intervals.
    assert_eq!(
        sql("SELECT interval '1 day' + interval '1 month' + now()"),
        "SELECT spanner.timestamptz_add(now(), '1 day 1 month')"
    );
    assert_eq!(
        sql("SELECT now() + (interval '1 hour' + interval '30 minutes')"),
        "SELECT spanner.timestamptz_add(now(), '1 hour 30 minutes')"
    );
    assert_eq!(
        sql("SELECT now() + (interval '1 hour')"),
        "SELECT spanner.timestamptz_add(now(), '1 hour')"
    );
}

#[test]
fn parameters_with_a_value_need_no_guard() {
    let t = translate(
        "SELECT $1::timestamptz + interval '30 seconds', now() + $2",
        &["p2"],
        &["p1", "p2"],
    )
    .expect("supported")
    .expect("rewritten");
    assert_eq!(
        t.sql,
        "SELECT spanner.timestamptz_add($1::TIMESTAMPTZ, '30 seconds'), \
         spanner.timestamptz_add(now(), $2)"
    );
    // The SDK's own scheduled send is left alone when its parameter has a value.
    let sdk = "INSERT INTO q (id, payload, deliver_time) VALUES ($2, $3, \
               spanner.timestamptz_add(CURRENT_TIMESTAMP, $1))";
    assert_eq!(translate(sdk, &[], &["p1", "p2", "p3"]), Ok(None));
}

#[test]
fn written_emulator_calls_are_guarded_when_an_argument_may_be_null() {
    assert_eq!(
        sql("SELECT spanner.timestamptz_add(CURRENT_TIMESTAMP, $1)"),
        "SELECT CASE WHEN ($1) IS NULL THEN NULL ELSE \
         spanner.timestamptz_add(CURRENT_TIMESTAMP, $1) END"
    );
    assert_eq!(
        sql("UPDATE t SET ts = spanner.timestamptz_subtract(ts, '1 day') WHERE id = 1"),
        "UPDATE t SET ts = CASE WHEN (ts) IS NULL THEN NULL ELSE \
         spanner.timestamptz_subtract(ts, '1 day') END WHERE id = 1"
    );
    // Arguments are rewritten first; a computed argument is checked too (conservatively:
    // this one is never NULL).
    assert_eq!(
        sql("SELECT spanner.timestamptz_add(now() + interval '1 day', $1::text)"),
        "SELECT CASE WHEN (spanner.timestamptz_add(now(), '1 day')) IS NULL OR ($1::TEXT) IS \
         NULL THEN NULL ELSE spanner.timestamptz_add(spanner.timestamptz_add(now(), '1 day'), \
         $1::TEXT) END"
    );
}

#[test]
fn unary_minus_flips_the_operation() {
    assert_eq!(
        sql("SELECT now() + - interval '5 minutes'"),
        "SELECT spanner.timestamptz_subtract(now(), '5 minutes')"
    );
    assert_eq!(
        sql("SELECT now() - -interval '5 minutes'"),
        "SELECT spanner.timestamptz_add(now(), '5 minutes')"
    );
}

#[test]
fn chains_end_at_comparisons_keywords_commas_and_parentheses() {
    assert_eq!(
        sql(
            "SELECT id FROM q WHERE deliver_time > now() - interval '1 hour' AND id = 1 ORDER BY id"
        ),
        "SELECT id FROM q WHERE deliver_time > spanner.timestamptz_subtract(now(), '1 hour') \
         AND id = 1 ORDER BY id"
    );
    assert_eq!(
        sql("SELECT 'at ' || now() + interval '1 hour', 2"),
        "SELECT 'at ' || spanner.timestamptz_add(now(), '1 hour'), 2"
    );
    assert_eq!(
        sql("SELECT x FROM t WHERE ts BETWEEN now() AND now() + interval '1 day'"),
        "SELECT x FROM t WHERE ts BETWEEN now() AND spanner.timestamptz_add(now(), '1 day')"
    );
    assert_eq!(
        sql("SELECT CASE WHEN a THEN now() + interval '1 day' ELSE now() END FROM t"),
        "SELECT CASE WHEN a THEN spanner.timestamptz_add(now(), '1 day') ELSE now() END FROM t"
    );
    assert_eq!(
        sql("SELECT coalesce(ts, now()) + interval '1 day' FROM t"),
        "SELECT CASE WHEN (coalesce(ts, now())) IS NULL THEN NULL ELSE \
         spanner.timestamptz_add(coalesce(ts, now()), '1 day') END FROM t"
    );
    assert_eq!(
        sql("SELECT greatest(ts, now() + interval '1 day') FROM t"),
        "SELECT greatest(ts, spanner.timestamptz_add(now(), '1 day')) FROM t"
    );
    // A multi-word type and a trailing alias.
    assert_eq!(
        sql("SELECT $1::timestamp with time zone + interval '1 day' due"),
        "SELECT CASE WHEN ($1::TIMESTAMP WITH TIME ZONE) IS NULL THEN NULL ELSE \
         spanner.timestamptz_add($1::TIMESTAMP WITH TIME ZONE, '1 day') END AS due"
    );
    assert_eq!(
        sql("SELECT now() + interval '1 day' AS due -- comment\n"),
        "SELECT spanner.timestamptz_add(now(), '1 day') AS due -- comment\n"
    );
}

#[test]
fn field_qualifiers_with_a_number() {
    assert_eq!(
        sql("SELECT now() + interval '5' minute"),
        "SELECT spanner.timestamptz_add(now(), '5 minute')"
    );
    assert!(refused("SELECT now() + interval '1:30' hour to minute").contains("field"));
    assert!(refused("SELECT now() + interval '1 day' hour").contains("field"));
}

#[test]
fn make_interval_positional_named_and_computed() {
    assert_eq!(
        sql("SELECT now() + make_interval(0, 0, 0, 1, 2)"),
        "SELECT spanner.timestamptz_add(now(), '0 years 0 months 0 weeks 1 days 2 hours')"
    );
    assert_eq!(
        sql("SELECT now() + make_interval(mins => 5, secs => 1.5)"),
        "SELECT spanner.timestamptz_add(now(), '5 mins 1.5 secs')"
    );
    assert_eq!(
        sql("SELECT now() + make_interval(hours := -2)"),
        "SELECT spanner.timestamptz_add(now(), '-2 hours')"
    );
    assert_eq!(
        sql("SELECT now() + make_interval()"),
        "SELECT spanner.timestamptz_add(now(), '0 secs')"
    );
    assert_eq!(
        sql("SELECT now() + make_interval(days => 1, mins => $1)"),
        "SELECT CASE WHEN (('1 days ' || CAST(($1) AS TEXT) || ' mins')) IS NULL THEN NULL \
         ELSE spanner.timestamptz_add(now(), ('1 days ' || CAST(($1) AS TEXT) || ' mins')) END"
    );
    assert!(refused("SELECT now() + make_interval(minutes => 5)").contains("no argument"));
    assert!(refused("SELECT now() + make_interval(mins => 5, 1)").contains("positional"));
    assert!(refused("SELECT now() + make_interval(1, 2, 3, 4, 5, 6, 7, 8)").contains("at most"));
    assert!(refused("SELECT now() + make_interval(1, years => 2)").contains("twice"));
}

#[test]
fn products_of_simple_literals() {
    assert_eq!(
        sql("SELECT now() + interval '1 hour 30 minutes' * 2"),
        "SELECT spanner.timestamptz_add(now(), '2 hour 60 minutes')"
    );
    assert_eq!(
        sql("SELECT now() + 1.5 * interval '1 hour'"),
        "SELECT spanner.timestamptz_add(now(), '1.5 hour')"
    );
    assert_eq!(
        sql("SELECT now() + $1 * interval '1 minute'"),
        "SELECT CASE WHEN ((CAST(($1) * 1 AS TEXT) || ' minute')) IS NULL THEN NULL ELSE \
         spanner.timestamptz_add(now(), (CAST(($1) * 1 AS TEXT) || ' minute')) END"
    );
    assert!(refused("SELECT now() + interval '01:30:00' * 2").contains("multiplying"));
    assert!(refused("SELECT now() + interval '1 hour' / 2").contains("dividing"));
}

#[test]
fn interval_parameters_become_text() {
    let t = rewrite("SELECT $1::timestamptz + $2", &["p2"]);
    assert_eq!(
        t.sql,
        "SELECT CASE WHEN ($1::TIMESTAMPTZ) IS NULL OR ($2) IS NULL THEN NULL ELSE \
         spanner.timestamptz_add($1::TIMESTAMPTZ, $2) END"
    );
    assert_eq!(t.text_params, ["p2"]);
    let t = rewrite("SELECT now() - $1::interval", &["p1"]);
    assert_eq!(t.text_params, ["p1"]);
    // An interval parameter anywhere else is refused.
    let e = translate("SELECT $1", &["p1"], &[]).expect_err("an interval on its own");
    assert!(e.to_string().contains("$1"), "{e}");
    let e = translate("INSERT INTO t (id, i) VALUES (1, $1)", &["p1"], &[]).expect_err("stored");
    assert!(e.to_string().contains("on its own"), "{e}");
}

#[test]
fn bare_strings_after_a_timestamp_are_intervals() {
    assert_eq!(
        sql("SELECT now() + '5 minutes'"),
        "SELECT spanner.timestamptz_add(now(), '5 minutes')"
    );
    assert_eq!(
        sql("SELECT $1::timestamptz - '1 day'"),
        "SELECT CASE WHEN ($1::TIMESTAMPTZ) IS NULL THEN NULL ELSE \
         spanner.timestamptz_subtract($1::TIMESTAMPTZ, '1 day') END"
    );
    // Not a recognizable timestamp: left alone.
    assert_eq!(
        translate("SELECT ts + '5 minutes' FROM t", &[], &[]),
        Ok(None)
    );
}

#[test]
fn literals_keep_their_quoting() {
    assert_eq!(
        sql("SELECT now() + interval E'5 minutes' + interval $$1 day$$"),
        "SELECT spanner.timestamptz_add(spanner.timestamptz_add(now(), E'5 minutes'), $$1 day$$)"
    );
    // Joined texts are quoted again.
    assert_eq!(
        sql("SELECT interval '1 day' + interval 'it''s' + now()"),
        "SELECT spanner.timestamptz_add(now(), '1 day it''s')"
    );
}

#[test]
fn unsupported_uses_name_the_construct() {
    for (statement, construct, why) in [
        (
            "SELECT interval '1 hour'",
            "interval '1 hour'",
            "on its own",
        ),
        (
            "SELECT '5 minutes'::interval",
            "'5 minutes'::interval",
            "on its own",
        ),
        (
            "SELECT now() - ts > interval '5 minutes' FROM t",
            "interval '5 minutes'",
            "on its own",
        ),
        ("SELECT interval '1 day' - now()", "now()", "subtracting"),
        (
            "SELECT interval '1 day' - interval '1 hour' + now()",
            "interval '1 hour'",
            "negated",
        ),
        (
            "SELECT now() + interval(3) '1 hour'",
            "interval(3) '1 hour'",
            "precision",
        ),
        (
            "SELECT now() + '1 hour'::interval(3)",
            "'1 hour'::interval(3)",
            "precision",
        ),
        (
            "SELECT now() + (interval '1 day' - interval '1 hour')",
            "interval '1 day' - interval '1 hour'",
            "subtracting",
        ),
        (
            "SELECT spanner.timestamptz_add(now(), interval '5 minutes')",
            "interval '5 minutes'",
            "on its own",
        ),
        (
            // Not a statement the parser reads (nor PostgreSQL).
            "SELECT now() + interval '1 hour' later x",
            "select now() + interval '1 hour' later x",
            "cannot read this statement",
        ),
    ] {
        // The construct is quoted as the parser prints it (upper-case keywords and types).
        let message = refused(statement);
        assert!(
            message.to_lowercase().starts_with(construct) && message.contains(why),
            "{statement}: {message}"
        );
        assert!(message.contains("spanner-queues emulator"), "{message}");
    }
}

#[test]
fn long_constructs_are_shortened_in_errors() {
    let long = format!("SELECT interval '{}'", "1 day ".repeat(40));
    let message = refused(&long);
    assert!(message.starts_with("INTERVAL '1 day"), "{message}");
    assert!(message.contains('…'), "{message}");
    assert!(message.len() < 400, "{message}");
}

#[test]
fn text_around_the_statement_is_kept() {
    assert_eq!(
        sql("  /* lead */ SELECT now() + interval '1 day' ; "),
        "  /* lead */ SELECT spanner.timestamptz_add(now(), '1 day') ; "
    );
}

#[test]
fn the_backend_interval_error_is_explained() {
    let explained = explain_unimplemented(BACKEND_NO_INTERVAL).expect("explained");
    assert!(
        explained.contains("timestamptz - timestamptz"),
        "{explained}"
    );
    assert!(explained.ends_with(BACKEND_NO_INTERVAL), "{explained}");
    assert!(
        explain_unimplemented(
            "Postgres function timestamptz_mi(timestamp with time zone, timestamp with time \
             zone) is not supported"
        )
        .is_some()
    );
    assert_eq!(
        explain_unimplemented("Postgres function clock_timestamp() is not supported"),
        None
    );
    assert_eq!(explain_unimplemented("something else"), None);
}

#[test]
fn simple_pairs_parse_numbers_and_units() {
    let pairs = simple_pairs("1 hour 30 minutes").expect("simple");
    assert_eq!(pairs.len(), 2);
    assert_eq!(pairs[1].1, "minutes");
    assert!(simple_pairs("01:30:00").is_none());
    assert!(simple_pairs("2 days ago").is_none());
    assert!(simple_pairs("5").is_none());
    assert!(simple_pairs("").is_none());
    assert_eq!(Number::Int(3).times(Number::Int(4)).as_deref(), Some("12"));
    assert_eq!(
        Number::Float(0.5).times(Number::Int(3)).as_deref(),
        Some("1.5")
    );
}

#[test]
fn a_trailing_assert_rows_modified_and_leading_hints_are_kept_as_written() {
    assert_eq!(
        sql(
            "/*@ USE_ADDITIONAL_PARALLELISM = TRUE */ DELETE FROM q WHERE id = $1 AND \
             deliver_time > now() + interval '1 day'  ASSERT_ROWS_MODIFIED 1;"
        ),
        "/*@ USE_ADDITIONAL_PARALLELISM = TRUE */ DELETE FROM q WHERE id = $1 AND deliver_time > \
         spanner.timestamptz_add(now(), '1 day')  ASSERT_ROWS_MODIFIED 1;"
    );
}

#[test]
fn comments_inside_a_rewritten_statement_are_dropped_and_hints_refused() {
    assert_eq!(
        sql("SELECT /* when */ now() + interval '1 day' -- due\n FROM t"),
        "SELECT spanner.timestamptz_add(now(), '1 day') FROM t"
    );
    let message =
        refused("SELECT x FROM t /*@ FORCE_INDEX=i */ WHERE ts < now() + interval '1 day'");
    assert!(message.contains("statement hint"), "{message}");
    // A statement with nothing to rewrite keeps its hint.
    assert_eq!(
        translate(
            "SELECT x FROM t /*@ FORCE_INDEX=i */ WHERE ts < $1",
            &[],
            &[]
        ),
        Ok(None)
    );
}

/// What the rewrite prints must be PostgreSQL the official emulator reads: quoted names,
/// `$n` parameters, `::` casts, `spanner.` functions, escaped strings, `RETURNING`. (The
/// conformance suite runs statements like these on the official emulator.)
#[test]
fn rewritten_statements_keep_postgresql_syntax() {
    for (statement, printed) in [
        (
            "INSERT INTO \"user\" (\"order\", \"check\", note) VALUES ($1::bigint, \
             $2::timestamptz + interval '1 hour', E'it\\'s') RETURNING \"check\", note",
            "INSERT INTO \"user\" (\"order\", \"check\", note) VALUES ($1::BIGINT, CASE WHEN \
             ($2::TIMESTAMPTZ) IS NULL THEN NULL ELSE spanner.timestamptz_add($2::TIMESTAMPTZ, \
             '1 hour') END, E'it\\'s') RETURNING \"check\", note",
        ),
        (
            "UPDATE \"Table\" SET \"At\" = spanner.pending_commit_timestamp() WHERE \"At\" < \
             now() - interval '1 day' AND tags @> ARRAY['a'] AND note LIKE 'a%'",
            "UPDATE \"Table\" SET \"At\" = spanner.pending_commit_timestamp() WHERE \"At\" < \
             spanner.timestamptz_subtract(now(), '1 day') AND tags @> ARRAY['a'] AND note LIKE \
             'a%'",
        ),
        (
            "SELECT t.id, count(*) AS n FROM t JOIN u ON u.id = t.id WHERE t.at > now() - \
             '1 hour'::interval GROUP BY t.id HAVING count(*) > 1 ORDER BY n DESC LIMIT 10 \
             OFFSET $1",
            "SELECT t.id, count(*) AS n FROM t JOIN u ON u.id = t.id WHERE t.at > \
             spanner.timestamptz_subtract(now(), '1 hour') GROUP BY t.id HAVING count(*) > 1 \
             ORDER BY n DESC LIMIT 10 OFFSET $1",
        ),
        (
            "SELECT x FROM t WHERE x IN (SELECT y FROM u WHERE at < now() + interval '1 day') \
             AND a IS NOT DISTINCT FROM $1::text",
            "SELECT x FROM t WHERE x IN (SELECT y FROM u WHERE at < \
             spanner.timestamptz_add(now(), '1 day')) AND a IS NOT DISTINCT FROM $1::TEXT",
        ),
    ] {
        assert_eq!(sql(statement), printed, "{statement}");
    }
}

#[test]
fn statements_the_parser_cannot_read_go_to_the_backend_unless_they_spell_an_interval() {
    // No interval spelled out: forwarded as written, the backend judges.
    assert_eq!(translate("SELECT now() + 'x' FROM", &[], &[]), Ok(None));
    // Two statements: the backend refuses them as it does.
    assert_eq!(
        translate("SELECT now() + interval '1 day'; SELECT 1", &[], &[]),
        Ok(None)
    );
    let message = refused("SELECT now() + interval '1 day' FROM WHERE");
    assert!(message.contains("cannot read this statement"), "{message}");
}

#[test]
fn interval_as_a_name_is_left_alone() {
    for statement in [
        // A table named interval, bare, quoted and qualified.
        "INSERT INTO interval (id, payload) VALUES ($1, $2)",
        "INSERT INTO Interval (id, payload) VALUES ($1, $2) ASSERT_ROWS_MODIFIED 1",
        "INSERT INTO \"interval\" (id, payload) VALUES ($1, $2)",
        "INSERT INTO public.interval (id, payload) VALUES ($1, $2)",
        "INSERT INTO interval AS i (id) SELECT id FROM interval",
        "UPDATE interval SET payload = $1 WHERE id = $2",
        "UPDATE \"interval\" SET payload = $1 WHERE id = $2",
        "DELETE FROM interval WHERE id = $1",
        "DELETE FROM \"interval\" WHERE id = $1",
        "SELECT * FROM interval",
        "SELECT interval.id FROM interval WHERE interval.id > 1",
        "SELECT * FROM t JOIN interval ON t.id = interval.id",
        // A column and an alias named interval.
        "INSERT INTO t (id, interval) VALUES ($1, $2)",
        "INSERT INTO t (id, \"interval\") VALUES ($1, $2)",
        "UPDATE t SET interval = interval + 1 WHERE interval - 1 > 0",
        "DELETE FROM t WHERE interval IS NULL OR interval BETWEEN 1 AND 2",
        "SELECT id, interval FROM t ORDER BY interval DESC",
        "SELECT t.interval, \"interval\" FROM t",
        "SELECT max(interval), CAST(interval AS text) FROM t",
        "SELECT x AS interval FROM t AS interval",
        "SELECT * FROM (SELECT x AS interval FROM t) s",
        // A table named make_interval.
        "INSERT INTO make_interval (id, payload) VALUES ($1, $2)",
        // Not read by the parser, but spelling out no interval: the backend judges it.
        "TABLE interval",
        "SELECT interval FROM t GROUP BY interval HAVING count(*) > 1 LATER",
        "INSERT INTO public.make_interval (id) VALUES (1) LATER",
    ] {
        assert_eq!(translate(statement, &[], &[]), Ok(None), "{statement}");
    }
}

#[test]
fn interval_as_a_name_beside_a_real_interval() {
    for (statement, printed) in [
        (
            "INSERT INTO interval (id, payload, deliver_time) VALUES ($1, $2, now() + interval '5 minutes')",
            "INSERT INTO interval (id, payload, deliver_time) VALUES ($1, $2, \
             spanner.timestamptz_add(now(), '5 minutes'))",
        ),
        (
            "INSERT INTO \"interval\" (id, interval) VALUES ($1, now() + '5 minutes'::interval)",
            "INSERT INTO \"interval\" (id, interval) VALUES ($1, \
             spanner.timestamptz_add(now(), '5 minutes'))",
        ),
        (
            "UPDATE interval SET interval = now() + interval '1 hour' WHERE interval.id = $1",
            "UPDATE interval SET interval = spanner.timestamptz_add(now(), '1 hour') \
             WHERE interval.id = $1",
        ),
        (
            "UPDATE \"interval\" SET ts = now() - CAST('1 hour' AS interval) WHERE interval IS NULL",
            "UPDATE \"interval\" SET ts = spanner.timestamptz_subtract(now(), '1 hour') \
             WHERE interval IS NULL",
        ),
        (
            "DELETE FROM interval WHERE ts < now() - make_interval(mins => 5)",
            "DELETE FROM interval WHERE ts < spanner.timestamptz_subtract(now(), '5 mins')",
        ),
        (
            "DELETE FROM \"interval\" WHERE interval < now() - interval '5 minutes'",
            "DELETE FROM \"interval\" WHERE interval < \
             spanner.timestamptz_subtract(now(), '5 minutes')",
        ),
        (
            "SELECT interval, id FROM t WHERE ts < now() - interval '1 day'",
            "SELECT interval, id FROM t WHERE ts < spanner.timestamptz_subtract(now(), '1 day')",
        ),
        (
            "SELECT id, Interval FROM interval WHERE interval + 1 > 0 AND ts > now() - interval '1 day'",
            "SELECT id, Interval FROM interval WHERE interval + 1 > 0 AND \
             ts > spanner.timestamptz_subtract(now(), '1 day')",
        ),
        (
            "SELECT \"interval\" FROM t AS interval WHERE interval.ts > now() - interval '1 day'",
            "SELECT \"interval\" FROM t AS interval WHERE \
             interval.ts > spanner.timestamptz_subtract(now(), '1 day')",
        ),
    ] {
        assert_eq!(sql(statement), printed, "{statement}");
    }
    // A real precision beside a table named interval is still refused.
    let message = refused("INSERT INTO interval (id, ts) VALUES (1, now() + interval(3) '1 hour')");
    assert!(
        message.starts_with("interval(3) '1 hour'") && message.contains("precision"),
        "{message}"
    );
}

#[test]
fn only_interval_constructs_spell_out_an_interval() {
    use super::spelling::Spelling;
    let spelling = |sql: &str| Spelling::read(sql).expect("tokenizes");
    for sql in [
        "SELECT now() + interval '1 day'",
        "SELECT now() + INTERVAL E'1 day'",
        "SELECT now() + interval $$1 day$$",
        "SELECT now() + interval(3) '1 hour'",
        "SELECT now() + x::interval",
        "SELECT now() + x :: INTERVAL(3)",
        "SELECT now() + CAST(x AS interval)",
        "SELECT now() + Cast((SELECT y FROM t) AS interval)",
        "SELECT now() + make_interval(days => 1)",
        "SELECT now() + pg_catalog.make_interval(days => 1)",
        "SELECT * FROM make_interval(days => 1)",
    ] {
        let read = spelling(sql);
        assert!(read.interval && read.names.is_empty(), "{sql}: {read:?}");
    }
    for sql in [
        "INSERT INTO interval (id) VALUES (1)",
        "INSERT INTO public.interval (id) VALUES (1)",
        "UPDATE interval SET interval = interval + 1",
        "SELECT interval.interval FROM interval AS interval",
        "SELECT x AS interval, CAST(interval AS text), t.interval FROM t",
        "SELECT CAST((SELECT x AS interval FROM t) AS text)",
        "SELECT \"interval\", make_interval, \"make_interval\"(days => 1) FROM t",
        "INSERT INTO make_interval (id) VALUES (1)",
        "INSERT INTO public.make_interval (id) VALUES (1)",
        "SELECT 'interval ''1 day''' -- interval '1 day'",
    ] {
        assert!(!spelling(sql).interval, "{sql}");
    }
    let sql = "UPDATE interval SET interval = now() + interval '1 day' WHERE t.interval = 1";
    let names: Vec<usize> = sql.match_indices("interval").map(|(at, _)| at).collect();
    let read = spelling(sql);
    assert!(read.interval);
    assert_eq!(read.names, [names[0], names[1], names[3]]);
    assert_eq!(Spelling::read("SELECT 'unterminated"), None);
}
