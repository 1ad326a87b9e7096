//! Start-up failures of an interface, reported where an operator will see them. An interface
//! that cannot serve (Telegram or Slack refusing its token, GitHub refusing the App's key) can
//! rarely say so through itself, so the report goes to the *other* chats' alert destinations:
//! the admins' private chats on Telegram (`[telegram] alerts`, on by default) and Slack's
//! `[slack] alerts_channel`. Reports go through the chats' outbox like every message (sent
//! once, retried, never lost on a crash); one per failing interface per start of `serve`.

use std::sync::Arc;

use warden_engine::slack_config::SlackConfig;
use warden_engine::telegram_config::TelegramConfig;
use warden_store::{NewChatMessage, Store};

/// Where start-up failures go; cheap to clone.
#[derive(Clone)]
pub struct Alerts {
    store: Arc<dyn Store>,
    /// `(channel, chat)` pairs.
    destinations: Arc<Vec<(&'static str, String)>>,
    /// This start of `serve`, in the message ids: a restart reports again, a repeat does not.
    started_ms: i64,
}

impl Alerts {
    /// The destinations the chat configurations name (none: reports are only logged).
    pub fn new(
        store: Arc<dyn Store>,
        telegram: Option<&TelegramConfig>,
        slack: Option<&SlackConfig>,
    ) -> Alerts {
        let mut destinations = Vec::new();
        if let Some(telegram) = telegram.filter(|t| t.alerts) {
            destinations.extend(
                telegram
                    .users
                    .iter()
                    .filter(|u| u.role == "admin")
                    // A private chat's id is its user's id.
                    .map(|u| (crate::telegram::CHANNEL, u.id.to_string())),
            );
        }
        if let Some(channel) = slack.and_then(|s| s.alerts_channel.clone()) {
            destinations.push((crate::slack::CHANNEL, channel));
        }
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
        for (channel, chat) in self.destinations.iter() {
            if *channel == source {
                continue;
            }
            let text = match *channel {
                crate::slack::CHANNEL => {
                    format!(":warning: *Warden:* {}", crate::slack::text::mrkdwn(what))
                }
                _ => format!("⚠ Warden: {}", crate::chat::text::inert(what)),
            };
            let message = NewChatMessage {
                id: format!("alert:{source}:{}:{chat}", self.started_ms),
                channel: (*channel).to_string(),
                chat: chat.clone(),
                task: None,
                text,
                markup: None,
            };
            match self.store.put_chat_message(message).await {
                Ok(_) => queued += 1,
                Err(error) => {
                    tracing::warn!(%error, source, channel, "could not queue a start-up alert")
                }
            }
        }
        queued
    }
}
