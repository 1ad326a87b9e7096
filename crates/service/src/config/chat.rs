//! What the chat sections of `warden.toml` (`[telegram]`, `[slack]`) share: a secret read only
//! from the environment and never shown by `Debug`, the check of an API base URL, and the
//! check of the Warden principal (name and role) a chat user is mapped to.

use anyhow::bail;

/// A bot token or signing secret, never shown by `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct ChatSecret(String);

impl ChatSecret {
    /// `None` for an empty secret.
    pub fn new(secret: &str) -> Option<ChatSecret> {
        let secret = secret.trim();
        (!secret.is_empty()).then(|| ChatSecret(secret.to_string()))
    }

    /// The secret itself, for requests, signatures and the redactor.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for ChatSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ChatSecret(…)")
    }
}

/// `url` as an API base URL (`key` names it in errors): http(s) with a host, no credentials
/// or query (secrets come from the environment); returned without a trailing `/`.
pub fn api_base_url(key: &str, url: &str) -> anyhow::Result<String> {
    let parsed = reqwest::Url::parse(url.trim())
        .map_err(|e| anyhow::anyhow!("{key} {url:?} is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "https" | "http") || parsed.host_str().is_none() {
        bail!("{key} {url:?} must be an http(s) URL with a host");
    }
    if !parsed.username().is_empty() || parsed.password().is_some() || parsed.query().is_some() {
        bail!("{key} must hold no credentials or query; secrets come from the environment");
    }
    Ok(url.trim().trim_end_matches('/').to_string())
}

/// The principal name of a chat user (`list` and `who` name the entry in errors), checked:
/// 1-100 letters, digits, `.`, `_`, `-` or `@`; `role` is `admin`, `operator` or `viewer`.
pub fn principal_name(list: &str, who: &str, name: &str, role: &str) -> anyhow::Result<String> {
    let trimmed = name.trim();
    if trimmed.is_empty()
        || trimmed.len() > 100
        || !trimmed
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-' | '@'))
    {
        bail!("{list}: name {name:?} for id {who} must be 1-100 letters, digits, '.', '_', '-' or '@'");
    }
    if !matches!(role, "admin" | "operator" | "viewer") {
        bail!("{list}: role {role:?} for id {who} must be admin, operator or viewer");
    }
    Ok(trimmed.to_string())
}
