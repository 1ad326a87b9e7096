//! `[telegram]` and `[slack]`: the chat interfaces of `warden serve` (off without them).

use serde::Deserialize;

/// `[telegram]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelegramSection {
    /// Default `https://api.telegram.org` (a local Bot API server: its URL);
    /// `WARDEN_TELEGRAM_API_URL` overrides.
    pub api_url: Option<String>,
    /// Seconds one `getUpdates` waits for updates (long polling; 0: short polling). Default 30.
    pub poll_timeout_secs: Option<u64>,
    /// Milliseconds between polls after a failure, and between short polls. Default 1000.
    pub poll_interval_ms: Option<u64>,
    /// Webhook mode instead of long polling: the public URL of this server's
    /// `/webhooks/telegram`, registered with `setWebhook` at start-up. Needs
    /// `WARDEN_TELEGRAM_WEBHOOK_SECRET`, which Telegram sends back in
    /// `X-Telegram-Bot-Api-Secret-Token` with every update.
    pub webhook_url: Option<String>,
    /// Whether start-up failures of Warden's other interfaces (a Slack token refused, a GitHub
    /// App key refused) are sent to the allow-listed admins' private chats. Default true.
    pub alerts: Option<bool>,
    /// The allow-list: who may use the bot, and as whom.
    #[serde(default)]
    pub users: Vec<TelegramUserEntry>,
}

/// One `[[telegram.users]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TelegramUserEntry {
    /// The Telegram user id (numeric; usernames can change hands, ids cannot).
    pub id: i64,
    /// The Warden principal the user acts as (tasks are filed under it).
    pub name: String,
    /// `admin`, `operator` or `viewer`.
    pub role: String,
}

/// `[slack]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackSection {
    /// Default `https://slack.com/api`; `WARDEN_SLACK_API_URL` overrides.
    pub api_url: Option<String>,
    /// The allow-list: who may use the app, and as whom.
    #[serde(default)]
    pub users: Vec<SlackUserEntry>,
    /// Channels and the repository a mention there is about by default.
    #[serde(default)]
    pub channels: Vec<SlackChannelEntry>,
    /// Slack user ids that may press Approve/Reject (each an allow-listed admin). Default: every
    /// allow-listed admin, unless `approver_groups` is set.
    pub approvers: Option<Vec<String>>,
    /// Slack user group ids (`S…`) whose members may press Approve/Reject, read with
    /// `usergroups.users.list` at each press (scope `usergroups:read`); a member must still be
    /// an allow-listed admin.
    #[serde(default)]
    pub approver_groups: Vec<String>,
    /// A channel (`C…`/`G…`) where start-up failures of Warden's other interfaces (a Telegram
    /// token refused, a GitHub App key refused) are reported.
    pub alerts_channel: Option<String>,
}

/// One `[[slack.users]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackUserEntry {
    /// The Slack user id (`U…` or `W…`; names can change, ids cannot).
    pub id: String,
    /// The Warden principal the user acts as.
    pub name: String,
    /// `admin`, `operator` or `viewer`.
    pub role: String,
}

/// One `[[slack.channels]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlackChannelEntry {
    /// The channel id (`C…`, `G…` or `D…`).
    pub id: String,
    /// The registered repository a mention in this channel is about unless it names one.
    pub repo: String,
}
