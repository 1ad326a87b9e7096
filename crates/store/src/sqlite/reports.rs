//! [`ReportStore`] on SQLite (one file per domain; the connection, the writer and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl ReportStore for SqliteStore {
    fn usage_summary(&self, query: UsageQuery) -> BoxFuture<'_, Result<UsageSummary, StoreError>> {
        self.read(move |conn| {
            // Floor division, so an instant before 1970 still lands on its own day.
            let day = format!(
                "(at_ms - (((at_ms % {MS_PER_DAY}) + {MS_PER_DAY}) % {MS_PER_DAY})) / {MS_PER_DAY}"
            );
            let by_day: Vec<(i64, Spend)> = grouped_spend(
                conn,
                "day",
                &format!(
                    "SELECT {day} AS day, {SPEND_COLUMNS} FROM usage_ledger
                     WHERE {USAGE_FILTER} GROUP BY day ORDER BY day"
                ),
                &query,
            )?;
            let by_task: Vec<(String, Spend)> = grouped_spend(
                conn,
                "task_id",
                &format!(
                    "SELECT task_id, {SPEND_COLUMNS} FROM usage_ledger
                     WHERE {USAGE_FILTER} GROUP BY task_id ORDER BY task_id"
                ),
                &query,
            )?;
            let by_model = grouped_spend(
                conn,
                "model",
                &format!(
                    "SELECT model, {SPEND_COLUMNS} FROM usage_ledger
                     WHERE {USAGE_FILTER} GROUP BY model ORDER BY model"
                ),
                &query,
            )?;
            let by_role = grouped_spend(
                conn,
                "role",
                &format!(
                    "SELECT role, {SPEND_COLUMNS} FROM usage_ledger
                     WHERE {USAGE_FILTER} GROUP BY role ORDER BY role"
                ),
                &query,
            )?;
            Ok(UsageSummary {
                by_day: by_day
                    .into_iter()
                    .map(|(day, spend)| (UtcDay(day), spend))
                    .collect(),
                by_task: by_task
                    .into_iter()
                    .map(|(id, spend)| Ok((crate::rows::task_id(id)?, spend)))
                    .collect::<Result<_, StoreError>>()?,
                by_model,
                by_role,
            })
        })
    }

    fn count_tasks_by_status(&self) -> BoxFuture<'_, Result<Vec<(TaskStatus, u64)>, StoreError>> {
        self.read(|conn| {
            let mut statement = conn
                .prepare_cached("SELECT status, COUNT(*) AS count FROM tasks GROUP BY status")
                .db()?;
            let rows = statement
                .query_map([], |row| {
                    Ok((row.get::<_, String>("status")?, row.get::<_, i64>("count")?))
                })
                .db()?;
            let mut counted = Vec::new();
            for row in rows {
                let (name, count) = row.db()?;
                counted.push((status(&name)?, to_u64(count)?));
            }
            Ok(ALL_STATUSES
                .into_iter()
                .map(|s| {
                    let n = counted.iter().find(|(c, _)| *c == s).map_or(0, |(_, n)| *n);
                    (s, n)
                })
                .collect())
        })
    }
}

/// The `WHERE` clause of a usage summary: `?1` owner, `?2` since.
const USAGE_FILTER: &str = "(?1 IS NULL OR task_id IN (SELECT id FROM tasks WHERE owner = ?1))
     AND (?2 IS NULL OR at_ms >= ?2)";

/// Runs a grouped spend query whose group key is the column `key`.
fn grouped_spend<K: rusqlite::types::FromSql>(
    conn: &Connection,
    key: &str,
    sql: &str,
    query: &UsageQuery,
) -> Result<Vec<(K, Spend)>, StoreError> {
    let mut statement = conn.prepare_cached(sql).db()?;
    let rows = statement
        .query_map(params![query.owner, query.since_ms], |row| {
            Ok((row.get::<_, K>(key)?, read_spend(row)?))
        })
        .db()?;
    rows.map(|row| {
        let (key, sums) = row.db()?;
        Ok((key, spend_from(sums)?))
    })
    .collect()
}
