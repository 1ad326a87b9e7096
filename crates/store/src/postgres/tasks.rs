//! [`TaskStore`] on Postgres (one file per domain; the pool, the statements shared by several domains and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl TaskStore for PostgresStore {
    fn create_task(
        &self,
        task: NewTask,
        idempotency: Option<IdempotencyKey>,
    ) -> BoxFuture<'_, Result<Created, StoreError>> {
        Box::pin(async move {
            // Two attempts: the second replays a concurrent request that won the key.
            for _ in 0..2 {
                if let Some(created) = self.create_task_once(&task, idempotency.as_ref()).await? {
                    return Ok(created);
                }
            }
            Err(StoreError::Database {
                backend: BACKEND,
                message: "idempotency key kept changing hands".into(),
                retryable: true,
                source: None,
            })
        })
    }

    fn get_task<'a>(&'a self, id: &'a TaskId) -> BoxFuture<'a, Result<Option<Task>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            load_task(&*client, id.as_str()).await
        })
    }

    fn list_tasks(&self, query_: TaskQuery) -> BoxFuture<'_, Result<Vec<Task>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            let status = query_.status.map(status_name);
            let before = query_.before.as_ref().map(TaskId::as_str);
            let limit = i64::from(query_.limit);
            let rows = query(
                &*client,
                &format!(
                    "SELECT {TASK_COLUMNS} FROM tasks
                     WHERE ($1::text IS NULL OR owner = $1) AND ($2::text IS NULL OR status = $2)
                       AND ($3::text IS NULL OR id < $3)
                     ORDER BY id DESC LIMIT $4"
                ),
                &[&query_.owner, &status, &before, &limit],
            )
            .await?;
            rows.iter().map(read_task).collect()
        })
    }

    fn transition<'a>(
        &'a self,
        id: &'a TaskId,
        from: TaskStatus,
        to: TaskStatus,
        result: Option<serde_json::Value>,
    ) -> BoxFuture<'a, Result<Task, StoreError>> {
        Box::pin(self.transition_impl(id, from, to, result))
    }
}

impl PostgresStore {
    async fn create_task_once(
        &self,
        task: &NewTask,
        idempotency: Option<&IdempotencyKey>,
    ) -> Result<Option<Created>, StoreError> {
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        if let Some(key) = idempotency {
            if let Some(row) = query_opt(
                &tx,
                "SELECT request_hash, task_id FROM idempotency_keys WHERE owner = $1 AND key = $2",
                &[&key.owner, &key.key],
            )
            .await?
            {
                let hash: String = get(&row, "request_hash")?;
                let task_id: String = get(&row, "task_id")?;
                check_replay(key, &hash)?;
                let existing = load_task(&tx, &task_id)
                    .await?
                    .ok_or_else(|| not_found("task", &task_id))?;
                return Ok(Some(Created::Replayed(existing)));
            }
        }
        if let Some(old) = &task.retry_of {
            // Terminal statuses are immutable, so this check cannot go stale.
            check_retryable(old, require_task_exists(&tx, old).await?)?;
        }
        if let Some(parent) = &task.follow_up_to {
            require_task_exists(&tx, parent).await?;
        }
        let repos = serde_json::to_string(&task.repos)?;
        let metadata = serde_json::to_string(&task.metadata)?;
        let inserted = query_opt(
            &tx,
            &format!(
                "INSERT INTO tasks (id, kind, status, owner, prompt, repos, priority,
                     created_at_ms, updated_at_ms, follow_up_to, retry_of, result, metadata,
                     callback_url)
                 VALUES ($1, $2, 'queued', $3, $4, $5, $6, $7, $7, $8, $9, NULL, $10, $11)
                 ON CONFLICT (id) DO NOTHING RETURNING {TASK_COLUMNS}"
            ),
            &[
                &task.id.as_str(),
                &kind_name(task.kind),
                &task.owner,
                &task.prompt,
                &repos,
                &task.priority,
                &now,
                &task.follow_up_to.as_ref().map(TaskId::as_str),
                &task.retry_of.as_ref().map(TaskId::as_str),
                &metadata,
                &task.callback_url,
            ],
        )
        .await?;
        let Some(row) = inserted else {
            return Err(StoreError::AlreadyExists {
                what: "task",
                id: task.id.to_string(),
            });
        };
        let created = read_task(&row)?;
        let names: Vec<&str> = task.repos.iter().map(|r| r.name.as_str()).collect();
        execute(
            &tx,
            "INSERT INTO task_repos (task_id, repo) SELECT $1, unnest($2::text[])
             ON CONFLICT DO NOTHING",
            &[&task.id.as_str(), &names],
        )
        .await?;
        if let Some(key) = idempotency {
            let stored = execute(
                &tx,
                "INSERT INTO idempotency_keys (owner, key, request_hash, task_id, created_at_ms)
                 VALUES ($1, $2, $3, $4, $5) ON CONFLICT DO NOTHING",
                &[
                    &key.owner,
                    &key.key,
                    &key.request_hash,
                    &task.id.as_str(),
                    &now,
                ],
            )
            .await?;
            if stored == 0 {
                // A concurrent request with the same key won; roll back and replay it.
                tx.rollback().await.map_err(pg_error)?;
                return Ok(None);
            }
        }
        tx.commit().await.map_err(pg_error)?;
        Ok(Some(Created::New(created)))
    }

    async fn transition_impl(
        &self,
        id: &TaskId,
        from: TaskStatus,
        to: TaskStatus,
        result: Option<serde_json::Value>,
    ) -> Result<Task, StoreError> {
        check_transition(from, to)?;
        let result = json_text(result.as_ref())?;
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        check_status(id, from, lock_task_status(&tx, id).await?)?;
        let open = is_active(to)
            && query_opt(
                &tx,
                "SELECT 1 FROM runs WHERE task_id = $1 AND ended_at_ms IS NULL",
                &[&id.as_str()],
            )
            .await?
            .is_some();
        check_open_run(id, to, open)?;
        if to.is_terminal() {
            end_open_journals(&tx, id, to, result.as_deref(), now).await?;
        }
        if transition_ends_run(to) {
            close_open_runs(&tx, id, status_name(to), now).await?;
        }
        let (task, event) = set_status(&tx, id, to, result.as_deref(), now).await?;
        tx.commit().await.map_err(pg_error)?;
        self.observers.events(&event);
        Ok(task)
    }
}

/// Ends the journal of each open run of the task with the record saying how the task ended
/// ([`crate::journal::ended_from_outside`]), inside the caller's transaction, before the runs
/// close. A worker appending to the same run at the same moment loses on the primary key.
async fn end_open_journals(
    c: &dyn Conn,
    id: &TaskId,
    to: TaskStatus,
    result: Option<&str>,
    now: i64,
) -> Result<(), StoreError> {
    let result: Option<serde_json::Value> = result.map(serde_json::from_str).transpose()?;
    let rows = query(
        c,
        "SELECT r.number, j.seq, j.hash FROM runs r
         JOIN LATERAL (SELECT seq, hash FROM journal
                       WHERE task_id = r.task_id AND run_number = r.number
                       ORDER BY seq DESC LIMIT 1) j ON true
         WHERE r.task_id = $1 AND r.ended_at_ms IS NULL",
        &[&id.as_str()],
    )
    .await?;
    for row in &rows {
        let number: i64 = get(row, "number")?;
        let seq: i64 = get(row, "seq")?;
        let hash: String = get(row, "hash")?;
        let entry = crate::journal::ended_from_outside(
            (crate::rows::to_u64(seq)?, &hash),
            crate::rows::to_u64(now)?,
            to,
            result.as_ref(),
        )?;
        insert_journal(c, id, number, &entry)
            .await?
            .map_err(pg_error)?;
    }
    Ok(())
}
