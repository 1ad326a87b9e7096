//! Start-up failures of an interface, reported where an operator will see them. An interface
//! that cannot serve (Telegram or Slack refusing its token, GitHub refusing the App's key) can
//! rarely say so through itself, so the report goes to the *other* chats' alert destinations:
//! the admins' private chats on Telegram (`[telegram] alerts`, on by default) and Slack's
//! `[slack] alerts_channel`. Reports go through the chats' outbox like every message (sent
//! once, retried, never lost on a crash); one per failing interface per start of `serve`.

use std::sync::Arc;

use warden_store::{NewChatMessage, Store};

/// One place a report goes: a chat of a channel, and how that channel shows a report's text.
#[derive(Clone)]
pub struct Destination {
    /// The store's channel name (`telegram`, `slack`).
    pub channel: &'static str,
    pub chat: String,
    /// The report's plain text as the channel's markup, inert.
    pub format: fn(&str) -> String,
}

/// Where start-up failures go; cheap to clone.
#[derive(Clone)]
pub struct Alerts {
    store: Arc<dyn Store>,
    destinations: Arc<Vec<Destination>>,
    /// This start of `serve`, in the message ids: a restart reports again, a repeat does not.
    started_ms: i64,
}

impl Alerts {
    /// Reports go to `destinations` (each chat interface names its own: `telegram::alert_
    /// destinations`, `slack::alert_destinations`); none: reports are only logged.
    pub fn new(store: Arc<dyn Store>, destinations: Vec<Destination>) -> Alerts {
        Alerts {
            store,
            destinations: Arc::new(destinations),
            started_ms: crate::chat::now_ms(),
        }
    }

    /// Reports that `source` (`telegram`, `slack`, `github`: the failing interface, which is
    /// not told) cannot serve, and why, to every other destination; the number queued. A store
    /// failure is logged: the report is best effort, the failure is already on stderr.
    pub async fn report(&self, source: &str, what: &str) -> usize {
        let mut queued = 0;
        for destination in self.destinations.iter() {
            if destination.channel == source {
                continue;
            }
            let message = NewChatMessage {
                id: format!("alert:{source}:{}:{}", self.started_ms, destination.chat),
                channel: destination.channel.to_string(),
                chat: destination.chat.clone(),
                task: None,
                text: (destination.format)(what),
                markup: None,
            };
            match self.store.put_chat_message(message).await {
                Ok(_) => queued += 1,
                Err(error) => tracing::warn!(
                    %error,
                    source,
                    channel = destination.channel,
                    "could not queue a start-up alert"
                ),
            }
        }
        queued
    }
}
