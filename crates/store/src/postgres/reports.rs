//! [`ReportStore`] on Postgres (one file per domain; the pool, the statements shared by several domains and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl ReportStore for PostgresStore {
    fn usage_summary(&self, query: UsageQuery) -> BoxFuture<'_, Result<UsageSummary, StoreError>> {
        Box::pin(self.usage_summary_impl(query))
    }

    fn count_tasks_by_status(&self) -> BoxFuture<'_, Result<Vec<(TaskStatus, u64)>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let rows = query(
                &*client,
                "SELECT status, COUNT(*) AS count FROM tasks GROUP BY status",
                &[],
            )
            .await?;
            let mut counted = Vec::new();
            for row in &rows {
                let name: String = get(row, "status")?;
                let count: i64 = get(row, "count")?;
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

impl PostgresStore {
    async fn usage_summary_impl(&self, query_: UsageQuery) -> Result<UsageSummary, StoreError> {
        let client = self.client().await?;
        let params: Params<'_> = &[&query_.owner, &query_.since_ms];
        // Floor division, so an instant before 1970 still lands on its own day.
        let day = format!(
            "(at_ms - (((at_ms % {MS_PER_DAY}) + {MS_PER_DAY}) % {MS_PER_DAY})) / {MS_PER_DAY}"
        );
        let days = query(
            &*client,
            &format!(
                "SELECT ({day})::BIGINT AS day, {SPEND_COLUMNS} FROM usage_ledger
                 WHERE {USAGE_FILTER} GROUP BY day ORDER BY day"
            ),
            params,
        )
        .await?;
        let tasks = query(
            &*client,
            &format!(
                "SELECT task_id, {SPEND_COLUMNS} FROM usage_ledger
                 WHERE {USAGE_FILTER} GROUP BY task_id ORDER BY task_id"
            ),
            params,
        )
        .await?;
        let models = query(
            &*client,
            &format!(
                "SELECT model, {SPEND_COLUMNS} FROM usage_ledger
                 WHERE {USAGE_FILTER} GROUP BY model ORDER BY model"
            ),
            params,
        )
        .await?;
        let roles = query(
            &*client,
            &format!(
                "SELECT role, {SPEND_COLUMNS} FROM usage_ledger
                 WHERE {USAGE_FILTER} GROUP BY role ORDER BY role"
            ),
            params,
        )
        .await?;
        Ok(UsageSummary {
            by_day: days
                .iter()
                .map(|row| Ok((UtcDay(get(row, "day")?), read_spend(row)?)))
                .collect::<Result<_, StoreError>>()?,
            by_task: tasks
                .iter()
                .map(|row| {
                    Ok((
                        crate::rows::task_id(get(row, "task_id")?)?,
                        read_spend(row)?,
                    ))
                })
                .collect::<Result<_, StoreError>>()?,
            by_model: models
                .iter()
                .map(|row| Ok((get(row, "model")?, read_spend(row)?)))
                .collect::<Result<_, StoreError>>()?,
            by_role: roles
                .iter()
                .map(|row| Ok((get(row, "role")?, read_spend(row)?)))
                .collect::<Result<_, StoreError>>()?,
        })
    }
}

/// The `WHERE` clause of a usage summary: `$1` owner, `$2` since.
const USAGE_FILTER: &str =
    "($1::text IS NULL OR task_id IN (SELECT id FROM tasks WHERE owner = $1))
     AND ($2::bigint IS NULL OR at_ms >= $2)";
