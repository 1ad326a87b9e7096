//! [`ChatStore`] on Postgres (one file per domain; the pool, the statements shared by several domains and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl ChatStore for PostgresStore {
    fn record_chat_update<'a>(
        &'a self,
        channel: &'a str,
        update_id: i64,
        replies: Vec<NewChatMessage>,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(pg_error)?;
            execute(
                &tx,
                "INSERT INTO chat_offsets (channel, next_offset, updated_at_ms) VALUES ($1, $2, $3)
                 ON CONFLICT (channel) DO UPDATE SET
                     next_offset = GREATEST(chat_offsets.next_offset, excluded.next_offset),
                     updated_at_ms = excluded.updated_at_ms",
                &[&channel, &update_id.saturating_add(1), &now],
            )
            .await?;
            let new = execute(
                &tx,
                "INSERT INTO chat_updates (channel, update_id, handled_at_ms) VALUES ($1, $2, $3)
                 ON CONFLICT DO NOTHING",
                &[&channel, &update_id, &now],
            )
            .await?;
            if new > 0 {
                for reply in &replies {
                    insert_chat_message(&tx, reply, now).await?;
                }
            }
            tx.commit().await.map_err(pg_error)?;
            Ok(new > 0)
        })
    }

    fn chat_update_seen<'a>(
        &'a self,
        channel: &'a str,
        update_id: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            Ok(query_opt(
                &*client,
                "SELECT 1 FROM chat_updates WHERE channel = $1 AND update_id = $2",
                &[&channel, &update_id],
            )
            .await?
            .is_some())
        })
    }

    fn chat_offset<'a>(
        &'a self,
        channel: &'a str,
    ) -> BoxFuture<'a, Result<Option<i64>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            query_opt(
                &*client,
                "SELECT next_offset FROM chat_offsets WHERE channel = $1",
                &[&channel],
            )
            .await?
            .map(|row| get(&row, 0))
            .transpose()
        })
    }

    fn put_chat_message(
        &self,
        message: NewChatMessage,
    ) -> BoxFuture<'_, Result<ChatMessage, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(pg_error)?;
            insert_chat_message(&tx, &message, now).await?;
            execute(
                &tx,
                "UPDATE chat_messages SET text = $2, markup = $3, revision = revision + 1,
                     next_attempt_at_ms = LEAST(next_attempt_at_ms, $4), updated_at_ms = $4
                 WHERE id = $1 AND (text IS DISTINCT FROM $2 OR markup IS DISTINCT FROM $3)
                   AND state <> 'failed'",
                &[&message.id, &message.text, &message.markup, &now],
            )
            .await?;
            let stored = load_chat_message(&tx, &message.id)
                .await?
                .ok_or_else(|| not_found("chat message", &message.id))?;
            tx.commit().await.map_err(pg_error)?;
            Ok(stored)
        })
    }

    fn get_chat_message<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<ChatMessage>, StoreError>> {
        Box::pin(async move {
            let client = self.client().await?;
            load_chat_message(&*client, id).await
        })
    }

    fn due_chat_messages<'a>(
        &'a self,
        channel: &'a str,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<ChatMessage>, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let client = self.client().await?;
            query(
                &*client,
                &format!(
                    "SELECT {CHAT_MESSAGE_COLUMNS} FROM chat_messages
                     WHERE channel = $1 AND next_attempt_at_ms <= $2
                       AND (state IN ('pending', 'sending')
                            OR (state = 'sent' AND revision > delivered_revision))
                     ORDER BY next_attempt_at_ms, created_at_ms, id LIMIT $3"
                ),
                &[&channel, &now, &i64::from(limit)],
            )
            .await?
            .iter()
            .map(read_chat_message)
            .collect()
        })
    }

    fn start_chat_send<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<ChatMessage, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let client = self.client().await?;
            let updated = query_opt(
                &*client,
                &format!(
                    "UPDATE chat_messages SET state = 'sending', attempts = attempts + 1,
                         updated_at_ms = $2
                     WHERE id = $1 AND state IN ('pending', 'sending')
                     RETURNING {CHAT_MESSAGE_COLUMNS}"
                ),
                &[&id, &now],
            )
            .await?;
            match updated {
                Some(row) => read_chat_message(&row),
                None => {
                    let message = load_chat_message(&*client, id)
                        .await?
                        .ok_or_else(|| not_found("chat message", id))?;
                    Err(StoreError::InvalidData(format!(
                        "chat message {id} is {}, not waiting to be sent",
                        message.state.as_str()
                    )))
                }
            }
        })
    }

    fn chat_message_delivered<'a>(
        &'a self,
        id: &'a str,
        message_id: &'a str,
        revision: i64,
    ) -> BoxFuture<'a, Result<ChatMessage, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let client = self.client().await?;
            let updated = query_opt(
                &*client,
                &format!(
                    "UPDATE chat_messages SET state = 'sent', message_id = $2,
                         delivered_revision = GREATEST(delivered_revision, $3), attempts = 0,
                         last_error = NULL, updated_at_ms = $4
                     WHERE id = $1 AND state <> 'failed'
                     RETURNING {CHAT_MESSAGE_COLUMNS}"
                ),
                &[&id, &message_id, &revision, &now],
            )
            .await?;
            match updated {
                Some(row) => read_chat_message(&row),
                None => match load_chat_message(&*client, id).await? {
                    None => Err(not_found("chat message", id)),
                    Some(_) => Err(StoreError::InvalidData(format!(
                        "chat message {id} was given up on"
                    ))),
                },
            }
        })
    }

    fn chat_message_failed<'a>(
        &'a self,
        id: &'a str,
        error: &'a str,
        retry_at_ms: Option<i64>,
    ) -> BoxFuture<'a, Result<ChatMessage, StoreError>> {
        Box::pin(async move {
            let now = self.now();
            let mut client = self.client().await?;
            let tx = client.transaction().await.map_err(pg_error)?;
            let row = query_opt(
                &tx,
                &format!(
                    "SELECT {CHAT_MESSAGE_COLUMNS} FROM chat_messages WHERE id = $1 FOR UPDATE"
                ),
                &[&id],
            )
            .await?
            .ok_or_else(|| not_found("chat message", id))?;
            let message = read_chat_message(&row)?;
            let (state, next, delivered) = crate::checks::chat_failure(&message, retry_at_ms);
            let row = query_one(
                &tx,
                &format!(
                    "UPDATE chat_messages SET state = $2, next_attempt_at_ms = $3,
                         delivered_revision = $4, last_error = $5, updated_at_ms = $6
                     WHERE id = $1 RETURNING {CHAT_MESSAGE_COLUMNS}"
                ),
                &[&id, &state.as_str(), &next, &delivered, &error, &now],
            )
            .await?;
            let updated = read_chat_message(&row)?;
            tx.commit().await.map_err(pg_error)?;
            Ok(updated)
        })
    }
}

fn read_chat_message(row: &Row) -> Result<ChatMessage, StoreError> {
    RawChatMessage {
        id: get(row, "id")?,
        channel: get(row, "channel")?,
        chat: get(row, "chat")?,
        task_id: get(row, "task_id")?,
        text: get(row, "text")?,
        markup: get(row, "markup")?,
        state: get(row, "state")?,
        message_id: get(row, "message_id")?,
        revision: get(row, "revision")?,
        delivered_revision: get(row, "delivered_revision")?,
        attempts: get(row, "attempts")?,
        next_attempt_at_ms: get(row, "next_attempt_at_ms")?,
        last_error: get(row, "last_error")?,
        created_at_ms: get(row, "created_at_ms")?,
        updated_at_ms: get(row, "updated_at_ms")?,
    }
    .decode()
}

async fn load_chat_message(c: &dyn Conn, id: &str) -> Result<Option<ChatMessage>, StoreError> {
    query_opt(
        c,
        &format!("SELECT {CHAT_MESSAGE_COLUMNS} FROM chat_messages WHERE id = $1"),
        &[&id],
    )
    .await?
    .as_ref()
    .map(read_chat_message)
    .transpose()
}

/// Inserts `message` as pending and due at `now`, unless its id exists.
async fn insert_chat_message(
    c: &dyn Conn,
    message: &NewChatMessage,
    now: i64,
) -> Result<(), StoreError> {
    execute(
        c,
        "INSERT INTO chat_messages (id, channel, chat, task_id, text, markup, state, revision,
             delivered_revision, attempts, next_attempt_at_ms, created_at_ms, updated_at_ms)
         VALUES ($1, $2, $3, $4, $5, $6, 'pending', 1, 0, 0, $7, $7, $7)
         ON CONFLICT (id) DO NOTHING",
        &[
            &message.id,
            &message.channel,
            &message.chat,
            &message.task.as_ref().map(TaskId::as_str),
            &message.text,
            &message.markup,
            &now,
        ],
    )
    .await?;
    Ok(())
}
