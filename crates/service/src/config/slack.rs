//! The `[slack]` section of `warden.toml`: the Slack app `warden serve` runs when it is
//! configured (off otherwise). Events arrive at `POST /webhooks/slack` and button presses at
//! `POST /webhooks/slack/interactions`, both signed with the app's signing secret; replies go
//! out through Slack's Web API with the bot token. Who may use it is a Slack user-id
//! allow-list, each id mapped to a Warden principal (name and role); who may approve is a list
//! of those users. The secrets are never read from this file, only from
//! `WARDEN_SLACK_SIGNING_SECRET` and `WARDEN_SLACK_BOT_TOKEN`.

use anyhow::bail;
use warden_config::SlackSection;

pub use super::chat::ChatSecret;

/// Slack's Web API.
pub const DEFAULT_API_URL: &str = "https://slack.com/api";

/// An allow-listed Slack user.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackUser {
    pub id: String,
    pub name: String,
    /// `admin`, `operator` or `viewer` (checked).
    pub role: String,
}

/// `[slack]`, resolved. A secret is `None` when its variable is unset: `warden serve` then
/// refuses to start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlackConfig {
    pub api_url: String,
    pub signing_secret: Option<ChatSecret>,
    pub bot_token: Option<ChatSecret>,
    pub users: Vec<SlackUser>,
    /// Channel id → default repository.
    pub channels: Vec<(String, String)>,
    /// Slack user ids that may decide approvals.
    pub approvers: Vec<String>,
    /// Slack user groups whose (allow-listed admin) members may decide approvals.
    pub approver_groups: Vec<String>,
    /// Where other interfaces' start-up failures are reported.
    pub alerts_channel: Option<String>,
}

impl SlackConfig {
    /// `None` without a `[slack]` section: the app is off.
    pub fn resolve(
        section: Option<&SlackSection>,
        api_url_override: Option<String>,
        signing_secret: Option<String>,
        bot_token: Option<String>,
    ) -> anyhow::Result<Option<SlackConfig>> {
        let Some(section) = section else {
            return Ok(None);
        };
        let api_url = api_url_override
            .or_else(|| section.api_url.clone())
            .unwrap_or_else(|| DEFAULT_API_URL.to_string());
        let api_url = super::chat::api_base_url("slack.api_url", &api_url)?;
        if section.users.is_empty() {
            bail!(
                "slack.users is empty: list who may use the app ([[slack.users]] id, name, role)"
            );
        }
        let mut users: Vec<SlackUser> = Vec::new();
        for entry in &section.users {
            let id = slack_id("slack.users", &entry.id, &['U', 'W'])?;
            if users.iter().any(|u| u.id == id) {
                bail!("slack.users: id {id} is listed twice");
            }
            let name = super::chat::principal_name("slack.users", &id, &entry.name, &entry.role)?;
            users.push(SlackUser {
                id,
                name,
                role: entry.role.clone(),
            });
        }
        let mut channels: Vec<(String, String)> = Vec::new();
        for entry in &section.channels {
            let id = slack_id("slack.channels", &entry.id, &['C', 'G', 'D'])?;
            if channels.iter().any(|(c, _)| *c == id) {
                bail!("slack.channels: channel {id} is listed twice");
            }
            let repo = entry.repo.trim();
            if repo.is_empty() {
                bail!("slack.channels: channel {id} names no repository");
            }
            channels.push((id, repo.to_string()));
        }
        let approvers = match &section.approvers {
            Some(list) => {
                let mut approvers = Vec::new();
                for approver in list {
                    let approver = approver.trim().to_string();
                    match users.iter().find(|u| u.id == approver) {
                        Some(user) if user.role == "admin" => approvers.push(approver),
                        Some(_) => bail!("slack.approvers: {approver} is not an admin in slack.users (only admins decide approvals)"),
                        None => bail!("slack.approvers: {approver} is not in slack.users"),
                    }
                }
                approvers
            }
            None if !section.approver_groups.is_empty() => Vec::new(),
            None => users
                .iter()
                .filter(|u| u.role == "admin")
                .map(|u| u.id.clone())
                .collect(),
        };
        let mut approver_groups: Vec<String> = Vec::new();
        for group in &section.approver_groups {
            let group = slack_id("slack.approver_groups", group, &['S'])?;
            if !approver_groups.contains(&group) {
                approver_groups.push(group);
            }
        }
        let alerts_channel = section
            .alerts_channel
            .as_deref()
            .map(|id| slack_id("slack.alerts_channel", id, &['C', 'G']))
            .transpose()?;
        Ok(Some(SlackConfig {
            api_url,
            signing_secret: signing_secret.as_deref().and_then(ChatSecret::new),
            bot_token: bot_token.as_deref().and_then(ChatSecret::new),
            users,
            channels,
            approvers,
            approver_groups,
            alerts_channel,
        }))
    }
}

/// A Slack id: upper-case letters and digits starting with one of `first`.
fn slack_id(list: &str, id: &str, first: &[char]) -> anyhow::Result<String> {
    let id = id.trim();
    let well_formed = (2..=32).contains(&id.len())
        && id.starts_with(first)
        && id
            .chars()
            .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit());
    if !well_formed {
        bail!(
            "{list}: {id:?} is not a Slack id (upper-case letters and digits starting with {})",
            first
                .iter()
                .map(char::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        );
    }
    Ok(id.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde::Deserialize;

    fn resolve(text: &str) -> anyhow::Result<Option<SlackConfig>> {
        #[derive(Deserialize)]
        struct File {
            slack: Option<SlackSection>,
        }
        let file: File = toml::from_str(text)?;
        SlackConfig::resolve(
            file.slack.as_ref(),
            None,
            Some("signing-secret".into()),
            Some("xoxb-1".into()),
        )
    }

    const USERS: &str = "[[slack.users]]\nid = \"U1\"\nname = \"alice\"\nrole = \"operator\"\n\
        [[slack.users]]\nid = \"U2\"\nname = \"root\"\nrole = \"admin\"\n";

    #[test]
    fn off_unless_configured_and_admins_approve_by_default() {
        assert_eq!(resolve("").unwrap(), None);
        let config = resolve(&format!(
            "[slack]\n{USERS}[[slack.channels]]\nid = \"C9\"\nrepo = \"app\"\n"
        ))
        .unwrap()
        .unwrap();
        assert_eq!(config.api_url, DEFAULT_API_URL);
        assert_eq!(config.approvers, ["U2"]);
        assert_eq!(config.channels, [("C9".to_string(), "app".to_string())]);
        assert_eq!(config.users[0].name, "alice");
        let shown = format!("{config:?}");
        assert!(
            !shown.contains("signing-secret") && !shown.contains("xoxb"),
            "{shown}"
        );
    }

    #[test]
    fn groups_approve_instead_of_every_admin_and_alerts_go_to_a_channel() {
        let config = resolve(&format!(
            "[slack]\napprover_groups = [\"S0APPROVE\", \"S0APPROVE\"]\nalerts_channel = \"C0OPS\"\n{USERS}"
        ))
        .unwrap()
        .unwrap();
        assert!(config.approvers.is_empty(), "groups replace the default");
        assert_eq!(config.approver_groups, ["S0APPROVE"]);
        assert_eq!(config.alerts_channel.as_deref(), Some("C0OPS"));
        let both = resolve(&format!(
            "[slack]\napprovers = [\"U2\"]\napprover_groups = [\"S1\"]\n{USERS}"
        ))
        .unwrap()
        .unwrap();
        assert_eq!(both.approvers, ["U2"]);
        assert_eq!(both.approver_groups, ["S1"]);
    }

    #[test]
    fn bad_values_are_named() {
        for (text, expected) in [
            ("[slack]\n".to_string(), "slack.users is empty"),
            (
                "[slack]\n[[slack.users]]\nid = \"alice\"\nname = \"a\"\nrole = \"admin\"\n"
                    .to_string(),
                "not a Slack id",
            ),
            (
                format!("[slack]\napprovers = [\"U1\"]\n{USERS}"),
                "U1 is not an admin",
            ),
            (
                format!("[slack]\napprovers = [\"U7\"]\n{USERS}"),
                "U7 is not in slack.users",
            ),
            (
                format!("[slack]\n{USERS}[[slack.channels]]\nid = \"C1\"\nrepo = \" \"\n"),
                "names no repository",
            ),
            (format!("[slack]\nchannel = 1\n{USERS}"), "unknown field"),
            (
                format!("[slack]\napprover_groups = [\"U2\"]\n{USERS}"),
                "slack.approver_groups: \"U2\" is not a Slack id",
            ),
            (
                format!("[slack]\nalerts_channel = \"D1\"\n{USERS}"),
                "slack.alerts_channel: \"D1\" is not a Slack id",
            ),
        ] {
            let error = format!("{:#}", resolve(&text).unwrap_err());
            assert!(error.contains(expected), "{text}: {error}");
        }
    }
}
