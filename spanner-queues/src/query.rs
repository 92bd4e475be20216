//! Reading rows: the one loop over a `ResultSet` that every query of the crate uses.

use google_cloud_spanner::client::DatabaseClient;
use google_cloud_spanner::result::{ResultSet, Row};
use google_cloud_spanner::statement::Statement;

use crate::error::Result;

/// Runs `statement` as a single-use (strong) read and maps every row with `map`.
///
/// # Errors
/// Spanner's error for the query or a row; the first error `map` returns.
pub(crate) async fn query_rows<T>(
    db: &DatabaseClient,
    statement: Statement,
    map: impl FnMut(&Row) -> Result<T>,
) -> Result<Vec<T>> {
    let rows = db.single_use().build().execute_query(statement).await?;
    collect_rows(rows, map).await
}

/// Reads every row of `rows` (of any transaction) and maps it with `map`.
///
/// # Errors
/// Spanner's error for a row; the first error `map` returns.
pub(crate) async fn collect_rows<T>(
    mut rows: ResultSet,
    mut map: impl FnMut(&Row) -> Result<T>,
) -> Result<Vec<T>> {
    let mut out = Vec::new();
    while let Some(row) = rows.next().await {
        out.push(map(&row?)?);
    }
    Ok(out)
}
