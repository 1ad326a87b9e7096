//! [`JournalRecordStore`] on Postgres (one file per domain; the pool, the statements shared by several domains and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl JournalRecordStore for PostgresStore {
    fn append_journal<'a>(
        &'a self,
        run: &'a RunRef,
        entry: JournalEntry,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(self.append_journal_impl(run, entry))
    }

    fn journal<'a>(
        &'a self,
        run: &'a RunRef,
    ) -> BoxFuture<'a, Result<Vec<JournalEntry>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let number = i64::from(run.number);
            let rows = query(
                &*client,
                &format!(
                    "SELECT {JOURNAL_COLUMNS} FROM journal WHERE task_id = $1 AND run_number = $2
                     ORDER BY seq"
                ),
                &[&run.task.as_str(), &number],
            )
            .await?;
            rows.iter().map(read_journal).collect()
        })
    }

    fn journal_page<'a>(
        &'a self,
        run: &'a RunRef,
        from: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<JournalEntry>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let number = i64::from(run.number);
            // Past i64 there is no record: an empty page.
            let from = i64::try_from(from).unwrap_or(i64::MAX);
            let limit = i64::from(limit);
            let rows = query(
                &*client,
                &format!(
                    "SELECT {JOURNAL_COLUMNS} FROM journal
                     WHERE task_id = $1 AND run_number = $2 AND seq >= $3
                     ORDER BY seq LIMIT $4"
                ),
                &[&run.task.as_str(), &number, &from, &limit],
            )
            .await?;
            rows.iter().map(read_journal).collect()
        })
    }
}

impl PostgresStore {
    async fn append_journal_impl(
        &self,
        run: &RunRef,
        entry: JournalEntry,
    ) -> Result<(), StoreError> {
        let number = i64::from(run.number);
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        // FOR SHARE: concurrent appends proceed to the chain check; closing the run waits.
        let ended = query_opt(
            &tx,
            "SELECT ended_at_ms FROM runs WHERE task_id = $1 AND number = $2 FOR SHARE",
            &[&run.task.as_str(), &number],
        )
        .await?
        .map(|row| get::<Option<i64>>(&row, 0))
        .transpose()?;
        check_journal_run(run, &entry, ended)?;
        let tail = query_opt(
            &tx,
            "SELECT seq, hash FROM journal WHERE task_id = $1 AND run_number = $2
             ORDER BY seq DESC LIMIT 1",
            &[&run.task.as_str(), &number],
        )
        .await?
        .map(|row| Ok::<_, StoreError>((get(&row, "seq")?, get(&row, "hash")?)))
        .transpose()?;
        check_journal_append(run, &entry, tail)?;
        match insert_journal(&tx, &run.task, number, &entry).await? {
            Ok(_) => {}
            // Another writer appended the same sequence number first: a fork, refused.
            Err(e) if has_code(&e, &SqlState::UNIQUE_VIOLATION) => {
                return Err(journal_fork(run, &entry))
            }
            Err(e) => return Err(pg_error(e)),
        }
        tx.commit().await.map_err(pg_error)
    }
}
