//! `[github]` (with `[github.app]` and `[github.webhook]`) and `[[publish]]`: where approved
//! proposals are published and the GitHub interface of `warden serve`.

use serde::Deserialize;

/// `[github]`: the API publication talks to. The token is never read from this file (nor from
/// a repository): only from `WARDEN_GITHUB_TOKEN` or `GITHUB_TOKEN`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GithubSection {
    /// Default `https://api.github.com`; GitHub Enterprise Server: `https://HOST/api/v3`.
    /// `WARDEN_GITHUB_API_URL` overrides.
    pub api_url: Option<String>,
    /// Open pull requests as drafts.
    pub draft: Option<bool>,
    /// `[github.webhook]`: the GitHub interface of `warden serve` (off without it).
    pub webhook: Option<GithubWebhookSection>,
    /// `[github.app]`: authenticate as a GitHub App installation instead of with a token.
    pub app: Option<GithubAppSection>,
}

/// `[github.app]`: the App's client id and installation; the private key only from
/// `WARDEN_GITHUB_APP_PRIVATE_KEY` (the PEM text) or `WARDEN_GITHUB_APP_PRIVATE_KEY_FILE`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GithubAppSection {
    /// The App's client id (`Iv…`; its numeric App id works too).
    pub client_id: String,
    /// The installation on the account owning the repositories.
    pub installation_id: u64,
}

/// One `[[publish]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PublishEntry {
    /// The repository's name in Warden.
    pub repo: String,
    /// `owner/name` on GitHub.
    pub github: String,
    /// The branch pull requests target; default: the remote's `HEAD`.
    pub base: Option<String>,
}

/// `[github.webhook]` as written.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GithubWebhookSection {
    /// The handle people mention, without `@` (default `warden`).
    pub handle: Option<String>,
    /// Who may approve or reject with `/warden approve sha256:…`, and as which Warden admin.
    /// Nobody when empty: GitHub write access alone never approves.
    #[serde(default)]
    pub approvers: Vec<GithubApproverEntry>,
    /// Repositories (`owner/name`) where a failed `check_run`/`check_suite` on a Warden pull
    /// request starts a fix task (none by default).
    #[serde(default)]
    pub fix_failed_checks: Vec<String>,
    /// How old an event may be when it arrives, in seconds (default a day, at most thirty days):
    /// older ones are refused unless Warden received the same delivery before and has not
    /// handled it yet.
    pub max_event_age_secs: Option<u64>,
}

/// One `[[github.webhook.approvers]]` entry.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GithubApproverEntry {
    /// The GitHub login.
    pub login: String,
    /// The Warden admin principal the login decides as.
    pub name: String,
}
