//! The reserved keywords of both dialects.

use crate::Dialect;

/// GoogleSQL's reserved keywords (Spanner's lexical structure page), upper case and sorted.
///
/// `QUALIFY` is reserved in other GoogleSQL products; it is listed too because quoting a word
/// that is not reserved is harmless, while not quoting one that is breaks the statement.
pub const GOOGLE_SQL_RESERVED: &[&str] = &[
    "ALL",
    "AND",
    "ANY",
    "ARRAY",
    "AS",
    "ASC",
    "ASSERT_ROWS_MODIFIED",
    "AT",
    "BETWEEN",
    "BY",
    "CASE",
    "CAST",
    "COLLATE",
    "CONTAINS",
    "CREATE",
    "CROSS",
    "CUBE",
    "CURRENT",
    "DEFAULT",
    "DEFINE",
    "DESC",
    "DISTINCT",
    "ELSE",
    "END",
    "ENUM",
    "ESCAPE",
    "EXCEPT",
    "EXCLUDE",
    "EXISTS",
    "EXTRACT",
    "FALSE",
    "FETCH",
    "FOLLOWING",
    "FOR",
    "FROM",
    "FULL",
    "GRAPH_TABLE",
    "GROUP",
    "GROUPING",
    "GROUPS",
    "HASH",
    "HAVING",
    "IF",
    "IGNORE",
    "IN",
    "INNER",
    "INTERSECT",
    "INTERVAL",
    "INTO",
    "IS",
    "JOIN",
    "LATERAL",
    "LEFT",
    "LIKE",
    "LIMIT",
    "LOOKUP",
    "MERGE",
    "NATURAL",
    "NEW",
    "NO",
    "NOT",
    "NULL",
    "NULLS",
    "OF",
    "ON",
    "OR",
    "ORDER",
    "OUTER",
    "OVER",
    "PARTITION",
    "PRECEDING",
    "PROTO",
    "QUALIFY",
    "RANGE",
    "RECURSIVE",
    "RESPECT",
    "RIGHT",
    "ROLLUP",
    "ROWS",
    "SELECT",
    "SET",
    "SOME",
    "STRUCT",
    "TABLESAMPLE",
    "THEN",
    "TO",
    "TREAT",
    "TRUE",
    "UNBOUNDED",
    "UNION",
    "UNNEST",
    "USING",
    "WHEN",
    "WHERE",
    "WINDOW",
    "WITH",
    "WITHIN",
];

/// PostgreSQL keywords that cannot be unquoted column or table names, lower case and sorted:
/// the "reserved" and "reserved (can be function or type)" categories of PostgreSQL's keyword
/// appendix.
pub const POSTGRES_RESERVED: &[&str] = &[
    "all",
    "analyse",
    "analyze",
    "and",
    "any",
    "array",
    "as",
    "asc",
    "asymmetric",
    "authorization",
    "binary",
    "both",
    "case",
    "cast",
    "check",
    "collate",
    "collation",
    "column",
    "concurrently",
    "constraint",
    "create",
    "cross",
    "current_catalog",
    "current_date",
    "current_role",
    "current_schema",
    "current_time",
    "current_timestamp",
    "current_user",
    "default",
    "deferrable",
    "desc",
    "distinct",
    "do",
    "else",
    "end",
    "except",
    "false",
    "fetch",
    "for",
    "foreign",
    "freeze",
    "from",
    "full",
    "grant",
    "group",
    "having",
    "ilike",
    "in",
    "initially",
    "inner",
    "intersect",
    "into",
    "is",
    "isnull",
    "join",
    "lateral",
    "leading",
    "left",
    "like",
    "limit",
    "localtime",
    "localtimestamp",
    "natural",
    "not",
    "notnull",
    "null",
    "offset",
    "on",
    "only",
    "or",
    "order",
    "outer",
    "overlaps",
    "placing",
    "primary",
    "references",
    "returning",
    "right",
    "select",
    "session_user",
    "similar",
    "some",
    "symmetric",
    "system_user",
    "table",
    "tablesample",
    "then",
    "to",
    "trailing",
    "true",
    "union",
    "unique",
    "user",
    "using",
    "variadic",
    "verbose",
    "when",
    "where",
    "window",
    "with",
];

/// Whether `word` is a GoogleSQL reserved keyword (compared case-insensitively).
pub fn is_google_sql_reserved(word: &str) -> bool {
    contains(GOOGLE_SQL_RESERVED, word, u8::to_ascii_uppercase)
}

/// Whether `word` is a PostgreSQL reserved keyword (compared case-insensitively).
pub fn is_postgres_reserved(word: &str) -> bool {
    contains(POSTGRES_RESERVED, word, u8::to_ascii_lowercase)
}

/// Whether `word` is a reserved keyword of `dialect` (compared case-insensitively): a word that
/// must be quoted to be a name.
pub fn is_reserved(dialect: Dialect, word: &str) -> bool {
    match dialect {
        Dialect::GoogleSql => is_google_sql_reserved(word),
        Dialect::PostgreSql => is_postgres_reserved(word),
    }
}

/// Whether the sorted `list`, all in one case, holds `word` folded to that case by `fold`: a
/// binary search (every send quotes its names, so this runs on each one).
fn contains(list: &[&str], word: &str, fold: fn(&u8) -> u8) -> bool {
    list.binary_search_by(|keyword| keyword.bytes().cmp(word.as_bytes().iter().map(fold)))
        .is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_lists_are_sorted_without_repeats_in_their_case() {
        for (list, upper) in [(GOOGLE_SQL_RESERVED, true), (POSTGRES_RESERVED, false)] {
            assert!(list.windows(2).all(|pair| pair[0] < pair[1]), "{list:?}");
            for word in list {
                let cased = if upper {
                    word.bytes().all(|b| !b.is_ascii_lowercase())
                } else {
                    word.bytes().all(|b| !b.is_ascii_uppercase())
                };
                assert!(cased, "{word}");
            }
        }
        assert_eq!(GOOGLE_SQL_RESERVED.len(), 97);
    }

    #[test]
    fn lookups_ignore_case_and_match_whole_words() {
        for word in [
            "SELECT",
            "select",
            "Order",
            "ASSERT_ROWS_MODIFIED",
            "within",
        ] {
            assert!(is_google_sql_reserved(word), "{word}");
        }
        for word in ["Payload", "QUEUE", "SELECTS", "SEL", "", "user"] {
            assert!(!is_google_sql_reserved(word), "{word}");
        }
        for word in ["user", "USER", "Table", "analyse"] {
            assert!(is_postgres_reserved(word), "{word}");
        }
        for word in ["queue", "payload", ""] {
            assert!(!is_postgres_reserved(word), "{word}");
        }
        // Every word of each list, in any case, and nothing next to it.
        for (list, dialect) in [
            (GOOGLE_SQL_RESERVED, Dialect::GoogleSql),
            (POSTGRES_RESERVED, Dialect::PostgreSql),
        ] {
            for word in list {
                assert!(is_reserved(dialect, word), "{word}");
                assert!(is_reserved(dialect, &word.to_ascii_lowercase()), "{word}");
                assert!(is_reserved(dialect, &word.to_ascii_uppercase()), "{word}");
                assert!(!is_reserved(dialect, &format!("{word}_")), "{word}");
                assert!(!is_reserved(dialect, &format!("_{word}")), "{word}");
            }
        }
        assert!(is_reserved(Dialect::PostgreSql, "user"));
        assert!(!is_reserved(Dialect::GoogleSql, "user"));
        assert!(is_reserved(Dialect::GoogleSql, "Select"));
    }
}
