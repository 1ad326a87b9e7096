//! Chat interfaces' storage (Telegram): an update is handled once with its replies in the same
//! transaction, the polling offset only moves forward, and an outbound message goes pending →
//! sending → sent with the id the channel returned, an edit due whenever its text changes.

use std::time::Duration;

use warden_store::{ChatMessageState, NewChatMessage, StoreError};

use super::harness::{Fixture, START_MS};

fn message(id: &str, text: &str) -> NewChatMessage {
    NewChatMessage {
        id: id.into(),
        channel: "telegram".into(),
        chat: "42".into(),
        task: None,
        text: text.into(),
        markup: None,
    }
}

async fn an_update_is_recorded_once_with_its_replies_and_moves_the_offset(f: &Fixture) {
    assert_eq!(f.store.chat_offset("telegram").await.unwrap(), None);
    let first = f
        .store
        .record_chat_update("telegram", 10, vec![message("tg:u:10", "hello")])
        .await
        .unwrap();
    assert!(first);
    assert!(f.store.chat_update_seen("telegram", 10).await.unwrap());
    assert!(!f.store.chat_update_seen("telegram", 11).await.unwrap());
    assert_eq!(f.store.chat_offset("telegram").await.unwrap(), Some(11));
    // A replay: nothing recorded, the reply not replaced.
    let again = f
        .store
        .record_chat_update("telegram", 10, vec![message("tg:u:10", "other")])
        .await
        .unwrap();
    assert!(!again);
    let stored = f.store.get_chat_message("tg:u:10").await.unwrap().unwrap();
    assert_eq!(stored.text, "hello");
    // An older update seen late does not move the offset back; channels are separate.
    assert!(f
        .store
        .record_chat_update("telegram", 7, vec![])
        .await
        .unwrap());
    assert_eq!(f.store.chat_offset("telegram").await.unwrap(), Some(11));
    assert_eq!(f.store.chat_offset("slack").await.unwrap(), None);
    assert!(f
        .store
        .record_chat_update("slack", 10, vec![])
        .await
        .unwrap());
}

async fn a_message_is_sent_once_then_edited_when_its_text_changes(f: &Fixture) {
    let put = f
        .store
        .put_chat_message(message("m1", "queued"))
        .await
        .unwrap();
    assert_eq!(put.state, ChatMessageState::Pending);
    assert_eq!((put.revision, put.delivered_revision), (1, 0));
    assert_eq!(put.created_at_ms, START_MS);
    let due = f.store.due_chat_messages("telegram", 10).await.unwrap();
    assert_eq!(due.len(), 1);

    let sending = f.store.start_chat_send("m1").await.unwrap();
    assert_eq!(sending.state, ChatMessageState::Sending);
    assert_eq!(sending.attempts, 1);
    // Still due: a crash here leaves a send whose outcome is unknown.
    assert_eq!(
        f.store
            .due_chat_messages("telegram", 10)
            .await
            .unwrap()
            .len(),
        1
    );
    let sent = f
        .store
        .chat_message_delivered("m1", "900", 1)
        .await
        .unwrap();
    assert_eq!(sent.state, ChatMessageState::Sent);
    assert_eq!(sent.message_id.as_deref(), Some("900"));
    assert!(!sent.needs_edit());
    assert!(f
        .store
        .due_chat_messages("telegram", 10)
        .await
        .unwrap()
        .is_empty());
    // Sending a sent message again is refused.
    assert!(matches!(
        f.store.start_chat_send("m1").await,
        Err(StoreError::InvalidData(_))
    ));

    // The same text: nothing to do. Another text: an edit, due now.
    let same = f
        .store
        .put_chat_message(message("m1", "queued"))
        .await
        .unwrap();
    assert_eq!(same.revision, 1);
    let edited = f
        .store
        .put_chat_message(message("m1", "running"))
        .await
        .unwrap();
    assert_eq!(edited.revision, 2);
    assert!(edited.needs_edit());
    let due = f.store.due_chat_messages("telegram", 10).await.unwrap();
    assert_eq!(due[0].text, "running");
    let shown = f
        .store
        .chat_message_delivered("m1", "900", 2)
        .await
        .unwrap();
    assert!(!shown.needs_edit());
    assert_eq!(shown.message_id.as_deref(), Some("900"));
}

async fn refused_attempts_are_retried_later_or_given_up(f: &Fixture) {
    f.store.put_chat_message(message("m2", "hi")).await.unwrap();
    f.store.start_chat_send("m2").await.unwrap();
    let retry_at = START_MS + 5_000;
    let waiting = f
        .store
        .chat_message_failed("m2", "429: slow down", Some(retry_at))
        .await
        .unwrap();
    assert_eq!(waiting.state, ChatMessageState::Pending);
    assert_eq!(waiting.next_attempt_at_ms, retry_at);
    assert_eq!(waiting.last_error.as_deref(), Some("429: slow down"));
    assert!(f
        .store
        .due_chat_messages("telegram", 10)
        .await
        .unwrap()
        .is_empty());
    f.clock.advance(Duration::from_secs(5));
    assert_eq!(
        f.store
            .due_chat_messages("telegram", 10)
            .await
            .unwrap()
            .len(),
        1
    );
    f.store.start_chat_send("m2").await.unwrap();
    let failed = f
        .store
        .chat_message_failed("m2", "403: blocked", None)
        .await
        .unwrap();
    assert_eq!(failed.state, ChatMessageState::Failed);
    assert!(f
        .store
        .due_chat_messages("telegram", 10)
        .await
        .unwrap()
        .is_empty());
    // A failed message is not revived by a new text.
    let kept = f
        .store
        .put_chat_message(message("m2", "again"))
        .await
        .unwrap();
    assert_eq!(kept.state, ChatMessageState::Failed);
    assert!(f
        .store
        .due_chat_messages("telegram", 10)
        .await
        .unwrap()
        .is_empty());

    // A sent message whose edit is refused for good keeps what it shows.
    f.store
        .put_chat_message(message("m3", "one"))
        .await
        .unwrap();
    f.store.start_chat_send("m3").await.unwrap();
    f.store.chat_message_delivered("m3", "7", 1).await.unwrap();
    f.store
        .put_chat_message(message("m3", "two"))
        .await
        .unwrap();
    let dropped = f
        .store
        .chat_message_failed("m3", "400: bad", None)
        .await
        .unwrap();
    assert_eq!(dropped.state, ChatMessageState::Sent);
    assert!(!dropped.needs_edit());
    assert!(f
        .store
        .due_chat_messages("telegram", 10)
        .await
        .unwrap()
        .is_empty());
}

conformance!(
    an_update_is_recorded_once_with_its_replies_and_moves_the_offset,
    a_message_is_sent_once_then_edited_when_its_text_changes,
    refused_attempts_are_retried_later_or_given_up,
);
