//! [`TaskStore`] on SQLite (one file per domain; the connection, the writer and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl TaskStore for SqliteStore {
    fn create_task(
        &self,
        task: NewTask,
        idempotency: Option<IdempotencyKey>,
    ) -> BoxFuture<'_, Result<Created, StoreError>> {
        self.write(move |conn, now| {
            if let Some(key) = &idempotency {
                let seen: Option<(String, String)> = conn
                    .prepare_cached(
                        "SELECT request_hash, task_id FROM idempotency_keys
                         WHERE owner = ?1 AND key = ?2",
                    )
                    .db()?
                    .query_row(params![key.owner, key.key], |row| {
                        Ok((row.get("request_hash")?, row.get("task_id")?))
                    })
                    .optional()
                    .db()?;
                if let Some((hash, task_id)) = seen {
                    check_replay(key, &hash)?;
                    let task =
                        load_task(conn, &task_id)?.ok_or_else(|| not_found("task", &task_id))?;
                    return Ok(Created::Replayed(task));
                }
            }
            if let Some(old) = &task.retry_of {
                check_retryable(old, task_status(conn, old)?)?;
            }
            if let Some(parent) = &task.follow_up_to {
                task_status(conn, parent)?;
            }
            if load_task(conn, task.id.as_str())?.is_some() {
                return Err(StoreError::AlreadyExists {
                    what: "task",
                    id: task.id.to_string(),
                });
            }
            conn.prepare_cached(
                "INSERT INTO tasks (id, kind, status, owner, prompt, repos, priority,
                     created_at_ms, updated_at_ms, follow_up_to, retry_of, result, metadata,
                     callback_url)
                 VALUES (?1, ?2, 'queued', ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9, NULL, ?10, ?11)",
            )
            .db()?
            .execute(params![
                task.id.as_str(),
                kind_name(task.kind),
                task.owner,
                task.prompt,
                serde_json::to_string(&task.repos)?,
                task.priority,
                now,
                task.follow_up_to.as_ref().map(TaskId::as_str),
                task.retry_of.as_ref().map(TaskId::as_str),
                serde_json::to_string(&task.metadata)?,
                task.callback_url,
            ])
            .db()?;
            {
                let mut insert_repo = conn
                    .prepare_cached(
                        "INSERT INTO task_repos (task_id, repo) VALUES (?1, ?2)
                         ON CONFLICT DO NOTHING",
                    )
                    .db()?;
                for repo in &task.repos {
                    insert_repo
                        .execute(params![task.id.as_str(), repo.name])
                        .db()?;
                }
            }
            if let Some(key) = &idempotency {
                conn.prepare_cached(
                    "INSERT INTO idempotency_keys (owner, key, request_hash, task_id, created_at_ms)
                     VALUES (?1, ?2, ?3, ?4, ?5)",
                )
                .db()?
                .execute(params![
                    key.owner,
                    key.key,
                    key.request_hash,
                    task.id.as_str(),
                    now
                ])
                .db()?;
            }
            let created = require_task(conn, &task.id)?;
            Ok(Created::New(created))
        })
    }

    fn get_task<'a>(&'a self, id: &'a TaskId) -> BoxFuture<'a, Result<Option<Task>, StoreError>> {
        let id = id.clone();
        self.read(move |conn| load_task(conn, id.as_str()))
    }

    fn list_tasks(&self, query: TaskQuery) -> BoxFuture<'_, Result<Vec<Task>, StoreError>> {
        self.read(move |conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {TASK_COLUMNS} FROM tasks
                     WHERE (?1 IS NULL OR owner = ?1) AND (?2 IS NULL OR status = ?2)
                       AND (?3 IS NULL OR id < ?3)
                     ORDER BY id DESC LIMIT ?4"
                ))
                .db()?;
            let rows = statement
                .query_map(
                    params![
                        query.owner,
                        query.status.map(status_name),
                        query.before.as_ref().map(TaskId::as_str),
                        query.limit
                    ],
                    read_task,
                )
                .db()?;
            rows.map(|row| row.db()?.decode()).collect()
        })
    }

    fn transition<'a>(
        &'a self,
        id: &'a TaskId,
        from: TaskStatus,
        to: TaskStatus,
        result: Option<serde_json::Value>,
    ) -> BoxFuture<'a, Result<Task, StoreError>> {
        let id = id.clone();
        self.write_observed(
            move |conn, now| {
                check_transition(from, to)?;
                let result = json_text(result.as_ref())?;
                check_status(&id, from, task_status(conn, &id)?)?;
                check_open_run(&id, to, is_active(to) && has_open_run(conn, &id)?)?;
                if to.is_terminal() {
                    end_open_journals(conn, &id, to, result.as_deref(), now)?;
                }
                if transition_ends_run(to) {
                    close_open_runs(conn, &id, status_name(to), now)?;
                }
                set_status(conn, &id, to, result.as_deref(), now)
            },
            |observers, (task, event)| {
                observers.events(&event);
                task
            },
        )
    }
}

fn has_open_run(conn: &Connection, id: &TaskId) -> Result<bool, StoreError> {
    conn.prepare_cached("SELECT 1 FROM runs WHERE task_id = ?1 AND ended_at_ms IS NULL")
        .db()?
        .exists([id.as_str()])
        .db()
}

/// Ends the journal of each open run of the task with the record saying how the task ended
/// ([`crate::journal::ended_from_outside`]), inside the caller's write, before the runs close.
fn end_open_journals(
    conn: &Connection,
    id: &TaskId,
    to: TaskStatus,
    result: Option<&str>,
    now: i64,
) -> Result<(), StoreError> {
    let result: Option<serde_json::Value> = result.map(serde_json::from_str).transpose()?;
    let open: Vec<i64> = conn
        .prepare_cached("SELECT number FROM runs WHERE task_id = ?1 AND ended_at_ms IS NULL")
        .db()?
        .query_map(params![id.as_str()], |row| row.get("number"))
        .db()?
        .collect::<Result<_, _>>()
        .db()?;
    for number in open {
        let tail: Option<(i64, String)> = conn
            .prepare_cached(
                "SELECT seq, hash FROM journal WHERE task_id = ?1 AND run_number = ?2
                 ORDER BY seq DESC LIMIT 1",
            )
            .db()?
            .query_row(params![id.as_str(), number], |row| {
                Ok((row.get("seq")?, row.get("hash")?))
            })
            .optional()
            .db()?;
        // A run that journaled nothing yet has no chain to end.
        let Some((seq, hash)) = tail else { continue };
        let entry = crate::journal::ended_from_outside(
            (crate::rows::to_u64(seq)?, &hash),
            crate::rows::to_u64(now)?,
            to,
            result.as_ref(),
        )?;
        insert_journal(conn, id, number, &entry)?;
    }
    Ok(())
}
