//! [`JournalRecordStore`] on SQLite (one file per domain; the connection, the writer and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl JournalRecordStore for SqliteStore {
    fn append_journal<'a>(
        &'a self,
        run: &'a RunRef,
        entry: JournalEntry,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        let run = run.clone();
        self.write(move |conn, _| {
            let ended: Option<Option<i64>> = conn
                .prepare_cached("SELECT ended_at_ms FROM runs WHERE task_id = ?1 AND number = ?2")
                .db()?
                .query_row(params![run.task.as_str(), run.number], |row| {
                    row.get("ended_at_ms")
                })
                .optional()
                .db()?;
            check_journal_run(&run, &entry, ended)?;
            let tail: Option<(i64, String)> = conn
                .prepare_cached(
                    "SELECT seq, hash FROM journal WHERE task_id = ?1 AND run_number = ?2
                     ORDER BY seq DESC LIMIT 1",
                )
                .db()?
                .query_row(params![run.task.as_str(), run.number], |row| {
                    Ok((row.get("seq")?, row.get("hash")?))
                })
                .optional()
                .db()?;
            check_journal_append(&run, &entry, tail)?;
            insert_journal(conn, &run.task, i64::from(run.number), &entry)
        })
    }

    fn journal<'a>(
        &'a self,
        run: &'a RunRef,
    ) -> BoxFuture<'a, Result<Vec<JournalEntry>, StoreError>> {
        let run = run.clone();
        self.write(move |conn, _| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {JOURNAL_COLUMNS} FROM journal WHERE task_id = ?1 AND run_number = ?2
                     ORDER BY seq"
                ))
                .db()?;
            let rows = statement
                .query_map(params![run.task.as_str(), run.number], read_journal)
                .db()?;
            rows.map(|row| row.db()?.decode()).collect()
        })
    }

    fn journal_page<'a>(
        &'a self,
        run: &'a RunRef,
        from: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<JournalEntry>, StoreError>> {
        let run = run.clone();
        // Past i64 there is no record: an empty page.
        let from = i64::try_from(from).unwrap_or(i64::MAX);
        self.write(move |conn, _| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {JOURNAL_COLUMNS} FROM journal
                     WHERE task_id = ?1 AND run_number = ?2 AND seq >= ?3
                     ORDER BY seq LIMIT ?4"
                ))
                .db()?;
            let rows = statement
                .query_map(
                    params![run.task.as_str(), run.number, from, limit],
                    read_journal,
                )
                .db()?;
            rows.map(|row| row.db()?.decode()).collect()
        })
    }
}

fn read_journal(row: &Row<'_>) -> rusqlite::Result<RawJournal> {
    Ok(RawJournal {
        seq: row.get("seq")?,
        at_ms: row.get("at_ms")?,
        kind: row.get("kind")?,
        payload: row.get("payload")?,
        prev_hash: row.get("prev_hash")?,
        hash: row.get("hash")?,
        display: row.get("display")?,
    })
}
