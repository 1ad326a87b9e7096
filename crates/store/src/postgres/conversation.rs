//! [`ConversationStore`] on Postgres (one file per domain; the pool, the statements shared by several domains and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl ConversationStore for PostgresStore {
    fn append_task_message<'a>(
        &'a self,
        task: &'a TaskId,
        role: &'a str,
        text: &'a str,
        author: &'a str,
    ) -> BoxFuture<'a, Result<TaskMessage, StoreError>> {
        Box::pin(self.append_task_message_impl(task, role, text, author))
    }

    fn task_messages<'a>(
        &'a self,
        task: &'a TaskId,
    ) -> BoxFuture<'a, Result<Vec<TaskMessage>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            query(
                &*client,
                &format!(
                    "SELECT {MESSAGE_COLUMNS} FROM task_messages WHERE task_id = $1 ORDER BY seq"
                ),
                &[&task.as_str()],
            )
            .await?
            .iter()
            .map(read_message)
            .collect()
        })
    }

    fn answer_task<'a>(
        &'a self,
        task: &'a TaskId,
        text: &'a str,
        author: &'a str,
    ) -> BoxFuture<'a, Result<Task, StoreError>> {
        Box::pin(self.answer_task_impl(task, text, author))
    }
}

impl PostgresStore {
    async fn append_task_message_impl(
        &self,
        task: &TaskId,
        role: &str,
        text: &str,
        author: &str,
    ) -> Result<TaskMessage, StoreError> {
        check_message_role(role)?;
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        lock_task_status(&tx, task).await?;
        let message = insert_message(&tx, task, role, text, author, now).await?;
        tx.commit().await.map_err(pg_error)?;
        Ok(message)
    }

    async fn answer_task_impl(
        &self,
        task: &TaskId,
        text: &str,
        author: &str,
    ) -> Result<Task, StoreError> {
        let now = self.now();
        let mut client = self.client().await?;
        let tx = client.transaction().await.map_err(pg_error)?;
        check_status(
            task,
            TaskStatus::WaitingInput,
            lock_task_status(&tx, task).await?,
        )?;
        insert_message(&tx, task, MESSAGE_USER, text, author, now).await?;
        close_open_runs(&tx, task, status_name(TaskStatus::Queued), now).await?;
        let (answered, event) = set_status(&tx, task, TaskStatus::Queued, None, now).await?;
        tx.commit().await.map_err(pg_error)?;
        self.observers.events(&event);
        Ok(answered)
    }
}

fn read_message(row: &Row) -> Result<TaskMessage, StoreError> {
    RawMessage {
        seq: get(row, "seq")?,
        role: get(row, "role")?,
        text: get(row, "text")?,
        author: get(row, "author")?,
        at_ms: get(row, "at_ms")?,
    }
    .decode()
}

/// Appends a message to a task whose row `tx` has locked (so sequences cannot collide).
async fn insert_message(
    tx: &Transaction<'_>,
    task: &TaskId,
    role: &str,
    text: &str,
    author: &str,
    now: i64,
) -> Result<TaskMessage, StoreError> {
    let row = query_one(
        tx,
        &format!(
            "INSERT INTO task_messages (task_id, seq, role, text, author, at_ms)
             VALUES ($1, (SELECT COALESCE(MAX(seq), 0) + 1 FROM task_messages WHERE task_id = $1),
                     $2, $3, $4, $5)
             RETURNING {MESSAGE_COLUMNS}"
        ),
        &[&task.as_str(), &role, &text, &author, &now],
    )
    .await?;
    read_message(&row)
}
