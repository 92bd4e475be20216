//! One list of reserved keywords: the SDK (which quotes them in the DDL and SQL it writes) and
//! the emulator (which parses that SQL) both read `spanner-queues-sql`, so they agree
//! by construction. This checks the SDK's side: it quotes every word of the lists, in any case.
//! (It reads no file of another crate, so it runs from the packaged crate too.)

use spanner_queues::Dialect;
use spanner_queues::ident::is_reserved_keyword;
use spanner_queues_sql::{GOOGLE_SQL_RESERVED, POSTGRES_RESERVED};

#[test]
fn the_sdk_quotes_every_reserved_keyword_of_both_dialects() {
    for (dialect, list) in [
        (Dialect::GoogleSql, GOOGLE_SQL_RESERVED),
        (Dialect::PostgreSql, POSTGRES_RESERVED),
    ] {
        assert!(list.len() > 50, "{dialect:?}: the list looks truncated");
        for word in list {
            for spelling in [word.to_ascii_uppercase(), word.to_ascii_lowercase()] {
                assert!(
                    is_reserved_keyword(&spelling, dialect),
                    "{dialect:?}: {spelling}"
                );
            }
        }
    }
    assert!(!is_reserved_keyword("Payload", Dialect::GoogleSql));
    assert!(!is_reserved_keyword("payload", Dialect::PostgreSql));
}
