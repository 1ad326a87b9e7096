//! [`EventStore`] on Postgres (one file per domain; the pool, the statements shared by several domains and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl EventStore for PostgresStore {
    fn append_event<'a>(
        &'a self,
        task: &'a TaskId,
        event: Event,
    ) -> BoxFuture<'a, Result<EventRecord, StoreError>> {
        Box::pin(self.append_event_impl(task, event))
    }

    fn events_after<'a>(
        &'a self,
        stream: &'a EventStream,
        after: u64,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<EventRecord>, StoreError>> {
        Box::pin(self.events_after_impl(stream, after, limit))
    }
}

impl PostgresStore {
    async fn append_event_impl(
        &self,
        task: &TaskId,
        event: Event,
    ) -> Result<EventRecord, StoreError> {
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        require_task_exists(&tx, task).await?;
        let record = insert_event(&tx, task, event, now).await?;
        tx.commit().await.map_err(pg_error)?;
        self.observers.events([&record]);
        Ok(record)
    }

    async fn events_after_impl(
        &self,
        stream: &EventStream,
        after: u64,
        limit: u32,
    ) -> Result<Vec<EventRecord>, StoreError> {
        let after = to_i64(after)?;
        let limit = i64::from(limit);
        let client = self.client().await?;
        let rows = match stream {
            EventStream::Task(task) => {
                query(
                    &*client,
                    &format!(
                        "SELECT {EVENT_COLUMNS} FROM events WHERE task_id = $1 AND task_seq > $2
                         ORDER BY task_seq LIMIT $3"
                    ),
                    &[&task.as_str(), &after, &limit],
                )
                .await?
            }
            EventStream::All => {
                query(
                    &*client,
                    &format!(
                        "SELECT {EVENT_COLUMNS} FROM events WHERE seq > $1 ORDER BY seq LIMIT $2"
                    ),
                    &[&after, &limit],
                )
                .await?
            }
        };
        rows.iter().map(read_event).collect()
    }
}
