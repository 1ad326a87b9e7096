//! [`LedgerStore`] on SQLite (one file per domain; the connection, the writer and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl LedgerStore for SqliteStore {
    fn record_usage(&self, entry: UsageEntry) -> BoxFuture<'_, Result<(), StoreError>> {
        self.write_observed(
            move |conn, now| {
                task_status(conn, &entry.task)?;
                conn.prepare_cached(
                    "INSERT INTO usage_ledger (task_id, run_number, model, input_tokens,
                     cached_input_tokens, output_tokens, cost_micro_usd, at_ms, role)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
                )
                .db()?
                .execute(params![
                    entry.task.as_str(),
                    entry.run_number,
                    entry.model,
                    to_i64(entry.input_tokens)?,
                    to_i64(entry.cached_input_tokens)?,
                    to_i64(entry.output_tokens)?,
                    entry.cost_micro_usd.map(to_i64).transpose()?,
                    now,
                    entry.role,
                ])
                .db()?;
                Ok(entry)
            },
            |observers, entry| observers.usage(&entry),
        )
    }

    fn spend_for_task<'a>(&'a self, task: &'a TaskId) -> BoxFuture<'a, Result<Spend, StoreError>> {
        let task = task.clone();
        self.read(move |conn| {
            let sums = conn
                .prepare_cached(&format!(
                    "SELECT {SPEND_COLUMNS} FROM usage_ledger WHERE task_id = ?1"
                ))
                .db()?
                .query_row([task.as_str()], read_spend)
                .db()?;
            spend_from(sums)
        })
    }

    fn spend_for_day(&self, day: UtcDay) -> BoxFuture<'_, Result<Spend, StoreError>> {
        self.read(move |conn| {
            let sums = conn
                .prepare_cached(&format!(
                    "SELECT {SPEND_COLUMNS} FROM usage_ledger WHERE at_ms >= ?1 AND at_ms < ?2"
                ))
                .db()?
                .query_row(params![day.start_ms(), day.end_ms()], read_spend)
                .db()?;
            spend_from(sums)
        })
    }
}
