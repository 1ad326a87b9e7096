//! [`ChatStore`] on SQLite (one file per domain; the connection, the writer and the row readers are `mod.rs`'s).

use super::*;
use crate::prelude::*;

impl ChatStore for SqliteStore {
    fn record_chat_update<'a>(
        &'a self,
        channel: &'a str,
        update_id: i64,
        replies: Vec<NewChatMessage>,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let channel = channel.to_string();
        self.write(move |conn, now| {
            conn.prepare_cached(
                "INSERT INTO chat_offsets (channel, next_offset, updated_at_ms) VALUES (?1, ?2, ?3)
                 ON CONFLICT (channel) DO UPDATE SET
                     next_offset = MAX(next_offset, excluded.next_offset),
                     updated_at_ms = excluded.updated_at_ms",
            )
            .db()?
            .execute(params![channel, update_id.saturating_add(1), now])
            .db()?;
            let new = conn
                .prepare_cached(
                    "INSERT INTO chat_updates (channel, update_id, handled_at_ms) VALUES (?1, ?2, ?3)
                     ON CONFLICT DO NOTHING",
                )
                .db()?
                .execute(params![channel, update_id, now])
                .db()?;
            if new == 0 {
                return Ok(false);
            }
            for reply in replies {
                insert_chat_message(conn, &reply, now)?;
            }
            Ok(true)
        })
    }

    fn chat_update_seen<'a>(
        &'a self,
        channel: &'a str,
        update_id: i64,
    ) -> BoxFuture<'a, Result<bool, StoreError>> {
        let channel = channel.to_string();
        self.read(move |conn| {
            conn.prepare_cached("SELECT 1 FROM chat_updates WHERE channel = ?1 AND update_id = ?2")
                .db()?
                .query_row(params![channel, update_id], |_| Ok(()))
                .optional()
                .db()
                .map(|found| found.is_some())
        })
    }

    fn chat_offset<'a>(
        &'a self,
        channel: &'a str,
    ) -> BoxFuture<'a, Result<Option<i64>, StoreError>> {
        let channel = channel.to_string();
        self.read(move |conn| {
            conn.prepare_cached("SELECT next_offset FROM chat_offsets WHERE channel = ?1")
                .db()?
                .query_row([channel], |row| row.get("next_offset"))
                .optional()
                .db()
        })
    }

    fn put_chat_message(
        &self,
        message: NewChatMessage,
    ) -> BoxFuture<'_, Result<ChatMessage, StoreError>> {
        self.write(move |conn, now| {
            insert_chat_message(conn, &message, now)?;
            conn.prepare_cached(
                "UPDATE chat_messages SET text = ?2, markup = ?3, revision = revision + 1,
                     next_attempt_at_ms = MIN(next_attempt_at_ms, ?4), updated_at_ms = ?4
                 WHERE id = ?1 AND (text IS NOT ?2 OR markup IS NOT ?3) AND state != 'failed'",
            )
            .db()?
            .execute(params![message.id, message.text, message.markup, now])
            .db()?;
            load_chat_message(conn, &message.id)?
                .ok_or_else(|| not_found("chat message", &message.id))
        })
    }

    fn get_chat_message<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<Option<ChatMessage>, StoreError>> {
        let id = id.to_string();
        self.read(move |conn| load_chat_message(conn, &id))
    }

    fn due_chat_messages<'a>(
        &'a self,
        channel: &'a str,
        limit: u32,
    ) -> BoxFuture<'a, Result<Vec<ChatMessage>, StoreError>> {
        let channel = channel.to_string();
        let now = self.inner.clock.now_ms();
        self.read(move |conn| {
            let mut statement = conn
                .prepare_cached(&format!(
                    "SELECT {CHAT_MESSAGE_COLUMNS} FROM chat_messages
                     WHERE channel = ?1 AND next_attempt_at_ms <= ?2
                       AND (state IN ('pending', 'sending')
                            OR (state = 'sent' AND revision > delivered_revision))
                     ORDER BY next_attempt_at_ms, created_at_ms, id LIMIT ?3"
                ))
                .db()?;
            let rows = statement
                .query_map(params![channel, now, limit], read_chat_message)
                .db()?;
            rows.map(|row| row.db()?.decode()).collect()
        })
    }

    fn start_chat_send<'a>(
        &'a self,
        id: &'a str,
    ) -> BoxFuture<'a, Result<ChatMessage, StoreError>> {
        let id = id.to_string();
        self.write(move |conn, now| {
            let updated = conn
                .prepare_cached(
                    "UPDATE chat_messages SET state = 'sending', attempts = attempts + 1,
                         updated_at_ms = ?2
                     WHERE id = ?1 AND state IN ('pending', 'sending')",
                )
                .db()?
                .execute(params![id, now])
                .db()?;
            let message =
                load_chat_message(conn, &id)?.ok_or_else(|| not_found("chat message", &id))?;
            if updated == 0 {
                return Err(StoreError::InvalidData(format!(
                    "chat message {id} is {}, not waiting to be sent",
                    message.state.as_str()
                )));
            }
            Ok(message)
        })
    }

    fn chat_message_delivered<'a>(
        &'a self,
        id: &'a str,
        message_id: &'a str,
        revision: i64,
    ) -> BoxFuture<'a, Result<ChatMessage, StoreError>> {
        let (id, message_id) = (id.to_string(), message_id.to_string());
        self.write(move |conn, now| {
            let updated = conn
                .prepare_cached(
                    "UPDATE chat_messages SET state = 'sent', message_id = ?2,
                         delivered_revision = MAX(delivered_revision, ?3), attempts = 0,
                         last_error = NULL, updated_at_ms = ?4
                     WHERE id = ?1 AND state != 'failed'",
                )
                .db()?
                .execute(params![id, message_id, revision, now])
                .db()?;
            let message =
                load_chat_message(conn, &id)?.ok_or_else(|| not_found("chat message", &id))?;
            if updated == 0 {
                return Err(StoreError::InvalidData(format!(
                    "chat message {id} was given up on"
                )));
            }
            Ok(message)
        })
    }

    fn chat_message_failed<'a>(
        &'a self,
        id: &'a str,
        error: &'a str,
        retry_at_ms: Option<i64>,
    ) -> BoxFuture<'a, Result<ChatMessage, StoreError>> {
        let (id, error) = (id.to_string(), error.to_string());
        self.write(move |conn, now| {
            let message =
                load_chat_message(conn, &id)?.ok_or_else(|| not_found("chat message", &id))?;
            let (state, next, delivered) = crate::checks::chat_failure(&message, retry_at_ms);
            conn.prepare_cached(
                "UPDATE chat_messages SET state = ?2, next_attempt_at_ms = ?3,
                     delivered_revision = ?4, last_error = ?5, updated_at_ms = ?6
                 WHERE id = ?1",
            )
            .db()?
            .execute(params![id, state.as_str(), next, delivered, error, now])
            .db()?;
            load_chat_message(conn, &id)?.ok_or_else(|| not_found("chat message", &id))
        })
    }
}

fn read_chat_message(row: &Row<'_>) -> rusqlite::Result<RawChatMessage> {
    Ok(RawChatMessage {
        id: row.get("id")?,
        channel: row.get("channel")?,
        chat: row.get("chat")?,
        task_id: row.get("task_id")?,
        text: row.get("text")?,
        markup: row.get("markup")?,
        state: row.get("state")?,
        message_id: row.get("message_id")?,
        revision: row.get("revision")?,
        delivered_revision: row.get("delivered_revision")?,
        attempts: row.get("attempts")?,
        next_attempt_at_ms: row.get("next_attempt_at_ms")?,
        last_error: row.get("last_error")?,
        created_at_ms: row.get("created_at_ms")?,
        updated_at_ms: row.get("updated_at_ms")?,
    })
}

fn load_chat_message(conn: &Connection, id: &str) -> Result<Option<ChatMessage>, StoreError> {
    conn.prepare_cached(&format!(
        "SELECT {CHAT_MESSAGE_COLUMNS} FROM chat_messages WHERE id = ?1"
    ))
    .db()?
    .query_row([id], read_chat_message)
    .optional()
    .db()?
    .map(RawChatMessage::decode)
    .transpose()
}

/// Inserts `message` as pending and due at `now`, unless its id exists.
fn insert_chat_message(
    conn: &Connection,
    message: &NewChatMessage,
    now: i64,
) -> Result<(), StoreError> {
    conn.prepare_cached(
        "INSERT INTO chat_messages (id, channel, chat, task_id, text, markup, state, revision,
             delivered_revision, attempts, next_attempt_at_ms, created_at_ms, updated_at_ms)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, 'pending', 1, 0, 0, ?7, ?7, ?7)
         ON CONFLICT (id) DO NOTHING",
    )
    .db()?
    .execute(params![
        message.id,
        message.channel,
        message.chat,
        message.task.as_ref().map(TaskId::as_str),
        message.text,
        message.markup,
        now
    ])
    .db()?;
    Ok(())
}
