//! [`ConversationStore`] on SQLite (one file per domain; the connection, the writer and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl ConversationStore for SqliteStore {
    fn append_task_message<'a>(
        &'a self,
        task: &'a TaskId,
        role: &'a str,
        text: &'a str,
        author: &'a str,
    ) -> BoxFuture<'a, Result<TaskMessage, StoreError>> {
        let task = task.clone();
        let (role, text, author) = (role.to_string(), text.to_string(), author.to_string());
        self.write(move |conn, now| {
            task_status(conn, &task)?;
            insert_message(conn, &task, &role, &text, &author, now)
        })
    }

    fn task_messages<'a>(
        &'a self,
        task: &'a TaskId,
    ) -> BoxFuture<'a, Result<Vec<TaskMessage>, StoreError>> {
        let task = task.clone();
        self.read(move |conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {MESSAGE_COLUMNS} FROM task_messages WHERE task_id = ?1 ORDER BY seq"
                ))
                .db()?;
            let rows = statement.query_map([task.as_str()], read_message).db()?;
            rows.map(|row| row.db()?.decode()).collect()
        })
    }

    fn answer_task<'a>(
        &'a self,
        task: &'a TaskId,
        text: &'a str,
        author: &'a str,
    ) -> BoxFuture<'a, Result<Task, StoreError>> {
        let task = task.clone();
        let (text, author) = (text.to_string(), author.to_string());
        self.write_observed(
            move |conn, now| {
                check_status(&task, TaskStatus::WaitingInput, task_status(conn, &task)?)?;
                insert_message(conn, &task, MESSAGE_USER, &text, &author, now)?;
                close_open_runs(conn, &task, status_name(TaskStatus::Queued), now)?;
                set_status(conn, &task, TaskStatus::Queued, None, now)
            },
            |observers, (task, event)| {
                observers.events(&event);
                task
            },
        )
    }
}

fn read_message(row: &Row<'_>) -> rusqlite::Result<RawMessage> {
    Ok(RawMessage {
        seq: row.get("seq")?,
        role: row.get("role")?,
        text: row.get("text")?,
        author: row.get("author")?,
        at_ms: row.get("at_ms")?,
    })
}

/// Appends a message to an existing task's conversation (the caller checked the task).
fn insert_message(
    conn: &Connection,
    task: &TaskId,
    role: &str,
    text: &str,
    author: &str,
    now: i64,
) -> Result<TaskMessage, StoreError> {
    check_message_role(role)?;
    conn.prepare_cached(&format!(
        "INSERT INTO task_messages (task_id, seq, role, text, author, at_ms)
         VALUES (?1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM task_messages WHERE task_id = ?1),
                 ?2, ?3, ?4, ?5)
         RETURNING {MESSAGE_COLUMNS}"
    ))
    .db()?
    .query_row(
        params![task.as_str(), role, text, author, now],
        read_message,
    )
    .db()?
    .decode()
}
