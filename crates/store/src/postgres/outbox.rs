//! [`OutboxStore`] on Postgres (one file per domain; the pool, the statements shared by several domains and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl OutboxStore for PostgresStore {
    fn enqueue_intent(&self, intent: NewIntent) -> BoxFuture<'_, Result<Intent, StoreError>> {
        Box::pin(self.enqueue_intent_impl(intent))
    }

    fn claim_intent<'a>(
        &'a self,
        worker: &'a str,
        lease: Duration,
        kinds: &'a [&'a str],
    ) -> BoxFuture<'a, Result<Option<Intent>, StoreError>> {
        Box::pin(self.claim_intent_impl(worker, lease, kinds))
    }

    fn complete_intent<'a>(
        &'a self,
        id: &'a str,
        worker: &'a str,
    ) -> BoxFuture<'a, Result<Intent, StoreError>> {
        Box::pin(self.complete_intent_impl(id, worker))
    }

    fn fail_intent<'a>(
        &'a self,
        id: &'a str,
        worker: &'a str,
        error: &'a str,
        retry_at_ms: Option<i64>,
    ) -> BoxFuture<'a, Result<Intent, StoreError>> {
        Box::pin(self.fail_intent_impl(id, worker, error, retry_at_ms))
    }

    fn list_intents<'a>(
        &'a self,
        task: &'a TaskId,
    ) -> BoxFuture<'a, Result<Vec<Intent>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let rows = query(
                &*client,
                &format!(
                    "SELECT {INTENT_COLUMNS} FROM outbox WHERE task_id = $1
                     ORDER BY created_at_ms, id"
                ),
                &[&task.as_str()],
            )
            .await?;
            rows.iter().map(read_intent).collect()
        })
    }
}

impl PostgresStore {
    async fn enqueue_intent_impl(&self, intent: NewIntent) -> Result<Intent, StoreError> {
        let now = self.now();
        let payload = serde_json::to_string(&intent.payload)?;
        let client = self.client().await?;
        require_task_exists(&*client, &intent.task).await?;
        let row = query_opt(
            &*client,
            &format!(
                "INSERT INTO outbox (id, task_id, kind, payload, status, attempts,
                     next_attempt_at_ms, created_at_ms)
                 VALUES ($1, $2, $3, $4, 'pending', 0, $5, $5) ON CONFLICT (id) DO NOTHING
                 RETURNING {INTENT_COLUMNS}"
            ),
            &[
                &intent.id,
                &intent.task.as_str(),
                &intent.kind,
                &payload,
                &now,
            ],
        )
        .await?;
        match row {
            Some(row) => read_intent(&row),
            None => Err(StoreError::AlreadyExists {
                what: "outbox intent",
                id: intent.id,
            }),
        }
    }

    async fn claim_intent_impl(
        &self,
        worker: &str,
        lease: Duration,
        kinds: &[&str],
    ) -> Result<Option<Intent>, StoreError> {
        let now = self.now();
        let expires = now.saturating_add(duration_ms(lease));
        let client = self.client().await?;
        let row = query_opt(
            &*client,
            &format!(
                "UPDATE outbox SET lease_owner = $2, lease_expires_at_ms = $3,
                     attempts = attempts + 1
                 WHERE id = (
                     SELECT id FROM outbox
                     WHERE status = 'pending' AND next_attempt_at_ms <= $1
                       AND (lease_expires_at_ms IS NULL OR lease_expires_at_ms <= $1)
                       AND kind = ANY($4)
                     ORDER BY next_attempt_at_ms, created_at_ms, id
                     LIMIT 1 FOR UPDATE SKIP LOCKED)
                 RETURNING {INTENT_COLUMNS}"
            ),
            &[&now, &worker, &expires, &kinds],
        )
        .await?;
        row.as_ref().map(read_intent).transpose()
    }

    async fn complete_intent_impl(&self, id: &str, worker: &str) -> Result<Intent, StoreError> {
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        held_intent(&tx, id, worker).await?;
        let row = query_one(
            &tx,
            &format!(
                "UPDATE outbox SET status = 'done', done_at_ms = $2, lease_expires_at_ms = NULL
                 WHERE id = $1 RETURNING {INTENT_COLUMNS}"
            ),
            &[&id, &now],
        )
        .await?;
        let done = read_intent(&row)?;
        tx.commit().await.map_err(pg_error)?;
        Ok(done)
    }

    async fn fail_intent_impl(
        &self,
        id: &str,
        worker: &str,
        error: &str,
        retry_at_ms: Option<i64>,
    ) -> Result<Intent, StoreError> {
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        let intent = held_intent(&tx, id, worker).await?;
        let (status, next) = intent_failure(&intent, retry_at_ms);
        let row = query_one(
            &tx,
            &format!(
                "UPDATE outbox SET status = $2, next_attempt_at_ms = $3, last_error = $4,
                     lease_owner = NULL, lease_expires_at_ms = NULL
                 WHERE id = $1 RETURNING {INTENT_COLUMNS}"
            ),
            &[&id, &status.as_str(), &next, &error],
        )
        .await?;
        let failed = read_intent(&row)?;
        tx.commit().await.map_err(pg_error)?;
        Ok(failed)
    }
}

async fn load_intent(c: &dyn Conn, id: &str, lock: bool) -> Result<Option<Intent>, StoreError> {
    let sql = format!(
        "SELECT {INTENT_COLUMNS} FROM outbox WHERE id = $1{}",
        if lock { " FOR UPDATE" } else { "" }
    );
    query_opt(c, &sql, &[&id])
        .await?
        .as_ref()
        .map(read_intent)
        .transpose()
}

/// An intent `worker` holds and that is still pending (row-locked), or why not.
async fn held_intent(tx: &Transaction<'_>, id: &str, worker: &str) -> Result<Intent, StoreError> {
    check_intent_held(id, worker, load_intent(tx, id, true).await?)
}
