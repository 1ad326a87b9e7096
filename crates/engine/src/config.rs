//! Configuration: `warden.toml` (from `--config`, `WARDEN_CONFIG`, or `WARDEN_HOME/warden.toml`)
//! with environment overrides. Unknown keys and invalid values stop start-up with a message naming
//! them. Configuration is never read from a repository or the current directory: a hostile
//! repository cannot change how Warden behaves.

use anyhow::{bail, Context};
use serde::Deserialize;
use std::path::{Path, PathBuf};
use std::time::Duration;
use warden_models::{ModelConfig, Price, PriceTable, Provider};
use warden_runtime::Limits;

pub use crate::env::{Env, ProcessEnv};

/// The file's shape. Every table rejects unknown keys.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    #[serde(default)]
    pub model: ModelSection,
    #[serde(default)]
    pub limits: LimitsSection,
    #[serde(default)]
    pub prices: Vec<PriceEntry>,
    #[serde(default)]
    pub sandbox: SandboxSection,
    /// `[kubernetes]`: the `kubernetes` sandbox backend's cluster, template and warm pool.
    #[serde(default)]
    pub kubernetes: crate::kubernetes_config::KubernetesSection,
    #[serde(default)]
    pub storage: StorageSection,
    /// `[egress]`: what `prepare` reaches through Warden's egress proxy.
    #[serde(default)]
    pub egress: crate::egress::EgressSection,
    #[serde(default)]
    pub serve: crate::serve_config::ServeSection,
    #[serde(default)]
    pub web: crate::serve_config::WebSection,
    #[serde(default)]
    pub callbacks: crate::callback::CallbackSection,
    #[serde(default)]
    pub github: GithubSection,
    /// `[[publish]]`: the GitHub repository (and base branch) a repository publishes to.
    #[serde(default)]
    pub publish: Vec<PublishEntry>,
    /// `[telegram]`: the Telegram bot of `warden serve` (off without it).
    pub telegram: Option<crate::telegram_config::TelegramSection>,
    /// `[slack]`: the Slack app of `warden serve` (off without it).
    pub slack: Option<crate::slack_config::SlackSection>,
    /// `[[mcp.servers]]`: MCP servers whose tools the agent may use, inside its sandbox.
    #[serde(default)]
    pub mcp: crate::mcp_config::McpSection,
    /// `[maintain]`: candidate versions, the advisory database and the upgrade policy.
    #[serde(default)]
    pub maintain: crate::maintain_config::MaintainSection,
    /// `[[schedules]]`: maintenance `warden serve` submits on a cron expression.
    #[serde(default)]
    pub schedules: Vec<crate::schedule_config::ScheduleEntry>,
    /// `[telemetry]`: OpenTelemetry trace export (off without an endpoint).
    #[serde(default)]
    pub telemetry: crate::telemetry_config::TelemetrySection,
    /// `[gates]`: the risk gate's policy per level and the reviewer's.
    #[serde(default)]
    pub gates: crate::gates_config::GatesSection,
    /// `[roles]`: the models of the roles other than the implementer (the reviewer).
    #[serde(default)]
    pub roles: crate::gates_config::RolesSection,
}

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
    pub webhook: Option<crate::github_hook_config::GithubWebhookSection>,
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

/// `[github]` and `[[publish]]`, resolved, with the token from the environment.
#[derive(Debug, Clone)]
pub struct GithubSettings {
    pub api_url: String,
    pub token: Option<crate::github::GithubToken>,
    pub draft: bool,
    pub targets: Vec<PublishTarget>,
    /// First retry delay (`WARDEN_RETRY_BASE_MS`, for tests).
    pub retry_base: Option<Duration>,
    /// `[github.webhook]` with `WARDEN_GITHUB_WEBHOOK_SECRET`; `None`: no webhook.
    pub webhook: Option<crate::github_hook_config::GithubWebhookConfig>,
    /// `[github.app]` with its key: used instead of `token` when present.
    pub app: Option<crate::github::app::AppCredentials>,
}

impl GithubSettings {
    /// How a client authenticates: the App when `[github.app]` is configured, else the token;
    /// `None` without either.
    pub fn auth(&self) -> Option<crate::github::GithubAuth> {
        match (&self.app, &self.token) {
            (Some(app), _) => Some(crate::github::GithubAuth::App(app.clone())),
            (None, Some(token)) => Some(crate::github::GithubAuth::Token(token.clone())),
            (None, None) => None,
        }
    }
}

/// A resolved `[[publish]]` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PublishTarget {
    pub repo: String,
    pub github: crate::github::GithubRepo,
    pub base: Option<String>,
}

/// Where the agent's `shell` commands run.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SandboxSection {
    /// `linux` (default), `gvisor`, or `local` (no isolation); `WARDEN_SANDBOX` overrides.
    pub backend: Option<String>,
    /// Layers run without, explicitly (only the cgroup layers may be listed, e.g. on a host
    /// without delegated cgroups); everything else is required.
    #[serde(default)]
    pub disabled_layers: Vec<String>,
    /// The `runsc` binary for the gVisor backend.
    pub runsc: Option<PathBuf>,
    /// Memory limit of one shell command, in MiB.
    pub memory_mib: Option<u64>,
    /// Process limit of one shell command.
    pub pids: Option<u32>,
    /// Writable space of one task's view (upper layer, `/tmp`, `/dev/shm` together), in MiB;
    /// default 1024. Past it, writes fail with `ENOSPC`.
    pub disk_mib: Option<u64>,
    /// Files and directories in that space; default 100000.
    pub disk_inodes: Option<u64>,
    /// Host directories shown read-only in every sandbox at the same path (`~` is the
    /// Warden user's home); their `bin` folders go on `PATH`.
    #[serde(default)]
    pub mounts: Vec<String>,
    /// Toolchain presets: `rust`, `node`, `python`, `go` (see `crate::toolchain`).
    #[serde(default)]
    pub toolchains: Vec<String>,
    /// Commands run before a change task's agent with the repository's cache writable.
    #[serde(default)]
    pub prepare: Vec<String>,
    /// The older name of `[egress] upstream`: an HTTP proxy (`host:port`) that Warden's egress
    /// proxy chains to.
    pub prepare_proxy: Option<String>,
    /// Warm checks (default true): a toolchain's build outputs (`target/` for `rust`), built
    /// once from the base tree by the first check and kept per key, are layered under every
    /// later check view copy-on-write, so a check after an edit builds incrementally.
    pub warm_checks: Option<bool>,
    /// The only directories a registered repository's own mounts (`repos add --mount`) may
    /// lie under; empty (the default): repositories cannot add mounts.
    #[serde(default)]
    pub repo_mount_roots: Vec<String>,
}

/// `[storage]`: how large snapshots may be and how much mirrors, snapshots and dependency
/// caches may take.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StorageSection {
    /// Largest snapshot (file contents), in MiB; default 1024. Larger: `quota_exceeded`.
    pub snapshot_max_mib: Option<u64>,
    /// Most files and directories in one snapshot; default 100000.
    pub snapshot_max_files: Option<u64>,
    /// Mirrors and snapshots together, in bytes; default 20 GiB. `warden serve` evicts unused
    /// ones past it (periodically and before writing a snapshot); `warden gc` on demand.
    pub max_bytes: Option<u64>,
    /// Anything used within this many minutes is never evicted; default 60.
    pub keep_recent_mins: Option<u64>,
}

/// `[storage]`, resolved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StorageConfig {
    pub snapshot: warden_repo::SnapshotLimits,
    pub cache: warden_repo::CachePolicy,
}

impl StorageConfig {
    /// The repository store under `home` with these limits and automatic eviction.
    pub fn open_repos(
        &self,
        home: &Path,
    ) -> Result<warden_repo::RepoStore, warden_repo::RepoError> {
        Ok(warden_repo::RepoStore::open(home)?
            .with_snapshot_limits(self.snapshot)
            .with_cache_policy(self.cache))
    }
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSection {
    /// `provider:model` or `faux`; `WARDEN_MODEL` overrides.
    pub name: Option<String>,
    /// A second `provider:model` tried once when the first fails for good.
    pub fallback: Option<String>,
    pub stream: Option<bool>,
    /// Send `stream_options.include_usage` (OpenAI-compatible servers that reject it: false).
    pub stream_usage: Option<bool>,
    /// `max_completion_tokens` (OpenAI) or `max_tokens` (many compatible servers).
    pub max_tokens_field: Option<String>,
    /// Send the system prompt with the `developer` role (OpenAI reasoning models).
    pub developer_role: Option<bool>,
    pub max_output_tokens: Option<u32>,
    pub request_timeout_secs: Option<u64>,
    pub max_attempts: Option<u32>,
    /// OpenAI-compatible: send `prompt_cache_key` (default true).
    pub prompt_cache_key: Option<bool>,
    /// OpenAI: `prompt_cache_retention`, for the models that take it (default: not sent).
    pub prompt_cache_retention: Option<String>,
    /// Anthropic: how long the tools and system prompt stay cached, `5m` or `1h` (default).
    pub cache_ttl: Option<String>,
    /// The model's context window in tokens: a conversation reaching 80 % of it is compacted
    /// (default: the published window of a known model; none for others).
    pub context_tokens: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsSection {
    pub max_turns: Option<u32>,
    pub max_tokens: Option<u64>,
    pub max_cost_usd: Option<f64>,
    pub max_wall_secs: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PriceEntry {
    pub provider: String,
    /// A model name or prefix; the longest matching prefix wins.
    pub model: String,
    pub input: f64,
    #[serde(default)]
    pub cached_input: Option<f64>,
    #[serde(default)]
    pub cache_write: Option<f64>,
    /// Per million prompt tokens written to the cache for an hour; default twice `input`.
    #[serde(default)]
    pub cache_write_1h: Option<f64>,
    pub output: f64,
}

/// Everything a command needs, resolved.
#[derive(Debug)]
pub struct Config {
    pub home: PathBuf,
    /// The configuration file: the one read, or where one would be read (`WARDEN_HOME/warden.toml`
    /// when none exists), so a message can say which file to edit.
    pub file: PathBuf,
    pub model: ModelChoice,
    pub limits: Limits,
    pub max_output_tokens: u32,
    /// `[model] context_tokens`, or the known window of the primary model: where compaction
    /// starts (see the runtime's `COMPACT_AT_PERCENT`). `None`: never.
    pub context_tokens: Option<u64>,
    pub prices: PriceTable,
    pub sandbox: SandboxChoice,
    /// `[kubernetes]`, resolved (defaults when absent): the `kubernetes` backend's settings and
    /// what `warden k8s render` prints.
    pub kubernetes: warden_kubernetes::KubernetesConfig,
    /// `[storage]`: snapshot limits and the cache budget of mirrors, snapshots and dependency
    /// caches.
    pub storage: StorageConfig,
    /// `[serve]`: workers, leases and per-day budgets of `warden serve` / `warden worker`.
    pub serve: crate::serve_config::ServeConfig,
    /// `[callbacks]`: where task callbacks may go and how they are signed.
    pub callbacks: crate::callback::CallbackConfig,
    /// `[github]` and `[[publish]]`: where approved proposals are published.
    pub github: GithubSettings,
    /// `[telegram]` with `WARDEN_TELEGRAM_TOKEN`; `None`: no bot.
    pub telegram: Option<crate::telegram_config::TelegramConfig>,
    /// `[slack]` with `WARDEN_SLACK_SIGNING_SECRET` and `WARDEN_SLACK_BOT_TOKEN`; `None`: no app.
    pub slack: Option<crate::slack_config::SlackConfig>,
    /// `[[mcp.servers]]`, resolved: started in every task's sandbox.
    pub mcp_servers: Vec<crate::mcp_config::McpServerConfig>,
    /// `[maintain]`: where `warden maintain` finds versions and advisories, and its policy.
    pub maintain: crate::maintain_config::MaintainConfig,
    /// `[[schedules]]`, resolved: maintenance `warden serve` submits on its own.
    pub schedules: Vec<crate::schedule_config::Schedule>,
    /// `[telemetry]`, resolved: where traces are exported; `None`: nowhere.
    pub telemetry: Option<crate::telemetry_config::TelemetryConfig>,
    /// `[gates]`, resolved.
    pub gates: crate::gates_config::GatesConfig,
    /// `[roles] reviewer`: the reviewer's model; `None`: the task's own.
    pub reviewer_model: Option<Box<ModelConfig>>,
    /// `[roles] max_explorers` and `explorer_max_turns`.
    pub explorers: crate::gates_config::ExplorerSettings,
}

/// The sandbox backend and its settings. Never chosen by fallback: what is named here is what
/// runs, or the task fails with `sandbox_error`.
#[derive(Debug, Clone)]
pub struct SandboxChoice {
    pub backend: warden_sandbox::Backend,
    pub config: warden_sandbox::SandboxConfig,
    pub limits: warden_sandbox::ResourceLimits,
    /// `[sandbox] mounts`, `toolchains` and `prepare`, resolved.
    pub toolchains: crate::toolchain::Toolchains,
    /// `[sandbox] warm_checks`.
    pub warm_checks: bool,
}

#[derive(Debug)]
pub enum ModelChoice {
    Faux,
    Remote {
        primary: Box<ModelConfig>,
        fallback: Option<Box<ModelConfig>>,
    },
    /// No model configured: fine for commands that need none.
    Missing,
}

/// The smallest `[model] context_tokens` taken: below it no request with Warden's tools fits.
const MIN_CONTEXT_TOKENS: u64 = 1_000;

impl Config {
    /// What `warden k8s render` prints: the manifests of `[kubernetes]`, with the pod's memory
    /// and writable space from `[sandbox]`.
    pub fn kubernetes_manifests(&self) -> String {
        warden_kubernetes::render(
            &self.kubernetes,
            &warden_kubernetes::PodResources {
                memory_bytes: self.sandbox.limits.memory_bytes,
                disk_bytes: self.sandbox.config.disk.bytes,
            },
        )
    }

    pub fn load(explicit: Option<&Path>, env: &dyn Env) -> anyhow::Result<Config> {
        let home = state_directory(env)?;
        let (default_file, path) = config_file(explicit, env, &home);
        let file = match &path {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read configuration {}", path.display()))?;
                parse_file(&text)
                    .with_context(|| format!("invalid configuration {}", path.display()))?
            }
            None => FileConfig::default(),
        };
        let mut config = Config::resolve(home, file, env)?;
        config.file = default_file;
        Ok(config)
    }

    /// The configuration file `load` reads (or would read, when it does not exist): `explicit`,
    /// else `WARDEN_CONFIG`, else `WARDEN_HOME/warden.toml`.
    pub fn file_path(explicit: Option<&Path>, env: &dyn Env) -> anyhow::Result<PathBuf> {
        Ok(config_file(explicit, env, &state_directory(env)?).0)
    }

    fn resolve(home: PathBuf, file: FileConfig, env: &dyn Env) -> anyhow::Result<Config> {
        let section = &file.model;
        let name = env.var("WARDEN_MODEL").or_else(|| section.name.clone());
        let model = match name.as_deref() {
            None => ModelChoice::Missing,
            Some("faux") => ModelChoice::Faux,
            Some(primary) => {
                let primary = remote_model(primary, section, env)
                    .with_context(|| format!("invalid model {primary:?}"))?;
                let fallback = match &section.fallback {
                    Some(name) => Some(Box::new(
                        remote_model(name, section, env)
                            .with_context(|| format!("invalid fallback model {name:?}"))?,
                    )),
                    None => None,
                };
                ModelChoice::Remote {
                    primary: Box::new(primary),
                    fallback,
                }
            }
        };
        let defaults = Limits::default();
        let limits_section = &file.limits;
        let max_cost_micro_usd = match limits_section.max_cost_usd {
            Some(usd) if !(usd.is_finite() && usd > 0.0) => {
                bail!("limits.max_cost_usd must be a positive number of dollars, got {usd}")
            }
            Some(usd) => Some((usd * 1e6).round() as u64),
            None => None,
        };
        if limits_section.max_turns == Some(0) {
            bail!("limits.max_turns must be at least 1");
        }
        if limits_section.max_tokens == Some(0) {
            bail!("limits.max_tokens must be at least 1");
        }
        let max_wall_ms = match limits_section.max_wall_secs {
            Some(0) => bail!("limits.max_wall_secs must be at least 1"),
            Some(secs) => Some(
                secs.checked_mul(1000)
                    .ok_or_else(|| anyhow::anyhow!("limits.max_wall_secs {secs} is too large"))?,
            ),
            None => defaults.max_wall_ms,
        };
        if section.max_output_tokens == Some(0) {
            bail!("model.max_output_tokens must be at least 1");
        }
        let context_tokens = match section.context_tokens {
            Some(tokens) if tokens < MIN_CONTEXT_TOKENS => bail!(
                "model.context_tokens {tokens}: expected at least {MIN_CONTEXT_TOKENS} (the \
                 model's context window, in tokens)"
            ),
            Some(tokens) => Some(tokens),
            None => match &model {
                ModelChoice::Remote { primary, .. } => {
                    warden_models::known_context_tokens(&primary.model)
                }
                ModelChoice::Faux | ModelChoice::Missing => None,
            },
        };
        let limits = Limits {
            max_turns: limits_section.max_turns.unwrap_or(defaults.max_turns),
            max_tokens: limits_section.max_tokens,
            max_cost_micro_usd,
            max_wall_ms,
        };
        let mut prices = Vec::new();
        for entry in &file.prices {
            for (what, value) in [
                ("input", Some(entry.input)),
                ("output", Some(entry.output)),
                ("cached_input", entry.cached_input),
                ("cache_write", entry.cache_write),
            ] {
                if let Some(value) = value {
                    if !(value.is_finite() && value >= 0.0) {
                        bail!(
                            "prices: {what} for {:?} must be a non-negative number",
                            entry.model
                        );
                    }
                }
            }
            prices.push(Price {
                provider: parse_provider(&entry.provider)?,
                model_prefix: entry.model.clone(),
                input_per_mtok_usd: entry.input,
                cached_input_per_mtok_usd: entry.cached_input.unwrap_or(entry.input),
                cache_write_per_mtok_usd: entry.cache_write.unwrap_or(entry.input),
                cache_write_1h_per_mtok_usd: entry.cache_write_1h,
                output_per_mtok_usd: entry.output,
            });
        }
        let mut table = PriceTable::builtin();
        for price in prices {
            table.insert(price);
        }
        let prices = table;
        let maintain = crate::maintain_config::MaintainConfig::resolve(&file.maintain)?;
        let sandbox = sandbox_choice(&file, &maintain, &home, env)?;
        let kubernetes = crate::kubernetes_config::resolve(&file.kubernetes, &home, env)?;
        let storage = storage_config(&file.storage)?;
        let serve = crate::serve_config::ServeConfig {
            web: crate::serve_config::WebConfig::resolve(&file.web)?,
            ..crate::serve_config::ServeConfig::resolve(&file.serve)?
        };
        let callbacks = crate::callback::CallbackConfig::resolve(
            &file.callbacks,
            env.var("WARDEN_CALLBACK_SECRET"),
        )?;
        let github = github_settings(&file, env)?;
        let telegram = crate::telegram_config::TelegramConfig::resolve(
            file.telegram.as_ref(),
            env.var("WARDEN_TELEGRAM_API_URL"),
            env.var("WARDEN_TELEGRAM_TOKEN"),
            env.var("WARDEN_TELEGRAM_WEBHOOK_SECRET"),
        )?;
        let slack = crate::slack_config::SlackConfig::resolve(
            file.slack.as_ref(),
            env.var("WARDEN_SLACK_API_URL"),
            env.var("WARDEN_SLACK_SIGNING_SECRET"),
            env.var("WARDEN_SLACK_BOT_TOKEN"),
        )?;
        let schedules = crate::schedule_config::resolve(&file.schedules)?;
        if let Some(index) = schedules.iter().position(|s| {
            s.action == crate::schedule_config::ScheduleAction::AdvisoriesUpdate
                && maintain.advisory_db.is_none()
                && maintain.osv_db.is_none()
        }) {
            bail!(
                "schedules[{index}] (advisories_update): there is no advisory database to \
                 update; set [maintain] advisory_db and/or osv_db"
            );
        }
        let telemetry = crate::telemetry_config::TelemetryConfig::resolve(&file.telemetry, env)?;
        let gates = crate::gates_config::GatesConfig::resolve(&file.gates)?;
        let explorers = crate::gates_config::ExplorerSettings::resolve(&file.roles)?;
        let reviewer_model = match &file.roles.reviewer {
            None => None,
            Some(name) => Some(Box::new(
                remote_model(name, section, env)
                    .with_context(|| format!("invalid roles.reviewer {name:?}"))?,
            )),
        };
        Ok(Config {
            file: home.join("warden.toml"),
            home,
            model,
            limits,
            max_output_tokens: section.max_output_tokens.unwrap_or(8192),
            context_tokens,
            prices,
            sandbox,
            kubernetes,
            storage,
            serve,
            callbacks,
            github,
            telegram,
            slack,
            mcp_servers: crate::mcp_config::resolve(&file.mcp)?,
            maintain,
            schedules,
            telemetry,
            gates,
            reviewer_model,
            explorers,
        })
    }
}

/// `WARDEN_HOME`, else `~/.local/share/warden`.
fn state_directory(env: &dyn Env) -> anyhow::Result<PathBuf> {
    match env.var("WARDEN_HOME") {
        Some(home) => Ok(PathBuf::from(home)),
        None => match env.var("HOME") {
            Some(user_home) => Ok(Path::new(&user_home).join(".local/share/warden")),
            None => bail!("cannot find a state directory: set WARDEN_HOME"),
        },
    }
}

/// The configuration file named or defaulted, and the one to read (`None`: the default does
/// not exist, so every default applies).
fn config_file(explicit: Option<&Path>, env: &dyn Env, home: &Path) -> (PathBuf, Option<PathBuf>) {
    let named = explicit
        .map(Path::to_path_buf)
        .or_else(|| env.var("WARDEN_CONFIG").map(PathBuf::from));
    match named {
        Some(path) => (path.clone(), Some(path)),
        None => {
            let default = home.join("warden.toml");
            let read = default.exists().then(|| default.clone());
            (default, read)
        }
    }
}

fn github_settings(file: &FileConfig, env: &dyn Env) -> anyhow::Result<GithubSettings> {
    let api_url = env
        .var("WARDEN_GITHUB_API_URL")
        .or_else(|| file.github.api_url.clone())
        .unwrap_or_else(|| crate::github::DEFAULT_API_URL.to_string());
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
        let github = crate::github::GithubRepo::parse(&entry.github).ok_or_else(|| {
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
        .and_then(crate::github::GithubToken::new);
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
        webhook: crate::github_hook_config::GithubWebhookConfig::resolve(
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
) -> anyhow::Result<Option<crate::github::app::AppCredentials>> {
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
    let key = crate::github::app::AppKey::from_pem(&pem)
        .map_err(|e| anyhow::anyhow!("the GitHub App private key: {e}"))?;
    Ok(Some(crate::github::app::AppCredentials {
        client_id: client_id.to_string(),
        installation_id: section.installation_id,
        key: std::sync::Arc::new(key),
    }))
}

impl ModelChoice {
    /// What a remote model lacks to be usable, as one sentence naming the variable to set: an
    /// official endpoint (OpenAI, Anthropic) without its API key. A compatible server at
    /// another address (Ollama, llama.cpp, vLLM) may need no key.
    pub fn missing_key(&self) -> Option<String> {
        let ModelChoice::Remote { primary, fallback } = self else {
            return None;
        };
        std::iter::once(primary.as_ref())
            .chain(fallback.as_deref())
            .find(|model| model.api_key.is_none() && model.base_url == official_base_url(model))
            .map(|model| {
                let variable = key_variable(model.provider);
                let base = base_url_variable(model.provider);
                format!(
                    "{variable} is not set for model {}: export {variable}=… (or point {base} at \
                     a compatible server that needs no key, or use WARDEN_MODEL=faux)",
                    model.model
                )
            })
    }
}

/// The environment variable that sets `provider`'s endpoint.
pub fn base_url_variable(provider: Provider) -> &'static str {
    match provider {
        Provider::OpenAi => "OPENAI_BASE_URL",
        Provider::Anthropic => "ANTHROPIC_BASE_URL",
    }
}

/// The environment variable that holds `provider`'s API key.
pub fn key_variable(provider: Provider) -> &'static str {
    match provider {
        Provider::OpenAi => "OPENAI_API_KEY",
        Provider::Anthropic => "ANTHROPIC_API_KEY",
    }
}

/// The provider's own endpoint for `model`.
pub fn official_base_url(model: &ModelConfig) -> String {
    match model.provider {
        Provider::OpenAi => ModelConfig::openai(&model.model).base_url,
        Provider::Anthropic => ModelConfig::anthropic(&model.model).base_url,
    }
}

/// The result notice for a model the configuration has no price for (its cost is unknown).
/// Model calls before a never-read prompt cache is worth a notice.
const CACHE_NOTICE_CALLS: u64 = 3;
/// Prompt tokens per call above which a provider caches (1,024 at OpenAI and Anthropic), with
/// room for the tools and instructions alone.
const CACHE_NOTICE_PROMPT: u64 = 2_048;

/// A notice when a run sent long prompts again and again and never read any from the
/// provider's prompt cache: each call paid the full input price for a prefix it had sent
/// before.
pub fn cache_notice(usage: &warden_protocol::Usage) -> Option<String> {
    let calls = usage
        .model_calls
        .saturating_sub(usage.responses_without_usage);
    if calls < CACHE_NOTICE_CALLS
        || usage.input_tokens / calls.max(1) < CACHE_NOTICE_PROMPT
        || usage.cached_input_tokens > 0
    {
        return None;
    }
    Some(format!(
        "prompt cache never read: {calls} model calls sent {} prompt tokens each on average, \
         every one at the full input price; check that the model and its endpoint cache prompts \
         ([model] prompt_cache_key, cache_ttl in docs/configuration.md)",
        usage.input_tokens / calls
    ))
}

pub fn unpriced_notice(model: &str) -> String {
    format!(
        "cost unknown: no price for {model}; add it under [[prices]] in Warden's configuration \
         (warden.toml in WARDEN_HOME, or the file --config/WARDEN_CONFIG names)"
    )
}

impl Config {
    /// Everything `warden serve` needs from the environment for the interfaces this
    /// configuration turns on and does not have, one sentence each: it refuses to start with
    /// all of them (exit 2) before it listens, and `warden doctor` shows the same list.
    pub fn serve_problems(&self) -> Vec<String> {
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

    /// The redactor for this configuration's secrets (model API keys).
    pub fn redactor(&self) -> crate::redact::Redactor {
        let keys = match &self.model {
            ModelChoice::Remote { primary, fallback } => std::iter::once(primary.api_key.clone())
                .chain(fallback.iter().map(|f| f.api_key.clone()))
                .flatten()
                .collect(),
            ModelChoice::Faux | ModelChoice::Missing => Vec::new(),
        };
        let mut keys: Vec<String> = keys;
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
            if let crate::telegram_config::Ingress::Webhook { secret, .. } = &telegram.ingress {
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
        crate::redact::Redactor::new(keys)
    }
}

fn sandbox_choice(
    file: &FileConfig,
    maintain: &crate::maintain_config::MaintainConfig,
    home: &Path,
    env: &dyn Env,
) -> anyhow::Result<SandboxChoice> {
    let section = &file.sandbox;
    let name = env
        .var("WARDEN_SANDBOX")
        .or_else(|| section.backend.clone())
        .unwrap_or_else(|| "linux".into());
    let backend = match warden_sandbox::Backend::from_name(&name) {
        Some(backend) => backend,
        None => {
            bail!("unknown sandbox backend {name:?}: expected linux, gvisor, kubernetes or local")
        }
    };
    let mut disabled_layers = Vec::new();
    for layer in &section.disabled_layers {
        let parsed = warden_sandbox::Layer::from_name(layer)
            .ok_or_else(|| anyhow::anyhow!("sandbox.disabled_layers: unknown layer {layer:?}"))?;
        if !parsed.may_be_disabled() {
            bail!("sandbox.disabled_layers: {layer:?} cannot be disabled; only cgroup layers can");
        }
        disabled_layers.push(parsed);
    }
    let mut limits = warden_sandbox::ResourceLimits::default();
    if let Some(mib) = section.memory_mib {
        if mib == 0 {
            bail!("sandbox.memory_mib must be at least 1");
        }
        limits.memory_bytes = mib
            .checked_mul(1024 * 1024)
            .ok_or_else(|| anyhow::anyhow!("sandbox.memory_mib {mib} is too large"))?;
    }
    if let Some(pids) = section.pids {
        if pids == 0 {
            bail!("sandbox.pids must be at least 1");
        }
        limits.pids = pids;
    }
    let mut disk = warden_sandbox::DiskQuota::default();
    if let Some(mib) = section.disk_mib {
        disk.bytes = mebibytes("sandbox.disk_mib", mib)?;
    }
    if let Some(inodes) = section.disk_inodes {
        if inodes < 16 {
            bail!("sandbox.disk_inodes must be at least 16");
        }
        disk.inodes = inodes;
    }
    Ok(SandboxChoice {
        backend,
        config: warden_sandbox::SandboxConfig {
            disabled_layers,
            runsc: section.runsc.clone(),
            disk,
        },
        limits,
        warm_checks: section.warm_checks.unwrap_or(true),
        toolchains: crate::toolchain::Toolchains::resolve(
            &section.toolchains,
            &section.mounts,
            &section.prepare,
            home,
            env,
        )?
        .with_repo_mount_roots(&section.repo_mount_roots, home, env)?
        .with_egress(
            &file.egress,
            section.prepare_proxy.as_deref(),
            &[
                (crate::toolchain::Preset::Rust, maintain.index.as_str()),
                (crate::toolchain::Preset::Go, maintain.goproxy.as_str()),
                (
                    crate::toolchain::Preset::Node,
                    maintain.npm_registry.as_str(),
                ),
            ],
        )?,
    })
}

/// A positive number of MiB in bytes.
fn mebibytes(key: &str, mib: u64) -> anyhow::Result<u64> {
    if mib == 0 {
        bail!("{key} must be at least 1");
    }
    mib.checked_mul(1024 * 1024)
        .ok_or_else(|| anyhow::anyhow!("{key} {mib} is too large"))
}

fn storage_config(section: &StorageSection) -> anyhow::Result<StorageConfig> {
    let mut snapshot = warden_repo::SnapshotLimits::default();
    if let Some(mib) = section.snapshot_max_mib {
        snapshot.max_bytes = mebibytes("storage.snapshot_max_mib", mib)?;
    }
    if let Some(files) = section.snapshot_max_files {
        if files == 0 {
            bail!("storage.snapshot_max_files must be at least 1");
        }
        snapshot.max_files = files;
    }
    let max_bytes = section.max_bytes.unwrap_or(20 << 30);
    let keep_recent = Duration::from_secs(
        section
            .keep_recent_mins
            .unwrap_or(60)
            .checked_mul(60)
            .ok_or_else(|| anyhow::anyhow!("storage.keep_recent_mins is too large"))?,
    );
    Ok(StorageConfig {
        snapshot,
        cache: warden_repo::CachePolicy {
            max_bytes,
            keep_recent,
        },
    })
}

pub fn parse_file(text: &str) -> anyhow::Result<FileConfig> {
    toml::from_str(text).map_err(|e| anyhow::anyhow!("{}", e.to_string().trim_end()))
}

fn parse_provider(name: &str) -> anyhow::Result<Provider> {
    match name {
        "openai" => Ok(Provider::OpenAi),
        "anthropic" => Ok(Provider::Anthropic),
        other => bail!("unknown provider {other:?}: expected \"openai\" or \"anthropic\""),
    }
}

fn remote_model(name: &str, section: &ModelSection, env: &dyn Env) -> anyhow::Result<ModelConfig> {
    let Some((provider, model)) = name.split_once(':') else {
        bail!("expected provider:model, e.g. openai:gpt-5.1, anthropic:claude-sonnet-4-5, or faux");
    };
    if model.is_empty() {
        bail!("the model name after {provider:?} is empty");
    }
    let provider = parse_provider(provider)?;
    let mut config = match provider {
        Provider::OpenAi => {
            let mut config = ModelConfig::openai(model);
            if let Some(base) = env.var("OPENAI_BASE_URL") {
                config.base_url = base;
            }
            config.api_key = env.var("OPENAI_API_KEY");
            config
        }
        Provider::Anthropic => {
            let mut config = ModelConfig::anthropic(model);
            if let Some(base) = env.var("ANTHROPIC_BASE_URL") {
                config.base_url = base;
            }
            config.api_key = env.var("ANTHROPIC_API_KEY");
            config
        }
    };
    if !(config.base_url.starts_with("http://") || config.base_url.starts_with("https://")) {
        bail!(
            "base URL {:?} must start with http:// or https://",
            config.base_url
        );
    }
    if let Some(stream) = section.stream {
        config.stream = stream;
    }
    if let Some(stream_usage) = section.stream_usage {
        config.stream_usage = stream_usage;
    }
    if let Some(field) = &section.max_tokens_field {
        config.max_tokens_field = match field.as_str() {
            "max_completion_tokens" => warden_models::MaxTokensField::MaxCompletionTokens,
            "max_tokens" => warden_models::MaxTokensField::MaxTokens,
            other => bail!(
                "model.max_tokens_field {other:?}: expected \"max_completion_tokens\" or \"max_tokens\""
            ),
        };
    }
    if section.developer_role == Some(true) {
        config.system_role = warden_models::SystemRole::Developer;
    }
    if let Some(send) = section.prompt_cache_key {
        config.prompt_cache_key = send;
    }
    if let Some(retention) = &section.prompt_cache_retention {
        let retention = retention.trim();
        if retention.is_empty()
            || retention.len() > 16
            || !retention
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
        {
            bail!(
                "model.prompt_cache_retention {retention:?}: expected a value the provider \
                 documents, such as \"24h\" or \"in_memory\""
            );
        }
        config.prompt_cache_retention = Some(retention.to_string());
    }
    if let Some(ttl) = &section.cache_ttl {
        config.cache_ttl = match ttl.as_str() {
            "5m" => warden_models::CacheTtl::FiveMinutes,
            "1h" => warden_models::CacheTtl::OneHour,
            other => bail!("model.cache_ttl {other:?}: expected \"5m\" or \"1h\""),
        };
    }
    if let Some(secs) = section.request_timeout_secs {
        config.request_timeout = Duration::from_secs(secs);
    }
    if let Some(attempts) = section.max_attempts {
        if attempts == 0 {
            bail!("model.max_attempts must be at least 1");
        }
        config.retry.max_attempts = attempts;
    }
    // The first retry's delay in milliseconds: tests shorten it, slow servers lengthen it.
    if let Some(text) = env.var("WARDEN_RETRY_BASE_MS") {
        let ms: u64 = text.parse().map_err(|_| {
            anyhow::anyhow!("WARDEN_RETRY_BASE_MS must be a number of milliseconds, got {text:?}")
        })?;
        config.retry.base_delay = Duration::from_millis(ms);
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    struct MapEnv(HashMap<&'static str, &'static str>);
    impl Env for MapEnv {
        fn var(&self, name: &str) -> Option<String> {
            self.0.get(name).map(|v| v.to_string())
        }
    }

    fn load(text: &str, env: &[(&'static str, &'static str)]) -> anyhow::Result<Config> {
        let env = MapEnv(env.iter().copied().collect());
        Config::resolve(PathBuf::from("/h"), parse_file(text)?, &env)
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
        let credentials = config.github.app.as_ref().unwrap();
        assert_eq!(
            (credentials.client_id.as_str(), credentials.installation_id),
            ("Iv1abc", 42)
        );
        assert!(matches!(
            config.github.auth(),
            Some(crate::github::GithubAuth::App(_))
        ));
        assert_eq!(
            config.redactor().text("x hook-secret-123 y"),
            "x [redacted] y"
        );
        assert!(!format!("{:?}", config.github).contains("PRIVATE"));
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
    fn unknown_keys_are_named() {
        let error = load("[model]\nnmae = \"faux\"\n", &[]).unwrap_err();
        assert!(format!("{error:#}").contains("nmae"), "{error:#}");
        let error = load("[limitz]\n", &[]).unwrap_err();
        assert!(format!("{error:#}").contains("limitz"), "{error:#}");
    }

    #[test]
    fn invalid_values_are_refused() {
        assert!(load("[limits]\nmax_cost_usd = -1.0\n", &[]).is_err());
        assert!(load("[limits]\nmax_turns = 0\n", &[]).is_err());
        assert!(load("[model]\nname = \"gpt\"\n", &[]).is_err());
        assert!(load("[model]\nname = \"cohere:x\"\n", &[]).is_err());
        assert!(load("", &[("WARDEN_MODEL", "openai:")]).is_err());
        assert!(load(
            "",
            &[("WARDEN_MODEL", "openai:x"), ("OPENAI_BASE_URL", "ftp://x")]
        )
        .is_err());
        assert!(load(
            "[model]\nmax_tokens_field = \"tokens\"\nname = \"openai:x\"\n",
            &[]
        )
        .is_err());
    }

    #[test]
    fn environment_overrides_the_file() {
        let config = load(
            "[model]\nname = \"anthropic:claude\"\n",
            &[
                ("WARDEN_MODEL", "openai:gpt-x"),
                ("OPENAI_BASE_URL", "http://127.0.0.1:1/v1"),
                ("OPENAI_API_KEY", "k"),
            ],
        )
        .unwrap();
        match config.model {
            ModelChoice::Remote { primary, fallback } => {
                assert_eq!(primary.model, "gpt-x");
                assert_eq!(primary.base_url, "http://127.0.0.1:1/v1");
                assert_eq!(primary.api_key.as_deref(), Some("k"));
                assert!(fallback.is_none());
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            load("", &[("WARDEN_MODEL", "faux")]).unwrap().model,
            ModelChoice::Faux
        ));
        assert!(matches!(load("", &[]).unwrap().model, ModelChoice::Missing));
    }

    #[test]
    fn sandbox_backend_is_explicit_and_validated() {
        let config = load("", &[]).unwrap();
        assert_eq!(config.sandbox.backend, warden_sandbox::Backend::Linux);
        let config = load(
            "[sandbox]\nbackend = \"gvisor\"\n",
            &[("WARDEN_SANDBOX", "local")],
        )
        .unwrap();
        assert_eq!(config.sandbox.backend, warden_sandbox::Backend::Local);
        assert!(load("[sandbox]\nbackend = \"docker\"\n", &[]).is_err());
        assert!(load("[sandbox]\ndisabled_layers = [\"seccomp\"]\n", &[]).is_err());
        assert!(load("[sandbox]\ndisabled_layers = [\"nonsense\"]\n", &[]).is_err());
        assert!(load("[sandbox]\nmemory_mib = 0\n", &[]).is_err());
    }

    #[test]
    fn disk_budgets_are_configurable_and_checked() {
        let config = load("", &[]).unwrap();
        assert_eq!(config.sandbox.config.disk.bytes, 1 << 30);
        assert_eq!(config.sandbox.config.disk.inodes, 100_000);
        assert_eq!(config.storage.snapshot.max_bytes, 1 << 30);
        assert_eq!(config.storage.snapshot.max_files, 100_000);
        assert_eq!(config.storage.cache.max_bytes, 20 << 30);
        assert_eq!(config.storage.cache.keep_recent, Duration::from_secs(3600));
        let config = load(
            "[sandbox]\ndisk_mib = 64\ndisk_inodes = 500\n\
             [storage]\nsnapshot_max_mib = 2\nsnapshot_max_files = 10\nmax_bytes = 3145728\n\
             keep_recent_mins = 0\n",
            &[],
        )
        .unwrap();
        assert_eq!(config.sandbox.config.disk.bytes, 64 << 20);
        assert_eq!(config.sandbox.config.disk.inodes, 500);
        assert_eq!(config.storage.snapshot.max_bytes, 2 << 20);
        assert_eq!(config.storage.snapshot.max_files, 10);
        assert_eq!(config.storage.cache.max_bytes, 3 << 20);
        assert_eq!(config.storage.cache.keep_recent, Duration::ZERO);
        for bad in [
            "[sandbox]\ndisk_mib = 0\n",
            "[sandbox]\ndisk_inodes = 1\n",
            "[sandbox]\ndisk_quota = 1\n",
            "[storage]\nsnapshot_max_mib = 0\n",
            "[storage]\nmax_mib = 1\n",
            "[storage]\nmax_bytes = -1\n",
        ] {
            assert!(load(bad, &[]).is_err(), "{bad}");
        }
    }

    #[test]
    fn limits_convert_to_micro_dollars() {
        let config = load("[limits]\nmax_cost_usd = 1.5\nmax_wall_secs = 60\n", &[]).unwrap();
        assert_eq!(config.limits.max_cost_micro_usd, Some(1_500_000));
        assert_eq!(config.limits.max_wall_ms, Some(60_000));
    }
}
