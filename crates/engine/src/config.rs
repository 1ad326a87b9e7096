//! The engine's sections of `warden.toml` (read by `warden_config`), resolved with their
//! environment overrides: the model, limits and prices, the sandbox and its storage, kubernetes
//! and egress, MCP servers, maintenance, gates and roles. Invalid values stop start-up with a
//! message naming them. The service resolves its own sections (`warden_service::config`).

use anyhow::{bail, Context};

use std::path::{Path, PathBuf};
use std::time::Duration;
use warden_models::{ModelConfig, Price, PriceTable, Provider};
use warden_runtime::Limits;

use warden_config::{ConfigFile, Env, FileConfig};
use warden_config::{ModelSection, StorageSection};

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

/// The engine's sections, resolved (the service's are `warden_service::config::ServiceConfig`).
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
    /// `[[mcp.servers]]`, resolved: started in every task's sandbox.
    pub mcp_servers: Vec<crate::mcp_config::McpServerConfig>,
    /// `[maintain]`: where `warden maintain` finds versions and advisories, and its policy.
    pub maintain: crate::maintain_config::MaintainConfig,
    /// `[gates]`, resolved.
    pub gates: crate::gates_config::GatesConfig,
    /// `[roles] reviewer`: the reviewer's model; `None`: the task's own.
    pub reviewer_model: Option<Box<ModelConfig>>,
    /// `[roles] max_explorers` and `explorer_max_turns`.
    pub explorers: crate::gates_config::ExplorerSettings,
    /// Secrets of the sections other layers resolve (the GitHub token, webhook and chat
    /// secrets), set by whoever resolves them (`warden_service::config::ServiceConfig`), so
    /// that every redactor built from this configuration hides them too.
    pub other_secrets: crate::redact::Redactor,
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

    /// The engine's sections of `file`, resolved with `env`'s overrides. A command resolves the
    /// service's too (`warden_service::config::load` does both), so a mistake in any section
    /// stops it.
    pub fn resolve(file: &ConfigFile, env: &dyn Env) -> anyhow::Result<Config> {
        let home = file.home.clone();
        let file_path = file.path.clone();
        let file = &file.sections;
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
        let sandbox = sandbox_choice(file, &maintain, &home, env)?;
        let kubernetes = crate::kubernetes_config::resolve(&file.kubernetes, &home, env)?;
        let storage = storage_config(&file.storage)?;
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
            file: file_path,
            home,
            model,
            limits,
            max_output_tokens: section.max_output_tokens.unwrap_or(8192),
            context_tokens,
            prices,
            sandbox,
            kubernetes,
            storage,
            mcp_servers: crate::mcp_config::resolve(&file.mcp)?,
            maintain,
            gates,
            reviewer_model,
            explorers,
            other_secrets: crate::redact::Redactor::default(),
        })
    }
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
    /// The redactor for this configuration's secrets: the model API keys and
    /// [`Config::other_secrets`].
    pub fn redactor(&self) -> crate::redact::Redactor {
        let mut keys: Vec<String> = match &self.model {
            ModelChoice::Remote { primary, fallback } => std::iter::once(primary.api_key.clone())
                .chain(fallback.iter().map(|f| f.api_key.clone()))
                .flatten()
                .collect(),
            ModelChoice::Faux | ModelChoice::Missing => Vec::new(),
        };
        if let Some(reviewer) = &self.reviewer_model {
            keys.extend(reviewer.api_key.clone());
        }
        keys.extend(self.other_secrets.secrets().iter().cloned());
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
        let file = ConfigFile {
            sections: FileConfig::parse(text)?,
            ..ConfigFile::defaults(PathBuf::from("/h"))
        };
        Config::resolve(&file, &env)
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
