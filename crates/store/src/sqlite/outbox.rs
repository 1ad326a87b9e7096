//! [`OutboxStore`] on SQLite (one file per domain; the connection, the writer and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl OutboxStore for SqliteStore {
    fn enqueue_intent(&self, intent: NewIntent) -> BoxFuture<'_, Result<Intent, StoreError>> {
        self.write(move |conn, now| {
            task_status(conn, &intent.task)?;
            if load_intent(conn, &intent.id)?.is_some() {
                return Err(StoreError::AlreadyExists {
                    what: "outbox intent",
                    id: intent.id,
                });
            }
            let created = conn
                .prepare_cached(&format!(
                    "INSERT INTO outbox (id, task_id, kind, payload, status, attempts,
                         next_attempt_at_ms, created_at_ms)
                     VALUES (?1, ?2, ?3, ?4, 'pending', 0, ?5, ?5) RETURNING {INTENT_COLUMNS}"
                ))
                .db()?
                .query_row(
                    params![
                        intent.id,
                        intent.task.as_str(),
                        intent.kind,
                        serde_json::to_string(&intent.payload)?,
                        now
                    ],
                    read_intent,
                )
                .db()?
                .decode()?;
            Ok(created)
        })
    }

    fn claim_intent<'a>(
        &'a self,
        worker: &'a str,
        lease: Duration,
        kinds: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Option<Intent>, StoreError>> {
        let worker = worker.to_string();
        let lease_ms = duration_ms(lease);
        // A JSON array, so any kind name matches exactly (no separator to escape).
        let kinds = serde_json::Value::from(kinds.to_vec()).to_string();
        self.write(move |conn, now| {
            let claimed = conn
                .prepare_cached(&format!(
                    "UPDATE outbox SET lease_owner = ?2, lease_expires_at_ms = ?3,
                         attempts = attempts + 1
                     WHERE id = (
                         SELECT id FROM outbox
                         WHERE status = 'pending' AND next_attempt_at_ms <= ?1
                           AND (lease_expires_at_ms IS NULL OR lease_expires_at_ms <= ?1)
                           AND kind IN (SELECT value FROM json_each(?4))
                         ORDER BY next_attempt_at_ms, created_at_ms, id LIMIT 1)
                     RETURNING {INTENT_COLUMNS}"
                ))
                .db()?
                .query_row(
                    params![now, worker, now.saturating_add(lease_ms), kinds],
                    read_intent,
                )
                .optional()
                .db()?
                .map(RawIntent::decode)
                .transpose()?;
            Ok(claimed)
        })
    }

    fn complete_intent<'a>(
        &'a self,
        id: &'a str,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Intent, StoreError>> {
        let id = id.to_string();
        let worker = worker.to_string();
        self.write(move |conn, now| {
            held_intent(conn, &id, &worker)?;
            let done = conn
                .prepare_cached(&format!(
                    "UPDATE outbox SET status = 'done', done_at_ms = ?2, lease_expires_at_ms = NULL
                     WHERE id = ?1 RETURNING {INTENT_COLUMNS}"
                ))
                .db()?
                .query_row(params![id, now], read_intent)
                .db()?
                .decode()?;
            Ok(done)
        })
    }

    fn fail_intent<'a>(
        &'a self,
        id: &'a str,
        worker: &'a str,
        error: &'a str,
        retry_at_ms: Option<i64>,
    ) -> BoxFuture<'a, Result<Intent, StoreError>> {
        let id = id.to_string();
        let worker = worker.to_string();
        let error = error.to_string();
        self.write(move |conn, _| {
            let intent = held_intent(conn, &id, &worker)?;
            let (status, next) = crate::checks::intent_failure(&intent, retry_at_ms);
            let failed = conn
                .prepare_cached(&format!(
                    "UPDATE outbox SET status = ?2, next_attempt_at_ms = ?3, last_error = ?4,
                         lease_owner = NULL, lease_expires_at_ms = NULL
                     WHERE id = ?1 RETURNING {INTENT_COLUMNS}"
                ))
                .db()?
                .query_row(params![id, status.as_str(), next, error], read_intent)
                .db()?
                .decode()?;
            Ok(failed)
        })
    }

    fn list_intents<'a>(
        &'a self,
        task: &'a TaskId,
    ) -> BoxFuture<'a, Result<Vec<Intent>, StoreError>> {
        let task = task.clone();
        self.read(move |conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {INTENT_COLUMNS} FROM outbox WHERE task_id = ?1
                     ORDER BY created_at_ms, id"
                ))
                .db()?;
            let rows = statement.query_map([task.as_str()], read_intent).db()?;
            rows.map(|row| row.db()?.decode()).collect()
        })
    }
}

fn read_intent(row: &Row<'_>) -> rusqlite::Result<RawIntent> {
    Ok(RawIntent {
        id: row.get("id")?,
        task_id: row.get("task_id")?,
        kind: row.get("kind")?,
        payload: row.get("payload")?,
        status: row.get("status")?,
        attempts: row.get("attempts")?,
        next_attempt_at_ms: row.get("next_attempt_at_ms")?,
        lease_owner: row.get("lease_owner")?,
        lease_expires_at_ms: row.get("lease_expires_at_ms")?,
        last_error: row.get("last_error")?,
        created_at_ms: row.get("created_at_ms")?,
        done_at_ms: row.get("done_at_ms")?,
    })
}

fn load_intent(conn: &Connection, id: &str) -> Result<Option<Intent>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {INTENT_COLUMNS} FROM outbox WHERE id = ?1"
    ))
    .db()?
    .query_row([id], read_intent)
    .optional()
    .db()?
    .map(RawIntent::decode)
    .transpose()
}

/// An intent `worker` holds and that is still pending, or why not.
fn held_intent(conn: &Connection, id: &str, worker: &str) -> Result<Intent, StoreError> {
    check_intent_held(id, worker, load_intent(conn, id)?)
}
