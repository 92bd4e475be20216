//! The names of the tables this crate creates next to your queues, in each dialect (for your
//! own queries, grants and monitoring). [`SchemaSetup`](crate::SchemaSetup) creates them.

use crate::dialect::Dialect;

/// The worker's attempt counts ([`SchemaSetup::with_worker_tables`](crate::SchemaSetup::with_worker_tables)).
pub fn attempts(dialect: Dialect) -> &'static str {
    crate::worker::tables::table_names(dialect).0
}

/// The worker's dead letters ([`SchemaSetup::with_worker_tables`](crate::SchemaSetup::with_worker_tables)).
pub fn dead_letters(dialect: Dialect) -> &'static str {
    crate::worker::tables::table_names(dialect).1
}

/// The commit markers of guarded transactions
/// ([`SchemaSetup::with_commit_markers`](crate::SchemaSetup::with_commit_markers)).
pub fn commit_markers(dialect: Dialect) -> &'static str {
    crate::outcome::CommitMarkers::table(dialect)
}

/// The sequence counters of ordered queues (created by
/// [`SchemaSetup::with_queue`](crate::SchemaSetup::with_queue) for an ordered message type).
pub fn sequences(dialect: Dialect) -> &'static str {
    match dialect {
        Dialect::GoogleSql => crate::ordering::SEQUENCES_TABLE,
        Dialect::PostgreSql => crate::ordering::SEQUENCES_TABLE_POSTGRESQL,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_table_has_one_name_per_dialect() {
        let names = [attempts, dead_letters, commit_markers, sequences];
        let google: Vec<&str> = names.iter().map(|f| f(Dialect::GoogleSql)).collect();
        let postgres: Vec<&str> = names.iter().map(|f| f(Dialect::PostgreSql)).collect();
        assert_eq!(
            google,
            [
                "SpannerQueuesAttempts",
                "SpannerQueuesDeadLetters",
                "SpannerQueuesCommitMarkers",
                "SpannerQueuesSequences"
            ]
        );
        assert_eq!(
            postgres,
            [
                "spanner_queues_attempts",
                "spanner_queues_dead_letters",
                "spanner_queues_commit_markers",
                "spanner_queues_sequences"
            ]
        );
    }
}
