//! [`LedgerStore`] on Postgres (one file per domain; the pool, the statements shared by several domains and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl LedgerStore for PostgresStore {
    fn record_usage(&self, entry: UsageEntry) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(self.record_usage_impl(entry))
    }

    fn spend_for_task<'a>(&'a self, task: &'a TaskId) -> BoxFuture<'a, Result<Spend, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = query_one(
                &*client,
                &format!("SELECT {SPEND_COLUMNS} FROM usage_ledger WHERE task_id = $1"),
                &[&task.as_str()],
            )
            .await?;
            read_spend(&row)
        })
    }

    fn spend_for_day(&self, day: UtcDay) -> BoxFuture<'_, Result<Spend, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let row = query_one(
                &*client,
                &format!(
                    "SELECT {SPEND_COLUMNS} FROM usage_ledger WHERE at_ms >= $1 AND at_ms < $2"
                ),
                &[&day.start_ms(), &day.end_ms()],
            )
            .await?;
            read_spend(&row)
        })
    }
}

impl PostgresStore {
    async fn record_usage_impl(&self, entry: UsageEntry) -> Result<(), StoreError> {
        let now = self.now();
        let client = self.client().await?;
        let run_number = entry.run_number.map(i64::from);
        let inserted = client
            .execute(
                "INSERT INTO usage_ledger (task_id, run_number, model, input_tokens,
                     cached_input_tokens, output_tokens, cost_micro_usd, at_ms, role)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
                &[
                    &entry.task.as_str(),
                    &run_number,
                    &entry.model,
                    &to_i64(entry.input_tokens)?,
                    &to_i64(entry.cached_input_tokens)?,
                    &to_i64(entry.output_tokens)?,
                    &entry.cost_micro_usd.map(to_i64).transpose()?,
                    &now,
                    &entry.role,
                ],
            )
            .await;
        match inserted {
            Ok(_) => {
                self.observers.usage(&entry);
                Ok(())
            }
            Err(e) if has_code(&e, &SqlState::FOREIGN_KEY_VIOLATION) => {
                Err(not_found("task", entry.task.as_str()))
            }
            Err(e) => Err(pg_error(e)),
        }
    }
}
