//! [`EventStore`] on SQLite (one file per domain; the connection, the writer and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl EventStore for SqliteStore {
    fn append_event<'a>(
        &'a self,
        task: &'a TaskId,
        event: Event,
    ) -> BoxFuture<'a, Result<EventRecord, StoreError>> {
        let task = task.clone();
        self.write_observed(
            move |conn, now| {
                task_status(conn, &task)?;
                insert_event(conn, &task, event, now)
            },
            |observers, record| {
                observers.events([&record]);
                record
            },
        )
    }

    fn events_after<'a>(
        &'a self,
        stream: &'a EventStream,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<EventRecord>, StoreError>> {
        let stream = stream.clone();
        self.read(move |conn| {
            let after = to_i64(after)?;
            let raws: Vec<RawEvent> = match &stream {
                EventStream::Task(task) => {
                    let mut statement = conn
                        .prepare_cached(&format!(
                            "SELECT {EVENT_COLUMNS} FROM events
                             WHERE task_id = ?1 AND task_seq > ?2 ORDER BY task_seq LIMIT ?3"
                        ))
                        .db()?;
                    let rows = statement
                        .query_map(params![task.as_str(), after, limit], read_event)
                        .db()?;
                    rows.collect::<rusqlite::Result<_>>().db()?
                }
                EventStream::All => {
                    let mut statement = conn
                        .prepare_cached(&format!(
                            "SELECT {EVENT_COLUMNS} FROM events WHERE seq > ?1
                             ORDER BY seq LIMIT ?2"
                        ))
                        .db()?;
                    let rows = statement
                        .query_map(params![after, limit], read_event)
                        .db()?;
                    rows.collect::<rusqlite::Result<_>>().db()?
                }
            };
            raws.into_iter().map(RawEvent::decode).collect()
        })
    }
}

fn read_event(row: &Row<'_>) -> rusqlite::Result<RawEvent> {
    Ok(RawEvent {
        seq: row.get("seq")?,
        task_seq: row.get("task_seq")?,
        task_id: row.get("task_id")?,
        at_ms: row.get("at_ms")?,
        event: row.get("event")?,
    })
}
