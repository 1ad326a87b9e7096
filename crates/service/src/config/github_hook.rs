//! `[github.webhook]` in `warden.toml`: the GitHub interface `warden serve` runs when it is
//! configured (off otherwise). Deliveries arrive at `POST /webhooks/github`, signed with
//! `WARDEN_GITHUB_WEBHOOK_SECRET` (never read from this file); replies, permission checks and
//! pull requests use `[github]`'s API and token. Who may start a task is GitHub's answer (write
//! access to the repository); who may approve is this file's: GitHub logins mapped to Warden
//! admin principals. A repository is reachable from GitHub only through its `[[publish]]`
//! entry (`owner/name` → the registered repository). Failed checks on Warden's pull requests
//! start fix tasks only in the repositories `fix_failed_checks` names.

use anyhow::bail;
use warden_config::GithubWebhookSection;

pub use super::chat::ChatSecret;

/// The default of `max_event_age_secs`: a day.
pub const DEFAULT_MAX_EVENT_AGE: std::time::Duration = std::time::Duration::from_secs(86_400);
/// The longest `max_event_age_secs` allowed: thirty days.
pub const MAX_MAX_EVENT_AGE_SECS: u64 = 30 * 86_400;

/// `[github.webhook]`, resolved. The secret is `None` when its variable is unset: `warden
/// serve` then refuses to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GithubWebhookConfig {
    /// Lowercase, without `@`.
    pub handle: String,
    pub secret: Option<ChatSecret>,
    /// GitHub login (lowercase) → Warden admin principal name.
    pub approvers: Vec<(String, String)>,
    /// Where failed checks on Warden's pull requests start fix tasks.
    pub fix_failed_checks: Vec<crate::github_client::GithubRepo>,
    /// How old an event may be when it first arrives (its subject's own time: a comment's or
    /// issue's `updated_at`, a review's `submitted_at`, a check's completion).
    pub max_event_age: std::time::Duration,
}

impl GithubWebhookConfig {
    /// `None` without a `[github.webhook]` section: the interface is off.
    pub fn resolve(
        section: Option<&GithubWebhookSection>,
        secret: Option<String>,
    ) -> anyhow::Result<Option<GithubWebhookConfig>> {
        let Some(section) = section else {
            return Ok(None);
        };
        let handle = section.handle.as_deref().unwrap_or("warden").trim();
        let handle = handle.strip_prefix('@').unwrap_or(handle);
        if !valid_login(handle) {
            bail!("github.webhook.handle {handle:?} is not a GitHub login (letters, digits and single hyphens, at most 39)");
        }
        let mut approvers: Vec<(String, String)> = Vec::new();
        for entry in &section.approvers {
            let login = entry.login.trim().to_ascii_lowercase();
            if !valid_login(&login) {
                bail!(
                    "github.webhook.approvers: {:?} is not a GitHub login",
                    entry.login
                );
            }
            if approvers.iter().any(|(l, _)| *l == login) {
                bail!("github.webhook.approvers: {login} is listed twice");
            }
            let name = super::chat::principal_name(
                "github.webhook.approvers",
                &login,
                &entry.name,
                "admin",
            )?;
            approvers.push((login, name));
        }
        let mut fix_failed_checks: Vec<crate::github_client::GithubRepo> = Vec::new();
        for entry in &section.fix_failed_checks {
            let Some(repo) = crate::github_client::GithubRepo::parse(entry) else {
                bail!("github.webhook.fix_failed_checks: {entry:?} is not owner/name");
            };
            if fix_failed_checks.contains(&repo) {
                bail!("github.webhook.fix_failed_checks: {repo} is listed twice");
            }
            fix_failed_checks.push(repo);
        }
        let max_event_age = match section.max_event_age_secs {
            None => DEFAULT_MAX_EVENT_AGE,
            Some(secs) if (1..=MAX_MAX_EVENT_AGE_SECS).contains(&secs) => {
                std::time::Duration::from_secs(secs)
            }
            Some(secs) => bail!(
                "github.webhook.max_event_age_secs {secs} is out of range (1 to {MAX_MAX_EVENT_AGE_SECS})"
            ),
        };
        Ok(Some(GithubWebhookConfig {
            handle: handle.to_ascii_lowercase(),
            secret: secret.as_deref().and_then(ChatSecret::new),
            approvers,
            fix_failed_checks,
            max_event_age,
        }))
    }
}

/// A GitHub login: 1-39 ASCII letters, digits or hyphens, not starting or ending with one
/// (`[bot]` suffixes are apps, never people).
pub fn valid_login(login: &str) -> bool {
    (1..=39).contains(&login.len())
        && !login.starts_with('-')
        && !login.ends_with('-')
        && login.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    fn resolve(text: &str) -> anyhow::Result<Option<GithubWebhookConfig>> {
        #[derive(Deserialize)]
        struct File {
            webhook: Option<GithubWebhookSection>,
        }
        let file: File = toml::from_str(text)?;
        GithubWebhookConfig::resolve(file.webhook.as_ref(), Some("hook-secret".into()))
    }

    #[test]
    fn off_unless_configured_and_nobody_approves_by_default() {
        assert_eq!(resolve("").unwrap(), None);
        let config = resolve("[webhook]\n").unwrap().unwrap();
        assert_eq!(config.handle, "warden");
        assert!(config.approvers.is_empty());
        assert!(config.fix_failed_checks.is_empty());
        assert_eq!(config.max_event_age, DEFAULT_MAX_EVENT_AGE);
        assert!(!format!("{config:?}").contains("hook-secret"));
        let config = resolve("[webhook]\nmax_event_age_secs = 600\n")
            .unwrap()
            .unwrap();
        assert_eq!(config.max_event_age, std::time::Duration::from_secs(600));
        for wrong in ["0", "2592001"] {
            let error = resolve(&format!("[webhook]\nmax_event_age_secs = {wrong}\n"))
                .unwrap_err()
                .to_string();
            assert!(error.contains("max_event_age_secs"), "{error}");
        }
        let config = resolve("[webhook]\nfix_failed_checks = [\"acme/widgets\"]\n")
            .unwrap()
            .unwrap();
        assert_eq!(
            config.fix_failed_checks,
            [crate::github_client::GithubRepo::parse("acme/widgets").unwrap()]
        );
        let config = resolve(
            "[webhook]\nhandle = \"@Acme-Bot\"\n[[webhook.approvers]]\nlogin = \"Octo\"\nname = \"root\"\n",
        )
        .unwrap()
        .unwrap();
        assert_eq!(config.handle, "acme-bot");
        assert_eq!(config.approvers, [("octo".to_string(), "root".to_string())]);
    }

    #[test]
    fn bad_values_are_named() {
        for (text, expected) in [
            ("[webhook]\nhandle = \"a b\"\n", "not a GitHub login"),
            (
                "[webhook]\n[[webhook.approvers]]\nlogin = \"-x\"\nname = \"root\"\n",
                "not a GitHub login",
            ),
            (
                "[webhook]\n[[webhook.approvers]]\nlogin = \"x\"\nname = \"r\"\n[[webhook.approvers]]\nlogin = \"X\"\nname = \"r\"\n",
                "listed twice",
            ),
            (
                "[webhook]\n[[webhook.approvers]]\nlogin = \"x\"\nname = \"a b\"\n",
                "must be 1-100",
            ),
            ("[webhook]\nusers = []\n", "unknown field"),
            (
                "[webhook]\nfix_failed_checks = [\"widgets\"]\n",
                "not owner/name",
            ),
            (
                "[webhook]\nfix_failed_checks = [\"a/b\", \"a/b\"]\n",
                "listed twice",
            ),
        ] {
            let error = format!("{:#}", resolve(text).unwrap_err());
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
