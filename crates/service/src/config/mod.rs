//! The service's sections of `warden.toml` (read by `warden_config`), resolved with the
//! secrets they take from the environment: `[serve]` and `[web]` (workers, leases, budgets, the
//! API's limits and the console), `[callbacks]`, `[github]` with `[[publish]]` (publication and
//! the GitHub interface), `[telegram]`, `[slack]` and `[[schedules]]`. The engine resolves its
//! own (`warden_engine::config`); [`ServiceConfig::resolve`] adds these sections' secrets to
//! the engine's redaction.

pub mod callback;
pub mod chat;
pub mod github_hook;
pub mod schedule;
pub mod serve;
pub mod slack;
pub mod telegram;

use std::path::Path;
use std::time::Duration;

use anyhow::bail;
use warden_config::{ConfigFile, Env, FileConfig, GithubAppSection};
use warden_engine::config::Config;

/// A configuration file with the engine's sections and the service's resolved: what a
/// command runs with. Its `Debug` shows the file's path, not its text.
pub struct Loaded {
    /// The file read (its sections are where the `warden` binary finds `[telemetry]`).
    pub file: ConfigFile,
    pub engine: Config,
    pub service: ServiceConfig,
}

impl std::fmt::Debug for Loaded {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loaded")
            .field("file", &self.file.path)
            .field("engine", &self.engine)
            .field("service", &self.service)
            .finish()
    }
}

/// Reads the configuration file (see [`ConfigFile::load`]) and resolves both layers' sections:
/// a mistake in any of them stops the command, whichever sections it uses.
pub fn load(explicit: Option<&Path>, env: &dyn Env) -> anyhow::Result<Loaded> {
    resolve(ConfigFile::load(explicit, env)?, env)
}

/// Resolves both layers' sections of `file`.
pub fn resolve(file: ConfigFile, env: &dyn Env) -> anyhow::Result<Loaded> {
    let mut engine = Config::resolve(&file, env)?;
    let service = ServiceConfig::resolve(&file, &mut engine, env)?;
    Ok(Loaded {
        file,
        engine,
        service,
    })
}

/// The service's sections, resolved.
#[derive(Debug)]
pub struct ServiceConfig {
    /// `[serve]` and `[web]`: workers, leases and per-day budgets of `warden serve` /
    /// `warden worker`, the API's limits, the console.
    pub serve: serve::ServeConfig,
    /// `[callbacks]`: where task callbacks may go and how they are signed.
    pub callbacks: callback::CallbackConfig,
    /// `[github]` and `[[publish]]`: where approved proposals are published.
    pub github: GithubSettings,
    /// `[telegram]` with `WARDEN_TELEGRAM_TOKEN`; `None`: no bot.
    pub telegram: Option<telegram::TelegramConfig>,
    /// `[slack]` with `WARDEN_SLACK_SIGNING_SECRET` and `WARDEN_SLACK_BOT_TOKEN`; `None`: no app.
    pub slack: Option<slack::SlackConfig>,
    /// `[[schedules]]`, resolved: maintenance `warden serve` submits on its own.
    pub schedules: Vec<schedule::Schedule>,
}

impl ServiceConfig {
    /// The service's sections of `file`, resolved with `env`'s secrets, which are added to
    /// `engine`'s redaction ([`Config::other_secrets`]). `[[schedules]]` are checked against
    /// `engine`'s `[maintain]`.
    pub fn resolve(
        file: &ConfigFile,
        engine: &mut Config,
        env: &dyn Env,
    ) -> anyhow::Result<ServiceConfig> {
        let sections = &file.sections;
        let serve = serve::ServeConfig {
            web: serve::WebConfig::resolve(&sections.web)?,
            ..serve::ServeConfig::resolve(&sections.serve)?
        };
        let callbacks = callback::CallbackConfig::resolve(
            &sections.callbacks,
            env.var("WARDEN_CALLBACK_SECRET"),
        )?;
        let github = github_settings(sections, env)?;
        let telegram = telegram::TelegramConfig::resolve(
            sections.telegram.as_ref(),
            env.var("WARDEN_TELEGRAM_API_URL"),
            env.var("WARDEN_TELEGRAM_TOKEN"),
            env.var("WARDEN_TELEGRAM_WEBHOOK_SECRET"),
        )?;
        let slack = slack::SlackConfig::resolve(
            sections.slack.as_ref(),
            env.var("WARDEN_SLACK_API_URL"),
            env.var("WARDEN_SLACK_SIGNING_SECRET"),
            env.var("WARDEN_SLACK_BOT_TOKEN"),
        )?;
        let schedules = schedule::resolve(&sections.schedules)?;
        if let Some(index) = schedules.iter().position(|s| {
            s.action == schedule::ScheduleAction::AdvisoriesUpdate
                && engine.maintain.advisory_db.is_none()
                && engine.maintain.osv_db.is_none()
        }) {
            bail!(
                "schedules[{index}] (advisories_update): there is no advisory database to \
                 update; set [maintain] advisory_db and/or osv_db"
            );
        }
        let config = ServiceConfig {
            serve,
            callbacks,
            github,
            telegram,
            slack,
            schedules,
        };
        engine.other_secrets = warden_engine::redact::Redactor::new(config.secrets());
        Ok(config)
    }

    /// The secrets of these sections (the GitHub token, the webhook, Telegram and Slack
    /// secrets, the callbacks' signing key, the GitHub App's private key line by line): every
    /// redactor hides them.
    pub fn secrets(&self) -> Vec<String> {
        let mut keys: Vec<String> = Vec::new();
        if let Some(app) = &self.github.app {
            keys.extend(app.key.secret_text().iter().cloned());
        }
        keys.extend(
            self.callbacks
                .secret
                .iter()
                .map(|s| String::from_utf8_lossy(s.as_bytes()).into_owned()),
        );
        keys.extend(self.github.token.iter().map(|t| t.expose().to_string()));
        keys.extend(
            self.github
                .webhook
                .iter()
                .filter_map(|w| w.secret.as_ref())
                .map(|s| s.expose().to_string()),
        );
        if let Some(telegram) = &self.telegram {
            keys.extend(telegram.token.iter().map(|t| t.expose().to_string()));
            if let telegram::Ingress::Webhook { secret, .. } = &telegram.ingress {
                keys.push(secret.expose().to_string());
            }
        }
        if let Some(slack) = &self.slack {
            keys.extend(
                [&slack.signing_secret, &slack.bot_token]
                    .into_iter()
                    .flatten()
                    .map(|s| s.expose().to_string()),
            );
        }
        keys
    }

    /// Everything `warden serve` needs from the environment for the interfaces this
    /// configuration turns on and does not have, one sentence each: it refuses to start with
    /// all of them (exit 2) before it listens, and `warden doctor` shows the same list.
    pub fn problems(&self) -> Vec<String> {
        let mut problems = Vec::new();
        if let Some(telegram) = &self.telegram {
            if telegram.token.is_none() {
                problems.push(
                    "[telegram] is configured but WARDEN_TELEGRAM_TOKEN is not set (the bot's \
                     token from @BotFather)"
                        .to_string(),
                );
            }
        }
        if let Some(slack) = &self.slack {
            if slack.signing_secret.is_none() {
                problems.push(
                    "[slack] is configured but WARDEN_SLACK_SIGNING_SECRET is not set (the \
                     app's signing secret)"
                        .to_string(),
                );
            }
            if slack.bot_token.is_none() {
                problems.push(
                    "[slack] is configured but WARDEN_SLACK_BOT_TOKEN is not set (the app's bot \
                     token, xoxb-…)"
                        .to_string(),
                );
            }
        }
        if let Some(webhook) = &self.github.webhook {
            if webhook.secret.is_none() {
                problems.push(
                    "[github.webhook] is configured but WARDEN_GITHUB_WEBHOOK_SECRET is not set \
                     (the webhook's secret)"
                        .to_string(),
                );
            }
            if self.github.auth().is_none() {
                problems.push(
                    "[github.webhook] is configured but neither WARDEN_GITHUB_TOKEN (or \
                     GITHUB_TOKEN) nor [github.app] is: its replies need one"
                        .to_string(),
                );
            }
        }
        problems
    }
}

/// `[github]` and `[[publish]]`, resolved, with the token from the environment.
#[derive(Debug, Clone)]
pub struct GithubSettings {
    pub api_url: String,
    pub token: Option<crate::github_client::GithubToken>,
    pub draft: bool,
    pub targets: Vec<PublishTarget>,
    /// First retry delay (`WARDEN_RETRY_BASE_MS`, for tests).
    pub retry_base: Option<Duration>,
    /// `[github.webhook]` with `WARDEN_GITHUB_WEBHOOK_SECRET`; `None`: no webhook.
    pub webhook: Option<github_hook::GithubWebhookConfig>,
    /// `[github.app]` with its key: used instead of `token` when present.
    pub app: Option<crate::github_client::app::AppCredentials>,
}

impl GithubSettings {
    /// How a client authenticates: the App when `[github.app]` is configured, else the token;
    /// `None` without either.
    pub fn auth(&self) -> Option<crate::github_client::GithubAuth> {
        match (&self.app, &self.token) {
            (Some(app), _) => Some(crate::github_client::GithubAuth::App(app.clone())),
            (None, Some(token)) => Some(crate::github_client::GithubAuth::Token(token.clone())),
            (None, None) => None,
        }
    }
}

/// A resolved `[[publish]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishTarget {
    pub repo: String,
    pub github: crate::github_client::GithubRepo,
    pub base: Option<String>,
}

fn github_settings(file: &FileConfig, env: &dyn Env) -> anyhow::Result<GithubSettings> {
    let api_url = env
        .var("WARDEN_GITHUB_API_URL")
        .or_else(|| file.github.api_url.clone())
        .unwrap_or_else(|| crate::github_client::DEFAULT_API_URL.to_string());
    let parsed = reqwest::Url::parse(api_url.trim())
        .map_err(|e| anyhow::anyhow!("github.api_url {api_url:?} is not a URL: {e}"))?;
    if !matches!(parsed.scheme(), "https" | "http") || parsed.host_str().is_none() {
        bail!("github.api_url {api_url:?} must be an http(s) URL with a host");
    }
    if !parsed.username().is_empty() || parsed.password().is_some() {
        bail!("github.api_url must not carry credentials; set WARDEN_GITHUB_TOKEN");
    }
    let mut targets = Vec::new();
    for entry in &file.publish {
        let github = crate::github_client::GithubRepo::parse(&entry.github).ok_or_else(|| {
            anyhow::anyhow!(
                "publish: github {:?} for repo {:?} is not owner/name",
                entry.github,
                entry.repo
            )
        })?;
        if let Some(base) = &entry.base {
            if base.is_empty() || base.starts_with('-') || base.chars().any(char::is_whitespace) {
                bail!(
                    "publish: invalid base branch {base:?} for repo {:?}",
                    entry.repo
                );
            }
        }
        if targets.iter().any(|t: &PublishTarget| t.repo == entry.repo) {
            bail!("publish: repo {:?} is listed twice", entry.repo);
        }
        targets.push(PublishTarget {
            repo: entry.repo.clone(),
            github,
            base: entry.base.clone(),
        });
    }
    let token = env
        .var("WARDEN_GITHUB_TOKEN")
        .or_else(|| env.var("GITHUB_TOKEN"))
        .and_then(crate::github_client::GithubToken::new);
    let retry_base = env
        .var("WARDEN_RETRY_BASE_MS")
        .and_then(|ms| ms.parse::<u64>().ok())
        .map(Duration::from_millis);
    Ok(GithubSettings {
        api_url: api_url.trim().to_string(),
        token,
        draft: file.github.draft.unwrap_or(false),
        targets,
        retry_base,
        webhook: github_hook::GithubWebhookConfig::resolve(
            file.github.webhook.as_ref(),
            env.var("WARDEN_GITHUB_WEBHOOK_SECRET"),
        )?,
        app: github_app(file.github.app.as_ref(), env)?,
    })
}

/// `[github.app]` with its private key from the environment.
fn github_app(
    section: Option<&GithubAppSection>,
    env: &dyn Env,
) -> anyhow::Result<Option<crate::github_client::app::AppCredentials>> {
    let Some(section) = section else {
        return Ok(None);
    };
    let client_id = section.client_id.trim();
    if client_id.is_empty()
        || client_id.len() > 100
        || !client_id.chars().all(|c| c.is_ascii_alphanumeric())
    {
        bail!("github.app.client_id {client_id:?} must be 1-100 letters and digits");
    }
    let pem = match (
        env.var("WARDEN_GITHUB_APP_PRIVATE_KEY"),
        env.var("WARDEN_GITHUB_APP_PRIVATE_KEY_FILE"),
    ) {
        (Some(pem), _) => pem,
        (None, Some(path)) => std::fs::read_to_string(&path).map_err(|e| {
            anyhow::anyhow!("cannot read WARDEN_GITHUB_APP_PRIVATE_KEY_FILE {path:?}: {e}")
        })?,
        (None, None) => bail!(
            "[github.app] is configured but neither WARDEN_GITHUB_APP_PRIVATE_KEY nor WARDEN_GITHUB_APP_PRIVATE_KEY_FILE is set"
        ),
    };
    let key = crate::github_client::app::AppKey::from_pem(&pem)
        .map_err(|e| anyhow::anyhow!("the GitHub App private key: {e}"))?;
    Ok(Some(crate::github_client::app::AppCredentials {
        client_id: client_id.to_string(),
        installation_id: section.installation_id,
        key: std::sync::Arc::new(key),
    }))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::load as load_file;
    use super::*;
    use std::collections::HashMap;

    struct MapEnv(HashMap<&'static str, String>);

    impl Env for MapEnv {
        fn var(&self, name: &str) -> Option<String> {
            self.0.get(name).cloned()
        }
    }

    pub(crate) fn load(toml: &str, env: &[(&'static str, &str)]) -> anyhow::Result<Loaded> {
        let dir = tempfile::tempdir()?;
        let path = dir.path().join("warden.toml");
        std::fs::write(&path, toml)?;
        let mut vars: HashMap<&'static str, String> =
            env.iter().map(|(k, v)| (*k, v.to_string())).collect();
        vars.insert("WARDEN_HOME", dir.path().display().to_string());
        load_file(Some(&path), &MapEnv(vars))
    }

    #[test]
    fn the_callback_key_is_redacted_and_never_shown() {
        let key = "callback-key-from-the-file-0123456789";
        let config = load(
            &format!("[callbacks]\nsecret = \"{key}\"\nallowed_origins = [\"https://hooks.example.com\"]\n"),
            &[],
        )
        .unwrap();
        assert_eq!(
            config.engine.redactor().text(&format!("sent {key} away")),
            "sent [redacted] away"
        );
        assert!(!format!("{config:?}").contains(key));
        assert!(!format!("{:?}", config.file).contains(key));
    }

    #[test]
    fn the_github_webhook_and_app_take_their_secrets_from_the_environment() {
        let key = warden_test_support::github_fake::APP_TEST_KEY_PEM;
        let app = "[github.app]\nclient_id = \"Iv1abc\"\ninstallation_id = 42\n";
        let config = load(
            &format!("{app}[github.webhook]\n"),
            &[
                ("WARDEN_GITHUB_APP_PRIVATE_KEY", key),
                ("WARDEN_GITHUB_WEBHOOK_SECRET", "hook-secret-123"),
            ],
        )
        .unwrap();
        let credentials = config.service.github.app.as_ref().unwrap();
        assert_eq!(
            (credentials.client_id.as_str(), credentials.installation_id),
            ("Iv1abc", 42)
        );
        assert!(matches!(
            config.service.github.auth(),
            Some(crate::github_client::GithubAuth::App(_))
        ));
        assert_eq!(
            config.engine.redactor().text("x hook-secret-123 y"),
            "x [redacted] y"
        );
        assert!(!format!("{:?}", config.service.github).contains("PRIVATE"));
        // Any line of the private key is hidden, not only the whole key.
        let line = key.lines().nth(3).unwrap();
        assert_eq!(
            config
                .engine
                .redactor()
                .text(&format!("leaked {line} here")),
            "leaked [redacted] here"
        );
        assert!(!format!("{config:?}").contains(line));
        for (text, env, expected) in [
            (app.to_string(), vec![], "WARDEN_GITHUB_APP_PRIVATE_KEY"),
            (
                app.to_string(),
                vec![("WARDEN_GITHUB_APP_PRIVATE_KEY", "not a key")],
                "not a PEM",
            ),
            (
                "[github.app]\nclient_id = \"a b\"\ninstallation_id = 1\n".to_string(),
                vec![("WARDEN_GITHUB_APP_PRIVATE_KEY", key)],
                "client_id",
            ),
        ] {
            let error = format!("{:#}", load(&text, &env).unwrap_err());
            assert!(error.contains(expected), "{text}: {error}");
        }
    }

    #[test]
    fn the_token_comes_from_the_environment_only_and_is_redacted() {
        let config = load(
            "",
            &[
                ("GITHUB_TOKEN", "ghp_from_github_token_123"),
                ("WARDEN_GITHUB_API_URL", "http://127.0.0.1:9"),
            ],
        )
        .unwrap();
        assert_eq!(
            config.service.github.token.as_ref().map(|t| t.expose()),
            Some("ghp_from_github_token_123")
        );
        assert_eq!(config.service.github.api_url, "http://127.0.0.1:9");
        assert!(!format!("{config:?}").contains("ghp_from_github_token_123"));
        assert_eq!(
            config
                .engine
                .redactor()
                .text("token ghp_from_github_token_123 here"),
            "token [redacted] here"
        );
        let preferred = load(
            "",
            &[
                ("GITHUB_TOKEN", "ghp_from_github_token_123"),
                ("WARDEN_GITHUB_TOKEN", "ghp_from_warden_token_456"),
            ],
        )
        .unwrap();
        assert_eq!(
            preferred.service.github.token.as_ref().map(|t| t.expose()),
            Some("ghp_from_warden_token_456")
        );
        // Never from the file.
        assert!(load("[github]\ntoken = \"ghp_in_file_123456\"\n", &[]).is_err());
        for bad in [
            "[github]\napi_url = \"ftp://x\"\n",
            "[github]\napi_url = \"https://u:p@api.github.com\"\n",
            "[[publish]]\nrepo = \"a\"\ngithub = \"not-a-pair\"\n",
            "[[publish]]\nrepo = \"a\"\ngithub = \"o/a\"\nbase = \"-x\"\n",
            "[[publish]]\nrepo = \"a\"\ngithub = \"o/a\"\n[[publish]]\nrepo = \"a\"\ngithub = \"o/b\"\n",
        ] {
            assert!(load(bad, &[]).is_err(), "{bad}");
        }
    }
}
