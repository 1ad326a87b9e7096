//! The `[telegram]` section of `warden.toml`: the Telegram bot `warden serve` runs when it is
//! configured (off otherwise). Who may talk to it is a numeric user-id allow-list, each id
//! mapped to a Warden principal (name and role); the bot token is never read from this file,
//! only from `WARDEN_TELEGRAM_TOKEN`.

use anyhow::bail;
use std::time::Duration;
use warden_config::TelegramSection;

use super::chat::ChatSecret;

/// Telegram's Bot API.
pub const DEFAULT_API_URL: &str = "https://api.telegram.org";
/// How long one `getUpdates` call waits for an update (long polling) by default.
pub const DEFAULT_POLL_TIMEOUT: Duration = Duration::from_secs(30);
/// The pause between polls after a failed one, and between short polls.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The bot token (from `WARDEN_TELEGRAM_TOKEN`), never shown by `Debug`.
pub use super::chat::ChatSecret as TelegramToken;

/// How updates reach the bot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ingress {
    /// `getUpdates` long polling (the default: no open port).
    Polling,
    /// Telegram POSTs each update to `url` (this server's `/webhooks/telegram`) with `secret`
    /// in `X-Telegram-Bot-Api-Secret-Token`.
    Webhook { url: String, secret: ChatSecret },
}

/// An allow-listed Telegram user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelegramUser {
    pub id: i64,
    pub name: String,
    /// `admin`, `operator` or `viewer` (checked).
    pub role: String,
}

/// `[telegram]`, resolved. `token` is `None` when `WARDEN_TELEGRAM_TOKEN` is unset: `warden
/// serve` then refuses to start (other commands do not need it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TelegramConfig {
    pub api_url: String,
    pub token: Option<TelegramToken>,
    pub poll_timeout: Duration,
    pub poll_interval: Duration,
    pub ingress: Ingress,
    /// Whether admins are told of other interfaces' start-up failures.
    pub alerts: bool,
    pub users: Vec<TelegramUser>,
}

impl TelegramConfig {
    /// `None` without a `[telegram]` section: the bot is off.
    pub fn resolve(
        section: Option<&TelegramSection>,
        api_url_override: Option<String>,
        token: Option<String>,
        webhook_secret: Option<String>,
    ) -> anyhow::Result<Option<TelegramConfig>> {
        let Some(section) = section else {
            return Ok(None);
        };
        let api_url = api_url_override
            .or_else(|| section.api_url.clone())
            .unwrap_or_else(|| DEFAULT_API_URL.to_string());
        let api_url = super::chat::api_base_url("telegram.api_url", &api_url)?;
        let poll_timeout = match section.poll_timeout_secs {
            Some(secs) if secs > 50 => {
                bail!("telegram.poll_timeout_secs must be at most 50, got {secs}")
            }
            Some(secs) => Duration::from_secs(secs),
            None => DEFAULT_POLL_TIMEOUT,
        };
        let poll_interval = match section.poll_interval_ms {
            Some(0) => bail!("telegram.poll_interval_ms must be at least 1"),
            Some(ms) if ms > 3_600_000 => {
                bail!("telegram.poll_interval_ms must be at most 3600000, got {ms}")
            }
            Some(ms) => Duration::from_millis(ms),
            None => DEFAULT_POLL_INTERVAL,
        };
        let ingress = match &section.webhook_url {
            None => Ingress::Polling,
            Some(url) => {
                let url = super::chat::api_base_url("telegram.webhook_url", url)?;
                let secret = webhook_secret
                    .as_deref()
                    .and_then(ChatSecret::new)
                    .ok_or_else(|| {
                        anyhow::anyhow!(
                            "telegram.webhook_url needs WARDEN_TELEGRAM_WEBHOOK_SECRET \
                             (1-256 letters, digits, '_' or '-'), which Telegram sends back with every update"
                        )
                    })?;
                let raw = secret.expose();
                if raw.len() > 256
                    || !raw
                        .chars()
                        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-'))
                {
                    bail!("WARDEN_TELEGRAM_WEBHOOK_SECRET must be 1-256 letters, digits, '_' or '-' (Telegram's rule for secret_token)");
                }
                Ingress::Webhook { url, secret }
            }
        };
        if section.users.is_empty() {
            bail!("telegram.users is empty: list who may use the bot ([[telegram.users]] id, name, role)");
        }
        let mut users: Vec<TelegramUser> = Vec::new();
        for entry in &section.users {
            if entry.id <= 0 {
                bail!(
                    "telegram.users: id {} is not a Telegram user id (a positive number)",
                    entry.id
                );
            }
            if users.iter().any(|u| u.id == entry.id) {
                bail!("telegram.users: id {} is listed twice", entry.id);
            }
            let name = super::chat::principal_name(
                "telegram.users",
                &entry.id.to_string(),
                &entry.name,
                &entry.role,
            )?;
            users.push(TelegramUser {
                id: entry.id,
                name,
                role: entry.role.clone(),
            });
        }
        Ok(Some(TelegramConfig {
            api_url,
            token: token.as_deref().and_then(TelegramToken::new),
            poll_timeout,
            poll_interval,
            ingress,
            alerts: section.alerts.unwrap_or(true),
            users,
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    fn resolve(text: &str, token: Option<&str>) -> anyhow::Result<Option<TelegramConfig>> {
        #[derive(Deserialize)]
        struct File {
            telegram: Option<TelegramSection>,
        }
        let file: File = toml::from_str(text)?;
        TelegramConfig::resolve(
            file.telegram.as_ref(),
            None,
            token.map(str::to_string),
            None,
        )
    }

    #[test]
    fn off_unless_configured_and_users_map_to_principals() {
        assert_eq!(resolve("", Some("t")).unwrap(), None);
        let config = resolve(
            "[telegram]\npoll_timeout_secs = 5\n[[telegram.users]]\nid = 123\nname = \"alice\"\nrole = \"operator\"\n",
            Some(" 123:abc "),
        )
        .unwrap()
        .unwrap();
        assert_eq!(config.api_url, DEFAULT_API_URL);
        assert_eq!(config.poll_timeout, Duration::from_secs(5));
        assert_eq!(config.ingress, Ingress::Polling);
        assert_eq!(
            config.token.as_ref().map(TelegramToken::expose),
            Some("123:abc")
        );
        assert_eq!(
            config.users,
            [TelegramUser {
                id: 123,
                name: "alice".into(),
                role: "operator".into()
            }]
        );
        // The token never shows in Debug output.
        assert!(!format!("{config:?}").contains("abc"));
    }

    #[test]
    fn a_webhook_url_needs_a_secret_telegram_accepts() {
        let text = "[telegram]\nwebhook_url = \"https://warden.example/webhooks/telegram\"\n\
                    [[telegram.users]]\nid = 1\nname = \"a\"\nrole = \"admin\"\n";
        let section = |text: &str| -> TelegramSection {
            #[derive(Deserialize)]
            struct File {
                telegram: TelegramSection,
            }
            toml::from_str::<File>(text).unwrap().telegram
        };
        let resolve = |secret: Option<&str>| {
            TelegramConfig::resolve(
                Some(&section(text)),
                None,
                Some("t".into()),
                secret.map(str::to_string),
            )
        };
        let config = resolve(Some("s3cret_-X")).unwrap().unwrap();
        assert_eq!(
            config.ingress,
            Ingress::Webhook {
                url: "https://warden.example/webhooks/telegram".into(),
                secret: ChatSecret::new("s3cret_-X").unwrap()
            }
        );
        assert!(!format!("{config:?}").contains("s3cret"));
        for (secret, expected) in [
            (None, "needs WARDEN_TELEGRAM_WEBHOOK_SECRET"),
            (Some("  "), "needs WARDEN_TELEGRAM_WEBHOOK_SECRET"),
            (Some("has space"), "1-256 letters"),
            (Some(&"x".repeat(257)), "1-256 letters"),
        ] {
            let error = format!("{:#}", resolve(secret).unwrap_err());
            assert!(error.contains(expected), "{secret:?}: {error}");
        }
        let error = TelegramConfig::resolve(
            Some(&section(&text.replace("https://warden.example", "ftp://x"))),
            None,
            Some("t".into()),
            Some("s".into()),
        )
        .unwrap_err();
        assert!(
            format!("{error:#}").contains("telegram.webhook_url"),
            "{error:#}"
        );
    }

    #[test]
    fn bad_values_are_named() {
        for (text, expected) in [
            ("[telegram]\n", "telegram.users is empty"),
            (
                "[telegram]\n[[telegram.users]]\nid = 1\nname = \"a\"\nrole = \"boss\"\n",
                "role \"boss\"",
            ),
            (
                "[telegram]\n[[telegram.users]]\nid = -5\nname = \"a\"\nrole = \"admin\"\n",
                "id -5",
            ),
            (
                "[telegram]\n[[telegram.users]]\nid = 1\nname = \"a\"\nrole = \"admin\"\n[[telegram.users]]\nid = 1\nname = \"b\"\nrole = \"admin\"\n",
                "listed twice",
            ),
            (
                "[telegram]\napi_url = \"ftp://x\"\n[[telegram.users]]\nid = 1\nname = \"a\"\nrole = \"admin\"\n",
                "http(s)",
            ),
            (
                "[telegram]\nusers_typo = 1\n",
                "unknown field",
            ),
        ] {
            let error = format!("{:#}", resolve(text, Some("t")).unwrap_err());
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
